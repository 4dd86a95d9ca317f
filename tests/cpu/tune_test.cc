// The autotuner's CPU-side parts: buckets, the JSON cache (round trip, merge, metadata, corrupt
// files, concurrent writers) and the choice between cache and heuristic.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/backend.h"
#include "harness/workload.h"
#include "mlakit/mlakit.h"
#include "tune/bucket.h"
#include "tune/cache.h"
#include "tune/tuner.h"

namespace mlakit::tune {
namespace {

std::string temp_path(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("mlakit_tune_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::filesystem::remove(path);
  return path.string();
}

Metadata test_metadata() {
  return {.gpu = "Test GPU",
          .sm_count = 132,
          .driver_version = 13000,
          .runtime_version = 13000,
          .library_version = "0.1.0"};
}

Entry entry(const std::string& backend, int tactic, double us) {
  return {.backend = backend,
          .tactic = tactic,
          .time_us = us,
          .ragged_us = us * 0.75,
          .runner_up = "other",
          .runner_up_tactic = 1,
          .runner_up_us = us * 1.5,
          .runner_up_ragged_us = us * 0.5};
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

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
}

TEST(Cache, RoundTrip) {
  const std::string path = temp_path("roundtrip.json");
  Cache cache(test_metadata());
  cache.put("k1|b1|L1024", entry("sm80", 1, 12.5));
  cache.put("k1|b64|L4096", entry("sm90", 0, 99.0));
  ASSERT_TRUE(cache.save(path).ok());
  std::string warning;
  const Cache loaded = Cache::load(path, test_metadata(), &warning);
  EXPECT_TRUE(warning.empty()) << warning;
  ASSERT_EQ(loaded.entries().size(), 2u);
  const Entry* e = loaded.find("k1|b1|L1024");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->backend, "sm80");
  EXPECT_EQ(e->tactic, 1);
  EXPECT_DOUBLE_EQ(e->time_us, 12.5);
  EXPECT_DOUBLE_EQ(e->ragged_us, 9.375);
  EXPECT_EQ(e->runner_up, "other");
  EXPECT_DOUBLE_EQ(e->runner_up_us, 18.75);
  EXPECT_DOUBLE_EQ(e->runner_up_ragged_us, 6.25);
}

TEST(Cache, SaveMergesWithTheFile) {
  const std::string path = temp_path("merge.json");
  Cache first(test_metadata());
  first.put("a|b1|L1", entry("sm80", 0, 1));
  first.put("shared|b1|L1", entry("sm80", 0, 5));
  ASSERT_TRUE(first.save(path).ok());
  Cache second(test_metadata());
  second.put("b|b1|L1", entry("sm90", 0, 2));
  second.put("shared|b1|L1", entry("sm90", 1, 4));
  ASSERT_TRUE(second.save(path).ok());
  const Cache loaded = Cache::load(path, test_metadata(), nullptr);
  EXPECT_EQ(loaded.entries().size(), 3u);
  ASSERT_NE(loaded.find("a|b1|L1"), nullptr);
  ASSERT_NE(loaded.find("b|b1|L1"), nullptr);
  EXPECT_EQ(loaded.find("shared|b1|L1")->backend, "sm90");  // the newer save wins its keys
}

TEST(Cache, MetadataMismatchIsIgnoredWithAWarning) {
  const std::string path = temp_path("mismatch.json");
  Cache cache(test_metadata());
  cache.put("a|b1|L1", entry("sm80", 0, 1));
  ASSERT_TRUE(cache.save(path).ok());
  Metadata other = test_metadata();
  other.gpu = "Other GPU";
  std::string warning;
  const Cache loaded = Cache::load(path, other, &warning);
  EXPECT_TRUE(loaded.entries().empty());
  EXPECT_NE(warning.find("ignored"), std::string::npos) << warning;
  EXPECT_NE(warning.find("Test GPU"), std::string::npos) << warning;
  other = test_metadata();
  other.library_version = "9.9.9";
  EXPECT_TRUE(Cache::load(path, other, &warning).entries().empty());
}

TEST(Cache, CorruptAndTruncatedFilesAreIgnoredWithAWarning) {
  const std::string path = temp_path("corrupt.json");
  Cache cache(test_metadata());
  cache.put("a|b1|L1", entry("sm80", 0, 1));
  ASSERT_TRUE(cache.save(path).ok());
  std::ifstream in(path);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<std::string> bad = {
      good.substr(0, good.size() / 2),  // truncated
      "not json at all",
      "",
      "[]",
      R"({"format": 2, "metadata": {"gpu": 3}, "entries": {}})",
      R"({"format": 3, "metadata": {}, "entries": {}})",
      R"({"format": 2, "metadata": {"gpu": "Test GPU", "sm_count": 132, "driver_version": 13000,
          "runtime_version": 13000, "library_version": "0.1.0"}, "entries": {"x": {"tactic": 0}}})",
      // Format 1 chose on uniform batches alone (tune::rank): stale, whatever it holds.
      R"({"format": 1, "metadata": {"gpu": "Test GPU", "sm_count": 132, "driver_version": 13000,
          "runtime_version": 13000, "library_version": "0.1.0"},
          "entries": {"x": {"backend": "sm90", "tactic": 2, "time_us": 10}}})",
      std::string("\0\xff\xfe garbage", 12),
  };
  for (const std::string& text : bad) {
    write_text(path, text);
    std::string warning;
    const Cache loaded = Cache::load(path, test_metadata(), &warning);
    EXPECT_TRUE(loaded.entries().empty()) << text;
    EXPECT_NE(warning.find("ignored"), std::string::npos) << "no warning for: " << text;
  }
  // A corrupt file is replaced by a valid one on the next save.
  Cache fresh(test_metadata());
  fresh.put("b|b1|L1", entry("sm80", 0, 1));
  ASSERT_TRUE(fresh.save(path).ok());
  EXPECT_EQ(Cache::load(path, test_metadata(), nullptr).entries().size(), 1u);
}

