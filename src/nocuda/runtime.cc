// The calls of the stand-in CUDA runtime (cuda_runtime_api.h here): no device, ever. Queries
// report none, allocations fail, and freeing or destroying nothing succeeds.
#include "cuda_runtime_api.h"

namespace {
cudaError_t no_device() { return cudaErrorNoDevice; }
}  // namespace

cudaError_t cudaGetLastError() { return cudaSuccess; }
const char* cudaGetErrorName(cudaError_t error) {
  return error == cudaSuccess ? "cudaSuccess" : "cudaErrorNoDevice";
}
const char* cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : kMlakitNoCudaReason;
}
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 0;
  return no_device();
}
cudaError_t cudaGetDevice(int*) { return no_device(); }
cudaError_t cudaSetDevice(int) { return no_device(); }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp*, int) { return no_device(); }
cudaError_t cudaDeviceGetPCIBusId(char*, int, int) { return no_device(); }
cudaError_t cudaDriverGetVersion(int* version) {
  *version = 0;
  return no_device();
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 0;
  return no_device();
}
cudaError_t cudaMemGetInfo(size_t*, size_t*) { return no_device(); }
cudaError_t cudaMalloc(void** ptr, size_t) {
  *ptr = nullptr;
  return no_device();
}
cudaError_t cudaFree(void* ptr) { return ptr == nullptr ? cudaSuccess : no_device(); }
cudaError_t cudaMemcpy(void*, const void*, size_t, cudaMemcpyKind) { return no_device(); }
cudaError_t cudaMemset(void*, int, size_t) { return no_device(); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = nullptr;
  return no_device();
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return no_device(); }
cudaError_t cudaStreamQuery(cudaStream_t) { return no_device(); }
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* status) {
  *status = cudaStreamCaptureStatusNone;  // nothing can capture without a device
  return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) { return no_device(); }
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t* graph) {
  *graph = nullptr;
  return no_device();
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t, unsigned long long) {
  *exec = nullptr;
  return no_device();
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) { return no_device(); }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) { return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t) { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = nullptr;
  return no_device();
}
cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return no_device(); }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return no_device(); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) {
  *ms = 0;
  return no_device();
}
