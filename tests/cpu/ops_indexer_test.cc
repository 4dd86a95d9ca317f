// The indexer ops' cpu references (include/mlakit/ops.h) against independent brute-force checks:
// the indexer logits against a float64 brute force, top-k against a stable sort. Plus the argument
// checks. The append ops are in ops_append_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/numeric.h"
#include "cpu_run.h"
#include "mlakit/ops.h"
#include "ops/indexer/indexer.h"
#include "ops/topk/topk.h"
#include "ops_rng.h"

namespace mlakit_test {
namespace {

using mlakit::ops::Device;
namespace ops = mlakit::ops;

// ---------------------------------------------------------------------------------------------
// Indexer logits
// ---------------------------------------------------------------------------------------------

uint8_t random_e4m3(Rng& rng) {
  for (;;) {
    const auto b = static_cast<uint8_t>(rng.below(256));
    if ((b & 0x7f) != 0x7f) return b;  // not NaN
  }
}

TEST(OpsIndexerLogits, MatchesFloat64BruteForce) {
  Rng rng(case_seed());
  struct Case {
    int batch, next_n, heads, page_size;
    std::vector<int32_t> lens;
  };
  const Case cases[] = {
      {4, 1, 64, 64, {0, 1, 63, 200}},
      {3, 2, 64, 16, {1, 2, 77}},
      {2, 4, 8, 1, {3, 40}},
      {1, 3, 128, 32, {129}},
  };
  for (const Case& c : cases) {
    const int64_t max_len = *std::max_element(c.lens.begin(), c.lens.end()) + 5;
    const int64_t bt_stride = (max_len + c.page_size - 1) / c.page_size + 1;
    const int64_t num_pages = c.batch * bt_stride + 2;
    const size_t page_bytes = ops::indexer_page_bytes(c.page_size);
    // Every page NaN-poisoned first (e4m3 NaN keys, NaN scales); the used ones get random data.
    std::vector<uint8_t> cache(num_pages * page_bytes, 0x7f);
    std::vector<int32_t> table(c.batch * bt_stride);
    std::vector<int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.gen);
    int next = 0;
    for (int i = 0; i < c.batch; ++i) {
      for (int64_t pg = 0; pg < bt_stride; ++pg) {
        const bool used = pg * c.page_size < c.lens[i];
        table[i * bt_stride + pg] = used ? perm[next++] : 1 << 30;  // unused: out of range
        if (!used) continue;
        uint8_t* page = cache.data() + table[i * bt_stride + pg] * page_bytes;
        for (int64_t e = 0; e < int64_t{c.page_size} * 128; ++e) page[e] = random_e4m3(rng);
        for (int o = 0; o < c.page_size; ++o) {
          const float s = std::exp(rng.normal()) * 0.01f;
          std::memcpy(page + c.page_size * 128 + 4 * o, &s, 4);
        }
      }
    }
    const int64_t rows = int64_t{c.batch} * c.next_n;
    std::vector<uint8_t> q(rows * c.heads * 128);
    for (auto& b : q) b = random_e4m3(rng);
    std::vector<float> w(rows * c.heads);
    for (auto& x : w) x = rng.normal();
    const int64_t ld = max_len + 3;
    std::vector<float> logits(rows * ld, NAN);

    ops::IndexerLogitsArgs a;
    a.batch = c.batch;
    a.next_n = c.next_n;
    a.heads = c.heads;
    a.q = q.data();
    a.weights = w.data();
    a.index_cache = cache.data();
    a.num_pages = num_pages;
    a.page_size = c.page_size;
    a.block_table = table.data();
    a.block_table_stride = bt_stride;
    a.seq_lens = c.lens.data();
    a.logits = logits.data();
    a.max_len = max_len;
    a.logits_stride = ld;
    const Status s = ops::indexer_logits(Device::kCpu, a);
    ASSERT_TRUE(s.ok()) << s.to_string();

    for (int i = 0; i < c.batch; ++i) {
      for (int t = 0; t < c.next_n; ++t) {
        const int64_t r = int64_t{i} * c.next_n + t;
        for (int64_t j = 0; j < ld; ++j) {
          const float got = logits[r * ld + j];
          if (j >= max_len) {
            EXPECT_TRUE(std::isnan(got)) << "column past max_len written";
            continue;
          }
          // Visible: j <= L - next_n + t.
          if (j > int64_t{c.lens[i]} - c.next_n + t) {
            EXPECT_EQ(got, -std::numeric_limits<float>::infinity()) << i << " " << t << " " << j;
            continue;
          }
          const int32_t page = table[i * bt_stride + j / c.page_size];
          const uint8_t* base = cache.data() + page * page_bytes;
          float scale;
          std::memcpy(&scale, base + c.page_size * 128 + 4 * (j % c.page_size), 4);
          double expect = 0;
          for (int h = 0; h < c.heads; ++h) {
            double dot = 0;
            for (int d = 0; d < 128; ++d) {
              dot += static_cast<double>(mlakit::e4m3_to_float(q[(r * c.heads + h) * 128 + d])) *
                     mlakit::e4m3_to_float(base[(j % c.page_size) * 128 + d]);
            }
            expect += w[r * c.heads + h] * std::max(0.0, dot * scale);
          }
          EXPECT_NEAR(got, expect, 1e-6 * std::fabs(expect) + 1e-30)
              << "row " << r << " position " << j;
        }
      }
    }
  }
}

TEST(OpsIndexerLogits, RefusesBadArgumentsAndCuda) {
  std::vector<uint8_t> q(64 * 128), cache(132 * 64);
  std::vector<float> w(64), logits(100);
  const std::vector<int32_t> table = {0, 5};
  std::vector<int32_t> lens = {100};
  ops::IndexerLogitsArgs a;
  a.batch = 1;
  a.q = q.data();
  a.weights = w.data();
  a.index_cache = cache.data();
  a.num_pages = 1;
  a.block_table = table.data();
  a.block_table_stride = 2;
  a.seq_lens = lens.data();
  a.logits = logits.data();
  a.max_len = 100;
  Status s = ops::indexer_logits(Device::kCpu, a);
  EXPECT_NE(s.message().find("block_table[0, 1]: expected a page id in 0..0, given 5"),
            std::string::npos)
      << s.message();
  lens[0] = 101;
  s = ops::indexer_logits(Device::kCpu, a);
  EXPECT_NE(s.message().find("seq_lens[0]: expected 0..100, given 101"), std::string::npos)
      << s.message();
  a.next_n = 17;
  s = ops::indexer_logits(Device::kCpu, a);
  EXPECT_NE(s.message().find("next_n: expected 1..16, given 17"), std::string::npos) << s.message();
}

// ---------------------------------------------------------------------------------------------
// Top-k
// ---------------------------------------------------------------------------------------------

// The k largest of row[0:n] by a stable sort (ties: lower position), in position order.
std::vector<int64_t> brute_topk(const float* row, int64_t n, int k) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return row[x] > row[y]; });
  order.resize(std::min<int64_t>(n, k));
  std::sort(order.begin(), order.end());
  return order;
}

