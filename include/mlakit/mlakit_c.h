/* mlakit C API: mirrors include/mlakit/mlakit.h for FFI. Enum values equal the C++ ones. */
#ifndef MLAKIT_MLAKIT_C_H_
#define MLAKIT_MLAKIT_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t mlakit_status_t; /* 0 ok, 1 invalid argument, 2 unsupported, 3 cuda, 4 internal */

enum { MLAKIT_BF16 = 0, MLAKIT_FP16 = 1, MLAKIT_FP8_E4M3 = 2, MLAKIT_FP32 = 3 };
enum { MLAKIT_KV_DENSE = 0, MLAKIT_KV_FP8_BLOCKWISE = 1, MLAKIT_KV_FP8_V4 = 2 };

typedef struct mlakit_problem {
  int32_t h_q, s_q, d_qk, d_v, page_size, max_batch, max_seq_len;
  int32_t q_dtype, kv_dtype, out_dtype, kv_layout;
  int32_t causal, has_sinks, topk, return_lse, enable_pdl;
  int32_t extra_topk, extra_page_size;      /* extra cache (sparse): 0 = none / page_size */
  int32_t cp_world, cp_rank, cp_interleave; /* context parallelism (mlakit.h): 1, 0, 1 = off */
  int32_t lse_base2; /* with return_lse: lse in base 2 (lse * log2(e), -inf stays -inf) */
  int32_t var_q;     /* variable query lengths (mlakit.h): q, out, lse packed by query token */
} mlakit_problem_t;

typedef struct mlakit_run_args {
  int32_t batch;
  const void* q;        /* [b, s_q, h_q, d_qk] */
  const void* kv_cache; /* [num_pages, page bytes] (mlakit::kv_page_bytes) */
  int64_t num_pages;
  const int32_t* block_table; /* [b, block_table_stride] */
  int64_t block_table_stride;
  const int32_t* seq_lens;  /* [b] */
  const int32_t* indices;   /* [b, s_q, topk], sparse */
  const int32_t* topk_lens; /* [b], optional */
  const float* sinks;       /* [h_q] */
  void* out;                /* [b, s_q, h_q, 512] */
  float* lse; /* [b, s_q, h_q], natural log (base 2: lse_base2); -inf and out 0 for an empty row */
  float softmax_scale;
  float q_scale, k_scale; /* NaN = not given */
  const float* q_scale_ptr;
  const float* k_scale_ptr;
  const void* extra_kv_cache; /* [extra_num_pages, extra page bytes], Problem::extra_topk > 0 */
  int64_t extra_num_pages;
  const int32_t* extra_indices;   /* [b, s_q, extra_topk] */
  const int32_t* extra_topk_lens; /* [b], optional */
  /* Views (mlakit.h, "Views"): outer strides in elements, 0 = contiguous. */
  int64_t q_stride_b, q_stride_s, q_stride_h;
  int64_t kv_stride_page, kv_stride_token;
  int64_t out_stride_b, out_stride_s, out_stride_h;
  /* [b + 1] query-token offsets (var_q): request i owns the packed rows cu_seqlens_q[i] ..
     cu_seqlens_q[i + 1] - 1 of q [total, h_q, d_qk], out [total, h_q, 512] and lse [total, h_q];
     q_stride_b and out_stride_b must be 0. NULL without var_q. */
  const int32_t* cu_seqlens_q;
} mlakit_run_args_t;

typedef struct mlakit_decoder mlakit_decoder_t;

/* Context parallelism (mlakit/cp.h): the merge of the ranks' partial results. */
enum { MLAKIT_DEVICE_CPU = 0, MLAKIT_DEVICE_CUDA = 1 }; /* mlakit::ops::Device */

typedef struct mlakit_merge_args {
  int32_t world; /* N partials, 1..kMaxCpWorld */
  int32_t batch; /* b, >= 0 (0 is a no-op) */
  int32_t s_q;   /* 1..kMaxSq */
  int32_t h_q;   /* 1..kMaxHeads */
  int32_t dtype; /* of partial_out and out: MLAKIT_BF16, MLAKIT_FP16 or MLAKIT_FP32 */
  /* Contiguous per partial, the out tensors 16-byte aligned; partial k at k times the strides
     below (0: [N, b, s_q, h_q, 512] and [N, b, s_q, h_q]). */
  const void* partial_out;  /* [N, b, s_q, h_q, 512] of dtype */
  const float* partial_lse; /* [N, b, s_q, h_q] natural log, -inf = empty partial */
  const float* sinks;       /* [h_q] sink logits, or NULL */
  void* out;                /* [b, s_q, h_q, 512] of dtype */
  float* lse;               /* [b, s_q, h_q] or NULL: the global LSE */
  int32_t lse_base2;        /* nonzero: partial_lse given and lse written in base 2 */
  /* Elements from partial k's first to partial k + 1's: 0, or from b s_q h_q 512 (a multiple of
     8) and b s_q h_q up to 2^40 (MergeArgs::partial_out_stride, partial_lse_stride). These two came
     last (2026-11-28): rebuild callers compiled against an older header. */
  int64_t partial_out_stride;
  int64_t partial_lse_stride;
} mlakit_merge_args_t;

