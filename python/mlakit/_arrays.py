"""How mlakit sees, allocates and orders the arrays of each framework.

The C++ extension imports any array through DLPack or the buffer protocol and checks it. This
module handles what DLPack cannot say or must not do:

* dtypes some frameworks cannot export: NumPy's ``ml_dtypes`` bfloat16 / float8 arrays and
  PyTorch float8 tensors are passed as zero-copy ``uint16`` / ``uint8`` views, after checking that
  their dtype is the one expected;
* stream synchronization: ``tensor.__dlpack__()`` without a stream makes the legacy default stream
  wait on the current one, which is illegal while a CUDA graph is being captured. PyTorch and CuPy
  arrays are therefore exported with their no-synchronization entry points; mlakit runs on the
  caller's current stream instead;
* allocation of outputs and workspaces with the framework of ``q``;
* the current CUDA stream of the framework.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Tuple

# What each kind of element accepts, in the C++ extension's words (for the same messages).
_EXPECTED = {
    "bf16": "bfloat16 (or its bits as uint16)",
    "fp16": "float16 (or its bits as uint16)",
    "fp8_e4m3": "float8_e4m3fn (or its bits as uint8)",
    "bytes": "a 1-byte type (uint8, int8 or float8_e4m3fn)",
    "uint8": "uint8",
}


def framework(x: Any) -> str:
    """The top-level module of the array's type: "numpy", "torch", "cupy", "jaxlib", ..."""
    return type(x).__module__.partition(".")[0]


def dlpack_device(x: Any) -> Tuple[int, int]:
    """(DLPack device type, device id): (1, 0) for host memory, (2, n) for cuda:n."""
    get = getattr(x, "__dlpack_device__", None)
    if get is None:
        return (1, 0)
    kind, index = get()
    return (int(kind), int(index))


def _dtype_error(name: str, expect: Optional[str], given: str) -> TypeError:
    wanted = _EXPECTED.get(expect or "", "another dtype")
    return TypeError(f"{name}: expected dtype {wanted}, given {given}")


def _export_torch(name: str, x: Any, expect: Optional[str]) -> Any:
    torch = sys.modules["torch"]
    dtype_name = str(x.dtype)
    if dtype_name.startswith("torch.float8"):
        if dtype_name != "torch.float8_e4m3fn" or expect not in ("fp8_e4m3", "bytes"):
            raise _dtype_error(name, expect, dtype_name[len("torch.") :])
        x = x.view(torch.uint8)
    if x.requires_grad:
        x = x.detach()
    to_dlpack = getattr(torch._C, "_to_dlpack", None)
    if to_dlpack is not None:
        return to_dlpack(x)
    return x.__dlpack__(stream=-1)  # -1: no stream synchronization


def _export_numpy(name: str, x: Any, expect: Optional[str]) -> Any:
    dtype = x.dtype
    if dtype.kind != "V":  # ml_dtypes types are numpy "void" kind extension dtypes
        return x
    np = sys.modules["numpy"]
    if dtype.name == "bfloat16" and expect == "bf16":
        return x.view(np.uint16)
    if dtype.name == "float8_e4m3fn" and expect in ("fp8_e4m3", "bytes"):
        return x.view(np.uint8)
    raise _dtype_error(name, expect, dtype.name)


def export(name: str, x: Any, expect: Optional[str] = None) -> Any:
    """The object to hand to the C++ extension for argument ``name`` (None stays None).

    ``expect`` is the element kind the argument takes ("bf16", "fp16", "fp8_e4m3", "bytes" or
    None for the others); it decides whether a float8 or bfloat16 array may be passed as bits.
    """
    if x is None:
        return None
    kind = framework(x)
    if kind == "torch":
        return _export_torch(name, x, expect)
    if kind == "numpy":
        return _export_numpy(name, x, expect)
    if kind == "cupy":
        return x.toDlpack()  # the legacy export: no stream synchronization
    return x


def check_writable(name: str, x: Any) -> None:
    """NumPy outputs must be writable (other frameworks' arrays always are, or cannot say)."""
    flags = getattr(x, "flags", None)
    if framework(x) == "numpy" and flags is not None and not flags.writeable:
        raise ValueError(f"{name}: expected a writable array, given a read-only numpy array")


