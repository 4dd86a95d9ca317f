"""mlakit.ops: the steps of a DeepSeek V3.2 (DSA) decode layer besides attention.

    append_kv       new tokens' latent + RoPE quantized into the KV cache (in place)
    append_indexer  new tokens' indexer keys quantized into the indexer cache (in place)
    indexer_logits  the lightning indexer's logits
    topk_indices    per query token, the k largest logits as sparse-decode indices

Arrays come from any framework (NumPy, PyTorch, CuPy, DLPack) and are used in place. Where an
op runs follows its arrays: host memory runs the cpu reference (synchronous); CUDA memory runs
the CUDA kernel on the current stream of the arrays' framework (or ``stream=``), asynchronously,
with no host synchronization, so that the call can be captured in a CUDA graph. Every array of
a call must be in the same memory. See docs/ops.md and docs/python.md; ``mlakit.torch`` has the
same ops as ``torch.library`` custom ops for torch.compile.

Errors name the argument: a non-array or a wrong dtype raises TypeError; a wrong shape, device
or value ValueError; an op without a kernel for the arrays' device NotImplementedError.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Tuple, Union

from . import _arrays, _mlakit
from ._decoder import host_scale

__all__ = [
    "append_kv",
    "append_indexer",
    "indexer_logits",
    "topk_indices",
    "topk_workspace_bytes",
    "indexer_cache_shape",
    "INDEXER_DIM",
]

INDEXER_DIM = 128  # d of an indexer key and query head
# Bytes of one token in the indexer cache: 128 e4m3 values and one fp32 scale.
_INDEXER_TOKEN_BYTES = INDEXER_DIM + 4
_V4_TOKEN_BYTES = 584
_CUDA_MEMORY = (2, 13)  # DLPack kDLCUDA, kDLCUDAManaged

_LAYOUTS = {
    "dense": "dense",
    "fp8_blockwise": "fp8_blockwise",
    "blockwise": "fp8_blockwise",
    "v32": "fp8_blockwise",
    "fp8_v4": "fp8_v4",
    "v4": "fp8_v4",
    "model1": "fp8_v4",
}


def _dtype_kind(name: str, x: Any, allowed: Tuple[str, ...]) -> str:
    """"bf16", "fp16" or "fp8_e4m3" of an array; uint16 means bf16 bits, uint8 e4m3 bits."""
    dtype = str(getattr(x, "dtype", type(x).__name__)).replace("torch.", "").lower()
    kind = {
        "bfloat16": "bf16",
        "uint16": "bf16",
        "float16": "fp16",
        "float8_e4m3fn": "fp8_e4m3",
        "uint8": "fp8_e4m3",
    }.get(dtype)
    if kind not in allowed:
        words = {"bf16": "bfloat16 (or its bits as uint16)", "fp16": "float16",
                 "fp8_e4m3": "float8_e4m3fn (or its bits as uint8)"}  # fmt: skip
        raise TypeError(
            f"{name}: expected dtype {' or '.join(words[a] for a in allowed)}, given {dtype}"
        )
    return kind


def _placement(first: Any, stream: Any) -> Tuple[int, int]:
    """(CUDA device id or -1 for host memory, stream handle) of a call whose first array is
    ``first``: CUDA arrays run on their framework's current stream unless ``stream`` is given."""
    if not hasattr(first, "__dlpack_device__") and not hasattr(first, "__array_interface__"):
        return -1, 0  # not an array: the extension names it
    kind, index = _arrays.dlpack_device(first)
    if kind not in _CUDA_MEMORY:
        return -1, 0
    handle = _arrays.stream_handle(stream) if stream is not None else _arrays.current_stream(first)
    return index, handle


def _shape(name: str, x: Any) -> Tuple[int, ...]:
    shape = getattr(x, "shape", None)
    if shape is None:
        raise TypeError(f"{name}: expected an array, given {type(x).__name__}")
    return tuple(int(s) for s in shape)


def _scale(value: Any) -> Any:
    """k_scale as the extension takes it: a host number checked here (the library reads NaN as
    "not given", so NaN, 0, negative and infinite values are refused by name), or an array."""
    if value is None or isinstance(value, bool):
        return value  # a bool is refused by the extension, by name
    if isinstance(value, (int, float)) or (
        _arrays.framework(value) == "numpy" and type(value).__name__ != "ndarray"
    ):
        return host_scale("k_scale", value)
    return _arrays.export("k_scale", value)


