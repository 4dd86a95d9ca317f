// merge_partials (mlakit/cp.h): the host-visible checks of its arguments, then the cpu reference
// or the CUDA launcher.
#include "ops/merge/merge.h"

#include <cstdint>
#include <string_view>

#include "core/arg_checks.h"
#include "core/check.h"
#include "core/guard.h"

namespace mlakit {
namespace {

using args::check_pointer;
using args::check_range;
using args::overlap;

Status validate(ops::Device device, const MergeArgs& a) {
  if (device != ops::Device::kCpu && device != ops::Device::kCuda) {
    return invalid_argument("device", "kCpu (0) or kCuda (1)", static_cast<int32_t>(device));
  }
  MLAKIT_RETURN_IF_ERROR(check_range("world", a.world, 1, kMaxCpWorld));
  MLAKIT_RETURN_IF_ERROR(check_range("batch", a.batch, 0, kMaxBatch));
  MLAKIT_RETURN_IF_ERROR(check_range("s_q", a.s_q, 1, kMaxSq));
  MLAKIT_RETURN_IF_ERROR(check_range("h_q", a.h_q, 1, kMaxHeads));
  if (a.dtype != DType::kBF16 && a.dtype != DType::kFP16 && a.dtype != DType::kFP32) {
    return invalid_argument("dtype", "bf16, fp16 or fp32", to_string(a.dtype));
  }
  if (a.batch == 0) return Status::Ok();
  MLAKIT_RETURN_IF_ERROR(check_pointer("partial_out", a.partial_out, 16));
  MLAKIT_RETURN_IF_ERROR(check_pointer("partial_lse", a.partial_lse, alignof(float)));
  MLAKIT_RETURN_IF_ERROR(check_pointer("out", a.out, 16));
  if (a.sinks != nullptr) {
    MLAKIT_RETURN_IF_ERROR(check_pointer("sinks", a.sinks, alignof(float)));
  }
  if (a.lse != nullptr) MLAKIT_RETURN_IF_ERROR(check_pointer("lse", a.lse, alignof(float)));

  const uint64_t rows = uint64_t(a.batch) * a.s_q * a.h_q;
  const uint64_t out_bytes = rows * kDv * dtype_bytes(a.dtype);
  // The strides: 0 (contiguous) or room for a whole partial, out's keeping 16-byte alignment; at
  // most 2^40 elements, so that the extents below stay far from 2^64.
  constexpr int64_t kMaxStride = int64_t{1} << 40;
  if (a.partial_out_stride != 0 &&
      (a.partial_out_stride < static_cast<int64_t>(rows * kDv) || a.partial_out_stride % 8 != 0 ||
       a.partial_out_stride > kMaxStride)) {
    return invalid_argument("partial_out_stride",
                            str_cat("0 or a multiple of 8 from b * s_q * h_q * 512 = ", rows * kDv,
                                    " to 2^40 elements"),
                            a.partial_out_stride);
  }
  if (a.partial_lse_stride != 0 &&
      (a.partial_lse_stride < static_cast<int64_t>(rows) || a.partial_lse_stride > kMaxStride)) {
    return invalid_argument("partial_lse_stride",
                            str_cat("0 or from b * s_q * h_q = ", rows, " to 2^40 elements"),
                            a.partial_lse_stride);
  }
  const uint64_t out_stride = uint64_t(cp::out_stride_of(a)) * dtype_bytes(a.dtype);
  const uint64_t lse_stride = uint64_t(cp::lse_stride_of(a)) * sizeof(float);
  struct Input {
    std::string_view name;
    const void* ptr;
    uint64_t bytes;
  };
  const Input inputs[] = {
      {"partial_out", a.partial_out, out_stride * (a.world - 1) + out_bytes},
      {"partial_lse", a.partial_lse, lse_stride * (a.world - 1) + rows * sizeof(float)},
      {"sinks", a.sinks, a.h_q * sizeof(float)},
  };
  for (const auto& [name, ptr, bytes] :
       {Input{"out", a.out, out_bytes}, Input{"lse", a.lse, rows * sizeof(float)}}) {
    for (const Input& in : inputs) {
      if (overlap(ptr, bytes, in.ptr, in.bytes)) {
        return invalid_argument(name, "memory apart from the inputs",
                                str_cat(bytes, " bytes that overlap ", in.name));
      }
    }
  }
  if (overlap(a.out, out_bytes, a.lse, rows * sizeof(float))) {
    return invalid_argument("lse", "memory apart from out", "an overlap with out");
  }
  if (device == ops::Device::kCuda) {
#if !defined(MLAKIT_OPS_CUDA)
    return unsupported("merge_partials on device cuda: mlakit was built without CUDA");
#endif
  }
  return Status::Ok();
}

}  // namespace

Status merge_partials(ops::Device device, const MergeArgs& args, Stream stream) {
  return guarded("merge_partials", [&]() -> Status {
    MLAKIT_RETURN_IF_ERROR(validate(device, args));
    if (args.batch == 0) return Status::Ok();
    if (device == ops::Device::kCpu) {
      cp::merge_partials_cpu(args);
      return Status::Ok();
    }
    return cp::merge_partials_cuda(args, stream);
  });
}

}  // namespace mlakit
