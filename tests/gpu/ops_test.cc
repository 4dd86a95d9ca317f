// GPU tests of the ops' CUDA kernels (src/ops/append/append.cu, src/ops/indexer/indexer.cu; the
// top-k's in ops_topk_test.cc) against their cpu references, which tests/cpu/ops_test.cc checks:
// equal bit for bit (the indexer: within float accumulation error). Cache append in
// every layout (dense bf16/fp16/e4m3 with the scale by value and by pointer, V3.2 blockwise, V4,
// the indexer cache with both scale rules), page sizes 1..128, -1 slots and slots out of range
// (skipped); the indexer's logits; outputs poisoned before each run; append and top-k captured in
// a CUDA graph and replayed with new lengths and slot mappings.
#include "mlakit/ops.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/check.h"
#include "core/numeric.h"
#include "ops/indexer/indexer.h"
#include "ops_test_util.h"
#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

using ops::Device;

constexpr uint8_t kPattern = 0x5a;

std::vector<uint16_t> random_rows(Rng& rng, int64_t n, int64_t width, DType dtype) {
  std::vector<uint16_t> v(n * width);
  const float magnitudes[] = {1.0f, 1e-3f, 37.0f, 1e-6f, 300.0f};
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t d = 0; d < width; ++d) {
      const float x = t % 7 == 3 && d < 64 ? 0.0f : rng.normal() * magnitudes[t % 5];
      v[t * width + d] = dtype == DType::kBF16 ? float_to_bf16(x) : float_to_fp16(x);
    }
  }
  return v;
}

// n slots: distinct random ones, every fourth -1, every ninth out of range (the kernel skips it;
// the cpu reference, which refuses it, is given -1 there).
void random_slots(Rng& rng, int64_t n, int64_t tokens, std::vector<int64_t>* gpu,
                  std::vector<int64_t>* cpu) {
  std::vector<int64_t> all(tokens);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng.gen);
  gpu->assign(all.begin(), all.begin() + n);
  for (int64_t t = 3; t < n; t += 4) (*gpu)[t] = -1;
  *cpu = *gpu;
  for (int64_t t = 5; t < n; t += 9) {
    (*gpu)[t] = t % 2 ? tokens + t : -2 - t;
    (*cpu)[t] = -1;
  }
}

struct Layout {
  DType cache_dtype;
  KvLayout layout;
  DType input;
  bool scale_ptr;
};

