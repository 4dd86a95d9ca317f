// Views on the GPU backends (mlakit.h, "Views"). sm90 reads q and the cache through TMA maps of
// equally spaced rows, so q whose rows are padded and a cache whose tokens are padded run there:
// every tactic must match the cpu reference and give the bits of the dense copy. What a backend
// does not read (sm90: padded pages, a strided out, a sparse problem's cache view; sm80: any view)
// is refused at run time with kUnsupported naming the tensor, never computed wrongly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

// `rows` rows of `row_bytes` copied `stride_bytes` apart into a buffer whose gaps hold 0xff (NaN
// in every dtype here), then to the device.
Status upload_rows(const std::vector<uint8_t>& dense, int64_t rows, int64_t row_bytes,
                   int64_t stride_bytes, harness::DeviceBuffer* out) {
  std::vector<uint8_t> host(static_cast<size_t>((rows - 1) * stride_bytes + row_bytes), 0xff);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(&host[r * stride_bytes], &dense[r * row_bytes], row_bytes);
  }
  *out = harness::DeviceBuffer(host.size());
  if (out->get() == nullptr) return Status(StatusCode::kCudaError, "cudaMalloc failed");
  if (cudaMemcpy(out->get(), host.data(), host.size(), cudaMemcpyHostToDevice) != cudaSuccess) {
    return Status(StatusCode::kCudaError, "cudaMemcpy failed");
  }
  return Status::Ok();
}

struct ViewCase {
  Case c;
  int q_pad;   // elements added between q rows
  int kv_pad;  // elements added between cached tokens
};

TEST(Sm90Views, PaddedQRowsAndCacheTokensMatchTheDenseRun) {
  MLAKIT_SKIP_WITHOUT_SM90();
  // {dtype, page size, h_q, s_q, lengths, sinks, lse, tactic (each below), batch, len, causal,
  //  fp8_kv}
  const ViewCase cases[] = {
      {{DType::kBF16, 64, 128, 1, Lens::kVariable, true, true}, 64, 64},
      {{DType::kFP16, 32, 16, 2, Lens::kSkewed, false, true}, 8, 8},
      {{DType::kBF16, 128, 8, 2, Lens::kFixed, false, false}, 0, 64},
      {{DType::kBF16, 64, 16, 1, Lens::kVariable, false, true, 0, 0, -1, true, true}, 64, 16},
  };
  uint64_t seed = 500;
  for (const ViewCase& v : cases) {
    const std::vector<int32_t> lens = case_lengths(v.c, seed);
    const Problem p = case_problem(v.c, lens);
    const harness::HostInputs in = harness::make_inputs(p, lens, {.seed = seed++});
    Output ref;
    MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
    harness::DeviceInputs device;
    MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));

    const int64_t q_elem = dtype_bytes(p.q_dtype), kv_elem = dtype_bytes(p.kv_dtype);
    const int64_t q_rows = int64_t{in.batch} * p.s_q * p.h_q, kv_rows = in.num_pages * p.page_size;
    const int64_t q_h = kDqk + v.q_pad, kv_token = kDqk + v.kv_pad;
    harness::DeviceBuffer q_view, kv_view;
    MLAKIT_ASSERT_OK(upload_rows(in.q, q_rows, kDqk * q_elem, q_h * q_elem, &q_view));
    MLAKIT_ASSERT_OK(upload_rows(in.kv, kv_rows, kDqk * kv_elem, kv_token * kv_elem, &kv_view));
    RunArgs args = device.args;
    args.q = q_view.get();
    args.q_stride_h = q_h, args.q_stride_s = p.h_q * q_h, args.q_stride_b = p.s_q * p.h_q * q_h;
    args.kv_cache = kv_view.get();
    args.kv_stride_token = kv_token, args.kv_stride_page = p.page_size * kv_token;

    for (const int tactic : tactic_ids("sm90", p)) {
      const std::string name = case_name(v.c) + " tactic " + std::to_string(tactic);
      SCOPED_TRACE(name);
      std::unique_ptr<Decoder> decoder;
      MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = "sm90", .tactic = tactic}, &decoder));
      harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
      StreamHolder s;
      Output dense, viewed;
      MLAKIT_ASSERT_OK(run_device(*decoder, in, device, workspace.get(), s.stream, &dense));
      MLAKIT_ASSERT_OK(run_device(
          [&](cudaStream_t stream) {
            return decoder->run(args, workspace.get(), decoder->workspace_bytes(), stream);
          },
          in, device, s.stream, &viewed));
      const ::testing::AssertionResult result = matches_reference(in, viewed, ref);
      EXPECT_TRUE(result);
      std::printf("  %-64s %s\n", name.c_str(), result.message());
      EXPECT_EQ(viewed.out, dense.out) << "the view's output differs from the dense run's";
      EXPECT_EQ(viewed.lse, dense.lse);
    }
  }
}

