// GPU tests of the top-k kernels (src/ops/topk/topk.cu: one block a row; topk_multi.cu: several
// blocks a row with a workspace; topk_cluster.cu and topk_stream.cu: a thread-block cluster a
// row, sm_90) against the cpu reference, bit for bit: k 1..65536, rows from 0 to 512K long
// (lengths 0, 1, k-1, k, k+1, ties, crowded and rising values, next_n 1..4), NaN-poisoned logits
// past each row's length and outputs poisoned before each run, the multi-block, cluster and
// streaming kernels replayed from a CUDA graph with new lengths; with TopkArgs::deterministic
// false, a valid top-k (the same kept values, any order). (Both ops in one graph: ops_test.cc.)
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "mlakit/ops.h"
#include "ops/topk/topk.h"
#include "ops_test_util.h"
#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

using ops::Device;

// Runs `launch` (a CUDA top-k of `a`'s shapes) `runs` times on poisoned outputs, each result
// equal to the cpu reference bit for bit.
template <typename Launch>
void expect_kernel_equal(const char* kernel, const TopkInputs& in, Launch&& launch, int runs,
                         DeviceVec<int32_t>& d_idx, DeviceVec<int32_t>& d_pos,
                         const std::vector<int32_t>& cpu_idx, const std::vector<int32_t>& cpu_pos) {
  for (int run = 0; run < runs; ++run) {
    d_idx.upload(std::vector<int32_t>(cpu_idx.size(), 0x7eadbeef));
    d_pos.upload(std::vector<int32_t>(cpu_pos.size(), 0x7eadbeef));
    MLAKIT_ASSERT_OK(launch());
    MLAKIT_ASSERT_CUDA(cudaDeviceSynchronize());
    EXPECT_TRUE(d_idx.download() == cpu_idx)
        << kernel << " run " << run << ": k " << in.k << " max_len " << in.max_len << " batch "
        << in.batch << " next_n " << in.next_n << " ld " << in.ld;
    EXPECT_TRUE(d_pos.download() == cpu_pos)
        << kernel << " run " << run << ": k " << in.k << " max_len " << in.max_len << " batch "
        << in.batch << " next_n " << in.next_n << " ld " << in.ld;
  }
}

// Runs `launch` (a CUDA top-k of `a`'s shapes with TopkArgs::deterministic false) `runs` times on
// poisoned outputs; each row is a valid top-k of the cpu reference's: the same padding, its kept
// positions distinct, inside the row's valid length, each with the slot the block table gives
// it, and their logits the same multiset as the reference's (ties may keep other positions; the
// order is free).
template <typename Launch>
void expect_unordered_valid(const char* kernel, const TopkInputs& in, Launch&& launch, int runs,
                            DeviceVec<int32_t>& d_idx, DeviceVec<int32_t>& d_pos,
                            const std::vector<int32_t>& cpu_pos) {
  const int k = in.k;
  for (int run = 0; run < runs; ++run) {
    d_idx.upload(std::vector<int32_t>(cpu_pos.size(), 0x7eadbeef));
    d_pos.upload(std::vector<int32_t>(cpu_pos.size(), 0x7eadbeef));
    MLAKIT_ASSERT_OK(launch());
    MLAKIT_ASSERT_CUDA(cudaDeviceSynchronize());
    const std::vector<int32_t> idx = d_idx.download(), pos = d_pos.download();
    int bad_rows = 0;
    for (int64_t r = 0; r < int64_t{in.batch} * in.next_n; ++r) {
      const int i = static_cast<int>(r / in.next_n);
      const int t = static_cast<int>(r % in.next_n);
      // The row's valid length: a kept position outside it (or a poisoned one) fails the row
      // before anything is indexed with it.
      const int64_t n = ops::topk_row_length(in.lens[i], in.next_n, t);
      std::vector<int32_t> got(pos.begin() + r * k, pos.begin() + (r + 1) * k);
      std::vector<int32_t> want(cpu_pos.begin() + r * k, cpu_pos.begin() + (r + 1) * k);
      const auto padding = std::count(want.begin(), want.end(), -1);
      bool ok = true;
      for (int j = 0; j < k && ok; ++j) {
        const int32_t p = got[j];
        ok = p == -1 || (p >= 0 && p < n);
        if (!ok) break;
        const int32_t slot =
            p < 0 ? -1
                  : in.table[i * in.bt_stride + p / in.page_size] * in.page_size + p % in.page_size;
        ok = idx[r * k + j] == slot;
      }
      std::sort(got.begin(), got.end());
      ok = ok && std::adjacent_find(got.begin(), got.end(), [](int32_t x, int32_t y) {
                   return x == y && x >= 0;
                 }) == got.end();
      std::vector<float> got_v, want_v;
      for (int j = 0; j < k && ok; ++j) {
        // As many -1 as the reference (sorted, they come first).
        ok = (got[j] < 0) == (padding > j);
        if (got[j] >= 0) got_v.push_back(in.logits[r * in.ld + got[j]]);
      }
      for (const int32_t p : want) {
        if (p >= 0) want_v.push_back(in.logits[r * in.ld + p]);
      }
      std::sort(got_v.begin(), got_v.end());
      std::sort(want_v.begin(), want_v.end());
      ok = ok && got_v.size() == want_v.size() &&
           std::equal(got_v.begin(), got_v.end(), want_v.begin(),
                      [](float x, float y) { return std::memcmp(&x, &y, sizeof(x)) == 0; });
      bad_rows += !ok;
    }
    EXPECT_EQ(bad_rows, 0) << kernel << " run " << run << ": k " << in.k << " max_len "
                           << in.max_len << " batch " << in.batch << " next_n " << in.next_n;
  }
}

