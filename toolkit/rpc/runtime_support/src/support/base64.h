/*
 * edgetune: standard base64 (RFC 4648, '=' padding) as streams over another support::Stream,
 * written for cross-building TVM 0.27's runtime from the sources its wheel ships.
 */
#ifndef EDGETUNE_SUPPORT_BASE64_H_
#define EDGETUNE_SUPPORT_BASE64_H_

#include <tvm/support/io.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tvm {
namespace support {

namespace base64 {
inline const char* Alphabet() { return "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"; }
inline int Value(int c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace base64

/*! \brief Decodes base64 text read from another stream; InitPosition skips leading blanks. */
class Base64InStream : public Stream {
 public:
  explicit Base64InStream(Stream* in) : in_(in) {}
  using Stream::Read;
  using Stream::Write;
  void InitPosition() {
    do {
      next_ = ReadChar();
    } while (next_ != EOF && std::isspace(next_));
    started_ = true;
  }
  size_t Read(void* ptr, size_t size) final {
    if (!started_) InitPosition();
    unsigned char* out = static_cast<unsigned char*>(ptr);
    size_t n = 0;
    while (n < size) {
      if (avail_ == 0 && !Refill()) break;
      out[n++] = static_cast<unsigned char>((bits_ >> (8 * (avail_ - 1))) & 0xFF);
      --avail_;
    }
    return n;
  }
  size_t Write(const void*, size_t) final { return 0; }

 private:
  int ReadChar() {
    unsigned char c;
    return in_->Read(&c, 1) == 1 ? static_cast<int>(c) : EOF;
  }
  int Take() {
    int c = next_;
    if (c != EOF) next_ = ReadChar();
    return c;
  }
  bool Refill() {
    int v[4];
    int valid = 0;
    for (int k = 0; k < 4; ++k) {
      int c = Take();
      if (c == EOF || c == '=' || base64::Value(c) < 0) {
        v[k] = 0;
      } else {
        v[k] = base64::Value(c);
        ++valid;
      }
    }
    if (valid < 2) return false;
    bits_ = (static_cast<uint32_t>(v[0]) << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    avail_ = valid - 1;
    bits_ >>= 8 * (3 - avail_);
    return true;
  }
  Stream* in_;
  int next_{EOF};
  bool started_{false};
  uint32_t bits_{0};
  int avail_{0};
};

/*! \brief Encodes what is written as base64 into another stream; Finish writes the last group. */
class Base64OutStream : public Stream {
 public:
  explicit Base64OutStream(Stream* out) : out_(out) {}
  using Stream::Read;
  using Stream::Write;
  size_t Write(const void* ptr, size_t size) final {
    const unsigned char* in = static_cast<const unsigned char*>(ptr);
    for (size_t i = 0; i < size; ++i) {
      group_[count_++] = in[i];
      if (count_ == 3) Flush();
    }
    return size;
  }
  size_t Read(void*, size_t) final { return 0; }
  void Finish() {
    if (count_ != 0) Flush();
  }

 private:
  void Flush() {
    const char* a = base64::Alphabet();
    uint32_t bits = (static_cast<uint32_t>(group_[0]) << 16) | ((count_ > 1 ? group_[1] : 0) << 8) |
                    (count_ > 2 ? group_[2] : 0);
    char text[4] = {a[(bits >> 18) & 63], a[(bits >> 12) & 63], count_ > 1 ? a[(bits >> 6) & 63] : '=',
                    count_ > 2 ? a[bits & 63] : '='};
    out_->Write(static_cast<const void*>(text), 4);
    count_ = 0;
  }
  Stream* out_;
  unsigned char group_[3] = {0, 0, 0};
  int count_{0};
};

}  // namespace support
}  // namespace tvm

#endif  // EDGETUNE_SUPPORT_BASE64_H_
