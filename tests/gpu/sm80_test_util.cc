#include "sm80_test_util.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/backend.h"
#include "core/check.h"

namespace mlakit::testing {

std::string case_name(const Case& c) {
  static constexpr const char* kLens[] = {"fixed", "variable", "skewed"};
  std::ostringstream os;
  os << to_string(c.dtype) << "_page" << c.page_size << "_h" << c.h_q << "_sq" << c.s_q << "_"
     << kLens[static_cast<int>(c.lens)] << (c.sinks ? "_sinks" : "") << (c.lse ? "_lse" : "")
     << (c.causal ? "" : "_noncausal") << (c.fp8_kv ? "_e4m3kv" : "") << (c.fp8_q ? "_e4m3q" : "")
     << "_tactic" << c.tactic;
  if (c.batch > 0) os << "_b" << c.batch;
  if (c.len >= 0) os << "_L" << c.len;
  return os.str();
}

std::vector<int32_t> case_lengths(const Case& c, uint64_t seed) {
  const int rows = c.h_q * c.s_q;
  std::vector<int32_t> lens;
  switch (c.lens) {
    case Lens::kFixed: {
      // Not a multiple of any page size; long enough to be split across many CTAs.
      const int len = c.len >= 0 ? c.len : rows <= 64 ? 700 : 300;
      lens.assign(c.batch > 0 ? c.batch : 3, len);
      break;
    }
    case Lens::kVariable: {
      lens =
          harness::make_seq_lens(c.batch > 0 ? c.batch : 6, c.len >= 0 ? c.len : 160, true, seed);
      lens[0] = 0;
      if (lens.size() > 1) lens[1] = 1;
      break;
    }
    case Lens::kSkewed: {
      const int base = c.len >= 0 ? c.len : 60;
      lens = {50 * base, base, 0, 1, base + 5};
      if (c.batch > 0) lens.resize(c.batch, base);
      break;
    }
  }
  return lens;
}

Problem case_problem(const Case& c, const std::vector<int32_t>& lens) {
  Problem p;
  p.h_q = c.h_q;
  p.s_q = c.s_q;
  p.page_size = c.page_size;
  p.max_batch = static_cast<int32_t>(lens.size());
  p.max_seq_len = *std::max_element(lens.begin(), lens.end());
  p.q_dtype = p.kv_dtype = p.out_dtype = c.dtype;
  if (c.fp8_kv) p.kv_dtype = DType::kFP8E4M3;
  if (c.fp8_q) p.q_dtype = DType::kFP8E4M3;
  p.causal = c.causal;
  p.has_sinks = c.sinks;
  p.return_lse = c.lse;
  return p;
}

Status cpu_reference(const harness::HostInputs& in, Output* ref) {
  Problem p = in.problem;
  p.enable_pdl = false;
  std::unique_ptr<Decoder> cpu;
  MLAKIT_RETURN_IF_ERROR(Decoder::create(p, {.backend = "cpu"}, &cpu));
  ref->out.assign(in.out_bytes() / 2, 0);
  ref->lse.assign(p.return_lse ? in.lse_count() : 0, 0.0f);
  return cpu->run(in.args(ref->out.data(), p.return_lse ? ref->lse.data() : nullptr), nullptr, 0,
                  nullptr);
}

Status run_device(const Decoder& decoder, const harness::HostInputs& in,
                  const harness::DeviceInputs& device, void* workspace, cudaStream_t stream,
                  Output* got) {
  return run_device(
      [&](cudaStream_t s) {
        return decoder.run(device.args, workspace, decoder.workspace_bytes(), s);
      },
      in, device, stream, got);
}

Status run_device(const std::function<Status(cudaStream_t)>& run, const harness::HostInputs& in,
                  const harness::DeviceInputs& device, cudaStream_t stream, Output* got) {
  MLAKIT_RETURN_IF_ERROR(device.poison(in));
  if (cudaDeviceSynchronize() != cudaSuccess) {
    return Status(StatusCode::kCudaError, "cudaDeviceSynchronize after poisoning");
  }
  MLAKIT_RETURN_IF_ERROR(run(stream));
  const cudaError_t err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) {
    return Status(StatusCode::kCudaError,
                  std::string("cudaStreamSynchronize after run: ") + cudaGetErrorString(err));
  }
  got->out.assign(in.out_bytes() / 2, 0);
  got->lse.assign(in.problem.return_lse ? in.lse_count() : 0, 0.0f);
  return device.download(in, got->out.data(), in.problem.return_lse ? got->lse.data() : nullptr);
}

::testing::AssertionResult matches_reference(const harness::HostInputs& in, const Output& got,
                                             const Output& ref) {
  return matches_reference(in, got, ref, harness::default_tolerance(in.problem));
}

