#include "cli_common.h"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/check.h"
#include "core/host_memory.h"

namespace mlakit::tools {

void add_sweep_flags(CLI::App* app, SweepFlags* f) {
  app->add_option("--heads", f->heads, "query heads h_q (1..128), comma list")->delimiter(',');
  app->add_option("--s-q", f->s_q, "query tokens per request (1..16), comma list")->delimiter(',');
  app->add_option("--batch", f->batch, "requests per call, comma list")->delimiter(',');
  app->add_option("--seq-len", f->seq_len, "cached tokens per request, comma list")->delimiter(',');
  app->add_option("--var", f->var,
                  "0: every request has --seq-len tokens; 1: uniform in [L/8, 2L); comma list")
      ->delimiter(',');
  app->add_option("--page-size", f->page_size, "tokens per KV page, comma list")->delimiter(',');
  app->add_option("--dtype", f->dtype,
                  "KV cache of the dense layout: bf16 (default), fp16, fp8 (one scale); "
                  "fp8-blockwise is --layout v32")
      ->check(CLI::IsMember({"bf16", "fp16", "fp8", "fp8-blockwise"}));
  app->add_option("--layout", f->layout,
                  "KV cache layout: dense (of --dtype, the default), bf16 (dense bf16), v32 "
                  "(DeepSeek V3.2 fp8, 656 B a token), v4 (DeepSeek V4 fp8, d_qk 512)")
      ->check(CLI::IsMember({"dense", "bf16", "v32", "v4"}));
  app->add_option("--q-dtype", f->q_dtype, "q dtype (default: the cache's, bf16 for fp8 caches)")
      ->check(CLI::IsMember({"bf16", "fp16", "fp8"}));
  app->add_option("--topk", f->topk,
                  "sparse attention over top-k indices (0 = dense): random slots of each "
                  "request's pages, some -1");
  app->add_flag("--sparse-tails", f->sparse_tails,
                "with --topk: each query token's indices as a top-k op emits them, min(L, topk) "
                "distinct tokens of its request in order, then -1 (a -1 tail when L < topk); "
                "default: topk random tokens of its request, 10% of them -1");
  app->add_option("--extra-topk", f->extra_topk,
                  "with --topk: an extra cache (V4's window) of this many slots a query token, "
                  "attended in the same softmax");
  app->add_option("--extra-page-size", f->extra_page_size,
                  "tokens per page of the extra cache (0 = --page-size)");
  app->add_flag("--sinks", f->sinks, "per-head attention sinks");
  app->add_flag("--lse", f->lse, "also return the LSE");
  app->add_flag("--pdl", f->pdl, "programmatic dependent launch");
  app->add_flag("--non-causal", f->non_causal, "no causal mask between the s_q query tokens");
  app->add_option("--var-q", f->var_q,
                  "1: variable query lengths (var_q; packed q/out rows, cu_seqlens_q), each "
                  "request's drawn from 1..s_q with the seed; 2: var_q with every request's "
                  "q_len s_q (what var_q itself costs: the padded work as a var_q problem); 0: "
                  "not var_q, every request has s_q")
      ->check(CLI::Range(0, 2));
  app->add_option("--seed", f->seed, "random seed");
  app->add_option("--grid", f->grid,
                  "standard: batch 1,8,32,64,128 x seq-len 1024,4096,8192,32768 (with the given "
                  "heads and s_q; batch x seq-len capped at 128 x 8192 tokens as in the reference)")
      ->check(CLI::IsMember({"standard"}));
}

namespace {

DType parse_dtype(const std::string& s) {
  if (s == "fp16") return DType::kFP16;
  if (s == "fp8" || s == "fp8-blockwise") return DType::kFP8E4M3;
  return DType::kBF16;
}

}  // namespace

Status cache_kind(const SweepFlags& f, CacheKind* kind) {
  const std::string layout =
      !f.layout.empty() ? f.layout : (f.dtype == "fp8-blockwise" ? "v32" : "dense");
  if (layout == "dense") {
    const std::string dtype = f.dtype.empty() ? "bf16" : f.dtype;
    *kind = {.kv_dtype = parse_dtype(dtype), .layout = KvLayout::kDense, .label = dtype};
    return Status::Ok();
  }
  // The other layouts fix the cache's dtype: a --dtype must agree with it.
  const char* implied = layout == "bf16" ? "bf16" : layout == "v32" ? "fp8-blockwise" : nullptr;
  if (!f.dtype.empty() && (implied == nullptr || f.dtype != implied)) {
    return invalid_argument(
        "--dtype",
        implied != nullptr ? str_cat("none or ", implied, " with --layout ", layout)
                           : str_cat("none with --layout ", layout, " (an fp8 cache of its own)"),
        f.dtype);
  }
  if (layout == "bf16") {
    *kind = {.kv_dtype = DType::kBF16, .layout = KvLayout::kDense, .label = "bf16"};
  } else {
    *kind = {.kv_dtype = DType::kFP8E4M3,
             .layout = layout == "v32" ? KvLayout::kFp8Blockwise : KvLayout::kFp8V4,
             .label = layout == "v32" ? "fp8-blockwise" : "fp8-v4"};
  }
  return Status::Ok();
}

Status make_cases(const SweepFlags& f, std::vector<Case>* cases) {
  std::vector<int> batches = f.batch, lens = f.seq_len;
  if (f.grid == "standard") {
    if (batches.empty()) batches = {1, 8, 32, 64, 128};
    if (lens.empty()) lens = {1024, 4096, 8192, 32768};
  }
  if (batches.empty() || lens.empty()) {
    return invalid_argument("--batch/--seq-len", "at least one value each (or --grid)", "none");
  }
  CacheKind kind;
  MLAKIT_RETURN_IF_ERROR(cache_kind(f, &kind));
  uint64_t requests = 0;
  for (int b : batches) {
    if (b < 1 || b > kMaxBatch) return invalid_argument("--batch", str_cat("1..", kMaxBatch), b);
    requests += static_cast<uint64_t>(b);
  }
  for (int len : lens) {
    for (int v : f.var) {
      // The longest length of the case must fit max_seq_len: L, or 2L - 1 with --var.
      const int64_t longest = harness::longest_seq_len(len, v != 0);
      if (len < 0 || longest > kMaxSeqLen) {
        return invalid_argument(
            "--seq-len",
            v != 0 ? str_cat("0..", (kMaxSeqLen + 1) / 2, " with --var ", v,
                             " (lengths reach 2L - 1; max_seq_len is at most ", kMaxSeqLen, ")")
                   : str_cat("0..", kMaxSeqLen),
            len);
      }
    }
  }
  const uint64_t per_batch_list = static_cast<uint64_t>(f.heads.size()) * f.s_q.size() *
                                  f.page_size.size() * lens.size() * f.var.size();
  if (per_batch_list * batches.size() > kMaxCases) {
    return invalid_argument("--heads x --s-q x --page-size x --batch x --seq-len x --var",
                            str_cat("at most ", kMaxCases, " cases"),
                            per_batch_list * batches.size());
  }
  if (per_batch_list * requests > kMaxSweepRequests) {
    return invalid_argument("the sweep's cases",
                            str_cat("at most ", kMaxSweepRequests,
                                    " requests in all (the sum of --batch x "
                                    "the other lists' sizes)"),
                            per_batch_list * requests);
  }
  for (int h : f.heads) {
    for (int s : f.s_q) {
      for (int page : f.page_size) {
        for (int b : batches) {
          for (int len : lens) {
            // The standard grid runs L 32768 only at batch 1 and 8 (as the reference does).
            if (f.grid == "standard" && len == 32768 && b > 8) continue;
            for (int v : f.var) {
              Case c;
              Problem& p = c.problem;
              p.h_q = h;
              p.s_q = s;
              p.page_size = page;
              p.kv_dtype = kind.kv_dtype;
              p.kv_layout = kind.layout;
              p.d_qk = layout_d_qk(kind.layout);
              p.q_dtype = f.q_dtype.empty()
                              ? (p.kv_dtype == DType::kFP8E4M3 ? DType::kBF16 : p.kv_dtype)
                              : parse_dtype(f.q_dtype);
              p.out_dtype = p.kv_dtype == DType::kFP8E4M3
                                ? (p.q_dtype == DType::kFP16 ? DType::kFP16 : DType::kBF16)
                                : p.kv_dtype;
              p.causal = !f.non_causal;
              p.var_q = f.var_q != 0;
              p.has_sinks = f.sinks;
              p.topk = f.topk;
              p.extra_topk = f.extra_topk;
              p.extra_page_size = f.extra_page_size;
              p.return_lse = f.lse;
              p.enable_pdl = f.pdl;
              p.max_batch = b;
              p.max_seq_len = static_cast<int>(harness::longest_seq_len(len, v != 0));
              MLAKIT_RETURN_IF_ERROR(validate(p));  // before the lengths are drawn
              c.batch = b;
              c.seq_len = len;
              c.variable = v != 0;
              c.lens = harness::make_seq_lens(b, len, c.variable, f.seed + 17);
              p.max_seq_len = *std::max_element(c.lens.begin(), c.lens.end());
              cases->push_back(std::move(c));
            }
          }
        }
      }
    }
  }
  return Status::Ok();
}

Status check_memory(const std::vector<Case>& cases, bool on_device) {
  const uint64_t host = host_memory_bytes();
  size_t device_free = 0, device_total = 0;
  if (on_device && cudaMemGetInfo(&device_free, &device_total) != cudaSuccess) {
    (void)cudaGetLastError();
    on_device = false;  // no figure to compare with: the allocation will say
  }
  for (const Case& c : cases) {
    const Problem& p = c.problem;
    // The output and the reference's (at most every request), out and lse each.
    const uint64_t outputs = 2 * static_cast<uint64_t>(c.batch) * p.s_q * p.h_q *
                             (kDv * dtype_bytes(p.out_dtype) + sizeof(float));
    const uint64_t need = harness::input_bytes(p, c.lens) + outputs;
    const auto what = [&] {
      return str_cat("case h_q ", p.h_q, ", s_q ", p.s_q, ", page ", p.page_size, ", batch ",
                     c.batch, ", seq_len ", c.seq_len, c.variable ? " (var)" : "", " needs ");
    };
    if (need > host) {
      return unsupported(what(), need,
                         " bytes of host memory for its inputs and outputs, more "
                         "than the ",
                         host, " this process can have");
    }
    const uint64_t device_need = harness::device_input_bytes(p, c.lens);
    if (on_device && device_need > device_free) {
      return unsupported(what(), device_need,
                         " bytes of device memory for its inputs and "
                         "outputs, more than the ",
                         device_free, " free on the device");
    }
  }
  return Status::Ok();
}

Work count_work(const harness::HostInputs& in) {
  const Problem& p = in.problem;
  double visible = 0;  // sum over (request, token) of visible cached tokens
  double cached = 0;   // cached tokens read once
  int64_t tokens = 0;  // query tokens of the batch
  for (int i = 0; i < in.batch; ++i) {
    // var_q: request i's q_len tokens in packed rows from cu_seqlens_q[i].
    const int q_len = p.var_q ? in.cu_seqlens_q[i + 1] - in.cu_seqlens_q[i] : p.s_q;
    const int64_t first = p.var_q ? in.cu_seqlens_q[i] : static_cast<int64_t>(i) * p.s_q;
    tokens += q_len;
    if (p.sparse()) {
      const int64_t n = in.topk_lens.empty() ? p.topk : in.topk_lens[i];
      const int64_t m = !p.has_extra()               ? 0
                        : in.extra_topk_lens.empty() ? p.extra_topk
                                                     : in.extra_topk_lens[i];
      for (int t = 0; t < q_len; ++t) {
        const int64_t row = first + t;
        for (int64_t k = 0; k < n; ++k) visible += in.indices[row * p.topk + k] >= 0;
        for (int64_t k = 0; k < m; ++k) visible += in.extra_indices[row * p.extra_topk + k] >= 0;
      }
      continue;
    }
    const int64_t len = in.seq_lens[i];
    cached += q_len > 0 ? len : 0;
    for (int t = 0; t < q_len; ++t) {
      visible += (q_len == 1 || !p.causal) ? len : std::max<int64_t>(0, len - q_len + 1 + t);
    }
  }
  if (p.sparse()) cached = visible;  // each selected token is read (sparse: extra ones too)
  Work w;
  w.flops = 2.0 * (p.d_qk + kDv) * p.h_q * visible;
  const double rows = static_cast<double>(tokens) * p.h_q;
  w.bytes = cached * kv_token_bytes(p.kv_dtype, p.kv_layout) +
            rows * (p.d_qk * dtype_bytes(p.q_dtype) + kDv * dtype_bytes(p.out_dtype));
  return w;
}

bool uses_device(const std::vector<std::string>& backends, const DeviceInfo& device) {
  const std::vector<BackendInfo> infos = list_backends();
  for (const std::string& spec : backends) {
    const std::string name = spec.substr(0, spec.find(':'));
    if (name == "auto" && device.present) return true;
    for (const BackendInfo& info : infos) {
      if (info.name == name && info.device_memory) return true;
    }
  }
  return false;
}

Status parse_backend(const std::string& spec, std::string* name, int* tactic) {
  const size_t colon = spec.find(':');
  *name = spec.substr(0, colon);
  if (colon == std::string::npos) return Status::Ok();
  const char* first = spec.c_str() + colon + 1;
  const char* last = spec.c_str() + spec.size();
  const auto [end, error] = std::from_chars(first, last, *tactic);
  if (error != std::errc() || end != last || first == last) {
    return invalid_argument("--backend", "name or name:tactic (e.g. sm80:1)", spec);
  }
  return Status::Ok();
}

std::vector<std::string> expand_backends(const std::string& spec, bool gpu_present) {
  std::vector<std::string> names;
  if (spec == "all") {
    for (const BackendInfo& b : list_backends()) {
      if (b.available && b.device_memory == gpu_present) names.push_back(b.name);
    }
    return names;
  }
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = spec.find(',', start);
    const size_t end = comma == std::string::npos ? spec.size() : comma;
    if (end > start) names.push_back(spec.substr(start, end - start));
    start = end + 1;
  }
  return names;
}

