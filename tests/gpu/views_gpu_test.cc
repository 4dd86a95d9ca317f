// Views and the base-2 LSE on the GPU backends (mlakit.h, "Views" and "LSE"). Every backend and
// tactic takes q, out and the cache as views: q with padded heads (sm90: one row stride, read by
// its TMA map), head-major or with gaps between requests (sm90: packed into the workspace first);
// the cache with padded tokens (sm90: a 2-D map) or padded pages, vLLM's layout (sm90: a 3-D
// map); out with padded, head-major or gapped rows, written by the epilogues, the combine kernel
// and sm90's cluster merge. Each run must match the cpu reference, give the bits of the dense run
// of the same decoder, and leave every byte of out between its rows as it was (NaN bits). Sparse
// problems read cache views through the gathers (sm90) or the dense loads (sm80). With
// Problem::lse_base2 the LSE is the natural one times log2(e) on both backends, split or not,
// with the same out. Strides a TMA map cannot take are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

// How each tensor is laid out, in elements added to the dense strides (multiples of 16 bytes).
struct Layout {
  const char* name;
  int q_pad = 0;           // between heads (rows)
  int q_gap = 0;           // between requests
  bool q_permute = false;  // q stored head-major: [b, h_q, s_q, d] seen as [b, s_q, h_q, d]
  int kv_token_pad = 0;
  int kv_page_pad = 0;         // vLLM's padded pages
  int kv_page_pad_tokens = 0;  // pages padded by whole tokens (FlashMLA's sparse test: one)
  int out_pad = 0;
  int out_gap = 0;
  bool out_permute = false;
};

// The strides of a [b, s_q, h_q, row] tensor laid out with `pad`, `gap` and `permute`.
struct Strides {
  int64_t b, s, h;
};
Strides strides_of(int s_q, int h_q, int row, int pad, int gap, bool permute) {
  const int64_t r = row + pad;
  Strides st{};
  st.h = permute ? s_q * r : r;
  st.s = permute ? r : h_q * r;
  st.b = int64_t{s_q} * h_q * r + gap;
  return st;
}

// The elements a [n0, n1, n2, row] view with strides (a, b, c) spans.
int64_t extent(int64_t n0, int64_t n1, int64_t n2, int64_t row, int64_t a, int64_t b, int64_t c) {
  return (n0 - 1) * a + (n1 - 1) * b + (n2 - 1) * c + row;
}

// The rows of a dense [n0, n1, n2, row] tensor (elements of `elem` bytes) scattered to offsets
// i * a + j * b + k * c of a buffer whose other bytes are 0xff (NaN bits in every dtype here).
std::vector<uint8_t> scatter(const uint8_t* dense, int n0, int n1, int n2, int row, size_t elem,
                             int64_t a, int64_t b, int64_t c) {
  std::vector<uint8_t> out(static_cast<size_t>(extent(n0, n1, n2, row, a, b, c)) * elem, 0xff);
  for (int i = 0; i < n0; ++i) {
    for (int j = 0; j < n1; ++j) {
      for (int k = 0; k < n2; ++k) {
        const int64_t src = ((int64_t{i} * n1 + j) * n2 + k) * row;
        std::memcpy(&out[(i * a + j * b + k * c) * elem], dense + src * elem, row * elem);
      }
    }
  }
  return out;
}

Status upload(const std::vector<uint8_t>& host, harness::DeviceBuffer* buffer) {
  *buffer = harness::DeviceBuffer(std::max<size_t>(host.size(), 16));
  if (buffer->get() == nullptr) return Status(StatusCode::kCudaError, "cudaMalloc failed");
  if (cudaMemcpy(buffer->get(), host.data(), host.size(), cudaMemcpyHostToDevice) != cudaSuccess) {
    return Status(StatusCode::kCudaError, "cudaMemcpy failed");
  }
  return Status::Ok();
}

