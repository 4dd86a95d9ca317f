// Compile-time configuration of the sm90 decode kernel: tile sizes, thread roles and the
// shared-memory plan (docs/sm90-decode.md).
//
// One CTA computes a tile of 64 query rows ((token, head) pairs of one request) against 64-token
// KV blocks. 384 threads: two consumer warpgroups and one producer warpgroup, of which one
// warp works (ptxas sizes registers per warpgroup: a lone producer warp costs as much).
//  - producer warp: issues the TMA copies (Q tile once per chunk, then each KV block) into a ring
//    of kStages stages, lane j the 64-column chunk j, each completing on its own mbarrier.
//  - consumer warpgroups, out of phase: warpgroup w owns the blocks of stage w (every other
//    block). For its own block it computes S = Q K^T (wgmma m64n64), the running row max and
//    P = exp(S - max), writes P over the stage's rope chunk (K columns 512..575, no longer
//    needed once S is done) and publishes the max to the other warpgroup. Both accumulate
//    O[:, 256w..256w+255] += P V over every block (wgmma m64n256, 128 fp32 registers), so one
//    warpgroup's softmax runs while the other's MMAs do.
// Shared memory, all operand tiles in 1024-byte atoms with the 128-byte swizzle that TMA writes
// and wgmma reads: Q 64 x 576 (9 column chunks of 64 x 64), kStages KV blocks 64 x 576 (P in the
// last chunk), then the barriers and the exchange. 219 KB of the 227 KB an sm_90 CTA may have.
//
// The narrow tile (16 or 32 query rows, for h_q x s_q up to 32; launch.h): the same producer and
// stages, but the products transposed so that the rows are wgmma's N: S^T = K Q^T (m64nNk16, A =
// the block's K) and O^T += V^T P^T (eight m64nNk16 per 16 tokens, A = V MN-major, B = P^T in
// the warpgroup's share of the exchange buffer). O^T of all 512 columns is 64 (N 16) or 128 (N 32)
// registers, so each consumer warpgroup computes its own blocks alone (its own max, sums and O^T,
// no exchange per block); the two meet once per chunk, through the exchange buffer after the stages
// (16 rows of fp32 at a time).
#pragma once

#include <cstddef>
#include <cstdint>

#include "mlakit/mlakit.h"
#include "plan/plan.h"

