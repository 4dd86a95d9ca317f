#include "arrays.h"

#include <Python.h>

#include <cmath>
#include <sstream>

namespace mlakit::python {
namespace {

// DLPack device types (dlpack.h, DLDeviceType).
constexpr int kDLCPU = 1;
constexpr int kDLCUDA = 2;
constexpr int kDLCUDAHost = 3;
constexpr int kDLCUDAManaged = 13;

// DLPack type codes (DLDataTypeCode); the float8 codes come from DLPack 1.1.
constexpr uint8_t kCodeInt = 0;
constexpr uint8_t kCodeUInt = 1;
constexpr uint8_t kCodeFloat = 2;
constexpr uint8_t kCodeBfloat = 4;
constexpr uint8_t kCodeFloat8E4M3FN = 10;

bool is(nb::dlpack::dtype t, uint8_t code, uint8_t bits) {
  return t.code == code && t.bits == bits && t.lanes == 1;
}

const char* elem_expected(Elem elem) {
  switch (elem) {
    case Elem::kBF16: return "bfloat16 (or its bits as uint16)";
    case Elem::kFP16: return "float16 (or its bits as uint16)";
    case Elem::kFP8: return "float8_e4m3fn (or its bits as uint8)";
    case Elem::kBytes: return "a 1-byte type (uint8, int8 or float8_e4m3fn)";
    case Elem::kFP32: return "float32";
    case Elem::kInt32: return "int32";
    case Elem::kInt64: return "int64";
    case Elem::kUInt8: return "uint8";
    case Elem::kAnyType: return "any type";
  }
  return "?";
}

bool elem_accepts(Elem elem, nb::dlpack::dtype t) {
  switch (elem) {
    case Elem::kBF16: return is(t, kCodeBfloat, 16) || is(t, kCodeUInt, 16);
    case Elem::kFP16: return is(t, kCodeFloat, 16) || is(t, kCodeUInt, 16);
    case Elem::kFP8: return is(t, kCodeFloat8E4M3FN, 8) || is(t, kCodeUInt, 8);
    case Elem::kBytes:
      return is(t, kCodeFloat8E4M3FN, 8) || is(t, kCodeUInt, 8) || is(t, kCodeInt, 8);
    case Elem::kFP32: return is(t, kCodeFloat, 32);
    case Elem::kInt32: return is(t, kCodeInt, 32);
    case Elem::kInt64: return is(t, kCodeInt, 64);
    case Elem::kUInt8: return is(t, kCodeUInt, 8);
    case Elem::kAnyType: return t.lanes == 1 && t.bits % 8 == 0 && t.bits > 0;
  }
  return false;
}

std::string device_string(int type, int id) {
  switch (type) {
    case kDLCPU: return "host memory (cpu)";
    case kDLCUDAHost: return "pinned host memory (cuda_host)";
    case kDLCUDA: return "cuda:" + std::to_string(id);
    case kDLCUDAManaged: return "cuda_managed:" + std::to_string(id);
  }
  return "DLPack device type " + std::to_string(type) + ":" + std::to_string(id);
}

std::string dims_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += i ? ", " : "";
    s += shape[i] < 0 ? std::string("*") : std::to_string(shape[i]);
  }
  return s + "]";
}

bool shape_matches(const Array& a, const std::vector<int64_t>& shape) {
  if (a.ndim() != shape.size()) return false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] >= 0 && static_cast<int64_t>(a.shape(i)) != shape[i]) return false;
  }
  return true;
}

std::string python_type_name(nb::handle obj) { return Py_TYPE(obj.ptr())->tp_name; }

}  // namespace

void throw_type_error(const std::string& message) { throw nb::type_error(message.c_str()); }
void throw_value_error(const std::string& message) { throw nb::value_error(message.c_str()); }

Elem elem_of(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return Elem::kBF16;
    case DType::kFP16: return Elem::kFP16;
    case DType::kFP8E4M3: return Elem::kFP8;
    case DType::kFP32: return Elem::kFP32;
  }
  return Elem::kAnyType;
}

std::string shape_string(const Array& a) {
  std::vector<int64_t> shape(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) shape[i] = static_cast<int64_t>(a.shape(i));
  return dims_string(shape);
}

std::string dtype_string(nb::dlpack::dtype t) {
  std::string base;
  switch (t.code) {
    case kCodeInt: base = "int"; break;
    case kCodeUInt: base = "uint"; break;
    case kCodeFloat: base = "float"; break;
    case kCodeBfloat: base = "bfloat"; break;
    case kCodeFloat8E4M3FN: return "float8_e4m3fn";
    default:
      return "DLPack type code " + std::to_string(t.code) + " of " + std::to_string(t.bits) +
             " bits";
  }
  std::string s = base + std::to_string(t.bits);
  if (t.lanes != 1) s += " x" + std::to_string(t.lanes);
  return s;
}

