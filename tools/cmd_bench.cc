// mlakit bench: runs problems on one or more backends, checks each result against the cpu
// reference, and prints time, TB/s, TFLOP/s and the share of the roofline.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "bench.h"
#include "cli_common.h"
#include "commands.h"
#include "core/check.h"
#include "harness/compare.h"
#include "harness/timing.h"
#include "peaks.h"

namespace mlakit::tools {
namespace {

struct Row {
  std::string backend, note;
  int tactic = 0;
  Case c;
  harness::Timing timing;
  Work work;
  std::string check = "-";
  bool ok = true;
};

Status bench_one(const BenchFlags& f, const std::string& backend, const Case& c,
                 const harness::HostInputs& in, std::optional<Reference>* ref,
                 const DeviceInfo& device, Row* row) {
  std::string name;
  int tactic = f.tactic;
  MLAKIT_RETURN_IF_ERROR(parse_backend(backend, &name, &tactic));
  std::unique_ptr<Decoder> decoder;
  MLAKIT_RETURN_IF_ERROR(Decoder::create(
      c.problem, {.backend = name, .tactic = tactic, .tune_cache_path = f.tune_cache}, &decoder));
  row->backend = str_cat(name == "auto" ? "auto>" : "", decoder->backend_name(c.batch));
  row->tactic = decoder->tactic(c.batch);
  const Problem& p = c.problem;
  std::vector<uint8_t> out(in.out_bytes());
  std::vector<float> lse(in.lse_count());

  if (!decoder->device_memory()) {
    harness::fill_nan(out.data(), out.size() / dtype_bytes(p.out_dtype), p.out_dtype);
    const int replays = std::min(f.replays, 3);
    MLAKIT_RETURN_IF_ERROR(
        harness::time_cpu(*decoder, in, out.data(), lse.data(), replays, &row->timing));
    row->check = "reference";
    return Status::Ok();
  }

  // Device: verify first (poisoned output, one uncaptured run), then time.
  std::vector<harness::DeviceInputs> dev;
  MLAKIT_RETURN_IF_ERROR(
      harness::upload_cold_copies(in, device.l2_bytes, device.global_mem_bytes / 3, &dev));

  if (!f.no_verify) {
    const int k = std::min(c.batch, std::max(1, f.verify_requests));
    if (!ref->has_value() || (*ref)->k != k) {
      ref->emplace();
      MLAKIT_RETURN_IF_ERROR(reference_for(in, k, &ref->value()));
    }
    Verdict v;
    MLAKIT_RETURN_IF_ERROR(verify_device(*decoder, in, dev[0], **ref, &v));
    row->ok = v.ok;
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s %.1e", v.ok ? "ok" : "FAIL", v.cmp.rel_l2_err);
    row->check = buf;
    if (!v.ok) row->note = verdict_summary(v);
  }
  harness::TimingOptions topt;
  topt.replays = f.replays;
  topt.warmup = f.warmup;
  topt.settle_ms = f.settle_ms;
  return harness::time_gpu(*decoder, dev, topt, &row->timing);
}

// Reference times (e.g. FlashMLA's, bench/reference/*.csv): "h_q,s_q,batch,seq_len,var,time_us,..."
// lines, '#' comments and a header line.
using ReferenceTimes = std::map<std::tuple<int, int, int, int, int>, double>;

Status load_reference_times(const std::string& path, ReferenceTimes* times) {
  std::ifstream in(path);
  if (!in) return invalid_argument("--reference", "a readable CSV file", path);
  std::string line;
  while (std::getline(in, line)) {
    int h, s, b, l, v;
    double us;
    if (line.empty() || line[0] == '#') continue;
    if (std::sscanf(line.c_str(), "%d,%d,%d,%d,%d,%lf", &h, &s, &b, &l, &v, &us) == 6) {
      (*times)[{h, s, b, l, v}] = us;
    }
  }
  return Status::Ok();
}

void print_header(bool with_reference) {
  std::printf("%-12s %4s %4s %5s %7s %3s %5s %10s %7s %8s %6s %5s %5s", "backend", "h_q", "s_q",
              "batch", "seq_len", "var", "page", "time_us", "TB/s", "TFLOP/s", "%roof", "MHz", "W");
  if (with_reference) std::printf(" %8s %7s", "ref_us", "ref/us");
  std::printf("  %s\n", "check");
}

// The matrix ceiling of a problem: an e4m3 q allows both products on fp8 tensor cores, at twice
// the bf16 rate.
double flops_ceiling(const Problem& p, const Peaks& peaks) {
  return p.q_dtype == DType::kFP8E4M3 ? 2 * peaks.flops_per_s : peaks.flops_per_s;
}

void print_row(const Row& r, const Peaks& peaks, const ReferenceTimes& reference) {
  const double s = r.timing.median_us * 1e-6;
  double roof = 0;
  if (peaks.read_bytes_per_s > 0 && s > 0) {
    roof = std::max(r.work.bytes / peaks.read_bytes_per_s,
                    r.work.flops / flops_ceiling(r.c.problem, peaks)) /
           s;
  }
  const std::string name = r.timing.median_us > 0 ? str_cat(r.backend, ":", r.tactic) : r.backend;
  if (r.timing.median_us <= 0) {  // skipped or failed: no figures
    std::printf("%-12s %4d %4d %5d %7d %3d %5d %10s %7s %8s %6s %5s %5s%s  %s\n", name.c_str(),
                r.c.problem.h_q, r.c.problem.s_q, r.c.batch, r.c.seq_len, r.c.variable ? 1 : 0,
                r.c.problem.page_size, "-", "-", "-", "-", "-", "-",
                reference.empty() ? "" : "        -       -", r.check.c_str());
    if (!r.note.empty()) std::printf("       %s\n", r.note.c_str());
    return;
  }
  std::printf("%-12s %4d %4d %5d %7d %3d %5d %10.1f %7.3g %8.3g %6s", name.c_str(), r.c.problem.h_q,
              r.c.problem.s_q, r.c.batch, r.c.seq_len, r.c.variable ? 1 : 0, r.c.problem.page_size,
              r.timing.median_us, r.work.bytes / s / 1e12, r.work.flops / s / 1e12,
              roof > 0 ? str_cat(static_cast<int>(roof * 100 + 0.5), "%").c_str() : "-");
  // SM clock and board power over the timed replays when they lasted long enough for NVML's
  // readings to follow (kMinPowerWindowMs; raise --replays); '*': the power cap held the clock.
  const harness::PowerReading& pw = r.timing.power;
  const bool long_enough = pw.samples > 0 && pw.window_ms >= harness::kMinPowerWindowMs;
  std::printf(" %5s %5s", long_enough ? str_cat(static_cast<int>(pw.sm_mhz)).c_str() : "-",
              long_enough && pw.power_w > 0
                  ? str_cat(static_cast<int>(pw.power_w + 0.5), pw.power_capped ? "*" : "").c_str()
                  : "-");
  if (!reference.empty()) {
    const auto it = reference.find(
        {r.c.problem.h_q, r.c.problem.s_q, r.c.batch, r.c.seq_len, r.c.variable ? 1 : 0});
    if (it != reference.end() && r.timing.median_us > 0) {
      std::printf(" %8.1f %7.2f", it->second, it->second / r.timing.median_us);
    } else {
      std::printf(" %8s %7s", "-", "-");
    }
  }
  std::printf("  %s\n", r.check.c_str());
  if (!r.note.empty()) std::printf("       %s\n", r.note.c_str());
}

int run_bench(BenchFlags& f, bool defaults, bool run) {
  if (f.cp.world > 1) return run_bench_cp(f, run);
  const DeviceInfo device = current_device();
  if (f.sweep.batch.empty() && f.sweep.grid.empty()) {
    f.sweep.batch = {device.present ? 64 : 4};
  }
  if (f.sweep.seq_len.empty() && f.sweep.grid.empty()) {
    f.sweep.seq_len = {device.present ? 4096 : 1024};
  }
  if (!device.present) {
    std::printf("no GPU found (%s): running on the cpu backend%s\n", device.error.c_str(),
                defaults ? " with a reduced DeepSeek-V3 problem (batch 4, seq_len 1024) that "
                           "finishes in seconds"
                         : "");
    if (f.backend == "auto") f.backend = "cpu";
  }
  if (!device.present && !f.tune_cache.empty()) {
    std::fprintf(stderr,
                 "warning: --tune-cache %s is not read: it holds the timings of GPU backends, and "
                 "without a GPU the cpu backend runs\n",
                 f.tune_cache.c_str());
  }
  std::vector<Case> cases;
  const std::vector<std::string> backends = expand_backends(f.backend, device.present);
  Status st = make_cases(f.sweep, &cases);
  if (st.ok()) st = check_memory(cases, uses_device(backends, device));
  if (st.ok() && !f.json_path.empty()) st = check_writable("--json", f.json_path);
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.to_string().c_str());
    return 2;
  }
  if (!run) return 0;
  Peaks peaks = known_peaks(device);
  if (f.peak_tbs > 0) peaks.read_bytes_per_s = f.peak_tbs * 1e12;
  if (f.peak_tflops > 0) peaks.flops_per_s = f.peak_tflops * 1e12;
  if (device.present) {
    std::printf("device: %s (%d SMs)", device.name.c_str(), device.sm_count);
    if (peaks.read_bytes_per_s > 0) {
      std::printf("; roofline from %.2f TB/s read, %.0f TFLOP/s bf16 (twice that for an fp8 q; %s)",
                  peaks.read_bytes_per_s / 1e12, peaks.flops_per_s / 1e12, peaks.source.c_str());
    }
    std::printf("\n");
  }
  if (backends.empty()) {
    std::fprintf(stderr, "error: --backend %s: no backend available on this machine\n",
                 f.backend.c_str());
    return 2;
  }

