// The mlakit program on hostile flags: each run as a child process (its address space limited,
// so that a program that allocates before refusing fails the test instead of taking the
// machine's memory), its exit code and output checked.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mlakit/mlakit.h"
#include "sanitizers.h"

#ifdef MLAKIT_PROGRAM
namespace {

struct Result {
  int exit_code = -1;  // 128 + signal when a signal ended it
  std::string output;  // stdout and stderr
  double seconds = 0;
};

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef MLAKIT_SANITIZED
    GTEST_SKIP() << "the program is sanitized: its shadow memory does not fit RLIMIT_AS";
#endif
  }
};

// Runs build/mlakit with `args`, its address space limited to `limit` bytes.
Result run_mlakit(const std::vector<std::string>& args, uint64_t limit = uint64_t{4} << 30) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return {};
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = ::fork();
  if (child == 0) {
    ::dup2(pipe_fds[1], 1);
    ::dup2(pipe_fds[1], 2);
    ::close(pipe_fds[0]);
    const rlimit rl{.rlim_cur = limit, .rlim_max = limit};
    ::setrlimit(RLIMIT_AS, &rl);
    std::vector<char*> argv{const_cast<char*>(MLAKIT_PROGRAM)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(MLAKIT_PROGRAM, argv.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  Result r;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof(buf))) > 0;) r.output.append(buf, n);
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

bool has(const Result& r, const std::string& text) {
  return r.output.find(text) != std::string::npos;
}

