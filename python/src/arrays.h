// Arrays from Python (anything nanobind imports through DLPack or the buffer protocol: NumPy,
// PyTorch, CuPy, JAX, ...) checked against a decoder's problem and turned into the pointers of
// mlakit::RunArgs. Every check raises with a message that names the argument, what was expected
// and what was given, in the library's style: "q: expected ..., given ...". A wrong dtype or a
// non-array raises TypeError; a wrong shape, device or layout raises ValueError.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <deque>
#include <initializer_list>
#include <string>
#include <vector>

#include "mlakit/mlakit.h"

namespace mlakit::python {

namespace nb = nanobind;

// Read-only view of any array; `out`, `lse` and the workspace are written through the same view
// (the Python layer checks that NumPy outputs are writable).
using Array = nb::ndarray<nb::ro>;

// Element types an argument accepts. Raw unsigned integers stand for the bits of the 16-bit and
// 8-bit float types that NumPy lacks: a uint16 array is taken as bf16 or fp16 bits, whichever
// the decoder was made for.
enum class Elem {
  kBF16,   // bfloat16, or uint16 bits
  kFP16,   // float16, or uint16 bits
  kFP8,    // float8_e4m3fn, or uint8 bits
  kBytes,  // any 1-byte type (the 656-byte fp8 blockwise tokens, the V4 pages)
  kFP32,
  kInt32,
  kInt64,
  kUInt8,    // the top-k workspace
  kAnyType,  // the Decoder's workspace: only its size in bytes matters
};

Elem elem_of(DType dtype);

// Where a decoder reads its arrays: host memory (cpu backend) or one CUDA device.
struct Placement {
  bool device_memory = false;
  int device = -1;  // CUDA device id when device_memory
  std::string backend;
  // Why the arrays must be there, for messages; empty: the decoder's backend reads them.
  std::string why;
};

// Imports and checks the arguments of one run. Holds the imported arrays so that their memory
// stays alive (and owned by their framework) until the call returns.
class ArgReader {
 public:
  explicit ArgReader(const Placement& placement) : placement_(placement) {}

  // The array behind `obj`, checked for dtype, device and C-contiguity, with `shape` (-1: any
  // size; `dims` names the dimensions for messages, e.g. "[b, s_q, h_q, 576]").
  const Array& take(const char* name, nb::handle obj, Elem elem, std::vector<int64_t> shape,
                    const char* dims);

  // Like take, but accepts several shapes (e.g. the 3-D and 4-D forms of the KV cache).
  const Array& take_any_shape(const char* name, nb::handle obj, Elem elem,
                              std::initializer_list<std::vector<int64_t>> shapes, const char* dims);

  // Like take_any_shape, but for a view: only the last dimension must be contiguous (stride 1);
  // the outer strides are the library's business (RunArgs, "Views").
  const Array& take_view(const char* name, nb::handle obj, Elem elem,
                         std::initializer_list<std::vector<int64_t>> shapes, const char* dims);

  // A cache in the DeepSeek V4 layout (1-byte elements), whose pages are `page_bytes` apart:
  // [num_pages, page_bytes] contiguous, or FlashMLA's view [num_pages, page_size, 584] (or
  // [num_pages, page_size, 1, 584]) with strides [page_bytes, 584, (584,) 1].
  const Array& take_v4_cache(const char* name, nb::handle obj, int64_t page_size,
                             int64_t page_bytes);

  // The block table: [b, >= 1] int32 whose rows may be a strided view (inner stride 1).
  const Array& take_block_table(nb::handle obj, int64_t batch);

  // A workspace: at least `bytes` bytes (`sized_by` names the function that gives them, for
  // messages), contiguous, of `elem`. Its 256-byte alignment is the library's check.
  const Array& take_workspace(nb::handle obj, size_t bytes, Elem elem, const char* sized_by);

  // A scale: None (NaN), a Python number (host value) or a one-element float32 array (pointer).
  void take_scale(const char* name, nb::handle obj, float* value, const float** pointer);

 private:
  const Array& import(const char* name, nb::handle obj);
  void check_placement(const char* name, const Array& a) const;
  void check_elem(const char* name, const Array& a, Elem elem) const;
  void check_contiguous(const char* name, const Array& a) const;
  void check_last_contiguous(const char* name, const Array& a) const;
  const Array& take_shaped(const char* name, nb::handle obj, Elem elem,
                           std::initializer_list<std::vector<int64_t>> shapes, const char* dims);

  Placement placement_;
  std::deque<Array> arrays_;  // a deque: references handed out stay valid
};

// Stride `dim` of a view, for RunArgs: 0 (the contiguous value) where the dimension has size 1,
// whose stride means nothing (frameworks give such dimensions any stride).
inline int64_t view_stride(const Array& a, size_t dim) {
  return a.shape(dim) == 1 ? 0 : a.stride(dim);
}

// "[2, 1, 16, 576]"
std::string shape_string(const Array& a);
// "bfloat16", "uint16", "float8_e4m3fn", ...
std::string dtype_string(nb::dlpack::dtype dtype);

[[noreturn]] void throw_type_error(const std::string& message);
[[noreturn]] void throw_value_error(const std::string& message);

}  // namespace mlakit::python
