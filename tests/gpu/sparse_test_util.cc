// The sparse decode GPU tests' shared cases and checks (sparse_test_util.h).
#include "sparse_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "core/numeric.h"

namespace mlakit::testing {
namespace {

// Indices no reference can take: every -1 slot (and every slot past a request's top-k length)
// replaced by a value out of range or, past the length, a valid slot that must be ignored.
// Replaces a list's -1 slots and the slots past its lengths as corrupted() says.
void corrupt_list(std::vector<int32_t>& indices, const std::vector<int32_t>& lens, int32_t topk,
                  int64_t tokens, const harness::HostInputs& in) {
  const Problem& p = in.problem;
  const int32_t out_of_range[] = {static_cast<int32_t>(tokens), std::numeric_limits<int32_t>::max(),
                                  -2, std::numeric_limits<int32_t>::min(),
                                  static_cast<int32_t>(tokens + 12345)};
  uint32_t n = 0;
  for (int i = 0; i < in.batch; ++i) {
    const int32_t len = lens.empty() ? topk : lens[i];
    for (int t = 0; t < p.s_q; ++t) {
      int32_t* idx = indices.data() + (static_cast<int64_t>(i) * p.s_q + t) * topk;
      for (int32_t k = 0; k < topk; ++k, ++n) {
        if (k >= len) {
          idx[k] = n % 2 == 0 ? static_cast<int32_t>(n % tokens) : out_of_range[n % 5];
        } else if (idx[k] == -1 && n % 3 != 0) {
          idx[k] = out_of_range[n % 5];
        }
      }
    }
  }
}

}  // namespace

std::string name(const SparseCase& c, int tactic) {
  return str_cat(c.blockwise ? "v32"
                 : c.v4      ? "v4"
                 : c.fp8     ? "e4m3"
                             : "dense",
                 " q ", to_string(c.q), " page ", c.page_size, " h_q ", c.h_q, " s_q ", c.s_q,
                 " topk ", c.topk,
                 c.extra_topk > 0 ? str_cat(" extra ", c.extra_topk, " page ", c.extra_page_size)
                                  : std::string(),
                 " b ", c.batch, " L ", c.len, c.topk_lens ? " lens" : "", c.sinks ? " sinks" : "",
                 c.odd_scales ? " odd scales" : "", c.tails ? " tails" : "",
                 std::isnan(c.k_scale) ? std::string() : str_cat(" k_scale ", c.k_scale),
                 c.q_times != 1.0f ? str_cat(" q times ", c.q_times) : std::string(),
                 c.kv_times != 1.0f ? str_cat(" kv times ", c.kv_times) : std::string(),
                 c.jumps ? " jumps" : "", " tactic ", tactic);
}

std::vector<SparseCase> magnitude_cases() {
  return {{.blockwise = true,
           .h_q = 16,
           .topk = 200,
           .batch = 2,
           .q_times = 0x1p24f,
           .kv_times = 0x1p-24f},
          {.blockwise = true,
           .h_q = 8,
           .s_q = 2,
           .topk = 130,
           .batch = 2,
           .odd_scales = true,
           .q_times = 0x1p-30f,
           .kv_times = 0x1p30f},
          {.blockwise = true,
           .h_q = 16,
           .topk = 300,
           .batch = 2,
           .k_scale = 0x1p24f,
           .kv_times = 0x1p-24f},
          {.blockwise = true, .h_q = 16, .topk = 2048, .batch = 2, .len = 4000, .jumps = true},
          {.blockwise = true, .h_q = 64, .s_q = 2, .topk = 700, .batch = 2, .jumps = true}};
}

Problem problem_of(const SparseCase& c) {
  Problem p;
  p.h_q = c.h_q;
  p.s_q = c.s_q;
  p.page_size = c.page_size;
  p.max_batch = c.batch;
  p.max_seq_len = static_cast<int32_t>(harness::longest_seq_len(c.len, c.variable));
  p.q_dtype = p.out_dtype = c.q;
  p.kv_dtype = c.blockwise || c.fp8 || c.v4 ? DType::kFP8E4M3 : c.q;
  p.kv_layout = c.blockwise ? KvLayout::kFp8Blockwise : c.v4 ? KvLayout::kFp8V4 : KvLayout::kDense;
  p.d_qk = c.v4 ? kV4Dqk : kDqk;
  p.topk = c.topk;
  p.extra_topk = c.extra_topk;
  p.extra_page_size = c.extra_page_size;
  p.has_sinks = c.sinks;
  p.return_lse = c.lse;
  return p;
}

harness::HostInputs inputs_of(const SparseCase& c, uint64_t seed) {
  const std::vector<int32_t> lens = harness::make_seq_lens(c.batch, c.len, c.variable, seed);
  harness::HostInputs in = harness::make_inputs(
      problem_of(c), lens, {.seed = seed, .sparse_tails = c.tails, .topk_lens = c.topk_lens});
  if (!std::isnan(c.k_scale)) in.k_scale = c.k_scale;
  if (c.blockwise && (c.odd_scales || c.kv_times != 1.0f || c.jumps)) {
    // With odd_scales, the kernels' exact power-of-two widening must not take these (the
    // reference reads the same bytes).
    const float odd = c.odd_scales ? 1.3f : 1.0f;
    for (size_t at = kDv; at + 16 + 128 <= in.kv.size(); at += kBlockwiseBytes) {
      // The token's dequantized values times this (powers of two: exact).
      const float times =
          c.kv_times *
          (c.jumps ? std::ldexp(1.0f, static_cast<int>(at / kBlockwiseBytes % 12)) : 1.0f);
      for (int g = 0; g < 4; ++g) {
        float scale;
        std::memcpy(&scale, in.kv.data() + at + 4 * g, 4);
        if (std::isfinite(scale)) scale *= odd * times;
        std::memcpy(in.kv.data() + at + 4 * g, &scale, 4);
      }
      if (times == 1.0f) continue;
      for (size_t d = at + 16; d < at + 16 + 128; d += 2) {  // the RoPE values (bf16)
        uint16_t v;
        std::memcpy(&v, in.kv.data() + d, 2);
        v = float_to_bf16(bf16_to_float(v) * times);
        std::memcpy(in.kv.data() + d, &v, 2);
      }
    }
  }
  if (c.q_times != 1.0f && c.q == DType::kBF16) {
    for (size_t at = 0; at + 2 <= in.q.size(); at += 2) {
      uint16_t v;
      std::memcpy(&v, in.q.data() + at, 2);
      v = float_to_bf16(bf16_to_float(v) * c.q_times);
      std::memcpy(in.q.data() + at, &v, 2);
    }
  }
  return in;
}

harness::HostInputs corrupted(const harness::HostInputs& in) {
  harness::HostInputs bad = in;
  const Problem& p = in.problem;
  corrupt_list(bad.indices, in.topk_lens, p.topk, in.num_pages * p.page_size, in);
  if (p.has_extra()) {
    corrupt_list(bad.extra_indices, in.extra_topk_lens, p.extra_topk,
                 in.extra_num_pages * p.extra_page_size_or_default(), in);
  }
  return bad;
}

void check(const SparseCase& c, uint64_t seed, int tactic, bool corrupt, const char* backend,
           const sm90::ClusterShape* forced) {
  SCOPED_TRACE(name(c, tactic));
  const harness::HostInputs in = inputs_of(c, seed);
  Output ref;
  MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
  const harness::HostInputs run_in = corrupt ? corrupted(in) : in;
  harness::DeviceInputs device;
  MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(run_in, &device));
  StreamHolder s;
  Output got;
  if (forced != nullptr) {
    sm90::Setup setup;
    MLAKIT_ASSERT_OK(sm90::make_setup(in.problem, tactic, current_device(), &setup));
    setup.forced_cluster_shape = *forced;
    harness::DeviceBuffer workspace(std::max<size_t>(setup.workspace_bytes, 256));
    MLAKIT_ASSERT_OK(run_device(
        [&](cudaStream_t st) { return sm90::run(setup, device.args, workspace.get(), st); }, run_in,
        device, s.stream, &got));
  } else {
    std::unique_ptr<Decoder> decoder;
    MLAKIT_ASSERT_OK(Decoder::create(in.problem, {.backend = backend, .tactic = tactic}, &decoder));
    harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
    MLAKIT_ASSERT_OK(run_device(*decoder, run_in, device, workspace.get(), s.stream, &got));
  }
  // Scales that are not powers of two: the 16-bit tiles round each dequantized K and V value to
  // q's type before the products (as FlashMLA does), which moved the LSE by up to 2.6e-3 and the
  // outputs by up to 2 ulp past the default tolerance (H200, 2026-11-28); the sparse narrow and
  // mma kernels (tactics 8-11) apply the scales in fp32 and keep the default. (The split
  // kernel's cluster schedule, tactic 12, rounds as tactics 6 and 7 do.)
  harness::Tolerance tolerance = harness::default_tolerance(in.problem);
  const bool fp32_scales = std::string_view(backend) == "sm90" && tactic >= 8 && tactic <= 11;
  if (c.odd_scales && !fp32_scales) {
    tolerance.rtol *= 2.0;
    tolerance.lse_atol = 5e-3;
  }
  // `jumps`: the LSE runs into the thousands, where an fp32's ulp is 2.4e-4 to 4.9e-4; every
  // tactic of sm90 and sm80 was 5 to 11 ulps off the cpu reference (H200, 2026-11-29), past the
  // default 2e-3. A wrong rescale of the running max would be off by 5.5 or more.
  if (c.jumps) tolerance.lse_atol = 1e-2;
  const ::testing::AssertionResult result = matches_reference(in, got, ref, tolerance);
  EXPECT_TRUE(result);
  std::printf("  %-70s %s\n", name(c, tactic).c_str(), result.message());
}

