// The host side of the NCCL merges (mlakit/cp_nccl.h, src/comm/), on the CPU: the workspace
// layout and its size, and every argument check by name, given a communicator's size and rank
// (comm::check_merge, which the merges run before any communication). The merges themselves need
// two GPUs: tests/gpu/cp_nccl_test.cc.
#include "mlakit/cp_nccl.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "comm/nccl_merge_check.h"
#include "status_match.h"

namespace mlakit_test {
namespace {

using mlakit::CpMerge;
using mlakit::DType;
using mlakit::NcclMergeArgs;
using mlakit::StatusCode;
using mlakit::comm::check_merge;
using mlakit::comm::kWorkspaceAlign;
using mlakit::comm::MergeLayout;

constexpr CpMerge kBoth[] = {CpMerge::kAllGather, CpMerge::kHeads};

NcclMergeArgs shape(int batch, int s_q, int h_q, DType dtype = DType::kBF16) {
  return {.batch = batch, .s_q = s_q, .h_q = h_q, .dtype = dtype};
}

size_t workspace_bytes(CpMerge merge, int world, const NcclMergeArgs& args) {
  size_t bytes = 0;
  const mlakit::Status st = mlakit::nccl_merge_workspace_bytes(merge, world, args, &bytes);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return bytes;
}

TEST(CpNccl, WorkspaceHoldsTheGatheredPartialsInAlignedRegions) {
  for (const CpMerge merge : kBoth) {
    for (const int world : {1, 2, 4, 8, 64}) {
      for (const DType dtype : {DType::kBF16, DType::kFP16, DType::kFP32}) {
        for (const int batch : {1, 3, 64}) {
          SCOPED_TRACE(::testing::Message() << to_string(merge) << " world " << world << " "
                                            << to_string(dtype) << " batch " << batch);
          const NcclMergeArgs a = shape(batch, 2, 128, dtype);
          MergeLayout l;
          ASSERT_TRUE(mlakit::comm::merge_layout(merge, world, a, &l).ok());
          const int heads = merge == CpMerge::kHeads ? 128 / world : 128;
          ASSERT_EQ(l.heads, heads);
          ASSERT_EQ(l.rows, uint64_t(batch) * 2 * heads);
          ASSERT_EQ(l.slice_out, l.rows * 512 * mlakit::dtype_bytes(dtype));
          ASSERT_EQ(l.slice_lse, l.rows * 4);
          // [offset, bytes) of each region: aligned, apart, inside the workspace.
          std::vector<std::pair<uint64_t, uint64_t>> regions = {{l.recv_out, world * l.slice_out},
                                                                {l.recv_lse, world * l.slice_lse}};
          if (merge == CpMerge::kHeads) {
            regions.push_back({l.send_out, world * l.slice_out});
            regions.push_back({l.send_lse, world * l.slice_lse});
          }
          for (size_t i = 0; i < regions.size(); ++i) {
            EXPECT_EQ(regions[i].first % kWorkspaceAlign, 0u);
            EXPECT_LE(regions[i].first + regions[i].second, l.bytes);
            for (size_t j = 0; j < i; ++j) {
              EXPECT_TRUE(regions[j].first + regions[j].second <= regions[i].first ||
                          regions[i].first + regions[i].second <= regions[j].first)
                  << "regions " << j << " and " << i << " overlap";
            }
          }
          EXPECT_EQ(l.bytes % kWorkspaceAlign, 0u);
          EXPECT_EQ(workspace_bytes(merge, world, a), l.bytes);
        }
      }
    }
  }
  // b 32, s_q 1, h_q 128, bf16 over 4 ranks (docs/context-parallel.md): the 4 gathered partials
  // of 4 MiB + 16 KiB; by heads, 1 MiB + 4 KiB received and as much packed per rank slot.
  EXPECT_EQ(workspace_bytes(CpMerge::kAllGather, 4, shape(32, 1, 128)), 4 * (4096 * 1024 + 16384));
  EXPECT_EQ(workspace_bytes(CpMerge::kHeads, 4, shape(32, 1, 128)), 2 * 4 * (1024 * 1024 + 4096));
  // Batch 0: nothing to gather.
  EXPECT_EQ(workspace_bytes(CpMerge::kHeads, 4, shape(0, 1, 128)), 0u);
}

// kAllGather in place: rank k's slot at k * slot holds its out then its LSE, aligned, inside the
// workspace; nccl_merge_partial_slot hands them out; the checks take a partial in its own slot
// and refuse one in another rank's.
TEST(CpNccl, InPlaceSlotsHoldEachRanksPartialSideBySide) {
  alignas(256) static uint8_t ws[2 << 20];
  for (const int world : {1, 2, 4, 8}) {
    for (const DType dtype : {DType::kBF16, DType::kFP32}) {
      const NcclMergeArgs a = shape(3, 2, 16, dtype);
      MergeLayout l;
      ASSERT_TRUE(mlakit::comm::merge_layout(CpMerge::kAllGather, world, a, &l).ok());
      EXPECT_EQ(l.slot_lse % kWorkspaceAlign, 0u);
      EXPECT_EQ(l.slot % kWorkspaceAlign, 0u);
      EXPECT_GE(l.slot_lse, l.slice_out);
      EXPECT_GE(l.slot, l.slot_lse + l.slice_lse);
      EXPECT_LE(world * l.slot, l.bytes);
      ASSERT_LE(l.bytes, sizeof(ws));
      for (int r = 0; r < world; ++r) {
        void* out = nullptr;
        float* lse = nullptr;
        ASSERT_TRUE(mlakit::nccl_merge_partial_slot(world, r, a, ws, &out, &lse).ok());
        EXPECT_EQ(out, ws + r * l.slot);
        EXPECT_EQ(static_cast<void*>(lse), ws + r * l.slot + l.slot_lse);
        std::vector<uint8_t> result(l.rows * 512 * 4), result_lse(l.rows * 4);
        NcclMergeArgs in_slot = a;
        in_slot.partial_out = out;
        in_slot.partial_lse = lse;
        in_slot.out = result.data();
        in_slot.lse = reinterpret_cast<float*>(result_lse.data());
        EXPECT_TRUE(mlakit::comm::partial_in_slot(l, r, in_slot, ws));
        MergeLayout checked;
        const mlakit::Status ok =
            check_merge(CpMerge::kAllGather, world, r, in_slot, ws, l.bytes, &checked);
        EXPECT_TRUE(ok.ok()) << ok.to_string();
        // The result written over the slot (in place over the partial, which the two-gather
        // path allows): refused before anything is sent, the workspace overlapping out.
        NcclMergeArgs over = in_slot;
        over.out = out;
        EXPECT_TRUE(
            is_error(check_merge(CpMerge::kAllGather, world, r, over, ws, l.bytes, &checked),
                     StatusCode::kInvalidArgument, "workspace", {"memory apart", "overlap out"}));
        if (world > 1) {
          // The slot of the next rank: the workspace overlaps this rank's partial.
          NcclMergeArgs other = in_slot;
          other.partial_out = ws + (r + 1) % world * l.slot;
          EXPECT_FALSE(mlakit::comm::partial_in_slot(l, r, other, ws));
          EXPECT_TRUE(is_error(
              check_merge(CpMerge::kAllGather, world, r, other, ws, l.bytes, &checked),
              StatusCode::kInvalidArgument, "workspace", {"memory apart", "overlap partial_out"}));
        }
      }
    }
  }
  void* out = nullptr;
  float* lse = nullptr;
  const NcclMergeArgs a = shape(1, 1, 8);
  EXPECT_TRUE(is_error(mlakit::nccl_merge_partial_slot(2, 2, a, ws, &out, &lse),
                       StatusCode::kInvalidArgument, "rank", {"0..1", "2"}));
  EXPECT_TRUE(is_error(mlakit::nccl_merge_partial_slot(2, 0, a, ws + 16, &out, &lse),
                       StatusCode::kInvalidArgument, "workspace", {"256-byte"}));
  EXPECT_TRUE(is_error(mlakit::nccl_merge_partial_slot(2, 0, a, ws, nullptr, &lse),
                       StatusCode::kInvalidArgument, "partial_out", {"a pointer", "nullptr"}));
  EXPECT_TRUE(is_error(mlakit::nccl_merge_partial_slot(0, 0, a, ws, &out, &lse),
                       StatusCode::kInvalidArgument, "world", {"1..64", "0"}));
  // Batch 0: nothing is exchanged, an empty (null) workspace is fine.
  EXPECT_TRUE(mlakit::nccl_merge_partial_slot(2, 1, shape(0, 1, 8), nullptr, &out, &lse).ok());
}

TEST(CpNccl, WorkspaceSizeNamesTheBadArgument) {
  size_t bytes = 7;
  const auto bytes_of = [&](CpMerge merge, int world, const NcclMergeArgs& a) {
    return mlakit::nccl_merge_workspace_bytes(merge, world, a, &bytes);
  };
  EXPECT_TRUE(is_error(bytes_of(CpMerge::kAllGather, 0, shape(1, 1, 16)),
                       StatusCode::kInvalidArgument, "world", {"1..64", "given 0"}));
  EXPECT_TRUE(is_error(bytes_of(CpMerge::kAllGather, 65, shape(1, 1, 16)),
                       StatusCode::kInvalidArgument, "world", {"given 65"}));
  EXPECT_TRUE(is_error(bytes_of(CpMerge::kAllGather, 2, shape(-1, 1, 16)),
                       StatusCode::kInvalidArgument, "batch", {"given -1"}));
  EXPECT_TRUE(is_error(bytes_of(CpMerge::kAllGather, 2, shape(1, 17, 16)),
                       StatusCode::kInvalidArgument, "s_q", {"1..16", "given 17"}));
  EXPECT_TRUE(is_error(bytes_of(CpMerge::kAllGather, 2, shape(1, 1, 129)),
                       StatusCode::kInvalidArgument, "h_q", {"1..128", "given 129"}));
  EXPECT_TRUE(is_error(bytes_of(CpMerge::kAllGather, 2, shape(1, 1, 16, DType::kFP8E4M3)),
                       StatusCode::kInvalidArgument, "dtype", {"bf16, fp16 or fp32"}));
  EXPECT_TRUE(is_error(bytes_of(CpMerge::kHeads, 4, shape(1, 1, 6)), StatusCode::kInvalidArgument,
                       "h_q", {"a multiple of the communicator's size 4", "given 6"}));
  EXPECT_TRUE(is_error(bytes_of(static_cast<CpMerge>(2), 2, shape(1, 1, 16)),
                       StatusCode::kInvalidArgument, "merge", {"given 2"}));
  EXPECT_EQ(bytes, 7u) << "a refusal leaves the size alone";
  EXPECT_TRUE(
      is_error(mlakit::nccl_merge_workspace_bytes(CpMerge::kHeads, 2, shape(1, 1, 16), nullptr),
               StatusCode::kInvalidArgument, "bytes"));
  // h_q 6 is fine for the all-gather over 4 ranks.
  EXPECT_TRUE(bytes_of(CpMerge::kAllGather, 4, shape(1, 1, 6)).ok());
}

// Host buffers standing in for device memory: the checks only look at addresses.
struct Buffers {
  static constexpr int kBatch = 3, kSq = 2, kHeads = 16, kWorld = 4;
  alignas(256) uint8_t partial_out[kBatch * kSq * kHeads * 512 * 2];
  alignas(256) float partial_lse[kBatch * kSq * kHeads];
  alignas(256) uint8_t out[kBatch * kSq * kHeads * 512 * 2];
  alignas(256) float lse[kBatch * kSq * kHeads];
  alignas(256) float sinks[kHeads];
  std::vector<uint8_t> storage;  // the workspace, 256-aligned inside
  uint8_t* workspace = nullptr;
  size_t workspace_size = 0;