  ReferenceTimes reference;
  if (!f.reference_csv.empty()) {
    if (Status st = load_reference_times(f.reference_csv, &reference); !st.ok()) {
      std::fprintf(stderr, "error: %s\n", st.to_string().c_str());
      return 2;
    }
  }
  CacheKind kind;  // for the JSON rows; make_cases accepted the flags
  (void)cache_kind(f.sweep, &kind);
  nlohmann::json results = nlohmann::json::array();
  bool all_ok = true;
  print_header(!reference.empty());
  size_t done = 0;
  for (const Case& c : cases) {
    harness::WorkloadOptions wopt;
    wopt.seed = f.sweep.seed;
    wopt.sparse_tails = f.sweep.sparse_tails;
    if (f.sweep.var_q == 2) wopt.q_lens.assign(c.batch, c.problem.s_q);
    const harness::HostInputs in = harness::make_inputs(c.problem, c.lens, wopt);
    std::optional<Reference> ref;
    for (const std::string& backend : backends) {
      Row row;
      row.c = c;
      row.work = count_work(in);
      const Status st = bench_one(f, backend, c, in, &ref, device, &row);
      if (!st.ok()) {
        row.backend = backend;
        row.ok = st.code() == StatusCode::kUnsupported;  // a skipped backend is not a failure
        row.check = st.code() == StatusCode::kUnsupported ? "skipped" : "ERROR";
        row.note = st.to_string();
        row.timing = {};
      }
      all_ok &= row.ok;
      print_row(row, peaks, reference);
      nlohmann::json result = case_json(c, kind, row.backend, row.tactic);
      result.update({{"topk", c.problem.topk},
                     {"extra_topk", c.problem.extra_topk},
                     {"time_us", row.timing.median_us},
                     {"min_us", row.timing.min_us},
                     {"max_us", row.timing.max_us},
                     {"copies", row.timing.copies},
                     {"sm_mhz", row.timing.power.sm_mhz},
                     {"power_w", row.timing.power.power_w},
                     {"power_capped", row.timing.power.power_capped},
                     {"power_window_ms", row.timing.power.window_ms},
                     {"bytes", row.work.bytes},
                     {"flops", row.work.flops},
                     {"check", row.check},
                     {"note", row.note}});
      results.push_back(std::move(result));
    }
    progress(++done, cases.size());
  }
  if (!f.json_path.empty()) {
    nlohmann::json doc = {{"mlakit_version", std::string(version())},
                          {"date", iso_date()},
                          {"device", device.present ? device.name : "cpu (no GPU)"},
                          {"sm_count", device.sm_count},
                          {"peak_read_tbs", peaks.read_bytes_per_s / 1e12},
                          {"peak_tflops", peaks.flops_per_s / 1e12},
                          {"results", results}};
    if (!write_json_file(f.json_path, doc.dump(1))) return 1;
  }
  return all_ok ? 0 : 1;
}

}  // namespace