// Every CUDA kernel that takes the shapes, each equal to the cpu reference bit for bit: the op
// without a workspace (topk_choose), one block a row by itself, the cluster and the streaming
// kernels by themselves where their plans take the shapes (twice each), and where the shapes
// take it (`multi_block`, asserted) the op with a workspace and the multi-block kernel by itself
// (the workspace poisoned first and used twice).
void expect_topk_equal(const TopkInputs& in, bool multi_block) {
  const size_t out = static_cast<size_t>(in.batch) * in.next_n * in.k;
  std::vector<int32_t> cpu_idx(out), cpu_pos(out);
  MLAKIT_ASSERT_OK(
      ops::topk_indices(Device::kCpu, topk_args(in, in.logits.data(), in.lens.data(),
                                                in.table.data(), cpu_idx.data(), cpu_pos.data())));
  DeviceVec<float> d_logits(in.logits);
  DeviceVec<int32_t> d_lens(in.lens), d_table(in.table);
  DeviceVec<int32_t> d_idx(std::vector<int32_t>(out, 0)), d_pos(std::vector<int32_t>(out, 0));
  ops::TopkArgs a = topk_args(in, d_logits.ptr, d_lens.ptr, d_table.ptr, d_idx.ptr, d_pos.ptr);
  auto check = [&](const char* kernel, int runs, auto&& launch) {
    expect_kernel_equal(kernel, in, launch, runs, d_idx, d_pos, cpu_idx, cpu_pos);
  };
  check("op", 1, [&] { return ops::topk_indices(Device::kCuda, a); });
  check("one block", 1, [&] { return ops::topk_indices_one_block(a, in.ld, nullptr); });
  ops::TopkClusterPlan plan;
  MLAKIT_ASSERT_OK(ops::topk_cluster_plan_here(a, &plan));
  if (plan.cluster > 0) {
    check("cluster", 2, [&] { return ops::topk_indices_cluster(a, in.ld, nullptr); });
  }
  MLAKIT_ASSERT_OK(ops::topk_stream_plan_here(a, &plan));
  if (plan.cluster > 0) {
    check("stream", 2, [&] { return ops::topk_indices_stream(a, in.ld, nullptr); });
  }
  const size_t bytes = ops::topk_workspace_bytes(a);
  ASSERT_EQ(bytes > 0, multi_block) << "max_len " << in.max_len << " k " << in.k;
  if (!multi_block) return;
  DeviceVec<uint8_t> d_ws(std::vector<uint8_t>(bytes, 0xa5));
  a.workspace = d_ws.ptr;
  a.workspace_size = bytes;
  check("op with a workspace", 1, [&] { return ops::topk_indices(Device::kCuda, a); });
  check("multi-block", 2, [&] { return ops::topk_indices_multi(a, in.ld, nullptr); });
  // TopkArgs::deterministic false: the multi-block kernel (its sort path unsorted) and the op.
  a.deterministic = false;
  expect_unordered_valid(
      "multi-block, deterministic false", in,
      [&] { return ops::topk_indices_multi(a, in.ld, nullptr); }, 2, d_idx, d_pos, cpu_pos);
  expect_unordered_valid(
      "op with a workspace, deterministic false", in,
      [&] { return ops::topk_indices(Device::kCuda, a); }, 1, d_idx, d_pos, cpu_pos);
}

