// Compile-time configuration of the sm80 decode kernel: tile sizes, warp layouts, pipeline depth
// and the shared-memory layout. The kernel is written once against a TileConfig; four configs
// are instantiated.
//   TileM64Roles: 64 query rows, 4 score warps and 8 output warps (64 x 64 of O each) in a
//            producer-consumer loop (decode_roles.cuh), where at least 3 KV stages fit (sm_90: 4).
//            The score warps work in pairs on 32 rows split over the dims (qk_pairs.cuh) and then
//            hold 16 whole rows each for the softmax (the score layout below with one column
//            group); setmaxnreg splits the registers between the roles. h_q 128, batch 64,
//            L 4096: 226-229 us against 337 for TileM64 (H200, 2026-11-24, docs/sm80-decode.md
//            items 21-23).
// The other three run the plain loop with split-K scores (qk_split_k.cuh: a warp holds its rows
// of Q for a share of the 576 dims in registers or reads it from shared memory, and computes
// partial scores for all 32 tokens of a tile):
//   TileM64: 64 query rows, 8 warps; on sm_80 (163 KB: 2 stages) and for tactics 2 and 3.
//            Scores: 4 row groups x 2 halves of the dims, Q read from shared memory per k-step.
//            Output: 8 column eighths (64 rows x 64 columns per warp). Q in registers bought
//            nothing here: with 12 of a warp's 18 k-steps held (48 registers; 255 in all,
//            spilling outside the tile loop) h_q 128, batch 64, L 4096 took 339-340 us, with
//            none 334-337 (h_q 64: 187 -> 182-184; H200, 2026-11-24): the tile is bound neither
//            by shared-memory bandwidth nor by the tensor pipe (docs/sm80-decode.md, item 20).
//            Against the token-split scores it replaced (4 row groups x 2 token halves) the
//            split-K scores read 40% less shared memory and ran 7% faster; the 8 column eighths
//            read 20% less than 2 row groups x 4 quarters for P V and gained 2%.
//   TileM32: 32 query rows, 8 warps. Scores: 2 row groups x 4 quarters of the dims; output: 8
//            column eighths of 64 (32 rows each). For 17..32 rows (h_q 32, or h_q 16 with s_q 2).
//   TileM16: 16 query rows, 4 warps. Scores: 4 quarters of the dims; output: 4 column quarters
//            of 128. For h_q * s_q <= 16 (h_q 16 at tensor parallel 8), which must run at HBM
//            speed.
// All: KV tiles of 32 tokens x 576, loaded once and used as K (576) and V (first 512).
#pragma once

#include <cstddef>
#include <cstdint>

#include "mlakit/mlakit.h"
#include "plan/plan.h"

namespace mlakit::sm80 {

inline constexpr int kBlockN = 32;                 // KV tokens per tile
inline constexpr int kRowBytes = kDqk * 2;         // 1152: one token (or query row) of 576
inline constexpr int kRowChunks = kRowBytes / 16;  // 72 16-byte chunks per row
inline constexpr int kVChunks = kDv * 2 / 16;      // 64 chunks of V per token
inline constexpr int kKSteps = kDqk / 16;          // 36 k-steps of 16 in Q K^T
static_assert(kRowChunks % 8 == 0, "the swizzle permutes chunks within groups of 8");

// The tile loop of a config:
//   kPlain: every warp computes scores, then softmax, then P V, barriers between
//       (decode_kernel.cuh).
//   kRoles: score warps (scores in pairs, then softmax and P over whole rows) and output warps
//       (P V, KV copies) in a producer-consumer pipeline over mbarriers and one barrier of all
//       threads per tile (decode_roles.cuh). Needs kMinRolesStages.
enum class Loop : int { kPlain, kRoles };

template <int kRows_, int kSRowGroups_, int kSColGroups_, int kORowGroups_, int kOColGroups_,
          int kQRegSteps_ = kKSteps, Loop kLoop_ = Loop::kPlain>
struct TileConfig {
  static constexpr int kRows = kRows_;  // query rows per tile
  static constexpr Loop kLoop = kLoop_;
  static constexpr bool kRoles = kLoop_ == Loop::kRoles;
  // With kRoles the score warps come first, then the output warps; otherwise every warp takes
  // both roles.
  static constexpr int kScoreWarps = kSRowGroups_ * kSColGroups_;
  static constexpr int kOutWarps = kORowGroups_ * kOColGroups_;
  static constexpr int kWarps = kRoles ? kScoreWarps + kOutWarps : kScoreWarps;
  static constexpr int kThreads = 32 * kWarps;