::testing::AssertionResult matches_reference(const harness::HostInputs& in, const Output& got,
                                             const Output& ref, const harness::Tolerance& tol) {
  const Problem& p = in.problem;
  const bool lse = p.return_lse;
  // var_q: the packed rows, and nothing written past them.
  const harness::Comparison cmp =
      harness::compare(p, in.batch, got.out.data(), ref.out.data(), lse ? got.lse.data() : nullptr,
                       lse ? ref.lse.data() : nullptr, p.var_q ? in.cu_seqlens_q[in.batch] : -1);
  if (cmp.passes(tol)) {
    return ::testing::AssertionSuccess() << cmp.summary();
  }
  return ::testing::AssertionFailure()
         << cmp.summary() << " (tolerance: " << tol.atol << " + " << tol.rtol
         << " * ref max, rel L2 " << tol.rel_l2 << ", lse " << tol.lse_atol << ")";
}

::testing::AssertionResult bitwise_equal(const Output& a, const Output& b) {
  if (a.out.size() != b.out.size() || a.lse.size() != b.lse.size()) {
    return ::testing::AssertionFailure() << "sizes differ";
  }
  for (size_t k = 0; k < a.out.size(); ++k) {
    if (a.out[k] != b.out[k]) {
      return ::testing::AssertionFailure() << "out differs at element " << k << ": 0x" << std::hex
                                           << a.out[k] << " vs 0x" << b.out[k];
    }
  }
  if (!a.lse.empty() && std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4) != 0) {
    return ::testing::AssertionFailure() << "lse differs";
  }
  return ::testing::AssertionSuccess();
}

namespace {

// Case `c`'s inputs (from `seed`, values `magnitude` times N(0, 1)), the cpu reference, and the
// output of `backend` with tactic c.tactic.
Status decode_case(const Case& c, uint64_t seed, const char* backend, float magnitude,
                   harness::HostInputs* in, Output* ref, Output* got) {
  const std::vector<int32_t> lens = case_lengths(c, seed);
  const Problem p = case_problem(c, lens);
  *in = harness::make_inputs(p, lens, {.seed = seed, .magnitude = magnitude});
  MLAKIT_RETURN_IF_ERROR(cpu_reference(*in, ref));
  std::unique_ptr<Decoder> decoder;
  MLAKIT_RETURN_IF_ERROR(Decoder::create(p, {.backend = backend, .tactic = c.tactic}, &decoder));
  harness::DeviceInputs device;
  MLAKIT_RETURN_IF_ERROR(harness::DeviceInputs::upload(*in, &device));
  harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
  StreamHolder s;
  return run_device(*decoder, *in, device, workspace.get(), s.stream, got);
}

}  // namespace

void check_case(const Case& c, uint64_t seed, const char* backend,
                const harness::Tolerance* tolerance) {
  harness::HostInputs in;
  Output ref, got;
  MLAKIT_ASSERT_OK(decode_case(c, seed, backend, 1.0f, &in, &ref, &got));
  const Problem& p = in.problem;
  const ::testing::AssertionResult result =
      matches_reference(in, got, ref, tolerance ? *tolerance : harness::default_tolerance(p));
  EXPECT_TRUE(result) << case_name(c);
  std::printf("  %-56s %s\n", case_name(c).c_str(), result.message());
}

Status compare_case(const Case& c, uint64_t seed, const char* backend, float magnitude,
                    harness::Comparison* cmp) {
  harness::HostInputs in;
  Output ref, got;
  MLAKIT_RETURN_IF_ERROR(decode_case(c, seed, backend, magnitude, &in, &ref, &got));
  *cmp = harness::compare(in.problem, in.batch, got.out.data(), ref.out.data(), got.lse.data(),
                          ref.lse.data());
  return Status::Ok();
}

void check_cases(std::span<const Case> cases, uint64_t seed, const char* backend,
                 const harness::Tolerance* tolerance) {
  for (const Case& c : cases) {
    SCOPED_TRACE(case_name(c));
    check_case(c, seed++, backend, tolerance);
  }
}

std::vector<int> tactic_ids(const char* backend, const Problem& p) {
  std::vector<int> ids;
  for (const Tactic& t : find_backend(backend)->tactics(p)) ids.push_back(t.id);
  return ids;
}

void check_each_tactic(std::span<const Case> cases, uint64_t seed, const char* backend) {
  for (Case c : cases) {
    for (const int tactic : tactic_ids(backend, case_problem(c, case_lengths(c, seed)))) {
      c.tactic = tactic;
      SCOPED_TRACE(case_name(c));
      check_case(c, seed++, backend);
    }
  }
}