def append_kv(
    kv: Any,
    slot_mapping: Any,
    kv_cache: Any,
    *,
    kv_layout: str = "dense",
    page_size: Optional[int] = None,
    k_scale: Any = None,
    stream: Any = None,
    pdl: bool = False,
) -> Any:
    """Quantizes new tokens into a KV cache, in place; returns ``kv_cache``.

    Arguments:
        kv: [n_tokens, 576] bf16 or fp16 (the latent, then the 64 RoPE values; [n_tokens, 512]
            for fp8_v4: 448 NoPE + 64 RoPE). Rows may be strided (inner stride 1).
        slot_mapping: [n_tokens] int64 slots ``page * page_size + offset``; -1 skips a token.
            On the host a slot outside the cache is refused before anything is written; on a
            GPU it is skipped.
        kv_cache: "dense": [num_pages, page_size, 576] bf16, fp16 or e4m3 (float8_e4m3fn or
            uint8 bits; the per-tensor fp8 cache, with ``k_scale``); "fp8_blockwise" (alias
            "v32"): [num_pages, page_size, 656] bytes; "fp8_v4" (alias "v4"): [num_pages, page
            bytes] or [num_pages, page_size, (1,) 584] (the Decoder's caches). A 1 may stand
            before or after page_size in the 16-bit and blockwise forms.
        kv_layout: "dense", "fp8_blockwise" or "fp8_v4".
        page_size: tokens per page; None: read from the cache's shape (required for a flat V4
            cache).
        k_scale: the dense fp8 cache's scale (stored = x / k_scale): a float, or a one-element
            float32 array where the op runs (read at run time). Required for that cache only.
        stream: CUDA arrays: None is the framework's current stream, or an int / stream object.
        pdl: CUDA arrays on sm_90 and newer: programmatic dependent launch (the kernel may start
            while the previous kernel in the stream runs, and waits for it before reading;
            docs/ops.md). Ignored elsewhere.
    """
    layout = _LAYOUTS.get(str(kv_layout).lower())
    if layout is None:
        raise ValueError(
            f"kv_layout: expected dense, fp8_blockwise (v32) or fp8_v4 (v4), given {kv_layout}"
        )
    kv_kind = _dtype_kind("kv", kv, ("bf16", "fp16"))
    shape = _shape("kv_cache", kv_cache)
    if layout == "dense":
        cache_kind = _dtype_kind("kv_cache", kv_cache, ("bf16", "fp16", "fp8_e4m3"))
        expect = cache_kind
    else:
        cache_kind, expect = "fp8_e4m3", "bytes"
    if page_size is None:
        if len(shape) == 4 and shape[1] == 1:
            page_size = shape[2]
        elif len(shape) >= 3:
            page_size = shape[1]
        else:
            raise ValueError(
                f"page_size: expected a value for a kv_cache of shape {list(shape)} (a flat "
                "cache does not say it)"
            )
    device, handle = _placement(kv, stream)
    _mlakit.append_kv(
        _arrays.export("kv", kv, kv_kind),
        kv_kind,
        _arrays.export("slot_mapping", slot_mapping),
        _arrays.export("kv_cache", kv_cache, expect),
        cache_kind,
        layout,
        int(page_size),
        _scale(k_scale),
        device,
        handle,
        bool(pdl),
    )
    return kv_cache


def _indexer_page_size(name: str, cache: Any, page_size: Optional[int]) -> int:
    shape = _shape(name, cache)
    if page_size is not None:
        return int(page_size)
    if len(shape) != 2 or shape[1] % _INDEXER_TOKEN_BYTES != 0 or shape[1] == 0:
        raise ValueError(
            f"{name}: expected shape [num_pages, page_size * 132] (bytes), given {list(shape)}"
        )
    return shape[1] // _INDEXER_TOKEN_BYTES


def indexer_cache_shape(num_pages: int, page_size: int) -> Tuple[int, int]:
    """The shape of an indexer cache (uint8): per page page_size x 128 e4m3 values, then
    page_size fp32 scales."""
    return (int(num_pages), int(page_size) * _INDEXER_TOKEN_BYTES)