// A run refused with kUnsupported whose message starts with `starts`.
void expect_unsupported(const char* backend, const Problem& p, void (*edit)(RunArgs&),
                        const std::string& starts) {
  const std::vector<int32_t> lens = {100, 7};
  const harness::HostInputs in = harness::make_inputs(p, lens, {.seed = 9});
  harness::DeviceInputs device;
  MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
  std::unique_ptr<Decoder> decoder;
  MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend}, &decoder));
  harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
  // The strides are refused before anything is read, but validation's overlap check sees each
  // view's extent, which can reach past the dense inputs' buffers into their neighbours: q, the
  // cache and out get 4 MiB each of one allocation, more than any extent here.
  constexpr size_t kRegion = size_t{4} << 20;
  harness::DeviceBuffer room(3 * kRegion);
  RunArgs args = device.args;
  args.q = room.as<uint8_t>();
  args.kv_cache = room.as<uint8_t>() + kRegion;
  args.out = room.as<uint8_t>() + 2 * kRegion;
  edit(args);
  const Status st = decoder->run(args, workspace.get(), decoder->workspace_bytes(), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.to_string();
  EXPECT_EQ(st.message().rfind(starts, 0), 0u) << st.message();
}

TEST(Sm90Views, PaddedPagesAndStridedOutAreRefused) {
  MLAKIT_SKIP_WITHOUT_SM90();
  const Problem p{.h_q = 16, .page_size = 64, .max_batch = 2, .max_seq_len = 128};
  // Pages further apart than their tokens (vLLM's padded pages): not one row stride.
  expect_unsupported(
      "sm90", p, [](RunArgs& a) { a.kv_stride_page = 64 * 576 + 64; },
      "kv_cache: backend sm90 reads rows equally spaced");
  expect_unsupported(
      "sm90", p, [](RunArgs& a) { a.q_stride_b = 2 * 16 * 576; },
      "q: backend sm90 reads rows equally spaced");
  expect_unsupported(
      "sm90", p,
      [](RunArgs& a) {
        a.out_stride_h = 1024;  // heads padded to 1024: one row stride, but not contiguous
        a.out_stride_s = a.out_stride_b = 16 * 1024;
      },
      "out: backend sm90 reads a contiguous tensor");
  // Sparse: the gather reads each listed token at slot * its row bytes, so even tokens equally
  // spaced (one row stride, which a dense problem takes) are refused, naming the stride.
  Problem sparse = p;
  sparse.topk = 64;
  expect_unsupported(
      "sm90", sparse,
      [](RunArgs& a) {
        a.kv_stride_token = 640;
        a.kv_stride_page = 64 * 640;
      },
      "kv_stride_token, kv_stride_page: backend sm90 reads the cache of a sparse problem "
      "contiguous");
  // q goes through the dense checks: its map reads the rows of every (request, token) alike.
  expect_unsupported(
      "sm90", sparse, [](RunArgs& a) { a.q_stride_b = 2 * 16 * 576; },
      "q: backend sm90 reads rows equally spaced");
}

TEST(Sm80Views, AnyViewIsRefused) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const Problem p{.h_q = 16, .page_size = 64, .max_batch = 2, .max_seq_len = 128};
  expect_unsupported(
      "sm80", p,
      [](RunArgs& a) {
        a.q_stride_h = 640;
        a.q_stride_s = 16 * 640;
        a.q_stride_b = 16 * 640;
      },
      "q: backend sm80 reads a contiguous tensor");
  expect_unsupported(
      "sm80", p, [](RunArgs& a) { a.kv_stride_token = 640; },
      "kv_cache: backend sm80 reads a contiguous tensor");
  expect_unsupported(
      "sm80", p, [](RunArgs& a) { a.out_stride_b = 16 * 512 + 64; },
      "out: backend sm80 reads a contiguous tensor");
}

}  // namespace
}  // namespace mlakit::testing
