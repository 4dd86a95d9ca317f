// The _mlakit extension module: mlakit::Decoder, list_backends, current_device and the ops
// (ops.cc) for Python.
//
// The public Python API (mlakit/__init__.py, mlakit/_decoder.py) is a thin layer over this: it
// normalizes dtype names, allocates outputs and workspaces with the caller's framework and finds
// the caller's stream; everything that checks arrays or runs the library is here, so that the
// per-call host cost stays small. Library Status codes become Python exceptions: invalid argument
// -> ValueError, unsupported -> NotImplementedError, CUDA and internal errors -> RuntimeError.
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <memory>
#include <string>

#include "arrays.h"
#include "mlakit/mlakit.h"
#include "ops.h"
#include "status.h"

namespace mlakit::python {
namespace {

DType parse_dtype(const char* arg, const std::string& name) {
  if (name == "bf16") return DType::kBF16;
  if (name == "fp16") return DType::kFP16;
  if (name == "fp8_e4m3") return DType::kFP8E4M3;
  if (name == "fp32") return DType::kFP32;
  throw_value_error(std::string(arg) + ": expected bf16, fp16 or fp8_e4m3, given " + name);
}

KvLayout parse_layout(const std::string& name) {
  if (name == "dense") return KvLayout::kDense;
  if (name == "fp8_blockwise") return KvLayout::kFp8Blockwise;
  if (name == "fp8_v4") return KvLayout::kFp8V4;
  throw_value_error("kv_layout: expected dense, fp8_blockwise or fp8_v4, given " + name);
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP8E4M3: return "fp8_e4m3";
    case DType::kFP32: return "fp32";
  }
  return "?";
}

// An optional argument the problem forbids (None expected) or requires (an array expected).
void check_presence(const char* name, nb::handle obj, bool wanted, const std::string& because) {
  if (obj.is_none() == !wanted) return;
  if (wanted) {
    throw_type_error(std::string(name) + ": expected an array (" + because + "), given None");
  }
  throw_value_error(std::string(name) + ": expected None (" + because + "), given " +
                    Py_TYPE(obj.ptr())->tp_name);
}

// Host lengths against the width of the block table they index: [0, width * page_size].
void check_lengths_fit(const int32_t* seq_lens, int64_t b, int64_t width, int page_size) {
  const int64_t max_len = width * page_size;
  for (int64_t i = 0; i < b; ++i) {
    if (seq_lens[i] >= 0 && seq_lens[i] <= max_len) continue;
    throw_value_error("seq_lens[" + std::to_string(i) + "]: expected 0.." +
                      std::to_string(max_len) + " (the " + std::to_string(width) +
                      " columns of block_table x page_size " + std::to_string(page_size) +
                      "), given " + std::to_string(seq_lens[i]));
  }
}

// Host query-token offsets against the rows of q, out and lse they index: each in [0, rows].
void check_offsets_fit(const int32_t* cu_seqlens_q, int64_t b, int64_t rows) {
  for (int64_t i = 0; i <= b; ++i) {
    if (cu_seqlens_q[i] >= 0 && cu_seqlens_q[i] <= rows) continue;
    throw_value_error("cu_seqlens_q[" + std::to_string(i) + "]: expected 0.." +
                      std::to_string(rows) + " (the rows of q, out and lse), given " +
                      std::to_string(cu_seqlens_q[i]));
  }
}

class PyDecoder {
 public:
  PyDecoder(int h_q, int s_q, int page_size, int max_batch, int max_seq_len,
            const std::string& q_dtype, const std::string& kv_dtype, const std::string& out_dtype,
            const std::string& kv_layout, bool causal, bool sinks, int topk, bool lse, bool pdl,
            const std::string& backend, int tactic, const std::string& tune_cache, int extra_topk,
            int extra_page_size, int cp_world, int cp_rank, int cp_interleave, bool lse_base2,
            bool var_q) {
    const KvLayout layout = parse_layout(kv_layout);
    problem_ = Problem{.h_q = h_q,
                       .s_q = s_q,
                       .d_qk = layout_d_qk(layout),
                       .page_size = page_size,
                       .max_batch = max_batch,
                       .max_seq_len = max_seq_len,
                       .q_dtype = parse_dtype("q_dtype", q_dtype),
                       .kv_dtype = parse_dtype("kv_dtype", kv_dtype),
                       .out_dtype = parse_dtype("out_dtype", out_dtype),
                       .kv_layout = layout,
                       .causal = causal,
                       .var_q = var_q,
                       .has_sinks = sinks,
                       .topk = topk,
                       .extra_topk = extra_topk,
                       .extra_page_size = extra_page_size,
                       .return_lse = lse,
                       .lse_base2 = lse_base2,
                       .enable_pdl = pdl,
                       .cp_world = cp_world,
                       .cp_rank = cp_rank,
                       .cp_interleave = cp_interleave};
    const DecoderOptions options{
        .backend = backend, .tactic = tactic, .tune_cache_path = tune_cache};
    Status status;
    {
      nb::gil_scoped_release release;  // creation may synchronize or tune
      status = Decoder::create(problem_, options, &decoder_);
    }
    check_ok(status);
    placement_ = Placement{.device_memory = decoder_->device_memory(),
                           .device = -1,
                           .backend = std::string(decoder_->backend_name())};
    if (placement_.device_memory) {
      const DeviceInfo device = current_device();
      if (!device.present) raise_status(Status(StatusCode::kCudaError, device.error));
      placement_.device = device.device;
    }
  }