struct TopkCase {
  int k;
  int next_n;
  int page_size;
  std::vector<int32_t> lens;
  bool ties;  // values from a handful of levels
};

void run_topk_case(const TopkCase& c, Rng& rng) {
  const int batch = static_cast<int>(c.lens.size());
  const int64_t max_len = std::max<int64_t>(1, *std::max_element(c.lens.begin(), c.lens.end()));
  const int64_t bt_stride = (max_len + c.page_size - 1) / c.page_size + 2;
  const int64_t rows = int64_t{batch} * c.next_n;
  const int64_t ld = max_len + 7;
  std::vector<float> logits(rows * ld);
  for (auto& x : logits) {
    x = c.ties ? static_cast<float>(rng.below(5) + 1) : rng.normal();
  }
  std::vector<int32_t> table(batch * bt_stride);
  for (auto& id : table) id = static_cast<int32_t>(rng.below(1000));
  std::vector<int32_t> indices(rows * c.k, 0x7eadbeef), positions(rows * c.k, 0x7eadbeef);
  ops::TopkArgs a;
  a.batch = batch;
  a.next_n = c.next_n;
  a.k = c.k;
  a.logits = logits.data();
  a.max_len = max_len;
  a.logits_stride = ld;
  a.seq_lens = c.lens.data();
  a.block_table = table.data();
  a.block_table_stride = bt_stride;
  a.page_size = c.page_size;
  a.indices = indices.data();
  a.positions = positions.data();
  const Status s = ops::topk_indices(Device::kCpu, a);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int i = 0; i < batch; ++i) {
    for (int t = 0; t < c.next_n; ++t) {
      const int64_t r = int64_t{i} * c.next_n + t;
      const int64_t n = std::clamp<int64_t>(int64_t{c.lens[i]} - c.next_n + 1 + t, 0, c.lens[i]);
      const auto want = brute_topk(logits.data() + r * ld, n, c.k);
      for (int m = 0; m < c.k; ++m) {
        const int64_t p = m < static_cast<int64_t>(want.size()) ? want[m] : -1;
        const int32_t slot =
            p < 0 ? -1
                  : static_cast<int32_t>(table[i * bt_stride + p / c.page_size] * c.page_size +
                                         p % c.page_size);
        ASSERT_EQ(positions[r * c.k + m], p)
            << "k " << c.k << " len " << c.lens[i] << " row " << r << " output " << m;
        ASSERT_EQ(indices[r * c.k + m], slot) << "row " << r << " output " << m;
      }
    }
  }
}