void check_each_tactic(const SparseCase& c, uint64_t* seed, bool corrupt, const char* backend) {
  for (const int tactic : tactic_ids(backend, problem_of(c))) {
    check(c, (*seed)++, tactic, corrupt, backend);
  }
}

void check_empty_rows(const harness::HostInputs& in, int empty, const char* backend) {
  const Problem& p = in.problem;
  Output ref;
  MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
  for (const int tactic : tactic_ids(backend, p)) {
    std::unique_ptr<Decoder> decoder;
    MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend, .tactic = tactic}, &decoder));
    harness::DeviceInputs device;
    MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
    harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
    StreamHolder s;
    Output got;
    MLAKIT_ASSERT_OK(run_device(*decoder, in, device, workspace.get(), s.stream, &got));
    EXPECT_TRUE(matches_reference(in, got, ref)) << "tactic " << tactic;
    const int rows = empty * p.s_q * p.h_q;
    for (int r = 0; r < rows; ++r) {
      EXPECT_EQ(got.lse[r], -INFINITY) << "row " << r << " tactic " << tactic;
    }
    EXPECT_TRUE(std::all_of(got.out.begin(), got.out.begin() + int64_t{rows} * kDv,
                            [](uint16_t v) { return (v & 0x7fff) == 0; }))
        << "tactic " << tactic;
  }
}