  // Scores S = Q K^T, split-K: warp (rg, kg) takes its 16 rows x (576 / kSColGroups) dims of Q
  // (in registers, loaded once per chunk, or from shared memory per tile; kQRegSteps) and
  // computes partial scores of all kBlockN tokens; the partials meet in shared memory, where warp
  // (rg, tg) sums those of its kSTokens tokens. With the token split every score warp re-read all
  // of Q per tile, 4x the tile's own bytes at 16 rows; here each warp runs kBlockN / 8 independent
  // mma chains.
  static constexpr int kSRowGroups = kSRowGroups_;
  static constexpr int kSColGroups = kSColGroups_;
  static constexpr int kSRows = kRows / kSRowGroups;
  static constexpr int kSTokens = kBlockN / kSColGroups;
  static constexpr int kSNTiles = kSTokens / 8;
  static constexpr int kKStepsPerWarp = kKSteps / kSColGroups;
  // Of those, the first kQRegSteps are held in registers for the whole chunk, the rest read from
  // shared memory per tile.
  static constexpr int kQRegSteps = kQRegSteps_ < kKStepsPerWarp ? kQRegSteps_ : kKStepsPerWarp;
  static constexpr int kScoreParts = kWarps * (kBlockN / 8) * 32 * 4;  // floats

  // Output O += P V: warp (row group, column group) owns kORows x kOCols accumulators.
  static constexpr int kORowGroups = kORowGroups_;
  static constexpr int kOColGroups = kOColGroups_;
  static constexpr int kORows = kRows / kORowGroups;
  static constexpr int kOMTiles = kORows / 16;
  static constexpr int kOCols = kDv / kOColGroups;
  static constexpr int kONTiles = kOCols / 8;

  // KV loads: groups of 8 threads copy 128 contiguous bytes of one token; kLoadThreads threads
  // take part (with kRoles the output warps' first ones, else the first; at most 8 per token).
  static constexpr int kCopyThreads = kRoles ? 32 * kOutWarps : kThreads;
  static constexpr int kLoadThreads = kCopyThreads < 8 * kBlockN ? kCopyThreads : 8 * kBlockN;
  static constexpr int kLoadTokensPerPass = kLoadThreads / 8;
  static constexpr int kLoadPasses = kBlockN / kLoadTokensPerPass;  // tokens per thread