  std::string backend() const { return std::string(decoder_->backend_name()); }
  int tactic() const { return decoder_->tactic(); }
  size_t workspace_bytes() const { return decoder_->workspace_bytes(); }
  bool device_memory() const { return placement_.device_memory; }
  int device() const { return placement_.device; }
  std::string describe() const { return mlakit::describe(problem_); }
  const Problem& problem() const { return problem_; }

 private:
  // A cache of the decoder's layout with pages of `page_size` tokens: [num_pages, page_size, 576]
  // of kv_dtype or [.., 656 bytes] (a 1 may stand before or after page_size), a view of one when
  // `view` (the main cache; the extra cache has no strides); V4: [num_pages, page bytes], or
  // [num_pages, page_size, (1,) 584 bytes] whose pages are page bytes apart.
  const Array& take_cache(ArgReader& in, const char* name, nb::handle obj, int page_size,
                          bool view) const {
    const Problem& p = problem_;
    if (p.kv_layout == KvLayout::kFp8V4) {
      return in.take_v4_cache(
          name, obj, page_size,
          static_cast<int64_t>(kv_page_bytes(p.kv_dtype, p.kv_layout, page_size)));
    }
    const bool blockwise = p.kv_layout == KvLayout::kFp8Blockwise;
    const int64_t d = blockwise ? kBlockwiseBytes : kDqk;
    const char* dims =
        blockwise ? "[num_pages, page_size, 656 bytes] (or with a 1 before or after page_size)"
                  : "[num_pages, page_size, 576] (or with a 1 before or after page_size)";
    const Elem elem = blockwise ? Elem::kBytes : elem_of(p.kv_dtype);
    const std::initializer_list<std::vector<int64_t>> shapes = {
        {-1, page_size, d}, {-1, page_size, 1, d}, {-1, 1, page_size, d}};
    return view ? in.take_view(name, obj, elem, shapes, dims)
                : in.take_any_shape(name, obj, elem, shapes, dims);
  }

