// Variable query lengths (Problem::var_q) on the cpu backend: each request's packed rows equal,
// bit for bit, a run of that request alone with a uniform s_q of its own q_len (dense, sparse with
// an extra cache, an fp8 cache, context parallel, non-causal); q_len 0 requests and an
// all-zero batch; rows past cu_seqlens_q[b] stay as they were (NaN canaries); and every refusal
// of validation and of the cpu backend's data checks, by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cpu_run.h"
#include "harness/workload.h"
#include "mlakit/mlakit.h"
#include "reference_match.h"
#include "status_match.h"

namespace mlakit_test {
namespace {

using mlakit::harness::make_inputs;

// Request i of `in` alone: a uniform problem of s_q = its q_len, its rows of q and the indices.
HostInputs request_alone(const HostInputs& in, int i) {
  const Problem& p = in.problem;
  const int32_t first = in.cu_seqlens_q[i], q_len = in.cu_seqlens_q[i + 1] - first;
  HostInputs one = in;
  one.problem.var_q = false;
  one.problem.s_q = q_len;
  one.problem.max_batch = 1;
  one.batch = 1;
  one.cu_seqlens_q.clear();
  const size_t q_row = in.q.size() / (static_cast<size_t>(in.batch) * p.s_q);
  one.q.assign(in.q.begin() + first * q_row, in.q.begin() + (first + q_len) * q_row);
  one.block_table.assign(in.block_table.begin() + i * in.block_table_stride,
                         in.block_table.begin() + (i + 1) * in.block_table_stride);
  one.seq_lens = {in.seq_lens[i]};
  const auto rows = [&](const std::vector<int32_t>& v, int64_t width) {
    return std::vector<int32_t>(v.begin() + first * width, v.begin() + (first + q_len) * width);
  };
  if (p.sparse()) one.indices = rows(in.indices, p.topk);
  if (!in.topk_lens.empty()) one.topk_lens = {in.topk_lens[i]};
  if (p.has_extra()) one.extra_indices = rows(in.extra_indices, p.extra_topk);
  if (!in.extra_topk_lens.empty()) one.extra_topk_lens = {in.extra_topk_lens[i]};
  return one;
}

// Runs `in` (a var_q problem) and each request alone; expects the packed rows to match bit for
// bit and every row past the packed ones (out and lse) to keep its NaN.
void expect_matches_requests_alone(const HostInputs& in,
                                   const std::function<void(RunArgs&)>& edit = {}) {
  const Problem& p = in.problem;
  const CpuRun run = run_cpu(in, edit);
  ASSERT_TRUE(run.status.ok()) << run.status.to_string();
  const size_t out_row =
      static_cast<size_t>(p.h_q) * mlakit::kDv * mlakit::dtype_bytes(p.out_dtype);
  for (int i = 0; i < in.batch; ++i) {
    const int32_t first = in.cu_seqlens_q[i], q_len = in.cu_seqlens_q[i + 1] - first;
    if (q_len == 0) continue;
    SCOPED_TRACE(::testing::Message() << "request " << i << " q_len " << q_len);
    const HostInputs one = request_alone(in, i);
    const CpuRun alone = run_cpu(one, edit);
    ASSERT_TRUE(alone.status.ok()) << alone.status.to_string();
    EXPECT_EQ(std::memcmp(run.out.data() + first * out_row, alone.out.data(), q_len * out_row), 0);
    if (p.return_lse) {
      for (int64_t k = 0; k < int64_t{q_len} * p.h_q; ++k) {
        const float got = run.lse[first * p.h_q + k], want = alone.lse[k];
        EXPECT_TRUE(got == want || (std::isnan(got) && std::isnan(want))) << k;
      }
    }
  }
  const int32_t total = in.cu_seqlens_q[in.batch];
  const size_t elem = mlakit::dtype_bytes(p.out_dtype);
  for (size_t k = total * out_row / elem; k < run.out.size() / elem; ++k) {
    ASSERT_TRUE(std::isnan(decode_out(run.out, static_cast<int64_t>(k), p.out_dtype)))
        << "out element " << k << " written";
  }
  if (p.return_lse) {
    for (size_t k = static_cast<size_t>(total) * p.h_q; k < run.lse.size(); ++k) {
      ASSERT_TRUE(std::isnan(run.lse[k])) << "lse element " << k << " written";
    }
  }
}

TEST(VarQ, DenseMatchesEachRequestAlone) {
  const Problem p{.h_q = 16,
                  .s_q = 4,
                  .page_size = 16,
                  .max_batch = 6,
                  .max_seq_len = 300,
                  .var_q = true,
                  .has_sinks = true,
                  .return_lse = true};
  // q_len 0 first, in the middle and last; lengths below q_len (early tokens see nothing).
  const HostInputs in = make_inputs(p, std::vector<int32_t>{0, 200, 3, 77, 150, 1},
                                    {.seed = case_seed(), .q_lens = {0, 4, 3, 0, 1, 2}});
  expect_matches_requests_alone(in);
}

TEST(VarQ, SixteenTokensRandomLengths) {
  const Problem p{.h_q = 8,
                  .s_q = 16,
                  .page_size = 64,
                  .max_batch = 5,
                  .max_seq_len = 500,
                  .var_q = true,
                  .return_lse = true,
                  .lse_base2 = true};
  const HostInputs in =
      make_inputs(p, std::vector<int32_t>{400, 17, 16, 250, 90}, {.seed = case_seed()});
  expect_matches_requests_alone(in);
  const HostInputs full = make_inputs(p, std::vector<int32_t>{400, 17, 16, 250, 90},
                                      {.seed = case_seed(), .q_lens = {16, 16, 15, 16, 9}});
  expect_matches_requests_alone(full);
}

TEST(VarQ, NonCausalFp8Cache) {
  const Problem p{.h_q = 4,
                  .s_q = 5,
                  .page_size = 32,
                  .max_batch = 4,
                  .max_seq_len = 200,
                  .q_dtype = DType::kBF16,
                  .kv_dtype = DType::kFP8E4M3,
                  .out_dtype = DType::kBF16,
                  .causal = false,
                  .var_q = true,
                  .return_lse = true};
  const HostInputs in = make_inputs(p, std::vector<int32_t>{100, 0, 33, 190},
                                    {.seed = case_seed(), .q_lens = {5, 2, 0, 3}});
  expect_matches_requests_alone(in);
}

TEST(VarQ, SparseWithExtraCacheMatchesEachRequestAlone) {
  const Problem p{.h_q = 8,
                  .s_q = 3,
                  .page_size = 64,
                  .max_batch = 4,
                  .max_seq_len = 256,
                  .q_dtype = DType::kBF16,
                  .kv_dtype = DType::kFP8E4M3,
                  .kv_layout = KvLayout::kFp8Blockwise,
                  .var_q = true,
                  .topk = 64,
                  .extra_topk = 16,
                  .return_lse = true};
  const HostInputs in =
      make_inputs(p, std::vector<int32_t>{256, 10, 0, 100},
                  {.seed = case_seed(), .topk_lens = true, .q_lens = {3, 0, 1, 2}});
  expect_matches_requests_alone(in);
}

TEST(VarQ, ContextParallelMatchesEachRequestAlone) {
  Problem p{.h_q = 8,
            .s_q = 6,
            .page_size = 16,
            .max_batch = 4,
            .max_seq_len = 400,
            .var_q = true,
            .return_lse = true};
  p.cp_world = 3;
  p.cp_rank = 1;
  p.cp_interleave = 4;
  const HostInputs in = make_inputs(p, std::vector<int32_t>{399, 7, 50, 2},
                                    {.seed = case_seed(), .q_lens = {6, 4, 0, 2}});
  expect_matches_requests_alone(in);
}

// Packed rows as views (padded heads, a gap after each token's heads): the rows' bits of the
// contiguous run, and nothing written between or past them.
TEST(VarQ, ViewsGiveTheContiguousRunsRows) {
  const Problem p{.h_q = 8,
                  .s_q = 4,
                  .page_size = 16,
                  .max_batch = 4,
                  .max_seq_len = 200,
                  .var_q = true,
                  .return_lse = true};
  const HostInputs in = make_inputs(p, std::vector<int32_t>{150, 3, 0, 77},
                                    {.seed = case_seed(), .q_lens = {4, 2, 1, 0}});
  const CpuRun contiguous = run_cpu(in);
  ASSERT_TRUE(contiguous.status.ok()) << contiguous.status.to_string();
  const int64_t rows = int64_t{in.batch} * p.s_q;  // capacity: the packed ones come first
  const int64_t q_h = mlakit::kDqk + 64, q_s = p.h_q * q_h + 128;
  const int64_t out_h = mlakit::kDv + 32, out_s = p.h_q * out_h + 64;
  std::vector<uint16_t> q(rows * q_s, 0x7fc0), out(rows * out_s, 0xffff);
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < p.h_q; ++h) {
      std::memcpy(&q[r * q_s + h * q_h], in.q.data() + (r * p.h_q + h) * mlakit::kDqk * 2,
                  mlakit::kDqk * 2);
    }
  }
  const CpuRun viewed = run_cpu(in, [&](RunArgs& a) {
    a.q = q.data();
    a.out = out.data();
    a.q_stride_s = q_s;
    a.q_stride_h = q_h;
    a.out_stride_s = out_s;
    a.out_stride_h = out_h;
  });
  ASSERT_TRUE(viewed.status.ok()) << viewed.status.to_string();
  const int64_t total = in.cu_seqlens_q[in.batch];
  std::vector<bool> in_row(out.size(), false);
  for (int64_t r = 0; r < total; ++r) {
    for (int h = 0; h < p.h_q; ++h) {
      EXPECT_EQ(
          std::memcmp(&out[r * out_s + h * out_h],
                      contiguous.out.data() + (r * p.h_q + h) * mlakit::kDv * 2, mlakit::kDv * 2),
          0)
          << "row " << r << " head " << h;
      std::fill_n(in_row.begin() + r * out_s + h * out_h, mlakit::kDv, true);
    }
  }
  for (size_t k = 0; k < out.size(); ++k) {
    if (!in_row[k]) ASSERT_EQ(out[k], 0xffff) << "element " << k << " written";
  }
  ASSERT_EQ(viewed.lse.size(), contiguous.lse.size());
  for (size_t k = 0; k < viewed.lse.size(); ++k) {
    const float a = viewed.lse[k], b = contiguous.lse[k];
    EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << "lse " << k;
  }
}

