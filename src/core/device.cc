#include <cuda_runtime_api.h>

#include "core/check.h"
#include "mlakit/mlakit.h"

namespace mlakit {

DeviceInfo current_device() try {
  DeviceInfo info;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    info.error = err != cudaSuccess ? str_cat(cudaGetErrorName(err), ": ", cudaGetErrorString(err))
                                    : std::string("no CUDA device");
    return info;
  }
  if (cudaGetDevice(&info.device) != cudaSuccess) {
    info.error = "cudaGetDevice failed";
    return info;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, info.device) != cudaSuccess) {
    info.error = "cudaGetDeviceProperties failed";
    return info;
  }
  info.present = true;
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.global_mem_bytes = prop.totalGlobalMem;
  info.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  return info;
} catch (...) {  // out of host memory (guard.h): no device can be described
  return {};
}

}  // namespace mlakit