void progress(size_t done, size_t total) {
  if (total <= 1 || !isatty(STDERR_FILENO)) return;
  const int width = 40;
  const int filled = static_cast<int>(width * done / total);
  std::fprintf(stderr, "\r[%s%s] %zu/%zu", std::string(filled, '#').c_str(),
               std::string(width - filled, ' ').c_str(), done, total);
  if (done == total) std::fprintf(stderr, "\r%s\r", std::string(width + 20, ' ').c_str());
  std::fflush(stderr);
}

std::string iso_date() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

bool write_json_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text << "\n";
  out.close();
  if (!out) {
    std::fprintf(stderr, "error: --json: could not write %s\n", path.c_str());
    return false;
  }
  return true;
}

Status reference_for(const harness::HostInputs& in, int k, Reference* ref) {
  Problem p = in.problem;
  p.max_batch = k;
  std::unique_ptr<Decoder> cpu;
  MLAKIT_RETURN_IF_ERROR(Decoder::create(p, {.backend = "cpu"}, &cpu));
  ref->k = k;
  const size_t rows = static_cast<size_t>(k) * p.s_q * p.h_q;
  ref->out.assign(rows * kDv * dtype_bytes(p.out_dtype), 0);
  ref->lse.assign(rows, 0.0f);
  RunArgs args = in.args(ref->out.data(), ref->lse.data());
  args.batch = k;
  return cpu->run(args, nullptr, 0, nullptr);
}