// The op's kernel choice (indexer.h): on sm_90 for the page sizes TMA takes and a 16-byte aligned
// cache, from as many 64-position tiles as the device has SMs, the persistent kernel with up to 64
// heads at next_n 1 to 4 and up to 128 at next_n 1 and 2, with an aligned q; else the pipelined
// kernel; else the copy kernel.
TEST(OpsIndexerLogits, AutoKernelChoice) {
#ifdef MLAKIT_NO_CUDA
  GTEST_SKIP() << "a build without CUDA has no GPU kernels";
#else
  using K = ops::IndexerKernel;
  alignas(16) static const uint8_t cache[32] = {};
  alignas(16) static const uint8_t q[32] = {};
  ops::IndexerLogitsArgs a;
  a.batch = 2;
  a.max_len = 8192;  // 128 tiles a request
  a.page_size = 64;
  a.index_cache = cache;
  a.q = q;
  EXPECT_EQ(ops::indexer_auto_kernel(a, 9, 132), K::kPersistent);
  EXPECT_EQ(ops::indexer_auto_kernel(a, 8, 132), K::kCopy);   // sm_89: mma.sync
  EXPECT_EQ(ops::indexer_auto_kernel(a, 10, 132), K::kCopy);  // sm_100
  a.batch = 1;
  EXPECT_EQ(ops::indexer_auto_kernel(a, 9, 132), K::kCopy);  // 128 tiles, 132 SMs: one short wave
  a.max_len = 8192 + 4 * 64 + 1;                             // 133 tiles
  EXPECT_EQ(ops::indexer_auto_kernel(a, 9, 132), K::kPersistent);
  for (const int ps : {8, 16, 32, 128, 192}) {
    a.page_size = ps;
    EXPECT_EQ(ops::indexer_auto_kernel(a, 9, 132), K::kPersistent) << ps;
  }
  for (const int ps : {1, 4, 24, 48, 100}) {
    a.page_size = ps;
    EXPECT_EQ(ops::indexer_auto_kernel(a, 9, 132), K::kCopy) << ps;
  }
  a.page_size = 64;
  a.index_cache = cache + 4;  // not 16-byte aligned
  EXPECT_EQ(ops::indexer_auto_kernel(a, 9, 132), K::kCopy);
  a.index_cache = cache;
  // next_n 1 and 2 at any size, up to 64 heads.
  a.batch = 128;
  a.max_len = 131072;
  EXPECT_EQ(ops::indexer_auto_kernel(a, 9, 132), K::kPersistent);
  a.next_n = 2;
  for (const int heads : {1, 20, 64}) {
    a.heads = heads;
    EXPECT_EQ(ops::indexer_auto_kernel(a, 9, 132), K::kPersistent) << heads;
  }
  a.batch = 1;
  a.max_len = 32768;
  EXPECT_EQ(ops::indexer_auto_kernel(a, 9, 132), K::kPersistent);
  a.q = q + 4;  // q not 16-byte aligned: no TMA map of the heads
  EXPECT_EQ(ops::indexer_auto_kernel(a, 9, 132), K::kTma);
  a.q = q;
  // next_n 1-4 at any head count up to 128; the pipelined kernel from next_n 5.
  for (const int heads : {64, 65, 128}) {
    a.heads = heads;
    for (const int next_n : {1, 2, 3, 4}) {
      a.next_n = next_n;
      EXPECT_EQ(ops::indexer_auto_kernel(a, 9, 132), K::kPersistent) << next_n << " " << heads;
    }
    for (const int next_n : {5, 16}) {
      a.next_n = next_n;
      EXPECT_EQ(ops::indexer_auto_kernel(a, 9, 132), K::kTma) << next_n << " " << heads;
    }
  }
#endif
}

