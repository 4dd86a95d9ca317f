// The driver's cuTensorMapEncodeTiled through the runtime (tensor_map.h).
#include "kernels/common/tensor_map.h"

#include <cuda_runtime_api.h>

namespace mlakit {

Status tensor_map_encoder(PFN_cuTensorMapEncodeTiled_v12000* fn) {
  static PFN_cuTensorMapEncodeTiled_v12000 cached = nullptr;
  static cudaError_t error = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult query{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                           cudaEnableDefault, &query);
    if (e == cudaSuccess && query == cudaDriverEntryPointSuccess) {
      cached = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }
    return e;
  }();
  if (cached == nullptr) {
    return Status(StatusCode::kInternal, str_cat("the driver has no cuTensorMapEncodeTiled (",
                                                 cudaGetErrorString(error), ")"));
  }
  *fn = cached;
  return Status::Ok();
}

}  // namespace mlakit