  explicit Buffers(CpMerge merge) {
    workspace_size = workspace_bytes(merge, kWorld, args());
    storage.resize(workspace_size + 2 * kWorkspaceAlign);
    const auto base = reinterpret_cast<uintptr_t>(storage.data());
    workspace = storage.data() + (kWorkspaceAlign - base % kWorkspaceAlign) % kWorkspaceAlign;
  }
  NcclMergeArgs args() {
    return {.batch = kBatch,
            .s_q = kSq,
            .h_q = kHeads,
            .dtype = DType::kBF16,
            .partial_out = partial_out,
            .partial_lse = partial_lse,
            .sinks = sinks,
            .out = out,
            .lse = lse};
  }
};

TEST(CpNccl, ChecksNameTheBadArgument) {
  for (const CpMerge merge : kBoth) {
    SCOPED_TRACE(to_string(merge));
    auto b = std::make_unique<Buffers>(merge);
    const int world = Buffers::kWorld;
    MergeLayout l;
    const auto check = [&](const NcclMergeArgs& a, int rank = 1) {
      return check_merge(merge, world, rank, a, b->workspace, b->workspace_size, &l);
    };
    ASSERT_TRUE(check(b->args()).ok()) << check(b->args()).to_string();
    NcclMergeArgs a = b->args();
    a.lse = nullptr;
    a.sinks = nullptr;
    EXPECT_TRUE(check(a).ok()) << "lse and sinks are optional";

    EXPECT_TRUE(
        is_error(check(b->args(), 4), StatusCode::kInvalidArgument, "rank", {"0..3", "given 4"}));
    a = b->args();
    a.partial_out = nullptr;
    EXPECT_TRUE(is_error(check(a), StatusCode::kInvalidArgument, "partial_out", {"nullptr"}));
    a = b->args();
    a.partial_out = b->partial_out + 8;
    EXPECT_TRUE(is_error(check(a), StatusCode::kInvalidArgument, "partial_out", {"16-byte"}));
    a = b->args();
    a.partial_lse = nullptr;
    EXPECT_TRUE(is_error(check(a), StatusCode::kInvalidArgument, "partial_lse", {"nullptr"}));
    a = b->args();
    a.out = nullptr;
    EXPECT_TRUE(is_error(check(a), StatusCode::kInvalidArgument, "out", {"nullptr"}));
    a = b->args();
    a.out = b->out + 4;
    EXPECT_TRUE(is_error(check(a), StatusCode::kInvalidArgument, "out", {"16-byte"}));
    a = b->args();
    a.lse = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(b->lse) + 2);
    EXPECT_TRUE(is_error(check(a), StatusCode::kInvalidArgument, "lse", {"4-byte"}));
    a = b->args();
    a.sinks = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(b->sinks) + 1);
    EXPECT_TRUE(is_error(check(a), StatusCode::kInvalidArgument, "sinks", {"4-byte"}));

