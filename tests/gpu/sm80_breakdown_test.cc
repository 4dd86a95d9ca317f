// Ad-hoc timing of the sm80 backend's launches apart (not part of the suite: run it with
//   mlakit_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Breakdown*').
// For each shape, tactic and variant: the whole call (plan + decode + combine) and each kernel
// alone, as graph replays over rotating input copies (cold L2), bf16, page 64, PDL on.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "backends/sm80/launch.h"
#include "harness/timing.h"
#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

// Median microseconds per run of `launch` over the copies, captured `launches` times in a graph.
double time_graph(const std::function<Status(const harness::DeviceInputs&, cudaStream_t)>& launch,
                  const std::vector<harness::DeviceInputs>& copies, cudaStream_t stream) {
  const int n = static_cast<int>(copies.size());
  const int launches = std::max(20, n);
  if (!launch(copies[0], stream).ok() || cudaStreamSynchronize(stream) != cudaSuccess) return -1;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  bool ok = true;
  for (int k = 0; k < launches && ok; ++k) ok = launch(copies[k % n], stream).ok();
  cudaStreamEndCapture(stream, &graph);
  if (!ok || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return -1;
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int k = 0; k < 3; ++k) cudaGraphLaunch(exec, stream);
  std::vector<double> us;
  for (int k = 0; k < 11; ++k) {
    cudaEventRecord(start, stream);
    cudaGraphLaunch(exec, stream);
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    us.push_back(1000.0 * ms / launches);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(us.begin(), us.end());
  return cudaGetLastError() == cudaSuccess ? us[us.size() / 2] : -1;
}

struct Variant {
  const char* name;
  int min_chunk = 0;    // > 0: overrides min_chunk_blocks
  int fixed_cost = -1;  // >= 0: overrides fixed_cost_blocks
  int stages = 0;       // > 0: overrides the pipeline depth
};

TEST(Sm80Timing, DISABLED_Breakdown) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const DeviceInfo device = current_device();
  struct Shape {
    int h_q, batch, len;
  };
  const Shape shapes[] = {{16, 64, 4096}, {128, 64, 4096}, {128, 1, 4096},
                          {16, 1, 4096},  {128, 8, 4096},  {16, 8, 4096}};
  std::printf("%s, %d SMs\n", device.name.c_str(), device.sm_count);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (int index = 0; index < static_cast<int>(std::size(shapes)); ++index) {
    const Shape& s = shapes[index];
    if (!timing_shape_selected(index)) continue;
    Problem p;
    p.h_q = s.h_q;
    p.page_size = 64;
    p.max_batch = s.batch;
    p.max_seq_len = s.len;
    p.enable_pdl = true;
    const std::vector<int32_t> lens(s.batch, s.len);
    const harness::HostInputs in = harness::make_inputs(p, lens, {.seed = 3, .magnitude = 0.25f});
    const size_t kv_bytes = static_cast<size_t>(s.batch) * s.len * kDqk * 2;
    const int copies = harness::cold_copies(kv_bytes, device.l2_bytes, size_t{8} << 30);
    std::vector<harness::DeviceInputs> inputs(copies);
    for (auto& d : inputs) MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &d));
    std::vector<Variant> variants = {{.name = "default"}};
    if (s.h_q == 16) variants.push_back({.name = "1 CTA/SM, 5 stages", .stages = 5});
    if (s.batch <= 8) variants.push_back({.name = "min_chunk 4", .min_chunk = 4});
    for (int tactic = 0; tactic < 2; ++tactic) {
      for (const Variant& v : variants) {
        sm80::Setup setup;
        MLAKIT_ASSERT_OK(sm80::make_setup(p, tactic, device, &setup));
        if (v.stages > 0) {
          setup.stages = v.stages;
          int ctas_per_sm = 0;
          MLAKIT_ASSERT_OK(setup.kernel->prepare(setup.stages, &ctas_per_sm));
          setup.shape.num_parts = std::max(1, device.sm_count * ctas_per_sm / setup.m_tiles);
        }
        if (v.min_chunk > 0) setup.shape.min_chunk_blocks = v.min_chunk;
        if (v.fixed_cost >= 0) setup.shape.fixed_cost_blocks = v.fixed_cost;
        setup.layout = plan::workspace_layout(setup.shape);
        harness::DeviceBuffer workspace(std::max<size_t>(setup.layout.bytes, 256));
        const auto timed = [&](unsigned launches) {
          return time_graph(
              [&](const harness::DeviceInputs& d, cudaStream_t st) {
                return sm80::run(setup, d.args, workspace.get(), st, launches);
              },
              inputs, stream);
        };
        const double all = timed(sm80::kLaunchAll);
        const double plan = timed(sm80::kLaunchPlan);
        const double decode = timed(sm80::kLaunchDecode);
        const double combine = timed(sm80::kLaunchCombine);
        const double pd = timed(sm80::kLaunchPlan | sm80::kLaunchDecode);
        std::printf(
            "h_q %3d b %2d L %d tactic %d %-22s stages %d parts %3d: all %7.1f  plan %5.1f  "
            "decode %7.1f  combine %5.1f  plan+decode %7.1f us  (%.2f TB/s all, %.2f decode)\n",
            s.h_q, s.batch, s.len, tactic, v.name, setup.stages, setup.shape.num_parts, all, plan,
            decode, combine, pd, kv_bytes / all * 1e-6, kv_bytes / decode * 1e-6);
      }
    }
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace mlakit::testing