TEST(OpsTopk, EdgeLengthsAgainstStableSort) {
  Rng rng(case_seed());
  for (const int k : {1, 7, 64}) {
    const std::vector<int32_t> lens = {0, 1, k - 1, k, k + 1, 3 * k + 5, 1000};
    for (const bool ties : {false, true}) {
      run_topk_case({.k = k, .next_n = 1, .page_size = 16, .lens = lens, .ties = ties}, rng);
    }
  }
}

TEST(OpsTopk, CausalRowsAndPageSizes) {
  Rng rng(case_seed());
  for (const int page_size : {1, 64}) {
    for (const int next_n : {2, 4}) {
      run_topk_case({.k = 16,
                     .next_n = next_n,
                     .page_size = page_size,
                     .lens = {0, 2, 16, 17, 18, 500},
                     .ties = true},
                    rng);
    }
  }
  run_topk_case(
      {.k = 2048, .next_n = 1, .page_size = 64, .lens = {2047, 2048, 2049, 20000}, .ties = false},
      rng);
}

TEST(OpsTopk, RefusesBadArguments) {
  std::vector<float> logits(10);
  std::vector<int32_t> lens = {11}, table = {0}, indices(4);
  ops::TopkArgs a;
  a.batch = 1;
  a.k = 4;
  a.logits = logits.data();
  a.max_len = 10;
  a.seq_lens = lens.data();
  a.block_table = table.data();
  a.block_table_stride = 1;
  a.page_size = 16;
  a.indices = indices.data();
  Status s = ops::topk_indices(Device::kCpu, a);
  EXPECT_NE(s.message().find("seq_lens[0]: expected 0..10, given 11"), std::string::npos)
      << s.message();
  lens[0] = 10;
  table[0] = -3;
  s = ops::topk_indices(Device::kCpu, a);
  EXPECT_NE(s.message().find("block_table[0, 0]"), std::string::npos) << s.message();
  a.k = 0;
  s = ops::topk_indices(Device::kCpu, a);
  EXPECT_NE(s.message().find("k: expected 1..65536, given 0"), std::string::npos) << s.message();
  a.k = 4;
  a.page_size = 4;
  s = ops::topk_indices(Device::kCpu, a);
  EXPECT_NE(s.message().find("block_table_stride: expected 3.."), std::string::npos) << s.message();
}

