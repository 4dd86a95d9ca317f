// Ad-hoc timing of the sm80 backend (not part of the suite: run it explicitly with
//   mlakit_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Timing*').
// Graph replays over rotating input copies (cold L2), the whole call (plan + decode + combine),
// bf16, page 64, as in BENCHMARKING.md. The benchmark of record is `mlakit bench`.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
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
    bool skewed;  // request 0 is 32x longer than the others
  };
  const Shape shapes[] = {
      {128, 1, 64, 4096, false}, {16, 1, 64, 4096, false}, {64, 1, 64, 4096, false},
      {32, 1, 64, 4096, false},  {128, 1, 1, 4096, false}, {16, 1, 1, 4096, false},
      {128, 2, 32, 4096, false}, {16, 2, 64, 4096, false}, {16, 1, 128, 8192, false},
      {128, 1, 64, 1024, true},  {16, 1, 64, 1024, true}};
  std::printf("%s, %d SMs\n", device.name.c_str(), device.sm_count);
  for (int index = 0; index < static_cast<int>(std::size(shapes)); ++index) {
    const Shape& s = shapes[index];
    if (!timing_shape_selected(index)) continue;
    Problem p;
    p.h_q = s.h_q;
    p.s_q = s.s_q;
    p.page_size = 64;
    p.max_batch = s.batch;
    p.max_seq_len = s.skewed ? 32 * s.len : s.len;
    std::vector<int32_t> lens(s.batch, s.len);
    if (s.skewed) lens[0] = 32 * s.len;
    int64_t tokens = 0;
    for (const int32_t len : lens) tokens += len;
    const harness::HostInputs in = harness::make_inputs(p, lens, {.seed = 3, .magnitude = 0.25f});
    const size_t kv_bytes = static_cast<size_t>(tokens) * kDqk * 2;
    const int copies = harness::cold_copies(kv_bytes, device.l2_bytes, size_t{8} << 30);
    std::vector<harness::DeviceInputs> inputs(copies);
    for (auto& d : inputs) MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &d));
    const double flops = 2176.0 * s.h_q * s.s_q * tokens;
    // Small batches are launch-bound: time them with PDL as well.
    for (const bool pdl : {false, true}) {
      if (pdl && s.batch > 1) continue;
      p.enable_pdl = pdl;
      for (int tactic = 0; tactic < 2; ++tactic) {
        std::unique_ptr<Decoder> decoder;
        MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = "sm80", .tactic = tactic}, &decoder));
        harness::Timing t;
        MLAKIT_ASSERT_OK(harness::time_gpu(*decoder, inputs, {}, &t));
        std::printf(
            "h_q %3d s_q %d b %3d L %5d%s%s tactic %d: %8.1f us  %5.2f TB/s  %5.0f TFLOP/s\n",
            s.h_q, s.s_q, s.batch, s.len, s.skewed ? " (one 32x)" : "", pdl ? " pdl" : "", tactic,
            t.median_us, kv_bytes / t.median_us * 1e-6, flops / t.median_us * 1e-6);
      }
    }
  }
}

}  // namespace
}  // namespace mlakit::testing
