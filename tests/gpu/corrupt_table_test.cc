// Issue 34: a block table with page ids out of range in used slots (past the cache, INT32_MAX,
// negative) must not crash a GPU backend or read outside the cache (run under compute-sanitizer
// memcheck in the records); the other requests' results stay exact, the corrupted request's stay
// finite, and Decoder::check_data names the first bad entry.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/check.h"
#include "harness/compare.h"
#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

// Rows [request * rows, (request + 1) * rows) of out (16-bit) and lse, without request `skip`.
Output without(const Output& o, int batch, int rows, int skip) {
  Output r;
  for (int i = 0; i < batch; ++i) {
    if (i == skip) continue;
    r.out.insert(r.out.end(), o.out.begin() + int64_t{i} * rows * kDv,
                 o.out.begin() + int64_t{i + 1} * rows * kDv);
    if (!o.lse.empty()) {
      r.lse.insert(r.lse.end(), o.lse.begin() + int64_t{i} * rows,
                   o.lse.begin() + int64_t{i + 1} * rows);
    }
  }
  return r;
}

void check_backend(const char* backend, const Problem& base, uint64_t seed) {
  if (!can_run(backend, base).ok())
    GTEST_SKIP() << backend << ": " << can_run(backend, base).message();
  const int batch = base.max_batch, rows = base.h_q * base.s_q, bad = 1;
  const std::vector<int32_t> lens = harness::make_seq_lens(batch, 1000, false, seed);
  harness::HostInputs in = harness::make_inputs(base, lens, {.seed = seed});
  Output ref;
  MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
  const int32_t out_of_range[] = {static_cast<int32_t>(in.num_pages),
                                  std::numeric_limits<int32_t>::max(), -5,
                                  std::numeric_limits<int32_t>::min()};
  int32_t* table = in.block_table.data() + int64_t{bad} * in.block_table_stride;
  for (int k = 0; k < 4; ++k) table[3 * k] = out_of_range[k];  // used slots (1000 tokens: 16 pages)
  harness::DeviceInputs device;
  MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
  for (const int tactic : tactic_ids(backend, base)) {
    SCOPED_TRACE(str_cat(backend, " tactic ", tactic, " h_q ", base.h_q));
    std::unique_ptr<Decoder> decoder;
    MLAKIT_ASSERT_OK(Decoder::create(base, {.backend = backend, .tactic = tactic}, &decoder));
    StreamHolder s;
    const Status found = decoder->check_data(device.args, s.stream);
    EXPECT_EQ(found.code(), StatusCode::kInvalidArgument) << found.to_string();
    EXPECT_NE(found.message().find("block_table[1, 0]"), std::string::npos) << found.message();
    harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
    Output got;
    MLAKIT_ASSERT_OK(run_device(*decoder, in, device, workspace.get(), s.stream, &got));
    // The corrupted request: finite (its bad pages read as zeros).
    for (int64_t k = int64_t{bad} * rows * kDv; k < int64_t{bad + 1} * rows * kDv; ++k) {
      const uint16_t v = got.out[k];
      ASSERT_NE(v & 0x7f80, 0x7f80) << "out element " << k << " is not finite";
    }
    // The others: exact as ever.
    Problem rest = base;
    rest.max_batch = batch - 1;
    const Output g = without(got, batch, rows, bad), r = without(ref, batch, rows, bad);
    const harness::Comparison cmp = harness::compare(rest, batch - 1, g.out.data(), r.out.data(),
                                                     base.return_lse ? g.lse.data() : nullptr,
                                                     base.return_lse ? r.lse.data() : nullptr);
    EXPECT_TRUE(cmp.passes(harness::default_tolerance(base))) << cmp.summary();
  }
}

Problem problem(int h_q, DType kv) {
  Problem p;
  p.h_q = h_q;
  p.max_batch = 4;
  p.max_seq_len = 1000;
  p.kv_dtype = kv;
  p.return_lse = true;
  return p;
}

TEST(CorruptBlockTable, Sm80NeverReadsOutsideTheCache) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_backend("sm80", problem(16, DType::kBF16), 7700);
  check_backend("sm80", problem(128, DType::kBF16), 7701);
  check_backend("sm80", problem(32, DType::kFP8E4M3), 7702);
}

TEST(CorruptBlockTable, Sm90NeverReadsOutsideTheCache) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_backend("sm90", problem(16, DType::kBF16), 7710);
  check_backend("sm90", problem(128, DType::kBF16), 7711);
  check_backend("sm90", problem(32, DType::kFP8E4M3), 7712);
}

}  // namespace
}  // namespace mlakit::testing