nlohmann::json case_json(const Case& c, const CacheKind& kind, const std::string& backend,
                         int tactic) {
  return {{"backend", backend},
          {"tactic", tactic},
          {"h_q", c.problem.h_q},
          {"s_q", c.problem.s_q},
          {"var_q", c.problem.var_q},
          {"batch", c.batch},
          {"seq_len", c.seq_len},
          {"var", c.variable},
          {"page_size", c.problem.page_size},
          {"dtype", kind.label},
          {"layout", to_string(c.problem.kv_layout)}};
}

Status check_cp_flags(const BenchFlags& f) {
  const int n = f.cp.world;
  if (expand_backends(f.backend, true).size() != 1 || f.backend == "all") {
    return invalid_argument("--backend", "one backend (or auto) with --cp", f.backend);
  }
  if (f.sweep.topk != 0) {
    return invalid_argument("--topk", "0 with --cp (the sharded workloads are dense)",
                            f.sweep.topk);
  }
  if (!f.reference_csv.empty()) {
    return invalid_argument("--reference", "none with --cp", f.reference_csv);
  }
  if (f.sweep.var_q != 0) {
    return invalid_argument("--var-q", "0 with --cp (the sharded workloads have uniform s_q)",
                            f.sweep.var_q);
  }
  if (f.cp.interleave.empty() || f.cp.merge.empty()) {
    return invalid_argument("--cp-interleave/--cp-merge", "at least one value each", "none");
  }
  for (const int i : f.cp.interleave) {
    if (i < 1 || i > kMaxSeqLen) {
      return invalid_argument("--cp-interleave", str_cat("1..", kMaxSeqLen), i);
    }
  }
  for (const std::string& m : f.cp.merge) {
    if (m != "allgather" && m != "heads" && m != "inplace" && m != "symmetric") {
      return invalid_argument("--cp-merge", "allgather, heads, inplace or symmetric", m);
    }
    if (m != "heads") continue;
    for (const int h : f.sweep.heads) {
      if (h % n != 0) {
        return invalid_argument("--heads",
                                str_cat("multiples of --cp ", n, " with --cp-merge heads"), h);
      }
    }
  }
  return Status::Ok();
}

