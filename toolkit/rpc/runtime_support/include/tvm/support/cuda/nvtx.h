/*
 * edgetune: NVTX profiling ranges are a no-op in a runtime built without CUDA (the Relax VM marks each
 * function call with one).
 */
#ifndef EDGETUNE_TVM_SUPPORT_CUDA_NVTX_H_
#define EDGETUNE_TVM_SUPPORT_CUDA_NVTX_H_

#include <string>

namespace tvm {
namespace support {

/*! \brief A profiling range that records nothing. */
class NVTXScopedRange {
 public:
  explicit NVTXScopedRange(const char*) {}
  explicit NVTXScopedRange(const std::string&) {}
  NVTXScopedRange(const NVTXScopedRange&) = delete;
  NVTXScopedRange& operator=(const NVTXScopedRange&) = delete;
};

}  // namespace support
}  // namespace tvm

#endif  // EDGETUNE_TVM_SUPPORT_CUDA_NVTX_H_
