// The ops' bindings, and the context-parallel merge (mlakit/cp.h): each takes its arrays (checked
// by name, as the Decoder's), fills the op's Args and runs it on the host (device -1) or on CUDA
// device `device` on `stream`, without synchronizing. mlakit/ops.py resolves dtypes, page sizes,
// outputs, the top-k's workspace and the caller's stream.
#include "ops.h"

#include <nanobind/stl/string.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "arrays.h"
#include "mlakit/cp.h"
#include "mlakit/ops.h"
#include "status.h"

namespace mlakit::python {
namespace {

DType input_dtype(const char* arg, const std::string& name) {
  if (name == "bf16") return DType::kBF16;
  if (name == "fp16") return DType::kFP16;
  if (name == "fp8_e4m3") return DType::kFP8E4M3;
  throw_value_error(std::string(arg) + ": expected bf16, fp16 or fp8_e4m3, given " + name);
}

Placement placement_of(int device) {
  return Placement{.device_memory = device >= 0,
                   .device = device,
                   .backend = device >= 0 ? "cuda" : "cpu",
                   .why = "the op runs where its first array is"};
}

ops::Device op_device(int device) { return device >= 0 ? ops::Device::kCuda : ops::Device::kCpu; }

// Runs `op` without the GIL (the cpu references compute; the CUDA path only launches) with the
// arrays' device current.
template <typename Op>
void run_op(int device, Op op) {
  DeviceGuard guard(device);
  Status status;
  {
    nb::gil_scoped_release release;
    status = op();
  }
  check_ok(status);
}

// The n slots of an append: [n] int64.
const int64_t* take_slots(ArgReader& in, nb::handle obj, int64_t n) {
  return static_cast<const int64_t*>(
      in.take("slot_mapping", obj, Elem::kInt64, {n}, "[n_tokens]").data());
}

void append_kv(nb::handle kv, const std::string& kv_dtype, nb::handle slot_mapping,
               nb::handle kv_cache, const std::string& cache_dtype, const std::string& layout,
               int page_size, nb::handle k_scale, int device, uintptr_t stream, bool enable_pdl) {
  ArgReader in(placement_of(device));
  ops::AppendKvArgs args;
  args.enable_pdl = enable_pdl;
  if (layout == "dense") {
    args.cache_layout = KvLayout::kDense;
  } else if (layout == "fp8_blockwise") {
    args.cache_layout = KvLayout::kFp8Blockwise;
  } else if (layout == "fp8_v4") {
    args.cache_layout = KvLayout::kFp8V4;
  } else {
    throw_value_error("kv_layout: expected dense, fp8_blockwise or fp8_v4, given " + layout);
  }
  const int64_t d = layout_d_qk(args.cache_layout);
  args.kv_dtype = input_dtype("kv", kv_dtype);
  args.cache_dtype = input_dtype("kv_cache", cache_dtype);
  const std::string kv_dims = "[n_tokens, " + std::to_string(d) + "]";
  const Array& akv = in.take_view("kv", kv, elem_of(args.kv_dtype), {{-1, d}}, kv_dims.c_str());
  args.n_tokens = static_cast<int64_t>(akv.shape(0));
  args.kv = akv.data();
  args.kv_stride = view_stride(akv, 0);
  args.slot_mapping = take_slots(in, slot_mapping, args.n_tokens);

  const Array* cache = nullptr;
  if (args.cache_layout == KvLayout::kFp8V4) {
    cache = &in.take_v4_cache(
        "kv_cache", kv_cache, page_size,
        static_cast<int64_t>(kv_page_bytes(args.cache_dtype, args.cache_layout, page_size)));
  } else {
    const bool blockwise = args.cache_layout == KvLayout::kFp8Blockwise;
    const int64_t width = blockwise ? kBlockwiseBytes : kDqk;
    const char* dims =
        blockwise ? "[num_pages, page_size, 656 bytes] (or with a 1 before or after page_size)"
                  : "[num_pages, page_size, 576] (or with a 1 before or after page_size)";
    cache = &in.take_any_shape(
        "kv_cache", kv_cache, blockwise ? Elem::kBytes : elem_of(args.cache_dtype),
        {{-1, page_size, width}, {-1, page_size, 1, width}, {-1, 1, page_size, width}}, dims);
  }
  args.kv_cache = const_cast<void*>(cache->data());
  args.num_pages = static_cast<int64_t>(cache->shape(0));
  args.page_size = page_size;
  in.take_scale("k_scale", k_scale, &args.k_scale, &args.k_scale_ptr);
  run_op(device,
         [&] { return ops::append_kv(op_device(device), args, reinterpret_cast<Stream>(stream)); });
}

void append_indexer(nb::handle k, const std::string& k_dtype, nb::handle slot_mapping,
                    nb::handle index_cache, int page_size, const std::string& scale, int device,
                    uintptr_t stream, bool enable_pdl) {
  ArgReader in(placement_of(device));
  ops::AppendIndexerArgs args;
  args.enable_pdl = enable_pdl;
  if (scale == "amax") {
    args.scale = ops::IndexerScale::kAmax;
  } else if (scale == "ue8m0") {
    args.scale = ops::IndexerScale::kPowerOfTwo;
  } else {
    throw_value_error("scale: expected amax or ue8m0, given " + scale);
  }
  args.k_dtype = input_dtype("k", k_dtype);
  const Array& ak =
      in.take_view("k", k, elem_of(args.k_dtype), {{-1, ops::kIndexerDim}}, "[n_tokens, 128]");
  args.n_tokens = static_cast<int64_t>(ak.shape(0));
  args.k = ak.data();
  args.k_stride = view_stride(ak, 0);
  args.slot_mapping = take_slots(in, slot_mapping, args.n_tokens);
  const auto page_bytes = static_cast<int64_t>(ops::indexer_page_bytes(page_size));
  const std::string dims =
      "[num_pages, page_size * 132 bytes] (page_size " + std::to_string(page_size) + ")";
  const Array& cache =
      in.take("index_cache", index_cache, Elem::kBytes, {-1, page_bytes}, dims.c_str());
  args.index_cache = const_cast<void*>(cache.data());
  args.num_pages = static_cast<int64_t>(cache.shape(0));
  args.page_size = page_size;
  run_op(device, [&] {
    return ops::append_indexer(op_device(device), args, reinterpret_cast<Stream>(stream));
  });
}

void indexer_logits(nb::handle q, nb::handle weights, nb::handle index_cache, int page_size,
                    nb::handle block_table, nb::handle seq_lens, nb::handle logits, int device,
                    uintptr_t stream, bool enable_pdl) {
  ArgReader in(placement_of(device));
  ops::IndexerLogitsArgs args;
  args.enable_pdl = enable_pdl;
  const Array& aq =
      in.take("q", q, Elem::kFP8, {-1, -1, -1, ops::kIndexerDim}, "[b, next_n, heads, 128]");
  const auto b = static_cast<int64_t>(aq.shape(0));
  args.batch = static_cast<int32_t>(b);
  args.next_n = static_cast<int32_t>(aq.shape(1));
  args.heads = static_cast<int32_t>(aq.shape(2));
  args.q = static_cast<const uint8_t*>(aq.data());
  const int64_t rows = b * args.next_n;
  args.weights = static_cast<const float*>(
      in.take_any_shape("weights", weights, Elem::kFP32,
                        {{rows, args.heads}, {b, args.next_n, args.heads}},
                        "[b * next_n, heads] (or [b, next_n, heads])")
          .data());
  const auto page_bytes = static_cast<int64_t>(ops::indexer_page_bytes(page_size));
  const std::string dims =
      "[num_pages, page_size * 132 bytes] (page_size " + std::to_string(page_size) + ")";
  const Array& cache =
      in.take("index_cache", index_cache, Elem::kBytes, {-1, page_bytes}, dims.c_str());
  args.index_cache = cache.data();
  args.num_pages = static_cast<int64_t>(cache.shape(0));
  args.page_size = page_size;
  const Array& table = in.take_block_table(block_table, b);
  args.block_table = static_cast<const int32_t*>(table.data());
  args.block_table_stride = b == 1 ? static_cast<int64_t>(table.shape(1)) : table.stride(0);
  args.seq_lens =
      static_cast<const int32_t*>(in.take("seq_lens", seq_lens, Elem::kInt32, {b}, "[b]").data());
  const Array& out =
      in.take_view("logits", logits, Elem::kFP32, {{rows, -1}}, "[b * next_n, max_len]");
  args.logits = static_cast<float*>(const_cast<void*>(out.data()));
  args.max_len = static_cast<int64_t>(out.shape(1));
  args.logits_stride = view_stride(out, 0);
  run_op(device, [&] {
    return ops::indexer_logits(op_device(device), args, reinterpret_cast<Stream>(stream));
  });
}

// ops::topk_workspace_bytes for these shapes: 0 where they run one block a row, and for values
// out of the library's ranges (checked here before they are narrowed to TopkArgs' int32 fields).
size_t topk_workspace_bytes(int64_t batch, int64_t next_n, int64_t max_len, int64_t k) {
  const auto fits = [](int64_t v) { return v >= 0 && v <= INT32_MAX; };
  if (!fits(batch) || !fits(next_n) || !fits(k)) return 0;
  ops::TopkArgs args;
  args.batch = static_cast<int32_t>(batch);
  args.next_n = static_cast<int32_t>(next_n);
  args.max_len = max_len;
  args.k = static_cast<int32_t>(k);
  return ops::topk_workspace_bytes(args);
}

void topk_indices(nb::handle logits, nb::handle seq_lens, nb::handle block_table, int page_size,
                  int next_n, int64_t max_len, nb::handle indices, nb::handle positions,
                  nb::handle workspace, bool deterministic, int device, uintptr_t stream,
                  bool enable_pdl) {
  ArgReader in(placement_of(device));
  ops::TopkArgs args;
  args.deterministic = deterministic;
  args.enable_pdl = enable_pdl;
  const Array& lens = in.take("seq_lens", seq_lens, Elem::kInt32, {-1}, "[b]");
  const auto b = static_cast<int64_t>(lens.shape(0));
  args.batch = static_cast<int32_t>(b);
  args.next_n = next_n;
  args.seq_lens = static_cast<const int32_t*>(lens.data());
  const int64_t rows = b * next_n;
  const Array& al =
      in.take_view("logits", logits, Elem::kFP32, {{rows, -1}}, "[b * next_n, >= max_len]");
  if (max_len < 0 || max_len > static_cast<int64_t>(al.shape(1))) {
    throw_value_error("max_len: expected 0.." + std::to_string(al.shape(1)) +
                      " (the columns of logits), given " + std::to_string(max_len));
  }
  args.logits = static_cast<const float*>(al.data());
  args.max_len = max_len;
  args.logits_stride = rows <= 1 ? static_cast<int64_t>(al.shape(1)) : al.stride(0);
  const Array& table = in.take_block_table(block_table, b);
  args.block_table = static_cast<const int32_t*>(table.data());
  args.block_table_stride = b == 1 ? static_cast<int64_t>(table.shape(1)) : table.stride(0);
  args.page_size = page_size;
  const Array& out =
      in.take_any_shape("indices", indices, Elem::kInt32, {{rows, -1}, {b, next_n, -1}},
                        "[b * next_n, k] (or [b, next_n, k])");
  args.k = static_cast<int32_t>(out.shape(out.ndim() - 1));
  args.indices = static_cast<int32_t*>(const_cast<void*>(out.data()));
  if (!positions.is_none()) {
    const std::vector<int64_t> flat = {rows, args.k};
    const std::vector<int64_t> nested = {b, next_n, args.k};
    const Array& pos = in.take_any_shape("positions", positions, Elem::kInt32, {flat, nested},
                                         "the shape of indices");
    args.positions = static_cast<int32_t*>(const_cast<void*>(pos.data()));
  }
  if (!workspace.is_none()) {
    const Array& ws = in.take_workspace(workspace, ops::topk_workspace_bytes(args), Elem::kUInt8,
                                        "mlakit.ops.topk_workspace_bytes");
    // An empty array (enough where these shapes need 0 bytes; its address may be anything) is
    // no workspace.
    if (ws.nbytes() > 0) {
      args.workspace = const_cast<void*>(ws.data());
      args.workspace_size = ws.nbytes();
    }
  }
  run_op(device, [&] {
    return ops::topk_indices(op_device(device), args, reinterpret_cast<Stream>(stream));
  });
}

// merge_partials (mlakit/cp.h) for mlakit/cp.py: the shape [world, b, s_q, h_q] comes from
// partial_out; dtype is its element type (bf16, fp16 or fp32), resolved by the caller.
void merge_partials(nb::handle partial_out, nb::handle partial_lse, nb::handle sinks,
                    nb::handle out, nb::handle lse, const std::string& dtype, int device,
                    uintptr_t stream, bool lse_base2) {
  ArgReader in(placement_of(device));
  MergeArgs args;
  args.lse_base2 = lse_base2;
  if (dtype == "bf16") {
    args.dtype = DType::kBF16;
  } else if (dtype == "fp16") {
    args.dtype = DType::kFP16;
  } else if (dtype == "fp32") {
    args.dtype = DType::kFP32;
  } else {
    throw_value_error("partial_out: expected dtype bf16, fp16 or fp32, given " + dtype);
  }
  const Elem elem = elem_of(args.dtype);
  const Array& po =
      in.take("partial_out", partial_out, elem, {-1, -1, -1, -1, kDv}, "[world, b, s_q, h_q, 512]");
  const auto dim = [&](size_t i) { return static_cast<int64_t>(po.shape(i)); };
  // The library checks the ranges (world 1..kMaxCpWorld, ...); a size beyond int32 is refused
  // here so that the narrowing below cannot wrap into that range.
  const char* names[] = {"world", "b", "s_q", "h_q"};
  for (size_t i = 0; i < 4; ++i) {
    if (dim(i) > INT32_MAX) {
      throw_value_error(std::string("partial_out: expected a ") + names[i] +
                        " dimension below 2^31, given " + std::to_string(dim(i)));
    }
  }
  const int64_t world = dim(0), b = dim(1), s_q = dim(2), h_q = dim(3);
  args.world = static_cast<int32_t>(world);
  args.batch = static_cast<int32_t>(b);
  args.s_q = static_cast<int32_t>(s_q);
  args.h_q = static_cast<int32_t>(h_q);
  args.partial_out = po.data();
  args.partial_lse = static_cast<const float*>(
      in.take("partial_lse", partial_lse, Elem::kFP32, {world, b, s_q, h_q},
              "[world, b, s_q, h_q] (partial_out's first four dimensions)")
          .data());
  if (!sinks.is_none()) {
    args.sinks =
        static_cast<const float*>(in.take("sinks", sinks, Elem::kFP32, {h_q}, "[h_q]").data());
  }
  args.out =
      const_cast<void*>(in.take("out", out, elem, {b, s_q, h_q, kDv}, "[b, s_q, h_q, 512]").data());
  if (!lse.is_none()) {
    args.lse = static_cast<float*>(
        const_cast<void*>(in.take("lse", lse, Elem::kFP32, {b, s_q, h_q}, "[b, s_q, h_q]").data()));
  }
  run_op(device, [&] {
    return mlakit::merge_partials(op_device(device), args, reinterpret_cast<Stream>(stream));
  });
}

}  // namespace

void register_ops(nb::module_& m) {
  m.def("append_kv", &append_kv, nb::arg("kv").none(), nb::arg("kv_dtype"),
        nb::arg("slot_mapping").none(), nb::arg("kv_cache").none(), nb::arg("cache_dtype"),
        nb::arg("kv_layout"), nb::arg("page_size"), nb::arg("k_scale").none(), nb::arg("device"),
        nb::arg("stream"), nb::arg("enable_pdl") = false);
  m.def("append_indexer", &append_indexer, nb::arg("k").none(), nb::arg("k_dtype"),
        nb::arg("slot_mapping").none(), nb::arg("index_cache").none(), nb::arg("page_size"),
        nb::arg("scale"), nb::arg("device"), nb::arg("stream"), nb::arg("enable_pdl") = false);
  m.def("indexer_logits", &indexer_logits, nb::arg("q").none(), nb::arg("weights").none(),
        nb::arg("index_cache").none(), nb::arg("page_size"), nb::arg("block_table").none(),
        nb::arg("seq_lens").none(), nb::arg("logits").none(), nb::arg("device"), nb::arg("stream"),
        nb::arg("enable_pdl") = false);
  m.def("topk_indices", &topk_indices, nb::arg("logits").none(), nb::arg("seq_lens").none(),
        nb::arg("block_table").none(), nb::arg("page_size"), nb::arg("next_n"), nb::arg("max_len"),
        nb::arg("indices").none(), nb::arg("positions").none(), nb::arg("workspace").none(),
        nb::arg("deterministic"), nb::arg("device"), nb::arg("stream"),
        nb::arg("enable_pdl") = false);
  m.def("topk_workspace_bytes", &topk_workspace_bytes, nb::arg("batch"), nb::arg("next_n"),
        nb::arg("max_len"), nb::arg("k"));
  m.def("merge_partials", &merge_partials, nb::arg("partial_out").none(),
        nb::arg("partial_lse").none(), nb::arg("sinks").none(), nb::arg("out").none(),
        nb::arg("lse").none(), nb::arg("dtype"), nb::arg("device"), nb::arg("stream"),
        nb::arg("lse_base2"));
}

}  // namespace mlakit::python
