// The autotuner's CPU-side parts: buckets, the JSON cache (round trip, merge, metadata, corrupt
// files, concurrent writers) and the choice between cache and heuristic.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

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

// A cache document of test_metadata() with `entries` (a JSON object's text) spliced in.
std::string document(const std::string& entries, const std::string& format = "2") {
  return R"({"format": )" + format +
         R"(, "metadata": {"gpu": "Test GPU", "sm_count": 132, "driver_version": 13000,
      "runtime_version": 13000, "library_version": "0.1.0"}, "entries": )" +
         entries + "}";
}

// Runs `body` in a child process limited to 1 GiB more address space than it starts with, and
// waits at most `seconds` for it: true when it exited with 0. A child still running then is
// killed, so a load that hangs or reads without end fails the test instead of stalling it or
// taking the machine's memory.
bool in_child_within(double seconds, const std::function<bool()>& body) {
  const pid_t child = ::fork();
  if (child == 0) {
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const rlim_t limit = static_cast<rlim_t>(pages) * ::sysconf(_SC_PAGESIZE) + (1ull << 30);
    const rlimit rl{.rlim_cur = limit, .rlim_max = limit};
    ::setrlimit(RLIMIT_AS, &rl);
    ::_exit(body() ? 0 : 1);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      ADD_FAILURE() << "still running after " << seconds << " s";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
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
  // Sparse problems with and without an extra cache, and ranks of context parallelism, are
  // tuned apart; the default problem's key is unchanged.
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
        cache.put("writer" + std::to_string(w) + "|b" + std::to_string(batch_bucket_at(r)) + "|L1",
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

// Numbers that do not fit the field (an int, a non-negative tactic, a finite time >= 0), values of
// the wrong type and keys that are not bucket keys: the file is ignored with a warning that names
// the field, never read into an entry (a tactic of 1e300 was undefined behaviour and became the
// default tactic).
TEST(Cache, MalformedValuesAreIgnoredWithAWarningNamingThem) {
  const std::string path = temp_path("malformed.json");
  const std::string good_entry =
      R"({"backend": "sm80", "tactic": 1, "time_us": 10, "ragged_us": 12, "runner_up": "sm90",
          "runner_up_tactic": 0, "runner_up_us": 11, "runner_up_ragged_us": 13})";
  write_text(path, document(R"({"h|b64|L4096": )" + good_entry + "}"));
  std::string warning;
  ASSERT_EQ(Cache::load(path, test_metadata(), &warning).entries().size(), 1u) << warning;
  const struct {
    std::string text, named;
  } bad[] = {
      {document("{}", "1e300"), "format"},
      {document("{}", "2.5"), "format"},
      {document("{}", "18446744073709551617"), "format"},
      {R"({"format": 2, "metadata": {"gpu": "Test GPU", "sm_count": 1e300, "driver_version": 13000,
          "runtime_version": 13000, "library_version": "0.1.0"}, "entries": {}})",
       "sm_count"},
      {R"({"format": 2, "metadata": {"gpu": "Test GPU", "sm_count": 132,
          "driver_version": 4294967296, "runtime_version": 13000, "library_version": "0.1.0"},
          "entries": {}})",
       "driver_version"},
      {document(R"({"h|b64|L4096": {"backend": "sm80", "tactic": 1e300, "time_us": 10}})"),
       "tactic"},
      {document(R"({"h|b64|L4096": {"backend": "sm80", "tactic": -1, "time_us": 10}})"), "tactic"},
      {document(R"({"h|b64|L4096": {"backend": "sm80", "tactic": 2147483648, "time_us": 10}})"),
       "tactic"},
      {document(R"({"h|b64|L4096": {"backend": "sm80", "tactic": 1.5, "time_us": 10}})"), "tactic"},
      {document(R"({"h|b64|L4096": {"backend": "sm80", "tactic": 0, "time_us": -3}})"), "time_us"},
      {document(R"({"h|b64|L4096": {"backend": "sm80", "tactic": 0, "time_us": "fast"}})"),
       "time_us"},
      {document(R"({"h|b64|L4096": {"backend": "sm80", "tactic": 0, "time_us": 1,
          "runner_up_tactic": 1e20}})"),
       "runner_up_tactic"},
      {document(R"({"h|b64|L4096": {"backend": "sm80", "tactic": 0, "time_us": 1,
          "ragged_us": -1}})"),
       "ragged_us"},
      {document(R"({"h|b64|L4096": {"backend": 7, "tactic": 0, "time_us": 1}})"), "backend"},
      {document(R"({"h|b64|L4096": {"backend": "", "tactic": 0, "time_us": 1}})"), "backend"},
      {document(R"({"h|b64|L4096": [1, 2]})"), "h|b64|L4096"},
      {document(R"({"no bucket": )" + good_entry + "}"), "no bucket"},
      {document(R"({"h|b0|L4096": )" + good_entry + "}"), "h|b0|L4096"},
      {document(R"({"h|b3|L4096": )" + good_entry + "}"), "h|b3|L4096"},
      {document(R"({"h|b64|L1000": )" + good_entry + "}"), "h|b64|L1000"},
      {document(R"({"h|b64|L4096x": )" + good_entry + "}"), "h|b64|L4096x"},
      {document(R"({"h|b99999999999|L4096": )" + good_entry + "}"), "h|b99999999999|L4096"},
      {document("[]"), "entries"},
  };
  for (const auto& [text, named] : bad) {
    write_text(path, text);
    warning.clear();
    const Cache loaded = Cache::load(path, test_metadata(), &warning);
    EXPECT_TRUE(loaded.entries().empty()) << text;
    EXPECT_NE(warning.find("ignored"), std::string::npos) << "no warning for: " << text;
    EXPECT_NE(warning.find(named), std::string::npos) << warning << "\nfor: " << text;
  }
}