def append_indexer(
    k: Any,
    slot_mapping: Any,
    index_cache: Any,
    *,
    scale: str = "amax",
    page_size: Optional[int] = None,
    stream: Any = None,
    pdl: bool = False,
) -> Any:
    """Quantizes new tokens' indexer keys into the indexer cache, in place; returns it.

    Arguments:
        k: [n_tokens, 128] bf16 or fp16 (rows may be strided).
        slot_mapping: [n_tokens] int64, -1 skips (as ``append_kv``).
        index_cache: [num_pages, page_size * 132] uint8 (``indexer_cache_shape``): token ``o``
            of a page has its 128 e4m3 values at ``o * 128`` and its fp32 scale at
            ``page_size * 128 + o * 4``.
        scale: "amax" (s = max(amax, 1e-4) / 448, vLLM's) or "ue8m0" (that s rounded up to a
            power of two).
        page_size: None: index_cache.shape[1] // 132.
        pdl: CUDA arrays on sm_90 and newer: programmatic dependent launch (the kernel may start
            while the previous kernel in the stream runs, and waits for it before reading;
            docs/ops.md). Ignored elsewhere.
    """
    kind = _dtype_kind("k", k, ("bf16", "fp16"))
    page_size = _indexer_page_size("index_cache", index_cache, page_size)
    device, handle = _placement(k, stream)
    _mlakit.append_indexer(
        _arrays.export("k", k, kind),
        kind,
        _arrays.export("slot_mapping", slot_mapping),
        _arrays.export("index_cache", index_cache, "bytes"),
        page_size,
        str(scale),
        device,
        handle,
        bool(pdl),
    )
    return index_cache


def indexer_logits(
    q: Any,
    weights: Any,
    index_cache: Any,
    block_table: Any,
    seq_lens: Any,
    *,
    max_len: Optional[int] = None,
    logits: Any = None,
    page_size: Optional[int] = None,
    stream: Any = None,
    pdl: bool = False,
) -> Any:
    """The lightning indexer: ``logits[i * next_n + t, j] = sum_h weights[i * next_n + t, h] *
    relu(q[i, t, h] . k_j * s_j)`` over request i's visible positions
    ``j < seq_lens[i] - next_n + 1 + t``; every other column is -inf. Returns ``logits``.

    CUDA arrays: fp8 tensor cores (sm_89 or newer; NotImplementedError below), -inf for a
    position whose page id is out of range.

    Arguments:
        q: [b, next_n, heads, 128] float8_e4m3fn (or uint8 bits); heads 1..128, next_n 1..16.
        weights: [b * next_n, heads] (or [b, next_n, heads]) float32.
        index_cache: [num_pages, page_size * 132] uint8 (see ``append_indexer``).
        block_table: [b, max_pages] int32 page ids (rows may be strided).
        seq_lens: [b] int32, each at most max_len and what the block table addresses.
        max_len: the logits' columns; None: logits.shape[1], or
            ``block_table.shape[1] * page_size``.
        logits: [b * next_n, max_len] float32 (rows may be strided), written in place; None:
            a new array of q's framework.
        pdl: CUDA arrays on sm_90 and newer: programmatic dependent launch (the kernel may start
            while the previous kernel in the stream runs, and waits for it before reading;
            docs/ops.md). Ignored elsewhere.
    """
    page_size = _indexer_page_size("index_cache", index_cache, page_size)
    q_shape = _shape("q", q)
    if logits is None:
        if len(q_shape) != 4:
            raise ValueError(f"q: expected shape [b, next_n, heads, 128], given {list(q_shape)}")
        if max_len is None:
            max_len = _shape("block_table", block_table)[-1] * page_size
        rows = q_shape[0] * q_shape[1]
        logits = _arrays.empty(q, (rows, int(max_len)), "fp32", "logits")
    else:
        _arrays.check_writable("logits", logits)
        if max_len is not None and _shape("logits", logits)[-1] != int(max_len):
            raise ValueError(
                f"max_len: expected logits.shape[1] = {_shape('logits', logits)[-1]}, given "
                f"{max_len}"
            )
    device, handle = _placement(q, stream)
    _mlakit.indexer_logits(
        _arrays.export("q", q, "fp8_e4m3"),
        _arrays.export("weights", weights),
        _arrays.export("index_cache", index_cache, "bytes"),
        page_size,
        _arrays.export("block_table", block_table),
        _arrays.export("seq_lens", seq_lens),
        _arrays.export("logits", logits),
        device,
        handle,
        bool(pdl),
    )
    return logits


