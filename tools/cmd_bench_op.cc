// mlakit bench-op: times one of mlakit::ops, a cache append, the indexer's logits or the top-k
// selection, on the GPU when one is present (graph replay, median; harness/timing) and on the cpu
// device otherwise, and checks the GPU's result against the cpu reference (append and top-k bit
// for bit; the indexer within float accumulation error, on its first request). Prints a table
// like `mlakit bench`, and --json writes the rows.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench_op.h"
#include "cli_common.h"
#include "commands.h"
#include "core/check.h"
#include "core/host_memory.h"
#include "core/numeric.h"
#include "mlakit/ops.h"

namespace mlakit::tools {
namespace {

Status append_kind(const std::string& name, AppendKind* kind) {
  if (name == "bf16" || name == "dense")
    *kind = {};
  else if (name == "fp16")
    *kind = {.dtype = DType::kFP16};
  else if (name == "fp8")
    *kind = {.dtype = DType::kFP8E4M3};
  else if (name == "v32")
    *kind = {.layout = KvLayout::kFp8Blockwise, .dtype = DType::kFP8E4M3};
  else if (name == "v4") {
    *kind = {
        .layout = KvLayout::kFp8V4, .dtype = DType::kFP8E4M3, .d = layout_d_qk(KvLayout::kFp8V4)};
  } else if (name == "indexer") {
    *kind = {.indexer = true, .d = ops::kIndexerDim};
  } else {
    return invalid_argument("--layout", "bf16, fp16, fp8, v32, v4 or indexer", name);
  }
  return Status::Ok();
}

// Every value of a comma list in lo..hi; the error names the flag.
Status check_list(const char* flag, const std::vector<int>& values, int lo, int hi) {
  for (int v : values) {
    if (v < lo || v > hi) return invalid_argument(flag, str_cat(lo, "..", hi), v);
  }
  return Status::Ok();
}

std::string fixed(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), x < 100 ? "%.2f" : "%.1f", x);
  return buf;
}

// Flags checked, and each case's host memory bounded, before anything is allocated.
Status check_flags(const OpFlags& f, const AppendKind& kind, std::vector<OpCase>* cases) {
  MLAKIT_RETURN_IF_ERROR(check_list("--batch", f.batch, 1, 1 << 20));
  MLAKIT_RETURN_IF_ERROR(check_list("--len", f.len, 0, kMaxSeqLen));
  MLAKIT_RETURN_IF_ERROR(check_list("--next-n", f.next_n, 1, kMaxSq));
  if (f.page_size < 1 || f.page_size > 4096) {
    return invalid_argument("--page-size", "1..4096", f.page_size);
  }
  if (f.k < 1 || f.k > ops::kTopkMax) {
    return invalid_argument("--k", str_cat("1..", ops::kTopkMax), f.k);
  }
  if (f.heads < 1 || f.heads > ops::kIndexerMaxHeads) {
    return invalid_argument("--heads", str_cat("1..", ops::kIndexerMaxHeads), f.heads);
  }
  // --kernel: the op's own kernels (CLI11 takes any of them for any op).
  if (f.op == "topk" && (f.kernel == "tma" || f.kernel == "tma-wide" || f.kernel == "persistent" ||
                         f.kernel == "copy")) {
    return invalid_argument("--kernel", "auto, cluster, stream, multi-block or one-block for topk",
                            f.kernel);
  }
  if (f.op == "indexer" && f.kernel != "auto" && f.kernel != "tma" && f.kernel != "tma-wide" &&
      f.kernel != "persistent" && f.kernel != "copy") {
    return invalid_argument("--kernel", "auto, tma, tma-wide, persistent or copy for the indexer",
                            f.kernel);
  }
  if (f.op != "indexer" && f.keys != "bytes") {
    return invalid_argument("--keys",
                            "bytes (the default) for " + f.op + ": keys are the indexer's", f.keys);
  }
  if (f.op != "topk" && !f.logits_file.empty()) {
    return invalid_argument("--logits-file", "only with topk", f.logits_file);
  }
  if (f.op != "topk" && f.nondeterministic) {
    return invalid_argument("--nondeterministic", "only with topk", f.op);
  }
  if (f.op == "append" && f.kernel != "auto") {
    return invalid_argument("--kernel", "auto for append (it has one kernel)", f.kernel);
  }
  const uint64_t host = host_memory_bytes();
  for (int b : f.batch) {
    for (int l : f.len) {
      for (int t : f.next_n) {
        const uint64_t rows = uint64_t(b) * t;
        // topk: the logits and two outputs; indexer: the cache (132 bytes a token, a page more
        // a request), q, weights and the logits twice; append: the tokens, slots and two caches
        // (at most 2 pages a request and 8 KB a token in any layout, page_size <= 4096).
        const uint64_t len = uint64_t(std::max(l, 1));
        const uint64_t need =
            f.op == "topk" ? rows * (len + 2 * f.k) * 4
            : f.op == "indexer"
                ? uint64_t(b) * (len + f.page_size) * 132 + rows * (f.heads * 132 + 2 * len * 4)
                : rows * (kind.d * 2 + 8) +
                      2 * uint64_t(b) * (uint64_t(t) / f.page_size + 2) * f.page_size * 8192;
        if (need > host) {
          return unsupported("case batch ", b, ", len ", l, ", next_n ", t, " needs ", need,
                             " bytes of host memory, more than the ", host,
                             " this process can have");
        }
        cases->push_back({.batch = b, .len = l, .next_n = t});
      }
    }
  }
  return Status::Ok();
}

