// Views (mlakit.h, "Views"): q, out and the KV cache with a contiguous last dimension and free
// outer strides. The cpu backend must give the same bits on a view as on the dense copy of it, read
// nothing outside the view (the gaps hold NaN) and write nothing outside out's rows; strides that
// break alignment or make out's rows overlap are refused by name. The GPU backends take the same
// views (tests/gpu/views_gpu_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cpu_run.h"
#include "harness/workload.h"
#include "mlakit/mlakit.h"
#include "mlakit/mlakit_c.h"

namespace mlakit_test {
namespace {

// A tensor of rows of `row` elements of `elem` bytes placed at the element offsets `at(index)` of
// a larger buffer whose other bytes are `fill` (NaN bits for the inputs, a sentinel for out).
struct Strided {
  std::vector<uint8_t> bytes;
  void* data() { return bytes.data(); }
};

// The (i, t, h) rows of a [b, s_q, h_q, row] tensor copied to offsets b_s * i + s_s * t + h_s * h.
Strided scatter_rows(const uint8_t* dense, int b, int s_q, int h_q, int row, size_t elem,
                     int64_t b_s, int64_t s_s, int64_t h_s, uint8_t fill) {
  const int64_t last = (b - 1) * b_s + (s_q - 1) * s_s + (h_q - 1) * h_s + row;
  Strided out;
  out.bytes.assign(static_cast<size_t>(last) * elem, fill);
  for (int i = 0; i < b; ++i) {
    for (int t = 0; t < s_q; ++t) {
      for (int h = 0; h < h_q; ++h) {
        const int64_t src = ((int64_t{i} * s_q + t) * h_q + h) * row;
        const int64_t dst = i * b_s + t * s_s + h * h_s;
        std::memcpy(&out.bytes[dst * elem], dense + src * elem, row * elem);
      }
    }
  }
  return out;
}

struct ViewCase {
  const char* name;
  DType q_dtype, kv_dtype;
  KvLayout layout;
  int page_size;
  // Padding added to each stride, in elements (multiples of 16 bytes), and whether q / out are
  // stored head-major ([b, h_q, s_q, row] seen as [b, s_q, h_q, row]).
  int q_pad, kv_token_pad, kv_page_pad, out_pad;
  bool permute;
};

class ViewTest : public ::testing::TestWithParam<ViewCase> {};

TEST_P(ViewTest, SameBitsAsTheDenseCopy) {
  const ViewCase& c = GetParam();
  const Problem p{.h_q = 5,
                  .s_q = 2,
                  .page_size = c.page_size,
                  .max_batch = 3,
                  .max_seq_len = 200,
                  .q_dtype = c.q_dtype,
                  .kv_dtype = c.kv_dtype,
                  .out_dtype = c.kv_dtype == DType::kFP16 ? DType::kFP16 : DType::kBF16,
                  .kv_layout = c.layout,
                  .has_sinks = true,
                  .return_lse = true};
  const HostInputs in =
      mlakit::harness::make_inputs(p, std::vector<int32_t>{37, 0, 150}, {.seed = case_seed()});
  const CpuRun dense = run_cpu(in);
  ASSERT_TRUE(dense.status.ok()) << dense.status.to_string();

  const int b = in.batch;
  const size_t q_elem = mlakit::dtype_bytes(p.q_dtype), out_elem = 2;
  const bool blockwise = c.layout == KvLayout::kFp8Blockwise;
  const size_t kv_elem = blockwise ? 1 : mlakit::dtype_bytes(p.kv_dtype);
  const int token = blockwise ? mlakit::kBlockwiseBytes : mlakit::kDqk;
  const uint8_t nan_byte = 0xff;  // 0xffff is a bf16/fp16 NaN, 0xff an e4m3 NaN

  // q: rows q_h apart; head-major when permuted.
  const int64_t q_h_dense = mlakit::kDqk + c.q_pad;
  const int64_t q_h = c.permute ? p.s_q * q_h_dense : q_h_dense;
  const int64_t q_s = c.permute ? q_h_dense : p.h_q * q_h_dense;
  const int64_t q_b = p.s_q * p.h_q * q_h_dense + 64;
  Strided q =
      scatter_rows(in.q.data(), b, p.s_q, p.h_q, mlakit::kDqk, q_elem, q_b, q_s, q_h, nan_byte);
  // kv: tokens and pages padded.
  const int64_t kv_token = token + c.kv_token_pad;
  const int64_t kv_page = p.page_size * kv_token + c.kv_page_pad;
  Strided kv = scatter_rows(in.kv.data(), static_cast<int>(in.num_pages), 1, p.page_size, token,
                            kv_elem, kv_page, 0, kv_token, nan_byte);
  // out: rows out_h apart, head-major when permuted; the gaps hold a sentinel.
  const int64_t out_h_dense = mlakit::kDv + c.out_pad;
  const int64_t out_h = c.permute ? p.s_q * out_h_dense : out_h_dense;
  const int64_t out_s = c.permute ? out_h_dense : p.h_q * out_h_dense;
  const int64_t out_b = p.s_q * p.h_q * out_h_dense + 128;
  const uint8_t sentinel = 0x5a;
  Strided out;
  out.bytes.assign(
      ((b - 1) * out_b + (p.s_q - 1) * out_s + (p.h_q - 1) * out_h + mlakit::kDv) * out_elem,
      sentinel);
  std::vector<float> lse(in.lse_count(), std::numeric_limits<float>::quiet_NaN());

  std::unique_ptr<Decoder> decoder;
  ASSERT_TRUE(Decoder::create(p, {.backend = "cpu"}, &decoder).ok());
  RunArgs args = in.args(out.data(), lse.data());
  args.q = q.data();
  args.kv_cache = kv.data();
  args.q_stride_b = q_b, args.q_stride_s = q_s, args.q_stride_h = q_h;
  args.kv_stride_page = kv_page, args.kv_stride_token = kv_token;
  args.out_stride_b = out_b, args.out_stride_s = out_s, args.out_stride_h = out_h;
  const Status s = decoder->run(args, nullptr, 0, nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();

  // Every row equals the dense run's, bit for bit; every byte between rows is untouched.
  std::vector<bool> row_byte(out.bytes.size(), false);
  for (int i = 0; i < b; ++i) {
    for (int t = 0; t < p.s_q; ++t) {
      for (int h = 0; h < p.h_q; ++h) {
        const int64_t src = ((int64_t{i} * p.s_q + t) * p.h_q + h) * mlakit::kDv * out_elem;
        const int64_t dst = (i * out_b + t * out_s + h * out_h) * out_elem;
        ASSERT_EQ(std::memcmp(&out.bytes[dst], &dense.out[src], mlakit::kDv * out_elem), 0)
            << "row (" << i << ", " << t << ", " << h << ")";
        for (size_t k = 0; k < mlakit::kDv * out_elem; ++k) row_byte[dst + k] = true;
      }
    }
  }
  for (size_t k = 0; k < out.bytes.size(); ++k) {
    if (!row_byte[k]) ASSERT_EQ(out.bytes[k], sentinel) << "byte " << k << " outside out's rows";
  }
  EXPECT_EQ(std::memcmp(lse.data(), dense.lse.data(), lse.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Cpu, ViewTest,
                         ::testing::Values(ViewCase{"bf16_padded", DType::kBF16, DType::kBF16,
                                                    KvLayout::kDense, 16, 64, 8, 24, 8, false},
                                           ViewCase{"bf16_head_major", DType::kBF16, DType::kBF16,
                                                    KvLayout::kDense, 64, 0, 0, 0, 0, true},
                                           ViewCase{"fp16_page1", DType::kFP16, DType::kFP16,
                                                    KvLayout::kDense, 1, 8, 64, 8, 0, true},
                                           ViewCase{"fp8_cache", DType::kBF16, DType::kFP8E4M3,
                                                    KvLayout::kDense, 32, 8, 16, 48, 8, false},
                                           ViewCase{"fp8_blockwise", DType::kBF16, DType::kFP8E4M3,
                                                    KvLayout::kFp8Blockwise, 16, 0, 16, 32, 0,
                                                    true}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// Refused strides
// ---------------------------------------------------------------------------------------------

struct Refusal {
  const char* name;
  void (*edit)(RunArgs&);
  StatusCode code;
  const char* starts;    // the message starts with this (the argument's name)
  const char* contains;  // and contains this
};

class ViewRefusalTest : public ::testing::TestWithParam<Refusal> {};

TEST_P(ViewRefusalTest, NamesTheStride) {
  const Refusal& r = GetParam();
  const Problem p{.h_q = 4, .s_q = 2, .page_size = 16, .max_batch = 2, .max_seq_len = 64};
  const HostInputs in =
      mlakit::harness::make_inputs(p, std::vector<int32_t>{20, 40}, {.seed = case_seed()});
  const CpuRun run = run_cpu(in, r.edit);
  EXPECT_EQ(run.status.code(), r.code) << run.status.to_string();
  EXPECT_EQ(run.status.message().rfind(r.starts, 0), 0u) << run.status.message();
  EXPECT_NE(run.status.message().find(r.contains), std::string::npos) << run.status.message();
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, ViewRefusalTest,
    ::testing::Values(
        // 580 bf16 = 1160 bytes: rows would not stay 16-byte aligned.
        Refusal{"misaligned_q", [](RunArgs& a) { a.q_stride_h = 580; },
                StatusCode::kInvalidArgument, "q_stride_h", "given 580"},
        Refusal{"negative_kv", [](RunArgs& a) { a.kv_stride_page = -16 * 576; },
                StatusCode::kInvalidArgument, "kv_stride_page", "given -9216"},
        Refusal{"huge_out", [](RunArgs& a) { a.out_stride_b = int64_t{1} << 41; },
                StatusCode::kInvalidArgument, "out_stride_b", "given 2199023255552"},
        // Heads 256 elements apart: each row of 512 overlaps the next head's.
        Refusal{"overlapping_out", [](RunArgs& a) { a.out_stride_h = 256; },
                StatusCode::kInvalidArgument, "out strides", "[4096, 2048, 256, 1]"},
        // Tokens 768 apart, heads 1024: token 1 of head 0 overlaps head 1's rows.
        Refusal{"interleaved_out",
                [](RunArgs& a) {
                  a.out_stride_h = 1024;
                  a.out_stride_s = 768;
                },
                StatusCode::kInvalidArgument, "out strides", "each stride >= "}),
    [](const auto& info) { return std::string(info.param.name); });

// The overlap check sees a view's extent: out placed in the gap of a padded q is still refused
// because it lies inside q's [first, last] bytes.
TEST(Views, OutInsideAPaddedQIsRefused) {
  const Problem p{.h_q = 2, .page_size = 16, .max_batch = 1, .max_seq_len = 16};
  const HostInputs in =
      mlakit::harness::make_inputs(p, std::vector<int32_t>{10}, {.seed = case_seed()});
  std::vector<uint16_t> q(2 * 2 * 576 + 1024);
  std::vector<float> lse;
  std::unique_ptr<Decoder> decoder;
  ASSERT_TRUE(Decoder::create(p, {.backend = "cpu"}, &decoder).ok());
  RunArgs args = in.args(q.data() + 576, nullptr);  // out in the gap after head 0
  args.q = q.data();
  args.q_stride_h = 2 * 576;
  const Status s = decoder->run(args, nullptr, 0, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("overlap q"), std::string::npos) << s.message();
}

// The C API passes the strides through.
TEST(Views, CApiPassesStrides) {
  const Problem cpp{.h_q = 3, .page_size = 16, .max_batch = 2, .max_seq_len = 64};
  const HostInputs in =
      mlakit::harness::make_inputs(cpp, std::vector<int32_t>{33, 7}, {.seed = case_seed()});
  const CpuRun dense = run_cpu(in);
  ASSERT_TRUE(dense.status.ok());
  const int64_t q_h = 576 + 64;
  Strided q = scatter_rows(in.q.data(), 2, 1, 3, 576, 2, 3 * q_h, 3 * q_h, q_h, 0xff);

  mlakit_problem_t p;
  mlakit_problem_init(&p);
  p.h_q = 3, p.page_size = 16, p.max_batch = 2, p.max_seq_len = 64;
  mlakit_decoder_t* d = nullptr;
  ASSERT_EQ(mlakit_decoder_create(&p, "cpu", &d), 0) << mlakit_last_error();
  std::vector<uint8_t> out(in.out_bytes());
  mlakit_run_args_t a;
  mlakit_run_args_init(&a);
  EXPECT_EQ(a.q_stride_h, 0);
  EXPECT_EQ(a.out_stride_b, 0);
  a.batch = 2;
  a.q = q.data();
  a.q_stride_b = 3 * q_h, a.q_stride_s = 3 * q_h, a.q_stride_h = q_h;
  a.kv_cache = in.kv.data();
  a.num_pages = in.num_pages;
  a.block_table = in.block_table.data();
  a.block_table_stride = in.block_table_stride;
  a.seq_lens = in.seq_lens.data();
  a.out = out.data();
  EXPECT_EQ(mlakit_decoder_run(d, &a, nullptr, 0, nullptr), 0) << mlakit_last_error();
  EXPECT_EQ(out, dense.out);
  a.q_stride_h = 577;
  EXPECT_EQ(mlakit_decoder_run(d, &a, nullptr, 0, nullptr), 1);
  EXPECT_EQ(std::string(mlakit_last_error()).rfind("invalid argument: q_stride_h", 0), 0u)
      << mlakit_last_error();
  mlakit_decoder_destroy(d);
}

// The DeepSeek V4 layout (d_qk 512) with the extra cache: q's rows are d_qk long, so q and out
// views work as for the other layouts; the cache (data rows, then scale rows, then padding in each
// page) takes no view, and kv strides are refused naming both and the layout.
TEST(Views, V4QAndOutViewsAndNoCacheView) {
  const Problem p{.h_q = 3,
                  .s_q = 2,
                  .d_qk = mlakit::kV4Dqk,
                  .page_size = 16,
                  .max_batch = 2,
                  .max_seq_len = 64,
                  .kv_dtype = DType::kFP8E4M3,
                  .kv_layout = KvLayout::kFp8V4,
                  .topk = 24,
                  .extra_topk = 8,
                  .extra_page_size = 4,
                  .return_lse = true};
  const HostInputs in = mlakit::harness::make_inputs(p, std::vector<int32_t>{40, 9},
                                                     {.seed = case_seed(), .topk_lens = true});
  const CpuRun dense = run_cpu(in);
  ASSERT_TRUE(dense.status.ok()) << dense.status.to_string();

  // q head-major with padded rows (d_qk + 64), out with padded rows.
  const int d_qk = mlakit::kV4Dqk;
  const int64_t q_h = p.s_q * (d_qk + 64), q_s = d_qk + 64, q_b = p.h_q * q_h;
  Strided q = scatter_rows(in.q.data(), 2, p.s_q, p.h_q, d_qk, 2, q_b, q_s, q_h, 0xff);
  const int64_t out_h = mlakit::kDv + 32, out_s = p.h_q * out_h, out_b = p.s_q * out_s;
  const uint8_t sentinel = 0x5a;
  Strided out;
  out.bytes.assign((out_b + (p.s_q - 1) * out_s + (p.h_q - 1) * out_h + mlakit::kDv) * 2, sentinel);
  std::vector<float> lse(in.lse_count(), std::numeric_limits<float>::quiet_NaN());
  std::unique_ptr<Decoder> decoder;
  ASSERT_TRUE(Decoder::create(p, {.backend = "cpu"}, &decoder).ok());
  RunArgs args = in.args(out.data(), lse.data());
  args.q = q.data();
  args.q_stride_b = q_b, args.q_stride_s = q_s, args.q_stride_h = q_h;
  args.out_stride_b = out_b, args.out_stride_s = out_s, args.out_stride_h = out_h;
  Status s = decoder->run(args, nullptr, 0, nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int i = 0; i < 2; ++i) {
    for (int t = 0; t < p.s_q; ++t) {
      for (int h = 0; h < p.h_q; ++h) {
        const int64_t src = ((int64_t{i} * p.s_q + t) * p.h_q + h) * mlakit::kDv * 2;
        const int64_t dst = (i * out_b + t * out_s + h * out_h) * 2;
        ASSERT_EQ(std::memcmp(&out.bytes[dst], &dense.out[src], mlakit::kDv * 2), 0)
            << "row (" << i << ", " << t << ", " << h << ")";
      }
    }
  }
  EXPECT_EQ(std::memcmp(lse.data(), dense.lse.data(), lse.size() * sizeof(float)), 0);

  for (const auto& [page, token] : {std::pair<int64_t, int64_t>{16 * 576 + 64, 0}, {0, 640}}) {
    RunArgs a = args;
    a.kv_stride_page = page, a.kv_stride_token = token;
    s = decoder->run(a, nullptr, 0, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_EQ(s.message().rfind("kv_stride_page, kv_stride_token: expected 0, 0 (contiguous) "
                                "with kv_layout fp8_v4",
                                0),
              0u)
        << s.message();
  }
}

// A sparse problem over a dense cache reads its view (padded tokens and pages).
TEST(Views, SparseCacheViewMatchesTheDenseCopy) {
  const Problem p{.h_q = 4, .page_size = 16, .max_batch = 2, .max_seq_len = 64, .topk = 20};
  const HostInputs in =
      mlakit::harness::make_inputs(p, std::vector<int32_t>{50, 17}, {.seed = case_seed()});
  const CpuRun dense = run_cpu(in);
  ASSERT_TRUE(dense.status.ok()) << dense.status.to_string();
  const int64_t kv_token = 576 + 8, kv_page = 16 * kv_token + 32;
  Strided kv = scatter_rows(in.kv.data(), static_cast<int>(in.num_pages), 1, p.page_size, 576, 2,
                            kv_page, 0, kv_token, 0xff);
  const CpuRun view = run_cpu(in, [&](RunArgs& a) {
    a.kv_cache = kv.data();
    a.kv_stride_page = kv_page, a.kv_stride_token = kv_token;
  });
  ASSERT_TRUE(view.status.ok()) << view.status.to_string();
  EXPECT_EQ(view.out, dense.out);
}

}  // namespace
}  // namespace mlakit_test
