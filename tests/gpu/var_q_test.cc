// Variable query lengths (Problem::var_q) on the GPU backends against the cpu reference, under
// every tactic each backend offers: h_q 1..128, s_q up to 16, q_len 0 (first, last, every
// request), mixed lengths with seq_len 0 and below q_len, batch 1 split across CTAs, 600 requests
// (the plan kernel's path), non-causal, sinks, lse, an fp8 cache with a 16-bit and an e4m3 q,
// sparse top-k, context parallelism. Outputs are poisoned before each run and every element past
// the packed rows must still be NaN (harness::compare). A captured graph replayed with new
// cu_seqlens_q (and q) gives bitwise the uncaptured runs' results.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

struct VarCase {
  std::string name;
  Problem p;                    // var_q set by the test; max_batch and max_seq_len from lens
  std::vector<int32_t> lens;    // seq_lens
  std::vector<int32_t> q_lens;  // empty: drawn from 1..s_q
  bool topk_lens = false;       // sparse: per-request top-k lengths
};

Problem shape(int h_q, int s_q, int page_size, DType dtype = DType::kBF16) {
  Problem p;
  p.h_q = h_q;
  p.s_q = s_q;
  p.page_size = page_size;
  p.q_dtype = p.kv_dtype = p.out_dtype = dtype;
  p.return_lse = true;
  return p;
}

std::vector<VarCase> var_cases() {
  std::vector<VarCase> cases;
  const auto add = [&](std::string name, Problem p, std::vector<int32_t> lens,
                       std::vector<int32_t> q_lens, bool topk_lens = false) {
    cases.push_back({std::move(name), p, std::move(lens), std::move(q_lens), topk_lens});
  };
  {
    Problem p = shape(16, 4, 64);
    p.has_sinks = true;
    add("h16_sq4_mixed", p, {0, 700, 3, 1, 260, 90}, {0, 4, 3, 1, 2, 0});
  }
  add("h64_sq16_random", shape(64, 16, 32, DType::kFP16), {500, 17, 1, 1200, 60, 0}, {});
  {
    Problem p = shape(128, 8, 64);
    p.has_sinks = true;
    add("h128_sq8_mixed", p, {300, 1000, 50, 4001}, {8, 1, 0, 5});
  }
  add("h128_sq16", shape(128, 16, 128), {2000, 100}, {16, 3});
  add("h1_sq16", shape(1, 16, 64), {900, 40, 0, 15}, {16, 7, 0, 1});
  add("h2_sq16_random", shape(2, 16, 32), {333, 1500, 16, 80, 2}, {});
  {
    Problem p = shape(16, 3, 64);
    p.causal = false;
    add("h16_sq3_noncausal", p, {100, 0, 650}, {3, 2, 1});
  }
  add("all_empty", shape(16, 8, 64), {100, 0, 3000}, {0, 0, 0});
  add("batch1_split", shape(16, 6, 64), {8000}, {4});
  {
    std::vector<int32_t> lens(600, 24), q_lens(600);
    for (int i = 0; i < 600; ++i) {
      lens[i] = 1 + (i * 37) % 90;
      q_lens[i] = i % 3;
    }
    add("b600_sq2", shape(16, 2, 64), lens, q_lens);
  }
  {
    Problem p = shape(16, 4, 64);
    p.kv_dtype = DType::kFP8E4M3;
    add("fp8kv_h16_sq4", p, {400, 5, 0, 1300}, {4, 2, 3, 0});
    // A 16-bit q past 64 rows: the wide tile (Widen::kFp8, the split widening), with tiles past
    // q_len skipped under the one-shot and cluster schedules.
    Problem wide = shape(64, 4, 64);
    wide.kv_dtype = DType::kFP8E4M3;
    add("fp8kv_h64_sq4_tiles", wide, {700, 64, 1, 2100, 300}, {1, 4, 2, 3, 1});
    Problem q8 = shape(64, 5, 64);
    q8.q_dtype = q8.kv_dtype = DType::kFP8E4M3;
    add("fp8q_h64_sq5", q8, {400, 5, 0, 1300}, {5, 1, 2, 0});
  }
  {
    Problem p = shape(16, 4, 64);
    p.topk = 128;
    add("sparse_h16_sq4", p, {900, 30, 0, 400}, {4, 0, 2, 3}, true);
    Problem wide = shape(64, 3, 64);
    wide.topk = 600;
    add("sparse_h64_sq3", wide, {1000, 2000}, {1, 3});
    // The V4 cache with an extra cache: both lists' packed index rows.
    Problem v4 = shape(64, 3, 61);
    v4.kv_dtype = DType::kFP8E4M3;
    v4.kv_layout = KvLayout::kFp8V4;
    v4.d_qk = kV4Dqk;
    v4.topk = 200;
    v4.extra_topk = 70;
    v4.extra_page_size = 2;
    add("sparse_v4_extra_h64_sq3", v4, {900, 30, 0, 400}, {3, 0, 2, 1}, true);
  }
  {
    Problem p = shape(16, 5, 64);
    p.cp_world = 2;
    p.cp_rank = 1;
    p.cp_interleave = 1;
    add("cp2_h16_sq5", p, {999, 6, 0, 140}, {5, 3, 2, 1});
    Problem blocks = shape(64, 4, 32);
    blocks.cp_world = 4;
    blocks.cp_rank = 2;
    blocks.cp_interleave = 64;
    add("cp4_h64_sq4", blocks, {3000, 130, 129, 1}, {4, 0, 4, 1});
  }
  return cases;
}