def _empty_int32(like: Any, shape: Tuple[int, ...], name: str) -> Any:
    kind = _arrays.framework(like)
    if kind == "torch":
        import torch

        return torch.empty(shape, dtype=torch.int32, device=like.device)
    if kind == "numpy":
        import numpy

        return numpy.empty(shape, dtype=numpy.int32)
    if kind == "cupy":
        import cupy

        with cupy.cuda.Device(like.device.id):
            return cupy.empty(shape, dtype=cupy.int32)
    raise TypeError(
        f"{name}: mlakit allocates arrays of NumPy, PyTorch and CuPy only, and logits is a "
        f"{type(like).__module__}.{type(like).__name__}: pass {name}= explicitly"
    )


def topk_workspace_bytes(batch: int, *, k: int, max_len: int, next_n: int = 1) -> int:
    """Bytes of the multi-block top-k's workspace for ``batch`` requests of ``next_n`` rows, rows
    of ``max_len`` columns, ``k`` kept (``mlakit::ops::topk_workspace_bytes``): 0 where these
    shapes run one block a row anyway (max_len below 8192 or at most k, batch 0) or are out of
    range. A workspace of this size for the largest batch serves smaller ones (``topk_indices``'s
    ``workspace=``; it allocates one itself when none is given)."""
    return int(_mlakit.topk_workspace_bytes(int(batch), int(next_n), int(max_len), int(k)))


def _cupy_capturing(handle: int) -> bool:
    """Whether CuPy's runtime says the stream is being captured into a CUDA graph."""
    runtime = sys.modules["cupy"].cuda.runtime
    query = getattr(runtime, "streamIsCapturing", None)
    return query is not None and int(query(handle)) != 0


def _topk_workspace(
    logits: Any, batch: int, next_n: int, max_len: int, k: int, stream: Any, handle: int
) -> Any:
    """The multi-block kernel's workspace for a call on a GPU, from the allocator of logits'
    framework, ordered on the stream the op runs on; None (one block a row) where these shapes
    need none or mlakit does not allocate for the framework (PyTorch and CuPy only)."""
    nbytes = _mlakit.topk_workspace_bytes(batch, next_n, max_len, k)
    kind = _arrays.framework(logits)
    if nbytes == 0 or kind not in ("torch", "cupy"):
        return None
    # CuPy's pool has no graph-private pool: a block allocated while the stream is captured and
    # freed when the call returns would be handed out again while every replay writes it. There
    # the one-block kernel runs instead (the same result; PyTorch's graphs allocate from theirs).
    if kind == "cupy" and _cupy_capturing(handle):
        return None
    elsewhere = stream is not None and handle != _arrays.current_stream(logits)
    return _arrays.empty_bytes(logits, nbytes, handle if elsewhere else None)


