// mlakit: Multi-head Latent Attention decode over a paged KV cache.
//
// Three steps, as in ../docs and DESIGN.md:
//   1. describe the static facts of the problem in a `Problem`;
//   2. make a `Decoder` from it (validates, picks a backend, sizes the workspace; may allocate,
//      synchronize and tune);
//   3. `Decoder::run` with the per-call pointers: asynchronous on a stream, no allocation, no host
//      synchronization, no reads of device memory from the host, so it can be captured in a CUDA
//      graph and replayed with new `seq_lens` and block tables.
//
// Every entry point returns a `Status`; the library never prints, exits or aborts. A host
// allocation or a thread that fails inside a call is a Status too (kInternal, "out of host
// memory"); list_backends, current_device and describe, which return values, return empty ones.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

// Same type as the CUDA runtime's cudaStream_t, declared here so that this header does not need
// the CUDA headers.
struct CUstream_st;

namespace mlakit {

using Stream = CUstream_st*;

inline constexpr int kVersionMajor = 0;
inline constexpr int kVersionMinor = 1;
inline constexpr int kVersionPatch = 0;
std::string_view version();  // "0.1.0"

// ---------------------------------------------------------------------------------------------
// Status
// ---------------------------------------------------------------------------------------------
enum class StatusCode : int32_t {
  kOk = 0,
  kInvalidArgument = 1,  // an argument has a wrong value
  kUnsupported = 2,      // valid, but no (chosen) backend can run it
  kCudaError = 3,        // a CUDA call failed; the message carries the call, file and line
  kInternal = 4,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;  // "invalid argument: heads 0 ..."

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

std::string_view to_string(StatusCode code);

// ---------------------------------------------------------------------------------------------
// Data types and layouts
// ---------------------------------------------------------------------------------------------
enum class DType : int32_t {
  kBF16 = 0,
  kFP16 = 1,
  kFP8E4M3 = 2,  // e4m3fn: no infinities, 0x7f / 0xff are NaN
  kFP32 = 3,
};

enum class KvLayout : int32_t {
  // [num_pages, page_size, 576] of kv_dtype (bf16, fp16, or fp8 e4m3 with one k_scale).
  kDense = 0,
  // [num_pages, page_size, 656 bytes], the DeepSeek V3.2 layout: 512 e4m3 values, 4 fp32 scales
  // (one per 128 values; value = e4m3 * scale), 64 bf16 RoPE values. kv_dtype is kFP8E4M3.
  kFp8Blockwise = 1,
  // [num_pages, kv_page_bytes], the DeepSeek V4 ("model1") layout, d_qk 512 (448 NoPE + 64 RoPE):
  // each page holds first every token's 576 data bytes (448 e4m3 NoPE values, then 64 bf16 RoPE
  // values), then every token's 8-byte scale row (7 UE8M0 scales, one per 64 NoPE values, value =
  // e4m3 * 2^(e - 127), and 1 pad byte), then padding to a multiple of 576 bytes. Token `offset`
  // of a page: data at offset * 576, scales at page_size * 576 + offset * 8. V is all 512
  // dequantized values, RoPE included. kv_dtype is kFP8E4M3; Problem::d_qk 512.
  kFp8V4 = 2,
};

inline constexpr int kDqk = 576;             // d_qk: 512 latent + 64 RoPE
inline constexpr int kDv = 512;              // d_v: the latent (kv_lora_rank)
inline constexpr int kDRope = kDqk - kDv;    // 64
inline constexpr int kBlockwiseBytes = 656;  // bytes per token in KvLayout::kFp8Blockwise
inline constexpr int kBlockwiseGroup = 128;  // values per fp32 scale in the blockwise layout
inline constexpr int kV4Dqk = 512;           // d_qk of KvLayout::kFp8V4 (d_v stays 512)
inline constexpr int kV4Nope = 448;          // e4m3 values per token in kFp8V4
inline constexpr int kV4Group = 64;          // NoPE values per UE8M0 scale in kFp8V4
inline constexpr int kV4DataBytes = 576;     // 448 e4m3 + 64 bf16 per token in kFp8V4
inline constexpr int kV4ScaleBytes = 8;      // 7 UE8M0 scales + 1 pad byte per token in kFp8V4
inline constexpr int kV4TokenBytes = kV4DataBytes + kV4ScaleBytes;  // 584, before page padding
inline constexpr int kV4PageAlign = 576;  // a kFp8V4 page is padded to a multiple of this
inline constexpr int kMaxHeads = 128;
inline constexpr int kMaxSq = 16;
inline constexpr int kMaxBatch = 1 << 20;   // Problem::max_batch
inline constexpr int kMaxSeqLen = 1 << 24;  // Problem::max_seq_len
inline constexpr int kMaxCpWorld = 64;      // Problem::cp_world

std::string_view to_string(DType dtype);
std::string_view to_string(KvLayout layout);
size_t dtype_bytes(DType dtype);
// Bytes of one cached token in the given layout: 1152 (bf16/fp16), 576 (fp8), 656 (blockwise),
// 584 (V4, before the page's padding).
size_t kv_token_bytes(DType kv_dtype, KvLayout layout);
// Bytes of one page: page_size * kv_token_bytes, rounded up to a multiple of 576 for kFp8V4. The
// pages of a cache are this far apart.
size_t kv_page_bytes(DType kv_dtype, KvLayout layout, int page_size);
// d_qk of a layout: 576, or 512 for kFp8V4.
int layout_d_qk(KvLayout layout);

// ---------------------------------------------------------------------------------------------
// Problem: the static facts, fixed for the life of a Decoder
// ---------------------------------------------------------------------------------------------
struct Problem {
  int32_t h_q = 128;        // query heads, 1..128 (one KV head: MQA)
  int32_t s_q = 1;          // query tokens per request, 1..16 (> 1: MTP / speculative decoding)
  int32_t d_qk = kDqk;      // the layout's: 576, or 512 with KvLayout::kFp8V4 (layout_d_qk)
  int32_t d_v = kDv;        // must be 512
  int32_t page_size = 64;   // tokens per KV page
  int32_t max_batch = 1;    // largest batch any run will pass
  int32_t max_seq_len = 0;  // longest cached length any run will pass (sizes split-KV workspace)
  DType q_dtype = DType::kBF16;
  DType kv_dtype = DType::kBF16;
  DType out_dtype = DType::kBF16;
  KvLayout kv_layout = KvLayout::kDense;
  bool causal = true;  // s_q > 1: token t sees positions < L - s_q + 1 + t
  // Variable query lengths (speculative decoding without padding): request i has
  // q_len_i = cu_seqlens_q[i + 1] - cu_seqlens_q[i] query tokens, 0..s_q (s_q is then the
  // longest), given by RunArgs::cu_seqlens_q [b + 1] (cu_seqlens_q[0] = 0, non-decreasing). q,
  // out and lse are packed by query token: row r = cu_seqlens_q[i] + t is token t of request i
  // (q [total, h_q, d_qk] with q_stride_s between rows and q_stride_h between heads; out
  // [total, h_q, 512] likewise; lse [total, h_q]); q_stride_b and out_stride_b must be 0. With
  // causal, token t of request i sees positions < L_i - q_len_i + 1 + t. Rows past cu_seqlens_q[b]
  // are neither read nor written. A request with q_len 0 writes nothing. Sparse: indices (and
  // extra_indices) are packed the same way, [total, topk] (row cu_seqlens_q[i] + t), topk_lens
  // stays [b]. Context parallelism: the causal bound on global positions as above. The host does
  // not know total (cu_seqlens_q lives where the backend runs): validate_args' overlap checks
  // count the first packed row of q, out, lse and the indices only, and out's strides are checked
  // for b * s_q rows (a head-major out holding fewer is refused); the cpu backend and
  // Decoder::check_data check the offsets (cu_seqlens_q[0] = 0, each q_len 0..s_q), the GPU
  // backends clamp each q_len to 0..s_q and otherwise trust them. GPU cost: a query tile wholly
  // past a request's q_len is skipped under the one-shot and cluster schedules (its CTAs end at
  // once; sm90 takes one-shot first for such dense problems from batch 64 past 64 rows a
  // request); the persistent schedule and a tile's rows past q_len within a live tile compute on
  // zeros, not written; a request with q_len 0 is skipped. Plus a small kernel for the bounds,
  // and on sm90 a copy of q unless its token rows are h_q row strides apart and h_q is a multiple
  // of the tile's rows (docs/sm90-decode.md, docs/sm80-decode.md).
  bool var_q = false;
  bool has_sinks = false;  // a per-head sink logit is passed in RunArgs::sinks
  int32_t topk = 0;        // > 0: sparse attention over RunArgs::indices [b, s_q, topk]
  // > 0 (sparse only): a second ("extra") cache, RunArgs::extra_kv_cache, whose slots listed in
  // RunArgs::extra_indices [b, s_q, extra_topk] are attended in the same softmax as the main ones
  // (DeepSeek V4's sliding window). Same layout and dtype as the main cache.
  int32_t extra_topk = 0;
  // Tokens per page of the extra cache (it may differ from page_size); 0 = page_size. Must be 0
  // without an extra cache.
  int32_t extra_page_size = 0;
  bool return_lse = false;  // RunArgs::lse [b, s_q, h_q] is written
  // With return_lse: lse is written in base 2, log2(sum_j exp(s[j])) = the natural LSE * log2(e)
  // (-inf stays -inf), for engines that merge partial results with exp2 (see "LSE" above
  // RunArgs). Only the final store changes: the outputs and what is computed are the same.
  bool lse_base2 = false;
  bool enable_pdl = false;  // launch with programmatic dependent launch

