// Explicit instantiation of the sm90 decode kernel: the one-scale e4m3 cache with a bf16 q (out
// alike) split into two e4m3 parts by the consumers, on the fp8 narrow tile of 16 rows
// (Widen::kQSplit, decode_fp8_narrow.cuh).
#include "backends/sm90/decode_kernel.cuh"
#include "backends/sm90/launch.h"

namespace mlakit::sm90 {

const DecodeKernel& decode_kernel_e4m3_bf16_qsplit_narrow16() {
  return decode_kernel_entry<__nv_bfloat16, 16, __nv_bfloat16, /*kFp8Kv=*/true, Widen::kQSplit>();
}

}  // namespace mlakit::sm90