// The inputs of one case as views on the device: q, the cache and out laid out by `l`.
struct Viewed {
  harness::DeviceBuffer q, kv, out;
  std::vector<uint8_t> out_host;  // out's bytes before the run (rows and gaps 0xff)
  Strides q_st{}, out_st{};
  int64_t kv_token = 0, kv_page = 0;
  RunArgs args;
};

Status make_viewed(const harness::HostInputs& in, const harness::DeviceInputs& device,
                   const Layout& l, Viewed* v) {
  const Problem& p = in.problem;
  const int b = in.batch;
  const size_t q_elem = dtype_bytes(p.q_dtype), out_elem = dtype_bytes(p.out_dtype);
  v->q_st = strides_of(p.s_q, p.h_q, p.d_qk, l.q_pad, l.q_gap, l.q_permute);
  MLAKIT_RETURN_IF_ERROR(
      upload(scatter(in.q.data(), b, p.s_q, p.h_q, p.d_qk, q_elem, v->q_st.b, v->q_st.s, v->q_st.h),
             &v->q));
  const bool blockwise = p.kv_layout == KvLayout::kFp8Blockwise;
  const size_t kv_elem = blockwise ? 1 : dtype_bytes(p.kv_dtype);
  const int token = blockwise ? kBlockwiseBytes : kDqk;
  v->kv_token = token + l.kv_token_pad;
  v->kv_page = (p.page_size + l.kv_page_pad_tokens) * v->kv_token + l.kv_page_pad;
  MLAKIT_RETURN_IF_ERROR(upload(scatter(in.kv.data(), static_cast<int>(in.num_pages), 1,
                                        p.page_size, token, kv_elem, v->kv_page, 0, v->kv_token),
                                &v->kv));
  v->out_st = strides_of(p.s_q, p.h_q, kDv, l.out_pad, l.out_gap, l.out_permute);
  v->out_host.assign(
      static_cast<size_t>(extent(b, p.s_q, p.h_q, kDv, v->out_st.b, v->out_st.s, v->out_st.h)) *
          out_elem,
      0xff);
  MLAKIT_RETURN_IF_ERROR(upload(v->out_host, &v->out));
  RunArgs& a = v->args;
  a = device.args;
  a.q = v->q.get();
  a.kv_cache = v->kv.get();
  a.out = v->out.get();
  a.q_stride_b = v->q_st.b, a.q_stride_s = v->q_st.s, a.q_stride_h = v->q_st.h;
  a.kv_stride_token = v->kv_token, a.kv_stride_page = v->kv_page;
  a.out_stride_b = v->out_st.b, a.out_stride_s = v->out_st.s, a.out_stride_h = v->out_st.h;
  // var_q: rows packed by query token, r = cu[i] + t at r * stride_s (in the layouts without gaps
  // or head-major order, the [b, s_q] rows flattened); no request stride.
  if (p.var_q) {
    if (l.q_gap != 0 || l.out_gap != 0 || l.q_permute || l.out_permute) {
      return invalid_argument("layout", "no gaps or head-major order with var_q", l.name);
    }
    a.q_stride_b = a.out_stride_b = 0;
  }
  return Status::Ok();
}

