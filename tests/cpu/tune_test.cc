// The autotuner's CPU-side parts besides the cache file (tune_cache_test.cc): buckets, the choice
// between cache and heuristic, and the tuner's ranking and default tactics.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "core/backend.h"
#include "harness/workload.h"
#include "mlakit/mlakit.h"
#include "tune/bucket.h"
#include "tune/cache.h"
#include "tune/tuner.h"
#include "tune_files.h"

namespace mlakit::tune {
namespace {

TEST(Bucket, BatchBuckets) {
  EXPECT_EQ(batch_bucket(1), 1);
  EXPECT_EQ(batch_bucket(3), 4);
  EXPECT_EQ(batch_bucket(64), 64);
  EXPECT_EQ(batch_bucket(65), 128);
  EXPECT_EQ(batch_bucket(256), 256);
  EXPECT_EQ(batch_bucket(257), 512);
  EXPECT_EQ(batch_bucket(600), 768);
  EXPECT_EQ(batch_bucket(1024), 1024);
  for (int b = 1; b <= 2000; ++b) {
    const int index = batch_bucket_index(b);
    EXPECT_EQ(batch_bucket_at(index), batch_bucket(b)) << "batch " << b;
    EXPECT_GE(batch_bucket(b), b);
  }
}

TEST(Bucket, LengthBucketsAndKeys) {
  EXPECT_EQ(len_bucket(0), 1);
  EXPECT_EQ(len_bucket(1000), 1024);
  EXPECT_EQ(len_bucket(4096), 4096);
  EXPECT_EQ(len_bucket(4097), 8192);
  Problem p;
  Problem q = p;
  q.has_sinks = true;
  EXPECT_NE(problem_key(p), problem_key(q));
  q = p;
  q.page_size = 16;
  EXPECT_NE(problem_key(p), problem_key(q));
  EXPECT_EQ(bucket_key(p, 64, 4096), problem_key(p) + "|b64|L4096");
  // Sparse problems with and without an extra cache, ranks of context parallelism and var_q
  // problems are tuned apart; the default problem's key is unchanged.
  EXPECT_EQ(problem_key(p),
            "h128.s1.p64.q-bf16.kv-bf16.out-bf16.dense.causal.sinks0.lse0.pdl0.topk0");
  Problem sparse = p;
  sparse.topk = 2048;
  Problem extra = sparse;
  extra.extra_topk = 128;
  EXPECT_NE(problem_key(sparse), problem_key(extra));
  Problem cp = p;
  cp.cp_world = 2;
  cp.cp_rank = 1;
  EXPECT_NE(problem_key(p), problem_key(cp));
  EXPECT_NE(problem_key(cp).find(".cp2r1i1"), std::string::npos) << problem_key(cp);
  EXPECT_NE(problem_key(extra).find(".extra128.ep64"), std::string::npos) << problem_key(extra);
  // Variable query lengths too (with or without context parallelism).
  Problem var_q = p;
  var_q.s_q = 4;
  var_q.var_q = true;
  Problem uniform = var_q;
  uniform.var_q = false;
  EXPECT_EQ(problem_key(var_q), problem_key(uniform) + ".varq");
  Problem cp_var_q = cp;
  cp_var_q.var_q = true;
  EXPECT_EQ(problem_key(cp_var_q), problem_key(cp) + ".varq");
}
// On a machine without a GPU the cpu backend is the only candidate: the choice logic still runs
// through the cache (a cache file naming cpu for this bucket) and the heuristic.
class AutoChoice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (current_device().present) GTEST_SKIP() << "host-memory choice test; a GPU is present";
    problem_.max_batch = 8;
    problem_.max_seq_len = 1000;
  }
  Problem problem_;
};

TEST_F(AutoChoice, HeuristicWhenTheCacheIsEmpty) {
  std::unique_ptr<Decoder> d;
  ASSERT_TRUE(Decoder::create(problem_, {.tune_cache_path = temp_path("empty.json")}, &d).ok());
  EXPECT_EQ(d->backend_name(), "cpu");
  EXPECT_NE(d->notes().find("(heuristic)"), std::string::npos) << d->notes();
}

