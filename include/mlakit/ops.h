// mlakit::ops: the steps of a sparse (DSA) decode layer besides attention (docs/ops.md).
//
//   append_kv       new tokens' latent + RoPE (bf16/fp16) quantized into any KV cache layout
//   append_indexer  new tokens' indexer keys quantized into the indexer cache
//   indexer_logits  the lightning indexer: weighted fp8 MQA logits over the indexer cache
//   topk_indices    per row, the k largest logits as sparse-decode indices (RunArgs::indices)
//
// Where an op runs is its first argument, `Device`:
//   kCpu   every pointer is host memory; the op runs synchronously (the reference, multithreaded)
//          and checks the data it reads (slots, lengths, page ids) before writing anything.
//   kCuda  every pointer is device memory of the current device; the op only checks what the
//          host can see (shapes, pointers, scales given by value) and launches on `stream`: no
//          allocation, no host synchronization, no read of device memory from the host, so it
//          can be captured in a CUDA graph and replayed with new slot mappings, lengths and block
//          tables. A value in device memory it cannot use (a slot or a page id out of range) is
//          skipped, as said per op. kUnsupported in a build without CUDA (and indexer_logits
//          on a GPU without fp8 tensor cores: below sm_89).
//
// Programmatic dependent launch: `enable_pdl` (each op's args, kCuda on sm_90 and newer; ignored
// elsewhere) launches the op's kernel so that it may start while the previous kernel in the stream
// still runs (as Problem::enable_pdl for decode): it waits for that kernel's completion and memory
// before reading anything (top-k's multi-block kernel, which starts with a memset of its
// workspace, keeps a plain launch). An append -> indexer -> top-k -> sparse decode chain with
// every step's flag set then overlaps each launch with the tail of the step before; results are
// bitwise the same either way.
//
// Every entry returns a Status; a message names the argument, the expected and the given value.
// Shapes are row-major; a stride is in elements of its tensor and 0 means contiguous.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "mlakit/mlakit.h"