  // Decode context parallelism (docs/context-parallel.md): each request's cache is sharded over
  // cp_world ranks in blocks of cp_interleave tokens. Global position g of a request lives on rank
  // (g / I) % N at local position (g / (I * N)) * I + g % I (N = cp_world, I = cp_interleave;
  // vLLM's DCP uses I = 1, SGLang / TensorRT-LLM Helix also blocks of 64). A rank passes its LOCAL
  // block table (local position j at block_table[i, j / page_size], offset j % page_size) and the
  // GLOBAL lengths in seq_lens; it attends the global positions < L on this rank (its local
  // length: cp_local_len), with MTP causal bounds taken from global positions (token t sees global
  // positions < L - s_q + 1 + t). A row with no visible token on this rank is the neutral state
  // (out 0, lse -inf). The N partial (out, lse) are then combined by merge_partials
  // (mlakit/cp.h). With cp_world > 1: return_lse must be true (the merge needs every rank's LSE)
  // and has_sinks false (a sink applied in each partial is wrong after the merge: the merge applies
  // it, MergeArgs::sinks). Sparse mode: the caller passes indices already localized to this rank's
  // cache; the cp fields change nothing there. max_seq_len stays the global maximum.
  int32_t cp_world = 1;       // N, 1..kMaxCpWorld; 1 = no context parallelism
  int32_t cp_rank = 0;        // this rank, 0..cp_world - 1
  int32_t cp_interleave = 1;  // I, tokens per shard block, 1..kMaxSeqLen