TEST_F(AutoChoice, CacheEntryAndNearestBucketAreUsed) {
  const std::string path = temp_path("auto.json");
  Cache cache(current_metadata(current_device()));
  cache.put(bucket_key(problem_, 8, 1024), entry("cpu", 0, 10));
  ASSERT_TRUE(cache.save(path).ok());
  std::unique_ptr<Decoder> d;
  ASSERT_TRUE(Decoder::create(problem_, {.tune_cache_path = path}, &d).ok());
  EXPECT_NE(d->notes().find("batch <= 8: cpu:0 (cache)"), std::string::npos) << d->notes();
  EXPECT_NE(d->notes().find("batch <= 1: cpu:0 (cache, nearest bucket b8|L1024)"),
            std::string::npos)
      << d->notes();
}

TEST_F(AutoChoice, UnknownBackendInTheCacheFallsBackToTheHeuristic) {
  const std::string path = temp_path("unknown.json");
  Cache cache(current_metadata(current_device()));
  cache.put(bucket_key(problem_, 8, 1024), entry("sm99", 0, 10));
  ASSERT_TRUE(cache.save(path).ok());
  std::unique_ptr<Decoder> d;
  ASSERT_TRUE(Decoder::create(problem_, {.tune_cache_path = path}, &d).ok());
  EXPECT_EQ(d->backend_name(), "cpu");
  EXPECT_NE(d->notes().find("cannot run here"), std::string::npos) << d->notes();
}

TEST_F(AutoChoice, CorruptCacheIsANoteNotAnError) {
  const std::string path = temp_path("corrupt_auto.json");
  write_text(path, "{\"format\": 1, \"metadata\": ");
  std::unique_ptr<Decoder> d;
  ASSERT_TRUE(Decoder::create(problem_, {.tune_cache_path = path}, &d).ok());
  EXPECT_NE(d->notes().find("ignored"), std::string::npos) << d->notes();
}

// The warning about a foreign file with a 4 MB GPU name reaches notes() shortened.
TEST_F(AutoChoice, NotesStayShortWhateverTheCacheHolds) {
  const std::string path = temp_path("long_gpu.json");
  Metadata foreign = current_metadata(current_device());
  foreign.gpu = std::string(4 << 20, 'G');
  Cache cache(foreign);
  cache.put(bucket_key(problem_, 8, 1024), entry("cpu", 0, 10));
  ASSERT_TRUE(cache.save(path).ok());
  std::unique_ptr<Decoder> d;
  ASSERT_TRUE(Decoder::create(problem_, {.tune_cache_path = path}, &d).ok());
  EXPECT_NE(d->notes().find("ignored"), std::string::npos) << d->notes().substr(0, 300);
  EXPECT_LT(d->notes().size(), 2000u) << d->notes().substr(0, 300);
}

// Choosing for every batch bucket does not scan every entry per bucket: a cache of 61,560 entries
// of the problem (every batch bucket up to 2^20 at 15 lengths, none at the problem's length) and
// max_batch 2^20 (4,104 buckets). The scan took 45 s here (333 s for 200,000 entries); now under
// a second.
TEST_F(AutoChoice, ChoosingForEveryBatchBucketDoesNotScanEveryEntry) {
  const std::string path = temp_path("large.json");
  Problem p = problem_;
  p.max_batch = 1 << 20;
  p.max_seq_len = 1 << 23;
  nlohmann::json entries = nlohmann::json::object();
  const int buckets = batch_bucket_index(p.max_batch) + 1;
  for (int k = 0; k < buckets; ++k) {
    for (int l = 0; l < 15; ++l) {
      // Far from L 2^23: each bucket's nearest entry is its own batch at the longest length.
      entries[bucket_key(p, batch_bucket_at(k), 1 << l)] = {
          {"backend", "cpu"}, {"tactic", 0}, {"time_us", 1.0 + k}};
    }
  }
  nlohmann::json doc = nlohmann::json::parse(document("{}"));
  const Metadata m = current_metadata(current_device());
  doc["metadata"] = {{"gpu", m.gpu},
                     {"sm_count", m.sm_count},
                     {"driver_version", m.driver_version},
                     {"runtime_version", m.runtime_version},
                     {"library_version", m.library_version}};
  doc["entries"] = std::move(entries);
  write_text(path, doc.dump());
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Decoder> d;
  ASSERT_TRUE(Decoder::create(p, {.tune_cache_path = path}, &d).ok());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0);
  EXPECT_NE(d->notes().find("batch <= 1048576: cpu:0 (cache, nearest bucket b1048576|L16384)"),
            std::string::npos);
}

