// Ceilings for the roofline: the read-only HBM stream measured on this GPU, and known figures.
#pragma once

#include <string>

#include "mlakit/mlakit.h"

namespace mlakit::tools {

struct Peaks {
  double read_bytes_per_s = 0;  // HBM read-only stream
  double flops_per_s = 0;       // dense bf16 matrix rate
  std::string source;           // where the numbers come from
};

// Measures the read-only stream: a kernel that sums a 4 GiB buffer with 16-byte loads.
Status measure_read_bandwidth(double* bytes_per_s);

// Known ceilings for the current device (measured figures from BENCHMARKING.md and our runs);
// zero where unknown.
Peaks known_peaks(const DeviceInfo& device);

}  // namespace mlakit::tools