TEST(VarQ, AllRequestsEmptyWritesNothing) {
  const Problem p{
      .h_q = 16, .s_q = 8, .max_batch = 3, .max_seq_len = 128, .var_q = true, .return_lse = true};
  const HostInputs in =
      make_inputs(p, std::vector<int32_t>{100, 0, 128}, {.seed = case_seed(), .q_lens = {0, 0, 0}});
  expect_matches_requests_alone(in);
}

// ---------------------------------------------------------------------------------------------
// Refusals
// ---------------------------------------------------------------------------------------------

HostInputs small_var_q_inputs(std::vector<int32_t> q_lens) {
  const Problem p{.h_q = 4, .s_q = 4, .max_batch = 3, .max_seq_len = 64, .var_q = true};
  return make_inputs(p, std::vector<int32_t>{10, 20, 30},
                     {.seed = case_seed(), .q_lens = std::move(q_lens)});
}

TEST(VarQ, RefusesRequestStrides) {
  const HostInputs in = small_var_q_inputs({1, 2, 3});
  for (const bool q : {true, false}) {
    const CpuRun run = run_cpu(in, [&](RunArgs& a) {
      (q ? a.q_stride_b : a.out_stride_b) = int64_t{4} * 4 * (q ? mlakit::kDqk : mlakit::kDv);
    });
    EXPECT_TRUE(is_error(run.status, StatusCode::kInvalidArgument,
                         q ? "q_stride_b" : "out_stride_b", {"var_q"}));
  }
}

