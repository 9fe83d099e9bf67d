/*
 * edgetune: support::Stream over a byte string (BytesInStream reads one, BytesOutStream appends to one),
 * written for cross-building TVM 0.27's runtime from the sources its wheel ships.
 */
#ifndef EDGETUNE_SUPPORT_BYTES_IO_H_
#define EDGETUNE_SUPPORT_BYTES_IO_H_

#include <tvm/support/io.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace tvm {
namespace support {

/*! \brief Reads from a byte buffer it does not own (anything with data() and size()). */
class BytesInStream : public Stream {
 public:
  template <typename Buffer>
  explicit BytesInStream(const Buffer& buffer) : data_(buffer.data()), size_(buffer.size()) {}
  BytesInStream(const char* data, size_t size) : data_(data), size_(size) {}
  using Stream::Read;
  using Stream::Write;
  size_t Read(void* ptr, size_t size) final {
    size_t n = std::min(size, size_ - pos_);
    if (n != 0) std::memcpy(ptr, data_ + pos_, n);
    pos_ += n;
    return n;
  }
  size_t Write(const void*, size_t) final { return 0; }

 private:
  const char* data_;
  size_t size_;
  size_t pos_{0};
};

/*! \brief Appends every write to a std::string. */
class BytesOutStream : public Stream {
 public:
  explicit BytesOutStream(std::string* out) : out_(out) {}
  using Stream::Read;
  using Stream::Write;
  size_t Read(void*, size_t) final { return 0; }
  size_t Write(const void* ptr, size_t size) final {
    out_->append(static_cast<const char*>(ptr), size);
    return size;
  }

 private:
  std::string* out_;
};

}  // namespace support
}  // namespace tvm

#endif  // EDGETUNE_SUPPORT_BYTES_IO_H_