namespace mlakit::sm90 {

inline constexpr int kRows = 64;                            // query rows per tile (wgmma M)
inline constexpr int kBlockN = 64;                          // KV tokens per block
inline constexpr int kChunkElems = 64;                      // elements per swizzled 128-byte row
inline constexpr int kQkChunks = kDqk / 64;                 // 9 column chunks of Q and K
inline constexpr int kChunkBytes = 64 * 128;                // one column chunk of 64 rows: 8 KB
inline constexpr int kTileBytes = kQkChunks * kChunkBytes;  // 72 KB: 64 rows x 576
inline constexpr int kStages = 2;
// The most stages of any tile (the fp8 tile's: Fp8Layout); the barrier arrays are sized for it.
inline constexpr int kMaxStages = 4;
inline constexpr int kConsumerThreads = 256;             // two warpgroups
inline constexpr int kThreads = kConsumerThreads + 128;  // and the producer warpgroup
// Registers per thread after setmaxnreg. A CTA of 384 threads starts with 168 each (65536 / 384,
// rounded down to 8), and setmaxnreg.inc only takes what setmaxnreg.dec gave back: 128 producer
// plus 256 consumer registers must stay within 168 x 384 (past it the consumers wait forever).
// Chosen per tile from ptxas's spill report (sm_90a, nvcc 13.0). At 40, the 16-bit tiles'
// producers spilled 32-132 bytes a kernel (page walk, gather, widening): the wide and 16-row
// tiles take 64 / 216 (no spills); the V4 gather and the 32-row tile 56 / 224 (fewest). The
// e4m3-cache tiles' consumers need 232 (at 224 they spill) and their producer fits 40.
struct RegisterSplit {
  int producer, consumer;
};
constexpr RegisterSplit register_split(int tile_rows, bool fp8_kv, bool v4) {
  if (fp8_kv) return {40, 232};
  if (v4 || tile_rows == 32) return {56, 224};
  return {64, 216};
}
constexpr bool fits_launch(RegisterSplit r) {
  return 128 * r.producer + 256 * r.consumer <= 168 * 384;
}
static_assert(fits_launch(register_split(64, false, false)) &&
              fits_launch(register_split(32, false, true)) &&
              fits_launch(register_split(16, true, false)));
inline constexpr int kColsPerWarpgroup = kDv / 2;  // O columns of one warpgroup
inline constexpr int kVChunksPerWarpgroup = kColsPerWarpgroup / kChunkElems;
inline constexpr int kPChunk = kQkChunks - 1;  // P of a block goes over its rope chunk
// Widen::kFp8 (params.h): the e4m3 column chunks of a block (64 tokens x 64 bytes) land in the
// second half of the 16-bit stage (decode_kernel.cuh, widen_fp8).
inline constexpr int kFp8RawChunkBytes = kBlockN * 64;
inline constexpr int kFp8RawOffset = kTileBytes / 2;
static_assert(kFp8RawOffset + kQkChunks * kFp8RawChunkBytes == kTileBytes);
static_assert(kDqk % 64 == 0 && kDv % 128 == 0 && kPChunk * kChunkElems == kDv);
static_assert(kStages == 2, "warpgroup w owns the blocks of stage w");
// Cluster schedule (plan.h): the most CTAs per cluster, the portable limit.
inline constexpr int kMaxClusterCtas = 8;
// Rows of a CTA's fp32 result in shared memory (the cluster merge, the narrow tile's epilogue):
// 520 floats apart, against bank conflicts.
inline constexpr int kMergeStride = kDv + 8;
// The narrow tile's epilogue merges and writes 16 rows at a time.
inline constexpr int kNarrowPassRows = 16;

// Barriers and the exchange between the consumer warpgroups, after the operand tiles.
struct SmallStorage {
  uint64_t full[kMaxStages][kQkChunks];  // column chunk j of a KV block landed (producer + bytes)
  // The consumers are done with the stage: both warpgroups (wide tile), or the 128 threads of the
  // warpgroup that owns it (fp8 tile).
  uint64_t empty[kMaxStages];
  uint64_t chunk_empty[kMaxStages][kQkChunks];  // narrow tile: column chunk j of the stage consumed
  uint64_t q_full;                              // Q tile landed
  uint64_t q_empty;                             // both consumer warpgroups done with Q
  uint64_t wg_sync[2];       // narrow tile: warpgroup w's 128 threads meet (twice a block)
  uint64_t dequant_sync[2];  // sparse V3.2 / V4: warpgroup w's 128 threads widening a block
  // Widen::kFp8: the stage's block widened by the warpgroup that does not own it (128)
  uint64_t widened[kMaxStages];
  // Per stage: bit j set when token j of its block lies in a page whose block-table id is out of
  // range (written by the producer before the stage's chunk-0 barrier; 0 for the gathers).
  uint64_t bad_tokens[kMaxStages];
  uint64_t published[2];       // warpgroup w's block: its max and P are out (128)
  float row_max[2][kRows];     // per warpgroup: the running max after its last block
  float red_sum[2][2][kRows];  // per chunk parity and warpgroup: softmax denominators
  float merge_lse[kRows];      // cluster schedule: this CTA's LSE per row, for the merge
  float merge_weight[kRows][kMaxClusterCtas];  // and the weights of the S results per merged row
  plan::PartPlan part;                         // persistent: this CTA's part
  // Narrow tile: per warpgroup and warp, the block's column (query row) max of its 16 tokens;
  // then, at the chunk's end, the sums per warp and each warpgroup's max.
  float col_max[2][4][32];
  float wg_sum[2][4][32];
  float wg_max[2][32];
  float col_factor[2][32];  // and each warpgroup's factor per column (its max's and 1 / sum)
  float q_row_scale[32];    // the narrow tile's split of a bf16 q: each row's 2^-k
  // Sparse decode of the V3.2 cache (gather.cuh): each token's four fp32 scales, per stage; of
  // the V4 cache: its 8 scale bytes (7 UE8M0 and the pad) in the first 8 bytes.
  float4 gather_scale[kStages][kBlockN];
};

// The shared-memory plan of a tile of kTileRows query rows (64: the wide tile; 16, 32: narrow).
// The producer reads its stages, chunks and release mode from here (and from Fp8Layout).
template <int kTileRows>
struct Layout {
  static constexpr int kStages = sm90::kStages;
  static constexpr int kKvChunkBytes = kChunkBytes;  // one column chunk of a KV block
  static constexpr int kStageBytes = kTileBytes;
  // How the consumers give a stage back: chunk by chunk (chunk_empty; the narrow tile) or whole
  // (empty, with this many arrivals).
  static constexpr bool kReleasePerChunk = kTileRows != kRows;
  static constexpr int kEmptyArrivals = 2;
  static constexpr int kQChunkBytes = kTileRows * 128;  // one column chunk of the Q tile
  static constexpr int kQBytes = kQkChunks * kQChunkBytes;
  static constexpr size_t kQOffset = 0;
  static constexpr size_t kKvOffset = kQOffset + kQBytes;
  static constexpr size_t kExchangeOffset = kKvOffset + size_t{kStages} * kTileBytes;
  static constexpr size_t kExchangeBytes =
      kTileRows == kRows ? 0 : size_t{kNarrowPassRows} * kMergeStride * 4;
  static constexpr size_t kSmallOffset = kExchangeOffset + kExchangeBytes;
  // The dynamic allocation: the layout above from a 1024-aligned base inside it.
  static constexpr size_t kSmemBytes = kSmallOffset + sizeof(SmallStorage) + 1024;
  static_assert(kTileRows == 16 || kTileRows == 32 || kTileRows == kRows);
  static_assert(kQChunkBytes % 1024 == 0, "swizzle atoms stay 1024-aligned");
  static_assert(kSmemBytes <= 227 * 1024, "an sm_90 CTA has at most 227 KB");
  static_assert(size_t{kTileRows} * kMergeStride * 4 <= size_t{kStages} * kTileBytes,
                "the result fits over the KV stages (cluster merge)");
};

// The fp8 (e4m3) cache's wide tile with an e4m3 q (decode_fp8_wide.cuh): Q 64 rows x 576 bytes and
// 4 stages of KV blocks as in Fp8Layout; per warpgroup a V^T tile of its 256 output dims x 64
// tokens (64-byte rows, the 64-byte swizzle; wgmma's B of O += P V must be K-major for 8-bit
// types) that it transposes from each block. A block's P goes to the other warpgroup over the
// stage's rope chunk (free once S is done); the stage goes back when both warpgroups have read
// it (every consumer thread arrives). 225 KB.
// kQSplit (Widen::kQSplit, a bf16 q split into two e4m3 parts): Q twice (the high parts' 9 chunks,
// then the residuals'), three stages, and one 4 KB buffer for the residual of a block's P (the
// high part goes over the stage's rope chunk, as above). The cluster schedule is not offered there
// (its merge would not fit over three stages). 226 KB.
template <bool kQSplit>
struct Fp8WideLayoutOf {
  static constexpr int kStages = kQSplit ? 3 : kMaxStages;
  static constexpr int kKvChunkBytes = kBlockN * 64;
  static constexpr int kStageBytes = kQkChunks * kKvChunkBytes;
  static constexpr bool kReleasePerChunk = false;
  static constexpr int kEmptyArrivals = kConsumerThreads;
  static constexpr int kQChunkBytes = kRows * 64;
  static constexpr int kQBytes = (kQSplit ? 2 : 1) * kQkChunks * kQChunkBytes;
  static constexpr int kVtBytes = kColsPerWarpgroup * kBlockN;  // 16 KB per warpgroup
  static constexpr size_t kQOffset = 0;
  static constexpr size_t kKvOffset = kQOffset + kQBytes;
  static constexpr size_t kVtOffset = kKvOffset + size_t{kStages} * kStageBytes;
  static constexpr size_t kPLowOffset = kVtOffset + 2 * size_t{kVtBytes};  // kQSplit only
  static constexpr size_t kExchangeOffset = kPLowOffset + (kQSplit ? 128 * 32 : 0);
  static constexpr size_t kSmallOffset = kExchangeOffset;
  static constexpr size_t kSmemBytes = kSmallOffset + sizeof(SmallStorage) + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "an sm_90 CTA has at most 227 KB");
  static_assert(kStages <= kMaxStages);
  static_assert(kQSplit || size_t{kRows} * kMergeStride * 4 <= size_t{kStages} * kStageBytes,
                "the result fits over the KV stages (cluster merge)");
  static_assert(128 * 32 <= kKvChunkBytes, "a warpgroup's P of a block fits in its rope chunk");
};
using Fp8WideLayout = Fp8WideLayoutOf<false>;
using Fp8QSplitLayout = Fp8WideLayoutOf<true>;