 public:
  void run(nb::handle q, nb::handle kv_cache, nb::handle block_table, nb::handle seq_lens,
           nb::handle out, nb::handle lse, nb::handle sinks, nb::handle indices,
           nb::handle topk_lens, nb::handle workspace, nb::handle softmax_scale, nb::handle q_scale,
           nb::handle k_scale, uintptr_t stream, nb::handle extra_kv_cache,
           nb::handle extra_indices, nb::handle extra_topk_lens, nb::handle cu_seqlens_q) const {
    const Problem& p = problem_;
    ArgReader in(placement_);
    RunArgs args;

    // q, the cache and out may be views (a contiguous last dimension, any outer strides). With
    // var_q they are packed by query token (rows), the batch given by cu_seqlens_q.
    int64_t b = 0;
    int64_t rows = 0;
    check_presence("cu_seqlens_q", cu_seqlens_q, p.var_q,
                   std::string("the decoder was made with var_q=") + (p.var_q ? "True" : "False"));
    if (p.var_q) {
      const Array& cu = in.take("cu_seqlens_q", cu_seqlens_q, Elem::kInt32, {-1}, "[b + 1]");
      if (cu.shape(0) < 2) {
        throw_value_error(
            "cu_seqlens_q: expected shape [b + 1] = [>= 2] (b >= 1 requests), given " +
            shape_string(cu));
      }
      b = static_cast<int64_t>(cu.shape(0)) - 1;
      args.cu_seqlens_q = static_cast<const int32_t*>(cu.data());
      const std::string q_dims = "[total, h_q, " + std::to_string(p.d_qk) + "]";
      const Array& aq =
          in.take_view("q", q, elem_of(p.q_dtype), {{-1, p.h_q, p.d_qk}}, q_dims.c_str());
      rows = static_cast<int64_t>(aq.shape(0));
      args.q = aq.data();
      args.q_stride_s = view_stride(aq, 0);
      args.q_stride_h = view_stride(aq, 1);
      // Only here are the rows known: host offsets past them would read q and write out and lse
      // out of bounds (the library checks their order and lengths). GPU backends cannot read
      // device offsets: there the rows must hold cu_seqlens_q[b].
      if (!placement_.device_memory) check_offsets_fit(args.cu_seqlens_q, b, rows);
    } else {
      const std::string q_dims = "[b, s_q, h_q, " + std::to_string(p.d_qk) + "]";
      const Array& aq =
          in.take_view("q", q, elem_of(p.q_dtype), {{-1, p.s_q, p.h_q, p.d_qk}}, q_dims.c_str());
      b = static_cast<int64_t>(aq.shape(0));
      args.q = aq.data();
      args.q_stride_b = view_stride(aq, 0);
      args.q_stride_s = view_stride(aq, 1);
      args.q_stride_h = view_stride(aq, 2);
    }
    args.batch = static_cast<int32_t>(b);

    const Array& akv = take_cache(in, "kv_cache", kv_cache, p.page_size, /*view=*/true);
    args.kv_cache = akv.data();
    args.num_pages = static_cast<int64_t>(akv.shape(0));
    if (p.kv_layout != KvLayout::kFp8V4) {  // a V4 cache is whole pages (take_v4_cache)
      args.kv_stride_page = view_stride(akv, 0);
      // The token dimension: 1 in [n, page, d]; in the 4-D forms the one of size page_size (the
      // other is 1), or 2 when page_size is 1 too.
      const size_t token_dim = akv.ndim() == 3 ? 1 : akv.shape(1) == 1 ? 2 : 1;
      args.kv_stride_token = view_stride(akv, token_dim);
    }

    const std::string topk_why = "the decoder was made with topk=" + std::to_string(p.topk);
    if (p.sparse()) {
      check_presence("indices", indices, true, topk_why);
      // Index rows [b, s_q, ..], or with var_q packed as q is: [total, ..].
      const auto index_rows = [&](int64_t k) {
        return p.var_q ? std::vector<int64_t>{rows, k} : std::vector<int64_t>{b, p.s_q, k};
      };
      args.indices = static_cast<const int32_t*>(
          in.take("indices", indices, Elem::kInt32, index_rows(p.topk),
                  p.var_q ? "[total, topk] (q's rows)" : "[b, s_q, topk]")
              .data());
      if (!topk_lens.is_none()) {
        args.topk_lens = static_cast<const int32_t*>(
            in.take("topk_lens", topk_lens, Elem::kInt32, {b}, "[b]").data());
      }
      const std::string extra_why =
          "the decoder was made with extra_topk=" + std::to_string(p.extra_topk);
      check_presence("extra_kv_cache", extra_kv_cache, p.has_extra(), extra_why);
      check_presence("extra_indices", extra_indices, p.has_extra(), extra_why);
      if (p.has_extra()) {
        const Array& extra = take_cache(in, "extra_kv_cache", extra_kv_cache,
                                        p.extra_page_size_or_default(), /*view=*/false);
        args.extra_kv_cache = extra.data();
        args.extra_num_pages = static_cast<int64_t>(extra.shape(0));
        args.extra_indices = static_cast<const int32_t*>(
            in.take("extra_indices", extra_indices, Elem::kInt32, index_rows(p.extra_topk),
                    p.var_q ? "[total, extra_topk] (q's rows)" : "[b, s_q, extra_topk]")
                .data());
        if (!extra_topk_lens.is_none()) {
          args.extra_topk_lens = static_cast<const int32_t*>(
              in.take("extra_topk_lens", extra_topk_lens, Elem::kInt32, {b}, "[b]").data());
        }
      } else {
        check_presence("extra_topk_lens", extra_topk_lens, false, extra_why);
      }
    } else {
      check_presence("indices", indices, false, topk_why);
      check_presence("extra_kv_cache", extra_kv_cache, false, topk_why);
      check_presence("extra_indices", extra_indices, false, topk_why);
      check_presence("extra_topk_lens", extra_topk_lens, false, topk_why);
      check_presence("topk_lens", topk_lens, false, topk_why);
      const Array& table = in.take_block_table(block_table, b);
      const int64_t width = static_cast<int64_t>(table.shape(1));
      args.block_table = static_cast<const int32_t*>(table.data());
      args.block_table_stride = b == 1 ? width : table.stride(0);
      args.seq_lens = static_cast<const int32_t*>(
          in.take("seq_lens", seq_lens, Elem::kInt32, {b}, "[b]").data());
      // A view of a wider table (table[:b, :n]) has rows further apart than they are wide, and
      // the library bounds a request's pages by the row stride: a longer length would read the
      // parent's other columns, or past the view's end. Host lengths are checked against the
      // view's width here; GPU backends cannot read theirs (they clamp to the row stride).
      if (!placement_.device_memory && args.block_table_stride > width) {
        check_lengths_fit(args.seq_lens, b, width, p.page_size);
      }
    }

    check_presence(
        "sinks", sinks, p.has_sinks,
        std::string("the decoder was made with sinks=") + (p.has_sinks ? "True" : "False"));
    if (p.has_sinks) {
      args.sinks =
          static_cast<const float*>(in.take("sinks", sinks, Elem::kFP32, {p.h_q}, "[h_q]").data());
    }
    if (p.var_q) {
      const Array& aout = in.take_view("out", out, elem_of(p.out_dtype), {{rows, p.h_q, kDv}},
                                       "[total, h_q, 512] (q's rows)");
      args.out = const_cast<void*>(aout.data());
      args.out_stride_s = view_stride(aout, 0);
      args.out_stride_h = view_stride(aout, 1);
    } else {
      const Array& aout = in.take_view("out", out, elem_of(p.out_dtype), {{b, p.s_q, p.h_q, kDv}},
                                       "[b, s_q, h_q, 512]");
      args.out = const_cast<void*>(aout.data());
      args.out_stride_b = view_stride(aout, 0);
      args.out_stride_s = view_stride(aout, 1);
      args.out_stride_h = view_stride(aout, 2);
    }
    check_presence(
        "lse", lse, p.return_lse,
        std::string("the decoder was made with lse=") + (p.return_lse ? "True" : "False"));
    if (p.return_lse) {
      const Array& alse =
          p.var_q ? in.take("lse", lse, Elem::kFP32, {rows, p.h_q}, "[total, h_q] (q's rows)")
                  : in.take("lse", lse, Elem::kFP32, {b, p.s_q, p.h_q}, "[b, s_q, h_q]");
      args.lse = static_cast<float*>(const_cast<void*>(alse.data()));
    }

    if (!softmax_scale.is_none()) {
      args.softmax_scale = nb::cast<float>(softmax_scale);
    } else if (p.kv_layout == KvLayout::kFp8V4) {
      args.softmax_scale = kV4SoftmaxScale;  // 1/sqrt(d_qk), as for the other layouts
    }
    in.take_scale("q_scale", q_scale, &args.q_scale, &args.q_scale_ptr);
    in.take_scale("k_scale", k_scale, &args.k_scale, &args.k_scale_ptr);

    const size_t need = decoder_->workspace_bytes();
    void* ws = nullptr;
    size_t ws_size = 0;
    if (!workspace.is_none()) {
      const Array& aw =
          in.take_workspace(workspace, need, Elem::kAnyType, "Decoder.workspace_bytes");
      ws = const_cast<void*>(aw.data());
      ws_size = aw.nbytes();
    } else if (need > 0) {
      throw_type_error("workspace: expected an array of at least " + std::to_string(need) +
                       " bytes (Decoder.workspace_bytes), given None");
    }

    DeviceGuard guard(placement_.device);
    Status status;
    {
      nb::gil_scoped_release release;  // the cpu backend computes here; others only launch
      status = decoder_->run(args, ws, ws_size, reinterpret_cast<Stream>(stream));
    }
    check_ok(status);
  }