  static_assert(kRoles || kOutWarps == kWarps, "both layouts use every warp");
  static_assert(!kRoles || kSColGroups_ == 1, "score warps own whole rows");
  static_assert(kSRows == 16, "a score warp owns one m16 tile of rows");
  static_assert(kORows % 16 == 0 && kOMTiles >= 1);
  static_assert(kONTiles % 2 == 0, "V fragments load two n8 tiles per ldmatrix.x4.trans");
  static_assert(kBlockN % 16 == 0, "P V runs k-steps of 16 tokens");
  static_assert(kBlockN % kLoadTokensPerPass == 0 && kLoadPasses >= 1);
  static_assert((kSColGroups == 1 || kSColGroups == 2 || kSColGroups == 4) && kKSteps % 4 == 0,
                "kRun = 4 / kSColGroups of every 4 k-steps per warp (qk_split_k.cuh)");
};

using TileM64 = TileConfig<64, /*S*/ 4, 2, /*O*/ 1, 8, /*Q in registers*/ 1>;
using TileM64Roles =
    TileConfig<64, /*S*/ 4, 1, /*O*/ 1, 8, /*Q in registers: qk_pairs.cuh*/ 0, Loop::kRoles>;
using TileM32 = TileConfig<32, /*S*/ 2, 4, /*O*/ 1, 8>;
using TileM16 = TileConfig<16, /*S*/ 1, 4, /*O*/ 1, 4>;
// The fp8 cache's 16-row tile: a KV tile in flight in registers (loads_fp8.cuh, 36 per thread)
// leaves room for 1 of the 9 k-steps of Q held in registers (9 spilled 64 bytes on sm_90a, 2 still
// 8).
using TileM16Fp8 = TileConfig<16, /*S*/ 1, 4, /*O*/ 1, 4, /*Q in registers*/ 1>;

enum class TileKind : int32_t {
  kM16 = 0,
  kM32 = 1,
  kM64 = 2,
};

// KV pipeline depth: a runtime choice (launch.cc), as many stages as the shared memory of the
// CTA's share of an SM holds, up to kMaxStages: sm_80 (163 KB) fits 2 stages of the 64-row tile,
// sm_90 (227 KB) 3; the 16-row tile runs two CTAs of 2 stages per SM on sm_90 (5 for one CTA ran
// 16% slower at h_q 16, batch 64: its 4 warps alone leave the SM idle on their latencies).
inline constexpr int kMinStages = 2;
// kRoles at a tile's barrier: tile t (P V next), t + 1 (its softmax pending, its V still needed),
// t + 2 (scores). A fourth stage gives the copies a tile of slack (decode_roles.cuh).
inline constexpr int kMinRolesStages = 3;
inline constexpr int kMaxStages = 5;
inline constexpr uint32_t kStageBytes = kBlockN * kRowBytes;  // 36 KB

// Shared memory of one CTA: this struct, then `stages` KV tiles of kStageBytes (kv_stage()); the
// dynamic allocation is smem_bytes(stages). Q and KV rows are 1152 bytes with the 16-byte chunks
// of row r permuted by XOR with (r & 7), so that the 8 row addresses of an ldmatrix hit 8
// different bank groups; P rows (64 bytes) XOR their 4 chunks with (r >> 1) & 3.
//
// The split-K partials of a tile are consumed before its P is written, and P is consumed before
// the next tile's partials are written (barriers between each): one buffer for both.
template <typename T, typename Cfg, Loop = Cfg::kLoop>
struct ScoreBuffers {
  union alignas(128) {
    T p[Cfg::kRows * kBlockN];            // probabilities of the current tile
    float score_parts[Cfg::kScoreParts];  // [warp][n8 tile][lane][4] partial scores
  };
};
// kRoles: P and alpha of two tiles (the score warps write tile t + 1 while the output warps read
// tile t) and one mbarrier per KV stage that completes when the stage's copies have landed
// (decode_roles.cuh). The score warp pairs swap their partial scores through bytes of the Q tile.
template <typename T, typename Cfg>
struct ScoreBuffers<T, Cfg, Loop::kRoles> {
  alignas(128) T p_buf[2][Cfg::kRows * kBlockN];
  float alpha_buf[2][Cfg::kRows];
  uint64_t kv_full[kMaxStages];
  int32_t tile_pages[2][kBlockN];  // page ids of the next tiles the output warps copy
};

template <typename T, typename Cfg>
struct alignas(128) SharedStorage : ScoreBuffers<T, Cfg> {
  alignas(128) T q[Cfg::kRows * kDqk];
  float tile_max[Cfg::kSColGroups][Cfg::kRows];  // per token group: row max of the tile
  float row_sum[Cfg::kSColGroups][Cfg::kRows];   // per token group: softmax denominators
  float alpha[Cfg::kRows];                       // rescale of O for the current tile
  float row_scale[Cfg::kRows];                   // epilogue: 1 / sum (times the sink factor)
  // Bit j: token j of the tile in stage i is in a bad page (plan/page_mask.cuh). Published with the
  // tile by whoever read its page ids: the copying threads OR theirs in (plain loop,
  // decode_kernel.cuh), score warp 0 stores the word (kRoles, decode_roles.cuh).
  uint32_t bad_tokens[kMaxStages];
  plan::PartPlan part;  // persistent: this CTA's part

  static constexpr size_t smem_bytes(int stages) {
    return sizeof(SharedStorage) + static_cast<size_t>(stages) * kStageBytes;
  }
};
static_assert(kStageBytes % 128 == 0);

}  // namespace mlakit::sm80