  bool sparse() const { return topk > 0; }
  bool context_parallel() const { return cp_world > 1; }
  bool has_extra() const { return extra_topk > 0; }
  int32_t extra_page_size_or_default() const {
    return extra_page_size > 0 ? extra_page_size : page_size;
  }
};

// Checks the problem alone (no backend): ranges, dtype combinations, layout.
Status validate(const Problem& problem);
std::string describe(const Problem& problem);  // one line, for logs and tables

// ---------------------------------------------------------------------------------------------
// Per-call arguments. Pointers live where the backend runs (device memory for GPU backends, host
// memory for the cpu backend). All tensors are contiguous row-major unless a stride is given.
//
// Views. q, out and the KV cache may be views: their innermost dimension (d_qk, 512, or the 656
// bytes of a blockwise token) is contiguous, their outer strides are free: q and out with any
// request, token and head strides (a slice of a larger batch, heads of a wider tensor, head-major
// storage), the cache with any page and token strides (vLLM's padded pages: pages further apart
// than page_size tokens). A stride is counted in elements of the tensor's dtype (bytes for the
// blockwise cache) and 0 means the contiguous value, so callers that leave them alone pass dense
// tensors. Each stride must be 1..2^40 - 1 and keep rows 16-byte aligned (stride * element bytes
// a multiple of 16; q, kv_cache and out themselves 16-byte aligned), and out's strides may not
// make two of its rows overlap (kInvalidArgument naming the stride otherwise); only out's rows
// are written, the bytes between them are left as they are. Every backend takes every such view,
// dense or sparse, except sm90 with a sparse problem's padded pages whose page stride is not a
// whole number of token strides (its gather reads slot s at s times the token stride, the slots
// spaced by the page pitch in tokens: kUnsupported naming kv_stride_page otherwise; padded
// tokens, and pages padded by whole tokens as FlashMLA's tests do, run). How the GPU
// backends read them: sm80 addresses each row by its strides; sm90
// reads q by a TMA map of equally spaced rows when q's rows are (one row stride, e.g. padded
// heads), else it first copies q into the workspace (a small kernel on the stream; the workspace
// always has room for it: max_batch * s_q * h_q * d_qk elements of q_dtype), reads the cache by a
// 2-D map (tokens equally spaced) or a 3-D one (padded pages), and its TMA strides must stay below
// 2^40 bytes (kUnsupported naming the stride otherwise). A kFp8V4 cache (each page its tokens'
// data, then their scale rows) takes no view: kv_stride_* must stay 0 (kInvalidArgument
// otherwise); the extra cache is always contiguous.
//
// LSE, the library's convention. lse[i, t, h] = log(sum_j exp(s[j])) in natural log, s[j] the
// scaled scores (softmax_scale * q.k) over the visible tokens j; a sink does not change it. A row
// that sees no token (length 0, or no visible token on this rank or in this sparse row) has
// lse = -inf and out = 0: the neutral element when partial results are merged (context parallel,
// cascades, split prefixes): with weights w_k = exp(lse_k - max_k lse_k), an empty part weighs 0,
// and out = sum_k w_k out_k / sum_k w_k, lse = max + log(sum_k w_k). Problem::lse_base2 writes
// log2(sum_j exp(s[j])) = lse * log2(e) instead (-inf stays -inf; weights exp2(lse2_k - max)),
// what FlashInfer and engines that merge with exp2 expect; merge_partials (mlakit/cp.h) takes
// either (MergeArgs::lse_base2). FlashMLA's convention (+inf for an empty row) is its shim's
// business (python/mlakit/_flashmla.py).
// ---------------------------------------------------------------------------------------------
inline constexpr float kDefaultSoftmaxScale = 0.041666666666666664f;  // 1/sqrt(576)
// 1/sqrt(512), what FlashMLA uses by default with the V4 layout (d_qk 512): set it explicitly.
inline constexpr float kV4SoftmaxScale = 0.044194173824159216f;

struct RunArgs {
  int32_t batch = 0;  // b, 1..Problem::max_batch