// Runs `decoder` on the views (out reset to 0xff first), downloads out's rows into `got` (dense)
// and the lse; fails when a byte between out's rows changed.
::testing::AssertionResult run_viewed(const Decoder& decoder, const harness::HostInputs& in,
                                      const harness::DeviceInputs& device, Viewed& v,
                                      void* workspace, cudaStream_t stream, Output* got) {
  const Problem& p = in.problem;
  if (cudaMemcpy(v.out.get(), v.out_host.data(), v.out_host.size(), cudaMemcpyHostToDevice) !=
      cudaSuccess) {
    return ::testing::AssertionFailure() << "cudaMemcpy failed";
  }
  const Status poisoned = device.poison(in);  // the dense out (unused) and lse: NaN
  if (!poisoned.ok() || cudaDeviceSynchronize() != cudaSuccess) {
    return ::testing::AssertionFailure() << "poisoning failed";
  }
  const Status st = decoder.run(v.args, workspace, decoder.workspace_bytes(), stream);
  if (!st.ok()) return ::testing::AssertionFailure() << st.to_string();
  const cudaError_t err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return ::testing::AssertionFailure() << cudaGetErrorString(err);
  std::vector<uint8_t> bytes(v.out_host.size());
  std::vector<float> lse(p.return_lse ? in.lse_count() : 0);
  if (cudaMemcpy(bytes.data(), v.out.get(), bytes.size(), cudaMemcpyDeviceToHost) != cudaSuccess ||
      (p.return_lse && cudaMemcpy(lse.data(), device.args.lse, lse.size() * sizeof(float),
                                  cudaMemcpyDeviceToHost) != cudaSuccess)) {
    return ::testing::AssertionFailure() << "download failed";
  }
  const size_t elem = dtype_bytes(p.out_dtype);
  std::vector<bool> row_byte(bytes.size(), false);
  got->out.assign(in.out_bytes() / 2, 0);
  got->lse = lse;
  for (int i = 0; i < in.batch; ++i) {
    for (int t = 0; t < p.s_q; ++t) {
      for (int h = 0; h < p.h_q; ++h) {
        const int64_t dense = ((int64_t{i} * p.s_q + t) * p.h_q + h) * kDv;
        const int64_t at = (i * v.out_st.b + t * v.out_st.s + h * v.out_st.h) * elem;
        std::memcpy(&got->out[dense], &bytes[at], kDv * elem);
        std::fill_n(row_byte.begin() + at, kDv * elem, true);
      }
    }
  }
  for (size_t k = 0; k < bytes.size(); ++k) {
    if (!row_byte[k] && bytes[k] != 0xff) {
      return ::testing::AssertionFailure() << "byte " << k << " between out's rows was written";
    }
  }
  return ::testing::AssertionSuccess();
}

// One problem on `backend`, every tactic, each layout: the reference, the dense run's bits,
// out's gaps untouched. Returns how many runs it checked (0 when the backend refuses p).
int check_views(const char* backend, const Problem& p, const std::vector<int32_t>& lens,
                const std::vector<Layout>& layouts, uint64_t seed,
                const harness::WorkloadOptions& options = {}) {
  if (!can_run(backend, p).ok()) {
    std::printf("  %s skips %s: %s\n", backend, describe(p).c_str(),
                can_run(backend, p).message().c_str());
    return 0;
  }
  harness::WorkloadOptions o = options;
  o.seed = seed;
  const harness::HostInputs in = harness::make_inputs(p, lens, o);
  Output ref;
  EXPECT_TRUE(cpu_reference(in, &ref).ok());
  harness::DeviceInputs device;
  EXPECT_TRUE(harness::DeviceInputs::upload(in, &device).ok());
  int runs = 0;
  for (const Layout& l : layouts) {
    Viewed v;
    const Status made = make_viewed(in, device, l, &v);
    EXPECT_TRUE(made.ok()) << made.to_string();
    if (!made.ok()) continue;
    for (const int tactic : tactic_ids(backend, p)) {
      const std::string name = str_cat(backend, " ", describe(p), " ", l.name, " tactic ", tactic);
      SCOPED_TRACE(name);
      std::unique_ptr<Decoder> decoder;
      const Status created = Decoder::create(p, {.backend = backend, .tactic = tactic}, &decoder);
      EXPECT_TRUE(created.ok()) << created.to_string();
      if (!created.ok()) continue;
      harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
      StreamHolder s;
      Output dense, viewed;
      const Status ran = run_device(*decoder, in, device, workspace.get(), s.stream, &dense);
      EXPECT_TRUE(ran.ok()) << ran.to_string();
      EXPECT_TRUE(run_viewed(*decoder, in, device, v, workspace.get(), s.stream, &viewed));
      const ::testing::AssertionResult result = matches_reference(in, viewed, ref);
      EXPECT_TRUE(result);
      std::printf("  %-96s %s\n", name.c_str(), result.message());
      EXPECT_TRUE(bitwise_equal(viewed, dense)) << "the views' output differs from the dense run's";
      ++runs;
    }
  }
  return runs;
}