int run_bench_op(OpFlags& f, bool run) {
  const DeviceInfo device = current_device();
  bool gpu = device.present;
  if (f.device == "cpu") gpu = false;
  if (f.device == "cuda" && !device.present) {
    std::fprintf(stderr, "error: --device cuda: no GPU found (%s)\n", device.error.c_str());
    return 2;
  }
  if (f.batch.empty()) f.batch = {gpu ? 64 : 4};
  if (f.len.empty()) f.len = {gpu ? 32768 : 4096};
  AppendKind kind;
  Status st = f.op == "append" ? append_kind(f.layout, &kind) : Status::Ok();
  std::vector<OpCase> cases;
  if (st.ok()) st = check_flags(f, kind, &cases);
  if (st.ok() && !f.json_path.empty()) st = check_writable("--json", f.json_path);
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.to_string().c_str());
    return 2;
  }
  if (!run) return 0;
  if (!gpu) {
    std::printf(
        "%s: running on the cpu device (the reference)\n",
        device.present ? "--device cpu" : str_cat("no GPU found (", device.error, ")").c_str());
  } else {
    std::printf("device: %s (%d SMs)\n", device.name.c_str(), device.sm_count);
  }
  const std::string what = f.op == "append"    ? f.layout
                           : f.op == "indexer" ? str_cat("h=", f.heads)
                                               : str_cat("k=", f.k);
  std::printf("%-7s %-8s %5s %8s %6s %5s %-6s %10s %8s %5s %5s  %s\n", "op", "variant", "batch",
              "len", "next_n", "page", "device", "time_us", "GB/s", "MHz", "W", "check");
  nlohmann::json results = nlohmann::json::array();
  bool all_ok = true;
  for (const OpCase& c : cases) {
    OpRow row{.c = c, .device = gpu ? "cuda" : "cpu"};
    const Status s = f.op == "append"    ? bench_append(f, kind, gpu, &row)
                     : f.op == "indexer" ? bench_indexer(f, gpu, &row)
                                         : bench_topk(f, gpu, &row);
    if (!s.ok()) {
      row.ok = false;
      row.check = "ERROR";
      row.note = s.to_string();
      row.timing = {};
    }
    all_ok &= row.ok;
    const double gbs = row.timing.median_us > 0 ? row.bytes / row.timing.median_us / 1e3 : 0;
    // SM clock and board power over the timed replays, as mlakit bench prints them ('-' where
    // the replays were too short for NVML's readings; '*': the power cap held the clock).
    const harness::PowerReading& pw = row.timing.power;
    const bool long_enough = pw.samples > 0 && pw.window_ms >= harness::kMinPowerWindowMs;
    std::printf(
        "%-7s %-8s %5d %8d %6d %5d %-6s %10s %8s %5s %5s  %s\n", f.op.c_str(), what.c_str(),
        c.batch, c.len, c.next_n, f.page_size, row.device.c_str(),
        row.timing.median_us > 0 ? fixed(row.timing.median_us).c_str() : "-",
        gbs > 0 ? fixed(gbs).c_str() : "-",
        long_enough ? str_cat(static_cast<int>(pw.sm_mhz)).c_str() : "-",
        long_enough && pw.power_w > 0
            ? str_cat(static_cast<int>(pw.power_w + 0.5), pw.power_capped ? "*" : "").c_str()
            : "-",
        row.kernel.empty() ? row.check.c_str() : str_cat(row.check, ", ", row.kernel).c_str());
    if (!row.note.empty()) std::printf("       %s\n", row.note.c_str());
    results.push_back({{"op", f.op},
                       {"variant", what},
                       {"batch", c.batch},
                       {"len", c.len},
                       {"next_n", c.next_n},
                       {"k", f.op == "topk" ? f.k : 0},
                       {"heads", f.op == "indexer" ? f.heads : 0},
                       {"page_size", f.page_size},
                       {"device", row.device},
                       {"time_us", row.timing.median_us},
                       {"min_us", row.timing.min_us},
                       {"max_us", row.timing.max_us},
                       {"copies", row.timing.copies},
                       {"bytes", row.bytes},
                       {"gb_per_s", gbs},
                       {"sm_mhz", row.timing.power.sm_mhz},
                       {"power_w", row.timing.power.power_w},
                       {"check", row.check},
                       {"kernel", row.kernel},
                       {"note", row.note}});
  }
  if (!f.json_path.empty()) {
    const nlohmann::json doc = {{"mlakit_version", std::string(version())},
                                {"date", iso_date()},
                                {"device", gpu ? device.name : "cpu"},
                                {"keys", f.op == "indexer" ? f.keys : ""},
                                {"settle_ms", f.settle_ms},
                                {"logits_file", f.logits_file},
                                {"nondeterministic", f.nondeterministic},
                                {"pdl", f.pdl},
                                {"results", results}};
    if (!write_json_file(f.json_path, doc.dump(1))) return 1;
  }
  return all_ok ? 0 : 1;
}

}  // namespace

