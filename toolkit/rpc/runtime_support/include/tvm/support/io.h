/*
 * edgetune: the byte-stream interface TVM's runtime sources use (support::Stream), written for
 * cross-building TVM 0.27's runtime from the sources its wheel ships (the wheel leaves this header out).
 */
#ifndef EDGETUNE_TVM_SUPPORT_IO_H_
#define EDGETUNE_TVM_SUPPORT_IO_H_

#include <cstddef>
#include <cstdint>

namespace tvm {
namespace support {
class Stream;
/*! \brief Write(Stream*, const T&) and Read(Stream*, T*) of one type; serializer.h has the common ones. */
template <typename T, typename Enable = void>
struct Serializer;

/*! \brief A binary stream: raw reads and writes, typed ones through Serializer<T>. */
class Stream {
 public:
  virtual ~Stream() = default;
  /*! \brief Read up to size bytes; the number read. */
  virtual size_t Read(void* ptr, size_t size) = 0;
  /*! \brief Write size bytes; the number written. */
  virtual size_t Write(const void* ptr, size_t size) = 0;

  template <typename T>
  void Write(const T& value);
  template <typename T>
  bool Read(T* out);
  template <typename T>
  void WriteArray(const T* data, size_t n) {
    for (size_t i = 0; i < n; ++i) this->Write(data[i]);
  }
  template <typename T>
  bool ReadArray(T* data, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (!this->Read(data + i)) return false;
    }
    return true;
  }
};

}  // namespace support
}  // namespace tvm

#include <tvm/support/serializer.h>

namespace tvm {
namespace support {
template <typename T>
inline void Stream::Write(const T& value) {
  Serializer<T>::Write(this, value);
}
template <typename T>
inline bool Stream::Read(T* out) {
  return Serializer<T>::Read(this, out);
}
}  // namespace support
}  // namespace tvm

#endif  // EDGETUNE_TVM_SUPPORT_IO_H_