TEST(OpsGpu, AppendKvEqualsCpu) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(101);
  const Layout layouts[] = {
      {DType::kBF16, KvLayout::kDense, DType::kBF16, false},
      {DType::kFP16, KvLayout::kDense, DType::kFP16, false},
      {DType::kFP16, KvLayout::kDense, DType::kBF16, false},
      {DType::kFP8E4M3, KvLayout::kDense, DType::kBF16, false},
      {DType::kFP8E4M3, KvLayout::kDense, DType::kFP16, true},
      {DType::kFP8E4M3, KvLayout::kFp8Blockwise, DType::kBF16, false},
      {DType::kFP8E4M3, KvLayout::kFp8Blockwise, DType::kFP16, false},
      {DType::kFP8E4M3, KvLayout::kFp8V4, DType::kBF16, false},
  };
  for (const Layout& l : layouts) {
    for (const int page_size : {1, 16, 64, 128}) {
      for (const int64_t n_tokens : {int64_t{1}, int64_t{5}, int64_t{300}}) {
        const int d_qk = layout_d_qk(l.layout);
        ops::AppendKvArgs a;
        a.page_size = page_size;
        a.num_pages = 600 / page_size + 2;
        a.n_tokens = n_tokens;
        a.kv_dtype = l.input;
        a.cache_dtype = l.cache_dtype;
        a.cache_layout = l.layout;
        a.kv_stride = d_qk + 64;
        const bool fp8_dense = l.cache_dtype == DType::kFP8E4M3 && l.layout == KvLayout::kDense;
        const float k_scale = 0.75f;  // saturates the largest tokens: the clamp is checked too
        const auto kv = random_rows(rng, n_tokens, a.kv_stride, l.input);
        std::vector<int64_t> gpu_slots, cpu_slots;
        random_slots(rng, n_tokens, a.num_pages * page_size, &gpu_slots, &cpu_slots);
        const size_t bytes = a.num_pages * kv_page_bytes(l.cache_dtype, l.layout, page_size);
        std::vector<uint8_t> cpu_cache(bytes, kPattern);

        a.kv = kv.data();
        a.slot_mapping = cpu_slots.data();
        a.kv_cache = cpu_cache.data();
        if (fp8_dense) a.k_scale = k_scale;
        MLAKIT_ASSERT_OK(ops::append_kv(Device::kCpu, a));

        DeviceVec<uint16_t> d_kv(kv);
        DeviceVec<int64_t> d_slots(gpu_slots);
        DeviceVec<uint8_t> d_cache(std::vector<uint8_t>(bytes, kPattern));
        DeviceVec<float> d_scale(std::vector<float>{k_scale});
        a.kv = d_kv.ptr;
        a.slot_mapping = d_slots.ptr;
        a.kv_cache = d_cache.ptr;
        if (fp8_dense && l.scale_ptr) {
          a.k_scale = NAN;
          a.k_scale_ptr = d_scale.ptr;
        }
        MLAKIT_ASSERT_OK(ops::append_kv(Device::kCuda, a));
        MLAKIT_ASSERT_CUDA(cudaDeviceSynchronize());
        const std::vector<uint8_t> got = d_cache.download();
        size_t first = bytes;
        for (size_t e = 0; e < bytes && first == bytes; ++e) {
          if (got[e] != cpu_cache[e]) first = e;
        }
        EXPECT_EQ(first, bytes) << to_string(l.layout) << " " << to_string(l.cache_dtype)
                                << " from " << to_string(l.input) << " page " << page_size << " n "
                                << n_tokens << ": first differing byte";
      }
    }
  }
}

TEST(OpsGpu, AppendIndexerEqualsCpu) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(102);
  for (const auto mode : {ops::IndexerScale::kAmax, ops::IndexerScale::kPowerOfTwo}) {
    for (const int page_size : {1, 64}) {
      for (const DType input : {DType::kBF16, DType::kFP16}) {
        ops::AppendIndexerArgs a;
        a.page_size = page_size;
        a.num_pages = 512 / page_size + 1;
        a.n_tokens = 333;
        a.k_dtype = input;
        a.scale = mode;
        const auto k = random_rows(rng, a.n_tokens, 128, input);
        std::vector<int64_t> gpu_slots, cpu_slots;
        random_slots(rng, a.n_tokens, a.num_pages * page_size, &gpu_slots, &cpu_slots);
        const size_t bytes = a.num_pages * ops::indexer_page_bytes(page_size);
        std::vector<uint8_t> cpu_cache(bytes, kPattern);
        a.k = k.data();
        a.slot_mapping = cpu_slots.data();
        a.index_cache = cpu_cache.data();
        MLAKIT_ASSERT_OK(ops::append_indexer(Device::kCpu, a));
        DeviceVec<uint16_t> d_k(k);
        DeviceVec<int64_t> d_slots(gpu_slots);
        DeviceVec<uint8_t> d_cache(std::vector<uint8_t>(bytes, kPattern));
        a.k = d_k.ptr;
        a.slot_mapping = d_slots.ptr;
        a.index_cache = d_cache.ptr;
        MLAKIT_ASSERT_OK(ops::append_indexer(Device::kCuda, a));
        MLAKIT_ASSERT_CUDA(cudaDeviceSynchronize());
        EXPECT_TRUE(d_cache.download() == cpu_cache)
            << "scale " << static_cast<int>(mode) << " page " << page_size << " "
            << to_string(input);
      }
    }
  }
}