namespace mlakit::ops {

enum class Device : int32_t { kCpu = 0, kCuda = 1 };

inline constexpr int kIndexerDim = 128;       // d of an indexer key and query head
inline constexpr int kIndexerHeads = 64;      // DeepSeek V3.2's indexer heads (the default)
inline constexpr int kIndexerMaxHeads = 128;  // IndexerLogitsArgs::heads, 1..128
inline constexpr int kIndexerMaxNextN = kMaxSq;
inline constexpr int kTopkMax = 1 << 16;  // TopkArgs::k, 1..65536

// Bytes of one indexer-cache page: page_size x 128 e4m3 keys, then page_size fp32 scales.
inline size_t indexer_page_bytes(int page_size) {
  return static_cast<size_t>(page_size) * (kIndexerDim + sizeof(float));
}

// ---------------------------------------------------------------------------------------------
// Cache append. Token n goes to slot_mapping[n] = page * page_size + offset of the cache; a slot
// of -1 is skipped. kCpu refuses any other slot outside [0, num_pages * page_size) before it
// writes anything; kCuda skips it. Two tokens with the same slot: either one wins.
//
// How each layout quantizes a token x (its bf16/fp16 values widened to float):
//   kDense bf16/fp16  x rounded to the cache dtype (round to nearest even)
//   kDense e4m3       e4m3(x / k_scale), round to nearest even, saturated to +-448
//   kFp8Blockwise     per group of 128 latent values: s = 2^ceil(log2(amax / 448)) (1 when amax
//                     is 0), stored as fp32; e4m3(x / s) saturated; then the 64 RoPE values as bf16
//   kFp8V4            per group of 64 NoPE values: e = clamp(127 + ceil(log2(amax / 448)), 0, 254)
//                     (127 when amax is 0), stored as UE8M0; e4m3(x / 2^(e - 127)) saturated;
//                     the 64 RoPE values as bf16; the scale row's pad byte is set to 0xff
// ceil(log2(.)) is exact (from the float's exponent bits, not a rounded log2).
// ---------------------------------------------------------------------------------------------
struct AppendKvArgs {
  int64_t n_tokens = 0;  // 0 is a no-op
  // [n_tokens, kv_stride] of kv_dtype (bf16 or fp16): the first layout_d_qk(kv_layout) values of
  // a row (576: 512 latent + 64 RoPE; 512 for kFp8V4: 448 NoPE + 64 RoPE) are appended.
  const void* kv = nullptr;
  DType kv_dtype = DType::kBF16;
  int64_t kv_stride = 0;                  // elements between tokens; 0 = d_qk
  const int64_t* slot_mapping = nullptr;  // [n_tokens]
  void* kv_cache = nullptr;               // [num_pages, kv_page_bytes(cache_dtype, layout, ps)]
  int64_t num_pages = 0;
  int32_t page_size = 64;
  DType cache_dtype = DType::kBF16;  // kBF16/kFP16/kFP8E4M3 dense; kFP8E4M3 otherwise
  KvLayout cache_layout = KvLayout::kDense;
  // The dense e4m3 cache's scale (stored value = x / k_scale): a host value, or a pointer to one
  // float where the op runs. Exactly one of them for that cache; neither for the others.
  float k_scale = NAN;
  const float* k_scale_ptr = nullptr;
  bool enable_pdl = false;  // programmatic dependent launch (above)
};
Status append_kv(Device device, const AppendKvArgs& args, Stream stream = nullptr);

// How the indexer key's per-token scale is chosen, amax being the largest |x| of its 128 values:
enum class IndexerScale : int32_t {
  kAmax = 0,        // s = max(amax, 1e-4) / 448 (vLLM's indexer_k_quant_and_cache)
  kPowerOfTwo = 1,  // that s rounded up to a power of two (its scale_fmt "ue8m0")
};

struct AppendIndexerArgs {
  int64_t n_tokens = 0;
  const void* k = nullptr;  // [n_tokens, k_stride] of k_dtype (bf16 or fp16), 128 used
  DType k_dtype = DType::kBF16;
  int64_t k_stride = 0;                   // 0 = 128
  const int64_t* slot_mapping = nullptr;  // [n_tokens], -1 = skip (as append_kv)
  // [num_pages, indexer_page_bytes(page_size)]: token `offset` of a page has its 128 e4m3 values
  // e4m3(x / s) (saturated) at offset * 128 and its fp32 scale s at page_size * 128 + offset * 4.
  void* index_cache = nullptr;
  int64_t num_pages = 0;
  int32_t page_size = 64;
  IndexerScale scale = IndexerScale::kAmax;
  bool enable_pdl = false;  // programmatic dependent launch (above)
};
Status append_indexer(Device device, const AppendIndexerArgs& args, Stream stream = nullptr);

// ---------------------------------------------------------------------------------------------
// Indexer logits (DeepSeek V3.2's lightning indexer; DeepGEMM's fp8_paged_mqa_logits):
//   logits[i * next_n + t, j] = sum_h weights[i * next_n + t, h] * relu(dot(q[i, t, h], k_j) * s_j)
// with k_j the e4m3 key and s_j the fp32 scale of request i's position j (through block_table),
// for the visible positions j < L_i - next_n + 1 + t (L_i = seq_lens[i]); every other column
// < max_len is -inf. kCpu refuses a length or a page id out of range; kCuda clamps L_i to
// [0, min(max_len, block_table_stride * page_size)] and gives -inf to a position whose page id is
// outside [0, num_pages) (nothing is read through it). kCuda: fp8 tensor cores, sm_89 and newer;
// the sum over heads runs in float in a fixed order (deterministic), the cpu reference in double;
// fp8 tensor cores accumulate each dot product with less than fp32 precision (docs/ops.md).
// ---------------------------------------------------------------------------------------------
struct IndexerLogitsArgs {
  int32_t batch = 0;                  // b >= 0
  int32_t next_n = 1;                 // query tokens per request, 1..16
  int32_t heads = kIndexerHeads;      // 1..128
  const uint8_t* q = nullptr;         // [b, next_n, heads, 128] e4m3
  const float* weights = nullptr;     // [b * next_n, heads]
  const void* index_cache = nullptr;  // [num_pages, indexer_page_bytes(page_size)]
  int64_t num_pages = 0;
  int32_t page_size = 64;
  const int32_t* block_table = nullptr;  // [b, block_table_stride] page ids
  int64_t block_table_stride = 0;
  const int32_t* seq_lens = nullptr;  // [b], 0..min(max_len, block_table_stride * page_size)
  float* logits = nullptr;            // [b * next_n, logits_stride]: columns 0..max_len-1 written
  int64_t max_len = 0;
  int64_t logits_stride = 0;  // 0 = max_len
  bool enable_pdl = false;    // programmatic dependent launch (above)
};
Status indexer_logits(Device device, const IndexerLogitsArgs& args, Stream stream = nullptr);

// ---------------------------------------------------------------------------------------------
// Top-k selection as sparse-decode indices. Row r = i * next_n + t belongs to request i; its
// valid length is n = clamp(L_i - next_n + 1 + t, 0, L_i), L_i = seq_lens[i] (the indexer's
// causal rule). When n <= k every position 0..n-1 is kept; otherwise the k positions of the
// largest logits[r, 0:n], ties broken by the lower position (deterministic). Values compare in
// IEEE total order: -0 < +0, and a NaN with its sign bit clear is above +inf (give no NaN).
// The kept positions are written in increasing order, each as its cache slot
// block_table[i, p / page_size] * page_size + p % page_size, then -1 up to k:
//   indices[r, 0:k]      (RunArgs::indices of a sparse decode with s_q = next_n, topk = k)
//   positions[r, 0:k]    optional: the positions p themselves, -1 padded
// kCpu refuses a length or a page id out of range; kCuda clamps L_i to [0, max_len] and writes
// -1 for a position whose page id is negative.
//
// kCuda runs one of four kernels, with the same result: with a workspace
// (topk_workspace_bytes(args) bytes, 256-byte aligned, device memory) and max_len >=
// kTopkMultiMinLen, several blocks a row (a histogram of the keys' high bits, the few keys of
// the k-th largest's bin refined, then each slice of the row written); on sm_90 (Hopper), for
// max_len up to 262144, a thread-block cluster a row (up to 8 blocks, each holding its slice of
// the row in shared memory: the row is read once; no workspace needed), which also takes the
// calls without a workspace and, measured faster there, those of up to 32 rows or of slices of
// 8K-16K keys over at most 512 blocks; on sm_90 from 32 rows and 2^20 keys, and where the cluster
// kernel's rows would take two waves of its clusters (rows up to 1M long,
// k to about 1800 a block of the row), a cluster of up to 16 blocks a row that streams the row
// once and keeps only the keys above a sampled bound; otherwise one block a row (slow on long
// rows). The workspace holds no state between calls (it is cleared on the stream first); one call
// at a time may use it.
// kCpu ignores it but checks it alike.
// ---------------------------------------------------------------------------------------------
struct TopkArgs {
  int32_t batch = 0;
  int32_t next_n = 1;                    // 1..16
  int32_t k = 2048;                      // 1..kTopkMax
  const float* logits = nullptr;         // [b * next_n, logits_stride]; columns < n read
  int64_t max_len = 0;                   // longest L_i any call passes (the columns there are)
  int64_t logits_stride = 0;             // 0 = max_len
  const int32_t* seq_lens = nullptr;     // [b], 0..max_len
  const int32_t* block_table = nullptr;  // [b, block_table_stride]
  int64_t block_table_stride = 0;        // >= ceil(max_len / page_size)
  int32_t page_size = 64;
  int32_t* indices = nullptr;    // [b * next_n, k]
  int32_t* positions = nullptr;  // [b * next_n, k], optional
  // Scratch of the multi-block kernel (for rows the cluster kernel does not take): null = one
  // block a row there; else at least topk_workspace_bytes(*this) bytes, 256-byte aligned.
  void* workspace = nullptr;
  size_t workspace_size = 0;
  // false (opt-in, kCuda): the kept positions may be written in any order, and which of the keys
  // equal to the k-th largest are kept is not fixed (the kept values are the same multiset);
  // results may then differ from run to run, and so would a sparse decode summing its tokens in
  // that order. The multi-block kernel's sort path then skips sorting its kept positions (the
  // rows of the multi-block kernel: off sm_90, or sm_90 shapes past the cluster kernels); every
  // other kernel writes what it writes with true. kCpu ignores it.
  bool deterministic = true;
  bool enable_pdl = false;  // programmatic dependent launch (above)
};
// Rows at least this long (max_len) take the multi-block kernel when a workspace is given.
inline constexpr int64_t kTopkMultiMinLen = 8192;
// The workspace bytes of the multi-block kernel for the shapes of `args` (batch, next_n, max_len,
// k; its pointers are not read): 0 when these shapes run one block a row anyway (max_len below
// kTopkMultiMinLen or at most k, batch 0) or are out of range. Size it once for the largest batch.
size_t topk_workspace_bytes(const TopkArgs& args);
Status topk_indices(Device device, const TopkArgs& args, Stream stream = nullptr);

}  // namespace mlakit::ops