 private:
  Problem problem_;
  Placement placement_;
  std::unique_ptr<Decoder> decoder_;
};

nb::dict device_dict(const DeviceInfo& d) {
  nb::dict r;
  r["present"] = d.present;
  r["device"] = d.device;
  r["name"] = d.name;
  r["sm"] = std::to_string(d.sm_major) + std::to_string(d.sm_minor);
  r["sm_count"] = d.sm_count;
  r["global_mem_bytes"] = d.global_mem_bytes;
  r["l2_bytes"] = d.l2_bytes;
  r["error"] = d.error;
  return r;
}

nb::list backend_list() {
  nb::list r;
  for (const BackendInfo& b : list_backends()) {
    nb::dict e;
    e["name"] = b.name;
    e["summary"] = b.summary;
    e["supports"] = b.supports;
    e["available"] = b.available;
    e["unavailable_reason"] = b.unavailable_reason;
    e["device_memory"] = b.device_memory;
    r.append(e);
  }
  return r;
}

nb::dict problem_dict(const Problem& p) {
  nb::dict r;
  r["h_q"] = p.h_q;
  r["s_q"] = p.s_q;
  r["page_size"] = p.page_size;
  r["max_batch"] = p.max_batch;
  r["max_seq_len"] = p.max_seq_len;
  r["q_dtype"] = dtype_name(p.q_dtype);
  r["kv_dtype"] = dtype_name(p.kv_dtype);
  r["out_dtype"] = dtype_name(p.out_dtype);
  r["kv_layout"] = std::string(to_string(p.kv_layout));
  r["d_qk"] = p.d_qk;
  r["extra_topk"] = p.extra_topk;
  r["extra_page_size"] = p.extra_page_size;
  r["causal"] = p.causal;
  r["var_q"] = p.var_q;
  r["sinks"] = p.has_sinks;
  r["topk"] = p.topk;
  r["lse"] = p.return_lse;
  r["lse_base2"] = p.lse_base2;
  r["pdl"] = p.enable_pdl;
  r["cp_world"] = p.cp_world;
  r["cp_rank"] = p.cp_rank;
  r["cp_interleave"] = p.cp_interleave;
  return r;
}

}  // namespace
}  // namespace mlakit::python