// The indexer's GPU logits `got` against the cpu reference `want` (rows b * next_n, ld columns):
// -inf where want has it and on pages 1 and 3 of request `longest` (out of range in the GPU's
// table), NaN past max_len (untouched), else within the tensor cores' accumulation error.
void check_indexer_logits(int heads, int next_n, int page_size, const char* kernel,
                          const std::vector<float>& got, const std::vector<float>& want, int b,
                          int64_t max_len, int64_t ld, int longest) {
  const int64_t rows = int64_t{b} * next_n;
  int64_t bad = 0;
  float worst = 0;  // largest |got - want| / the row's largest |logit|
  for (int64_t r = 0; r < rows && bad < 10; ++r) {
    const int i = static_cast<int>(r / next_n);
    float row_max = 0;
    for (int64_t j = 0; j < max_len; ++j) {
      if (std::isfinite(want[r * ld + j])) row_max = std::max(row_max, std::abs(want[r * ld + j]));
    }
    for (int64_t j = 0; j < ld && bad < 10; ++j) {
      const float g = got[r * ld + j];
      float w = want[r * ld + j];
      const int64_t pg = j / page_size;
      if (i == longest && (pg == 1 || pg == 3) && j < max_len) w = -INFINITY;
      bool ok;
      if (j >= max_len) {
        ok = std::isnan(g);  // past max_len: untouched
      } else if (!std::isfinite(w)) {
        ok = g == w;
      } else {
        // fp8 tensor cores accumulate a 128-value dot product with less than fp32's precision
        // (sm_90's wgmma: about 2e-4 of a row's largest logit measured here; DeepGEMM's
        // indexer alike); the heads' sums are float.
        ok = std::isfinite(g) && std::abs(g - w) <= 2e-3f * row_max + 1e-6f;
        if (ok && row_max > 0) worst = std::max(worst, std::abs(g - w) / row_max);
      }
      if (!ok) {
        ++bad;
        ADD_FAILURE() << kernel << ": heads " << heads << " next_n " << next_n << " page "
                      << page_size << " row " << r << " position " << j << ": got " << g
                      << ", want " << w;
      }
    }
  }
  std::printf("  %s: heads %d next_n %d page %d: largest error %.2e of a row's largest logit\n",
              kernel, heads, next_n, page_size, worst);
}

