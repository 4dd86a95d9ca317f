// A stand-in for the CUDA runtime's header in a build without a CUDA toolkit (MLAKIT_CUDA=OFF, or
// AUTO with no CUDA compiler found): the few types and calls that the host code of the library,
// the program, the tests and the Python extension use, each call failing with cudaErrorNoDevice
// (nocuda/runtime.cc). With it the same sources build the cpu backend alone, and every path that
// would touch a GPU reports "no CUDA device" as it does on a machine without one.
#pragma once

#include <cstddef>

struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphExec_st;

using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
using cudaGraph_t = CUgraph_st*;
using cudaGraphExec_t = CUgraphExec_st*;

enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorNoDevice = 100,
  cudaErrorNotReady = 600,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureImplicit = 906,
};

enum cudaMemcpyKind : int {
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
};

enum cudaStreamCaptureStatus : int { cudaStreamCaptureStatusNone = 0 };
enum cudaStreamCaptureMode : int { cudaStreamCaptureModeThreadLocal = 1 };
inline constexpr unsigned cudaStreamNonBlocking = 1;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor, multiProcessorCount, l2CacheSize;
};

// Hidden: a shared libmlakit of this build never offers these names to a process that also loads
// the real runtime (PyTorch's, say).
#define MLAKIT_NOCUDA_API __attribute__((visibility("hidden")))

// The message every call of this build gives.
inline constexpr const char* kMlakitNoCudaReason =
    "mlakit was built without CUDA (no CUDA compiler was found, or MLAKIT_CUDA=OFF)";

MLAKIT_NOCUDA_API cudaError_t cudaGetLastError();
MLAKIT_NOCUDA_API const char* cudaGetErrorName(cudaError_t error);
MLAKIT_NOCUDA_API const char* cudaGetErrorString(cudaError_t error);
MLAKIT_NOCUDA_API cudaError_t cudaGetDeviceCount(int* count);
MLAKIT_NOCUDA_API cudaError_t cudaGetDevice(int* device);
MLAKIT_NOCUDA_API cudaError_t cudaSetDevice(int device);
MLAKIT_NOCUDA_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
MLAKIT_NOCUDA_API cudaError_t cudaDeviceGetPCIBusId(char* bus, int length, int device);
MLAKIT_NOCUDA_API cudaError_t cudaDriverGetVersion(int* version);
MLAKIT_NOCUDA_API cudaError_t cudaRuntimeGetVersion(int* version);
MLAKIT_NOCUDA_API cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
MLAKIT_NOCUDA_API cudaError_t cudaMalloc(void** ptr, size_t bytes);
MLAKIT_NOCUDA_API cudaError_t cudaFree(void* ptr);
MLAKIT_NOCUDA_API cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes,
                                         cudaMemcpyKind kind);
MLAKIT_NOCUDA_API cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
MLAKIT_NOCUDA_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
MLAKIT_NOCUDA_API cudaError_t cudaStreamDestroy(cudaStream_t stream);
MLAKIT_NOCUDA_API cudaError_t cudaStreamSynchronize(cudaStream_t stream);
MLAKIT_NOCUDA_API cudaError_t cudaStreamQuery(cudaStream_t stream);
MLAKIT_NOCUDA_API cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                                    cudaStreamCaptureStatus* status);
MLAKIT_NOCUDA_API cudaError_t cudaStreamBeginCapture(cudaStream_t stream,
                                                     cudaStreamCaptureMode mode);
MLAKIT_NOCUDA_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
MLAKIT_NOCUDA_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                   unsigned long long);
MLAKIT_NOCUDA_API cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
MLAKIT_NOCUDA_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
MLAKIT_NOCUDA_API cudaError_t cudaGraphDestroy(cudaGraph_t graph);
MLAKIT_NOCUDA_API cudaError_t cudaEventCreate(cudaEvent_t* event);
MLAKIT_NOCUDA_API cudaError_t cudaEventDestroy(cudaEvent_t event);
MLAKIT_NOCUDA_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
MLAKIT_NOCUDA_API cudaError_t cudaEventSynchronize(cudaEvent_t event);
MLAKIT_NOCUDA_API cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);