Problem dense_problem(DType dtype, int h_q, int s_q, int page_size, int max_batch,
                      int max_seq_len) {
  Problem p;
  p.h_q = h_q;
  p.s_q = s_q;
  p.page_size = page_size;
  p.max_batch = max_batch;
  p.max_seq_len = max_seq_len;
  p.q_dtype = p.kv_dtype = p.out_dtype = dtype;
  p.has_sinks = true;
  p.return_lse = true;
  return p;
}

// The layouts every dense case runs.
const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      // q: one row stride (sm90 reads it through its map); cache: padded pages (3-D map); out:
      // padded rows and a gap between requests.
      {.name = "q-padded-heads kv-padded-pages out-gapped",
       .q_pad = 64,
       .kv_page_pad = 64,
       .out_pad = 32,
       .out_gap = 64},
      // q head-major with a gap (sm90 packs it); cache tokens and pages padded; out head-major.
      {.name = "q-head-major kv-padded-tokens-and-pages out-head-major",
       .q_pad = 16,
       .q_gap = 128,
       .q_permute = true,
       .kv_token_pad = 16,
       .kv_page_pad = 256,
       .out_permute = true},
      // Only the cache's tokens padded (one row stride: sm90's 2-D map), q gapped.
      {.name = "q-gapped kv-padded-tokens out-padded",
       .q_gap = 576,
       .kv_token_pad = 64,
       .out_pad = 512}};
  return all;
}

// Lengths with the edges: 0, 1, not a multiple of the page, one long request (split-KV).
std::vector<int32_t> edge_lens(int long_len) { return {0, 1, 77, long_len, 130, 64}; }

TEST(GpuViews, EveryBackendAndTacticTakesQOutAndCacheViews) {
  MLAKIT_SKIP_WITHOUT_GPU();
  struct Dense {
    Problem p;
    int long_len;
  };
  std::vector<Dense> cases;
  // The wide tile (h_q 128), bf16, page 64.
  cases.push_back({dense_problem(DType::kBF16, 128, 1, 64, 6, 2000), 2000});
  // MTP, fp16, page 32 (two pages a block on sm90), rows across tokens.
  cases.push_back({dense_problem(DType::kFP16, 16, 2, 32, 6, 1500), 1500});
  // The narrow tile (8 rows), page 128.
  cases.push_back({dense_problem(DType::kBF16, 8, 1, 128, 6, 3000), 3000});
  // An odd head count across tiles (h_q 20, s_q 3: 60 rows).
  cases.push_back({dense_problem(DType::kBF16, 20, 3, 64, 6, 900), 900});
  // sm80 only: page 16 and page 1.
  cases.push_back({dense_problem(DType::kBF16, 16, 1, 16, 6, 700), 700});
  cases.push_back({dense_problem(DType::kFP16, 4, 2, 1, 6, 300), 300});
  {
    // An e4m3 cache with a bf16 q (sm90: the narrow fp8 tile), and with an e4m3 q (the wide
    // fp8 tile) writing fp16.
    Problem p = dense_problem(DType::kBF16, 32, 1, 64, 6, 1200);
    p.kv_dtype = DType::kFP8E4M3;
    cases.push_back({p, 1200});
    p = dense_problem(DType::kFP16, 64, 1, 64, 6, 1200);
    p.q_dtype = p.kv_dtype = DType::kFP8E4M3;
    cases.push_back({p, 1200});
    // An e4m3 cache with a bf16 q past 32 rows: sm90 also splits q into two e4m3 parts (the split
    // kernel reads q's view; the narrow tile's consumers split what its TMA map read).
    p = dense_problem(DType::kBF16, 64, 2, 64, 6, 1000);
    p.kv_dtype = DType::kFP8E4M3;
    cases.push_back({p, 1000});
  }
  uint64_t seed = 3500;
  for (const char* backend : {"sm80", "sm90"}) {
    int runs = 0;
    for (const Dense& c : cases) {
      runs += check_views(backend, c.p, edge_lens(c.long_len), layouts(), seed++);
    }
    if (std::string(backend) == "sm80" || current_device().sm_major == 9) {
      EXPECT_GT(runs, 0) << backend << " ran no case";
    }
  }
}