// The packed rows' strides may not make out's rows overlap (up to b * s_q of them); the overlap
// checks between arguments count one packed row (the host cannot know how many there are).
TEST(VarQ, OutRowsApartAndOverlapChecksOfOneRow) {
  const HostInputs in = small_var_q_inputs({1, 2, 3});
  const CpuRun overlapping = run_cpu(in, [](RunArgs& a) { a.out_stride_s = mlakit::kDv; });
  EXPECT_TRUE(is_error(overlapping.status, StatusCode::kInvalidArgument, "out strides"));
  // lse right after out's first packed row: no overlap the host can see with var_q (the rows past
  // the first are the caller's to size); without var_q out spans b * s_q rows and overlaps it.
  Problem p = in.problem;
  p.return_lse = true;
  std::vector<uint16_t> out(12 * 4 * mlakit::kDv + 2 * 12 * 4, 0);
  RunArgs a = in.args(out.data(), nullptr);
  a.lse = reinterpret_cast<float*>(out.data() + 4 * mlakit::kDv);  // (in's problem has no lse)
  EXPECT_TRUE(mlakit::validate_args(p, a, 0, nullptr, 0).ok());
  p.var_q = false;
  a.cu_seqlens_q = nullptr;
  EXPECT_TRUE(is_error(mlakit::validate_args(p, a, 0, nullptr, 0), StatusCode::kInvalidArgument,
                       "out", {"overlap lse"}));
}