// The multi-block kernel's workspace: 0 where one block a row runs anyway, else enough for the
// plan's regions; the plan's slices cover max_len in whole tiles.
TEST(OpsTopk, WorkspaceBytesAndPlan) {
  ops::TopkArgs a;
  a.batch = 64;
  a.next_n = 2;
  a.k = 2048;
  a.max_len = ops::kTopkMultiMinLen - 1;
  EXPECT_EQ(ops::topk_workspace_bytes(a), 0u);  // short rows: one block a row
  a.max_len = 131072;
  a.k = 131072;
  EXPECT_EQ(ops::topk_workspace_bytes(a), 0u);  // k >= every row: every position kept
  a.k = 2048;
  const size_t bytes = ops::topk_workspace_bytes(a);
  const ops::TopkMultiPlan plan = ops::topk_multi_plan(128, 131072, 2048);
  EXPECT_EQ(bytes, plan.bytes);
  EXPECT_GE(bytes, 128u * (ops::kTopkTopBins * 4 + (ops::kTopkCandidates + 2048) * 8));
  // k of kTopkSortItems and more: only the k-th largest's bin is kept as candidates.
  a.k = ops::kTopkSortItems;
  EXPECT_EQ(ops::topk_workspace_bytes(a),
            ops::topk_multi_plan(128, 131072, ops::kTopkSortItems).bytes);
  EXPECT_EQ(ops::topk_multi_plan(128, 131072, ops::kTopkSortItems).cand_cap, ops::kTopkCandidates);
  // The sort path: k below kTopkSortItems and slices of kTopkSortMinSlice and more.
  EXPECT_TRUE(ops::topk_multi_plan(64, 131072, 2048).keep_above);  // slices of 16384
  EXPECT_EQ(ops::topk_multi_plan(64, 131072, 2048).cand_cap, ops::kTopkCandidates + 2048);
  EXPECT_FALSE(ops::topk_multi_plan(64, 131072, ops::kTopkSortItems).keep_above);
  EXPECT_FALSE(ops::topk_multi_plan(64, 32768, 2048).keep_above);  // slices of 4096
  EXPECT_FALSE(ops::topk_multi_plan(1, 131072, 2048).keep_above);  // 32 slices of 4096
  a.k = 2048;
  a.batch = 0;
  EXPECT_EQ(ops::topk_workspace_bytes(a), 0u);
  a.batch = -1;
  EXPECT_EQ(ops::topk_workspace_bytes(a), 0u);  // out of range: validation names it
  for (const int64_t rows : {1, 2, 3, 7, 64, 100, 511, 512, 513, 4096}) {
    for (const int64_t max_len : {8192, 8193, 16384, 100000, 131072, 262144, 1 << 24}) {
      const int32_t k = rows % 2 == 0 ? 2048 : 8192;
      const ops::TopkMultiPlan p = ops::topk_multi_plan(rows, max_len, k);
      EXPECT_GE(p.slices, 1);
      EXPECT_LE(p.slices, ops::kTopkMaxSlices);
      EXPECT_EQ(p.slice_len % ops::kTopkTile, 0);
      EXPECT_GE(p.slices * p.slice_len, max_len) << rows << " " << max_len;
      EXPECT_LT((p.slices - 1) * p.slice_len, max_len) << rows << " " << max_len;  // none empty
      EXPECT_LE(rows * p.slices, std::max<int64_t>(rows, ops::kTopkTargetBlocks) + rows);
      EXPECT_EQ(p.state_offset % 256, 0u);
      EXPECT_EQ(p.slice_offset % 256, 0u);
      EXPECT_EQ(p.cand_offset % 256, 0u);
      EXPECT_LE(p.clear_bytes, p.slice_offset);
      EXPECT_EQ(p.keep_above, k < ops::kTopkSortItems && p.slice_len >= ops::kTopkSortMinSlice);
      EXPECT_EQ(p.cand_cap, ops::kTopkCandidates + (p.keep_above ? k : 0));
      EXPECT_EQ(p.bytes, p.cand_offset + rows * p.cand_cap * 8);
    }
  }
}