// One indexer case for IndexerLogitsEqualsCpu and IndexerLongCallsEqualCpu: keys quantized by the
// cpu append into shuffled pages (the unused ones NaN-poisoned), random q and weights, the cpu
// reference against each GPU kernel by itself and the op's choice (check_indexer_logits).
void run_indexer_case(Rng& rng, const DeviceInfo& dev, int heads, int next_n, int page_size,
                      const std::vector<int32_t>& lens, int64_t max_len) {
  const int b = static_cast<int>(lens.size());
  const int64_t bt_stride = (max_len + page_size - 1) / page_size;
  const int64_t num_pages = b * bt_stride + 3;
  // Keys quantized by the cpu append into every page, then the pages no table names poisoned.
  ops::AppendIndexerArgs ap;
  ap.page_size = page_size;
  ap.num_pages = num_pages;
  ap.n_tokens = num_pages * page_size;
  const auto keys = random_rows(rng, ap.n_tokens, 128, DType::kBF16);
  std::vector<int64_t> slots(ap.n_tokens);
  std::iota(slots.begin(), slots.end(), 0);
  std::vector<uint8_t> cache(num_pages * ops::indexer_page_bytes(page_size));
  ap.k = keys.data();
  ap.slot_mapping = slots.data();
  ap.index_cache = cache.data();
  MLAKIT_ASSERT_OK(ops::append_indexer(Device::kCpu, ap));
  std::vector<int32_t> ids(num_pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng.gen);
  std::vector<int32_t> table(b * bt_stride, -1);
  std::vector<bool> used(num_pages, false);
  int next = 0;
  for (int i = 0; i < b; ++i) {
    for (int64_t pg = 0; pg * page_size < lens[i]; ++pg) {
      table[i * bt_stride + pg] = ids[next++];
      used[table[i * bt_stride + pg]] = true;
    }
  }
  for (int64_t pg = 0; pg < num_pages; ++pg) {
    if (!used[pg]) {
      std::fill_n(cache.begin() + pg * ops::indexer_page_bytes(page_size),
                  ops::indexer_page_bytes(page_size), 0xff);
    }
  }
  std::vector<uint8_t> q(int64_t{b} * next_n * heads * 128);
  for (auto& v : q) v = float_to_e4m3(rng.normal() * 0.5f);
  std::vector<float> weights(int64_t{b} * next_n * heads);
  for (auto& w : weights) w = rng.normal();
  const int64_t ld = max_len + 3;
  const int64_t rows = int64_t{b} * next_n;
  std::vector<float> want(rows * ld, 7.0f);
  ops::IndexerLogitsArgs a;
  a.batch = b;
  a.next_n = next_n;
  a.heads = heads;
  a.q = q.data();
  a.weights = weights.data();
  a.index_cache = cache.data();
  a.num_pages = num_pages;
  a.page_size = page_size;
  a.block_table = table.data();
  a.block_table_stride = bt_stride;
  a.seq_lens = lens.data();
  a.logits = want.data();
  a.max_len = max_len;
  a.logits_stride = ld;
  MLAKIT_ASSERT_OK(ops::indexer_logits(Device::kCpu, a));
  // The GPU's table: two used pages of the longest request out of range (-inf expected there).
  std::vector<int32_t> gpu_table = table;
  const int longest = b - 1;
  gpu_table[longest * bt_stride + 1] = static_cast<int32_t>(num_pages + 7);
  gpu_table[longest * bt_stride + 3] = -3;
  DeviceVec<uint8_t> d_q(q), d_cache(cache);
  DeviceVec<float> d_w(weights), d_logits(std::vector<float>(rows * ld, NAN));
  DeviceVec<int32_t> d_table(gpu_table), d_lens(lens);
  a.q = d_q.ptr;
  a.weights = d_w.ptr;
  a.index_cache = d_cache.ptr;
  a.block_table = d_table.ptr;
  a.seq_lens = d_lens.ptr;
  a.logits = d_logits.ptr;
  // The pipelined kernel runs on sm_90 for the page sizes it takes; the copy kernel everywhere.
  const bool tma = dev.sm_major == 9 && ops::indexer_tma_takes_page_size(page_size);
  for (const char* kernel : {"auto", "tma", "tma-wide", "persistent", "copy"}) {
    if ((std::strncmp(kernel, "tma", 3) == 0 || std::strcmp(kernel, "persistent") == 0) && !tma) {
      continue;
    }
    MLAKIT_ASSERT_CUDA(cudaMemset(d_logits.ptr, 0xff, rows * ld * sizeof(float)));  // NaN
    if (std::strcmp(kernel, "auto") == 0) {
      MLAKIT_ASSERT_OK(ops::indexer_logits(Device::kCuda, a));
    } else {
      const ops::IndexerKernel k =
          std::strcmp(kernel, "tma") == 0          ? ops::IndexerKernel::kTma
          : std::strcmp(kernel, "tma-wide") == 0   ? ops::IndexerKernel::kTmaWide
          : std::strcmp(kernel, "persistent") == 0 ? ops::IndexerKernel::kPersistent
                                                   : ops::IndexerKernel::kCopy;
      MLAKIT_ASSERT_OK(ops::indexer_logits_cuda(a, ld, nullptr, k));
    }
    MLAKIT_ASSERT_CUDA(cudaDeviceSynchronize());
    check_indexer_logits(heads, next_n, page_size, kernel, d_logits.download(), want, b, max_len,
                         ld, longest);
  }
}