NB_MODULE(_mlakit, m) {
  using namespace mlakit::python;
  namespace nb = nanobind;
  m.doc() = "mlakit C++ bindings (private: use the mlakit package)";
  m.attr("__version__") = std::string(mlakit::version());

  m.def("current_device", []() { return device_dict(mlakit::current_device()); });
  m.def("list_backends", &backend_list);
  // Raises the exception a library Status of this code maps to (for the tests of that mapping).
  m.def("_raise_status", [](int code, const std::string& message) {
    const mlakit::Status status(static_cast<mlakit::StatusCode>(code), message);
    if (!status.ok()) raise_status(status);
  });

  register_ops(m);

  nb::class_<PyDecoder>(m, "Decoder")
      .def(nb::init<int, int, int, int, int, const std::string&, const std::string&,
                    const std::string&, const std::string&, bool, bool, int, bool, bool,
                    const std::string&, int, const std::string&, int, int, int, int, int, bool,
                    bool>(),
           nb::arg("h_q"), nb::arg("s_q"), nb::arg("page_size"), nb::arg("max_batch"),
           nb::arg("max_seq_len"), nb::arg("q_dtype"), nb::arg("kv_dtype"), nb::arg("out_dtype"),
           nb::arg("kv_layout"), nb::arg("causal"), nb::arg("sinks"), nb::arg("topk"),
           nb::arg("lse"), nb::arg("pdl"), nb::arg("backend"), nb::arg("tactic"),
           nb::arg("tune_cache"), nb::arg("extra_topk"), nb::arg("extra_page_size"),
           nb::arg("cp_world"), nb::arg("cp_rank"), nb::arg("cp_interleave"), nb::arg("lse_base2"),
           nb::arg("var_q"))
      .def_prop_ro("backend", &PyDecoder::backend)
      .def_prop_ro("tactic", &PyDecoder::tactic)
      .def_prop_ro("workspace_bytes", &PyDecoder::workspace_bytes)
      .def_prop_ro("device_memory", &PyDecoder::device_memory)
      .def_prop_ro("device", &PyDecoder::device)
      .def_prop_ro("problem", [](const PyDecoder& d) { return problem_dict(d.problem()); })
      .def("describe", &PyDecoder::describe)
      .def("run", &PyDecoder::run, nb::arg("q").none(), nb::arg("kv_cache").none(),
           nb::arg("block_table").none(), nb::arg("seq_lens").none(), nb::arg("out").none(),
           nb::arg("lse").none(), nb::arg("sinks").none(), nb::arg("indices").none(),
           nb::arg("topk_lens").none(), nb::arg("workspace").none(),
           nb::arg("softmax_scale").none(), nb::arg("q_scale").none(), nb::arg("k_scale").none(),
           nb::arg("stream"), nb::arg("extra_kv_cache").none(), nb::arg("extra_indices").none(),
           nb::arg("extra_topk_lens").none(), nb::arg("cu_seqlens_q").none());
}