const Array& ArgReader::import(const char* name, nb::handle obj) {
  Array array;
  if (obj.is_none() || !nb::try_cast<Array>(obj, array, /*convert=*/false)) {
    throw_type_error(std::string(name) +
                     ": expected an array (NumPy, PyTorch, CuPy, JAX or another DLPack "
                     "producer), given " +
                     (obj.is_none() ? std::string("None") : python_type_name(obj)));
  }
  arrays_.push_back(std::move(array));
  return arrays_.back();
}

void ArgReader::check_placement(const char* name, const Array& a) const {
  const int type = a.device_type();
  if (placement_.device_memory) {
    const bool ok =
        (type == kDLCUDA || type == kDLCUDAManaged) && a.device_id() == placement_.device;
    if (ok) return;
    const std::string why = placement_.why.empty() ? "backend " + placement_.backend +
                                                         " reads the memory of the decoder's device"
                                                   : placement_.why;
    throw_value_error(std::string(name) +
                      ": expected an array on cuda:" + std::to_string(placement_.device) + " (" +
                      why + "), given an array in " + device_string(type, a.device_id()));
  }
  if (type == kDLCPU || type == kDLCUDAHost || type == kDLCUDAManaged) return;
  const std::string why = placement_.why.empty()
                              ? "backend " + placement_.backend + " runs on the host"
                              : placement_.why;
  throw_value_error(std::string(name) + ": expected an array in host memory (" + why +
                    "), given an array on " + device_string(type, a.device_id()));
}

void ArgReader::check_elem(const char* name, const Array& a, Elem elem) const {
  if (elem_accepts(elem, a.dtype())) return;
  throw_type_error(std::string(name) + ": expected dtype " + elem_expected(elem) + ", given " +
                   dtype_string(a.dtype()));
}

void ArgReader::check_contiguous(const char* name, const Array& a) const {
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    const int64_t size = static_cast<int64_t>(a.shape(i));
    if (size == 0) return;  // empty: nothing is read
    if (size != 1 && a.stride(i) != expected) {
      std::ostringstream strides;
      for (size_t j = 0; j < a.ndim(); ++j) strides << (j ? ", " : "[") << a.stride(j);
      strides << "]";
      throw_value_error(std::string(name) +
                        ": expected a C-contiguous (row-major, dense) array, given shape " +
                        shape_string(a) + " with strides " + strides.str() + " (in elements)");
    }
    expected *= size;
  }
}

const Array& ArgReader::take(const char* name, nb::handle obj, Elem elem,
                             std::vector<int64_t> shape, const char* dims) {
  return take_any_shape(name, obj, elem, {std::move(shape)}, dims);
}

void ArgReader::check_last_contiguous(const char* name, const Array& a) const {
  const size_t last = a.ndim() - 1;
  if (a.ndim() == 0 || a.shape(last) <= 1 || a.stride(last) == 1) return;
  std::ostringstream strides;
  for (size_t j = 0; j < a.ndim(); ++j) strides << (j ? ", " : "[") << a.stride(j);
  strides << "]";
  throw_value_error(std::string(name) +
                    ": expected a view whose last dimension is contiguous (stride 1), given "
                    "shape " +
                    shape_string(a) + " with strides " + strides.str() + " (in elements)");
}

const Array& ArgReader::take_any_shape(const char* name, nb::handle obj, Elem elem,
                                       std::initializer_list<std::vector<int64_t>> shapes,
                                       const char* dims) {
  const Array& a = take_shaped(name, obj, elem, shapes, dims);
  check_contiguous(name, a);
  return a;
}

const Array& ArgReader::take_view(const char* name, nb::handle obj, Elem elem,
                                  std::initializer_list<std::vector<int64_t>> shapes,
                                  const char* dims) {
  const Array& a = take_shaped(name, obj, elem, shapes, dims);
  check_last_contiguous(name, a);
  return a;
}

const Array& ArgReader::take_shaped(const char* name, nb::handle obj, Elem elem,
                                    std::initializer_list<std::vector<int64_t>> shapes,
                                    const char* dims) {
  const Array& a = import(name, obj);
  check_elem(name, a, elem);
  bool matched = false;
  std::string expected;
  for (const std::vector<int64_t>& shape : shapes) {
    matched |= shape_matches(a, shape);
    expected += (expected.empty() ? "" : " or ") + dims_string(shape);
  }
  if (!matched) {
    throw_value_error(std::string(name) + ": expected shape " + dims + " = " + expected +
                      ", given " + shape_string(a));
  }
  check_placement(name, a);
  return a;
}

