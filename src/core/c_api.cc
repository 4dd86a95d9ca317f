// The C API (mlakit_c.h): a thin layer over the C++ API for FFI.
#include <cstring>

#include "core/check.h"
#include "core/guard.h"
#include "mlakit/cp.h"
#include "mlakit/mlakit.h"
#include "mlakit/mlakit_c.h"
#include "mlakit/ops.h"

struct mlakit_decoder {
  std::unique_ptr<mlakit::Decoder> decoder;
};

namespace {

thread_local std::string g_last_error;
// Set when the message of a failed call could not be kept (out of host memory).
thread_local bool g_last_error_lost = false;

mlakit_status_t finish(const mlakit::Status& status) noexcept {
  try {
    g_last_error = status.ok() ? std::string() : status.to_string();
    g_last_error_lost = false;
  } catch (...) {
    g_last_error.clear();
    g_last_error_lost = !status.ok();
  }
  return static_cast<mlakit_status_t>(status.code());
}

mlakit::Problem to_cpp(const mlakit_problem_t& p) {
  return mlakit::Problem{
      .h_q = p.h_q,
      .s_q = p.s_q,
      .d_qk = p.d_qk,
      .d_v = p.d_v,
      .page_size = p.page_size,
      .max_batch = p.max_batch,
      .max_seq_len = p.max_seq_len,
      .q_dtype = static_cast<mlakit::DType>(p.q_dtype),
      .kv_dtype = static_cast<mlakit::DType>(p.kv_dtype),
      .out_dtype = static_cast<mlakit::DType>(p.out_dtype),
      .kv_layout = static_cast<mlakit::KvLayout>(p.kv_layout),
      .causal = p.causal != 0,
      .var_q = p.var_q != 0,
      .has_sinks = p.has_sinks != 0,
      .topk = p.topk,
      .extra_topk = p.extra_topk,
      .extra_page_size = p.extra_page_size,
      .return_lse = p.return_lse != 0,
      .lse_base2 = p.lse_base2 != 0,
      .enable_pdl = p.enable_pdl != 0,
      .cp_world = p.cp_world,
      .cp_rank = p.cp_rank,
      .cp_interleave = p.cp_interleave,
  };
}

mlakit::RunArgs to_cpp(const mlakit_run_args_t& a) {
  return mlakit::RunArgs{
      .batch = a.batch,
      .q = a.q,
      .kv_cache = a.kv_cache,
      .num_pages = a.num_pages,
      .block_table = a.block_table,
      .block_table_stride = a.block_table_stride,
      .seq_lens = a.seq_lens,
      .cu_seqlens_q = a.cu_seqlens_q,
      .indices = a.indices,
      .topk_lens = a.topk_lens,
      .extra_kv_cache = a.extra_kv_cache,
      .extra_num_pages = a.extra_num_pages,
      .extra_indices = a.extra_indices,
      .extra_topk_lens = a.extra_topk_lens,
      .sinks = a.sinks,
      .out = a.out,
      .lse = a.lse,
      .softmax_scale = a.softmax_scale,
      .q_scale = a.q_scale,
      .k_scale = a.k_scale,
      .q_scale_ptr = a.q_scale_ptr,
      .k_scale_ptr = a.k_scale_ptr,
      .q_stride_b = a.q_stride_b,
      .q_stride_s = a.q_stride_s,
      .q_stride_h = a.q_stride_h,
      .kv_stride_page = a.kv_stride_page,
      .kv_stride_token = a.kv_stride_token,
      .out_stride_b = a.out_stride_b,
      .out_stride_s = a.out_stride_s,
      .out_stride_h = a.out_stride_h,
  };
}

static_assert(MLAKIT_DEVICE_CPU == static_cast<int>(mlakit::ops::Device::kCpu) &&
              MLAKIT_DEVICE_CUDA == static_cast<int>(mlakit::ops::Device::kCuda));

mlakit::MergeArgs to_cpp(const mlakit_merge_args_t& a) {
  return mlakit::MergeArgs{
      .world = a.world,
      .batch = a.batch,
      .s_q = a.s_q,
      .h_q = a.h_q,
      .dtype = static_cast<mlakit::DType>(a.dtype),
      .partial_out = a.partial_out,
      .partial_lse = a.partial_lse,
      .partial_out_stride = a.partial_out_stride,
      .partial_lse_stride = a.partial_lse_stride,
      .sinks = a.sinks,
      .out = a.out,
      .lse = a.lse,
      .lse_base2 = a.lse_base2 != 0,
  };
}

static_assert(MLAKIT_INDEXER_SCALE_AMAX == static_cast<int>(mlakit::ops::IndexerScale::kAmax) &&
              MLAKIT_INDEXER_SCALE_POW2 ==
                  static_cast<int>(mlakit::ops::IndexerScale::kPowerOfTwo));

mlakit::ops::AppendKvArgs to_cpp(const mlakit_append_kv_args_t& a) {
  return {.n_tokens = a.n_tokens,
          .kv = a.kv,
          .kv_dtype = static_cast<mlakit::DType>(a.kv_dtype),
          .kv_stride = a.kv_stride,
          .slot_mapping = a.slot_mapping,
          .kv_cache = a.kv_cache,
          .num_pages = a.num_pages,
          .page_size = a.page_size,
          .cache_dtype = static_cast<mlakit::DType>(a.cache_dtype),
          .cache_layout = static_cast<mlakit::KvLayout>(a.cache_layout),
          .k_scale = a.k_scale,
          .k_scale_ptr = a.k_scale_ptr,
          .enable_pdl = a.enable_pdl != 0};
}

mlakit::ops::AppendIndexerArgs to_cpp(const mlakit_append_indexer_args_t& a) {
  return {.n_tokens = a.n_tokens,
          .k = a.k,
          .k_dtype = static_cast<mlakit::DType>(a.k_dtype),
          .k_stride = a.k_stride,
          .slot_mapping = a.slot_mapping,
          .index_cache = a.index_cache,
          .num_pages = a.num_pages,
          .page_size = a.page_size,
          .scale = static_cast<mlakit::ops::IndexerScale>(a.scale),
          .enable_pdl = a.enable_pdl != 0};
}

mlakit::ops::IndexerLogitsArgs to_cpp(const mlakit_indexer_logits_args_t& a) {
  return {.batch = a.batch,
          .next_n = a.next_n,
          .heads = a.heads,
          .q = a.q,
          .weights = a.weights,
          .index_cache = a.index_cache,
          .num_pages = a.num_pages,
          .page_size = a.page_size,
          .block_table = a.block_table,
          .block_table_stride = a.block_table_stride,
          .seq_lens = a.seq_lens,
          .logits = a.logits,
          .max_len = a.max_len,
          .logits_stride = a.logits_stride,
          .enable_pdl = a.enable_pdl != 0};
}

mlakit::ops::TopkArgs to_cpp(const mlakit_topk_args_t& a) {
  return {.batch = a.batch,
          .next_n = a.next_n,
          .k = a.k,
          .logits = a.logits,
          .max_len = a.max_len,
          .logits_stride = a.logits_stride,
          .seq_lens = a.seq_lens,
          .block_table = a.block_table,
          .block_table_stride = a.block_table_stride,
          .page_size = a.page_size,
          .indices = a.indices,
          .positions = a.positions,
          .workspace = a.workspace,
          .workspace_size = a.workspace_size,
          .deterministic = a.nondeterministic == 0,
          .enable_pdl = a.enable_pdl != 0};
}

// An op (ops.h, or cp.h's merge) on its C arguments: a null args pointer is refused by name; the
// op checks the device value and everything else and returns its Status (never throws).
template <typename CArgs, typename Op>
mlakit_status_t run_op(int32_t device, const CArgs* args, void* stream, Op op) {
  if (args == nullptr) {
    return finish(
        {mlakit::StatusCode::kInvalidArgument, "args: expected a non-null pointer, given nullptr"});
  }
  return finish(op(static_cast<mlakit::ops::Device>(device), to_cpp(*args),
                   static_cast<mlakit::Stream>(stream)));
}

}  // namespace