Measurement measured(const std::string& label, double us, double ragged_us, bool ok = true) {
  return {.candidate = {.backend = label, .label = label},
          .time_us = us,
          .ragged_us = ragged_us,
          .status = ok ? Status::Ok() : Status(StatusCode::kInternal, "failed")};
}

std::vector<std::string> order(const std::vector<Measurement>& ms) {
  std::vector<std::string> out;
  for (const Measurement* m : rank(ms)) out.push_back(m->candidate.label);
  return out;
}

TEST(Tuner, RankByUniformTimeWithoutRaggedTimes) {
  EXPECT_EQ(order({measured("a", 12, 0), measured("b", 10, 0), measured("c", 11, 0),
                   measured("d", 1, 0, /*ok=*/false)}),
            (std::vector<std::string>{"b", "c", "a"}));
  EXPECT_TRUE(rank({measured("x", 1, 1, false)}).empty());
}

TEST(Tuner, RankByBothBatchesWhenRaggedTimesAreThere) {
  // h_q 16, b 128, L 8192 in the recorded run 2026-11-21-h200-ragged-tune: sm90's narrow
  // tactics on the uniform grid case and on the reference's variable-length row (lengths in
  // [L/8, 2L)) of that shape. The cluster tactic is 1.7% faster on the first, 33% slower on the
  // second.
  const std::vector<Measurement> ms = {measured("cluster", 281.9, 409.2),
                                       measured("persistent", 286.7, 308.1),
                                       measured("one-shot", 286.6, 336.6)};
  EXPECT_EQ(order(ms), (std::vector<std::string>{"persistent", "one-shot", "cluster"}));
  // Score = sqrt(uniform / best uniform * ragged / best ragged); equal scores: faster uniform.
  EXPECT_EQ(order({measured("a", 10, 40), measured("b", 20, 20), measured("c", 40, 10)}),
            (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(order({measured("c", 40, 10), measured("b", 20, 20), measured("a", 10, 40)}),
            (std::vector<std::string>{"a", "b", "c"}));
  // A large uniform win still wins.
  EXPECT_EQ(order({measured("cluster", 32.1, 30), measured("persistent", 45.7, 27)}),
            (std::vector<std::string>{"cluster", "persistent"}));
}

TEST(Tuner, RaggedLengthsSpreadOverTheBucket) {
  for (const int batch : {2, 3, 8, 64, 128, 300}) {
    for (const int len : {1, 15, 64, 1024, 16384}) {
      std::vector<int32_t> lens = harness::make_ragged_lens(batch, len, 7);
      ASSERT_EQ(static_cast<int>(lens.size()), batch);
      EXPECT_EQ(lens, harness::make_ragged_lens(batch, len, 7));  // deterministic
      std::sort(lens.begin(), lens.end());
      EXPECT_EQ(lens.back(), len) << "batch " << batch << " len " << len;
      EXPECT_EQ(lens.front(), std::max(1, len / 16));
      for (int i = 1; i < batch; ++i) {
        // Even steps: neighbours differ by at most the step (rounded up).
        EXPECT_LE(lens[i] - lens[i - 1], (len - std::max(1, len / 16)) / (batch - 1) + 1);
      }
    }
  }
  EXPECT_EQ(harness::make_ragged_lens(1, 4096, 7), (std::vector<int32_t>{4096}));
  // Shuffled: not sorted for a batch of 64.
  const std::vector<int32_t> lens = harness::make_ragged_lens(64, 4096, 7);
  EXPECT_FALSE(std::is_sorted(lens.begin(), lens.end()));
}

// sm90's tactic order (its first is the default) runs on the host: cluster tactics first up to
// 2048 tokens or at batch 1, persistent above; the narrow tile's up to 16 query rows. The set of
// tactics does not depend on the batch or length, so a default for one bucket is valid for all.
TEST(Tuner, Sm90DefaultTacticByBatchAndLength) {
  const BackendEntry* sm90 = find_backend("sm90");
  // A build without CUDA lists sm90 with no tactics (core/registry.cc).
  if (sm90 == nullptr || sm90->tactics(Problem{}).empty()) {
    GTEST_SKIP() << "sm90 not compiled in";
  }
  const struct {
    int h_q, s_q, batch, len, first;
  } cases[] = {{128, 1, 8, 2048, 2},  {128, 1, 8, 2049, 0},  {128, 1, 1, 4096, 2},
               {128, 1, 2, 4096, 0},  {16, 1, 8, 2048, 5},   {16, 1, 8, 2049, 3},
               {16, 1, 1, 131072, 5}, {8, 2, 64, 4096, 3},   {16, 2, 64, 4096, 0},
               {16, 2, 64, 1024, 2},  {64, 2, 256, 65536, 0}};
  for (const auto& c : cases) {
    const Problem p{
        .h_q = c.h_q, .s_q = c.s_q, .page_size = 64, .max_batch = c.batch, .max_seq_len = c.len};
    const std::vector<Tactic> order = sm90->tactics(p);
    ASSERT_FALSE(order.empty());
    EXPECT_EQ(order.front().id, c.first)
        << "h_q " << c.h_q << " s_q " << c.s_q << " batch " << c.batch << " L " << c.len;
    Problem other = p;
    other.max_batch = 1;
    other.max_seq_len = 1024;
    std::vector<int> a, b;
    for (const Tactic& t : order) a.push_back(t.id);
    for (const Tactic& t : sm90->tactics(other)) b.push_back(t.id);
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    EXPECT_EQ(a, b);
  }
}

// Variable query lengths (var_q) with several 64-row tiles a request, from batch 64 past 2048
// tokens: one-shot (1) first, its CTAs of tiles past a request's q_len ending at once; else the
// order without var_q.
TEST(Tuner, Sm90VarQTacticOrder) {
  const BackendEntry* sm90 = find_backend("sm90");
  if (sm90 == nullptr || sm90->tactics(Problem{}).empty()) {
    GTEST_SKIP() << "sm90 not compiled in";
  }
  // The fp8 cache's wide tile (a 16-bit or an e4m3 q) takes the same rule; with a 16-bit q its
  // split-q tactics (14 persistent, 15 one-shot) come first, in that rule's order; with an e4m3 q
  // from 128 query tiles the in-step tile's (19 persistent, 20 one-shot).
  const struct {
    int h_q, s_q, batch, len, first;
    DType kv, q;
  } cases[] = {{128, 4, 128, 4096, 1, DType::kBF16, DType::kBF16},
               {64, 4, 64, 8192, 1, DType::kBF16, DType::kBF16},
               {128, 2, 64, 4096, 1, DType::kBF16, DType::kBF16},
               {64, 1, 128, 4096, 0, DType::kBF16, DType::kBF16},
               {16, 4, 128, 4096, 0, DType::kBF16, DType::kBF16},
               {128, 4, 32, 4096, 0, DType::kBF16, DType::kBF16},
               {128, 4, 128, 1024, 2, DType::kBF16, DType::kBF16},
               {128, 4, 128, 4096, 15, DType::kFP8E4M3, DType::kBF16},
               {64, 4, 64, 4096, 20, DType::kFP8E4M3, DType::kFP8E4M3},
               {64, 4, 16, 4096, 0, DType::kFP8E4M3, DType::kFP8E4M3},
               {128, 4, 32, 4096, 14, DType::kFP8E4M3, DType::kBF16},
               {64, 1, 128, 4096, 14, DType::kFP8E4M3, DType::kBF16},
               {128, 4, 128, 1024, 2, DType::kFP8E4M3, DType::kFP8E4M3}};
  for (const auto& c : cases) {
    const Problem p{.h_q = c.h_q,
                    .s_q = c.s_q,
                    .page_size = 64,
                    .max_batch = c.batch,
                    .max_seq_len = c.len,
                    .q_dtype = c.q,
                    .kv_dtype = c.kv,
                    .var_q = true};
    const std::vector<Tactic> order = sm90->tactics(p);
    ASSERT_FALSE(order.empty());
    EXPECT_EQ(order.front().id, c.first)
        << "h_q " << c.h_q << " s_q " << c.s_q << " batch " << c.batch << " L " << c.len << " kv "
        << to_string(c.kv) << " q " << to_string(c.q);
  }
}

// With the one-scale fp8 cache: a 16-bit q runs the narrow tile first up to 32 rows and past them
// the e4m3 wide tile with a bf16 q split into two e4m3 parts (14, 15; then the wide tile widening
// the cache, 0-2, and the narrow tile; an fp16 q from 0); an e4m3 q the wide tile from 17 rows on.
// A bf16 q up to 32 rows: the narrow tile with q split (16-18) first up to 16 rows and below
// batch 64, else right after the widening narrow tile (3-5); past 32 rows last. An e4m3 q: the
// in-step wide tile (19-21) first from 128 query tiles past 2048 tokens, else last.
TEST(Tuner, Sm90Fp8CacheTacticOrder) {
  const BackendEntry* sm90 = find_backend("sm90");
  if (sm90 == nullptr || sm90->tactics(Problem{}).empty()) {
    GTEST_SKIP() << "sm90 not compiled in";
  }
  const struct {
    int h_q, s_q;
    DType q;
    int first;
  } cases[] = {{16, 1, DType::kBF16, 16},   {32, 1, DType::kBF16, 3},
               {16, 2, DType::kFP16, 3},    {64, 1, DType::kBF16, 14},
               {128, 1, DType::kFP16, 0},   {16, 1, DType::kFP8E4M3, 3},
               {32, 1, DType::kFP8E4M3, 0}, {128, 1, DType::kFP8E4M3, 19}};
  for (const auto& c : cases) {
    const Problem p{.h_q = c.h_q,
                    .s_q = c.s_q,
                    .page_size = 64,
                    .max_batch = 64,
                    .max_seq_len = 4096,
                    .q_dtype = c.q,
                    .kv_dtype = DType::kFP8E4M3,
                    .out_dtype = c.q == DType::kFP16 ? DType::kFP16 : DType::kBF16};
    const std::vector<Tactic> order = sm90->tactics(p);
    // A bf16 q: also the split on the narrow tile (16-18): at 16 rows first, at 32 (batch 64)
    // after the widening narrow tile, past 32 last.
    const int rows = c.h_q * c.s_q;
    const bool bf16 = c.q == DType::kBF16;
    const bool split = bf16 && rows > 32;
    const bool e4m3 = c.q == DType::kFP8E4M3;
    // An e4m3 q: also the in-step wide tile (19-21), first from 128 query tiles of 64 rows (here
    // batch 64 at h_q 128), else last.
    ASSERT_EQ(order.size(), (split ? 8u : 6u) + (bf16 || e4m3 ? 3u : 0u));
    if (e4m3) {
      const size_t at = 64 * ((rows + 63) / 64) >= 128 ? 0 : order.size() - 3;
      for (size_t k = at; k < at + 3; ++k) {
        EXPECT_TRUE(order[k].id >= 19 && order[k].id <= 21) << "h_q " << c.h_q << " at " << k;
      }
    }
    if (bf16) {
      const size_t at = rows <= 16 ? 0 : rows <= 32 ? 3 : order.size() - 3;
      for (size_t k = at; k < at + 3; ++k) {
        EXPECT_TRUE(order[k].id >= 16 && order[k].id <= 18) << "h_q " << c.h_q << " at " << k;
      }
    }
    EXPECT_EQ(order.front().id, c.first) << "h_q " << c.h_q << " s_q " << c.s_q;
  }
  // The split-q tactics with a bf16 q past 32 rows: after the widening tile's three below batch 8;
  // from batch 8 first, but where the cluster schedule comes first (L <= 2048) before it only past
  // 1024 tokens or from 2048 blocks of 64-row tiles, else right after it.
  const struct {
    int h_q, batch, len, first, at;  // at: where tactic 14 stands (15 right after it)
  } split_cases[] = {{128, 1, 4096, 2, 3},   {128, 4, 8192, 0, 3},   {64, 8, 2048, 14, 0},
                     {64, 64, 1024, 2, 1},   {64, 128, 1024, 14, 0}, {128, 32, 1024, 2, 1},
                     {128, 64, 1024, 14, 0}, {128, 8, 4096, 14, 0}};
  // A bf16 q with the fp8 cache, page 64.
  const auto bf16_q = [](int h_q, int s_q, int batch, int len) {
    return Problem{.h_q = h_q,
                   .s_q = s_q,
                   .page_size = 64,
                   .max_batch = batch,
                   .max_seq_len = len,
                   .q_dtype = DType::kBF16,
                   .kv_dtype = DType::kFP8E4M3};
  };
  for (const auto& c : split_cases) {
    const std::vector<Tactic> order = sm90->tactics(bf16_q(c.h_q, 1, c.batch, c.len));
    ASSERT_EQ(order.size(), 11u);
    EXPECT_EQ(order[0].id, c.first) << "h_q " << c.h_q << " batch " << c.batch << " L " << c.len;
    EXPECT_EQ(order[c.at].id, 14) << "h_q " << c.h_q << " batch " << c.batch << " L " << c.len;
    EXPECT_EQ(order[c.at + 1].id, 15) << "h_q " << c.h_q << " batch " << c.batch << " L " << c.len;
  }
  // Up to 32 rows below batch 64 the split narrow tile comes first, in the narrow tile's order.
  const struct {
    int h_q, s_q, batch, len, first;
  } narrow_cases[] = {{16, 2, 32, 4096, 16},
                      {32, 1, 8, 1024, 18},
                      {8, 1, 1, 4096, 18},
                      {16, 2, 64, 4096, 3},
                      {16, 1, 128, 1024, 18}};
  for (const auto& c : narrow_cases) {
    const std::vector<Tactic> order = sm90->tactics(bf16_q(c.h_q, c.s_q, c.batch, c.len));
    ASSERT_FALSE(order.empty());
    EXPECT_EQ(order.front().id, c.first)
        << "h_q " << c.h_q << " s_q " << c.s_q << " batch " << c.batch << " L " << c.len;
  }
}

// Sparse decode of the V3.2 cache with a 16-bit q: the split kernel's tactics (6 persistent, 7
// one-shot, 12 cluster) first past 32 rows: cluster first from 8 to 128 of its 64-row tiles (rows
// as requests x tiles a request), else one-shot from 64 rows as requests (batch x s_q) and
// persistent below, cluster after them; up to 32 rows they come last (6, 7, 12). Up to 32 heads the
// sparse narrow kernel's (8 persistent, 9 one-shot, same rule) come first, after the sparse mma
// kernel's (10, 11, same rule; a bf16 q and up to 16 heads; up to 32 after the narrow kernel's),
// and before those its cluster schedule (13) up to 256 of its 16-row tiles up to 16 rows (512 at
// topk 512 or less), up to 512 at 17-32 rows, past 32 rows up to 32 (at topk 512 or less 128).
// At topk 1024 or less the split kernel's cluster schedule first up to 256 tiles, at 512 or less
// 512. No tactic twice.
// Other sparse caches and dense problems list none of them.
TEST(Tuner, Sm90SparseV32TacticOrder) {
  const BackendEntry* sm90 = find_backend("sm90");
  if (sm90 == nullptr || sm90->tactics(Problem{}).empty()) {
    GTEST_SKIP() << "sm90 not compiled in";
  }
  const struct {
    int h_q, s_q, batch;
    DType q;
    int first;
  } cases[] = {{64, 1, 128, DType::kBF16, 12}, {128, 2, 32, DType::kFP16, 12},
               {128, 1, 8, DType::kBF16, 12},  {64, 2, 16, DType::kBF16, 12},
               {40, 1, 1, DType::kFP16, 6},    {16, 1, 128, DType::kBF16, 13},
               {128, 2, 64, DType::kBF16, 7},  {64, 2, 128, DType::kFP16, 7},
               {64, 1, 4, DType::kFP16, 6},    {16, 1, 8, DType::kBF16, 13},
               {8, 2, 8, DType::kFP16, 8},     {8, 2, 32, DType::kFP16, 9},
               {32, 1, 64, DType::kBF16, 13},  {32, 2, 8, DType::kBF16, 13},
               {32, 2, 64, DType::kBF16, 13},  {32, 1, 128, DType::kFP16, 9},
               {32, 1, 128, DType::kBF16, 13}, {32, 2, 128, DType::kBF16, 13},
               {32, 2, 256, DType::kBF16, 9},  {24, 1, 256, DType::kBF16, 13},
               {24, 1, 512, DType::kBF16, 9},  {16, 2, 128, DType::kBF16, 13},
               {64, 1, 1, DType::kBF16, 13},   {64, 2, 1, DType::kBF16, 13},
               {128, 1, 1, DType::kBF16, 13},  {128, 2, 1, DType::kBF16, 13},
               {40, 1, 1, DType::kBF16, 13},   {8, 1, 4, DType::kBF16, 13},
               {16, 2, 64, DType::kBF16, 13},  {16, 1, 256, DType::kBF16, 13},
               {16, 1, 512, DType::kBF16, 11}, {64, 1, 2, DType::kBF16, 13},
               {64, 1, 4, DType::kBF16, 13},   {64, 2, 2, DType::kBF16, 13},
               {64, 1, 8, DType::kBF16, 13},   {128, 1, 4, DType::kBF16, 13},
               {64, 1, 16, DType::kBF16, 12},  {128, 2, 4, DType::kBF16, 12}};
  for (const auto& c : cases) {
    const Problem p{.h_q = c.h_q,
                    .s_q = c.s_q,
                    .page_size = 64,
                    .max_batch = c.batch,
                    .max_seq_len = 8192,
                    .q_dtype = c.q,
                    .kv_dtype = DType::kFP8E4M3,
                    .out_dtype = c.q,
                    .kv_layout = KvLayout::kFp8Blockwise,
                    .topk = 2048};
    const std::vector<Tactic> order = sm90->tactics(p);
    ASSERT_FALSE(order.empty());
    EXPECT_EQ(order.front().id, c.first) << "h_q " << c.h_q << " s_q " << c.s_q << " b " << c.batch;
    std::vector<int> ids;
    for (const Tactic& t : order) ids.push_back(t.id);
    std::vector<int> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end())
        << "a tactic listed twice, h_q " << c.h_q << " s_q " << c.s_q << " b " << c.batch;
    EXPECT_NE(std::find(ids.begin(), ids.end(), 6), ids.end());
    EXPECT_NE(std::find(ids.begin(), ids.end(), 7), ids.end());
    EXPECT_NE(std::find(ids.begin(), ids.end(), 12), ids.end());
    if (c.h_q <= 32) {
      EXPECT_TRUE(ids[ids.size() - 3] == 6 && ids[ids.size() - 2] == 7 && ids.back() == 12);
    }
    // The sparse narrow kernel's tactics, first, up to 32 heads only.
    const bool narrow = std::find(ids.begin(), ids.end(), 8) != ids.end() &&
                        std::find(ids.begin(), ids.end(), 9) != ids.end();
    EXPECT_EQ(narrow, c.h_q <= 32) << "h_q " << c.h_q;
    // The sparse mma kernel's (10, 11, and 13 its cluster schedule): a bf16 q only.
    const bool mma = std::find(ids.begin(), ids.end(), 10) != ids.end() &&
                     std::find(ids.begin(), ids.end(), 11) != ids.end() &&
                     std::find(ids.begin(), ids.end(), 13) != ids.end();
    EXPECT_EQ(mma, c.q == DType::kBF16) << "h_q " << c.h_q;
  }
  // topk 512: the mma kernel's cluster schedule first up to 128 of its tiles past 32 rows too
  // (the split kernel's at topk 2048, and at topk 512 past 128).
  // Past 128 tiles the cluster schedules first at smaller topk: the split kernel's up to 256 of its
  // tiles at topk 1024 and 512 at topk 512, the mma kernel's up to 512 of its at 17-32 rows at
  // topk 512.
  for (const auto& [h_q, batch, topk, first] : {std::tuple{8, 8, 512, 13},
                                                {64, 8, 512, 13},
                                                {128, 8, 512, 13},
                                                {128, 16, 512, 13},
                                                {64, 32, 512, 13},
                                                {128, 32, 512, 12},
                                                {32, 128, 512, 13},
                                                {32, 256, 512, 13},
                                                {32, 128, 1024, 13},
                                                {32, 256, 1024, 13},
                                                {32, 512, 1024, 9},
                                                {64, 256, 512, 12},
                                                {128, 256, 512, 12},
                                                {128, 256, 1024, 7},
                                                {64, 256, 1024, 12},
                                                {64, 512, 1024, 7}}) {
    const Problem p{.h_q = h_q,
                    .page_size = 64,
                    .max_batch = batch,
                    .max_seq_len = 8192,
                    .kv_dtype = DType::kFP8E4M3,
                    .kv_layout = KvLayout::kFp8Blockwise,
                    .topk = topk};
    EXPECT_EQ(sm90->tactics(p).front().id, first)
        << "h_q " << h_q << " batch " << batch << " topk " << topk;
  }
  // V4 past 32 rows: persistent first up to 8 of the wide tile's tiles (16 at topk 2048), where
  // the cluster rule (short requests) would take cluster.
  for (const auto& [h_q, batch, topk, first] : {std::tuple{64, 1, 512, 0},
                                                {64, 8, 512, 0},
                                                {128, 1, 1024, 0},
                                                {128, 8, 512, 2},
                                                {128, 8, 2048, 0},
                                                {64, 32, 1024, 2},
                                                {16, 1, 512, 5}}) {
    const Problem p{.h_q = h_q,
                    .d_qk = kV4Dqk,
                    .page_size = 64,
                    .max_batch = batch,
                    .max_seq_len = 8192,
                    .kv_dtype = DType::kFP8E4M3,
                    .kv_layout = KvLayout::kFp8V4,
                    .topk = topk,
                    .extra_topk = 128};
    EXPECT_EQ(sm90->tactics(p).front().id, first)
        << "v4 h_q " << h_q << " batch " << batch << " topk " << topk;
  }
  for (const bool v4 : {false, true}) {
    Problem p{.h_q = 64, .page_size = 64, .max_batch = 64, .max_seq_len = 8192};
    if (v4) {
      p.kv_dtype = DType::kFP8E4M3;
      p.kv_layout = KvLayout::kFp8V4;
      p.d_qk = kV4Dqk;
      p.topk = 512;
    }
    for (const Tactic& t : sm90->tactics(p)) EXPECT_LT(t.id, 6) << (v4 ? "v4" : "dense");
  }
}

TEST(Tuner, RefusesWithoutAGpu) {
  if (current_device().present) GTEST_SKIP() << "a GPU is present";
  std::vector<Measurement> measured;
  Entry e;
  const Status st = tune_bucket(Problem{}, 1, 1024, {}, &measured, &e);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("GPU"), std::string::npos);
}

}  // namespace
}  // namespace mlakit::tune