def topk_indices(
    logits: Any,
    seq_lens: Any,
    block_table: Any,
    *,
    k: Optional[int] = None,
    page_size: int,
    next_n: int = 1,
    max_len: Optional[int] = None,
    indices: Any = None,
    positions: Any = None,
    return_positions: bool = False,
    workspace: Any = None,
    one_block: bool = False,
    deterministic: bool = True,
    stream: Any = None,
    pdl: bool = False,
) -> Union[Any, Tuple[Any, Any]]:
    """Per row, the k largest logits among its valid length, as sparse-decode indices.

    Row ``r = i * next_n + t`` has valid length ``n = clamp(L_i - next_n + 1 + t, 0, L_i)``
    (``L_i = seq_lens[i]``, the indexer's causal rule). ``n <= k`` keeps every position;
    otherwise the k positions of the largest values, ties by the lower position. Kept positions
    are written in increasing order as ``block_table[i, p // page_size] * page_size + p %
    page_size``, then -1 up to k: the ``indices`` of ``Decoder.run`` with ``s_q = next_n``,
    ``topk = k``. On the host a length or page id out of range raises; on a GPU lengths are
    clamped to [0, max_len] and a negative page id gives -1.

    On a GPU the same result bit for bit comes from one of four kernels (docs/ops.md): on sm_90
    (Hopper) from 32 rows and 2^20 keys, and where the cluster kernel below would need two waves
    of clusters, a streaming thread-block cluster a row, and with rows of
    up to 262144 positions (max_len) a cluster a row that holds the row in shared memory (neither
    uses a workspace); otherwise rows of 8192 positions and more (above k) run the multi-block
    kernel with a workspace (``topk_workspace_bytes``), shorter ones and ``one_block=True`` one
    block a row.

    Arguments:
        logits: [b * next_n, >= max_len] float32 (rows may be strided); give no NaN.
        seq_lens: [b] int32.
        block_table: [b, >= ceil(max_len / page_size)] int32 (rows may be strided).
        k: 1..65536; None: the last dimension of ``indices``.
        page_size: tokens per page of the cache the indices address (required).
        next_n: query tokens per request (1..16).
        max_len: the longest length any call passes; None: logits.shape[1].
        indices: [b, next_n, k] (or [b * next_n, k]) int32, written in place; None: a new
            [b, next_n, k] array of logits' framework.
        positions: optional, indices' shape: the positions p themselves, -1 padded.
        return_positions: allocate ``positions`` when None, and return (indices, positions).
        workspace: the multi-block kernel's scratch, for a caller that keeps one: at least
            ``topk_workspace_bytes(b, k=k, max_len=max_len, next_n=next_n)`` bytes of uint8,
            contiguous, 256-byte aligned, in the op's memory (host arrays are checked, unused).
            It holds nothing between calls; one call at a time may use it. None: on a GPU, a new
            one from the allocator of logits' framework when these shapes need one (PyTorch:
            the caching allocator, from the graph's pool during CUDA graph capture; CuPy, except
            during a capture, where one block a row runs; arrays of other frameworks run one
            block a row).
        one_block: pass no workspace on a GPU: where neither cluster kernel takes the
            shapes, one block a row runs (e.g. to compare it with the multi-block kernel).
        deterministic: False (opt-in) lets a GPU kernel write a row's kept positions in any
            order and keep any of the keys equal to the k-th largest (the kept values are the
            same multiset; results may differ from run to run). The multi-block kernel then skips
            sorting them on its sort path; the other kernels write what they write with True.
            Ignored on the host.
        pdl: CUDA arrays on sm_90 and newer: programmatic dependent launch (the kernel may start
            while the previous kernel in the stream runs, and waits for it before reading;
            docs/ops.md). Ignored elsewhere.

    Returns:
        ``indices``, or ``(indices, positions)`` when positions were given or asked for.
    """
    lens_shape = _shape("seq_lens", seq_lens)
    b = lens_shape[0] if len(lens_shape) == 1 else 0
    if indices is None:
        if k is None:
            raise ValueError("k: expected a value 1..65536 (or indices=), given None")
        indices = _empty_int32(logits, (b, int(next_n), int(k)), "indices")
    else:
        _arrays.check_writable("indices", indices)
        if k is not None and _shape("indices", indices)[-1] != int(k):
            raise ValueError(
                f"k: expected indices.shape[-1] = {_shape('indices', indices)[-1]}, given {k}"
            )
    if positions is None and return_positions:
        positions = _empty_int32(logits, _shape("indices", indices), "positions")
    elif positions is not None:
        _arrays.check_writable("positions", positions)
    if max_len is None:
        max_len = _shape("logits", logits)[-1]
    device, handle = _placement(logits, stream)
    if workspace is not None:
        if one_block:
            raise ValueError(
                "workspace: expected None with one_block=True (the one-block kernel takes no "
                f"workspace), given a {type(workspace).__name__}"
            )
        _arrays.check_writable("workspace", workspace)
    elif device >= 0 and not one_block and _shape("logits", logits)[:1] == (b * int(next_n),):
        # Allocated only for consistent shapes: a wrong one gets its named error, not a
        # workspace sized by it first.
        dims = _shape("indices", indices)
        workspace = _topk_workspace(logits, b, int(next_n), int(max_len), dims[-1] if dims else 0,
                                    stream, handle)  # fmt: skip
    _mlakit.topk_indices(
        _arrays.export("logits", logits),
        _arrays.export("seq_lens", seq_lens),
        _arrays.export("block_table", block_table),
        int(page_size),
        int(next_n),
        int(max_len),
        _arrays.export("indices", indices),
        _arrays.export("positions", positions),
        _arrays.export("workspace", workspace, "uint8"),
        bool(deterministic),
        device,
        handle,
        bool(pdl),
    )
    return (indices, positions) if positions is not None else indices
