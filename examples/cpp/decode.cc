#include <mlakit/mlakit.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

// bf16 bits of a float (round to nearest even), and back.
uint16_t bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

int main() {
  // A batch of 2 requests with 100 and 37 cached tokens, 16 query heads, pages of 64 tokens.
  const int b = 2, h_q = 16, page_size = 64, num_pages = 3, max_pages = 2;
  mlakit::Problem problem{.h_q = h_q,
                          .s_q = 1,
                          .page_size = page_size,
                          .max_batch = b,
                          .max_seq_len = 128};  // bf16 q, cache and out by default
  // "cpu": host memory, as here. On a GPU, "auto" picks its backend; the buffers are then
  // device memory, the workspace too (cudaMalloc(&workspace, decoder->workspace_bytes())).
  std::unique_ptr<mlakit::Decoder> decoder;
  mlakit::Status st = mlakit::Decoder::create(problem, {.backend = "cpu"}, &decoder);
  if (!st.ok()) return std::printf("%s\n", st.to_string().c_str()), 1;

  std::vector<uint16_t> q(b * h_q * mlakit::kDqk), kv(num_pages * page_size * mlakit::kDqk);
  for (size_t i = 0; i < q.size(); ++i) q[i] = bf16(std::sin(0.1f * i));
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = bf16(std::cos(0.37f * i));
  const int32_t block_table[b * max_pages] = {0, 1, 2, 0};  // each request's pages, in order
  const int32_t seq_lens[b] = {100, 37};
  std::vector<uint16_t> out(b * h_q * mlakit::kDv);

  // Every decode step (on a GPU graph-capturable: no allocation, no host sync, no device reads).
  mlakit::RunArgs args{.batch = b,
                       .q = q.data(),          // [b, s_q, h_q, 576] bf16
                       .kv_cache = kv.data(),  // [num_pages, page_size, 576] bf16
                       .num_pages = num_pages,
                       .block_table = block_table,  // [b, max_pages] int32
                       .block_table_stride = max_pages,
                       .seq_lens = seq_lens,     // [b] int32
                       .out = out.data()};       // [b, s_q, h_q, 512] bf16
  st = decoder->run(args, nullptr, 0, nullptr);  // workspace, its size, the stream
  if (!st.ok()) return std::printf("%s\n", st.to_string().c_str()), 1;

  // Request 0, head 0 by hand: softmax(q . k / sqrt(576)) . v over its 100 tokens, v = k[:512].
  std::vector<double> score(100), o(mlakit::kDv, 0.0);
  double top = -INFINITY, sum = 0;
  for (int j = 0; j < 100; ++j) {
    const uint16_t* k = &kv[(block_table[j / page_size] * page_size + j % page_size) * 576];
    score[j] = 0;
    for (int d = 0; d < 576; ++d) score[j] += from_bf16(q[d]) * double{from_bf16(k[d])};
    score[j] /= std::sqrt(576.0);
    top = std::max(top, score[j]);
  }
  for (int j = 0; j < 100; ++j) {
    const uint16_t* k = &kv[(block_table[j / page_size] * page_size + j % page_size) * 576];
    const double p = std::exp(score[j] - top);
    sum += p;
    for (int d = 0; d < mlakit::kDv; ++d) o[d] += p * from_bf16(k[d]);
  }
  double err = 0;
  for (int d = 0; d < mlakit::kDv; ++d)
    err = std::max(err, std::fabs(o[d] / sum - from_bf16(out[d])));
  std::printf("%s: out [%d, 1, %d, 512], request 0 head 0 within %.1e of the formula\n",
              std::string(decoder->backend_name()).c_str(), b, h_q, err);
  return err < 1e-2 ? 0 : 1;
}