// A FIFO would block the open (Decoder::create hung), /dev/zero never ends (memory grew without
// bound), a directory is not a file: each is refused at once with a warning.
TEST(Cache, NonRegularFilesAreRefusedAtOnce) {
  const std::string fifo = temp_path("cache.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string dir = temp_path("cache.dir");
  std::filesystem::create_directories(dir);
  for (const std::string& path : {fifo, std::string("/dev/zero"), dir}) {
    EXPECT_TRUE(in_child_within(20, [&] {
      std::string warning;
      const bool empty = Cache::load(path, test_metadata(), &warning).entries().empty();
      return empty && warning.find("not a regular file") != std::string::npos;
    })) << path;
  }
}

// Files over the size cap are not read (a sparse file: no disk is used).
TEST(Cache, OversizedFileIsRefusedWithAWarning) {
  const std::string path = temp_path("huge.json");
  write_text(path, document("{}"));
  std::filesystem::resize_file(path, 17u << 20);
  std::string warning;
  EXPECT_TRUE(Cache::load(path, test_metadata(), &warning).entries().empty());
  EXPECT_NE(warning.find("larger than"), std::string::npos) << warning;
}

// Paths that exist but cannot be read give a warning (a missing file does not: see above).
TEST(Cache, UnreadablePathsGiveAWarning) {
  std::string warning;
  EXPECT_TRUE(Cache::load(std::string(5000, 'x'), test_metadata(), &warning).entries().empty());
  EXPECT_NE(warning.find("cannot be read"), std::string::npos) << warning;
  EXPECT_LT(warning.size(), 600u) << "the path is shortened in the warning";
  if (::geteuid() == 0) GTEST_SKIP() << "root reads files without read permission";
  const std::string path = temp_path("unreadable.json");
  write_text(path, document("{}"));
  ::chmod(path.c_str(), 0);
  warning.clear();
  EXPECT_TRUE(Cache::load(path, test_metadata(), &warning).entries().empty());
  EXPECT_NE(warning.find("cannot be read"), std::string::npos) << warning;
}

// Deep nesting is refused before the parser builds a node per level.
TEST(Cache, DeepNestingIsRefused) {
  const std::string path = temp_path("deep.json");
  write_text(path, std::string(4 << 20, '['));
  std::string warning;
  EXPECT_TRUE(Cache::load(path, test_metadata(), &warning).entries().empty());
  EXPECT_NE(warning.find("nested deeper"), std::string::npos) << warning;
}

// Strings from the file land in warnings and notes shortened: a 4 MB GPU name or format value
// does not become a 4 MB warning.
TEST(Cache, HugeStringsAreShortenedInWarnings) {
  const std::string path = temp_path("long_strings.json");
  const std::string huge(4 << 20, 'G');
  for (const std::string& text :
       {R"({"format": 2, "metadata": {"gpu": ")" + huge +
            R"(", "sm_count": 132, "driver_version": 13000, "runtime_version": 13000,
            "library_version": "0.1.0"}, "entries": {}})",
        document("{}", "\"" + huge + "\""),
        document(R"({"h|b1|L1": {"backend": ")" + huge + R"(", "tactic": 0, "time_us": 1}})"),
        document("{\"" + huge + "\": 1}")}) {
    write_text(path, text);
    std::string warning;
    EXPECT_TRUE(Cache::load(path, test_metadata(), &warning).entries().empty());
    EXPECT_NE(warning.find("ignored"), std::string::npos);
    EXPECT_LT(warning.size(), 1000u) << warning.substr(0, 300);
  }
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