// A small valid run: the control for the cases below.
TEST_F(Cli, SmallBenchRuns) {
  const Result r = run_mlakit({"bench", "--backend", "cpu", "--heads", "1", "--batch", "2",
                               "--seq-len", "16", "--replays", "1", "--warmup", "0"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// 2L - 1 overflowed a signed int computing the lengths of --var 1, before any validation.
TEST_F(Cli, SeqLenTooLongForVarIsRefusedBeforeTheLengths) {
  const Result r = run_mlakit(
      {"bench", "--backend", "cpu", "--batch", "1", "--seq-len", "2000000000", "--var", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "--seq-len: expected 0..8388608 with --var 1")) << r.output;
  EXPECT_TRUE(has(r, "given 2000000000")) << r.output;
}

// 2e9 lengths (7.8 GB) were allocated before the batch was refused.
TEST_F(Cli, HugeBatchIsRefusedBeforeAllocating) {
  const Result r = run_mlakit(
      {"bench", "--backend", "cpu", "--batch", "2000000000", "--seq-len", "16"}, uint64_t{1} << 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "--batch")) << r.output;
  EXPECT_TRUE(has(r, "expected 1..1048576")) << r.output;
}

// A valid problem whose inputs cannot fit: refused up front with the bytes it needs (it
// allocated until the process died).
TEST_F(Cli, ProblemLargerThanMemoryIsRefusedUpFront) {
  const Result r =
      run_mlakit({"bench", "--backend", "cpu", "--batch", "100000", "--seq-len", "10000000"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "needs 1152")) << r.output;  // 1.152e15 bytes of cache alone
  EXPECT_TRUE(has(r, "bytes of host memory")) << r.output;
  EXPECT_LT(r.seconds, 20);
}

// Comma lists multiply out: a sweep of too many cases or requests is refused before expanding.
TEST_F(Cli, SweepTooLargeIsRefused) {
  std::string heads = "1";
  for (int i = 0; i < 300; ++i) heads += ",1";
  const Result r = run_mlakit({"bench", "--backend", "cpu", "--heads", heads, "--s-q", heads,
                               "--batch", "1", "--seq-len", "16"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "cases")) << r.output;
}

// --json to a path that cannot be written exited 0 having written nothing.
TEST_F(Cli, UnwritableJsonPathIsAnError) {
  const Result r =
      run_mlakit({"bench", "--backend", "cpu", "--heads", "1", "--batch", "1", "--seq-len", "16",
                  "--replays", "1", "--json", "/nonexistent-dir/results.json"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "--json")) << r.output;
  EXPECT_TRUE(has(r, "/nonexistent-dir/results.json")) << r.output;
}

// Without a GPU the cpu backend runs and the tune cache (of GPU timings) is not read: say so.
TEST_F(Cli, TuneCacheWithoutAGpuIsAWarning) {
  if (mlakit::current_device().present) GTEST_SKIP() << "a GPU is present";
  const Result r = run_mlakit({"bench", "--heads", "1", "--batch", "1", "--seq-len", "16",
                               "--replays", "1", "--tune-cache", "/tmp/mlakit-cli-test.json"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "warning: --tune-cache")) << r.output;
}

// Sparse problems in every layout run on the cpu backend and pass the check: the workload draws
// indices into each request's pages (some -1), and the V4 extra cache's window.
TEST_F(Cli, SparseLayoutsCheckOnTheCpu) {
  const std::vector<std::vector<std::string>> layouts = {
      {"--layout", "v32"},
      {"--layout", "v4"},
      {"--layout", "v4", "--extra-topk", "24", "--extra-page-size", "16"},
      {"--layout", "bf16"},
      {"--layout", "dense", "--dtype", "fp8"},
      {"--dtype", "fp8-blockwise"},
  };
  for (const std::vector<std::string>& layout : layouts) {
    std::vector<std::string> args = {"check",   "--backend",   "cpu",     "--heads", "4",
                                     "--s-q",   "1,2",         "--batch", "2",       "--seq-len",
                                     "70",      "--page-size", "64",      "--topk",  "32",
                                     "--sinks", "--lse"};
    args.insert(args.end(), layout.begin(), layout.end());
    const Result r = run_mlakit(args);
    EXPECT_EQ(r.exit_code, 0) << layout[1] << "\n" << r.output;
    EXPECT_TRUE(has(r, "0 failure(s)")) << r.output;
    EXPECT_FALSE(has(r, "FAIL")) << r.output;
  }
}

// --var-q 1: dense and sparse, the packed rows checked and nothing written past them (the check
// poisons out and lse); --var-q with --cp is refused by name.
TEST_F(Cli, VarQChecksOnTheCpu) {
  for (const std::string topk : {"0", "32"}) {
    const Result r =
        run_mlakit({"check", "--backend", "cpu", "--var-q", "1", "--heads", "4", "--s-q", "1,3,16",
                    "--batch", "3", "--seq-len", "70", "--topk", topk, "--sinks", "--lse"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r, "0 failure(s)")) << r.output;
  }
  const Result cp = run_mlakit({"bench", "--cp", "2", "--var-q", "1"});
  EXPECT_EQ(cp.exit_code, 2) << cp.output;
  EXPECT_TRUE(has(cp, "--var-q: expected 0 with --cp")) << cp.output;
}

TEST_F(Cli, SparseV4BenchWritesTheLayoutToJson) {
  const std::string json = ::testing::TempDir() + "mlakit-cli-v4.json";
  const Result r =
      run_mlakit({"bench", "--backend", "cpu", "--heads", "8",  "--batch",      "2",  "--seq-len",
                  "300",   "--layout",  "v4",  "--topk",  "64", "--extra-topk", "16", "--replays",
                  "1",     "--warmup",  "0",   "--json",  json});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(json);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"layout\": \"fp8_v4\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"extra_topk\": 16"), std::string::npos) << text;
  EXPECT_NE(text.find("\"topk\": 64"), std::string::npos) << text;
  std::filesystem::remove(json);
}

// A --dtype that contradicts --layout, and an extra cache without --topk, are refused by name.
TEST_F(Cli, LayoutFlagsThatDisagreeAreRefused) {
  const std::vector<std::string> base = {"bench", "--backend", "cpu", "--batch",
                                         "1",     "--seq-len", "16"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_mlakit(args);
  };
  Result r = with({"--layout", "v4", "--dtype", "fp8"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "--dtype: expected none with --layout v4")) << r.output;
  EXPECT_TRUE(has(r, "given fp8")) << r.output;
  r = with({"--layout", "v32", "--dtype", "bf16"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "--dtype: expected none or fp8-blockwise with --layout v32")) << r.output;
  r = with({"--layout", "bf16", "--dtype", "fp16"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "--dtype: expected none or bf16 with --layout bf16")) << r.output;
  r = with({"--extra-topk", "8"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r, "extra_topk: expected 0 for a dense problem")) << r.output;
  r = with({"--layout", "v5"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "--layout")) << r.output;
}

