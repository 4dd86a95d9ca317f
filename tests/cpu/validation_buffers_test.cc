// validate_args on the buffers of a call: the workspace (size, null, alignment), and written
// buffers (out, lse, the workspace) that overlap another argument, refused by validate_args and
// Decoder::run alike; buffers that only touch are accepted.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cpu_run.h"
#include "mlakit/mlakit.h"
#include "status_match.h"
#include "validation_args.h"

namespace mlakit_test {
namespace {

// The workspace rules, with a workspace that the cpu backend never needs: called directly.
TEST(ValidateArgs, WorkspaceTooSmall) {
  ValidCall call(Base::kDense);
  alignas(256) static uint8_t workspace[2048];
  EXPECT_TRUE(is_error(mlakit::validate_args(call.in.problem, call.args, 1024, workspace, 512),
                       StatusCode::kInvalidArgument, "workspace_size",
                       {"expected at least 1024 bytes", "given 512"}));
  EXPECT_TRUE(mlakit::validate_args(call.in.problem, call.args, 1024, workspace, 1024).ok());
}

TEST(ValidateArgs, WorkspaceNullOrMisaligned) {
  ValidCall call(Base::kDense);
  alignas(256) static uint8_t workspace[2048];
  EXPECT_TRUE(is_error(mlakit::validate_args(call.in.problem, call.args, 1024, nullptr, 1024),
                       StatusCode::kInvalidArgument, "workspace", {"given nullptr"}));
  EXPECT_TRUE(
      is_error(mlakit::validate_args(call.in.problem, call.args, 1024, workspace + 64, 1024),
               StatusCode::kInvalidArgument, "workspace", {"aligned to 256 bytes"}));
  // No workspace needed: none has to be given.
  EXPECT_TRUE(mlakit::validate_args(call.in.problem, call.args, 0, nullptr, 0).ok());
}

// Room for the out of a ValidCall (b 2, h_q 4, 512 16-bit values a row) and nothing else.
void* out_over() {
  alignas(256) static uint8_t room[2 * 4 * 512 * 2];
  return room;
}

// Copies `bytes` bytes of an argument into a region of their own, with nothing of the call within
// 256 KiB of them, and returns the copy: a written buffer placed over it can overlap it alone,
// whatever the heap put next to the original.
char* isolate(const void* ptr, size_t bytes) {
  alignas(256) static char arena[1 << 20];
  char* copy = arena + (256 << 10);
  EXPECT_LE(bytes, sizeof(arena) / 2);
  std::memcpy(copy, ptr, bytes);
  return copy;
}

// A written buffer (out, lse, the workspace) that overlaps another argument is a data race and
// gave wrong results: refused, naming both, from the addresses alone (nothing is read).
TEST(ValidateArgs, WrittenBuffersOverlappingAnotherArgumentAreRefused) {
  struct Overlap {
    Base base;
    const char* written;
    const char* other;
    void (*mutate)(RunArgs&);
  };
  const Overlap cases[] = {
      {Base::kDense, "out", "q", [](RunArgs& a) { a.out = const_cast<void*>(a.q); }},
      {Base::kDense, "out", "kv_cache",
       [](RunArgs& a) { a.out = const_cast<char*>(static_cast<const char*>(a.kv_cache)) + 4096; }},
      // The small arguments out is placed over live in a buffer of out's size of their own
      // (out_over), so that out reaches nothing else, wherever the heap put the test's inputs.
      {Base::kDense, "out", "block_table",
       [](RunArgs& a) { a.block_table = static_cast<const int32_t*>(a.out = out_over()); }},
      {Base::kDense, "out", "seq_lens",
       [](RunArgs& a) { a.seq_lens = static_cast<const int32_t*>(a.out = out_over()); }},
      {Base::kSinksLse, "out", "lse", [](RunArgs& a) { a.out = a.lse; }},
      {Base::kSinksLse, "out", "sinks",
       [](RunArgs& a) { a.sinks = static_cast<const float*>(a.out = out_over()); }},
      {Base::kSparse, "out", "indices",
       [](RunArgs& a) { a.indices = static_cast<const int32_t*>(a.out = out_over()); }},
      {Base::kSparse, "out", "topk_lens",
       [](RunArgs& a) { a.topk_lens = static_cast<const int32_t*>(a.out = out_over()); }},
      // The V4 caches and lists: copied to a region of their own (isolate), out over the copy.
      {Base::kV4Extra, "out", "kv_cache",
       [](RunArgs& a) {
         // In the last page's padding: a V4 page of 16 tokens is 9344 bytes, padded to 9792.
         char* kv = isolate(a.kv_cache, a.num_pages * 9792);
         a.kv_cache = kv;
         a.out = kv + a.num_pages * 9792 - 16;
       }},
      {Base::kV4Extra, "out", "extra_kv_cache",
       [](RunArgs& a) {
         // Pages of 2 tokens: 1168 bytes, padded to 1728; out starts in the first one's padding.
         char* extra = isolate(a.extra_kv_cache, a.extra_num_pages * 1728);
         a.extra_kv_cache = extra;
         a.out = extra + 1200;
       }},
      {Base::kV4Extra, "out", "extra_indices",
       [](RunArgs& a) {
         char* indices = isolate(a.extra_indices, 2 * 4 * sizeof(int32_t));
         a.extra_indices = reinterpret_cast<const int32_t*>(indices);
         a.out = indices;
       }},
      {Base::kV4Extra, "out", "extra_topk_lens",
       [](RunArgs& a) {
         char* lens = isolate(a.extra_topk_lens, 2 * sizeof(int32_t));
         a.extra_topk_lens = reinterpret_cast<const int32_t*>(lens);
         a.out = lens;
       }},
      {Base::kFp8, "out", "k_scale_ptr",
       [](RunArgs& a) {
         a.k_scale = kNaN;
         a.k_scale_ptr = static_cast<const float*>(a.out) + 100;
       }},
      {Base::kSinksLse, "lse", "q",
       [](RunArgs& a) { a.lse = static_cast<float*>(const_cast<void*>(a.q)) + 8; }},
  };
  for (const Overlap& c : cases) {
    ValidCall call(c.base);
    c.mutate(call.args);
    const Status st = mlakit::validate_args(call.in.problem, call.args, 0, nullptr, 0);
    EXPECT_TRUE(
        is_error(st, StatusCode::kInvalidArgument, c.written,
                 {"memory apart from every other argument", std::string("overlap ") + c.other}))
        << c.written << " over " << c.other;
    std::unique_ptr<Decoder> decoder;
    ASSERT_TRUE(Decoder::create(call.in.problem, {.backend = "cpu"}, &decoder).ok());
    EXPECT_EQ(decoder->run(call.args, nullptr, 0, nullptr).message(), st.message());
  }
  // The workspace, which the cpu backend never takes: validate_args directly.
  ValidCall call(Base::kDense);
  alignas(256) static uint8_t shared[1 << 16];
  call.args.out = shared;
  EXPECT_TRUE(is_error(mlakit::validate_args(call.in.problem, call.args, 1024, shared + 4096, 1024),
                       StatusCode::kInvalidArgument, "out", {"overlap workspace"}));
  EXPECT_TRUE(mlakit::validate_args(call.in.problem, call.args, 1024, shared + 8192, 1024).ok())
      << "out ends where the workspace starts";
}

// The block table is judged by its shape, [b, block_table_stride], not by the pages max_seq_len
// lets a run read: an out placed in a row's unused tail was accepted, and written over the table
// (found by the C API fuzz target).
TEST(ValidateArgs, OutInTheBlockTablesUnusedColumnsIsRefused) {
  ValidCall call(Base::kDense);
  Problem p = call.in.problem;
  p.max_seq_len = p.page_size;  // a run reads one page id a row
  call.args.batch = 1;
  call.args.block_table_stride = 8;  // the table holds 2 rows of 4: 8 ids
  // The table in a region of its own: out over its unused columns overlaps it alone, whatever the
  // heap put next to the original (the cache once sat there, and the refusal named kv_cache).
  char* table = isolate(call.args.block_table, 8 * sizeof(int32_t));
  call.args.block_table = reinterpret_cast<const int32_t*>(table);
  call.args.out = table + 4 * sizeof(int32_t);
  EXPECT_TRUE(is_error(mlakit::validate_args(p, call.args, 0, nullptr, 0),
                       StatusCode::kInvalidArgument, "out", {"overlap block_table"}));
  // A sparse run ignores the block table, whatever it holds: not judged.
  ValidCall sparse(Base::kSparse);
  sparse.args.block_table = static_cast<const int32_t*>(sparse.args.out);
  sparse.args.block_table_stride = -1;
  EXPECT_TRUE(mlakit::validate_args(sparse.in.problem, sparse.args, 0, nullptr, 0).ok());
}

// Buffers that touch without overlapping are fine: q, then out right after its last byte.
TEST(ValidateArgs, AdjacentBuffersAreAccepted) {
  ValidCall call(Base::kDense);
  std::vector<uint8_t> both(call.in.q.size() + call.out.size() + 16);
  uint8_t* q = both.data() + (-reinterpret_cast<uintptr_t>(both.data()) & 15);
  std::memcpy(q, call.in.q.data(), call.in.q.size());
  call.args.q = q;
  call.args.out = q + call.in.q.size();
  std::unique_ptr<Decoder> decoder;
  ASSERT_TRUE(Decoder::create(call.in.problem, {.backend = "cpu"}, &decoder).ok());
  const Status st = decoder->run(call.args, nullptr, 0, nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
}

}  // namespace
}  // namespace mlakit_test