// The indexer's logits on the GPU (fp8 mma) against the cpu reference (double) on the same codes,
// each kernel by itself and the op's choice: heads 1..128 (16- and 64-head groups padded), next_n
// 1..16 (row groups per CTA), page sizes 1 (4-byte copies), 8, 16 and 32 (the pipelined kernel:
// a box per page), 64, 128 and 192, lengths around the 64-position tiles, unused pages
// NaN-poisoned (0xff keys and scales), logits poisoned and wider than max_len (the columns past
// it untouched), and page ids out of range in the GPU's table: -inf there, nothing read.
TEST(OpsGpu, IndexerLogitsEqualsCpu) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const DeviceInfo dev = current_device();
  if (dev.sm_major * 10 + dev.sm_minor < 89) GTEST_SKIP() << "needs sm_89 or newer";
  Rng rng(106);
  struct Case {
    int heads, next_n, page_size;
  };
  for (const Case c : {Case{64, 1, 64}, Case{64, 2, 64}, Case{1, 1, 64}, Case{20, 3, 1},
                       Case{128, 1, 64}, Case{128, 16, 16}, Case{96, 4, 64}, Case{64, 2, 8},
                       Case{64, 1, 32}, Case{64, 3, 128}, Case{20, 2, 192}, Case{64, 16, 64}}) {
    run_indexer_case(rng, dev, c.heads, c.next_n, c.page_size, {0, 1, 63, 64, 65, 300, 2049, 5000},
                     5000 + 7);
  }
}

// Long calls (48 requests of about 4500 positions, 3408 tiles: many units a CTA, shares that start
// and end inside units) at next_n 2 up to 64 heads (the persistent kernel's two-row shape), with
// lengths of 0, a multiple of the tile (4480), one past it (4481: row 0 of next_n 2 sees exactly
// 70 tiles, all plain) and one short of it (4479) among them.
TEST(OpsGpu, IndexerLongCallsEqualCpu) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const DeviceInfo dev = current_device();
  if (dev.sm_major * 10 + dev.sm_minor < 89) GTEST_SKIP() << "needs sm_89 or newer";
  Rng rng(107);
  std::vector<int32_t> lens(48, 4500);
  lens[3] = 0;
  lens[7] = 4480;
  lens[20] = 4481;
  lens[30] = 4479;
  lens[47] = 4501;
  for (const int next_n : {2, 1}) run_indexer_case(rng, dev, 64, next_n, 64, lens, 4501 + 9);
}