    // The workspace: its size (from nccl_merge_workspace_bytes), alignment, and apart from the
    // other arguments.
    EXPECT_TRUE(
        is_error(check_merge(merge, world, 1, b->args(), b->workspace, b->workspace_size - 1, &l),
                 StatusCode::kInvalidArgument, "workspace_size",
                 {"at least " + std::to_string(b->workspace_size),
                  "given " + std::to_string(b->workspace_size - 1)}));
    EXPECT_TRUE(is_error(check_merge(merge, world, 1, b->args(), nullptr, b->workspace_size, &l),
                         StatusCode::kInvalidArgument, "workspace", {"nullptr"}));
    EXPECT_TRUE(
        is_error(check_merge(merge, world, 1, b->args(), b->workspace + 16, b->workspace_size, &l),
                 StatusCode::kInvalidArgument, "workspace", {"256-byte"}));
    a = b->args();
    a.out = b->workspace + b->workspace_size - kWorkspaceAlign;
    EXPECT_TRUE(is_error(check(a), StatusCode::kInvalidArgument, "workspace", {"overlap out"}));
    a = b->args();
    a.partial_lse = reinterpret_cast<const float*>(b->workspace);
    EXPECT_TRUE(
        is_error(check(a), StatusCode::kInvalidArgument, "workspace", {"overlap partial_lse"}));

