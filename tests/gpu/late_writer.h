// A test kernel that writes the next kernel's inputs late (late_writer.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mlakit::testing {

// n int32 values from src to dst (device pointers).
struct LateCopy {
  const int32_t* src;
  int32_t* dst;
  int64_t n;
};

// On `stream`: lets the next kernel launch at once (griddepcontrol.launch_dependents), waits
// delay_ns, then makes copies a and b.
cudaError_t launch_late_copy(const LateCopy& a, const LateCopy& b, int64_t delay_ns,
                             cudaStream_t stream);

}  // namespace mlakit::testing