  const void* q = nullptr;         // [b, s_q, h_q, d_qk] of q_dtype
  const void* kv_cache = nullptr;  // [num_pages, kv_page_bytes]: [page_size, 576] of kv_dtype,
                                   // [page_size, 656 bytes], or a kFp8V4 page
  int64_t num_pages = 0;           // pages in kv_cache (bounds for ids and indices)
  const int32_t* block_table = nullptr;  // [b, block_table_stride] page ids (dense mode)
  int64_t block_table_stride = 0;        // elements between rows of block_table
  // [b] cached lengths, 0..min(max_seq_len, block_table_stride * page_size) (dense mode). The
  // cpu backend refuses longer ones; GPU backends cannot check device memory and clamp them.
  const int32_t* seq_lens = nullptr;
  // [b + 1] query-token offsets (Problem::var_q): request i owns the packed q/out/lse rows
  // cu_seqlens_q[i] .. cu_seqlens_q[i + 1] - 1, 0..s_q of them (where seq_lens lives: device
  // memory for GPU backends). Must be null without var_q.
  const int32_t* cu_seqlens_q = nullptr;

  const int32_t* indices = nullptr;    // [b, s_q, topk] page * page_size + offset, -1 = empty
  const int32_t* topk_lens = nullptr;  // [b] optional: only the first topk_lens[i] slots count