// info --json: one JSON document with the device, every backend and, with problem flags, each
// backend's verdict on the problem.
TEST_F(Cli, InfoJson) {
  // No address-space limit: CUDA's initialization reserves more than the default's 4 GiB, and
  // with it the program saw no device on a GPU machine.
  const Result r =
      run_mlakit({"info", "--json", "--heads", "16", "--page-size", "48"}, RLIM_INFINITY);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json doc = nlohmann::json::parse(r.output);
  EXPECT_EQ(doc["mlakit_version"], std::string(mlakit::version()));
  EXPECT_EQ(doc["device"]["present"], mlakit::current_device().present);
  bool cpu = false;
  for (const auto& b : doc["backends"]) {
    if (b["name"] == "cpu") cpu = b["available"] == true && b["device_memory"] == false;
    if (b["available"] == false) EXPECT_FALSE(b["unavailable_reason"].get<std::string>().empty());
  }
  EXPECT_TRUE(cpu) << r.output;
  ASSERT_EQ(doc["problems"].size(), 1u) << r.output;
  EXPECT_NE(doc["problems"][0]["problem"].get<std::string>().find("page 48"), std::string::npos);
  for (const auto& v : doc["problems"][0]["backends"]) {
    if (v["name"] == "cpu") EXPECT_EQ(v["can_run"], true) << r.output;
    if (v["name"] == "sm90") EXPECT_EQ(v["can_run"], false) << r.output;  // page 48
  }
}

