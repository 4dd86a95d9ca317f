// Shared pieces of the mlakit subcommands: problem flags, case sweeps, metrics, output.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/compare.h"
#include "harness/workload.h"
#include "mlakit/mlakit.h"

namespace mlakit::tools {

// Flags that describe one problem or a sweep of problems (comma lists multiply out).
struct SweepFlags {
  std::vector<int> heads{128}, s_q{1}, batch, seq_len, page_size{64}, var{0};
  std::string dtype;    // bf16 | fp16 | fp8 | fp8-blockwise; empty: the layout's (bf16)
  std::string layout;   // dense | bf16 | v32 | v4; empty: dense (or fp8-blockwise's v32)
  std::string q_dtype;  // default: the cache dtype, bf16 for fp8 caches
  int topk = 0;
  int extra_topk = 0, extra_page_size = 0;  // the V4 extra cache (sparse only)
  bool sparse_tails = false;  // sparse indices as a top-k op emits them (WorkloadOptions)
  bool sinks = false, lse = false, pdl = false, non_causal = false;
  int var_q = 0;  // 1: variable query lengths (Problem::var_q), drawn from 1..s_q by the seed;
                  // 2: var_q, every q_len s_q
  uint64_t seed = 1;
  std::string grid;  // "standard": the standard grid of BENCHMARKING.md
};

void add_sweep_flags(CLI::App* app, SweepFlags* flags);

struct Case {
  Problem problem;
  int batch = 0;
  int seq_len = 0;
  bool variable = false;
  std::vector<int32_t> lens;
};

// The largest sweep make_cases expands: each case keeps its lengths, so the comma lists, which
// multiply out, are bounded before anything is expanded.
inline constexpr uint64_t kMaxCases = 10000;
inline constexpr uint64_t kMaxSweepRequests = uint64_t{1} << 24;  // 64 MB of lengths

// Expands the flags into cases; an error names the flag. Values are checked before anything is
// computed from them (a batch before its lengths are drawn, 2L - 1 of --var before it is formed).
Status make_cases(const SweepFlags& flags, std::vector<Case>* cases);

// The cache of --layout and --dtype: its dtype and layout, and the label the JSON output shows
// ("bf16", "fp16", "fp8", "fp8-blockwise", "fp8-v4"). An error names the flag.
struct CacheKind {
  DType kv_dtype = DType::kBF16;
  KvLayout layout = KvLayout::kDense;
  std::string label;
};
Status cache_kind(const SweepFlags& flags, CacheKind* kind);

// Refuses, before anything is allocated, a case whose host inputs (with their output and its
// reference) do not fit the host memory this process can have, or, when `on_device`, whose
// device copy does not fit the device's free memory; the message states the bytes.
Status check_memory(const std::vector<Case>& cases, bool on_device);

// Work of one case, as BENCHMARKING.md counts it.
struct Work {
  double flops = 0, bytes = 0;
};
Work count_work(const harness::HostInputs& inputs);

// One backend of --backend, "name" or "name:tactic" (e.g. sm80:1): its name, and its tactic when
// it gives one (`tactic` is left alone otherwise). An error names --backend.
Status parse_backend(const std::string& spec, std::string* name, int* tactic);

// Backends named by --backend: "auto", "all" (every available backend that runs on the memory
// of this machine), or a comma list.
std::vector<std::string> expand_backends(const std::string& spec, bool gpu_present);
// Whether any of `backends` ("name" or "name:tactic", "auto") reads device memory.
bool uses_device(const std::vector<std::string>& backends, const DeviceInfo& device);

// Progress bar on stderr (only when stderr is a terminal).
void progress(size_t done, size_t total);

std::string iso_date();

// Writes `text` and a newline to `path` (a `--json` file); false, with the error on stderr, when it
// could not be written.
bool write_json_file(const std::string& path, const std::string& text);

// Whether `path` can be written, checked before the first case runs so that a long sweep does not
// end with nowhere to write (`flag` names it in the error); a file that did not exist is not left
// behind.
Status check_writable(const std::string& flag, const std::string& path);

// Output of the first `k` requests from the cpu backend: the reference for verification.
struct Reference {
  int k = 0;
  std::vector<uint8_t> out;
  std::vector<float> lse;
};
Status reference_for(const harness::HostInputs& inputs, int k, Reference* ref);

struct Verdict {
  bool ok = false;
  harness::Comparison cmp;   // the first ref.k requests against the reference
  int64_t unwritten = 0;     // NaN left anywhere in the output (every request is checked)
  int64_t written_past = 0;  // var_q: elements past the packed rows that were written
};
// The comparison's summary, and what else failed (NaN left unwritten, rows written past var_q's).
std::string verdict_summary(const Verdict& verdict);
// Compares an output of every request of `inputs` (out_dtype bits; lse when the problem returns
// it) with the reference: its first ref.k requests within harness::default_tolerance, and no NaN
// left anywhere.
Verdict judge(const harness::HostInputs& inputs, const Reference& ref,
              const std::vector<uint8_t>& out, const std::vector<float>& lse);
// Poisons the device output, runs `decoder` once on `device` inputs, and compares.
Status verify_device(const Decoder& decoder, const harness::HostInputs& inputs,
                     const harness::DeviceInputs& device, const Reference& ref, Verdict* verdict);
// The same for a backend taking host memory, on `inputs` themselves.
Status verify_host(const Decoder& decoder, const harness::HostInputs& inputs, const Reference& ref,
                   Verdict* verdict);

}  // namespace mlakit::tools
