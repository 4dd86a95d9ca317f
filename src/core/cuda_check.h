// CUDA runtime errors become a Status carrying the call, file and line.
#pragma once

#include <cuda_runtime_api.h>

#include "core/check.h"

namespace mlakit {

inline Status cuda_status(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return Status::Ok();
  return Status(StatusCode::kCudaError,
                str_cat(call, " failed at ", file, ":", line, ": ", cudaGetErrorName(err), " (",
                        cudaGetErrorString(err), ")"));
}

#ifndef MLAKIT_NO_CUDA
// This thread's stream-capture mode set to relaxed while it lives, then restored. A capture in
// global or thread-local mode (PyTorch's torch.cuda.graph captures in global mode) forbids the
// capturing thread potentially unsafe calls, and a refused one invalidates the capture; for calls
// that are no stream work, such as occupancy queries a first call may make inside a capture.
// (Driver 580 on an H200 answered cudaOccupancyMaxActiveClusters inside a global-mode capture
// with or without it: a defence for drivers that refuse it.)
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { ok_ = cudaThreadExchangeStreamCaptureMode(&mode_) == cudaSuccess; }
  ~RelaxedCaptureMode() {
    if (ok_) (void)cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool ok_ = false;
};

// The compute capability (major * 10 + minor) of the code the runtime loads for `kernel` on the
// current device, or 0 where it has none (the build lacks code for this device; the error is
// cleared). Only for the CUDA sources (the stand-in runtime of a build without CUDA has no
// kernels).
template <typename Kernel>
int binary_version(Kernel kernel) {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return attr.binaryVersion;
}
#endif

}  // namespace mlakit

#define MLAKIT_CUDA_RETURN(call) \
  MLAKIT_RETURN_IF_ERROR(::mlakit::cuda_status((call), #call, __FILE__, __LINE__))

// After a kernel launch: the launch error, if any.
#define MLAKIT_CUDA_RETURN_LAUNCH(name) \
  MLAKIT_RETURN_IF_ERROR(::mlakit::cuda_status(cudaGetLastError(), name, __FILE__, __LINE__))