std::string verdict_summary(const Verdict& v) {
  std::string s = v.cmp.summary();
  if (v.unwritten > 0) s += str_cat(", ", v.unwritten, " left unwritten (NaN)");
  if (v.written_past > 0) s += str_cat(", ", v.written_past, " written past the packed rows");
  return s;
}

Verdict judge(const harness::HostInputs& in, const Reference& ref, const std::vector<uint8_t>& out,
              const std::vector<float>& lse) {
  const Problem& p = in.problem;
  Verdict v;
  // var_q: the packed rows of the first ref.k requests, then of all; past those, no row written.
  const auto tokens = [&](int k) -> int64_t { return p.var_q ? in.cu_seqlens_q[k] : -1; };
  v.cmp =
      harness::compare(p, ref.k, out.data(), ref.out.data(), p.return_lse ? lse.data() : nullptr,
                       p.return_lse ? ref.lse.data() : nullptr, tokens(ref.k));
  const float* lse_or_null = p.return_lse ? lse.data() : nullptr;
  const harness::Comparison all = harness::compare(p, in.batch, out.data(), out.data(), lse_or_null,
                                                   lse_or_null, tokens(in.batch));
  v.unwritten = all.nonfinite;
  v.written_past = all.written_past;
  v.cmp.written_past = 0;  // (the rows past the first ref.k requests' belong to the others)
  const harness::Tolerance tol = harness::default_tolerance(p);
  v.ok = v.cmp.passes(tol) && v.unwritten == 0 && v.written_past == 0;
  return v;
}