Problem case_problem(const VarCase& c) {
  Problem p = c.p;
  p.var_q = true;
  p.max_batch = static_cast<int32_t>(c.lens.size());
  p.max_seq_len = std::max(1, *std::max_element(c.lens.begin(), c.lens.end()));
  return p;
}

void check_var_q(const char* backend, uint64_t seed) {
  for (const VarCase& c : var_cases()) {
    const Problem p = case_problem(c);
    const Status runs = can_run(backend, p);
    if (!runs.ok()) {  // (sm90: sparse with an fp8 cache and the like are refused by name)
      std::printf("  %-20s skipped: %s\n", c.name.c_str(), runs.to_string().c_str());
      continue;
    }
    const harness::HostInputs in = harness::make_inputs(
        p, c.lens, {.seed = seed++, .topk_lens = c.topk_lens, .q_lens = c.q_lens});
    Output ref;
    MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
    harness::DeviceInputs device;
    MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
    for (const int tactic : tactic_ids(backend, p)) {
      SCOPED_TRACE(::testing::Message() << c.name << " tactic " << tactic);
      std::unique_ptr<Decoder> decoder;
      MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend, .tactic = tactic}, &decoder));
      harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
      StreamHolder s;
      Output got;
      MLAKIT_ASSERT_OK(run_device(*decoder, in, device, workspace.get(), s.stream, &got));
      const ::testing::AssertionResult result = matches_reference(in, got, ref);
      EXPECT_TRUE(result);
      std::printf("  %-20s tactic %d: %s\n", c.name.c_str(), tactic, result.message());
    }
  }
}

TEST(VarQGpu, Sm80MatchesReference) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_var_q("sm80", 5000);
}

TEST(VarQGpu, Sm90MatchesReference) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_var_q("sm90", 5100);
}

// A run captured once and replayed with new cu_seqlens_q and q (same pointers, new contents; the
// lengths and cache stay) gives bitwise the results of an uncaptured run, which match the
// reference. PDL on, every tactic, h_q 16 and 64.
void check_var_q_graph(const char* backend) {
  const std::vector<int32_t> lens = {700, 1, 0, 1500, 33, 260};
  const std::vector<std::vector<int32_t>> rounds = {
      {4, 4, 4, 4, 4, 4}, {0, 1, 2, 3, 4, 0}, {3, 0, 0, 1, 0, 2}, {0, 0, 0, 0, 0, 0}, {}};
  for (const int h_q : {16, 64}) {
    Problem p = shape(h_q, 4, 64);
    p.var_q = true;
    p.has_sinks = true;
    p.enable_pdl = true;
    p.max_batch = static_cast<int32_t>(lens.size());
    p.max_seq_len = 1500;
    for (const int tactic : tactic_ids(backend, p)) {
      SCOPED_TRACE(::testing::Message() << "h_q " << h_q << " tactic " << tactic);
      uint64_t seed = 5300 + 10 * tactic + h_q;
      harness::HostInputs in = harness::make_inputs(p, lens, {.seed = seed, .q_lens = rounds[0]});
      harness::DeviceInputs device;
      MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
      std::unique_ptr<Decoder> decoder;
      MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend, .tactic = tactic}, &decoder));
      const size_t ws_bytes = decoder->workspace_bytes();
      harness::DeviceBuffer workspace(std::max<size_t>(ws_bytes, 256));
      cudaStream_t stream = nullptr;
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      MLAKIT_ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      MLAKIT_ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      const Status captured = decoder->run(device.args, workspace.get(), ws_bytes, stream);
      MLAKIT_ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
      MLAKIT_ASSERT_OK(captured);
      MLAKIT_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      for (const std::vector<int32_t>& q_lens : rounds) {
        // Same lengths (so the same buffer sizes), new contents and offsets.
        in = harness::make_inputs(p, lens, {.seed = ++seed, .q_lens = q_lens});
        const struct {
          const harness::DeviceBuffer& dst;
          const void* src;
          size_t bytes;
        } copies[] = {
            {device.q, in.q.data(), in.q.size()},
            {device.kv, in.kv.data(), in.kv.size()},
            {device.block_table, in.block_table.data(), in.block_table.size() * 4},
            {device.sinks, in.sinks.data(), in.sinks.size() * 4},
            {device.cu_seqlens_q, in.cu_seqlens_q.data(), in.cu_seqlens_q.size() * 4},
        };
        for (const auto& c : copies) {
          ASSERT_EQ(c.dst.size(), c.bytes);
          MLAKIT_ASSERT_CUDA(cudaMemcpy(c.dst.get(), c.src, c.bytes, cudaMemcpyHostToDevice));
        }
        Output ref, replayed, direct;
        MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
        MLAKIT_ASSERT_OK(run_device(
            [&](cudaStream_t s) {
              return cudaGraphLaunch(exec, s) == cudaSuccess
                         ? Status::Ok()
                         : Status(StatusCode::kCudaError, "cudaGraphLaunch");
            },
            in, device, stream, &replayed));
        MLAKIT_ASSERT_OK(run_device(*decoder, in, device, workspace.get(), stream, &direct));
        EXPECT_TRUE(bitwise_equal(replayed, direct));
        EXPECT_TRUE(matches_reference(in, replayed, ref));
      }
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(stream);
    }
  }
}

TEST(VarQGpu, Sm80GraphFollowsNewOffsets) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_var_q_graph("sm80");
}

TEST(VarQGpu, Sm90GraphFollowsNewOffsets) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_var_q_graph("sm90");
}

}  // namespace
}  // namespace mlakit::testing
