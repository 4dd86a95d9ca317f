// Context parallelism (Problem::cp_world > 1) on the GPU backends: a rank's local lengths and the
// causal bounds of its MTP tokens, counted from the GLOBAL lengths by a small kernel that runs
// before the decode (graph-capturable, PDL-chained like the plan and compaction kernels).
// Variable query lengths (Problem::var_q, dense) take the same kernel, with or without context
// parallelism: token t of request i sees positions < L_i - q_len_i + 1 + t, which is not the
// kernels' uniform bound, and a request with q_len 0 gets length 0 (no chunk is run for it; the
// kernels write no row past q_len_i: plan::RowView::live_rows). The
// decode kernels then read the local lengths as they read any lengths, so their code for problems
// without context parallelism is unchanged; only a causal bound reads causal_bounds when set
// (DecodeParamsBase). Counting in the decode kernels instead (in every chunk iterator and plan
// loop) cost every problem 1.9% (up to 5.8%) at batch 1 and 8 on the H200
// (bench/results/2026-11-27-h200-checks-4).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "mlakit/mlakit.h"

namespace mlakit::plan {

// How a rank turns a request's GLOBAL length in seq_lens into the number of its tokens in its
// cache: clamped to [0, max_len], counted on this rank (mlakit/cp.h, cp_local_len), then clamped
// to [0, max_local], what the rank's block table reaches. Local positions keep the global order,
// so a causal bound is a local prefix too (causal_bound).
struct Lengths {
  int32_t max_len;    // global lengths are clamped to [0, max_len]
  int32_t max_local;  // local lengths are clamped to [0, max_local]
  // I * N and r * I (each at most max_len + 1, which changes no count of a clamped length and
  // keeps them in 32 bits), and I.
  int32_t cp_round, cp_offset, cp_interleave;

  // The tokens of this rank among global positions [0, g), g <= max_len (none if g <= 0).
  __host__ __device__ __forceinline__ int32_t on_rank(int32_t g) const {
    if (g <= 0) return 0;
    const uint32_t rounds = static_cast<uint32_t>(g) / static_cast<uint32_t>(cp_round);
    const int32_t rest = g - static_cast<int32_t>(rounds) * cp_round - cp_offset;
    const int32_t local =
        static_cast<int32_t>(rounds) * cp_interleave + clamp(rest, 0, cp_interleave);
    return local < max_local ? local : max_local;
  }
  // A request's tokens in this cache, from its entry in seq_lens.
  __host__ __device__ __forceinline__ int32_t of(int32_t len) const {
    return on_rank(clamp(len, 0, max_len));
  }
  // With causal MTP: the tokens in this cache that a query token `back` positions before the
  // request's last one sees (global positions < L - back), from the request's entry in seq_lens.
  __host__ __device__ __forceinline__ int32_t causal_bound(int32_t len, int32_t back) const {
    return on_rank(clamp(len, 0, max_len) - back);
  }

 private:
  __host__ __device__ static constexpr int32_t clamp(int32_t v, int32_t lo, int32_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
  }
};

// The Lengths of a rank of `given` (a dense context-parallel or var_q problem; without context
// parallelism, rank 0 of 1: the lengths clamped) whose block table holds
// `table_tokens` tokens a row (block_table_stride * page_size).
Lengths cp_lengths(const Problem& given, int64_t table_tokens);

struct CpLengthsParams {
  const int32_t* seq_lens;  // [batch] global lengths (RunArgs::seq_lens)
  int32_t* local_lens;      // [batch] out: the rank's tokens per request
  int32_t* causal_bounds;   // [batch, s_q] out with causal MTP (else null): tokens token t sees
  // [batch + 1] with var_q (RunArgs::cu_seqlens_q), else null: q_len_i, clamped to 0..s_q. The
  // bounds of tokens t >= q_len_i (absent) are the whole length, so they still grow with t.
  const int32_t* cu_seqlens_q;
  int32_t batch;
  int32_t s_q;
  Lengths lens;
};

// Workspace bytes for the local lengths and bounds of `given` (0 without context parallelism and
// var_q, or for a sparse problem, whose indices are already local), 256-aligned.
size_t cp_lengths_bytes(const Problem& given);
// The run's parameters, the outputs in `region` (cp_lengths_bytes(given) bytes).
CpLengthsParams cp_lengths_params(const Problem& given, const RunArgs& args, void* region);
Status launch_cp_lengths(const CpLengthsParams& params, cudaStream_t stream, bool pdl);

}  // namespace mlakit::plan
