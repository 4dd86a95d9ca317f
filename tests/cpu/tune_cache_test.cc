// The autotuner's JSON cache: round trip, merge, metadata, corrupt, malformed, oversized and
// unreadable files, concurrent writers, and the nearest bucket of a problem.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "mlakit/mlakit.h"
#include "tune/bucket.h"
#include "tune/cache.h"
#include "tune_files.h"

namespace mlakit::tune {
namespace {

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

}  // namespace
}  // namespace mlakit::tune