TEST(Cache, MissingFileIsAnEmptyCacheWithoutWarning) {
  std::string warning;
  EXPECT_TRUE(Cache::load(temp_path("absent.json"), test_metadata(), &warning).entries().empty());
  EXPECT_TRUE(warning.empty());
  EXPECT_FALSE(Cache(test_metadata()).save("").ok());
}

TEST(Cache, TwoConcurrentWritersKeepBothEntries) {
  const std::string path = temp_path("concurrent.json");
  constexpr int kRounds = 40;
  pid_t children[2];
  for (int w = 0; w < 2; ++w) {
    children[w] = ::fork();
    ASSERT_GE(children[w], 0);
    if (children[w] == 0) {
      for (int r = 0; r < kRounds; ++r) {
        Cache cache(test_metadata());
        cache.put("writer" + std::to_string(w) + "|b" + std::to_string(r) + "|L1",
                  entry("sm80", w, r));
        if (!cache.save(path).ok()) ::_exit(1);
      }
      ::_exit(0);
    }
  }
  for (pid_t child : children) {
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::string warning;
  const Cache loaded = Cache::load(path, test_metadata(), &warning);
  EXPECT_TRUE(warning.empty()) << warning;
  EXPECT_EQ(loaded.entries().size(), 2u * kRounds);
}

TEST(Cache, NearestBucketOfTheSameProblem) {
  Problem p;
  Problem other = p;
  other.h_q = 16;
  Cache cache(test_metadata());
  cache.put(bucket_key(p, 1, 1024), entry("a", 0, 1));
  cache.put(bucket_key(p, 64, 8192), entry("b", 0, 1));
  cache.put(bucket_key(other, 32, 4096), entry("c", 0, 1));
  std::string key;
  EXPECT_EQ(cache.nearest(p, 32, 4096, &key)->backend, "b");
  EXPECT_EQ(key, bucket_key(p, 64, 8192));
  EXPECT_EQ(cache.nearest(p, 2, 1024, nullptr)->backend, "a");
  EXPECT_EQ(cache.nearest(other, 1, 1, nullptr)->backend, "c");
  Problem unseen = p;
  unseen.s_q = 2;
  EXPECT_EQ(cache.nearest(unseen, 1, 1, nullptr), nullptr);
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
  if (sm90 == nullptr) GTEST_SKIP() << "sm90 not compiled in";
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