def _numpy_dtype(dtype: str) -> Any:
    np = sys.modules.get("numpy") or __import__("numpy")
    if dtype == "fp32":
        return np.float32
    if dtype == "fp16":
        return np.float16
    try:  # bfloat16 when ml_dtypes is installed, its bits as uint16 otherwise
        import ml_dtypes

        return ml_dtypes.bfloat16
    except ImportError:
        return np.uint16


def empty(like: Any, shape: Tuple[int, ...], dtype: str, name: str) -> Any:
    """A new array of ``like``'s framework and device: dtype "bf16", "fp16" or "fp32"."""
    kind = framework(like)
    if kind == "torch":
        torch = sys.modules["torch"]
        tdtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
        return torch.empty(shape, dtype=tdtype, device=like.device)
    if kind == "numpy":
        return sys.modules["numpy"].empty(shape, dtype=_numpy_dtype(dtype))
    if kind == "cupy":
        cupy = sys.modules["cupy"]
        cdtype = {"bf16": cupy.uint16, "fp16": cupy.float16, "fp32": cupy.float32}[dtype]
        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=cdtype)
    raise TypeError(
        f"{name}: mlakit allocates arrays of NumPy, PyTorch and CuPy only, and q is a "
        f"{type(like).__module__}.{type(like).__name__}: pass {name}= explicitly"
    )


def empty_bytes(like: Any, nbytes: int, stream: Optional[int] = None) -> Any:
    """A workspace of ``nbytes`` bytes on ``like``'s device (uint8; allocator-aligned).

    ``stream``: the handle of the stream that will use it, where that is not the current stream
    of ``like``'s framework. PyTorch's and CuPy's pools hand a freed block again to allocations
    on the stream it was allocated on, whose work runs after the kernels already there: a
    workspace allocated on the current stream, used on another and freed when the call returns
    could be handed out while that kernel still runs. So it is allocated on the stream using it.
    """
    kind = framework(like)
    if kind == "torch":
        torch = sys.modules["torch"]
        # The caching allocator: ordered on the current stream, and served from the graph's
        # private pool when called during CUDA graph capture.
        if stream is None:
            return torch.empty(nbytes, dtype=torch.uint8, device=like.device)
        with torch.cuda.stream(torch.cuda.ExternalStream(stream, device=like.device)):
            return torch.empty(nbytes, dtype=torch.uint8, device=like.device)
    if kind == "cupy":
        cupy = sys.modules["cupy"]
        with cupy.cuda.Device(like.device.id):
            if stream is None:
                return cupy.empty(nbytes, dtype=cupy.uint8)
            with cupy.cuda.ExternalStream(stream):
                return cupy.empty(nbytes, dtype=cupy.uint8)
    if kind == "numpy":
        np = sys.modules["numpy"]
        # 256-byte alignment, as the library requires for workspaces.
        raw = np.empty(nbytes + 256, dtype=np.uint8)
        offset = (-raw.ctypes.data) % 256
        return raw[offset : offset + nbytes]
    raise TypeError(
        f"workspace: mlakit allocates workspaces for NumPy, PyTorch and CuPy arrays only, and q "
        f"is a {type(like).__module__}.{type(like).__name__}: pass workspace= explicitly"
    )


def stream_handle(stream: Any) -> int:
    """A cudaStream_t as an int from an int, a torch / CuPy stream or a __cuda_stream__ object."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        return int(protocol()[1])
    for attribute in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    raise TypeError(
        "stream: expected None, an int (cudaStream_t), a torch.cuda.Stream, a CuPy stream or an "
        f"object with __cuda_stream__, given {type(stream).__name__}"
    )


def current_stream(like: Any) -> int:
    """The current CUDA stream of ``like``'s framework on its device (0 when it has none)."""
    kind = framework(like)
    if kind == "torch":
        torch = sys.modules["torch"]
        index = like.device.index
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return int(raw(index))
        return int(torch.cuda.current_stream(index).cuda_stream)
    if kind == "cupy":
        return int(sys.modules["cupy"].cuda.get_current_stream().ptr)
    return 0