// The cluster kernel's plan: slices of whole tiles that cover max_len, at most kTopkClusterMax
// blocks a row (a power of two), more blocks while the grid is small, none where no row needs a
// selection or a row does not fit.
TEST(OpsTopk, ClusterPlan) {
  constexpr int kSms = 132;
  EXPECT_EQ(ops::topk_cluster_plan(64, 2048, 2048, kSms).cluster, 0);  // every row kept whole
  EXPECT_EQ(ops::topk_cluster_plan(0, 131072, 2048, kSms).cluster, 0);
  const int64_t longest = ops::kTopkClusterMax * ops::kTopkClusterMaxSlice;
  EXPECT_EQ(ops::topk_cluster_plan(1, longest + 1, 2048, kSms).cluster, 0);
  EXPECT_EQ(ops::topk_cluster_plan(1, longest, 2048, kSms).cluster, ops::kTopkClusterMax);
  // The measured shapes: 64 rows of 128K and one row of 128K take 8 blocks of 16K; 64 of 16K
  // take 4 of 4K.
  EXPECT_EQ(ops::topk_cluster_plan(64, 131072, 2048, kSms).cluster, 8);
  EXPECT_EQ(ops::topk_cluster_plan(64, 131072, 2048, kSms).slice_len, 16384);
  EXPECT_EQ(ops::topk_cluster_plan(1, 131072, 2048, kSms).slice_len, 16384);
  EXPECT_EQ(ops::topk_cluster_plan(64, 16384, 2048, kSms).cluster, 4);
  EXPECT_EQ(ops::topk_cluster_plan(512, 16384, 2048, kSms).cluster, 1);
  // The kernel choice where both could run (topk_cluster_preferred): up to 32 rows, or slices of
  // 8K-16K over at most 512 blocks.
  EXPECT_TRUE(ops::topk_cluster_preferred(8, ops::topk_cluster_plan(8, 262144, 2048, kSms)));
  EXPECT_TRUE(ops::topk_cluster_preferred(64, ops::topk_cluster_plan(64, 131072, 2048, kSms)));
  EXPECT_FALSE(ops::topk_cluster_preferred(128, ops::topk_cluster_plan(128, 131072, 2048, kSms)));
  EXPECT_FALSE(ops::topk_cluster_preferred(64, ops::topk_cluster_plan(64, 262144, 2048, kSms)));
  EXPECT_FALSE(ops::topk_cluster_preferred(64, ops::topk_cluster_plan(64, 16384, 2048, kSms)));
  EXPECT_TRUE(ops::topk_cluster_preferred(32, ops::topk_cluster_plan(32, 16384, 2048, kSms)));
  EXPECT_FALSE(ops::topk_cluster_preferred(33, ops::topk_cluster_plan(33, 16384, 2048, kSms)));
  for (const int64_t rows : {1, 2, 7, 64, 100, 513, 4096}) {
    for (const int64_t max_len : {2049, 4096, 10000, 16385, 100000, 131072, 200000, 262144}) {
      const ops::TopkClusterPlan p = ops::topk_cluster_plan(rows, max_len, 2048, kSms);
      ASSERT_GT(p.cluster, 0) << rows << " " << max_len;
      EXPECT_LE(p.cluster, ops::kTopkClusterMax);
      EXPECT_EQ(p.cluster & (p.cluster - 1), 0);
      EXPECT_EQ(p.slice_len % ops::kTopkClusterGrain, 0);
      EXPECT_LE(p.slice_len, ops::kTopkClusterMaxSlice);
      EXPECT_GE(p.cluster * p.slice_len, max_len) << rows << " " << max_len;
      EXPECT_LT((p.cluster - 1) * p.slice_len, max_len) << rows << " " << max_len;  // none empty
    }
  }
}