const Array& ArgReader::take_v4_cache(const char* name, nb::handle obj, int64_t page_size,
                                      int64_t page_bytes) {
  constexpr int64_t kTokenBytes = kV4TokenBytes;
  const Array& a = import(name, obj);
  check_elem(name, a, Elem::kBytes);
  const std::string dims = "[num_pages, " + std::to_string(page_bytes) + "] or [num_pages, " +
                           std::to_string(page_size) + ", (1,) 584] (the V4 layout, pages of " +
                           std::to_string(page_bytes) + " bytes)";
  const bool flat = shape_matches(a, {-1, page_bytes});
  const bool tokens = shape_matches(a, {-1, page_size, kTokenBytes}) ||
                      shape_matches(a, {-1, page_size, 1, kTokenBytes});
  if (!flat && !tokens) {
    throw_value_error(std::string(name) + ": expected shape " + dims + ", given " +
                      shape_string(a));
  }
  check_placement(name, a);
  if (flat) {
    check_contiguous(name, a);
    return a;
  }
  // FlashMLA's view: the tokens of a page contiguous, pages page_bytes apart (page padding).
  const size_t n = a.ndim();
  bool ok = a.shape(0) <= 1 || a.stride(0) == page_bytes;
  ok &= a.stride(n - 1) == 1;  // a dimension of size 1 (the head of [.., 1, 584]) has any stride
  ok &= page_size == 1 || a.stride(1) == kTokenBytes;
  if (!ok) {
    std::ostringstream strides;
    for (size_t j = 0; j < n; ++j) strides << (j ? ", " : "[") << a.stride(j);
    strides << "]";
    throw_value_error(std::string(name) + ": expected strides [" + std::to_string(page_bytes) +
                      ", 584" + (n == 4 ? ", *" : "") + ", 1] (pages of " +
                      std::to_string(page_bytes) +
                      " bytes, each its tokens' bytes contiguous), given shape " + shape_string(a) +
                      " with strides " + strides.str() + " (in elements)");
  }
  return a;
}

const Array& ArgReader::take_block_table(nb::handle obj, int64_t batch) {
  const char* name = "block_table";
  const Array& a = import(name, obj);
  check_elem(name, a, Elem::kInt32);
  if (a.ndim() != 2 || static_cast<int64_t>(a.shape(0)) != batch || a.shape(1) < 1) {
    throw_value_error(std::string(name) + ": expected shape [b, max_pages] = [" +
                      std::to_string(batch) + ", >= 1], given " + shape_string(a));
  }
  check_placement(name, a);
  const bool inner_ok = a.shape(1) == 1 || a.stride(1) == 1;
  const bool rows_ok = a.shape(0) == 1 || a.stride(0) >= static_cast<int64_t>(a.shape(1));
  if (!inner_ok || !rows_ok) {
    throw_value_error(
        std::string(name) + ": expected rows of contiguous int32 (inner stride 1, row stride >= " +
        std::to_string(a.shape(1)) + "), given strides [" + std::to_string(a.stride(0)) + ", " +
        std::to_string(a.stride(1)) + "] (in elements)");
  }
  return a;
}

const Array& ArgReader::take_workspace(nb::handle obj, size_t bytes, Elem elem,
                                       const char* sized_by) {
  const char* name = "workspace";
  const Array& a = import(name, obj);
  check_elem(name, a, elem);
  check_placement(name, a);
  check_contiguous(name, a);
  if (a.nbytes() < bytes) {
    throw_value_error(std::string(name) + ": expected at least " + std::to_string(bytes) +
                      " bytes (" + sized_by + "), given " + std::to_string(a.nbytes()) + " bytes");
  }
  return a;
}

void ArgReader::take_scale(const char* name, nb::handle obj, float* value, const float** pointer) {
  *value = NAN;
  *pointer = nullptr;
  if (obj.is_none()) return;
  if (PyFloat_Check(obj.ptr()) || (PyLong_Check(obj.ptr()) && !PyBool_Check(obj.ptr()))) {
    *value = static_cast<float>(PyFloat_AsDouble(obj.ptr()));
    if (PyErr_Occurred()) throw nb::python_error();
    return;
  }
  Array array;
  if (!nb::try_cast<Array>(obj, array, /*convert=*/false)) {
    throw_type_error(std::string(name) +
                     ": expected None, a float or a one-element float32 array, given " +
                     python_type_name(obj));
  }
  arrays_.push_back(std::move(array));
  const Array& a = arrays_.back();
  check_elem(name, a, Elem::kFP32);
  if (a.size() != 1) {
    throw_value_error(std::string(name) + ": expected a one-element float32 array, given shape " +
                      shape_string(a));
  }
  check_placement(name, a);
  *pointer = static_cast<const float*>(a.data());
}

}  // namespace mlakit::python
