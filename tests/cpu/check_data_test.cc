// Decoder::check_data on the cpu backend (host memory): it names the first value out of range,
// and passes valid data. (tests/gpu/corrupt_table_test.cc: the same through a GPU decoder.)
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "harness/workload.h"
#include "mlakit/mlakit.h"

namespace mlakit {
namespace {

TEST(CheckData, NamesTheFirstBadBlockTableEntryAndLength) {
  Problem p;
  p.h_q = 8;
  p.max_batch = 3;
  p.max_seq_len = 300;
  std::unique_ptr<Decoder> d;
  ASSERT_TRUE(Decoder::create(p, {.backend = "cpu"}, &d).ok());
  harness::HostInputs in = harness::make_inputs(p, std::vector<int32_t>{300, 200, 100});
  std::vector<uint16_t> out(in.out_bytes() / 2);
  RunArgs a = in.args(out.data(), nullptr);
  EXPECT_TRUE(d->check_data(a, nullptr).ok());
  in.block_table[in.block_table_stride + 2] = static_cast<int32_t>(in.num_pages) + 7;
  a = in.args(out.data(), nullptr);
  Status st = d->check_data(a, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("block_table[1, 2]"), std::string::npos) << st.message();
  in.seq_lens[0] = 301;
  a = in.args(out.data(), nullptr);
  st = d->check_data(a, nullptr);
  EXPECT_NE(st.message().find("seq_lens[0]"), std::string::npos) << st.message();
}

TEST(CheckData, NamesAnIndexOutOfRange) {
  Problem p;
  p.h_q = 4;
  p.s_q = 2;
  p.max_batch = 2;
  p.max_seq_len = 256;
  p.topk = 32;
  std::unique_ptr<Decoder> d;
  ASSERT_TRUE(Decoder::create(p, {.backend = "cpu"}, &d).ok());
  harness::HostInputs in = harness::make_inputs(p, std::vector<int32_t>{256, 100});
  std::vector<uint16_t> out(in.out_bytes() / 2);
  EXPECT_TRUE(d->check_data(in.args(out.data(), nullptr), nullptr).ok());
  in.indices[32 + 5] = -2;  // request 0, token 1, slot 5
  const Status st = d->check_data(in.args(out.data(), nullptr), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("indices[0, 1, 5]"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mlakit