TEST(OpsGpu, TopkEqualsCpuEdges) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(103);
  for (const int k : {1, 64, 512, 2048}) {
    for (const TopkValues values : {TopkValues::kNormal, TopkValues::kTies}) {
      // max_len 8191: below kTopkMultiMinLen, one block a row only.
      expect_topk_equal(make_topk(rng, k, 1, 64, {0, 1, k - 1, k, k + 1, 3 * k + 5, 8191}, values),
                        false);
    }
  }
}

TEST(OpsGpu, TopkEqualsCpuLongAndCausal) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(104);
  // One 128K row among short ones; page sizes 1 and 64; MTP rows.
  expect_topk_equal(make_topk(rng, 2048, 1, 64, {131072, 100, 2049, 70000}, TopkValues::kNormal),
                    true);
  expect_topk_equal(make_topk(rng, 2048, 1, 1, {131072, 5000}, TopkValues::kTies), true);
  for (const int next_n : {2, 4}) {
    expect_topk_equal(
        make_topk(rng, 512, next_n, 16, {0, 1, 513, 514, 515, 40000}, TopkValues::kNormal), true);
  }
}

// The multi-block kernel (topk_multi.cu) on rows of 16K-256K: k 512/1024/2048, lengths 0, 1,
// k-1, k, k+1 among long ones, normal values (the candidate buffer and the sort path), ties from 5
// levels and crowded distinct values (a bin too big for the buffer: the refine reads the row),
// rows 16-byte aligned (float4 loads) or not, batch 1 and 64, MTP rows, page sizes 1, 16 and 64.
TEST(OpsGpu, TopkMultiBlockEqualsCpu) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(106);
  for (const int k : {512, 1024, 2048}) {
    for (const TopkValues values : {TopkValues::kNormal, TopkValues::kTies, TopkValues::kCrowded}) {
      for (const int ld_extra : {5, 4}) {
        expect_topk_equal(
            make_topk(rng, k, 1, 64, {0, 1, k - 1, k, k + 1, 16384, 16385, 65539, 131072}, values,
                      ld_extra),
            true);
      }
    }
  }
  // Batch 64 at 128K (normal, aligned) and at 32K (ties, lengths spread over k+1..32K).
  expect_topk_equal(
      make_topk(rng, 2048, 1, 64, std::vector<int32_t>(64, 131072), TopkValues::kNormal, 4), true);
  std::vector<int32_t> spread(64);
  for (auto& len : spread) len = static_cast<int32_t>(1025 + rng.below(32768 - 1025 + 1));
  spread[0] = 32768;
  expect_topk_equal(make_topk(rng, 1024, 1, 16, spread, TopkValues::kTies, 4), true);
  // Batch 64 at 128K with values on a 1/256 grid: the sort path with tens of keys equal to the
  // k-th largest (ties by position; with deterministic false, any of them).
  expect_topk_equal(
      make_topk(rng, 2048, 1, 64, std::vector<int32_t>(64, 131072), TopkValues::kCoarse, 4), true);
  // Batch 1 at 256K: the most slices a row.
  expect_topk_equal(make_topk(rng, 2048, 1, 64, {262144}, TopkValues::kNormal, 4), true);
  expect_topk_equal(make_topk(rng, 512, 1, 64, {262144}, TopkValues::kTies, 5), true);
  expect_topk_equal(make_topk(rng, 1024, 1, 1, {262143}, TopkValues::kCrowded, 5), true);
  // MTP rows: next_n 2..4, the causal lengths around k.
  for (const int next_n : {2, 3, 4}) {
    for (const int k : {512, 2048}) {
      for (const int page_size : {1, 16}) {
        expect_topk_equal(
            make_topk(rng, k, next_n, page_size, {0, 1, k - 1, k, k + 1, k + 2, 20000, 131072},
                      next_n == 3 ? TopkValues::kTies : TopkValues::kNormal, next_n == 2 ? 4 : 5),
            true);
      }
    }
  }
}

