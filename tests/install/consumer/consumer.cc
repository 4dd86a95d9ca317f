// Decodes a small batch on the cpu backend through the installed C++ API: one request of 3
// tokens, one of none (its output must be 0 and its LSE -inf). Exit code 0 when all holds.
#include <mlakit/mlakit.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

int main() {
  const mlakit::Problem problem{
      .h_q = 2, .page_size = 16, .max_batch = 2, .max_seq_len = 16, .return_lse = true};
  std::unique_ptr<mlakit::Decoder> decoder;
  mlakit::Status st = mlakit::Decoder::create(problem, {.backend = "cpu"}, &decoder);
  if (!st.ok()) return std::printf("create: %s\n", st.to_string().c_str()), 1;
  std::vector<uint16_t> q(2 * 2 * mlakit::kDqk, 0x3f80), kv(16 * mlakit::kDqk, 0x3f00);  // 1, 0.5
  std::vector<uint16_t> out(2 * 2 * mlakit::kDv, 0xffff);
  std::vector<float> lse(4, NAN);
  const int32_t table[2] = {0, 0}, lens[2] = {3, 0};
  mlakit::RunArgs args;
  args.batch = 2;
  args.q = q.data();
  args.kv_cache = kv.data();
  args.num_pages = 1;
  args.block_table = table;
  args.block_table_stride = 1;
  args.seq_lens = lens;
  args.out = out.data();
  args.lse = lse.data();
  st = decoder->run(args, nullptr, 0, nullptr);
  if (!st.ok()) return std::printf("run: %s\n", st.to_string().c_str()), 1;
  // Three equal tokens: out = the value 0.5 (bf16 0x3f00), lse = score + log(3).
  const float score = 576 * 0.5f * mlakit::kDefaultSoftmaxScale;
  const bool ok =
      out[0] == 0x3f00 && out[2 * mlakit::kDv - 1] == 0x3f00 && out[2 * mlakit::kDv] == 0 &&
      std::fabs(lse[0] - (score + std::log(3.0f))) < 1e-4 && std::isinf(lse[2]) && lse[2] < 0;
  std::printf("mlakit %s consumer: %s\n", std::string(mlakit::version()).c_str(),
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
