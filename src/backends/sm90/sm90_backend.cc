// Registry entry of the sm90 backend: the Hopper decode kernel (wgmma, TMA, mbarriers, a producer
// warp and two consumer warpgroups) with the shared split-KV plan and combine kernel.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>

#include "backends/sm90/launch.h"
#include "core/backend.h"
#include "core/check.h"
#include "plan/compact.h"

namespace mlakit {
namespace {

constexpr std::array<int32_t, 3> kPageSizes = {32, 64, 128};

class Sm90Backend final : public Backend {
 public:
  explicit Sm90Backend(const sm90::Setup& setup) : setup_(setup) {}
  std::string_view name() const override { return "sm90"; }
  size_t workspace_bytes() const override { return setup_.workspace_bytes; }
  Status run(const RunArgs& args, void* workspace, size_t, Stream stream) const override {
    return sm90::run(setup_, args, workspace, stream);
  }

 private:
  sm90::Setup setup_;
};

Status available(const DeviceInfo& device) {
  if (!device.present) return unsupported("no CUDA device (", device.error, ")");
  if (device.sm_major != 9) {
    return unsupported("backend sm90 needs compute capability 9.0 (wgmma, TMA); ", device.name,
                       " is sm_", device.sm_major, device.sm_minor);
  }
  return Status::Ok();
}

// Sparse decode (gather.cuh): a 16-bit q; the cache 16-bit of q's type, the V3.2 blockwise or the
// V4 one, gathered into q's type; any page size (indices name cached tokens directly); an extra
// cache with the V4 layout.
Status can_run_sparse(const Problem& p) {
  if (p.q_dtype != DType::kBF16 && p.q_dtype != DType::kFP16) {
    return unsupported("q_dtype ", to_string(p.q_dtype),
                       " with sparse attention is not supported by backend sm90 (supported: bf16, "
                       "fp16)");
  }
  if (p.out_dtype != p.q_dtype) {
    return unsupported("out_dtype ", to_string(p.out_dtype), " with q_dtype ", to_string(p.q_dtype),
                       " is not supported by backend sm90 (supported: out_dtype = q_dtype)");
  }
  if (p.kv_layout == KvLayout::kDense && p.kv_dtype != p.q_dtype) {
    return unsupported("kv_dtype ", to_string(p.kv_dtype), " with sparse attention and q_dtype ",
                       to_string(p.q_dtype),
                       " is not supported by backend sm90 (supported: kv_dtype = q_dtype, or the "
                       "fp8_blockwise or fp8_v4 layout)");
  }
  if (p.has_extra() && p.kv_layout != KvLayout::kFp8V4) {
    return unsupported("an extra cache (extra_topk ", p.extra_topk, ") with kv_layout ",
                       to_string(p.kv_layout),
                       " is not supported by backend sm90 (supported: with fp8_v4)");
  }
  return Status::Ok();
}

Status can_run(const Problem& p, const DeviceInfo&) {
  if (p.sparse()) return can_run_sparse(p);
  if (p.kv_layout != KvLayout::kDense) {
    return unsupported("kv_layout ", to_string(p.kv_layout),
                       " is not supported by backend sm90 (supported: dense)");
  }
  // An fp8 cache with a 16-bit q computes in q's type and writes it.
  if (p.kv_dtype == DType::kFP8E4M3 && p.q_dtype != DType::kFP8E4M3 && p.out_dtype != p.q_dtype) {
    return unsupported("out_dtype ", to_string(p.out_dtype), " with q_dtype ", to_string(p.q_dtype),
                       " is not supported by backend sm90 (supported: out_dtype = q_dtype)");
  }
  if (std::find(kPageSizes.begin(), kPageSizes.end(), p.page_size) == kPageSizes.end()) {
    return unsupported("page_size ", p.page_size,
                       " is not supported by backend sm90 (supported: 32, 64, 128; sm80 runs 1 "
                       "and 16)");
  }
  return Status::Ok();
}

// The tactics (launch.h).
constexpr Tactic cluster = {.id = 2, .name = "cluster"},
                 persistent = {.id = 0, .name = "persistent"},
                 one_shot = {.id = 1, .name = "one-shot"};
constexpr Tactic narrow_cluster = {.id = sm90::kNarrowTactic + 2, .name = "narrow-cluster"},
                 narrow_persistent = {.id = sm90::kNarrowTactic + 0, .name = "narrow-persistent"},
                 narrow_one_shot = {.id = sm90::kNarrowTactic + 1, .name = "narrow-one-shot"};
constexpr Tactic split_persistent = {.id = sm90::kSplitTactic, .name = "split-persistent"},
                 split_one_shot = {.id = sm90::kSplitTactic + 1, .name = "split-one-shot"},
                 split_cluster = {.id = sm90::kSplitClusterTactic, .name = "split-cluster"};
constexpr Tactic sparse_narrow_persistent = {.id = sm90::kSparseNarrowTactic,
                                             .name = "sparse-narrow-persistent"},
                 sparse_narrow_one_shot = {.id = sm90::kSparseNarrowTactic + 1,
                                           .name = "sparse-narrow-one-shot"};
constexpr Tactic sparse_mma_persistent = {.id = sm90::kSparseMmaTactic,
                                          .name = "sparse-mma-persistent"},
                 sparse_mma_one_shot = {.id = sm90::kSparseMmaTactic + 1,
                                        .name = "sparse-mma-one-shot"},
                 sparse_mma_cluster = {.id = sm90::kSparseMmaClusterTactic,
                                       .name = "sparse-mma-cluster"};
constexpr Tactic q_split_persistent = {.id = sm90::kQSplitTactic, .name = "q-split-persistent"},
                 q_split_one_shot = {.id = sm90::kQSplitTactic + 1, .name = "q-split-one-shot"};
constexpr Tactic q_split_narrow_persistent = {.id = sm90::kQSplitNarrowTactic,
                                              .name = "q-split-narrow-persistent"},
                 q_split_narrow_one_shot = {.id = sm90::kQSplitNarrowTactic + 1,
                                            .name = "q-split-narrow-one-shot"},
                 q_split_narrow_cluster = {.id = sm90::kQSplitNarrowTactic + 2,
                                           .name = "q-split-narrow-cluster"};

constexpr Tactic in_step_persistent = {.id = sm90::kInStepTactic, .name = "in-step-persistent"},
                 in_step_one_shot = {.id = sm90::kInStepTactic + 1, .name = "in-step-one-shot"},
                 in_step_cluster = {.id = sm90::kInStepTactic + 2, .name = "in-step-cluster"};

// The wide tile's schedules for a dense problem, in tactics()'s order (below). Variable query
// lengths with several 64-row tiles a request, from batch 64: one-shot first. Its CTAs of a tile
// past a request's q_len end at once (ChunkIterator::skip_dead_tiles) and free their SMs, where a
// persistent CTA keeps its fixed share of one tile's blocks. h_q 64 and 128, s_q 4, q_len drawn
// from 1..4, L 4096, H200 (bench/results/2026-11-28-h200-varq-skip): 16-bit cache, batch 128,
// one-shot 0.71-0.77x the padded batch's time and 1.20-1.37x faster than persistent, on fixed and
// ragged lengths; batch 32, persistent as fast or 7% faster (ragged), so it stays. The fp8 cache
// with a 16-bit or an e4m3 q (bench/results/2026-11-28-h200-varq-inplace): batch 128, one-shot
// 1.13-1.35x faster than persistent (bf16 q, fixed and ragged lengths) and 1.30x (e4m3 q); batch
// 32, persistent 1-15% faster than one-shot.
std::vector<Tactic> wide_order(const Problem& p, bool cluster_first) {
  const int32_t rows = p.h_q * p.s_q;
  const bool var_q_one_shot =
      !cluster_first && p.var_q && !p.sparse() && rows > sm90::kRows && p.max_batch >= 64;
  return cluster_first    ? std::vector<Tactic>{cluster, persistent, one_shot}
         : var_q_one_shot ? std::vector<Tactic>{one_shot, persistent, cluster}
                          : std::vector<Tactic>{persistent, one_shot, cluster};
}

// The 16-bit tiles' tactics for a problem (its rows as requests), in tactics()'s order (below).
std::vector<Tactic> dense_order(const Problem& p, bool cluster_first) {
  const int32_t rows = p.h_q * p.s_q;
  if (rows <= sm90::kSmallNarrowRows) {
    if (cluster_first) {
      return {narrow_cluster, cluster, persistent, one_shot, narrow_persistent, narrow_one_shot};
    }
    return {narrow_persistent, persistent, one_shot, narrow_one_shot, narrow_cluster, cluster};
  }
  // The fp8 cache's wide tile takes the same rule (tactics()).
  std::vector<Tactic> out = wide_order(p, cluster_first);
  if (rows <= sm90::kMaxNarrowRows) {
    out.insert(out.end(), {narrow_cluster, narrow_persistent, narrow_one_shot});
  }
  return out;
}

// The first is the default (untuned calls). Lengths live on the device, so the default must hold
// up on ragged batches, which servers' are. Tuned per bucket on a uniform and a ragged batch
// (lengths spread over [L/16, L]; tune::rank) over the standard grid of h_q 128, 64, 16 x s_q 1,
// 2 on an H200 (bench/results/2026-11-21-h200-ragged-tune/tune-h*.txt): at batch >= 8 and L >=
// 4096 a persistent tactic (sm90's 0 or 3, or sm80's) won 52 of 54 buckets; at L 1024 a cluster
// tactic won 23 of 24; at batch 1, 11 cluster and 13 persistent, mostly within 2% (at h_q 16 the
// narrow cluster was 5-13% faster than narrow persistent). A cluster is sized by the longest
// request, so on the ragged batch it was 1.2-1.6x slower than persistent from L 4096 on, while
// winning the uniform one by up to 16%. So: cluster first up to 2048 tokens or at batch 1,
// persistent first above. Not measured: L 2048 (the cut between 1024 and 4096 is a guess), and
// batches 2 and 4 (they take persistent, as batch 8 does). Up to 16 query rows the narrow tile's
// tactics come first (narrow cluster within 0.6% of the fastest tactic of either backend over the
// uniform cases of h_q 16, s_q 1, 2026-11-21-h200-narrow); at 17..32 rows (h_q 16, s_q 2) the wide
// tile's (2.1% against 6.5%).
std::vector<Tactic> tactics(const Problem& problem) {
  // Sparse: as the dense problem of its rows (launch.h), whose cache is gathered into 16 bits.
  const Problem p = plan::rows_as_requests(problem);
  const bool cluster_first = p.max_seq_len <= 2048 || p.max_batch <= 1;
  const int32_t rows = p.h_q * p.s_q;
  // An fp8 cache with a 16-bit q: the narrow tile (decode_fp8_narrow.cuh, the cache widened in
  // registers) first up to 32 rows, the wide tile (the cache widened in shared memory,
  // Widen::kFp8) first past them: at h_q 64 and 128 it ran 1.18x faster than the narrow tile's
  // 32-row tiles over 34 cases, up to 1.42x, slower in 2 by at most 7% (H200,
  // bench/results/2026-11-27-h200-fp8-wide-bf16q). With an e4m3 q the wide tile
  // (decode_fp8_wide.cuh) comes first from 17 rows on, as for 16-bit caches.
  const bool fp8_wide = p.kv_dtype == DType::kFP8E4M3 && !p.sparse();
  const int32_t narrow_rows =
      p.q_dtype == DType::kFP8E4M3 ? sm90::kSmallNarrowRows : sm90::kMaxNarrowRows;
  // A bf16 q split into two e4m3 parts on the fp8 narrow tile (tiles of 16 rows, the split made by
  // the consumers; decode_fp8_narrow.cuh), each schedule by the narrow tile's rule: first up to 16
  // rows, and up to 32 below batch 64 (each 16-row tile reads the cache); else after the widening
  // narrow tile (up to 32 rows) or last. On an H200 at h_q 16 s_q 1 (the standard grid) it ran
  // 1.12-1.47x faster than the narrow tile widening the cache, 1.21x geomean; at h_q 16 s_q 2 and
  // h_q 32 1.10-1.45x faster up to batch 32 (L 8192 and 32768: within 1%), 0.87-0.98x from batch 64
  // (bench/results/2026-11-29-h200-fp8-qsplit-narrow).
  const std::vector<Tactic> split_narrow =
      !sm90::q_split_runs(p) ? std::vector<Tactic>{}
      : cluster_first ? std::vector<Tactic>{q_split_narrow_cluster, q_split_narrow_persistent,
                                            q_split_narrow_one_shot}
                      : std::vector<Tactic>{q_split_narrow_persistent, q_split_narrow_one_shot,
                                            q_split_narrow_cluster};
  // The in-step wide tile (an e4m3 q, decode_fp8_instep.cuh), each schedule by the wide tile's
  // rule (wide_order). First past 32 rows where the persistent schedule comes first and the call
  // has at least 128 query tiles of 64 rows (batch x tiles a request); else last. On an H200
  // (e4m3 q and cache, L 4096, h_q 64 and 128, s_q 1 and 2, settled; bench/results/
  // 2026-11-29-h200-fp8-instep, call 6) it ran 1.05-1.10x faster than the out-of-phase wide tile
  // at 128 tiles and more (batch 64-128, and 32 at h_q 128 s_q 2), 0.96-1.03x at 64 tiles and
  // 0.73-0.90x at batch 1-8 (its pairs' fixed costs).
  const std::vector<Tactic> in_step =
      !sm90::in_step_runs(p) ? std::vector<Tactic>{}
      : cluster_first ? std::vector<Tactic>{in_step_cluster, in_step_persistent, in_step_one_shot}
      : wide_order(p, false).front().id == one_shot.id
          ? std::vector<Tactic>{in_step_one_shot, in_step_persistent, in_step_cluster}
          : std::vector<Tactic>{in_step_persistent, in_step_one_shot, in_step_cluster};
  const bool in_step_first = !in_step.empty() && !cluster_first &&
                             int64_t{p.max_batch} * plan::ceil_div(rows, sm90::kRows) >= 128;
  if (fp8_wide && rows <= narrow_rows) {
    std::vector<Tactic> out =
        cluster_first ? std::vector<Tactic>{narrow_cluster, narrow_persistent, narrow_one_shot}
                      : std::vector<Tactic>{narrow_persistent, narrow_one_shot, narrow_cluster};
    const bool split_first = rows <= sm90::kSmallNarrowRows || p.max_batch < 64;
    out.insert(split_first ? out.begin() : out.end(), split_narrow.begin(), split_narrow.end());
    out.insert(out.end(), {cluster, persistent, one_shot});
    out.insert(out.end(), in_step.begin(), in_step.end());
    return out;
  }
  if (fp8_wide) {
    std::vector<Tactic> out = wide_order(p, cluster_first);
    // A bf16 q split into two e4m3 parts on the e4m3 wide tile (Widen::kQSplit) first from
    // batch 8, before the cluster schedule where that comes first only past 1024 tokens or from
    // 2048 blocks of 64-row tiles; below batch 8 after the widening tile's tactics. At h_q 64 and
    // 128, s_q 1 and 2, L 4096 and 8192 it ran 1.04-1.27x faster than the tile widening the
    // cache (Widen::kFp8) from batch 8, 0.89-0.95x at batch 1; at L 2048 1.02-1.23x faster than
    // the widening tile's cluster schedule from batch 8; at L 1024 1.08-1.14x from 2048 blocks,
    // 0.82-0.99x below (H200, bench/results/2026-11-29-h200-fp8-qsplit).
    if (sm90::q_split_runs(p)) {
      const bool one_shot_first = out.front().id == one_shot.id;
      const std::vector<Tactic> split =
          one_shot_first ? std::vector<Tactic>{q_split_one_shot, q_split_persistent}
                         : std::vector<Tactic>{q_split_persistent, q_split_one_shot};
      const int64_t blocks = int64_t{p.max_batch} * plan::ceil_div(rows, sm90::kRows) *
                             plan::ceil_div(p.max_seq_len, sm90::kBlockN);
      const bool before_cluster = p.max_seq_len > 1024 || blocks >= 2048;
      const auto at =
          p.max_batch < 8 ? out.end() : out.begin() + (cluster_first && !before_cluster ? 1 : 0);
      out.insert(at, split.begin(), split.end());
    }
    out.insert(out.end(), {narrow_cluster, narrow_persistent, narrow_one_shot});
    out.insert(out.end(), split_narrow.begin(), split_narrow.end());
    out.insert(in_step_first ? out.begin() : out.end(), in_step.begin(), in_step.end());
    return out;
  }
  // Sparse decode of the V3.2 cache with a 16-bit q, by rows (h_q; a sparse problem's rows are
  // requests of one query token, batch x s_q of them). With a bf16 q the sparse mma kernel
  // (decode_sparse_mma.cuh, tiles of 16 rows, each gathering every token) first up to 16 rows,
  // up to 32 while there are at most 64 rows as requests, and past 32 while its tiles of all
  // requests number at most 8 (batch 1 at h_q 64 and 128). Otherwise the split kernel
  // (decode_sparse_v32.cuh) first past 32 rows, the sparse narrow kernel
  // (decode_sparse_narrow.cuh) first up to 32. Each kernel's one-shot schedule first from 64 rows
  // as requests, its persistent one below; the split kernel's tactics last up to 32 rows. On an
  // H200 (topk 2048, s_q 1 and 2; bench/results/2026-11-28-h200-sparse-split, -sparse-narrow and
  // -sparse-producer): split one-shot was 3-19% faster than split persistent from 64 rows as
  // requests, persistent 4-9% faster up to 16; at h_q 8 and 16 the mma kernel's persistent
  // schedule was 8-25% faster than any other up to 32 rows as requests, its one-shot one the
  // fastest or within 1% of it from 64; at h_q 32 the mma kernel was 6-46% faster than the narrow
  // kernel up to 64 rows as requests, the narrow kernel's one-shot schedule 22-29% faster than the
  // mma kernel's from 128; at h_q 64 batch 1 the mma kernel took 15.9 us (s_q 1) and 19.2 (s_q 2)
  // against the split kernel's 20.2 and 20.7, at h_q 128 17.5 (s_q 1) against 20.5 but 24.3 (s_q
  // 2) against 23.6, and from batch 8 it was slower at both. Past 32 rows the split kernel's
  // cluster schedule (indices read as given: no compaction, plan or, with one cluster a request,
  // combine kernel) comes first from 8 to 128 of its 64-row tiles (rows as requests x tiles a
  // request): over h_q 64 and 128, s_q 1 and 2 it was 0.4-19% faster there than the split
  // kernel's other two schedules; at 256 and 512 tiles from 2% faster to 3% slower, at 4 tiles
  // (h_q 128 s_q 2 batch 1) 6% slower (H200, bench/results/2026-11-28-h200-sparse-cluster).
  if (sm90::split_kernel_runs(p)) {
    std::vector<Tactic> out;
    const auto append = [&out](const std::vector<Tactic>& tactics) {
      out.insert(out.end(), tactics.begin(), tactics.end());
    };
    const bool one_shot_first = p.max_batch >= 64;
    const auto pair = [one_shot_first](Tactic persistent, Tactic one_shot) {
      return one_shot_first ? std::vector<Tactic>{one_shot, persistent}
                            : std::vector<Tactic>{persistent, one_shot};
    };
    const bool mma = sm90::sparse_mma_runs(p);
    const int64_t mma_tiles =
        int64_t{(rows + sm90::kSmallNarrowRows - 1) / sm90::kSmallNarrowRows} * p.max_batch;
    const bool mma_first =
        mma && (rows <= sm90::kSmallNarrowRows ||
                (rows <= sm90::kMaxNarrowRows && p.max_batch <= 64) || mma_tiles <= 8);
    // The mma kernel's cluster schedule first up to 16 rows up to 256 of its 16-row tiles (rows
    // as requests x tiles a request; at topk 512 or less 512), at 17-32 rows up to 512, past 32
    // rows up to 32 (128 at topk 512 or less).
    // Past 32 rows with the fp16 products (H200, topk 2048, h_q 64 and 128, s_q 1 and 2,
    // bench/results/2026-11-29-h200-sparse-mma-f16, call 6), against the split kernel's cluster
    // schedule: 1.06-1.09x faster at 32 tiles, 0.74-0.89x at 64 (was 16 tiles before).
    // Past 32 rows after the producers' copy loop (H200, h_q 64 and 128, s_q 1 and 2,
    // bench/results/2026-11-29-h200-sparse-producer-copies, call 7), against the split kernel's
    // cluster schedule: topk 2048 1.24-1.57x faster up to 16 tiles, 0.97-0.99x at 32; topk 512
    // 1.07-1.70x up to 128 tiles, 0.68x at 256.
    // Past 128 tiles (H200, bench/results/2026-11-29-h200-sparse-grid, call 10): at h_q 8 and 16
    // (256 tiles) 1.17x, 1.04x and 1.01x faster than the mma kernel's one-shot schedule at topk
    // 512, 1024 and 2048; at h_q 32 (256 and 512 tiles) 1.12-1.23x faster than the narrow kernel's
    // one-shot schedule at topk 512, while that one was 1.05-1.29x faster at 1024 and 2048.
    // On an H200 (topk 2048 unless said; bench/results/2026-11-28-h200-sparse-mma-cluster): at
    // h_q 8, 16 and 32, s_q 1 and 2, it was 5-29% faster than the mma kernel's other two
    // schedules from batch 8 to 128 tiles and at h_q 32 4-21% faster than the narrow kernel at
    // batch 32 and 64; at h_q 32 from 256 tiles the narrow kernel's one-shot schedule is 20-25%
    // faster. With its combine costed as one block (launch.cc, call 9): batch 1 12.2-12.9 us at
    // h_q 8-32 (the mma kernel's persistent schedule 14.3-16.3), 13.0-18.4 at h_q 64 and 128
    // (the best other tactic 15.9-23.7), topk 512 batch 8 at h_q 64 and 128 14.3 and 17.0 (the
    // split kernel's cluster schedule 18.0 and 19.4); at topk 2048 batch 8 past 32 rows (32-128
    // tiles) the split kernel's cluster schedule is 10-74% faster (call 10).
    // At 17-32 rows up to 512 tiles whatever topk (twenty-eighth session, H200,
    // bench/results/2026-11-29-h200-gather-ceiling, calls 3 and 4: at h_q 32 against the narrow
    // kernel's one-shot schedule, which came first from 128 rows as requests, topk 2048 1.07-1.08x
    // faster at 256 tiles (s_q 1 batch 128, s_q 2 batch 64) and 1.00 at 512, topk 1024 1.23x at
    // 256 and 1.17x at 512).
    const int64_t mma_cluster_tiles = p.topk <= 512 || rows > sm90::kSmallNarrowRows ? 512 : 256;
    const bool mma_cluster_first =
        mma && ((rows <= sm90::kMaxNarrowRows && mma_tiles <= mma_cluster_tiles) ||
                (rows > sm90::kMaxNarrowRows && mma_tiles <= (p.topk <= 512 ? 128 : 32)));
    if (mma_cluster_first) append({sparse_mma_cluster});
    if (mma_first) append(pair(sparse_mma_persistent, sparse_mma_one_shot));
    if (mma_first && !mma_cluster_first) append({sparse_mma_cluster});
    if (rows > sm90::kMaxNarrowRows) {
      // The split kernel's cluster schedule first from 8 of its 64-row tiles up to 128 (at topk
      // 1024 or less 256, at 512 or less 512). Past 128 (H200, 2026-11-29-h200-sparse-grid, call
      // 10; h_q 64 and 128 at 256 and 512 tiles) against its one-shot schedule: 1.05-1.12x faster
      // at topk 512, 1.01-1.05x at 1024 up to 256 tiles and 1.4% slower at 512 tiles, 0.1-4.7%
      // slower at 2048.
      const int64_t tiles = int64_t{(rows + sm90::kRows - 1) / sm90::kRows} * p.max_batch;
      const int64_t split_cluster_tiles = p.topk <= 512 ? 512 : p.topk <= 1024 ? 256 : 128;
      const bool split_cluster_first = tiles >= 8 && tiles <= split_cluster_tiles;
      if (split_cluster_first) append({split_cluster});
      append(pair(split_persistent, split_one_shot));
      if (!split_cluster_first) append({split_cluster});
    }
    if (sm90::sparse_narrow_runs(p)) append(pair(sparse_narrow_persistent, sparse_narrow_one_shot));
    if (mma && !mma_first) {
      append(pair(sparse_mma_persistent, sparse_mma_one_shot));
      if (!mma_cluster_first) append({sparse_mma_cluster});
    }
    append(dense_order(p, cluster_first));
    if (rows <= sm90::kMaxNarrowRows) append({split_persistent, split_one_shot, split_cluster});
    return out;
  }
  // Sparse decode of the V4 cache (the gather on the 16-bit tiles) past 32 rows: persistent first
  // up to 8 of the wide tile's tiles (rows as requests x tiles a request; 16 at topk 2048 or
  // more), where the cluster rule would take cluster (a request's length, topk + extra_topk, is
  // short). On an H200 (h_q 64 and 128, s_q 1, an extra cache of 128, topk 512, 1024, 2048;
  // bench/results/2026-11-29-h200-sparse-grid, calls 15 and 16) persistent was 1.17-1.51x faster
  // than cluster at 1, 2 and 8 tiles and 1.06-1.10x at 16 tiles at topk 2048; cluster 1.11-1.13x
  // faster at 16 tiles at topk 512 and 1024, and 1.02-1.36x from 32 tiles.
  if (p.sparse() && p.kv_layout == KvLayout::kFp8V4 && rows > sm90::kMaxNarrowRows) {
    const int64_t tiles = int64_t{(rows + sm90::kRows - 1) / sm90::kRows} * p.max_batch;
    if (tiles <= (p.topk >= 2048 ? 16 : 8)) return dense_order(p, /*cluster_first=*/false);
  }
  return dense_order(p, cluster_first);
}

Status create(const Problem& problem, int tactic, const DeviceInfo& device,
              std::unique_ptr<Backend>* out) {
  sm90::Setup setup;
  MLAKIT_RETURN_IF_ERROR(sm90::make_setup(problem, tactic, device, &setup));
  *out = std::make_unique<Sm90Backend>(setup);
  return Status::Ok();
}

}  // namespace

const BackendEntry& sm90_backend_entry() {
  static const BackendEntry entry{
      .name = "sm90",
      .summary = "Hopper decode (wgmma, TMA, warp-specialized), split-KV planned on the device",
      .supports =
          "sm_90 only; q/kv/out bf16 or fp16; fp8 e4m3 cache (one scale) with bf16/fp16 q "
          "(out alike; the cache widened in registers on the narrow tile, in shared memory on the "
          "wide one, or q split into two e4m3 parts on fp8 wgmma: q-split-persistent and "
          "-one-shot, and on the narrow tile q-split-narrow-persistent, -one-shot and -cluster) or "
          "e4m3 q (out bf16/fp16; fp8 wgmma; also the in-step wide tile: in-step-persistent, "
          "-one-shot and -cluster); "
          "page size 32, 64, 128; h_q 1..128; s_q 1..16 causal or not; variable query lengths "
          "(var_q); variable lengths; sinks; lse; PDL; CUDA graphs; sparse top-k with a bf16/fp16 "
          "q over a cache of q's type, the V3.2 blockwise or the V4 layout (V4 with an extra "
          "cache too; any page size; tokens gathered, out-of-range indices skipped). "
          "Tactics: cluster, persistent, one-shot, and the same three with "
          "the narrow tile (h_q x s_q <= 32; any h_q with an fp8 cache, in tiles of 32 rows); for "
          "sparse decode of the V3.2 cache with a 16-bit q also split-persistent, "
          "split-one-shot and split-cluster (producer warpgroups widening from registers), "
          "sparse-narrow-"
          "persistent and -one-shot (h_q <= 32; the cache widened in registers) and "
          "sparse-mma-persistent, -one-shot and -cluster (bf16 q, tiles of 16 rows; mma.sync)",
      .device_memory = true,
      .available = available,
      .can_run = can_run,
      .tactics = tactics,
      .create = create,
  };
  return entry;
}

}  // namespace mlakit