/* The other ops of a sparse decode layer (mlakit/ops.h; semantics, quantization rules and what
   each checks there). Each runs where `device` says, as mlakit_merge_partials. Strides in
   elements, 0 = contiguous; dtypes MLAKIT_BF16 / ... and layouts MLAKIT_KV_... as above. */
enum { MLAKIT_INDEXER_SCALE_AMAX = 0, MLAKIT_INDEXER_SCALE_POW2 = 1 }; /* ops::IndexerScale */

typedef struct mlakit_append_kv_args {
  int64_t n_tokens;            /* 0 is a no-op */
  const void* kv;              /* [n_tokens, kv_stride] of kv_dtype (bf16 or fp16) */
  int32_t kv_dtype;            /* MLAKIT_BF16 or MLAKIT_FP16 */
  int64_t kv_stride;           /* 0 = the layout's d_qk (576; 512 for MLAKIT_KV_FP8_V4) */
  const int64_t* slot_mapping; /* [n_tokens] page * page_size + offset, -1 = skip */
  void* kv_cache;              /* [num_pages, mlakit_kv_page_bytes(cache_dtype, layout, ps)] */
  int64_t num_pages;
  int32_t page_size;
  int32_t cache_dtype;  /* MLAKIT_BF16 / MLAKIT_FP16 / MLAKIT_FP8_E4M3 dense; FP8_E4M3 otherwise */
  int32_t cache_layout; /* MLAKIT_KV_DENSE, MLAKIT_KV_FP8_BLOCKWISE or MLAKIT_KV_FP8_V4 */
  /* The dense e4m3 cache's scale (stored = x / k_scale): a value (NaN = not given) or a pointer to
     one float where the op runs; exactly one of them for that cache, neither for the others. */
  float k_scale;
  const float* k_scale_ptr;
  int32_t enable_pdl; /* nonzero: programmatic dependent launch (ops.h; sm_90 and newer) */
} mlakit_append_kv_args_t;

typedef struct mlakit_append_indexer_args {
  int64_t n_tokens;
  const void* k;               /* [n_tokens, k_stride] of k_dtype (bf16 or fp16), 128 used */
  int32_t k_dtype;             /* MLAKIT_BF16 or MLAKIT_FP16 */
  int64_t k_stride;            /* 0 = 128 */
  const int64_t* slot_mapping; /* [n_tokens], -1 = skip */
  void* index_cache;           /* [num_pages, mlakit_indexer_page_bytes(page_size)] */
  int64_t num_pages;
  int32_t page_size;
  int32_t scale;      /* MLAKIT_INDEXER_SCALE_AMAX or MLAKIT_INDEXER_SCALE_POW2 */
  int32_t enable_pdl; /* nonzero: programmatic dependent launch (ops.h; sm_90 and newer) */
} mlakit_append_indexer_args_t;

typedef struct mlakit_indexer_logits_args {
  int32_t batch;           /* b >= 0 */
  int32_t next_n;          /* query tokens per request, 1..16 */
  int32_t heads;           /* 1..128 */
  const uint8_t* q;        /* [b, next_n, heads, 128] e4m3 */
  const float* weights;    /* [b * next_n, heads] */
  const void* index_cache; /* [num_pages, mlakit_indexer_page_bytes(page_size)] */
  int64_t num_pages;
  int32_t page_size;
  const int32_t* block_table; /* [b, block_table_stride] page ids */
  int64_t block_table_stride;
  const int32_t* seq_lens; /* [b] */
  float* logits;           /* [b * next_n, logits_stride]: columns 0..max_len-1 written */
  int64_t max_len;
  int64_t logits_stride; /* 0 = max_len */
  int32_t enable_pdl;    /* nonzero: programmatic dependent launch (ops.h; sm_90 and newer) */
} mlakit_indexer_logits_args_t;