// The cpu backend reads the offsets, so it checks the overlaps again with every packed row: lse
// right after out's first row (accepted by validate_args above) overlaps out's later rows.
TEST(VarQ, CpuBackendChecksOverlapsOfEveryPackedRow) {
  HostInputs in = small_var_q_inputs({1, 2, 3});  // 6 packed rows
  in.problem.return_lse = true;
  std::vector<uint16_t> out(12 * 4 * mlakit::kDv + 2 * 12 * 4, 0);
  std::unique_ptr<mlakit::Decoder> decoder;
  const mlakit::Status created = mlakit::Decoder::create(in.problem, {.backend = "cpu"}, &decoder);
  ASSERT_TRUE(created.ok()) << created.to_string();
  RunArgs a = in.args(out.data(), nullptr);
  a.lse = reinterpret_cast<float*>(out.data() + 4 * mlakit::kDv);
  EXPECT_TRUE(is_error(decoder->run(a, nullptr, 0, nullptr), StatusCode::kInvalidArgument, "out",
                       {"overlap lse"}));
  // Past the 6 packed rows it is apart.
  a.lse = reinterpret_cast<float*>(out.data() + 6 * 4 * mlakit::kDv);
  const mlakit::Status apart = decoder->run(a, nullptr, 0, nullptr);
  EXPECT_TRUE(apart.ok()) << apart.to_string();
}

TEST(VarQ, RefusesMissingOrUnexpectedOffsets) {
  const HostInputs in = small_var_q_inputs({1, 2, 3});
  const CpuRun missing = run_cpu(in, [](RunArgs& a) { a.cu_seqlens_q = nullptr; });
  EXPECT_TRUE(is_error(missing.status, StatusCode::kInvalidArgument, "cu_seqlens_q", {"var_q"}));

  Problem uniform = in.problem;
  uniform.var_q = false;
  const HostInputs plain = make_inputs(uniform, std::vector<int32_t>{10, 20, 30}, {.seed = 3});
  const int32_t offsets[4] = {0, 1, 2, 3};
  const CpuRun unexpected = run_cpu(plain, [&](RunArgs& a) { a.cu_seqlens_q = offsets; });
  EXPECT_TRUE(is_error(unexpected.status, StatusCode::kInvalidArgument, "cu_seqlens_q",
                       {"var_q is false"}));
}

TEST(VarQ, RefusesBadOffsetsNamingTheEntry) {
  struct Bad {
    std::vector<int32_t> cu;
    std::string arg;
    std::string given;
  };
  const Bad bad[] = {
      {{1, 2, 3, 4}, "cu_seqlens_q[0]", "1"},
      {{0, 3, 2, 4}, "cu_seqlens_q[2]", "2"},    // decreasing
      {{0, 2, 7, 8}, "cu_seqlens_q[2]", "7"},    // q_len 5 > s_q 4
      {{0, 4, 8, 13}, "cu_seqlens_q[3]", "13"},  // the last one
  };
  for (const Bad& b : bad) {
    HostInputs in = small_var_q_inputs({1, 1, 1});
    in.cu_seqlens_q = b.cu;
    const CpuRun run = run_cpu(in);
    EXPECT_TRUE(is_error(run.status, StatusCode::kInvalidArgument, b.arg, {b.given})) << b.arg;
  }
}

}  // namespace
}  // namespace mlakit_test