extern "C" {

void mlakit_problem_init(mlakit_problem_t* p) {
  if (p == nullptr) return;
  const mlakit::Problem d;
  *p = mlakit_problem_t{
      .h_q = d.h_q,
      .s_q = d.s_q,
      .d_qk = d.d_qk,
      .d_v = d.d_v,
      .page_size = d.page_size,
      .max_batch = d.max_batch,
      .max_seq_len = d.max_seq_len,
      .q_dtype = static_cast<int32_t>(d.q_dtype),
      .kv_dtype = static_cast<int32_t>(d.kv_dtype),
      .out_dtype = static_cast<int32_t>(d.out_dtype),
      .kv_layout = static_cast<int32_t>(d.kv_layout),
      .causal = d.causal,
      .has_sinks = d.has_sinks,
      .topk = d.topk,
      .return_lse = d.return_lse,
      .enable_pdl = d.enable_pdl,
      .extra_topk = d.extra_topk,
      .extra_page_size = d.extra_page_size,
      .cp_world = d.cp_world,
      .cp_rank = d.cp_rank,
      .cp_interleave = d.cp_interleave,
      .lse_base2 = d.lse_base2,
      .var_q = d.var_q,
  };
}

void mlakit_run_args_init(mlakit_run_args_t* a) {
  if (a == nullptr) return;
  std::memset(a, 0, sizeof(*a));
  const mlakit::RunArgs d;
  a->softmax_scale = d.softmax_scale;
  a->q_scale = d.q_scale;
  a->k_scale = d.k_scale;
}

mlakit_status_t mlakit_decoder_create(const mlakit_problem_t* problem, const char* backend,
                                      mlakit_decoder_t** decoder) {
  if (problem == nullptr || decoder == nullptr) {
    return finish({mlakit::StatusCode::kInvalidArgument,
                   "problem, decoder: expected non-null pointers, given nullptr"});
  }
  return finish(mlakit::guarded("mlakit_decoder_create", [&]() -> mlakit::Status {
    mlakit::DecoderOptions options;
    if (backend != nullptr) options.backend = backend;
    std::unique_ptr<mlakit::Decoder> d;
    MLAKIT_RETURN_IF_ERROR(mlakit::Decoder::create(to_cpp(*problem), options, &d));
    *decoder = new mlakit_decoder{std::move(d)};
    return mlakit::Status::Ok();
  }));
}

void mlakit_decoder_destroy(mlakit_decoder_t* decoder) { delete decoder; }

size_t mlakit_decoder_workspace_bytes(const mlakit_decoder_t* decoder) {
  return decoder == nullptr ? 0 : decoder->decoder->workspace_bytes();
}

const char* mlakit_decoder_backend(const mlakit_decoder_t* decoder) {
  return decoder == nullptr ? "" : decoder->decoder->backend_name().data();
}

mlakit_status_t mlakit_decoder_run(const mlakit_decoder_t* decoder, const mlakit_run_args_t* args,
                                   void* workspace, size_t workspace_size, void* stream) {
  if (decoder == nullptr || args == nullptr) {
    return finish({mlakit::StatusCode::kInvalidArgument,
                   "decoder, args: expected non-null pointers, given nullptr"});
  }
  return finish(decoder->decoder->run(to_cpp(*args), workspace, workspace_size,
                                      static_cast<mlakit::Stream>(stream)));
}

void mlakit_merge_args_init(mlakit_merge_args_t* a) {
  if (a == nullptr) return;
  std::memset(a, 0, sizeof(*a));
  const mlakit::MergeArgs d;
  a->world = d.world;
  a->batch = d.batch;
  a->s_q = d.s_q;
  a->h_q = d.h_q;
  a->dtype = static_cast<int32_t>(d.dtype);
}

mlakit_status_t mlakit_merge_partials(int32_t device, const mlakit_merge_args_t* args,
                                      void* stream) {
  return run_op(device, args, stream, mlakit::merge_partials);
}

size_t mlakit_kv_page_bytes(int32_t kv_dtype, int32_t kv_layout, int32_t page_size) {
  // The caches there are: dense bf16, fp16 or e4m3; the fp8 layouts of e4m3.
  const bool dense =
      kv_layout == MLAKIT_KV_DENSE &&
      (kv_dtype == MLAKIT_BF16 || kv_dtype == MLAKIT_FP16 || kv_dtype == MLAKIT_FP8_E4M3);
  const bool fp8_layout = (kv_layout == MLAKIT_KV_FP8_BLOCKWISE || kv_layout == MLAKIT_KV_FP8_V4) &&
                          kv_dtype == MLAKIT_FP8_E4M3;
  if (!(dense || fp8_layout) || page_size < 1) return 0;
  return mlakit::kv_page_bytes(static_cast<mlakit::DType>(kv_dtype),
                               static_cast<mlakit::KvLayout>(kv_layout), page_size);
}

size_t mlakit_indexer_page_bytes(int32_t page_size) {
  return page_size >= 1 ? mlakit::ops::indexer_page_bytes(page_size) : 0;
}

void mlakit_append_kv_args_init(mlakit_append_kv_args_t* a) {
  if (a == nullptr) return;
  std::memset(a, 0, sizeof(*a));
  const mlakit::ops::AppendKvArgs d;
  a->kv_dtype = static_cast<int32_t>(d.kv_dtype);
  a->page_size = d.page_size;
  a->cache_dtype = static_cast<int32_t>(d.cache_dtype);
  a->cache_layout = static_cast<int32_t>(d.cache_layout);
  a->k_scale = d.k_scale;
}

void mlakit_append_indexer_args_init(mlakit_append_indexer_args_t* a) {
  if (a == nullptr) return;
  std::memset(a, 0, sizeof(*a));
  const mlakit::ops::AppendIndexerArgs d;
  a->k_dtype = static_cast<int32_t>(d.k_dtype);
  a->page_size = d.page_size;
  a->scale = static_cast<int32_t>(d.scale);
}

void mlakit_indexer_logits_args_init(mlakit_indexer_logits_args_t* a) {
  if (a == nullptr) return;
  std::memset(a, 0, sizeof(*a));
  const mlakit::ops::IndexerLogitsArgs d;
  a->next_n = d.next_n;
  a->heads = d.heads;
  a->page_size = d.page_size;
}

void mlakit_topk_args_init(mlakit_topk_args_t* a) {
  if (a == nullptr) return;
  std::memset(a, 0, sizeof(*a));
  const mlakit::ops::TopkArgs d;
  a->next_n = d.next_n;
  a->k = d.k;
  a->page_size = d.page_size;
  a->nondeterministic = d.deterministic ? 0 : 1;
}

mlakit_status_t mlakit_append_kv(int32_t device, const mlakit_append_kv_args_t* args,
                                 void* stream) {
  return run_op(device, args, stream, mlakit::ops::append_kv);
}

mlakit_status_t mlakit_append_indexer(int32_t device, const mlakit_append_indexer_args_t* args,
                                      void* stream) {
  return run_op(device, args, stream, mlakit::ops::append_indexer);
}

mlakit_status_t mlakit_indexer_logits(int32_t device, const mlakit_indexer_logits_args_t* args,
                                      void* stream) {
  return run_op(device, args, stream, mlakit::ops::indexer_logits);
}

size_t mlakit_topk_workspace_bytes(const mlakit_topk_args_t* args) {
  return args == nullptr ? 0 : mlakit::ops::topk_workspace_bytes(to_cpp(*args));
}

mlakit_status_t mlakit_topk_indices(int32_t device, const mlakit_topk_args_t* args, void* stream) {
  return run_op(device, args, stream, mlakit::ops::topk_indices);
}

const char* mlakit_last_error(void) {
  return g_last_error_lost ? "internal error: out of host memory (the message was lost)"
                           : g_last_error.c_str();
}

}  // extern "C"