// The streaming kernel's plan: slices of whole warp steps that cover max_len, none empty, at most
// 64K keys and kTopkStreamClusterMax blocks a row, as many blocks as the device's wave holds, none
// where no row needs a selection, a row does not fit, or k's candidates would crowd the pool.
TEST(OpsTopk, StreamPlan) {
  const ops::TopkWave wave = ops::topk_ideal_wave(264);               // 132 SMs, two blocks each
  EXPECT_EQ(ops::topk_stream_plan(64, 2048, 2048, wave).cluster, 0);  // every row kept whole
  EXPECT_EQ(ops::topk_stream_plan(0, 131072, 2048, wave).cluster, 0);
  const int64_t longest = ops::kTopkStreamClusterMax * ops::kTopkStreamMaxSlice;
  EXPECT_EQ(ops::topk_stream_plan(1, longest + 1, 2048, wave).cluster, 0);
  EXPECT_EQ(ops::topk_stream_plan(1, longest, 2048, wave).cluster, ops::kTopkStreamClusterMax);
  // Rows of 128K: as many blocks as one wave holds.
  EXPECT_EQ(ops::topk_stream_plan(128, 131072, 2048, wave).cluster, 2);
  EXPECT_EQ(ops::topk_stream_plan(64, 131072, 2048, wave).cluster, 4);
  EXPECT_EQ(ops::topk_stream_plan(32, 131072, 2048, wave).cluster, 8);
  EXPECT_EQ(ops::topk_stream_plan(32, 131072, 2048, wave).slice_len, 16384);
  EXPECT_EQ(ops::topk_stream_plan(1, 131072, 2048, wave).cluster, 16);  // slices of 8K
  // A device that runs fewer clusters of 4 and 8 than its blocks allow (an H200's GPCs).
  ops::TopkWave gpcs = wave;
  gpcs.clusters[4] = 62;
  gpcs.clusters[8] = 30;
  EXPECT_EQ(ops::topk_stream_plan(64, 131072, 2048, gpcs).cluster, 3);
  EXPECT_EQ(ops::topk_stream_plan(32, 131072, 2048, gpcs).cluster, 7);
  EXPECT_EQ(ops::topk_stream_plan(30, 131072, 2048, gpcs).cluster, 8);
  // k's candidates (about 1.5 k + 256 a row) within a third of the blocks' pools.
  EXPECT_EQ(ops::topk_stream_plan(1, 131072, 28000, wave).cluster, 16);
  EXPECT_EQ(ops::topk_stream_plan(1, 131072, 30000, wave).cluster, 0);
  EXPECT_EQ(ops::topk_stream_plan(1, 131072, 14000, wave).cluster, 16);
  EXPECT_EQ(ops::topk_stream_plan(32, 131072, 14000, wave).cluster, 8);
  EXPECT_EQ(ops::topk_stream_plan(32, 131072, 15000, wave).cluster, 16);  // pools of 8 too small
  EXPECT_EQ(ops::topk_stream_plan(512, 4096, 2048, wave).cluster, 0);     // one block a row
  for (const int64_t rows : {1, 2, 7, 64, 100, 513, 4096}) {
    for (const int64_t max_len : {2049, 4096, 10000, 16385, 100000, 131072, 200000, 524288}) {
      const ops::TopkClusterPlan p = ops::topk_stream_plan(rows, max_len, 512, wave);
      ASSERT_GT(p.cluster, 0) << rows << " " << max_len;
      EXPECT_LE(p.cluster, ops::kTopkStreamClusterMax);
      EXPECT_EQ(p.slice_len % ops::kTopkStreamGrain, 0);
      EXPECT_LE(p.slice_len, ops::kTopkStreamMaxSlice);
      EXPECT_TRUE(p.cluster == 1 || p.slice_len >= ops::kTopkStreamMinSlice);
      EXPECT_GE(p.cluster * p.slice_len, max_len) << rows << " " << max_len;
      EXPECT_LT((p.cluster - 1) * p.slice_len, max_len) << rows << " " << max_len;  // none empty
      EXPECT_LE(3 * ((3 * 512 / 2 + 256 + p.cluster - 1) / p.cluster), ops::kTopkStreamPool);
    }
  }
}