std::vector<Case> common_edges() {
  return {
      // Batch 1, one long request: split across every SM, then combined.
      {.h_q = 128, .lens = Lens::kFixed, .lse = true, .batch = 1, .len = 4001},
      {.h_q = 16, .lens = Lens::kFixed, .sinks = true, .lse = true, .batch = 1, .len = 4001},
      // Lengths shorter than s_q: some query tokens see nothing (out 0, lse -inf).
      {.page_size = 16,
       .h_q = 16,
       .s_q = 8,
       .lens = Lens::kFixed,
       .sinks = true,
       .lse = true,
       .batch = 2,
       .len = 3},
      {.page_size = 1,
       .h_q = 32,
       .s_q = 4,
       .lens = Lens::kVariable,
       .lse = true,
       .batch = 7,
       .len = 3},
      // Non-causal MTP: every query token sees all L.
      {.dtype = DType::kFP16,
       .h_q = 64,
       .s_q = 2,
       .lens = Lens::kVariable,
       .lse = true,
       .causal = false},
      // Every request empty.
      {.h_q = 16, .lens = Lens::kFixed, .sinks = true, .lse = true, .batch = 4, .len = 0},
      // More requests than the plan kernel's threads (its scans carry across iterations).
      {.page_size = 16, .h_q = 16, .lens = Lens::kVariable, .lse = true, .batch = 1100, .len = 24},
      // Odd head counts: partial query tiles.
      {.page_size = 32, .h_q = 5, .s_q = 3, .lens = Lens::kVariable, .lse = true},
      {.page_size = 32, .h_q = 40, .s_q = 3, .lens = Lens::kSkewed, .sinks = true, .lse = true},
  };
}

std::vector<Case> with_fp8(std::vector<Case> cases) {
  const size_t n = cases.size();
  for (size_t k = 0; k < n; ++k) {
    cases[k].fp8_kv = true;
    Case with_q = cases[k];
    with_q.fp8_q = true;
    cases.push_back(with_q);
  }
  return cases;
}

std::vector<Case> long_mtp_cases() {
  return {
      // The most query rows: h_q 128 x s_q 16 = 2048 rows, 32 tiles of 64.
      {.h_q = 128, .s_q = 16, .lens = Lens::kVariable, .sinks = true, .lse = true, .len = 300},
      // 32 rows of 16 query tokens (sm80's 32-row tile, sm90's narrow one of 32).
      {.page_size = 32, .h_q = 2, .s_q = 16, .lens = Lens::kSkewed, .lse = true},
      // One query row per token, one long request split across CTAs.
      {.page_size = 128,
       .h_q = 1,
       .s_q = 16,
       .lens = Lens::kFixed,
       .lse = true,
       .batch = 2,
       .len = 4001},
      // Lengths shorter than s_q: the first query tokens see nothing.
      {.dtype = DType::kFP16,
       .h_q = 16,
       .s_q = 12,
       .lens = Lens::kFixed,
       .sinks = true,
       .lse = true,
       .batch = 3,
       .len = 10},
      // Partial tiles, a causal bound 11 tokens back that crosses a 32- or 64-token block.
      {.page_size = 32, .h_q = 5, .s_q = 12, .lens = Lens::kVariable, .lse = true},
      {.h_q = 40, .s_q = 9, .lens = Lens::kFixed, .lse = true, .batch = 2, .len = 70},
      // Non-causal: every query token sees all L.
      {.dtype = DType::kFP16, .h_q = 64, .s_q = 16, .lens = Lens::kSkewed, .causal = false},
  };
}

std::vector<Refusal> common_refusals() {
  Problem base;
  base.max_seq_len = 1024;
  Problem fp8 = base;
  fp8.kv_dtype = DType::kFP8E4M3;
  fp8.kv_layout = KvLayout::kFp8Blockwise;
  fp8.q_dtype = DType::kBF16;
  // Sparse decode runs on both GPU backends (tests/gpu/sparse_sm90_test.cc, sparse_sm80_test.cc);
  // an extra cache with a dense cache runs on neither (sm90 runs it with the V4 layout).
  Problem extra = base;
  extra.topk = 2048;
  extra.extra_topk = 64;
  return {{fp8, "kv_layout"}, {extra, "extra cache"}};
}

void expect_refused(const char* backend, const std::vector<Refusal>& refusals) {
  for (const Refusal& r : refusals) {
    const Status st = can_run(backend, r.problem);
    EXPECT_EQ(st.code(), StatusCode::kUnsupported) << describe(r.problem) << ": " << st.to_string();
    EXPECT_NE(st.message().find(r.mentions), std::string::npos) << st.message();
  }
}

void check_workspace_too_small_is_refused(const char* backend) {
  const Case c{.h_q = 64, .lens = Lens::kFixed, .batch = 2, .len = 2000};
  const std::vector<int32_t> lens = case_lengths(c, 1);
  const Problem p = case_problem(c, lens);
  const harness::HostInputs in = harness::make_inputs(p, lens, {.seed = 1});
  std::unique_ptr<Decoder> decoder;
  MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend}, &decoder));
  harness::DeviceInputs device;
  MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
  const size_t bytes = decoder->workspace_bytes();
  ASSERT_GT(bytes, 0u);
  harness::DeviceBuffer workspace(bytes);
  const Status st = decoder->run(device.args, workspace.get(), bytes - 1, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("workspace_size"), std::string::npos) << st.message();
}

bool timing_shape_selected(int index) {
  const char* only = std::getenv("MLAKIT_TIMING_SHAPES");
  return only == nullptr ||
         (std::string(",") + only + ",").find("," + std::to_string(index) + ",") !=
             std::string::npos;
}

}  // namespace mlakit::testing