// Rising values: every kept key of a row in its last slice. 64 rows of up to 128K keep the keys
// above the k-th largest's bin as candidates (slices of 16K); at k 2048 their last slice's block
// has more candidates than it stages in shared memory (it appends the rest itself), at k 512 not;
// 3 rows take the slice walk without them. In scripts/sanitize.sh's memcheck and racecheck
// sweeps.
TEST(OpsGpu, TopkMultiBlockRising) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(108);
  std::vector<int32_t> lens(64, 131072);
  lens[1] = 70000;
  lens[2] = 16384;
  lens[3] = 2049;
  lens[4] = 0;
  for (const int k : {512, 2048}) {
    expect_topk_equal(make_topk(rng, k, 1, 64, lens, TopkValues::kRising, 4), true);
  }
  expect_topk_equal(make_topk(rng, 2048, 1, 64, {131072, 70000, 16384}, TopkValues::kRising, 4),
                    true);
}

// Rows whose plan keeps the keys above the k-th largest's bin as candidates (slices of 16K) but
// whose refine declines the sort path and takes the slice walk: ties from 5 levels (more keys
// equal to T than one sort holds), crowded values (bin B larger than the buffer: the refine reads
// the row), and rows of 22000 with ties (a slice stages more than its shared memory holds).
TEST(OpsGpu, TopkSortPathFallsBack) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(110);
  ASSERT_TRUE(ops::topk_multi_plan(64, 131072, 2048).keep_above);
  for (const TopkValues values : {TopkValues::kTies, TopkValues::kCrowded}) {
    expect_topk_equal(make_topk(rng, 2048, 1, 64, std::vector<int32_t>(64, 131072), values, 4),
                      true);
  }
  std::vector<int32_t> lens(64, 22000);
  lens[0] = 131072;
  expect_topk_equal(make_topk(rng, 2048, 1, 64, lens, TopkValues::kTies, 4), true);
}

// The multi-block kernel (by itself: the op picks a cluster kernel for these shapes on sm_90)
// captured in a CUDA graph (its workspace cleared inside the graph) and replayed with new lengths.
TEST(OpsGpu, TopkMultiBlockGraphReplay) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(107);
  StreamHolder stream;
  TopkInputs in = make_topk(rng, 2048, 2, 64, {40000, 300, 16384}, TopkValues::kNormal, 4);
  TopkDeviceInputs d(rng, in);
  ops::TopkArgs a = d.args(in);
  const size_t bytes = ops::topk_workspace_bytes(a);
  ASSERT_GT(bytes, 0u);
  DeviceVec<uint8_t> d_ws(std::vector<uint8_t>(bytes, 0xa5));
  a.workspace = d_ws.ptr;
  a.workspace_size = bytes;
  replay_topk_with_new_lengths(
      in, a, d.lens, d.idx, d.pos, stream.stream,
      {{40000, 300, 16384}, {0, 2050, 39999}, {2048, 1, 20000}, {40000, 40000, 40000}},
      [&](cudaStream_t s) { return ops::topk_indices_multi(a, in.ld, s); });
}

// The lengths of the replays of `full` (rows of 128K): full rows; a quarter of the rows below
// k + 1 and the rest long; rows of 16000; full rows again.
std::vector<std::vector<int32_t>> lengths_of_replays(Rng& rng, const std::vector<int32_t>& full) {
  std::vector<int32_t> mixed(full.size());
  for (size_t i = 0; i < mixed.size(); ++i) {
    mixed[i] = static_cast<int32_t>(i % 4 == 0 ? rng.below(2049) : 2049 + rng.below(131072 - 2048));
  }
  return {full, mixed, std::vector<int32_t>(full.size(), 16000), full};
}

