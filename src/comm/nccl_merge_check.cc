// The workspace layout and the argument checks of the NCCL merges (nccl_merge_check.h).
#include "comm/nccl_merge_check.h"

#include <algorithm>
#include <string_view>

#include "core/arg_checks.h"
#include "core/check.h"

namespace mlakit {

std::string_view to_string(CpMerge merge) {
  switch (merge) {
    case CpMerge::kAllGather: return "allgather";
    case CpMerge::kHeads: return "heads";
  }
  return "unknown";
}

namespace comm {
namespace {

using args::check_pointer;
using args::check_range;
using args::overlap;

uint64_t align_up(uint64_t x) {
  return (x + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

}  // namespace

Status merge_layout(CpMerge merge, int32_t world, const NcclMergeArgs& a, MergeLayout* layout) {
  if (merge != CpMerge::kAllGather && merge != CpMerge::kHeads) {
    return invalid_argument("merge", "kAllGather (0) or kHeads (1)", static_cast<int32_t>(merge));
  }
  MLAKIT_RETURN_IF_ERROR(check_range("world", world, 1, kMaxCpWorld));
  MLAKIT_RETURN_IF_ERROR(check_range("batch", a.batch, 0, kMaxBatch));
  MLAKIT_RETURN_IF_ERROR(check_range("s_q", a.s_q, 1, kMaxSq));
  MLAKIT_RETURN_IF_ERROR(check_range("h_q", a.h_q, 1, kMaxHeads));
  if (a.dtype != DType::kBF16 && a.dtype != DType::kFP16 && a.dtype != DType::kFP32) {
    return invalid_argument("dtype", "bf16, fp16 or fp32", to_string(a.dtype));
  }
  if (merge == CpMerge::kHeads && a.h_q % world != 0) {
    return invalid_argument(
        "h_q",
        str_cat("a multiple of the communicator's size ", world,
                " with CpMerge::kHeads (heads are split evenly over the ranks)"),
        a.h_q);
  }
  MergeLayout l;
  l.heads = merge == CpMerge::kHeads ? a.h_q / world : a.h_q;
  l.rows = uint64_t(a.batch) * a.s_q * l.heads;
  l.slice_out = l.rows * kDv * dtype_bytes(a.dtype);
  l.slice_lse = l.rows * sizeof(float);
  if (a.batch > 0) {
    l.recv_out = 0;
    l.recv_lse = align_up(l.recv_out + world * l.slice_out);
    l.bytes = align_up(l.recv_lse + world * l.slice_lse);
    if (merge == CpMerge::kAllGather) {
      l.slot_lse = align_up(l.slice_out);
      l.slot = l.slot_lse + align_up(l.slice_lse);
      l.bytes = std::max<uint64_t>(l.bytes, world * l.slot);
    } else {
      l.send_out = l.bytes;
      l.send_lse = align_up(l.send_out + world * l.slice_out);
      l.bytes = align_up(l.send_lse + world * l.slice_lse);
    }
  }
  *layout = l;
  return Status::Ok();
}

Status partial_slot(int32_t world, int32_t rank, const NcclMergeArgs& a, void* workspace,
                    void** partial_out, float** partial_lse) {
  MergeLayout l;
  MLAKIT_RETURN_IF_ERROR(merge_layout(CpMerge::kAllGather, world, a, &l));
  MLAKIT_RETURN_IF_ERROR(check_range("rank", rank, 0, world - 1));
  if (a.batch == 0) {  // nothing is exchanged (the workspace may be empty)
    *partial_out = workspace;
    *partial_lse = static_cast<float*>(workspace);
    return Status::Ok();
  }
  MLAKIT_RETURN_IF_ERROR(check_pointer("workspace", workspace, kWorkspaceAlign));
  auto* slot = static_cast<uint8_t*>(workspace) + uint64_t(rank) * l.slot;
  *partial_out = slot;
  *partial_lse = reinterpret_cast<float*>(slot + l.slot_lse);
  return Status::Ok();
}

bool partial_in_slot(const MergeLayout& l, int32_t rank, const NcclMergeArgs& a,
                     const void* workspace) {
  if (l.slot == 0 || workspace == nullptr) return false;
  const auto* slot = static_cast<const uint8_t*>(workspace) + uint64_t(rank) * l.slot;
  return a.partial_out == slot && static_cast<const void*>(a.partial_lse) == slot + l.slot_lse;
}

Status check_merge(CpMerge merge, int32_t world, int32_t rank, const NcclMergeArgs& a,
                   const void* workspace, size_t workspace_size, MergeLayout* layout) {
  MLAKIT_RETURN_IF_ERROR(merge_layout(merge, world, a, layout));
  MLAKIT_RETURN_IF_ERROR(check_range("rank", rank, 0, world - 1));
  if (a.batch == 0) return Status::Ok();
  MLAKIT_RETURN_IF_ERROR(check_pointer("partial_out", a.partial_out, 16));
  MLAKIT_RETURN_IF_ERROR(check_pointer("partial_lse", a.partial_lse, alignof(float)));
  MLAKIT_RETURN_IF_ERROR(check_pointer("out", a.out, 16));
  if (a.lse != nullptr) MLAKIT_RETURN_IF_ERROR(check_pointer("lse", a.lse, alignof(float)));
  if (a.sinks != nullptr) {
    MLAKIT_RETURN_IF_ERROR(check_pointer("sinks", a.sinks, alignof(float)));
  }
  const uint64_t need = layout->bytes;
  if (workspace_size < need) {
    return invalid_argument("workspace_size",
                            str_cat("at least ", need, " bytes (nccl_merge_workspace_bytes)"),
                            workspace_size);
  }
  MLAKIT_RETURN_IF_ERROR(check_pointer("workspace", workspace, kWorkspaceAlign));

  const uint64_t partial_rows = uint64_t(a.batch) * a.s_q * a.h_q;
  struct Buffer {
    std::string_view name;
    const void* ptr;
    uint64_t bytes;
  };
  const Buffer out{"out", a.out, layout->rows * kDv * dtype_bytes(a.dtype)};
  const Buffer lse{"lse", a.lse, layout->rows * sizeof(float)};
  const Buffer sinks{"sinks", a.sinks, a.h_q * sizeof(float)};
  const Buffer others[] = {
      {"partial_out", a.partial_out, partial_rows * kDv * dtype_bytes(a.dtype)},
      {"partial_lse", a.partial_lse, partial_rows * sizeof(float)},
      out,
      lse,
      sinks,
  };
  // kAllGather in place: the partial is this rank's slot of the workspace
  // (nccl_merge_partial_slot).
  const bool in_slot = merge == CpMerge::kAllGather && partial_in_slot(*layout, rank, a, workspace);
  for (size_t i = 0; i < std::size(others); ++i) {
    const Buffer& b = others[i];
    if (in_slot && i < 2) continue;  // partial_out and partial_lse: this rank's slot
    if (overlap(workspace, need, b.ptr, b.bytes)) {
      return invalid_argument("workspace", "memory apart from the other arguments",
                              str_cat(need, " bytes that overlap ", b.name));
    }
  }
  for (const auto& [x, y] : {std::pair{out, lse}, std::pair{out, sinks}, std::pair{lse, sinks}}) {
    if (overlap(x.ptr, x.bytes, y.ptr, y.bytes)) {
      return invalid_argument(x.name, str_cat("memory apart from ", y.name),
                              str_cat(x.bytes, " bytes that overlap ", y.name));
    }
  }
  return Status::Ok();
}

}  // namespace comm
}  // namespace mlakit
