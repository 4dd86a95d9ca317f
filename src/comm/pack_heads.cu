// pack_heads (pack_heads.h): one grid-stride copy of the partial's outputs (16-byte words) and
// LSEs (4-byte words) from [rows, N, slice] to [N, rows, slice], this rank's own slice to the
// receive buffer. Memory-bound: reads and writes the partial once (4.2 MB at b 32, h_q 128, bf16).
#include <cuda_runtime.h>

#include <algorithm>

#include "comm/pack_heads.h"
#include "core/cuda_check.h"

namespace mlakit::comm {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 2048;

struct PackParams {
  const uint4* src_out;     // [rows, N, out_words]
  const uint32_t* src_lse;  // [rows, N, heads]
  uint4* send_out;          // [N, rows, out_words]
  uint32_t* send_lse;       // [N, rows, heads]
  uint4* self_out;          // [rows, out_words]
  uint32_t* self_lse;       // [rows, heads]
  int64_t rows;
  int32_t world, self;
  int32_t out_words;  // 16-byte words of one rank's slice of a row: heads * 512 * e / 16
  int32_t heads;      // LSE words of one rank's slice of a row
};

// Element i of [rows, N, width] goes to row `row` of slot k = (i / width) % N of [N, rows, width],
// or to `self` for k == p.self.
template <typename T>
__device__ __forceinline__ void move(const T* src, T* send, T* self, int64_t i, int64_t width,
                                     const PackParams& p) {
  const int64_t w = i % width;
  const int64_t k = i / width % p.world;
  const int64_t row = i / (width * p.world);
  T* dst = k == p.self ? self + row * width : send + (k * p.rows + row) * width;
  dst[w] = src[i];
}

__global__ void __launch_bounds__(kThreads) pack_heads_kernel(const PackParams p) {
  const int64_t outs = p.rows * p.world * p.out_words;
  const int64_t total = outs + p.rows * p.world * p.heads;
  for (int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * kThreads) {
    if (i < outs) {
      move(p.src_out, p.send_out, p.self_out, i, p.out_words, p);
    } else {
      move(p.src_lse, p.send_lse, p.self_lse, i - outs, p.heads, p);
    }
  }
}

}  // namespace

Status pack_heads(const PackHeadsArgs& a, Stream stream) {
  const PackParams p{.src_out = static_cast<const uint4*>(a.partial_out),
                     .src_lse = reinterpret_cast<const uint32_t*>(a.partial_lse),
                     .send_out = static_cast<uint4*>(a.send_out),
                     .send_lse = reinterpret_cast<uint32_t*>(a.send_lse),
                     .self_out = static_cast<uint4*>(a.self_out),
                     .self_lse = reinterpret_cast<uint32_t*>(a.self_lse),
                     .rows = a.rows,
                     .world = a.world,
                     .self = a.self,
                     .out_words = a.heads * a.head_bytes / 16,
                     .heads = a.heads};
  const int64_t total = a.rows * a.world * (int64_t{p.out_words} + a.heads);
  if (total == 0) return Status::Ok();
  const int64_t blocks = std::min((total + kThreads - 1) / kThreads, kMaxBlocks);
  pack_heads_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  MLAKIT_CUDA_RETURN_LAUNCH("pack_heads_kernel");
  return Status::Ok();
}

}  // namespace mlakit::comm
