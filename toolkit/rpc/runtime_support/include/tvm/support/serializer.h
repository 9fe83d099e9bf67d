/*
 * edgetune: how typed values go through a support::Stream (trivially copyable values as their
 * little-endian bytes; strings, vectors and arrays as a uint64 count then their elements), written for
 * cross-building TVM 0.27's runtime from the sources its wheel ships. Other headers specialise
 * Serializer<T> for their own types.
 */
#ifndef EDGETUNE_TVM_SUPPORT_SERIALIZER_H_
#define EDGETUNE_TVM_SUPPORT_SERIALIZER_H_

#include <tvm/ffi/container/array.h>
#include <tvm/ffi/string.h>
#include <tvm/support/io.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tvm {
namespace support {

template <typename T>
struct Serializer<T, std::enable_if_t<std::is_trivially_copyable<T>::value>> {
  static constexpr bool enabled = true;
  static void Write(Stream* strm, const T& value) { strm->Write(static_cast<const void*>(&value), sizeof(T)); }
  static bool Read(Stream* strm, T* out) { return strm->Read(static_cast<void*>(out), sizeof(T)) == sizeof(T); }
};

/*! \brief Classes that save and load themselves (``void Save(Stream*) const``, ``bool Load(Stream*)``). */
template <typename T>
struct Serializer<T, std::enable_if_t<!std::is_trivially_copyable<T>::value &&
                                      std::is_same<decltype(std::declval<T&>().Load(std::declval<Stream*>())),
                                                   bool>::value>> {
  static constexpr bool enabled = true;
  static void Write(Stream* strm, const T& value) { value.Save(strm); }
  static bool Read(Stream* strm, T* out) { return out->Load(strm); }
};

namespace detail {
inline void WriteCount(Stream* strm, size_t n) {
  uint64_t count = n;
  strm->Write(static_cast<const void*>(&count), sizeof(count));
}
inline bool ReadCount(Stream* strm, uint64_t* n) {
  return strm->Read(static_cast<void*>(n), sizeof(*n)) == sizeof(*n);
}
}  // namespace detail

template <>
struct Serializer<std::string, void> {
  static constexpr bool enabled = true;
  static void Write(Stream* strm, const std::string& value) {
    detail::WriteCount(strm, value.size());
    if (!value.empty()) strm->Write(static_cast<const void*>(value.data()), value.size());
  }
  static bool Read(Stream* strm, std::string* out) {
    uint64_t n = 0;
    if (!detail::ReadCount(strm, &n)) return false;
    out->resize(static_cast<size_t>(n));
    return n == 0 || strm->Read(static_cast<void*>(&(*out)[0]), out->size()) == out->size();
  }
};

template <>
struct Serializer<ffi::String, void> {
  static constexpr bool enabled = true;
  static void Write(Stream* strm, const ffi::String& value) {
    Serializer<std::string>::Write(strm, std::string(value.data(), value.size()));
  }
  static bool Read(Stream* strm, ffi::String* out) {
    std::string text;
    if (!Serializer<std::string>::Read(strm, &text)) return false;
    *out = ffi::String(text);
    return true;
  }
};

template <typename T>
struct Serializer<std::vector<T>, void> {
  static constexpr bool enabled = true;
  static void Write(Stream* strm, const std::vector<T>& value) {
    detail::WriteCount(strm, value.size());
    for (const T& item : value) Serializer<T>::Write(strm, item);
  }
  static bool Read(Stream* strm, std::vector<T>* out) {
    uint64_t n = 0;
    if (!detail::ReadCount(strm, &n)) return false;
    out->resize(static_cast<size_t>(n));
    for (T& item : *out) {
      if (!Serializer<T>::Read(strm, &item)) return false;
    }
    return true;
  }
};

template <typename T>
struct Serializer<ffi::Array<T>, void> {
  static constexpr bool enabled = true;
  static void Write(Stream* strm, const ffi::Array<T>& value) {
    detail::WriteCount(strm, value.size());
    for (const T& item : value) Serializer<T>::Write(strm, item);
  }
  static bool Read(Stream* strm, ffi::Array<T>* out) {
    uint64_t n = 0;
    if (!detail::ReadCount(strm, &n)) return false;
    ffi::Array<T> items;
    for (uint64_t i = 0; i < n; ++i) {
      T item;
      if (!Serializer<T>::Read(strm, &item)) return false;
      items.push_back(item);
    }
    *out = items;
    return true;
  }
};

template <typename A, typename B>
struct Serializer<std::pair<A, B>, std::enable_if_t<!std::is_trivially_copyable<std::pair<A, B>>::value>> {
  static constexpr bool enabled = true;
  static void Write(Stream* strm, const std::pair<A, B>& value) {
    Serializer<A>::Write(strm, value.first);
    Serializer<B>::Write(strm, value.second);
  }
  static bool Read(Stream* strm, std::pair<A, B>* out) {
    return Serializer<A>::Read(strm, &out->first) && Serializer<B>::Read(strm, &out->second);
  }
};

}  // namespace support
}  // namespace tvm

#endif  // EDGETUNE_TVM_SUPPORT_SERIALIZER_H_