void add_bench_op_command(CLI::App& app, const CommandContext& context) {
  auto* cmd = app.add_subcommand(
      "bench-op",
      "time one of mlakit::ops (docs/ops.md): `append` (new tokens into a cache, --layout), "
      "`indexer` (the lightning indexer's logits, --heads) or `topk` (the k largest logits as "
      "sparse-decode indices), on the GPU when one is present (graph replay, median; the result "
      "checked against the cpu reference) or on the cpu device");
  auto f = std::make_shared<OpFlags>();
  cmd->add_option("op", f->op, "append, indexer or topk")
      ->required()
      ->check(CLI::IsMember({"append", "indexer", "topk"}));
  cmd->add_option("--batch", f->batch, "requests, comma list (default: 64 on a GPU, 4 on the cpu)")
      ->delimiter(',');
  cmd->add_option("--len", f->len,
                  "cached length: topk's row length; append: the position of the first new token "
                  "(comma list; default: 32768 on a GPU, 4096 on the cpu)")
      ->delimiter(',');
  cmd->add_option("--next-n", f->next_n, "tokens per request (MTP), comma list")->delimiter(',');
  cmd->add_option("--layout", f->layout, "append: bf16, fp16, fp8 (dense), v32, v4 or indexer");
  cmd->add_option("--k", f->k, "topk: k");
  cmd->add_option(
         "--kernel", f->kernel,
         "on a GPU, auto (the op's choice) or one kernel by itself: topk: cluster "
         "(sm_90, rows up to 256K), stream (sm_90, rows up to 512K), multi-block (rows of 8192 and "
         "more, with a "
         "workspace) or one-block; indexer: tma, tma-wide or persistent (sm_90, page sizes "
         "8, 16, 32 and multiples of 64: two CTAs an SM, one with 128-head products, or "
         "one an SM with an equal share of the tiles) or copy")
      ->check(CLI::IsMember({"auto", "cluster", "stream", "multi-block", "one-block", "tma",
                             "tma-wide", "persistent", "copy"}));
  cmd->add_option("--heads", f->heads, "indexer: query heads, 1..128 (default 64)");
  cmd->add_option("--page-size", f->page_size, "tokens per page");
  cmd->add_option("--keys", f->keys,
                  "indexer: the cache's keys, bytes (uniformly random e4m3 codes, scales "
                  "(1..1000) / 448000; the default) or normal (normal bf16 keys quantized by the "
                  "cpu append, per-token amax scales, as a model's keys are)")
      ->check(CLI::IsMember({"bytes", "normal"}));
  cmd->add_option("--logits-file", f->logits_file,
                  "topk: the logits from a file of float32 rows (little-endian, --len each, e.g. "
                  "an indexer's output) instead of normal random values; row r of a case is the "
                  "file's row r % rows");
  cmd->add_flag("--nondeterministic", f->nondeterministic,
                "topk: TopkArgs::deterministic false (the multi-block kernel's sort path writes "
                "its kept positions unsorted; the check compares each row sorted, so logits "
                "with ties at the k-th largest, e.g. from --logits-file, may report a valid "
                "top-k as FAIL)");
  cmd->add_flag("--pdl", f->pdl,
                "on a GPU: programmatic dependent launch for every call (ops.h, enable_pdl): "
                "each replayed launch may start while the one before it runs");
  cmd->add_option("--device", f->device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option(
         "--replays", f->replays,
         "timed graph replays (median reported); the MHz and W columns need >= 1 s of them")
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--warmup", f->warmup, "untimed graph replays")->check(CLI::Range(0, 1000));
  cmd->add_option(
         "--settle-ms", f->settle_ms,
         "untimed replays for this long before timing (0: none): a power-capped case then "
         "runs at its steady clock, not at the boost clock that follows the inputs' upload")
      ->check(CLI::Range(0.0, 10000.0));
  cmd->add_flag("--no-verify", f->no_verify, "skip the check against the cpu reference");
  cmd->add_option("--seed", f->seed, "random inputs' seed");
  cmd->add_option("--json", f->json_path, "also write the results as JSON to this file");
  cmd->callback([f, context] { *context.exit_code = run_bench_op(*f, context.run); });
}

}  // namespace mlakit::tools