Status verify_device(const Decoder& decoder, const harness::HostInputs& in,
                     const harness::DeviceInputs& dev, const Reference& ref, Verdict* v) {
  harness::DeviceBuffer ws(std::max<size_t>(decoder.workspace_bytes(), 256));
  MLAKIT_RETURN_IF_ERROR(dev.poison(in));
  MLAKIT_RETURN_IF_ERROR(decoder.run(dev.args, ws.get(), decoder.workspace_bytes(), nullptr));
  std::vector<uint8_t> out(in.out_bytes());
  std::vector<float> lse(in.lse_count());
  MLAKIT_RETURN_IF_ERROR(
      dev.download(in, out.data(), in.problem.return_lse ? lse.data() : nullptr));
  *v = judge(in, ref, out, lse);
  return Status::Ok();
}

Status verify_host(const Decoder& decoder, const harness::HostInputs& in, const Reference& ref,
                   Verdict* v) {
  std::vector<uint8_t> out(in.out_bytes());
  std::vector<float> lse(in.lse_count(), NAN);  // poisoned as out (var_q: nothing past the rows)
  harness::fill_nan(out.data(), out.size() / dtype_bytes(in.problem.out_dtype),
                    in.problem.out_dtype);
  MLAKIT_RETURN_IF_ERROR(decoder.run(in.args(out.data(), lse.data()), nullptr, 0, nullptr));
  *v = judge(in, ref, out, lse);
  return Status::Ok();
}

// Whether `path` can be written, checked before the first case runs so that a long sweep does not
// end with nowhere to write; a file that did not exist is not left behind.
Status check_writable(const std::string& flag, const std::string& path) {
  std::error_code ignored;
  const bool existed = std::filesystem::exists(path, ignored);
  errno = 0;
  const bool ok = static_cast<bool>(std::ofstream(path, std::ios::app));
  const int error = errno;
  if (ok && !existed) std::filesystem::remove(path, ignored);
  if (ok) return Status::Ok();
  return invalid_argument(flag, "a file that can be written",
                          str_cat(path, " (", error ? std::strerror(error) : "cannot open", ")"));
}

}  // namespace mlakit::tools
