// mlakit context parallel decode (docs/context-parallel.md): the sharding arithmetic of
// Problem::cp_world / cp_rank / cp_interleave, and the merge of the ranks' partial results.
//
// A request's global position g lives on rank (g / I) % N at local position (g / (I * N)) * I +
// g % I, N = cp_world, I = cp_interleave. Each rank decodes its shard (Problem with its cp_rank,
// return_lse true, no sinks) into a partial (out, lse); the partials of all ranks, gathered by the
// caller's communication (NCCL), are combined by merge_partials, which also applies the sinks.
#pragma once

#include <cstdint>

#include "mlakit/mlakit.h"
#include "mlakit/ops.h"

namespace mlakit {

// The rank that holds global position g.
constexpr int32_t cp_rank_of(int64_t g, int32_t world, int32_t interleave) {
  return static_cast<int32_t>(g / interleave % world);
}

// Global position g's local position on its rank (cp_rank_of).
constexpr int64_t cp_local_position(int64_t g, int32_t world, int32_t interleave) {
  return g / (int64_t{interleave} * world) * interleave + g % interleave;
}

// The global position of local position j on `rank`.
constexpr int64_t cp_global_position(int64_t j, int32_t world, int32_t rank, int32_t interleave) {
  return j / interleave * (int64_t{interleave} * world) + int64_t{rank} * interleave +
         j % interleave;
}

// How many of the global positions 0..len-1 live on `rank`: its local length. Local positions
// keep the order of the global ones, so the global positions < n on a rank are its first
// cp_local_len(n, ...) local ones (a causal bound is a local prefix).
constexpr int64_t cp_local_len(int64_t len, int32_t world, int32_t rank, int32_t interleave) {
  const int64_t round = int64_t{interleave} * world;
  const int64_t rest = len % round - int64_t{rank} * interleave;
  return len / round * interleave + (rest < 0 ? 0 : rest > interleave ? interleave : rest);
}

// The longest local length of the problem's rank for global lengths up to max_seq_len (what its
// workspace and block table must hold); max_seq_len without context parallelism.
constexpr int64_t cp_local_max_seq_len(const Problem& p) {
  return cp_local_len(p.max_seq_len, p.cp_world, p.cp_rank, p.cp_interleave);
}

// ---------------------------------------------------------------------------------------------
// merge_partials: per row (request i, token t, head h), with lse_k the partial LSE of rank k:
//   m = max_k lse_k;  w_k = exp(lse_k - m);  out = sum_k w_k out_k / sum_k w_k
//   lse = m + log(sum_k w_k)                                  (natural log)
//   with sinks: out *= 1 / (1 + exp(sinks[h] - lse))          (lse unchanged)
// A partial with lse_k = -inf contributes nothing (its out_k is not read: it may hold anything);
// a row whose partials are all -inf gives out 0 and lse -inf. Partial LSEs are finite or -inf
// (what the decode writes); accumulation is in fp32. With lse_base2 the partial LSEs are given
// and lse is written in base 2 (Problem::lse_base2: w_k = exp2(lse_k - m), lse = m +
// log2(sum_k w_k)); the sinks stay natural-log logits.
// ---------------------------------------------------------------------------------------------
struct MergeArgs {
  int32_t world = 0;           // N partials, 1..kMaxCpWorld
  int32_t batch = 0;           // b, >= 0 (0 is a no-op)
  int32_t s_q = 1;             // 1..kMaxSq
  int32_t h_q = 0;             // 1..kMaxHeads
  DType dtype = DType::kBF16;  // of partial_out and out: bf16, fp16 or fp32
  // Contiguous per partial, the out tensors 16-byte aligned; partial k at k times the stride
  // below (0: right after partial k - 1, i.e. [N, b, s_q, h_q, 512] and [N, b, s_q, h_q]).
  const void* partial_out = nullptr;   // [N, b, s_q, h_q, 512] of dtype
  const float* partial_lse = nullptr;  // [N, b, s_q, h_q] natural log, -inf = empty partial
  // Elements from partial k's first to partial k + 1's: 0, or from b s_q h_q 512 (out, a
  // multiple of 8: 16 bytes of bf16) and b s_q h_q (lse) up to 2^40. (The NCCL merge's in-place
  // exchange keeps each rank's out and LSE side by side: cp_nccl.h.)
  int64_t partial_out_stride = 0;
  int64_t partial_lse_stride = 0;
  const float* sinks = nullptr;  // [h_q] sink logits, or null (-inf: no sink for that head)
  void* out = nullptr;           // [b, s_q, h_q, 512] of dtype
  float* lse = nullptr;          // [b, s_q, h_q] or null: the global LSE
  bool lse_base2 = false;        // partial_lse and lse in base 2 (Problem::lse_base2)
};

// Device kCpu: host pointers, synchronous. Device kCuda: device pointers of the current device,
// asynchronous on `stream`, no allocation or host synchronization (graph-capturable);
// kUnsupported in a build without CUDA. out and lse may not overlap the inputs.
Status merge_partials(ops::Device device, const MergeArgs& args, Stream stream = nullptr);

}  // namespace mlakit
