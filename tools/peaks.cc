// Known ceilings for the roofline (host code); the measured read stream is in peaks.cu, built
// with CUDA only.
#include "peaks.h"

namespace mlakit::tools {

Peaks known_peaks(const DeviceInfo& device) {
  Peaks p;
  if (device.name.find("H200") != std::string::npos) {
    // BENCHMARKING.md: 4.60 TB/s read-only stream, 784 TFLOP/s bf16 matrix product (measured).
    p = {.read_bytes_per_s = 4.60e12, .flops_per_s = 784e12, .source = "H200, BENCHMARKING.md"};
  } else if (device.name.find("H100") != std::string::npos) {
    // Measured here with `mlakit info --measure` (read stream) and the device notes (798 TFLOP/s
    // bf16 matrix product on random data).
    p = {.read_bytes_per_s = 3.0e12, .flops_per_s = 798e12, .source = "H100 SXM, measured"};
  }
  return p;
}

#ifdef MLAKIT_NO_CUDA
Status measure_read_bandwidth(double*) {
  return Status(StatusCode::kUnsupported,
                "measuring the read stream needs CUDA; this build of mlakit has none");
}
#endif

}  // namespace mlakit::tools
