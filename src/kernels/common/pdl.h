// Programmatic dependent launch (PDL): the device-side waits and triggers, and a launch helper
// that sets programmatic stream serialization.
//
// Contract (DESIGN.md, "PDL and CUDA graphs"): a kernel launched with PDL may start while the
// previous kernel in the stream still runs. It calls griddepcontrol_wait() before it touches any
// global memory a previous kernel may write (its inputs, and the workspace the previous call
// reads) for anything a result depends on; the wait covers the whole previous grid and its
// memory. One use of such memory before the wait is allowed because no result depends on it: a
// speculative plan from seq_lens read by relaxed GPU-scope loads (no data race with the
// previous kernel's writes, no stale line left in L1), confirmed against the lengths read after
// the wait (plan::confirm_part).
// griddepcontrol_launch_dependents() only lets the next kernel start its prologue early; it never
// decides correctness. Without PDL (or before sm_90) both are no-ops, so results are bitwise equal
// either way.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace mlakit::pdl {

// griddepcontrol.wait (sm_90): waits until the prerequisite grids completed and their memory is
// visible. A no-op when the kernel was not launched with PDL, and compiled out below sm_90.
__device__ __forceinline__ void griddepcontrol_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// griddepcontrol.launch_dependents (sm_90): lets the dependent grid launch once every CTA of this
// grid has called it or exited. Compiled out below sm_90.
__device__ __forceinline__ void griddepcontrol_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Whether the current device takes programmatic dependent launch (sm_90 and newer): what an op's
// enable_pdl becomes (ops.h). False where the device cannot be queried (the launch then reports
// the error).
inline bool current_device_takes_pdl() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return false;
  }
  return major >= 9;
}

// The launch attribute that groups consecutive CTAs of a 1-D grid into clusters of `x`.
inline cudaLaunchAttribute cluster_dimension(unsigned x) {
  cudaLaunchAttribute a;
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim.x = x;
  a.val.clusterDim.y = 1;
  a.val.clusterDim.z = 1;
  return a;
}

// Launches `kernel` with cudaLaunchKernelEx; `pdl` sets programmatic stream serialization (only
// pass true on sm_90 and newer); `cluster_x` > 1 groups consecutive CTAs of the 1-D grid into
// clusters of that many (sm_90 and newer; the grid a multiple of it), `cluster_attribute` sets
// the cluster attribute for clusters of one CTA too. Returns the launch error.
template <typename... KernelArgs, typename... Args>
cudaError_t launch_ex(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes,
                      cudaStream_t stream, bool pdl, unsigned cluster_x, bool cluster_attribute,
                      Args&&... args) {
  cudaLaunchAttribute attribute[2];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  attribute[1] = cluster_dimension(cluster_x);
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = cluster_attribute || cluster_x > 1 ? 2 : 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// launch_ex with the cluster attribute only for clusters of more than one CTA.
template <typename... KernelArgs, typename... Args>
cudaError_t launch_clustered(void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
                             size_t smem_bytes, cudaStream_t stream, bool pdl, unsigned cluster_x,
                             Args&&... args) {
  return launch_ex(kernel, grid, block, smem_bytes, stream, pdl, cluster_x, false,
                   std::forward<Args>(args)...);
}

// The same without clusters.
template <typename... KernelArgs, typename... Args>
cudaError_t launch(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes,
                   cudaStream_t stream, bool pdl, Args&&... args) {
  return launch_clustered(kernel, grid, block, smem_bytes, stream, pdl, 1u,
                          std::forward<Args>(args)...);
}

}  // namespace mlakit::pdl