// The fp8 (e4m3) cache's narrow tile (decode_fp8_narrow.cuh): KV blocks of 64 tokens x 576 bytes
// as 9 column chunks of 64 tokens x 64 bytes in the 64-byte swizzle (TMA boxes of 64 x 64 bytes),
// 4 stages (warpgroup w owns the blocks of stages w and w + 2); the Q tile in the 64-byte swizzle
// (e4m3 q) or the 128-byte one (16-bit q, as in Layout); per warpgroup a P^T tile of kTileRows x 64
// tokens (e4m3: 64-byte rows; 16-bit: 128-byte rows) in the exchange buffer, which the epilogue's
// rows reuse. 16 rows, e4m3 q: 200,320 bytes; 32 rows, 16-bit q: 227,968.
// kQSplit (a bf16 q split into two e4m3 parts by the consumers, decode_fp8_narrow.cuh): the bf16
// Q tile as TMA writes it, then its split (the high parts' 9 column chunks, then the residuals',
// e4m3 in the 64-byte swizzle); the two P^T parts (e4m3) in the 16-bit P^T tile's bytes. 16 rows:
// 227,968 bytes.
template <int kTileRows, int kQElemBytes, bool kQSplit = false>
struct Fp8Layout {
  static constexpr int kStages = kMaxStages;
  static constexpr int kKvChunkBytes = kBlockN * 64;  // 4 KB
  static constexpr int kStageBytes = kQkChunks * kKvChunkBytes;
  static constexpr bool kReleasePerChunk = false;
  static constexpr int kEmptyArrivals = 128;  // every thread of the owning warpgroup
  static constexpr int kQChunkBytes = kTileRows * 64 * kQElemBytes;
  static constexpr int kQBytes = kQkChunks * kQChunkBytes;
  static constexpr int kPBytes = kTileRows * kBlockN * kQElemBytes;  // one warpgroup's P^T
  static constexpr int kSplitQChunkBytes = kTileRows * 64;           // kQSplit
  static constexpr int kSplitQBytes = kQSplit ? 2 * kQkChunks * kSplitQChunkBytes : 0;
  static constexpr size_t kQOffset = 0;
  static constexpr size_t kSplitQOffset = kQOffset + kQBytes;
  static constexpr size_t kKvOffset = kSplitQOffset + kSplitQBytes;
  static constexpr size_t kExchangeOffset = kKvOffset + size_t{kStages} * kStageBytes;
  static constexpr size_t kExchangeBytes = size_t{kNarrowPassRows} * kMergeStride * 4;
  static constexpr size_t kSmallOffset = kExchangeOffset + kExchangeBytes;
  static constexpr size_t kSmemBytes = kSmallOffset + sizeof(SmallStorage) + 1024;
  static_assert(kTileRows == 16 || kTileRows == 32);
  static_assert(kQElemBytes == 1 || kQElemBytes == 2);
  static_assert(!kQSplit || (kQElemBytes == 2 && kTileRows == 16), "a bf16 q, 16 rows");
  static_assert(kQChunkBytes % 1024 == 0 && kStageBytes % 1024 == 0, "swizzle atoms stay aligned");
  static_assert(2 * kPBytes <= kExchangeBytes && kExchangeOffset % 1024 == 0);
  static_assert(kSmemBytes <= 227 * 1024, "an sm_90 CTA has at most 227 KB");
  static_assert(size_t{kTileRows} * kMergeStride * 4 <= size_t{kStages} * kStageBytes,
                "the result fits over the KV stages (cluster merge)");
};

}  // namespace mlakit::sm90
