/*
 * edgetune: the scratch arena TVM 0.27's RPC endpoint allocates packet data from (freed all at once
 * by RecycleAll), written for cross-building that runtime from the sources its wheel ships.
 */
#ifndef EDGETUNE_SUPPORT_ARENA_H_
#define EDGETUNE_SUPPORT_ARENA_H_

#include <memory>
#include <new>
#include <vector>

namespace tvm {
namespace support {

/*! \brief Allocations that live until the next RecycleAll. */
class Arena {
 public:
  template <typename T>
  T* allocate_(int count) {
    size_t n = sizeof(T) * static_cast<size_t>(count > 0 ? count : 1);
    blocks_.emplace_back(new char[n]);
    return reinterpret_cast<T*>(blocks_.back().get());
  }
  void RecycleAll() { blocks_.clear(); }

 private:
  std::vector<std::unique_ptr<char[]>> blocks_;
};

}  // namespace support
}  // namespace tvm

#endif  // EDGETUNE_SUPPORT_ARENA_H_