typedef struct mlakit_topk_args {
  int32_t batch;
  int32_t next_n;             /* 1..16 */
  int32_t k;                  /* 1..65536 */
  const float* logits;        /* [b * next_n, logits_stride] */
  int64_t max_len;            /* the longest length any call passes */
  int64_t logits_stride;      /* 0 = max_len */
  const int32_t* seq_lens;    /* [b], 0..max_len */
  const int32_t* block_table; /* [b, block_table_stride] */
  int64_t block_table_stride; /* >= ceil(max_len / page_size) */
  int32_t page_size;
  int32_t* indices;   /* [b * next_n, k]: sparse-decode indices, -1 padded */
  int32_t* positions; /* [b * next_n, k] or NULL: the kept positions, -1 padded */
  void* workspace;    /* NULL, or mlakit_topk_workspace_bytes(args) bytes of device memory */
  size_t workspace_size;
  /* 0 (the default, what a zeroed struct holds): deterministic; nonzero: kept positions in any
     order, ties at the k-th largest kept in any choice (ops.h, TopkArgs::deterministic false) */
  int32_t nondeterministic;
  int32_t enable_pdl; /* nonzero: programmatic dependent launch (ops.h; sm_90 and newer) */
} mlakit_topk_args_t;

/* Fill with the C++ defaults (h_q 128, s_q 1, page 64, bf16, softmax scale 1/sqrt(576), ...). */
void mlakit_problem_init(mlakit_problem_t* problem);
void mlakit_run_args_init(mlakit_run_args_t* args);

/* backend: "auto", "cpu", "sm80", ... or NULL for "auto". */
mlakit_status_t mlakit_decoder_create(const mlakit_problem_t* problem, const char* backend,
                                      mlakit_decoder_t** decoder);
void mlakit_decoder_destroy(mlakit_decoder_t* decoder);
size_t mlakit_decoder_workspace_bytes(const mlakit_decoder_t* decoder);
const char* mlakit_decoder_backend(const mlakit_decoder_t* decoder);
/* stream: a cudaStream_t, or NULL for the default stream. */
mlakit_status_t mlakit_decoder_run(const mlakit_decoder_t* decoder, const mlakit_run_args_t* args,
                                   void* workspace, size_t workspace_size, void* stream);
/* Fill with the C++ defaults (s_q 1, bf16, everything else 0 / NULL). */
void mlakit_merge_args_init(mlakit_merge_args_t* args);
/* device: MLAKIT_DEVICE_CPU (host pointers, synchronous) or MLAKIT_DEVICE_CUDA (device pointers,
   asynchronous on stream, a cudaStream_t or NULL for the default stream; unsupported in a build
   without CUDA). */
mlakit_status_t mlakit_merge_partials(int32_t device, const mlakit_merge_args_t* args,
                                      void* stream);
/* Bytes of one page of a KV cache (mlakit::kv_page_bytes: dense bf16, fp16 or e4m3, or the
   e4m3 layouts) and of the indexer cache (ops::indexer_page_bytes); 0 for any other dtype and
   layout pair or a page size below 1. */
size_t mlakit_kv_page_bytes(int32_t kv_dtype, int32_t kv_layout, int32_t page_size);
size_t mlakit_indexer_page_bytes(int32_t page_size);
/* Fill with the C++ defaults (page 64, bf16, a dense cache, k_scale NaN; heads 64, next_n 1;
   k 2048; everything else 0 / NULL). */
void mlakit_append_kv_args_init(mlakit_append_kv_args_t* args);
void mlakit_append_indexer_args_init(mlakit_append_indexer_args_t* args);
void mlakit_indexer_logits_args_init(mlakit_indexer_logits_args_t* args);
void mlakit_topk_args_init(mlakit_topk_args_t* args);
/* device and stream as for mlakit_merge_partials. */
mlakit_status_t mlakit_append_kv(int32_t device, const mlakit_append_kv_args_t* args, void* stream);
mlakit_status_t mlakit_append_indexer(int32_t device, const mlakit_append_indexer_args_t* args,
                                      void* stream);
mlakit_status_t mlakit_indexer_logits(int32_t device, const mlakit_indexer_logits_args_t* args,
                                      void* stream);
/* The multi-block top-k kernel's workspace for these shapes (0: none needed; ops.h). */
size_t mlakit_topk_workspace_bytes(const mlakit_topk_args_t* args);
mlakit_status_t mlakit_topk_indices(int32_t device, const mlakit_topk_args_t* args, void* stream);
/* The message of this thread's last failed call ("" after a success). */
const char* mlakit_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* MLAKIT_MLAKIT_C_H_ */