// Variable query lengths: the packed rows of q and out with padded heads and rows (q through sm90's
// packing, out through every epilogue), with the cache padded too; nothing written between or
// past the packed rows. Dense, sparse and an fp8 cache.
TEST(GpuViews, VarQTakesQOutAndCacheViews) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const std::vector<Layout> var_q_layouts = {
      {.name = "q-padded-heads kv-padded-pages out-padded",
       .q_pad = 64,
       .kv_page_pad = 64,
       .out_pad = 32},
      {.name = "kv-padded-tokens out-padded", .kv_token_pad = 64, .out_pad = 512}};
  std::vector<Problem> problems;
  problems.push_back(dense_problem(DType::kBF16, 128, 4, 64, 6, 2000));
  problems.push_back(dense_problem(DType::kFP16, 16, 16, 32, 6, 1500));
  {
    Problem p = dense_problem(DType::kBF16, 16, 3, 64, 6, 1200);
    p.kv_dtype = DType::kFP8E4M3;
    problems.push_back(p);
    Problem sparse = dense_problem(DType::kBF16, 16, 3, 64, 6, 2000);
    sparse.topk = 96;
    problems.push_back(sparse);
  }
  uint64_t seed = 3700;
  for (const char* backend : {"sm80", "sm90"}) {
    int runs = 0;
    for (Problem p : problems) {
      p.var_q = true;
      const std::vector<Layout> layouts =
          p.sparse() && std::string(backend) == "sm90"
              ? std::vector<Layout>{{.name = "q-padded-heads kv-padded-tokens out-padded",
                                     .q_pad = 64,
                                     .kv_token_pad = 64,
                                     .out_pad = 32}}
              : var_q_layouts;
      runs += check_views(backend, p, edge_lens(p.max_seq_len), layouts, seed++,
                          {.topk_lens = p.sparse(), .q_lens = {0, 1, p.s_q, 2, 0, p.s_q - 1}});
    }
    if (std::string(backend) == "sm80" || current_device().sm_major == 9) {
      EXPECT_GT(runs, 0) << backend << " ran no case";
    }
  }
}

