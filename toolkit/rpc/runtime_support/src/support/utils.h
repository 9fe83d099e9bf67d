/*
 * edgetune: the string helpers TVM 0.27's runtime sources use, written for cross-building that
 * runtime from the sources its wheel ships.
 */
#ifndef EDGETUNE_SUPPORT_UTILS_H_
#define EDGETUNE_SUPPORT_UTILS_H_

#include <cctype>
#include <string>

namespace tvm {
namespace support {

/*! \brief Does s begin with prefix. */
template <typename S>
inline bool StartsWith(const S& s, const char* prefix) {
  std::string text(s.data(), s.size());
  return text.rfind(prefix, 0) == 0;
}

/*! \brief Is s a non-empty string of decimal digits. */
template <typename S>
inline bool IsNumber(const S& s) {
  std::string text(s.data(), s.size());
  if (text.empty()) return false;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace support
}  // namespace tvm

#endif  // EDGETUNE_SUPPORT_UTILS_H_