  // The extra cache (Problem::extra_topk > 0), in the main cache's layout and dtype, with pages
  // of Problem::extra_page_size tokens; k_scale applies to it too.
  const void* extra_kv_cache = nullptr;  // [extra_num_pages, extra page bytes]
  int64_t extra_num_pages = 0;           // pages in extra_kv_cache (bounds for extra_indices)
  // [b, s_q, extra_topk] extra_page * extra_page_size + offset, -1 = empty
  const int32_t* extra_indices = nullptr;
  const int32_t* extra_topk_lens = nullptr;  // [b] optional: only the first ones count

  const float* sinks = nullptr;  // [h_q] sink logits (Problem::has_sinks)

  void* out = nullptr;   // [b, s_q, h_q, 512] of out_dtype
  float* lse = nullptr;  // [b, s_q, h_q] LSE (natural log, or base 2: Problem::lse_base2), -inf
                         // for an empty row; contiguous

  float softmax_scale = kDefaultSoftmaxScale;  // kV4SoftmaxScale is FlashMLA's for kFp8V4
  // fp8 dequantization scales: a host value, or a pointer to one float where the backend runs
  // (so a captured graph can follow a changing scale). NaN host value = not given.
  float q_scale = NAN;  // fp8 q
  float k_scale = NAN;  // fp8 dense kv (also the v scale); blockwise and V4: optional, scales
                        // the fp8 values (512 or 448), not the bf16 RoPE part
  const float* q_scale_ptr = nullptr;
  const float* k_scale_ptr = nullptr;

