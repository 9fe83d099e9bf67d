/*
 * edgetune: the byte queue between TVM 0.27's RPC endpoint and its channel (written at the tail,
 * read from the head), written for cross-building that runtime from the sources its wheel ships.
 */
#ifndef EDGETUNE_SUPPORT_RING_BUFFER_H_
#define EDGETUNE_SUPPORT_RING_BUFFER_H_

#include <tvm/ffi/error.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace tvm {
namespace support {

/*! \brief A growable FIFO of bytes. */
class RingBuffer {
 public:
  /*! \brief Bytes written and not read yet. */
  size_t bytes_available() const { return tail_ - head_; }
  /*! \brief Make room for n bytes in all without another allocation. */
  void Reserve(size_t n) { Room(n > bytes_available() ? n - bytes_available() : 0); }
  /*! \brief Take size bytes from the head (they must be there). */
  void Read(void* data, size_t size) {
    TVM_FFI_ICHECK_LE(size, bytes_available()) << "RingBuffer: reading more than is available";
    std::memcpy(data, buf_.data() + head_, size);
    Consume(size);
  }
  /*! \brief Append size bytes. */
  void Write(const void* data, size_t size) {
    Room(size);
    std::memcpy(buf_.data() + tail_, data, size);
    tail_ += size;
  }
  /*! \brief Hand up to max_nbytes from the head to frecv(data, size), which returns how many it took. */
  template <typename F>
  size_t ReadWithCallback(F frecv, size_t max_nbytes) {
    size_t n = std::min(max_nbytes, bytes_available());
    if (n == 0) return 0;
    size_t taken = frecv(static_cast<const void*>(buf_.data() + head_), n);
    Consume(taken);
    return taken;
  }
  /*! \brief Let fsend(data, size) fill up to max_nbytes at the tail; it returns how many it wrote. */
  template <typename F>
  size_t WriteWithCallback(F fsend, size_t max_nbytes) {
    Room(max_nbytes);
    size_t n = fsend(static_cast<void*>(buf_.data() + tail_), max_nbytes);
    tail_ += n;
    return n;
  }

 private:
  void Consume(size_t n) {
    head_ += n;
    if (head_ == tail_) head_ = tail_ = 0;
  }
  void Room(size_t n) {
    if (tail_ + n <= buf_.size()) return;
    if (head_ != 0) {
      std::memmove(buf_.data(), buf_.data() + head_, tail_ - head_);
      tail_ -= head_;
      head_ = 0;
    }
    if (tail_ + n > buf_.size()) buf_.resize(std::max(tail_ + n, buf_.size() * 2));
  }
  std::vector<char> buf_;
  size_t head_{0};
  size_t tail_{0};
};

}  // namespace support
}  // namespace tvm

#endif  // EDGETUNE_SUPPORT_RING_BUFFER_H_