// Sparse problems: the cache read by the gathers (sm90: 16-bit and V3.2 blockwise caches, padded
// tokens, pages padded by whole tokens; other padded pages refused by name) or by the dense loads
// over the slots (sm80: padded tokens and pages, the V3.2 cache included); q and out views too.
TEST(GpuViews, SparseProblemsTakeCacheViews) {
  MLAKIT_SKIP_WITHOUT_GPU();
  std::vector<Problem> problems;
  for (const bool blockwise : {false, true}) {
    for (const int page_size : {64, 48}) {  // 48: a page size that is not a power of two
      Problem p = dense_problem(DType::kBF16, 16, 2, page_size, 3, 0);
      p.topk = 96;
      p.max_seq_len = static_cast<int32_t>(harness::longest_seq_len(900, true));
      if (blockwise) {
        p.kv_dtype = DType::kFP8E4M3;
        p.kv_layout = KvLayout::kFp8Blockwise;
      }
      problems.push_back(p);
    }
  }
  {
    Problem p = dense_problem(DType::kFP16, 128, 1, 16, 3, 0);  // the wide tile
    p.topk = 200;
    p.max_seq_len = static_cast<int32_t>(harness::longest_seq_len(900, true));
    problems.push_back(p);
  }
  // Blockwise strides count bytes: multiples of 16.
  const std::vector<Layout> sparse_layouts = {
      {.name = "q-head-major kv-padded-pages out-padded",
       .q_permute = true,
       .kv_page_pad = 64,
       .out_pad = 64},
      {.name = "q-padded kv-padded-tokens-and-pages out-head-major",
       .q_pad = 64,
       .kv_token_pad = 48,
       .kv_page_pad = 32,
       .out_permute = true}};
  const std::vector<Layout> sm90_layouts = {
      {.name = "q-head-major kv-padded-tokens out-padded",
       .q_permute = true,
       .kv_token_pad = 48,
       .out_pad = 64},
      {.name = "q-padded out-head-major", .q_pad = 64, .out_permute = true},
      {.name = "kv-pages-padded-by-a-token out-padded",  // FlashMLA's sparse test
       .kv_page_pad_tokens = 1,
       .out_pad = 64},
      {.name = "q-head-major kv-padded-tokens-and-pages-by-3-tokens",
       .q_permute = true,
       .kv_token_pad = 48,
       .kv_page_pad_tokens = 3}};
  uint64_t seed = 3600;
  for (const char* backend : {"sm80", "sm90"}) {
    const bool sm90 = std::string(backend) == "sm90";
    int runs = 0;
    for (const Problem& p : problems) {
      const std::vector<int32_t> lens = harness::make_seq_lens(p.max_batch, 900, true, seed);
      runs += check_views(backend, p, lens, sm90 ? sm90_layouts : sparse_layouts, seed++,
                          {.topk_lens = true});
      if (!sm90 || !can_run(backend, p).ok()) continue;
      // sm90 refuses by name, at run time, padded pages that are not a whole number of tokens.
      const harness::HostInputs in = harness::make_inputs(p, lens, {.seed = seed});
      harness::DeviceInputs device;
      MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
      Viewed v;
      MLAKIT_ASSERT_OK(make_viewed(in, device, sparse_layouts[0], &v));
      std::unique_ptr<Decoder> decoder;
      MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend}, &decoder));
      harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
      const Status st = decoder->run(v.args, workspace.get(), decoder->workspace_bytes(), nullptr);
      EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.to_string();
      EXPECT_NE(st.message().find("kv_stride_page"), std::string::npos) << st.message();
    }
    if (std::string(backend) == "sm80" || current_device().sm_major == 9) {
      EXPECT_GT(runs, 0) << backend << " ran no case";
    }
  }
}