// The op's kernel: the streaming kernel from 32 rows and 2^20 keys, or where the cluster kernel's
// rows take two waves, where its plan takes the shapes; else the cluster kernel where preferred,
// else the multi-block kernel with a workspace, else one block a row.
TEST(OpsTopk, KernelChoice) {
  using ops::TopkKernel;
  const ops::TopkWave wave = ops::topk_ideal_wave(264);
  // `waves`: the cluster kernel's waves of clusters (topk_cluster_plan_here asks the device).
  const auto choose = [&](int64_t rows, int64_t max_len, bool workspace, int32_t waves = 1) {
    const bool multi = workspace && ops::topk_multi_applies(rows, max_len, 2048);
    ops::TopkClusterPlan cluster = ops::topk_cluster_plan(rows, max_len, 2048, 132);
    cluster.waves = waves;
    return ops::topk_choose(rows, max_len, multi, cluster,
                            ops::topk_stream_plan(rows, max_len, 2048, wave));
  };
  for (const bool workspace : {false, true}) {
    EXPECT_EQ(choose(128, 131072, workspace), TopkKernel::kStream);
    EXPECT_EQ(choose(64, 16384, workspace), TopkKernel::kStream);
    EXPECT_EQ(choose(32, 32768, workspace), TopkKernel::kStream);
    EXPECT_EQ(choose(32, 16384, workspace), TopkKernel::kCluster);  // 2^19 keys
    EXPECT_EQ(choose(8, 262144, workspace), TopkKernel::kCluster);
    EXPECT_EQ(choose(1, 131072, workspace), TopkKernel::kCluster);
  }
  // The cluster kernel's rows in two waves of its clusters: the streaming kernel, below 32 rows
  // and 2^20 keys too.
  EXPECT_EQ(choose(16, 262144, false, 2), TopkKernel::kStream);
  EXPECT_EQ(choose(31, 32768, false, 2), TopkKernel::kStream);
  EXPECT_EQ(choose(31, 32768, false, 1), TopkKernel::kCluster);
  EXPECT_EQ(choose(12, 262144, false, 1), TopkKernel::kCluster);
  EXPECT_EQ(choose(64, 2048, false), TopkKernel::kOneBlock);  // rows of k: no selection
  // Rows past both cluster kernels.
  EXPECT_EQ(choose(64, int64_t{1} << 21, true), TopkKernel::kMultiBlock);
  EXPECT_EQ(choose(64, int64_t{1} << 21, false), TopkKernel::kOneBlock);
  EXPECT_STREQ(ops::topk_kernel_name(TopkKernel::kStream), "stream");
}

// A workspace is checked on either device (kCpu ignores it otherwise): its size and alignment,
// by name; a big enough one changes nothing of the cpu result.
TEST(OpsTopk, ChecksTheWorkspace) {
  Rng rng(case_seed());
  const int64_t len = ops::kTopkMultiMinLen + 100;
  std::vector<float> logits(len);
  for (auto& x : logits) x = rng.normal();
  std::vector<int32_t> lens = {static_cast<int32_t>(len)}, table(len / 64 + 1);
  for (auto& id : table) id = static_cast<int32_t>(rng.below(1000));
  std::vector<int32_t> plain(64), with(64, -5);
  ops::TopkArgs a;
  a.batch = 1;
  a.k = 64;
  a.logits = logits.data();
  a.max_len = len;
  a.seq_lens = lens.data();
  a.block_table = table.data();
  a.block_table_stride = static_cast<int64_t>(table.size());
  a.page_size = 64;
  a.indices = plain.data();
  ASSERT_TRUE(ops::topk_indices(Device::kCpu, a).ok());
  const size_t needed = ops::topk_workspace_bytes(a);
  ASSERT_GT(needed, 0u);
  std::vector<char> ws(needed + 512);
  char* aligned = ws.data() + (256 - reinterpret_cast<uintptr_t>(ws.data()) % 256) % 256;
  a.indices = with.data();
  a.workspace = aligned;
  a.workspace_size = needed - 1;
  Status s = ops::topk_indices(Device::kCpu, a);
  EXPECT_NE(s.message().find(mlakit::str_cat("workspace_size: expected at least ", needed,
                                             " (topk_workspace_bytes), given ", needed - 1)),
            std::string::npos)
      << s.message();
  a.workspace = aligned + 4;
  a.workspace_size = needed;
  s = ops::topk_indices(Device::kCpu, a);
  EXPECT_NE(s.message().find("workspace: expected a 256-byte aligned address"), std::string::npos)
      << s.message();
  a.workspace = aligned;
  s = ops::topk_indices(Device::kCpu, a);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(with, plain);
}

}  // namespace
}  // namespace mlakit_test
