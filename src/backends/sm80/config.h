// Compile-time configuration of the sm80 decode kernel: tile sizes, warp layouts, pipeline depth
// and the shared-memory layout. The kernel is written once against a TileConfig; two configs are
// instantiated:
//   TileM64: 64 query rows, 8 warps. Scores: 4 row groups x 2 token halves (16 x 16 per warp).
//            Output: 2 row groups x 4 column quarters (32 rows x 128 columns per warp, 128 fp32
//            accumulators per thread). The two layouts differ on purpose: the score layout reads
//            Q twice and K four times per tile, the output layout reads V twice; one layout for
//            both would read 25% more shared memory, which bounds this kernel at h_q 128.
//   TileM32: 32 query rows, 8 warps. Scores: 2 row groups x 4 quarters of the 576 dims (split-K,
//            Q in registers); output: 8 column eighths of 64 (32 rows each). For 17..32 rows
//            (h_q 32, or h_q 16 with s_q 2).
//   TileM16: 16 query rows, 4 warps. Scores: 4 quarters of the 576 dims (split-K); output: 4
//            column quarters of 128. For h_q * s_q <= 16 (h_q 16 at tensor parallel 8), which
//            must run at HBM speed.
// Both: KV tiles of 32 tokens x 576, loaded once and used as K (576) and V (first 512).
#pragma once

#include <cstddef>
#include <cstdint>

#include "mlakit/mlakit.h"

namespace mlakit::sm80 {

inline constexpr int kBlockN = 32;                 // KV tokens per tile
inline constexpr int kRowBytes = kDqk * 2;         // 1152: one token (or query row) of 576
inline constexpr int kRowChunks = kRowBytes / 16;  // 72 16-byte chunks per row
inline constexpr int kVChunks = kDv * 2 / 16;      // 64 chunks of V per token
inline constexpr int kKSteps = kDqk / 16;          // 36 k-steps of 16 in Q K^T
static_assert(kRowChunks % 8 == 0, "the swizzle permutes chunks within groups of 8");

template <int kRows_, int kSRowGroups_, int kSColGroups_, int kSKSplit_, bool kSplitK_,
          int kORowGroups_, int kOColGroups_>
struct TileConfig {
  static constexpr int kRows = kRows_;  // query rows per tile
  static constexpr int kWarps = kSRowGroups_ * kSColGroups_;
  static constexpr int kThreads = 32 * kWarps;

  // Scores S = Q K^T: warp (row group, token group) computes kSRows x kSTokens.
  static constexpr int kSRowGroups = kSRowGroups_;
  static constexpr int kSColGroups = kSColGroups_;
  static constexpr int kSRows = kRows / kSRowGroups;
  static constexpr int kSTokens = kBlockN / kSColGroups;
  static constexpr int kSNTiles = kSTokens / 8;
  // Independent accumulator sets along k (summed at the end): the 36 k-steps would otherwise be
  // one chain of dependent mma per n8 tile, and the warp would wait on mma latency.
  static constexpr int kSKSplit = kSKSplit_;
  // Split-K scores: warp (rg, kg) keeps its 16 rows x (576 / kSColGroups) dims of Q in registers
  // (loaded once per chunk) and computes partial scores of all kBlockN tokens; the partials meet
  // in shared memory, where warp (rg, tg) sums those of its kSTokens tokens. No Q is read from
  // shared memory per tile (with the token split every score warp re-reads all of Q, 4x the
  // tile's own bytes at 16 rows), and each warp runs kBlockN / 8 independent mma chains.
  static constexpr bool kSplitK = kSplitK_;
  static constexpr int kKStepsPerWarp = kKSteps / kSColGroups;
  static constexpr int kScoreParts = kSplitK ? kWarps * (kBlockN / 8) * 32 * 4 : 4;  // floats

  // Output O += P V: warp (row group, column group) owns kORows x kOCols accumulators.
  static constexpr int kORowGroups = kORowGroups_;
  static constexpr int kOColGroups = kOColGroups_;
  static constexpr int kORows = kRows / kORowGroups;
  static constexpr int kOMTiles = kORows / 16;
  static constexpr int kOCols = kDv / kOColGroups;
  static constexpr int kONTiles = kOCols / 8;