// The same on the sort path (48 rows of up to 128K: 11 slices of 12288), the lengths changed
// between replays (rows below k, rows of two slices, full rows).
TEST(OpsGpu, TopkSortPathGraphReplay) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(109);
  StreamHolder stream;
  std::vector<int32_t> full(48, 131072);
  TopkInputs in = make_topk(rng, 2048, 1, 64, full, TopkValues::kNormal, 4);
  TopkDeviceInputs d(rng, in);
  ops::TopkArgs a = d.args(in);
  ASSERT_TRUE(ops::topk_multi_plan(48, 131072, 2048).keep_above);
  const size_t bytes = ops::topk_workspace_bytes(a);
  DeviceVec<uint8_t> d_ws(std::vector<uint8_t>(bytes, 0xa5));
  a.workspace = d_ws.ptr;
  a.workspace_size = bytes;
  replay_topk_with_new_lengths(
      in, a, d.lens, d.idx, d.pos, stream.stream, lengths_of_replays(rng, full),
      [&](cudaStream_t s) { return ops::topk_indices_multi(a, in.ld, s); });
}

// expect_topk_equal with the multi-block kernel wherever it takes the shapes; asserts on an sm_90
// device that `plan_here` (topk_cluster_plan_here or topk_stream_plan_here) takes them.
template <typename PlanHere>
void expect_planned_equal(const TopkInputs& in, PlanHere&& plan_here) {
  int device = 0, major = 0;
  MLAKIT_ASSERT_CUDA(cudaGetDevice(&device));
  MLAKIT_ASSERT_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major == 9) {
    ops::TopkClusterPlan plan;
    MLAKIT_ASSERT_OK(plan_here(topk_args(in, nullptr, nullptr, nullptr, nullptr, nullptr), &plan));
    ASSERT_GT(plan.cluster, 0) << "max_len " << in.max_len << " k " << in.k;
  }
  expect_topk_equal(in, ops::topk_multi_applies(int64_t{in.batch} * in.next_n, in.max_len, in.k));
}

void expect_cluster_equal(const TopkInputs& in) {
  expect_planned_equal(in, ops::topk_cluster_plan_here);
}

// The cluster kernel (topk_cluster.cu) at every cluster size (1 to 8 blocks a row: rows of 2049
// to 256K, batch 1 to 200), k 1 to 65536 (with ties, the kept keys equal to T span blocks),
// lengths 0, 1, k-1, k, k+1 among long rows (blocks whose slice is empty), normal, tied, crowded
// and rising values, values whose k-th largest lies far below the largest (kSpread), samples that
// misjudge the row, rows 16-byte aligned or not, MTP rows, page sizes 1, 16 and 64.
TEST(OpsGpu, TopkClusterEqualsCpu) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(111);
  for (const int32_t len : {2049, 6000, 8192, 16384, 16385, 40000, 65536, 131072, 200003, 262144}) {
    for (const int ld_extra : {4, 5}) {
      expect_cluster_equal(make_topk(rng, 2048, 1, 64, {len}, TopkValues::kNormal, ld_extra));
    }
  }
  for (const int k : {1, 7, 100, 4096, 20000, 65536}) {
    for (const TopkValues values : {TopkValues::kNormal, TopkValues::kTies}) {
      expect_cluster_equal(make_topk(rng, k, 1, 64, {131072, k + 1, 70001}, values, 4));
    }
  }
  for (const TopkValues values : {TopkValues::kTies, TopkValues::kCrowded, TopkValues::kRising}) {
    std::vector<int32_t> lens(64, 32768);
    lens[1] = 0, lens[2] = 1, lens[3] = 2047, lens[4] = 2048, lens[5] = 2049, lens[6] = 16385;
    expect_cluster_equal(make_topk(rng, 2048, 1, 64, lens, values, 5));
  }
  expect_cluster_equal(
      make_topk(rng, 1024, 1, 16, std::vector<int32_t>(200, 16384), TopkValues::kNormal, 4));
  for (const int k : {512, 2048}) {
    expect_cluster_equal(
        make_topk(rng, k, 1, 64, std::vector<int32_t>(64, 131072), TopkValues::kRising, 4));
  }
  expect_cluster_equal(make_topk(rng, 1024, 1, 1, {262143}, TopkValues::kCrowded, 5));
  // The later rounds' picks (1024 bins) by groups: T's bin holds 32K keys, T about 512 bins below
  // the top of it.
  expect_cluster_equal(make_topk(rng, 16384, 1, 1, {262143}, TopkValues::kCrowded, 5));
  for (const int k : {512, 2048}) {
    expect_cluster_equal(make_topk(rng, k, 1, 64, {32768, 131072, 5000}, TopkValues::kSpread, 4));
  }
  // A sample that misjudges the row (fewer than k keys at or above its bound: the fallback), and
  // one that judges it right (k below n / 16).
  expect_cluster_equal(make_topk(rng, 16384, 1, 64, {131072, 131000}, TopkValues::kSampleTrap, 4));
  expect_cluster_equal(make_topk(rng, 4096, 2, 16, {40000, 5000}, TopkValues::kSampleTrap, 5));
  expect_cluster_equal(make_topk(rng, 2048, 1, 64, {131072}, TopkValues::kSampleTrap, 4));
  for (const int next_n : {2, 3, 4}) {
    for (const int page_size : {1, 16}) {
      expect_cluster_equal(
          make_topk(rng, 512, next_n, page_size, {0, 1, 511, 512, 513, 514, 20000, 131072},
                    next_n == 3 ? TopkValues::kTies : TopkValues::kNormal, next_n == 2 ? 4 : 5));
    }
  }
}