// check --json: the results as JSON, the exit code as without it.
TEST_F(Cli, CheckJson) {
  const Result r =
      run_mlakit({"check", "--json", "--backend", "cpu", "--heads", "4", "--s-q", "1,2", "--batch",
                  "2", "--seq-len", "1,40", "--page-size", "16", "--var", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json doc = nlohmann::json::parse(r.output);
  EXPECT_EQ(doc["failures"], 0);
  ASSERT_EQ(doc["results"].size(), 4u) << r.output;
  for (const auto& row : doc["results"]) {
    EXPECT_EQ(row["backend"], "cpu");
    EXPECT_EQ(row["result"], "ok") << row.dump();
    EXPECT_EQ(row["rel_l2_err"], 0.0) << "the cpu backend against itself";
  }
}

// check --corrupt: the cpu backend refuses each case's planted bad page ids, naming the first
// (ok); a case with no full page to corrupt (length 40, page 64) is skipped, not failed.
TEST_F(Cli, CheckCorrupt) {
  const Result r = run_mlakit({"check", "--json", "--backend", "cpu", "--heads", "4", "--s-q",
                               "1,2", "--batch", "3", "--seq-len", "40,300", "--page-size", "16,64",
                               "--var", "0", "--corrupt", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json doc = nlohmann::json::parse(r.output);
  EXPECT_EQ(doc["failures"], 0);
  int ok = 0, skipped = 0;
  for (const auto& row : doc["results"]) {
    ok += row["result"] == "ok";
    skipped += row["result"] == "skipped";
    if (row["result"] == "skipped") {
      EXPECT_EQ(row["seq_len"], 40) << row.dump();
      EXPECT_EQ(row["page_size"], 64) << row.dump();
    }
  }
  EXPECT_EQ(ok, 6) << r.output;
  EXPECT_EQ(skipped, 2) << r.output;
}

// bench-op times an op on the cpu device without a GPU (the reference itself: check
// "reference"); every append layout, top-k and the indexer with MTP rows run, with each --kernel
// (the GPU's kernel choice: no effect here).
TEST_F(Cli, BenchOpRunsOnTheCpu) {
  if (mlakit::current_device().present) GTEST_SKIP() << "a GPU is present: the cuda path runs";
  for (const std::string layout : {"bf16", "fp16", "fp8", "v32", "v4", "indexer"}) {
    const Result r = run_mlakit({"bench-op", "append", "--layout", layout, "--batch", "3", "--len",
                                 "63", "--next-n", "2", "--replays", "1"});
    EXPECT_EQ(r.exit_code, 0) << layout << "\n" << r.output;
    EXPECT_TRUE(has(r, "append  " + layout)) << r.output;
    EXPECT_TRUE(has(r, "reference")) << r.output;
  }
  for (const std::string kernel : {"auto", "cluster", "stream", "multi-block", "one-block"}) {
    std::vector<std::string> args = {"bench-op",    "topk", "--batch",   "2",        "--len",
                                     "0,1,300",     "--k",  "64",        "--next-n", "1,3",
                                     "--page-size", "16",   "--replays", "1"};
    args.push_back("--kernel");  // the GPU's kernel choice: no effect here
    args.push_back(kernel);
    const Result r = run_mlakit(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r, "topk    k=64")) << r.output;
    EXPECT_FALSE(has(r, "ERROR")) << r.output;
  }
  for (const std::string kernel : {"auto", "tma", "tma-wide", "persistent", "copy"}) {
    const Result r =
        run_mlakit({"bench-op", "indexer", "--batch", "2", "--len", "0,70", "--next-n", "1,2",
                    "--heads", "8", "--page-size", "16", "--replays", "1", "--kernel", kernel});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r, "indexer h=8")) << r.output;
    EXPECT_FALSE(has(r, "ERROR")) << r.output;
  }
  // Keys quantized by the cpu append from normal values (a pool of pages repeated: 3 pages here).
  for (const std::string len : {"70", "200"}) {
    const Result r = run_mlakit({"bench-op", "indexer", "--batch", "1", "--len", len, "--heads",
                                 "8", "--page-size", "64", "--replays", "1", "--keys", "normal"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r, "indexer h=8")) << r.output;
    EXPECT_FALSE(has(r, "ERROR")) << r.output;
  }
}

// --json: one row per case (the comma lists multiply out), with the op's fields.
TEST_F(Cli, BenchOpJson) {
  const std::string json = ::testing::TempDir() + "mlakit-cli-bench-op.json";
  const Result r = run_mlakit({"bench-op", "topk", "--batch", "1,2", "--len", "100", "--k", "8",
                               "--replays", "1", "--device", "cpu", "--json", json});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(json);
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_EQ(doc["results"].size(), 2u) << doc.dump();
  for (const auto& row : doc["results"]) {
    EXPECT_EQ(row["op"], "topk");
    EXPECT_EQ(row["k"], 8);
    EXPECT_EQ(row["device"], "cpu");
    EXPECT_GT(row["time_us"].get<double>(), 0.0);
    EXPECT_EQ(row["check"], "reference");
  }
  EXPECT_EQ(doc["results"][1]["batch"], 2);
  std::filesystem::remove(json);
}

// --logits-file: top-k over rows read from a file (cycled over the case's rows); a file that is not
// whole rows of --len is an error that names the flag.
TEST_F(Cli, BenchOpLogitsFile) {
  const std::string path = ::testing::TempDir() + "mlakit-cli-logits.f32";
  {
    std::vector<float> rows(2 * 300);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>((i * 7919) % 601) - 300;
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(rows.data()),
              static_cast<std::streamsize>(rows.size() * sizeof(float)));
  }
  Result r = run_mlakit({"bench-op", "topk", "--batch", "3", "--len", "300", "--k", "8",
                         "--replays", "1", "--device", "cpu", "--logits-file", path});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "topk    k=8          3      300      1    64 cpu")) << r.output;
  EXPECT_FALSE(has(r, "ERROR")) << r.output;
  r = run_mlakit({"bench-op", "topk", "--batch", "1", "--len", "250", "--k", "8", "--replays", "1",
                  "--device", "cpu", "--logits-file", path});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "--logits-file: expected whole rows of --len 250 float32 values")) << r.output;
  r = run_mlakit({"bench-op", "topk", "--batch", "1", "--len", "300", "--device", "cpu",
                  "--logits-file", path + ".missing"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "--logits-file: expected a readable file")) << r.output;
  r = run_mlakit({"bench-op", "topk", "--batch", "1", "--len", "300", "--device", "cpu",
                  "--logits-file", ::testing::TempDir()});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "--logits-file: expected a readable file")) << r.output;
  std::filesystem::remove(path);
}