    // The results apart from each other and from the sinks; in place over the partial is fine.
    a = b->args();
    a.lse = reinterpret_cast<float*>(b->out + 256);
    EXPECT_TRUE(is_error(check(a), StatusCode::kInvalidArgument, "out", {"overlap lse"}));
    a = b->args();
    a.sinks = reinterpret_cast<const float*>(b->out);
    EXPECT_TRUE(is_error(check(a), StatusCode::kInvalidArgument, "out", {"overlap sinks"}));
    a = b->args();
    a.out = b->partial_out;
    a.lse = b->partial_lse;
    EXPECT_TRUE(check(a).ok()) << "in place: " << check(a).to_string();

    // Batch 0 sends and writes nothing: no pointer is needed.
    EXPECT_TRUE(check_merge(merge, world, 0, shape(0, 1, 16), nullptr, 0, &l).ok());
  }
}

TEST(CpNccl, MergesRefuseANullCommunicator) {
  const NcclMergeArgs a = shape(1, 1, 16);
  for (const auto& status : {
           mlakit::merge_allgather_nccl(nullptr, a, nullptr, 0, nullptr),
           mlakit::merge_heads_nccl(nullptr, a, nullptr, 0, nullptr),
           mlakit::merge_nccl(CpMerge::kHeads, nullptr, a, nullptr, 0, nullptr),
       }) {
    EXPECT_TRUE(is_error(status, StatusCode::kInvalidArgument, "comm",
                         {"an NCCL communicator", "nullptr"}));
  }
  EXPECT_EQ(mlakit::to_string(CpMerge::kAllGather), "allgather");
  EXPECT_EQ(mlakit::to_string(CpMerge::kHeads), "heads");
}

}  // namespace
}  // namespace mlakit_test