// Rows longer than the cluster kernel takes (kTopkClusterMax slices of kTopkClusterMaxSlice):
// the op runs the multi-block kernel with a workspace, one block a row without.
TEST(OpsGpu, TopkPastTheClusterKernel) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(112);
  const auto longest = static_cast<int32_t>(ops::kTopkClusterMax * ops::kTopkClusterMaxSlice);
  TopkInputs in = make_topk(rng, 2048, 1, 64, {longest + 1, 5000}, TopkValues::kNormal, 4);
  ops::TopkClusterPlan plan;
  MLAKIT_ASSERT_OK(ops::topk_cluster_plan_here(
      topk_args(in, nullptr, nullptr, nullptr, nullptr, nullptr), &plan));
  EXPECT_EQ(plan.cluster, 0);
  expect_topk_equal(in, true);
}

// The cluster kernel captured in a CUDA graph and replayed with new
// lengths: rows below k, rows that leave blocks of the cluster empty, full rows.
TEST(OpsGpu, TopkClusterGraphReplay) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(113);
  StreamHolder stream;
  std::vector<int32_t> full(48, 131072);
  TopkInputs in = make_topk(rng, 2048, 1, 64, full, TopkValues::kNormal, 4);
  TopkDeviceInputs d(rng, in);
  const ops::TopkArgs a = d.args(in);
  replay_topk_with_new_lengths(
      in, a, d.lens, d.idx, d.pos, stream.stream, lengths_of_replays(rng, full),
      [&](cudaStream_t s) { return ops::topk_indices_cluster(a, in.ld, s); });
}

void expect_stream_equal(const TopkInputs& in) {
  expect_planned_equal(in, ops::topk_stream_plan_here);
}

// The streaming kernel (topk_stream.cu) at 1 to 16 blocks a row (rows of 2049 to 512K, batch 1 to
// 256), k 1 to 12000, lengths 0, 1, k-1, k, k+1 among long rows, normal, tied, crowded and rising
// values (one warp's candidates over many chunks), a candidate pool that runs out (tied values:
// every block walks its slice again), values whose k-th largest lies far below the largest
// (kSpread), samples that misjudge the row (the fallback), rows 16-byte aligned or not, MTP rows,
// page sizes 1, 16 and 64.
TEST(OpsGpu, TopkStreamEqualsCpu) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(114);
  for (const int32_t len : {2049, 6000, 16385, 40000, 131072, 200003, 524288}) {
    for (const int ld_extra : {4, 5}) {
      expect_stream_equal(make_topk(rng, 1024, 1, 64, {len}, TopkValues::kNormal, ld_extra));
    }
  }
  for (const int batch : {8, 32, 64, 128, 256}) {
    expect_stream_equal(
        make_topk(rng, 2048, 1, 64, std::vector<int32_t>(batch, 131072), TopkValues::kNormal, 4));
  }
  for (const int k : {1, 7, 100, 512, 4096, 12000}) {
    for (const TopkValues values : {TopkValues::kNormal, TopkValues::kTies}) {
      expect_stream_equal(make_topk(rng, k, 1, 64, {131072, k + 1, 70001}, values, 4));
    }
  }
  for (const TopkValues values : {TopkValues::kTies, TopkValues::kCrowded, TopkValues::kRising}) {
    std::vector<int32_t> lens(64, 32768);
    lens[1] = 0, lens[2] = 1, lens[3] = 2047, lens[4] = 2048, lens[5] = 2049, lens[6] = 16385;
    expect_stream_equal(make_topk(rng, 2048, 1, 64, lens, values, 5));
  }
  for (const int k : {512, 2048}) {
    expect_stream_equal(
        make_topk(rng, k, 1, 64, {32768, 131072, 5000, 32768}, TopkValues::kSpread, 4));
  }
  // The later rounds' picks (1024 bins) by groups: T's bin holds 16K keys, T about 256 bins below
  // the top of it.
  expect_stream_equal(make_topk(rng, 4096, 1, 64, {131072, 131072}, TopkValues::kCrowded, 4));
  // Slices of 64K with a fifth of their keys tied at the top: more candidates than the pool holds.
  expect_stream_equal(
      make_topk(rng, 2048, 1, 64, std::vector<int32_t>(128, 131072), TopkValues::kTies, 4));
  // Samples that misjudge the row: fewer than k keys at or above the bound (the fallback), and
  // enough of them.
  expect_stream_equal(make_topk(rng, 12000, 1, 64, {131072, 131000}, TopkValues::kStreamTrap, 4));
  expect_stream_equal(make_topk(rng, 4096, 2, 16, {40000, 5000}, TopkValues::kStreamTrap, 5));
  expect_stream_equal(make_topk(rng, 2048, 1, 64, {131072}, TopkValues::kStreamTrap, 4));
  for (const int next_n : {2, 4}) {
    for (const int page_size : {1, 16}) {
      expect_stream_equal(make_topk(rng, 512, next_n, page_size,
                                    {0, 1, 511, 512, 513, 514, 20000, 131072}, TopkValues::kNormal,
                                    next_n == 2 ? 4 : 5));
    }
  }
}

