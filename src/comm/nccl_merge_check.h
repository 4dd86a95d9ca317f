// The host side of the NCCL merges (mlakit/cp_nccl.h) that needs no NCCL: the workspace layout and
// the checks of the arguments, given the communicator's size and this rank. Tested on the CPU
// (tests/cpu/cp_nccl_test.cc); nccl_merge.cc calls them before any communication.
#pragma once

#include <cstdint>

#include "mlakit/cp_nccl.h"

namespace mlakit::comm {

inline constexpr uint64_t kWorkspaceAlign = 256;

// Byte offsets in the workspace, and the slices each rank exchanges.
struct MergeLayout {
  int32_t heads = 0;       // heads of the result on this rank: h_q (kAllGather) or h_q / N
  uint64_t rows = 0;       // b * s_q * heads: the rows of one rank's slice
  uint64_t slice_out = 0;  // bytes of one rank's slice of the partial outputs: rows * 512 * e
  uint64_t slice_lse = 0;  // bytes of one rank's slice of the partial LSEs: rows * 4
  // The merge's inputs, [N, b, s_q, heads, 512] and [N, b, s_q, heads]: what was gathered.
  uint64_t recv_out = 0, recv_lse = 0;
  // kHeads: this rank's partial packed by destination rank, the same shapes (slot r unused: this
  // rank's own heads are packed straight into recv slot r).
  uint64_t send_out = 0, send_lse = 0;
  // kAllGather in place (nccl_merge_partial_slot): rank k's slot at k * slot, its out slice first,
  // its LSE slice at slot_lse within it; one ncclAllGather of whole slots.
  uint64_t slot = 0, slot_lse = 0;
  uint64_t bytes = 0;  // the whole workspace (either kAllGather layout fits); 0 for batch 0
};

// The layout for `world` ranks; kInvalidArgument naming world, batch, s_q, h_q or dtype.
Status merge_layout(CpMerge merge, int32_t world, const NcclMergeArgs& args, MergeLayout* layout);

// kAllGather in place: rank `rank`'s slot in `workspace` (its out, its LSE); kInvalidArgument as
// merge_layout, or naming rank or workspace (null, misaligned).
Status partial_slot(int32_t world, int32_t rank, const NcclMergeArgs& args, void* workspace,
                    void** partial_out, float** partial_lse);

// kAllGather: whether this rank's partial is its slot of the in-place layout (both pointers).
bool partial_in_slot(const MergeLayout& layout, int32_t rank, const NcclMergeArgs& args,
                     const void* workspace);

// Everything the merge checks before it communicates: the layout's checks, then rank, the
// pointers (alignment), the workspace (size, alignment) and overlaps (the workspace with any
// argument; out, lse and sinks with each other). out and lse may overlap this rank's partial,
// except when it is its slot of the workspace (partial_in_slot).
Status check_merge(CpMerge merge, int32_t world, int32_t rank, const NcclMergeArgs& args,
                   const void* workspace, size_t workspace_size, MergeLayout* layout);

}  // namespace mlakit::comm