  // KV loads: groups of 8 threads copy 128 contiguous bytes of one token.
  static constexpr int kLoadTokensPerPass = kThreads / 8;
  static constexpr int kLoadPasses = kBlockN / kLoadTokensPerPass;  // tokens per thread

  static_assert(kORowGroups_ * kOColGroups_ == kWarps, "both layouts use every warp");
  static_assert(kSRows == 16, "a score warp owns one m16 tile of rows");
  static_assert(kSNTiles == 1 || kSNTiles % 2 == 0, "K fragments load as x2 or pairs of x4");
  static_assert(kORows % 16 == 0 && kOMTiles >= 1);
  static_assert(kONTiles % 2 == 0, "V fragments load two n8 tiles per ldmatrix.x4.trans");
  static_assert(kBlockN % 16 == 0, "P V runs k-steps of 16 tokens");
  static_assert(kBlockN % kLoadTokensPerPass == 0 && kLoadPasses >= 1);
  static_assert(kKSteps % kSKSplit == 0, "the k-steps are dealt round-robin to the sets");
  static_assert(!kSplitK || (kKSteps % kSColGroups == 0 && kSNTiles == 1 && kSKSplit == 1),
                "split-K: whole k-steps per warp; one n8 tile of tokens per warp after the sum");
};

using TileM64 = TileConfig<64, /*S*/ 4, 2, /*k sets*/ 2, /*split-K*/ false, /*O*/ 2, 4>;
using TileM32 = TileConfig<32, /*S*/ 2, 4, /*k sets*/ 1, /*split-K*/ true, /*O*/ 1, 8>;
using TileM16 = TileConfig<16, /*S*/ 1, 4, /*k sets*/ 1, /*split-K*/ true, /*O*/ 1, 4>;

enum class TileKind : int32_t {
  kM16 = 0,
  kM32 = 1,
  kM64 = 2,
};

// KV pipeline depth: a runtime choice, as many stages as the device's shared memory holds (up to
// kMaxStages): sm_80 (163 KB) fits 2 stages of the 64-row tile and 3 of the 16-row one, sm_90
// (227 KB) 4 and 5. Measured (H100, 2026-11), depth matters less than expected: 3, 4 and 5
// stages of the 16-row tile at h_q 16 ran within 5% of each other, and 2 CTAs x 2 stages per SM
// the same; the kernel sits at about 75% of DRAM peak there, bound by something not yet
// established (not instruction issue: ncu shows 0.15 issued warps per scheduler and cycle).
// Deeper costs nothing where shared memory is otherwise unused.
inline constexpr int kMinStages = 2;
inline constexpr int kMaxStages = 5;
inline constexpr uint32_t kStageBytes = kBlockN * kRowBytes;  // 36 KB

// Shared memory of one CTA: this struct, then `stages` KV tiles of kStageBytes (kv_stage()); the
// dynamic allocation is smem_bytes(stages). Q and KV rows are 1152 bytes with the 16-byte chunks
// of row r permuted by XOR with (r & 7), so that the 8 row addresses of an ldmatrix hit 8
// different bank groups; P rows (64 bytes) XOR their 4 chunks with (r >> 1) & 3.
template <typename T, typename Cfg>
struct alignas(128) SharedStorage {
  alignas(128) T q[Cfg::kRows * kDqk];
  alignas(128) T p[Cfg::kRows * kBlockN];           // probabilities of the current tile
  float tile_max[Cfg::kSColGroups][Cfg::kRows];     // per token group: row max of the tile
  float row_sum[Cfg::kSColGroups][Cfg::kRows];      // per token group: softmax denominators
  float alpha[Cfg::kRows];                          // rescale of O for the current tile
  float row_scale[Cfg::kRows];                      // epilogue: 1 / sum (times the sink factor)
  alignas(16) float score_parts[Cfg::kScoreParts];  // split-K: [warp][n8 tile][lane][4] partials

  static constexpr size_t smem_bytes(int stages) {
    return sizeof(SharedStorage) + static_cast<size_t>(stages) * kStageBytes;
  }
};
static_assert(kStageBytes % 128 == 0);

}  // namespace mlakit::sm80