#ifndef MLAKIT_WITH_NCCL
int run_bench_cp(BenchFlags& f, bool) {
  Status st = check_cp_flags(f);
  if (st.ok()) {
    st = unsupported("--cp ", f.cp.world,
                     ": this mlakit was built without NCCL (cmake -DMLAKIT_NCCL=ON, with "
                     "MLAKIT_NCCL_ROOT where it is not found: docs/context-parallel.md)");
  }
  std::fprintf(stderr, "error: %s\n", st.to_string().c_str());
  return 2;
}
#endif

void add_bench_command(CLI::App& app, const CommandContext& context) {
  auto* cmd = app.add_subcommand(
      "bench",
      "time problems on one or more backends (graph replay, cold L2, median), checking each "
      "result against the cpu reference. With no flags: a DeepSeek-V3 decode batch (h_q 128, "
      "s_q 1, page 64, bf16, batch 64, seq_len 4096) on the best available backend");
  auto f = std::make_shared<BenchFlags>();
  add_sweep_flags(cmd, &f->sweep);
  cmd->add_option("--backend", f->backend,
                  "auto, all, or a comma list of name or name:tactic (cpu, sm80, sm80:1, ...)");
  cmd->add_option("--tactic", f->tactic, "backend tactic (-1: its default)");
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
  cmd->add_option("--verify-requests", f->verify_requests,
                  "requests checked against the cpu reference (all are checked for NaN)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--no-verify", f->no_verify, "skip the check against the reference");
  cmd->add_option("--tune-cache", f->tune_cache,
                  "tune cache for --backend auto (default: $MLAKIT_TUNE_CACHE)");
  cmd->add_option("--reference", f->reference_csv,
                  "CSV of reference times (h_q,s_q,batch,seq_len,var,time_us,...) to compare with, "
                  "e.g. bench/reference/flashmla_h200.csv");
  cmd->add_option("--json", f->json_path, "also write the results as JSON to this file");
  cmd->add_option("--peak-tbs", f->peak_tbs, "read bandwidth ceiling in TB/s for %roof");
  cmd->add_option("--peak-tflops", f->peak_tflops, "matrix ceiling in TFLOP/s for %roof");
  cmd->add_option(
         "--cp", f->cp.world,
         "context parallel over GPUs 0..N-1 (NCCL): each request's cache sharded over N GPUs, "
         "each decodes its shard, the partials merged (--cp-merge); times the unsharded decode "
         "on GPU 0, each rank's, the merge with its communication, the whole step, against the "
         "target unsharded / N + 15 us. 1: the plain bench")
      ->check(CLI::Range(1, kMaxCpWorld));
  cmd->add_option("--cp-interleave", f->cp.interleave,
                  "with --cp: tokens per shard block (1: vLLM's DCP; 64: SGLang, TensorRT-LLM "
                  "Helix), comma list")
      ->delimiter(',');
  cmd->add_option("--cp-merge", f->cp.merge,
                  "with --cp: allgather (every GPU gets every head), heads (all-to-all, each GPU "
                  "its h_q / N heads), inplace (allgather, each partial decoded into its slot of "
                  "the merge workspace: one gather in place) or symmetric (inplace in a workspace "
                  "registered as an NCCL symmetric window, NCCL 2.27+), comma list")
      ->delimiter(',');
  cmd->callback([cmd, f, context] {
    *context.exit_code = run_bench(*f, cmd->parse_order().empty(), context.run);
  });
}

}  // namespace mlakit::tools
