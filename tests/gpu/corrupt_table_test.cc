// Issue 34: a block table with page ids out of range in used slots (past the cache, INT32_MAX,
// negative). A GPU backend reads nothing of such a page and masks its tokens (plan/page_mask.cuh):
// every request's result must equal the cpu reference of the same inputs with those pages taken
// out (harness::without_slots), a request whose pages are all bad gives out 0 and lse -inf, and
// Decoder::check_data names the first bad entry. Run under compute-sanitizer memcheck in the
// records (scripts/sanitize.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/check.h"
#include "harness/compare.h"
#include "harness/corrupt.h"
#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

struct CorruptCase {
  int h_q = 16;
  int s_q = 1;
  int page_size = 64;
  DType kv = DType::kBF16;
  bool fp8_q = false;
  int batch = 4;
  int len = 1000;  // lengths: uniform in [len/8, 2 len)
  int bad = 6;     // planted pages
};

// Every tactic of `backend` on `c`'s inputs with `c.bad` planted pages.
void check_backend(const char* backend, const CorruptCase& c, uint64_t seed) {
  Problem p;
  p.h_q = c.h_q;
  p.s_q = c.s_q;
  p.page_size = c.page_size;
  p.max_batch = c.batch;
  p.kv_dtype = c.kv;
  if (c.fp8_q) p.q_dtype = DType::kFP8E4M3;
  p.return_lse = true;
  const std::vector<int32_t> lens = harness::make_seq_lens(c.batch, c.len, true, seed);
  p.max_seq_len = *std::max_element(lens.begin(), lens.end());
  if (!can_run(backend, p).ok()) GTEST_SKIP() << backend << ": " << can_run(backend, p).message();
  harness::HostInputs in = harness::make_inputs(p, lens, {.seed = seed});
  std::vector<harness::BadSlot> planted;
  MLAKIT_ASSERT_OK(harness::plant_bad_pages(&in, c.bad, seed, &planted));
  Output ref;
  MLAKIT_ASSERT_OK(cpu_reference(harness::without_slots(in, planted), &ref));
  harness::DeviceInputs device;
  MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
  const std::string first = str_cat("block_table[", planted[0].request, ", ", planted[0].slot, "]");
  for (const int tactic : tactic_ids(backend, p)) {
    SCOPED_TRACE(str_cat(backend, " tactic ", tactic, ": ", describe(p)));
    std::unique_ptr<Decoder> decoder;
    MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend, .tactic = tactic}, &decoder));
    StreamHolder s;
    const Status found = decoder->check_data(device.args, s.stream);
    EXPECT_EQ(found.code(), StatusCode::kInvalidArgument) << found.to_string();
    EXPECT_NE(found.message().find(first), std::string::npos) << found.message();
    harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
    Output got;
    MLAKIT_ASSERT_OK(run_device(*decoder, in, device, workspace.get(), s.stream, &got));
    EXPECT_TRUE(matches_reference(in, got, ref));
  }
}

TEST(CorruptBlockTable, Sm80MasksBadPages) {
  MLAKIT_SKIP_WITHOUT_GPU();
  uint64_t seed = 7700;
  for (const int page : {1, 16, 32, 64, 128}) {
    check_backend("sm80", {.h_q = 16, .page_size = page, .bad = page == 1 ? 40 : 6}, seed++);
  }
  check_backend("sm80", {.h_q = 128, .s_q = 2}, seed++);
  check_backend("sm80", {.h_q = 64, .batch = 1, .len = 6000, .bad = 8}, seed++);  // split-KV
  check_backend("sm80", {.h_q = 32, .kv = DType::kFP8E4M3}, seed++);
}

TEST(CorruptBlockTable, Sm90MasksBadPages) {
  MLAKIT_SKIP_WITHOUT_SM90();
  uint64_t seed = 7710;
  for (const int page : {32, 64, 128})
    check_backend("sm90", {.h_q = 16, .page_size = page}, seed++);
  check_backend("sm90", {.h_q = 128, .s_q = 2, .page_size = 32}, seed++);
  check_backend("sm90", {.h_q = 32, .s_q = 3}, seed++);
  check_backend("sm90", {.h_q = 64, .batch = 1, .len = 6000, .bad = 8}, seed++);  // split-KV
  check_backend("sm90", {.h_q = 32, .kv = DType::kFP8E4M3}, seed++);
  check_backend("sm90", {.h_q = 128, .kv = DType::kFP8E4M3}, seed++);
  check_backend("sm90", {.h_q = 16, .kv = DType::kFP8E4M3, .fp8_q = true}, seed++);
  check_backend("sm90", {.h_q = 128, .s_q = 2, .kv = DType::kFP8E4M3, .fp8_q = true}, seed++);
}

// A request whose every page is bad sees no token: out 0 and lse -inf, as a request of length 0.
void check_all_bad(const char* backend, int page_size) {
  Problem p;
  p.h_q = 16;
  p.page_size = page_size;
  p.max_batch = 2;
  p.max_seq_len = 4 * page_size;
  p.return_lse = true;
  const std::vector<int32_t> lens = {4 * page_size, 2 * page_size};
  harness::HostInputs in = harness::make_inputs(p, lens, {.seed = 7790});
  for (int32_t slot = 0; slot < 4; ++slot) in.block_table[slot] = -1;
  harness::DeviceInputs device;
  MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &device));
  for (const int tactic : tactic_ids(backend, p)) {
    SCOPED_TRACE(str_cat(backend, " tactic ", tactic));
    std::unique_ptr<Decoder> decoder;
    MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend, .tactic = tactic}, &decoder));
    StreamHolder s;
    harness::DeviceBuffer workspace(std::max<size_t>(decoder->workspace_bytes(), 256));
    Output got;
    MLAKIT_ASSERT_OK(run_device(*decoder, in, device, workspace.get(), s.stream, &got));
    for (int k = 0; k < p.h_q * kDv; ++k) ASSERT_EQ(got.out[k] & 0x7fff, 0) << "out element " << k;
    for (int h = 0; h < p.h_q; ++h) ASSERT_TRUE(std::isinf(got.lse[h]) && got.lse[h] < 0) << h;
  }
}

TEST(CorruptBlockTable, AllBadIsEmpty) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_all_bad("sm80", 64);
  check_all_bad("sm80", 16);
  if (current_device().sm_major == 9) {
    check_all_bad("sm90", 64);
    check_all_bad("sm90", 32);
  }
}

}  // namespace
}  // namespace mlakit::testing