  // Views (see above): outer strides in elements, 0 = contiguous.
  int64_t q_stride_b = 0;       // between requests;      contiguous: s_q * h_q * d_qk
  int64_t q_stride_s = 0;       // between query tokens;  contiguous: h_q * d_qk
  int64_t q_stride_h = 0;       // between heads;         contiguous: d_qk (576, or 512)
  int64_t kv_stride_page = 0;   // between pages;         contiguous: page_size * token
  int64_t kv_stride_token = 0;  // between tokens;        contiguous: 576 (656 bytes blockwise)
  int64_t out_stride_b = 0;     // between requests;      contiguous: s_q * h_q * 512
  int64_t out_stride_s = 0;     // between query tokens;  contiguous: h_q * 512
  int64_t out_stride_h = 0;     // between heads;         contiguous: 512
};

// ---------------------------------------------------------------------------------------------
// Backends and the Decoder
// ---------------------------------------------------------------------------------------------
struct BackendInfo {
  std::string name;        // "cpu", "sm80", "sm90"
  std::string summary;     // one line
  std::string supports;    // what it runs: dtypes, page sizes, features
  bool available = false;  // usable on this machine now
  std::string unavailable_reason;
  bool device_memory = false;  // RunArgs pointers must be device pointers
};

std::vector<BackendInfo> list_backends();

// Whether `backend` can run `problem` on this machine; the reason when not.
Status can_run(std::string_view backend, const Problem& problem);

struct DeviceInfo {
  bool present = false;
  int device = -1;
  std::string name;
  int sm_major = 0, sm_minor = 0, sm_count = 0;
  size_t global_mem_bytes = 0, l2_bytes = 0;
  std::string error;  // why no device was found
};
DeviceInfo current_device();

struct DecoderOptions {
  // "auto": per batch bucket, the tune cache's winner for this GPU, else the nearest tuned
  // bucket, else a heuristic; or a backend name ("cpu", "sm80", ...).
  std::string backend = "auto";
  // Backend-specific tactic; -1 = the backend's default for each batch bucket (sm90's depends on
  // the batch and max_seq_len; `tactic(batch)` says which runs).
  int tactic = -1;
  std::string tune_cache_path;  // tune cache (JSON); empty = $MLAKIT_TUNE_CACHE, or none
  // With backend "auto": measure the bucket of (max_batch, max_seq_len) now if the cache has no
  // entry for it, and save the result to the cache. It times a uniform and a ragged batch
  // (docs/autotuner.md), which takes about twice as long as the uniform one alone. Never while
  // `stream` is capturing a graph (then the cache or the heuristic decides and notes() says so).
  bool tune = false;
  Stream stream = nullptr;
};

class Backend;

class Decoder {
 public:
  // Validates `problem`, picks the backend(s) and prepares them. May allocate, synchronize and
  // (with DecoderOptions::tune) measure.
  static Status create(const Problem& problem, const DecoderOptions& options,
                       std::unique_ptr<Decoder>* decoder);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  const Problem& problem() const { return problem_; }
  // The backend and tactic that run a call of `batch` requests (default: max_batch).
  std::string_view backend_name(int batch = 0) const;
  int tactic(int batch = 0) const;
  bool device_memory() const;      // whether RunArgs pointers must be device pointers
  size_t workspace_bytes() const;  // exact for the worst case of the problem; may be 0
  // How the backends were chosen, and any warning (an ignored tune cache, skipped tuning).
  const std::string& notes() const { return notes_; }

  // Checks `args` against the problem (cheap host checks, nothing read from device memory), then
  // runs asynchronously on `stream`. `workspace` must hold workspace_bytes() bytes, 256-aligned.
  Status run(const RunArgs& args, void* workspace, size_t workspace_size, Stream stream) const;

  // A debugging aid, not for the hot path: reads the data of `args` that no run checks (the
  // lengths, the block-table entries a run would use, sparse indices and their lengths, sinks,
  // scales behind pointers), synchronizing with `stream` first for a GPU backend, and returns
  // the first value out of range as kInvalidArgument naming it ("block_table[3, 17]: expected a
  // page id in 0..4095, given 70000"). The cpu backend refuses such runs; the GPU backends never
  // read through such an entry and leave it out (a page id out of range is masked: its tokens
  // contribute nothing; an index out of range is skipped) and never report it: this says where
  // it is.
  Status check_data(const RunArgs& args, Stream stream) const;

 private:
  struct Route {
    std::unique_ptr<Backend> backend;
    int tactic = 0;
  };
  Decoder() = default;
  const Route& route(int batch) const;

  Problem problem_;
  std::vector<Route> routes_;       // distinct (backend, tactic) pairs
  std::vector<uint8_t> by_bucket_;  // batch bucket index -> routes_ index
  size_t workspace_bytes_ = 0;
  std::string notes_;
};

// Checks per-call arguments against a problem; used by Decoder::run, exposed for tests and tools.
// Besides each argument's own rules: out, lse and the workspace (written) may not overlap any
// other argument, judged from the addresses and the shapes given above.
Status validate_args(const Problem& problem, const RunArgs& args, size_t workspace_needed,
                     const void* workspace, size_t workspace_size);

}  // namespace mlakit