// Problem::lse_base2 on both GPU backends, every tactic, split-KV (one long request of a small
// batch) and not (a batch of short requests): the base-2 reference, and the natural run's out
// bits and LSE times log2(e) (-inf staying -inf).
TEST(GpuLse, Base2OnEveryBackendAndTactic) {
  MLAKIT_SKIP_WITHOUT_GPU();
  struct LseCase {
    Problem p;
    std::vector<int32_t> lens;
  };
  std::vector<LseCase> cases;
  cases.push_back({dense_problem(DType::kBF16, 128, 1, 64, 2, 8192), {8192, 0}});  // split
  cases.push_back({dense_problem(DType::kBF16, 16, 2, 64, 2, 8192), {8192, 1}});   // split
  cases.push_back({dense_problem(DType::kFP16, 64, 1, 32, 32, 96), {}});           // not split
  for (int i = 0; i < 32; ++i) cases.back().lens.push_back(i % 7 == 0 ? 0 : 20 + 2 * i);
  {
    Problem p = dense_problem(DType::kBF16, 16, 1, 64, 2, 4096);
    p.kv_dtype = DType::kFP8E4M3;  // sm90's narrow fp8 tile
    cases.push_back({p, {4096, 3}});
  }
  {
    Problem p = dense_problem(DType::kBF16, 16, 1, 64, 2, 0);  // sparse, sm90's gather
    p.topk = 2048;
    p.max_seq_len = 6000;
    cases.push_back({p, {6000, 100}});
  }
  constexpr float kLog2eF = 1.4426950408889634f;
  uint64_t seed = 3700;
  for (const char* backend : {"sm80", "sm90"}) {
    int runs = 0;
    for (const LseCase& c : cases) {
      Problem natural = c.p, base2 = c.p;
      base2.lse_base2 = true;
      if (!can_run(backend, base2).ok()) continue;
      const harness::HostInputs in_n = harness::make_inputs(natural, c.lens, {.seed = seed++});
      harness::HostInputs in_2 = in_n;
      in_2.problem = base2;
      Output ref;
      MLAKIT_ASSERT_OK(cpu_reference(in_2, &ref));
      harness::DeviceInputs device;
      MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in_n, &device));
      for (const int tactic : tactic_ids(backend, natural)) {
        const std::string name = str_cat(backend, " ", describe(base2), " tactic ", tactic);
        SCOPED_TRACE(name);
        std::unique_ptr<Decoder> dn, d2;
        MLAKIT_ASSERT_OK(Decoder::create(natural, {.backend = backend, .tactic = tactic}, &dn));
        MLAKIT_ASSERT_OK(Decoder::create(base2, {.backend = backend, .tactic = tactic}, &d2));
        ASSERT_EQ(dn->workspace_bytes(), d2->workspace_bytes());
        harness::DeviceBuffer workspace(std::max<size_t>(d2->workspace_bytes(), 256));
        StreamHolder s;
        Output got_n, got_2;
        MLAKIT_ASSERT_OK(run_device(*dn, in_n, device, workspace.get(), s.stream, &got_n));
        MLAKIT_ASSERT_OK(run_device(*d2, in_2, device, workspace.get(), s.stream, &got_2));
        const ::testing::AssertionResult result = matches_reference(in_2, got_2, ref);
        EXPECT_TRUE(result);
        std::printf("  %-80s %s\n", name.c_str(), result.message());
        EXPECT_EQ(got_2.out, got_n.out) << "the base only changes the stored LSE";
        ASSERT_EQ(got_2.lse.size(), got_n.lse.size());
        int64_t mismatches = 0;
        for (size_t k = 0; k < got_n.lse.size(); ++k) {
          const float n = got_n.lse[k], b2 = got_2.lse[k];
          const bool ok =
              n == -std::numeric_limits<float>::infinity() ? b2 == n : b2 == n * kLog2eF;
          mismatches += ok ? 0 : 1;
        }
        EXPECT_EQ(mismatches, 0) << "rows whose base-2 LSE is not the natural one times log2(e)";
        ++runs;
      }
    }
    if (std::string(backend) == "sm80" || current_device().sm_major == 9) {
      EXPECT_GT(runs, 0) << backend << " ran no case";
    }
  }
}

// What no view can do: strides that break 16-byte rows are refused by validation, naming the
// stride, on every backend; sm90's TMA maps take strides below 2^40 bytes, and a larger one is
// refused naming it (num_pages 1: the view's extent stays small).
TEST(GpuViews, StridesTheKernelsCannotTakeAreRefusedByName) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const Problem p = dense_problem(DType::kBF16, 16, 1, 64, 2, 128);
  const harness::HostInputs in = harness::make_inputs(p, std::vector<int32_t>{100, 7}, {.seed = 9});
  harness::DeviceInputs device;
  MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
  for (const char* backend : {"sm80", "sm90"}) {
    if (!can_run(backend, p).ok()) continue;
    std::unique_ptr<Decoder> decoder;
    MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend}, &decoder));
    harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
    RunArgs a = device.args;
    a.q_stride_h = 580;  // 1160 bytes: rows not 16-byte aligned
    Status st = decoder->run(a, workspace.get(), decoder->workspace_bytes(), nullptr);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_EQ(st.message().rfind("q_stride_h", 0), 0u) << st.message();
    a = device.args;
    a.out = static_cast<uint8_t*>(a.out) + 8;  // out itself misaligned
    st = decoder->run(a, workspace.get(), decoder->workspace_bytes(), nullptr);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_EQ(st.message().rfind("out", 0), 0u) << st.message();
    if (std::string(backend) == "sm90") {
      a = device.args;
      a.num_pages = 1;
      a.kv_stride_page = int64_t{1} << 39;  // 2^40 bytes of bf16
      st = decoder->run(a, workspace.get(), decoder->workspace_bytes(), nullptr);
      EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.to_string();
      EXPECT_EQ(st.message().rfind("kv_stride_page: backend sm90 reads it by a TMA map", 0), 0u)
          << st.message();
    }
  }
}

}  // namespace
}  // namespace mlakit::testing
