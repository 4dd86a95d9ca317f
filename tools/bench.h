// mlakit bench's flags, shared by the single-GPU bench (cmd_bench.cc) and its context-parallel
// form over several GPUs (`--cp N`, cmd_bench_cp.cc).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_common.h"
#include "mlakit/mlakit.h"

namespace mlakit::tools {

// --cp N: the decode sharded over GPUs 0..N-1 and merged over NCCL (docs/context-parallel.md).
struct CpFlags {
  int world = 1;                                // N; 1: the plain bench
  std::vector<int> interleave{1};               // tokens per shard block, comma list
  std::vector<std::string> merge{"allgather"};  // allgather | heads, comma list
};

struct BenchFlags {
  SweepFlags sweep;
  CpFlags cp;
  std::string backend = "auto";
  int tactic = -1;
  int replays = 15, warmup = 3;
  double settle_ms = 0;
  int verify_requests = 2;
  bool no_verify = false;
  std::string json_path;
  std::string tune_cache;
  std::string reference_csv;
  double peak_tbs = 0, peak_tflops = 0;
};

// The flags that --cp N > 1 refuses or needs, judged before anything else (no GPU needed): one
// backend; no --topk (the sharded workloads are dense); no --reference; --cp-interleave values
// 1..kMaxSeqLen; with --cp-merge heads every --heads value a multiple of N. An error names the
// flag.
Status check_cp_flags(const BenchFlags& flags);

// The keys that describe a case in a --json row (backend and tactic, the problem's shape, the
// cache's dtype and layout), shared by bench's rows and bench --cp's; each adds its figures.
nlohmann::json case_json(const Case& c, const CacheKind& kind, const std::string& backend,
                         int tactic);

// The bench with --cp N > 1 (cmd_bench_cp.cc, in a build with NCCL): exit code 0 (all ok), 1 (a
// case failed), 2 (bad flags, not enough GPUs or memory). `run` false: checks only.
int run_bench_cp(BenchFlags& flags, bool run);

}  // namespace mlakit::tools