TEST(OpsGpu, GraphReplayWithNewLengthsAndSlots) {
  MLAKIT_SKIP_WITHOUT_GPU();
  Rng rng(105);
  StreamHolder stream;
  // Top-k: captured once with the longest lengths' shapes, replayed with new lengths.
  TopkInputs in = make_topk(rng, 256, 2, 64, {5000, 300, 4000}, TopkValues::kNormal);
  TopkDeviceInputs d(rng, in);
  replay_topk_with_new_lengths(in, d.args(in), d.lens, d.idx, d.pos, stream.stream,
                               {{5000, 300, 4000}, {0, 257, 4999}, {256, 1, 1000}});

  // Append: captured once, replayed with a new slot mapping.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ops::AppendKvArgs a;
  a.page_size = 64;
  a.num_pages = 4;
  a.n_tokens = 16;
  a.cache_dtype = DType::kFP8E4M3;
  a.cache_layout = KvLayout::kFp8Blockwise;
  const auto kv = random_rows(rng, a.n_tokens, 576, DType::kBF16);
  const size_t bytes = a.num_pages * kv_page_bytes(a.cache_dtype, a.cache_layout, a.page_size);
  DeviceVec<uint16_t> d_kv(kv);
  DeviceVec<int64_t> d_slots(std::vector<int64_t>(a.n_tokens, -1));
  DeviceVec<uint8_t> d_cache(std::vector<uint8_t>(bytes, kPattern));
  ops::AppendKvArgs dev = a;
  dev.kv = d_kv.ptr;
  dev.slot_mapping = d_slots.ptr;
  dev.kv_cache = d_cache.ptr;
  MLAKIT_ASSERT_CUDA(cudaStreamBeginCapture(stream.stream, cudaStreamCaptureModeThreadLocal));
  const Status appended = ops::append_kv(Device::kCuda, dev, stream.stream);
  MLAKIT_ASSERT_CUDA(cudaStreamEndCapture(stream.stream, &graph));
  MLAKIT_ASSERT_OK(appended);
  MLAKIT_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<uint8_t> cpu_cache(bytes, kPattern);
  for (int step = 0; step < 3; ++step) {
    std::vector<int64_t> gpu_slots, cpu_slots;
    random_slots(rng, a.n_tokens, a.num_pages * a.page_size, &gpu_slots, &cpu_slots);
    d_slots.upload(gpu_slots);
    MLAKIT_ASSERT_CUDA(cudaGraphLaunch(exec, stream.stream));
    MLAKIT_ASSERT_CUDA(cudaStreamSynchronize(stream.stream));
    ops::AppendKvArgs host = a;
    host.kv = kv.data();
    host.slot_mapping = cpu_slots.data();
    host.kv_cache = cpu_cache.data();
    MLAKIT_ASSERT_OK(ops::append_kv(Device::kCpu, host));
    EXPECT_TRUE(d_cache.download() == cpu_cache) << "replay " << step;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// The indexer's part of a sparse layer (append_indexer -> indexer_logits -> topk_indices) on one
// stream with enable_pdl (sm_90: each kernel may start while the one before runs, and waits for
// it before reading) against the same chain without: the index cache, the logits and the indices
// bitwise equal, eagerly and replayed from a CUDA graph with new lengths. Every output is
// poisoned on the stream right before its chain (a read before the wait would see the poison or
// the last chain's values: each producer runs right before its consumer).
TEST(OpsGpu, PdlChainEqualsPlainChain) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const DeviceInfo dev = current_device();
  if (dev.sm_major * 10 + dev.sm_minor < 89) GTEST_SKIP() << "needs sm_89 or newer";
  Rng rng(108);
  StreamHolder stream;
  const int b = 4, next_n = 2, heads = 64, page = 64, k = 512;
  const int64_t max_len = 8192, bt_stride = max_len / page;
  const int64_t num_pages = b * bt_stride + 3, tokens = num_pages * page;
  const auto keys = random_rows(rng, tokens, 128, DType::kBF16);
  std::vector<int64_t> slots(tokens);
  std::iota(slots.begin(), slots.end(), 0);
  std::vector<int32_t> table(b * bt_stride);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng.gen);
  std::vector<uint8_t> q(int64_t{b} * next_n * heads * 128);
  for (auto& v : q) v = float_to_e4m3(rng.normal() * 0.5f);
  std::vector<float> weights(int64_t{b} * next_n * heads);
  for (auto& w : weights) w = rng.normal();
  const int64_t rows = int64_t{b} * next_n;
  const size_t cache_bytes = num_pages * ops::indexer_page_bytes(page);
  DeviceVec<uint16_t> d_keys(keys);
  DeviceVec<int64_t> d_slots(slots);
  DeviceVec<int32_t> d_table(table), d_lens(std::vector<int32_t>{8192, 5000, 1, 0});
  DeviceVec<uint8_t> d_q(q), d_cache(std::vector<uint8_t>(cache_bytes, 0));
  DeviceVec<float> d_w(weights), d_logits(std::vector<float>(rows * max_len, 0.f));
  DeviceVec<int32_t> d_idx(std::vector<int32_t>(rows * k, 0));

  // The chain, every output poisoned first (0xff: NaN logits, -1 indices, NaN keys and scales).
  auto chain = [&](bool pdl) -> Status {
    const cudaStream_t s = stream.stream;
    if (cudaMemsetAsync(d_cache.ptr, 0xff, cache_bytes, s) != cudaSuccess ||
        cudaMemsetAsync(d_logits.ptr, 0xff, rows * max_len * sizeof(float), s) != cudaSuccess ||
        cudaMemsetAsync(d_idx.ptr, 0xff, rows * k * sizeof(int32_t), s) != cudaSuccess) {
      return Status(StatusCode::kInternal, "cudaMemsetAsync");
    }
    ops::AppendIndexerArgs ap;
    ap.n_tokens = tokens;
    ap.k = d_keys.ptr;
    ap.slot_mapping = d_slots.ptr;
    ap.index_cache = d_cache.ptr;
    ap.num_pages = num_pages;
    ap.page_size = page;
    ap.enable_pdl = pdl;
    MLAKIT_RETURN_IF_ERROR(ops::append_indexer(Device::kCuda, ap, s));
    ops::IndexerLogitsArgs lg;
    lg.batch = b;
    lg.next_n = next_n;
    lg.heads = heads;
    lg.q = d_q.ptr;
    lg.weights = d_w.ptr;
    lg.index_cache = d_cache.ptr;
    lg.num_pages = num_pages;
    lg.page_size = page;
    lg.block_table = d_table.ptr;
    lg.block_table_stride = bt_stride;
    lg.seq_lens = d_lens.ptr;
    lg.logits = d_logits.ptr;
    lg.max_len = max_len;
    lg.enable_pdl = pdl;
    MLAKIT_RETURN_IF_ERROR(ops::indexer_logits(Device::kCuda, lg, s));
    ops::TopkArgs tk;
    tk.batch = b;
    tk.next_n = next_n;
    tk.k = k;
    tk.logits = d_logits.ptr;
    tk.max_len = max_len;
    tk.seq_lens = d_lens.ptr;
    tk.block_table = d_table.ptr;
    tk.block_table_stride = bt_stride;
    tk.page_size = page;
    tk.indices = d_idx.ptr;
    tk.enable_pdl = pdl;
    return ops::topk_indices(Device::kCuda, tk, s);
  };
  struct Outputs {
    std::vector<uint8_t> cache;
    std::vector<float> logits;
    std::vector<int32_t> idx;
  };
  auto outputs = [&] {
    EXPECT_EQ(cudaStreamSynchronize(stream.stream), cudaSuccess);
    return Outputs{d_cache.download(), d_logits.download(), d_idx.download()};
  };
  auto expect_equal = [&](const Outputs& got, const Outputs& want, const char* what) {
    EXPECT_TRUE(got.cache == want.cache) << what << ": index cache";
    EXPECT_EQ(std::memcmp(got.logits.data(), want.logits.data(), got.logits.size() * 4), 0)
        << what << ": logits";
    EXPECT_TRUE(got.idx == want.idx) << what << ": indices";
  };

  MLAKIT_ASSERT_OK(chain(false));
  const Outputs plain = outputs();
  // Sanity: the plain chain did its work (the longest request's row 1 keeps k positions).
  EXPECT_TRUE(std::isfinite(plain.logits[1 * max_len + 100]));
  EXPECT_NE(plain.idx[1 * k + k - 1], -1);
  for (int run = 0; run < 3; ++run) {  // (PDL's overlap varies with timing)
    MLAKIT_ASSERT_OK(chain(true));
    expect_equal(outputs(), plain, "eager with PDL");
  }

  // Captured with PDL (programmatic edges in the graph), replayed with new lengths.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MLAKIT_ASSERT_CUDA(cudaStreamBeginCapture(stream.stream, cudaStreamCaptureModeThreadLocal));
  const Status captured = chain(true);
  MLAKIT_ASSERT_CUDA(cudaStreamEndCapture(stream.stream, &graph));
  MLAKIT_ASSERT_OK(captured);
  MLAKIT_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (const std::vector<int32_t>& lens :
       {std::vector<int32_t>{100, 8192, 4097, 64}, std::vector<int32_t>{8192, 8192, 8191, 513}}) {
    d_lens.upload(lens);
    MLAKIT_ASSERT_CUDA(cudaGraphLaunch(exec, stream.stream));
    const Outputs replayed = outputs();
    MLAKIT_ASSERT_OK(chain(false));
    expect_equal(replayed, outputs(), "graph replay with PDL");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace mlakit::testing
