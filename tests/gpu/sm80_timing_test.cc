// Ad-hoc timing of the sm80 backend (not part of the suite: run it explicitly with
//   mlakit_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Timing*').
// Graph replays over rotating input copies (cold L2), the whole call (plan + decode + combine),
// bf16, page 64, as in BENCHMARKING.md. The benchmark of record is `mlakit bench`.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "harness/timing.h"
#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

TEST(Sm80Timing, DISABLED_Timing) {
  MLAKIT_SKIP_WITHOUT_GPU();
  const DeviceInfo device = current_device();
  struct Shape {
    int h_q, s_q, batch, len;
  };
  const Shape shapes[] = {{128, 1, 64, 4096}, {16, 1, 64, 4096}, {64, 1, 64, 4096},
                          {32, 1, 64, 4096},  {128, 1, 1, 4096}, {128, 2, 32, 4096},
                          {16, 2, 64, 4096},  {16, 1, 128, 8192}};
  std::printf("%s, %d SMs\n", device.name.c_str(), device.sm_count);
  for (const Shape& s : shapes) {
    Problem p;
    p.h_q = s.h_q;
    p.s_q = s.s_q;
    p.page_size = 64;
    p.max_batch = s.batch;
    p.max_seq_len = s.len;
    const std::vector<int32_t> lens(s.batch, s.len);
    const harness::HostInputs in = harness::make_inputs(p, lens, {.seed = 3, .magnitude = 0.25f});
    const size_t kv_bytes = static_cast<size_t>(s.batch) * s.len * kDqk * 2;
    const int copies = harness::cold_copies(kv_bytes, device.l2_bytes, size_t{8} << 30);
    std::vector<harness::DeviceInputs> inputs(copies);
    for (auto& d : inputs) MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &d));
    const double flops = 2176.0 * s.h_q * s.s_q * s.batch * s.len;
    for (int tactic = 0; tactic < 2; ++tactic) {
      std::unique_ptr<Decoder> decoder;
      MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = "sm80", .tactic = tactic}, &decoder));
      harness::Timing t;
      MLAKIT_ASSERT_OK(harness::time_gpu(*decoder, inputs, {}, &t));
      std::printf("h_q %3d s_q %d b %3d L %5d tactic %d: %8.1f us  %5.2f TB/s  %5.0f TFLOP/s\n",
                  s.h_q, s.s_q, s.batch, s.len, tactic, t.median_us, kv_bytes / t.median_us * 1e-6,
                  flops / t.median_us * 1e-6);
    }
  }
}

}  // namespace
}  // namespace mlakit::testing
