// Library Status codes as Python exceptions, and the guard that makes an op's CUDA device current,
// shared by the Decoder (module.cc) and the ops (ops.cc) bindings: invalid argument ->
// ValueError, unsupported -> NotImplementedError, CUDA and internal errors -> RuntimeError.
#pragma once

#include <Python.h>
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>

#include <string>

#include "mlakit/mlakit.h"

namespace mlakit::python {

[[noreturn]] inline void raise_status(const Status& status) {
  PyObject* type = PyExc_RuntimeError;
  if (status.code() == StatusCode::kInvalidArgument) type = PyExc_ValueError;
  if (status.code() == StatusCode::kUnsupported) type = PyExc_NotImplementedError;
  PyErr_SetString(type, status.message().c_str());
  throw nanobind::python_error();
}

inline void check_ok(const Status& status) {
  if (!status.ok()) raise_status(status);
}

// Makes `device` current for the duration of a call (nothing for -1, host memory), and restores
// the caller's.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (device < 0) return;
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  static void check_cuda(cudaError_t err, const char* call) {
    if (err == cudaSuccess) return;
    raise_status(
        Status(StatusCode::kCudaError, std::string(call) + " failed: " + cudaGetErrorString(err)));
  }
  int previous_ = -1;
};

}  // namespace mlakit::python