// Bad flags are refused by name before anything is allocated.
TEST_F(Cli, BenchOpRefusesBadFlagsByName) {
  auto refused = [](std::vector<std::string> args, const std::string& message) {
    args.insert(args.begin(), "bench-op");
    const Result r = run_mlakit(args, uint64_t{1} << 30);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(has(r, message)) << r.output;
  };
  refused({"append", "--layout", "v5"},
          "--layout: expected bf16, fp16, fp8, v32, v4 or indexer, given v5");
  refused({"topk", "--k", "0"}, "--k: expected 1..65536, given 0");
  refused({"topk", "--batch", "0"}, "--batch: expected 1..1048576, given 0");
  refused({"topk", "--next-n", "1,17"}, "--next-n: expected 1..16, given 17");
  refused({"topk", "--len", "-1"}, "--len: expected 0..16777216, given -1");
  refused({"append", "--page-size", "0"}, "--page-size: expected 1..4096, given 0");
  refused({"topk", "--batch", "1000000", "--len", "16000000"}, "bytes of host memory");
  refused({"topk", "--json", "/nonexistent-dir/x.json"}, "--json");
  refused({"indexer", "--heads", "129"}, "--heads: expected 1..128, given 129");
  refused({"indexer", "--batch", "100000", "--len", "16000000"}, "bytes of host memory");
  refused({"topk", "--kernel", "tma"},
          "--kernel: expected auto, cluster, stream, multi-block or one-block for topk, given tma");
  refused({"indexer", "--kernel", "cluster"},
          "--kernel: expected auto, tma, tma-wide, persistent or copy for the indexer, given "
          "cluster");
  refused({"append", "--kernel", "copy"}, "--kernel: expected auto for append");
  refused({"topk", "--keys", "normal"}, "--keys: expected bytes (the default) for topk");
  refused({"indexer", "--logits-file", "x.f32"}, "--logits-file: expected only with topk");
  const Result r = run_mlakit({"bench-op", "sort"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "append,indexer,topk")) << r.output;
}

// bench --cp N: flags that do not go with it are refused by name before anything runs, then more
// GPUs than the machine has (or a build without NCCL). --cp 1 is the plain bench.
TEST_F(Cli, BenchCpRefusesByName) {
  auto refused = [](std::vector<std::string> args, const std::string& message) {
    args.insert(args.begin(), "bench");
    const Result r = run_mlakit(args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(has(r, message)) << r.output;
  };
  refused({"--cp", "4", "--cp-merge", "allgather,heads", "--heads", "16,6"},
          "--heads: expected multiples of --cp 4 with --cp-merge heads, given 6");
  refused({"--cp", "2", "--cp-merge", "scatter"},
          "--cp-merge: expected allgather, heads, inplace or symmetric, given scatter");
  refused({"--cp", "2", "--cp-interleave", "1,0"},
          "--cp-interleave: expected 1..16777216, given 0");
  refused({"--cp", "2", "--topk", "64"}, "--topk: expected 0 with --cp");
  refused({"--cp", "2", "--backend", "sm80,sm90"},
          "--backend: expected one backend (or auto) with --cp, given sm80,sm90");
  refused({"--cp", "2", "--reference", "bench/reference/flashmla_h200.csv"},
          "--reference: expected none with --cp");
  const Result range = run_mlakit({"bench", "--cp", "65"});
  EXPECT_NE(range.exit_code, 0) << range.output;
  EXPECT_TRUE(has(range, "--cp")) << range.output;

  const Result gpus = run_mlakit({"bench", "--cp", "2", "--heads", "16"});
  EXPECT_EQ(gpus.exit_code, 2) << gpus.output;
  EXPECT_TRUE(has(gpus, "--cp: expected at most the ") || has(gpus, "built without NCCL"))
      << gpus.output;
  if (!mlakit::current_device().present) {
    EXPECT_TRUE(has(gpus, "at most the 0 GPUs of this machine") || has(gpus, "built without NCCL"))
        << gpus.output;
  }

  const Result one =
      run_mlakit({"bench", "--cp", "1", "--backend", "cpu", "--heads", "1", "--batch", "2",
                  "--seq-len", "16", "--replays", "1", "--warmup", "0"});
  EXPECT_EQ(one.exit_code, 0) << one.output;
  EXPECT_TRUE(has(one, "reference")) << one.output;
}

}  // namespace
#endif  // MLAKIT_PROGRAM
