// The C API of the sparse layer's ops (include/mlakit/mlakit_c.h: append, indexer logits, top-k)
// on the cpu device: defaults equal to the C++ ones, results byte-equal to the C++ API's on random
// data, page sizes as the C++ helpers give them, and errors that name the argument.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "cpu_run.h"
#include "mlakit/mlakit.h"
#include "mlakit/mlakit_c.h"
#include "mlakit/ops.h"
#include "ops_rng.h"

namespace mlakit_test {
namespace {

namespace ops = mlakit::ops;
using ops::Device;

// The message of the last C call starts with `prefix`.
::testing::AssertionResult last_error_starts_with(const std::string& prefix) {
  const std::string message = mlakit_last_error();
  if (message.rfind(prefix, 0) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "message: " << message;
}

std::vector<uint16_t> random_bf16(Rng& rng, size_t n) {
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = mlakit::float_to_bf16(rng.normal() * 3.0f);
  return v;
}

// n slots of a cache of `tokens` slots, distinct, every fifth -1.
std::vector<int64_t> random_slots(Rng& rng, int64_t n, int64_t tokens) {
  std::vector<int64_t> all(tokens);
  std::iota(all.begin(), all.end(), 0);
  for (int64_t i = tokens - 1; i > 0; --i) std::swap(all[i], all[rng.below(i + 1)]);
  std::vector<int64_t> slots(all.begin(), all.begin() + n);
  for (int64_t t = 2; t < n; t += 5) slots[t] = -1;
  return slots;
}

TEST(CApiOps, InitGivesTheCppDefaults) {
  mlakit_append_kv_args_t kv;
  mlakit_append_kv_args_init(&kv);
  const ops::AppendKvArgs kv_d;
  EXPECT_EQ(kv.n_tokens, 0);
  EXPECT_EQ(kv.kv, nullptr);
  EXPECT_EQ(kv.kv_dtype, static_cast<int32_t>(kv_d.kv_dtype));
  EXPECT_EQ(kv.page_size, kv_d.page_size);
  EXPECT_EQ(kv.cache_dtype, static_cast<int32_t>(kv_d.cache_dtype));
  EXPECT_EQ(kv.cache_layout, MLAKIT_KV_DENSE);
  EXPECT_TRUE(std::isnan(kv.k_scale));
  EXPECT_EQ(kv.k_scale_ptr, nullptr);

  mlakit_append_indexer_args_t ix;
  mlakit_append_indexer_args_init(&ix);
  const ops::AppendIndexerArgs ix_d;
  EXPECT_EQ(ix.k_dtype, static_cast<int32_t>(ix_d.k_dtype));
  EXPECT_EQ(ix.page_size, ix_d.page_size);
  EXPECT_EQ(ix.scale, MLAKIT_INDEXER_SCALE_AMAX);
  EXPECT_EQ(ix.slot_mapping, nullptr);

  mlakit_indexer_logits_args_t lg;
  mlakit_indexer_logits_args_init(&lg);
  const ops::IndexerLogitsArgs lg_d;
  EXPECT_EQ(lg.batch, 0);
  EXPECT_EQ(lg.next_n, lg_d.next_n);
  EXPECT_EQ(lg.heads, ops::kIndexerHeads);
  EXPECT_EQ(lg.page_size, lg_d.page_size);
  EXPECT_EQ(lg.logits, nullptr);

  mlakit_topk_args_t tk;
  mlakit_topk_args_init(&tk);
  const ops::TopkArgs tk_d;
  EXPECT_EQ(tk.next_n, tk_d.next_n);
  EXPECT_EQ(tk.k, tk_d.k);
  EXPECT_EQ(tk.page_size, tk_d.page_size);
  EXPECT_EQ(tk.workspace, nullptr);
  EXPECT_EQ(tk.workspace_size, 0u);
  EXPECT_EQ(tk.nondeterministic, 0);
  EXPECT_TRUE(tk_d.deterministic);

  // Programmatic dependent launch is opt-in everywhere.
  EXPECT_EQ(kv.enable_pdl, 0);
  EXPECT_EQ(ix.enable_pdl, 0);
  EXPECT_EQ(lg.enable_pdl, 0);
  EXPECT_EQ(tk.enable_pdl, 0);
  EXPECT_FALSE(kv_d.enable_pdl || ix_d.enable_pdl || lg_d.enable_pdl || tk_d.enable_pdl);
}

TEST(CApiOps, PageBytesAsTheCppHelpers) {
  for (const int page : {1, 16, 61, 64}) {
    EXPECT_EQ(mlakit_kv_page_bytes(MLAKIT_BF16, MLAKIT_KV_DENSE, page),
              mlakit::kv_page_bytes(DType::kBF16, KvLayout::kDense, page));
    EXPECT_EQ(mlakit_kv_page_bytes(MLAKIT_FP8_E4M3, MLAKIT_KV_DENSE, page),
              mlakit::kv_page_bytes(DType::kFP8E4M3, KvLayout::kDense, page));
    EXPECT_EQ(mlakit_kv_page_bytes(MLAKIT_FP8_E4M3, MLAKIT_KV_FP8_BLOCKWISE, page),
              mlakit::kv_page_bytes(DType::kFP8E4M3, KvLayout::kFp8Blockwise, page));
    EXPECT_EQ(mlakit_kv_page_bytes(MLAKIT_FP8_E4M3, MLAKIT_KV_FP8_V4, page),
              mlakit::kv_page_bytes(DType::kFP8E4M3, KvLayout::kFp8V4, page));
    EXPECT_EQ(mlakit_indexer_page_bytes(page), ops::indexer_page_bytes(page));
  }
  EXPECT_EQ(mlakit_kv_page_bytes(MLAKIT_FP8_E4M3, MLAKIT_KV_FP8_BLOCKWISE, 64), 64u * 656u);
  EXPECT_EQ(mlakit_kv_page_bytes(7, MLAKIT_KV_DENSE, 64), 0u);
  EXPECT_EQ(mlakit_kv_page_bytes(MLAKIT_FP32, MLAKIT_KV_DENSE, 64), 0u);  // no fp32 cache
  EXPECT_EQ(mlakit_kv_page_bytes(MLAKIT_BF16, MLAKIT_KV_FP8_BLOCKWISE, 64), 0u);
  EXPECT_EQ(mlakit_kv_page_bytes(MLAKIT_FP16, MLAKIT_KV_FP8_V4, 64), 0u);
  EXPECT_EQ(mlakit_kv_page_bytes(MLAKIT_BF16, 3, 64), 0u);
  EXPECT_EQ(mlakit_kv_page_bytes(MLAKIT_BF16, MLAKIT_KV_DENSE, 0), 0u);
  EXPECT_EQ(mlakit_indexer_page_bytes(-1), 0u);
}

// Every cache layout: the C call writes the same bytes as the C++ one.
TEST(CApiOps, AppendKvMatchesCppApi) {
  Rng rng(case_seed());
  const int page = 16, pages = 5, n = 37;
  const std::vector<uint16_t> kv = random_bf16(rng, size_t{n} * mlakit::kDqk);
  const std::vector<int64_t> slots = random_slots(rng, n, int64_t{page} * pages);
  const struct {
    DType dtype;
    KvLayout layout;
  } caches[] = {{DType::kBF16, KvLayout::kDense},
                {DType::kFP8E4M3, KvLayout::kDense},
                {DType::kFP8E4M3, KvLayout::kFp8Blockwise},
                {DType::kFP8E4M3, KvLayout::kFp8V4}};
  for (const auto& c : caches) {
    SCOPED_TRACE(std::string(mlakit::to_string(c.layout)));
    const size_t bytes = mlakit::kv_page_bytes(c.dtype, c.layout, page) * pages;
    std::vector<uint8_t> cache_c(bytes, 0x5a), cache_cpp(bytes, 0x5a);
    const bool scaled = c.dtype == DType::kFP8E4M3 && c.layout == KvLayout::kDense;
    mlakit_append_kv_args_t a;
    mlakit_append_kv_args_init(&a);
    a.n_tokens = n, a.kv = kv.data(), a.kv_dtype = MLAKIT_BF16, a.kv_stride = mlakit::kDqk;
    a.slot_mapping = slots.data(), a.kv_cache = cache_c.data(), a.num_pages = pages;
    a.page_size = page, a.cache_dtype = static_cast<int32_t>(c.dtype);
    a.cache_layout = static_cast<int32_t>(c.layout);
    if (scaled) a.k_scale = 0.75f;
    ASSERT_EQ(mlakit_append_kv(MLAKIT_DEVICE_CPU, &a, nullptr), 0) << mlakit_last_error();
    EXPECT_STREQ(mlakit_last_error(), "");
    const ops::AppendKvArgs cpp{.n_tokens = n,
                                .kv = kv.data(),
                                .kv_dtype = DType::kBF16,
                                .kv_stride = mlakit::kDqk,
                                .slot_mapping = slots.data(),
                                .kv_cache = cache_cpp.data(),
                                .num_pages = pages,
                                .page_size = page,
                                .cache_dtype = c.dtype,
                                .cache_layout = c.layout,
                                .k_scale = scaled ? 0.75f : NAN};
    ASSERT_TRUE(ops::append_kv(Device::kCpu, cpp).ok());
    EXPECT_EQ(cache_c, cache_cpp);
    EXPECT_NE(cache_c, std::vector<uint8_t>(bytes, 0x5a));  // something was written
  }
}

// The indexer cache appended through C, read back by the logits through C, then the top-k
// through C: each byte-equal to the C++ API's.
TEST(CApiOps, IndexerLogitsAndTopkMatchCppApi) {
  Rng rng(case_seed());
  const int page = 16, pages = 12, batch = 3, next_n = 2, heads = 8, max_len = 150, k = 40;
  const int64_t tokens = int64_t{page} * pages;
  // Keys for every slot of the cache (each request's pages are its block table's).
  const std::vector<uint16_t> keys = random_bf16(rng, size_t(tokens) * ops::kIndexerDim);
  std::vector<int64_t> all(tokens);
  std::iota(all.begin(), all.end(), 0);
  for (const int scale : {MLAKIT_INDEXER_SCALE_AMAX, MLAKIT_INDEXER_SCALE_POW2}) {
    SCOPED_TRACE(scale);
    // The second round asks the C calls for programmatic dependent launch: the cpu ignores it.
    const int32_t pdl = scale == MLAKIT_INDEXER_SCALE_POW2 ? 1 : 0;
    const size_t cache_bytes = ops::indexer_page_bytes(page) * pages;
    std::vector<uint8_t> cache_c(cache_bytes, 0), cache_cpp(cache_bytes, 0);
    mlakit_append_indexer_args_t ai;
    mlakit_append_indexer_args_init(&ai);
    ai.n_tokens = tokens, ai.k = keys.data(), ai.slot_mapping = all.data();
    ai.index_cache = cache_c.data(), ai.num_pages = pages, ai.page_size = page, ai.scale = scale;
    ai.enable_pdl = pdl;
    ASSERT_EQ(mlakit_append_indexer(MLAKIT_DEVICE_CPU, &ai, nullptr), 0) << mlakit_last_error();
    const ops::AppendIndexerArgs ai_cpp{.n_tokens = tokens,
                                        .k = keys.data(),
                                        .slot_mapping = all.data(),
                                        .index_cache = cache_cpp.data(),
                                        .num_pages = pages,
                                        .page_size = page,
                                        .scale = static_cast<ops::IndexerScale>(scale)};
    ASSERT_TRUE(ops::append_indexer(Device::kCpu, ai_cpp).ok());
    ASSERT_EQ(cache_c, cache_cpp);

    // Logits: e4m3 q without NaN bytes (bit 3 cleared), random weights, a block table
    // of 4 pages each (a permutation), lengths 0, short and full.
    std::vector<uint8_t> q(size_t{batch} * next_n * heads * ops::kIndexerDim);
    for (uint8_t& x : q) x = static_cast<uint8_t>(rng.below(256)) & 0xf7;  // exponent never 1111
    std::vector<float> weights(size_t{batch} * next_n * heads);
    for (float& w : weights) w = rng.normal();
    const int stride = 10;
    std::vector<int32_t> block_table(size_t{batch} * stride);
    for (int i = 0; i < batch * stride; ++i) block_table[i] = (i * 7) % pages;
    const std::vector<int32_t> seq_lens = {0, 45, max_len};
    const size_t logit_count = size_t{batch} * next_n * max_len;
    std::vector<float> logits_c(logit_count, NAN), logits_cpp(logit_count, NAN);
    mlakit_indexer_logits_args_t lg;
    mlakit_indexer_logits_args_init(&lg);
    lg.batch = batch, lg.next_n = next_n, lg.heads = heads, lg.q = q.data();
    lg.weights = weights.data(), lg.index_cache = cache_c.data(), lg.num_pages = pages;
    lg.page_size = page, lg.block_table = block_table.data(), lg.block_table_stride = stride;
    lg.seq_lens = seq_lens.data(), lg.logits = logits_c.data(), lg.max_len = max_len;
    lg.enable_pdl = pdl;
    ASSERT_EQ(mlakit_indexer_logits(MLAKIT_DEVICE_CPU, &lg, nullptr), 0) << mlakit_last_error();
    const ops::IndexerLogitsArgs lg_cpp{.batch = batch,
                                        .next_n = next_n,
                                        .heads = heads,
                                        .q = q.data(),
                                        .weights = weights.data(),
                                        .index_cache = cache_cpp.data(),
                                        .num_pages = pages,
                                        .page_size = page,
                                        .block_table = block_table.data(),
                                        .block_table_stride = stride,
                                        .seq_lens = seq_lens.data(),
                                        .logits = logits_cpp.data(),
                                        .max_len = max_len};
    ASSERT_TRUE(ops::indexer_logits(Device::kCpu, lg_cpp).ok());
    ASSERT_EQ(std::memcmp(logits_c.data(), logits_cpp.data(), logit_count * sizeof(float)), 0);

    // Top-k of those logits, indices and positions.
    const size_t out_count = size_t{batch} * next_n * k;
    std::vector<int32_t> idx_c(out_count, 7), pos_c(out_count, 7);
    std::vector<int32_t> idx_cpp(out_count, 7), pos_cpp(out_count, 7);
    mlakit_topk_args_t tk;
    mlakit_topk_args_init(&tk);
    tk.batch = batch, tk.next_n = next_n, tk.k = k, tk.logits = logits_c.data();
    tk.max_len = max_len, tk.seq_lens = seq_lens.data(), tk.block_table = block_table.data();
    tk.block_table_stride = stride, tk.page_size = page, tk.indices = idx_c.data();
    tk.positions = pos_c.data(), tk.enable_pdl = pdl;
    ASSERT_EQ(mlakit_topk_indices(MLAKIT_DEVICE_CPU, &tk, nullptr), 0) << mlakit_last_error();
    const ops::TopkArgs tk_cpp{.batch = batch,
                               .next_n = next_n,
                               .k = k,
                               .logits = logits_cpp.data(),
                               .max_len = max_len,
                               .seq_lens = seq_lens.data(),
                               .block_table = block_table.data(),
                               .block_table_stride = stride,
                               .page_size = page,
                               .indices = idx_cpp.data(),
                               .positions = pos_cpp.data()};
    ASSERT_TRUE(ops::topk_indices(Device::kCpu, tk_cpp).ok());
    EXPECT_EQ(idx_c, idx_cpp);
    EXPECT_EQ(pos_c, pos_cpp);
    EXPECT_EQ(idx_c[0], -1);  // request 0 has no token
    EXPECT_EQ(mlakit_topk_workspace_bytes(&tk), ops::topk_workspace_bytes(tk_cpp));
  }
}

TEST(CApiOps, WorkspaceBytesOfLongRows) {
  mlakit_topk_args_t tk;
  mlakit_topk_args_init(&tk);
  tk.batch = 4, tk.next_n = 2, tk.max_len = 131072;
  const ops::TopkArgs cpp{.batch = 4, .next_n = 2, .max_len = 131072};
  EXPECT_GT(ops::topk_workspace_bytes(cpp), 0u);
  EXPECT_EQ(mlakit_topk_workspace_bytes(&tk), ops::topk_workspace_bytes(cpp));
  EXPECT_EQ(mlakit_topk_workspace_bytes(nullptr), 0u);
}

TEST(CApiOps, BadArgumentsReturnInvalidArgumentNamingThem) {
  mlakit_append_kv_args_t kv;
  mlakit_append_kv_args_init(&kv);
  std::vector<uint16_t> row(mlakit::kDqk, 0);
  std::vector<uint8_t> cache(mlakit::kv_page_bytes(DType::kBF16, KvLayout::kDense, 64));
  kv.n_tokens = 1, kv.kv = row.data(), kv.kv_cache = cache.data(), kv.num_pages = 1;
  EXPECT_EQ(mlakit_append_kv(MLAKIT_DEVICE_CPU, &kv, nullptr), 1);  // no slot_mapping
  EXPECT_TRUE(last_error_starts_with("invalid argument: slot_mapping"));
  EXPECT_EQ(mlakit_append_kv(7, &kv, nullptr), 1);
  EXPECT_TRUE(last_error_starts_with("invalid argument: device"));
  EXPECT_EQ(mlakit_append_kv(MLAKIT_DEVICE_CPU, nullptr, nullptr), 1);
  EXPECT_TRUE(last_error_starts_with("invalid argument: args"));

  mlakit_append_indexer_args_t ix;
  mlakit_append_indexer_args_init(&ix);
  ix.n_tokens = 1, ix.page_size = 0;
  EXPECT_EQ(mlakit_append_indexer(MLAKIT_DEVICE_CPU, &ix, nullptr), 1);
  EXPECT_TRUE(last_error_starts_with("invalid argument: page_size"));
  EXPECT_EQ(mlakit_append_indexer(MLAKIT_DEVICE_CPU, nullptr, nullptr), 1);
  EXPECT_TRUE(last_error_starts_with("invalid argument: args"));

  mlakit_indexer_logits_args_t lg;
  mlakit_indexer_logits_args_init(&lg);
  lg.batch = 1, lg.heads = 129;
  EXPECT_EQ(mlakit_indexer_logits(MLAKIT_DEVICE_CPU, &lg, nullptr), 1);
  EXPECT_TRUE(last_error_starts_with("invalid argument: heads"));
  EXPECT_EQ(mlakit_indexer_logits(MLAKIT_DEVICE_CPU, nullptr, nullptr), 1);
  EXPECT_TRUE(last_error_starts_with("invalid argument: args"));

  mlakit_topk_args_t tk;
  mlakit_topk_args_init(&tk);
  tk.batch = 1, tk.k = 0;
  EXPECT_EQ(mlakit_topk_indices(MLAKIT_DEVICE_CPU, &tk, nullptr), 1);
  EXPECT_TRUE(last_error_starts_with("invalid argument: k"));
  EXPECT_EQ(mlakit_topk_indices(MLAKIT_DEVICE_CPU, nullptr, nullptr), 1);
  EXPECT_TRUE(last_error_starts_with("invalid argument: args"));
}

}  // namespace
}  // namespace mlakit_test
