// mlakit bench-op's cases (bench_op_cases.cc): the flags, one case and its timed, checked row,
// and the three ops' runs. The command itself (flags, checks, table, JSON) is cmd_bench_op.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/timing.h"
#include "mlakit/mlakit.h"
#include "mlakit/ops.h"

namespace mlakit::tools {

struct OpFlags {
  std::string op;               // append | indexer | topk
  std::vector<int> batch, len;  // defaults by device (run_bench_op)
  std::vector<int> next_n{1};   // tokens per request
  std::string layout = "v32";   // append: bf16 | fp16 | fp8 | v32 | v4 | indexer
  int k = 2048;                 // topk
  std::string kernel = "auto";  // on a GPU: auto; topk: cluster | stream | multi-block | one-block;
                                // indexer: tma | tma-wide | persistent | copy
  int heads = ops::kIndexerHeads;  // indexer
  std::string keys = "bytes";      // indexer: bytes | normal (bench_indexer)
  std::string logits_file;         // topk: float32 rows of --len logits (empty: normal values)
  bool nondeterministic = false;   // topk: TopkArgs::deterministic = false
  bool pdl = false;                // on a GPU: every call's enable_pdl (ops.h)
  int page_size = 64;
  std::string device = "auto";  // auto | cpu | cuda
  int replays = 15, warmup = 3;
  double settle_ms = 0;  // untimed replays before timing (harness::TimingOptions::settle_ms)
  bool no_verify = false;
  uint64_t seed = 1;
  std::string json_path;
};

struct OpCase {
  int batch = 0, len = 0, next_n = 1;
};

// The cache an append writes: its layout and dtype, or the indexer cache.
struct AppendKind {
  bool indexer = false;
  KvLayout layout = KvLayout::kDense;
  DType dtype = DType::kBF16;
  int d = kDqk;  // values a token
};

// One timed, checked case: what each op fills in.
struct OpRow {
  OpCase c;
  std::string device, check = "-", note;
  std::string kernel;  // on the GPU, the kernel that ran (topk: cluster, stream, multi-block or
                       // one-block; indexer: tma, tma-wide, persistent or copy)
  harness::Timing timing;
  double bytes = 0;  // read + written per call
  bool ok = true;
};

// Each op's case: inputs from f.seed, the GPU's result checked against the cpu reference (row->ok,
// row->check), then timed (row->timing) on the GPU (gpu) or on the cpu device.
Status bench_append(const OpFlags& f, const AppendKind& kind, bool gpu, OpRow* row);
Status bench_topk(const OpFlags& f, bool gpu, OpRow* row);
Status bench_indexer(const OpFlags& f, bool gpu, OpRow* row);

}  // namespace mlakit::tools