void check_sparse_pdl_bitwise(const SparseCase& c, uint64_t seed, const char* backend) {
  const harness::HostInputs in = inputs_of(c, seed);
  harness::DeviceInputs device;
  MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
  for (const int tactic : tactic_ids(backend, in.problem)) {
    Output outs[2];
    for (const bool pdl : {false, true}) {
      Problem p = in.problem;
      p.enable_pdl = pdl;
      std::unique_ptr<Decoder> decoder;
      MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend, .tactic = tactic}, &decoder));
      harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
      StreamHolder s;
      MLAKIT_ASSERT_OK(run_device(*decoder, in, device, workspace.get(), s.stream, &outs[pdl]));
    }
    EXPECT_TRUE(bitwise_equal(outs[0], outs[1])) << "tactic " << tactic;
  }
}

void check_blockwise_empty_rows(const char* backend) {
  const SparseCase c{
      .blockwise = true, .h_q = 32, .s_q = 2, .topk = 64, .batch = 4, .topk_lens = true};
  harness::HostInputs in = inputs_of(c, 7400);
  std::fill(in.indices.begin(), in.indices.begin() + c.s_q * c.topk, -1);  // request 0
  in.topk_lens[1] = 0;
  check_empty_rows(in, 2, backend);
}

void check_v4_every_tactic(const char* backend, uint64_t seed) {
  const SparseCase cases[] = {
      {.h_q = 64, .topk = 128, .v4 = true},
      {.h_q = 128,
       .s_q = 2,
       .topk = 512,
       .topk_lens = true,
       .sinks = true,
       .v4 = true,
       .extra_topk = 128},
      {.page_size = 61,
       .h_q = 16,
       .s_q = 3,
       .topk = 64,
       .len = 512,
       .v4 = true,
       .extra_topk = 64,
       .extra_page_size = 69},
      {.page_size = 2,
       .h_q = 64,
       .topk = 576,
       .batch = 2,
       .len = 1024,
       .topk_lens = true,
       .v4 = true,
       .extra_topk = 63,
       .extra_page_size = 576},
      {.q = DType::kFP16,
       .page_size = 53,
       .h_q = 8,
       .s_q = 3,
       .topk = 65,
       .len = 650,
       .sinks = true,
       .v4 = true,
       .extra_topk = 1,
       .extra_page_size = 256},
      {.page_size = 256,
       .h_q = 32,
       .topk = 2048,
       .batch = 2,
       .len = 2046,
       .v4 = true,
       .extra_topk = 2048,
       .extra_page_size = 64},
      {.h_q = 128, .s_q = 1, .topk = 1, .batch = 5, .v4 = true},
      {.h_q = 40,
       .s_q = 2,
       .topk = 300,
       .topk_lens = true,
       .v4 = true,
       .extra_topk = 100,
       .extra_page_size = 16},
      {.q = DType::kFP16,
       .page_size = 16,
       .h_q = 32,
       .topk = 130,
       .v4 = true,
       .extra_topk = 64,
       .k_scale = 0.75f},
      {.q = DType::kFP16, .h_q = 64, .s_q = 2, .topk = 200, .v4 = true, .k_scale = 2.0f},
      // Pages of one token (pitch 1), and of 1000 (pitch 1024) in the extra cache.
      {.page_size = 1,
       .h_q = 16,
       .topk = 64,
       .len = 300,
       .v4 = true,
       .extra_topk = 16,
       .extra_page_size = 1000},
  };
  for (const SparseCase& c : cases) check_each_tactic(c, &seed, false, backend);
  check_each_tactic({.page_size = 61,
                     .h_q = 64,
                     .s_q = 2,
                     .topk = 300,
                     .topk_lens = true,
                     .v4 = true,
                     .extra_topk = 77,
                     .extra_page_size = 2},
                    &seed, /*corrupt=*/true, backend);
}

void check_v4_empty_rows(const char* backend) {
  const SparseCase c{
      .h_q = 64, .s_q = 2, .topk = 64, .batch = 4, .topk_lens = true, .v4 = true, .extra_topk = 64};
  harness::HostInputs in = inputs_of(c, 7450);
  std::fill(in.indices.begin(), in.indices.begin() + c.s_q * c.topk, -1);  // request 0
  std::fill(in.extra_indices.begin(), in.extra_indices.begin() + c.s_q * c.extra_topk, -1);
  in.topk_lens[1] = 0;
  in.extra_topk_lens[1] = 0;
  in.topk_lens[2] = 0;  // request 2: the extra list only
  check_empty_rows(in, 2, backend);
}

void check_v4_pdl_bitwise(const char* backend) {
  check_sparse_pdl_bitwise({.page_size = 64,
                            .h_q = 128,
                            .s_q = 2,
                            .topk = 512,
                            .batch = 3,
                            .topk_lens = true,
                            .sinks = true,
                            .v4 = true,
                            .extra_topk = 128,
                            .extra_page_size = 2},
                           7550, backend);
}

}  // namespace mlakit::testing