// The streaming kernel captured in a CUDA graph and replayed with new lengths (as the cluster
// kernel's test), and the op where it picks it.
TEST(OpsGpu, TopkStreamGraphReplay) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(115);
  StreamHolder stream;
  std::vector<int32_t> full(64, 131072);
  TopkInputs in = make_topk(rng, 2048, 1, 64, full, TopkValues::kNormal, 4);
  TopkDeviceInputs d(rng, in);
  const ops::TopkArgs a = d.args(in);
  ops::TopkClusterPlan plan;
  MLAKIT_ASSERT_OK(ops::topk_stream_plan_here(a, &plan));
  if (plan.cluster == 0) GTEST_SKIP() << "no streaming kernel on this device";
  replay_topk_with_new_lengths(
      in, a, d.lens, d.idx, d.pos, stream.stream, lengths_of_replays(rng, full),
      [&](cudaStream_t s) { return ops::topk_indices_stream(a, in.ld, s); });
  replay_topk_with_new_lengths(in, a, d.lens, d.idx, d.pos, stream.stream,
                               lengths_of_replays(rng, full));
}

// A process's first top-k call inside a capture of global mode (PyTorch's default): the streaming
// kernel's plan asks the device for its cluster occupancy then. The capture survives, the answer
// is kept for the next calls, and the replays equal the cpu reference.
TEST(OpsGpu, TopkFirstCallInsideGlobalCapture) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(116);
  StreamHolder stream;
  std::vector<int32_t> full(64, 32768);
  TopkInputs in = make_topk(rng, 2048, 1, 64, full, TopkValues::kNormal, 4);
  TopkDeviceInputs d(rng, in);
  const ops::TopkArgs a = d.args(in);
  ops::topk_forget_occupancy();
  replay_topk_with_new_lengths(in, a, d.lens, d.idx, d.pos, stream.stream,
                               {full, std::vector<int32_t>(64, 20000)}, nullptr,
                               cudaStreamCaptureModeGlobal);
  int device = 0, major = 0;
  MLAKIT_ASSERT_CUDA(cudaGetDevice(&device));
  MLAKIT_ASSERT_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major == 9) {  // asked inside the capture (relaxed mode), answered, kept
    EXPECT_TRUE(ops::topk_stream_wave_known(device));
    ops::TopkKernel kernel;
    ops::TopkClusterPlan plan;
    MLAKIT_ASSERT_OK(ops::topk_choose_here(a, false, &kernel, &plan));
    EXPECT_EQ(kernel, ops::TopkKernel::kStream);
  }
}

}  // namespace
}  // namespace mlakit::testing
