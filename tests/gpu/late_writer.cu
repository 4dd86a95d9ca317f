// A kernel that lets the next kernel on its stream launch at once (griddepcontrol
// .launch_dependents), then, after a delay, writes that kernel's inputs: with PDL the next
// kernel's CTAs start while the buffers still hold the old values, and only its
// griddepcontrol.wait orders its reads after the writes.
#include <cuda_runtime.h>

#include "kernels/common/pdl.h"
#include "late_writer.h"

namespace mlakit::testing {
namespace {

__global__ void late_copy(LateCopy a, LateCopy b, int64_t delay_ns) {
  pdl::griddepcontrol_launch_dependents();
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(now));
  } while (now - start < static_cast<uint64_t>(delay_ns));
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) a.dst[i] = a.src[i];
  for (int64_t i = threadIdx.x; i < b.n; i += blockDim.x) b.dst[i] = b.src[i];
}

}  // namespace

cudaError_t launch_late_copy(const LateCopy& a, const LateCopy& b, int64_t delay_ns,
                             cudaStream_t stream) {
  late_copy<<<1, 256, 0, stream>>>(a, b, delay_ns);
  return cudaGetLastError();
}

}  // namespace mlakit::testing
