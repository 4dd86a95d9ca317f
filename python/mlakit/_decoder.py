"""mlakit.Decoder: the C++ Decoder for arrays of any framework."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple, Union

from . import _arrays
from ._mlakit import Decoder as _CppDecoder

ScaleArg = Union[None, float, Any]

_DTYPE_ALIASES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp8": "fp8_e4m3",
    "fp8_e4m3": "fp8_e4m3",
    "e4m3": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "fp32": "fp32",
    "float32": "fp32",
}

_LAYOUT_ALIASES = {
    "dense": "dense",
    "fp8_blockwise": "fp8_blockwise",
    "blockwise": "fp8_blockwise",
    "v32": "fp8_blockwise",
    "fp8_v4": "fp8_v4",
    "v4": "fp8_v4",
    "model1": "fp8_v4",
}

# d_qk of each layout: the DeepSeek V4 cache holds 448 NoPE + 64 RoPE values a token.
_LAYOUT_D_QK = {"dense": 576, "fp8_blockwise": 576, "fp8_v4": 512}

# The element kind of each array argument, for arrays passed as bits (see _arrays.export).
_BYTES = "bytes"

_CUDA_MEMORY = (2, 13)  # DLPack kDLCUDA, kDLCUDAManaged


def dtype_name(arg: str, dtype: Any) -> str:
    """Canonical dtype name ("bf16", "fp16", "fp8_e4m3", "fp32") of a string or a dtype object.

    Accepts "bf16"/"bfloat16", "fp16"/"float16"/"half", "fp8"/"fp8_e4m3"/"float8_e4m3fn" and
    torch, NumPy or ml_dtypes dtypes of those types.
    """
    if isinstance(dtype, str):
        key = dtype
    elif type(dtype).__module__.startswith("torch"):
        key = str(dtype)
    else:
        try:
            import numpy

            key = numpy.dtype(dtype).name
        except (ImportError, TypeError):
            key = str(dtype)
    key = key.lower()
    if key.startswith("torch."):
        key = key[len("torch.") :]
    name = _DTYPE_ALIASES.get(key)
    if name is None:
        raise ValueError(f"{arg}: expected bf16, fp16 or fp8_e4m3, given {dtype}")
    return name


def _default_out_dtype(q_dtype: str, kv_dtype: str) -> str:
    # A 16-bit cache writes its own dtype; an fp8 cache writes q's 16-bit dtype, or bf16.
    if kv_dtype in ("bf16", "fp16"):
        return kv_dtype
    return q_dtype if q_dtype in ("bf16", "fp16") else "bf16"


class Decoder:
    """MLA decode for one problem shape, over a paged KV cache.

    Describes the static facts of the problem, validates them, picks a backend and sizes its
    workspace (see ``include/mlakit/mlakit.h``). ``run`` then computes, for a batch of requests,
    the attention of their newest ``s_q`` query tokens against their cached tokens.

    Arguments (all keyword):
        h_q: query heads, 1..128 (one KV head).
        s_q: query tokens per request, 1..16 (> 1: MTP / speculative decoding); with var_q the
            most any request has.
        page_size: tokens per KV page.
        max_batch: the largest batch any run will pass.
        max_seq_len: the longest cached length any run will pass (sizes the split-KV workspace).
        q_dtype: "bf16", "fp16" or "fp8_e4m3" (or a torch / NumPy dtype of those).
        kv_dtype: the cache's dtype; None: ``q_dtype`` (fp8_e4m3 with an fp8 layout).
        out_dtype: "bf16" or "fp16"; None: the cache's dtype if 16-bit, else q's, else bf16.
        kv_layout: "dense" ([num_pages, page_size, 576]), "fp8_blockwise" (alias "v32": 656
            bytes per token, the DeepSeek V3.2 layout) or "fp8_v4" (aliases "v4", "model1": the
            DeepSeek V4 layout, d_qk 512 = 448 e4m3 NoPE + 64 bf16 RoPE values; per page every
            token's 576 data bytes, then every token's 8-byte row of 7 UE8M0 scales and a pad
            byte, the page padded to a multiple of 576 bytes; see docs/math-and-layouts.md).
        causal: with ``s_q > 1``, token t sees positions < L - s_q + 1 + t.
        var_q: variable query lengths (speculative decoding without padding): runs take
            ``cu_seqlens_q`` [b + 1] int32, request i owning q_len_i = cu_seqlens_q[i + 1] -
            cu_seqlens_q[i] query tokens (0..s_q), and q, out and lse packed by query token:
            q [total, h_q, d_qk], out [total, h_q, 512], lse [total, h_q], row cu_seqlens_q[i] + t
            being token t of request i. With causal, that token sees positions
            < L_i - q_len_i + 1 + t.
        sinks: runs take per-head sink logits ``sinks`` [h_q] float32.
        topk: > 0: sparse attention over ``indices`` [b, s_q, topk].
        extra_topk: > 0 (with topk): runs take a second, "extra" cache (``extra_kv_cache``, same
            layout and dtype) and ``extra_indices`` [b, s_q, extra_topk] into it, attended in
            the same softmax as the main cache (DeepSeek V4's sliding window).
        extra_page_size: tokens per page of the extra cache; 0: ``page_size``.
        lse: runs also return the LSE [b, s_q, h_q] float32: natural log, -inf (and out 0) for a
            row that sees no token (mlakit.h, "LSE").
        lse_base2: with lse, the LSE in base 2 instead (natural * log2(e); -inf stays -inf), as
            FlashInfer and engines that merge partial results with exp2 expect.
        pdl: launch with programmatic dependent launch.
        backend: "auto" (the best backend for the problem and the machine) or a backend name
            (``mlakit.info()["backends"]``).
        tactic: backend-specific tactic, -1 = the backend's default.
        tune_cache: autotuner cache file; None: ``MLAKIT_TUNE_CACHE`` or none.
        cp_world, cp_rank, cp_interleave: context parallelism (docs/context-parallel.md): this
            decoder is rank ``cp_rank`` of ``cp_world``, whose cache holds the global positions
            g with ``(g // cp_interleave) % cp_world == cp_rank`` (``mlakit.cp``); ``seq_lens``
            stay global, the block table addresses the local pages, and runs give a partial
            (out, lse) for ``mlakit.cp.merge_partials``. cp_world > 1 needs lse=True and
            sinks=False (the merge applies sinks). 1, 0, 1: off.

    Raises:
        ValueError: an argument is invalid. NotImplementedError: no (chosen) backend can run the
        problem on this machine. RuntimeError: a CUDA error, or an internal one (the host ran out
        of memory).
    """

    def __init__(
        self,
        *,
        h_q: int = 128,
        s_q: int = 1,
        page_size: int = 64,
        max_batch: int,
        max_seq_len: int,
        q_dtype: Any = "bf16",
        kv_dtype: Any = None,
        out_dtype: Any = None,
        kv_layout: str = "dense",
        causal: bool = True,
        sinks: bool = False,
        topk: int = 0,
        lse: bool = False,
        pdl: bool = False,
        backend: str = "auto",
        tactic: int = -1,
        tune_cache: Optional[str] = None,
        extra_topk: int = 0,
        extra_page_size: int = 0,
        cp_world: int = 1,
        cp_rank: int = 0,
        cp_interleave: int = 1,
        lse_base2: bool = False,
        var_q: bool = False,
    ) -> None:
        q_name = dtype_name("q_dtype", q_dtype)
        kv_name = q_name if kv_dtype is None else dtype_name("kv_dtype", kv_dtype)
        out_name = (
            _default_out_dtype(q_name, kv_name)
            if out_dtype is None
            else dtype_name("out_dtype", out_dtype)
        )
        layout = _LAYOUT_ALIASES.get(str(kv_layout).lower())
        if layout is None:
            raise ValueError(
                f"kv_layout: expected dense, fp8_blockwise (v32) or fp8_v4 (v4), given {kv_layout}"
            )
        if layout != "dense" and kv_dtype is None:
            kv_name = "fp8_e4m3"  # the fp8 layouts' own dtype
        self._impl = _CppDecoder(
            int(h_q), int(s_q), int(page_size), int(max_batch), int(max_seq_len),
            q_name, kv_name, out_name, layout, bool(causal), bool(sinks), int(topk),
            bool(lse), bool(pdl), str(backend), int(tactic), tune_cache or "",
            int(extra_topk), int(extra_page_size), int(cp_world), int(cp_rank),
            int(cp_interleave), bool(lse_base2), bool(var_q),
        )  # fmt: skip
        self._problem: Dict[str, Any] = self._impl.problem
        # The shapes of out and lse after the batch (or, with var_q, the rows) dimension.
        self._var_q = bool(var_q)
        self._shape_out = (int(h_q), 512) if var_q else (int(s_q), int(h_q), 512)
        self._shape_lse = (int(h_q),) if var_q else (int(s_q), int(h_q))
        self._out_dtype = out_name
        self._lse = bool(lse)
        self._q_kind = q_name
        self._kv_kind = _BYTES if layout != "dense" else kv_name
        self._d_qk = _LAYOUT_D_QK[layout]
        self._workspace_bytes: int = self._impl.workspace_bytes
        self._device_memory: bool = self._impl.device_memory
        self._workspaces: Dict[Tuple[str, int, int], Any] = {}

    @property
    def backend(self) -> str:
        """The backend that runs this problem ("cpu", "sm80", ...)."""
        return self._impl.backend

    @property
    def tactic(self) -> int:
        """The backend tactic in use."""
        return self._impl.tactic

    @property
    def workspace_bytes(self) -> int:
        """Bytes of workspace one run needs (0 for the cpu backend)."""
        return self._workspace_bytes

    @property
    def device_memory(self) -> bool:
        """True when the arrays of ``run`` must be in CUDA memory, False for host memory."""
        return self._device_memory

    @property
    def device(self) -> int:
        """The CUDA device this decoder belongs to (the one current at creation), -1 on host."""
        return self._impl.device

    @property
    def problem(self) -> Dict[str, Any]:
        """The problem as a dict (h_q, s_q, page_size, dtypes, layout, features, limits)."""
        return dict(self._problem)

    def __repr__(self) -> str:
        return f"mlakit.Decoder({self._impl.describe()}; backend {self.backend})"

    def _workspace(self, q: Any, stream: int) -> Any:
        key = (_arrays.framework(q), _arrays.dlpack_device(q)[1], stream)
        workspace = self._workspaces.get(key)
        if workspace is None:
            workspace = _arrays.empty_bytes(q, self._workspace_bytes)
            self._workspaces[key] = workspace
        return workspace

    def run(
        self,
        q: Any,
        kv_cache: Any,
        block_table: Any = None,
        seq_lens: Any = None,
        *,
        out: Any = None,
        lse: Any = None,
        softmax_scale: Optional[float] = None,
        q_scale: ScaleArg = None,
        k_scale: ScaleArg = None,
        sinks: Any = None,
        indices: Any = None,
        topk_lens: Any = None,
        workspace: Any = None,
        stream: Any = None,
        extra_kv_cache: Any = None,
        extra_indices: Any = None,
        extra_topk_lens: Any = None,
        cu_seqlens_q: Any = None,
    ) -> Any:
        """Computes the attention of a batch; returns ``out``, or ``(out, lse)`` with lse=True.

        Arrays come from any framework (NumPy, PyTorch, CuPy, JAX, DLPack) and are used in place,
        never copied; they must be in the memory the backend reads (``device_memory``: the
        decoder's CUDA device, else the host). ``q``, ``kv_cache`` and ``out`` may be views: a
        contiguous last dimension, any outer strides keeping rows 16-byte aligned (padded pages,
        sliced queries); the cpu backend reads any such view, sm90 q and a cache whose rows are
        equally spaced, sm80 contiguous tensors only (a view it cannot read raises
        NotImplementedError naming it). ``block_table`` rows may be strided; the other arrays
        are C-contiguous.

        Arguments:
            q: [b, s_q, h_q, d_qk] of q_dtype (the absorbed query, then its 64 RoPE values;
                d_qk 576, or 512 with fp8_v4); with var_q [total, h_q, d_qk] (cu_seqlens_q).
            kv_cache: [num_pages, page_size, 576] of kv_dtype (also accepted: [num_pages,
                page_size, 1, 576] and [num_pages, 1, page_size, 576]); with fp8_blockwise,
                656 bytes per token (uint8 or float8_e4m3fn); with fp8_v4, [num_pages, page
                bytes] (page bytes = page_size * 584 rounded up to a multiple of 576) or
                FlashMLA's view [num_pages, page_size, (1,) 584] of such pages.
            block_table: [b, max_pages] int32 page ids (dense problems; unused when sparse).
                Rows may be a view of a wider table (``table[:b, :max_pages]``): on the host,
                lengths beyond ``max_pages * page_size`` are refused; GPU backends cannot read
                the lengths and bound them by the row stride, so they must fit the view.
            seq_lens: [b] int32 cached lengths (dense problems; unused when sparse).
            out: [b, s_q, h_q, 512] of out_dtype ([total, h_q, 512] with var_q), written in
                place and returned; None: a new array of q's framework (NumPy, PyTorch, CuPy).
            lse: [b, s_q, h_q] float32 ([total, h_q] with var_q) for decoders made with
                lse=True (None: a new array).
            softmax_scale: None: 1/sqrt(d_qk) (1/sqrt(576), or 1/sqrt(512) with fp8_v4).
            q_scale, k_scale: fp8 dequantization scales (value = e4m3 * scale; k_scale scales K
                and V): a finite float > 0, or a one-element float32 array where the backend runs
                (a pointer read at run time, so a captured graph follows a changing value).
                q_scale is required with an fp8 q, k_scale with a dense fp8 cache (optional with
                fp8_blockwise); both are refused with 16-bit inputs.
            sinks: [h_q] float32 sink logits (decoders made with sinks=True).
            indices: [b, s_q, topk] int32 cache slots ``page * page_size + offset``, -1 = empty
                (sparse decoders); with var_q [total, topk], as q (extra_indices likewise).
            topk_lens: optional [b] int32: only the first topk_lens[i] slots count (sparse).
            extra_kv_cache: the extra cache (decoders made with extra_topk > 0): the layout of
                ``kv_cache`` with pages of ``extra_page_size`` tokens.
            extra_indices: [b, s_q, extra_topk] int32 slots of the extra cache, -1 = empty.
            extra_topk_lens: optional [b] int32: only the first extra_topk_lens[i] count.
            cu_seqlens_q: [b + 1] int32 query-token offsets (decoders made with var_q=True;
                cu_seqlens_q[0] = 0, non-decreasing, each request 0..s_q tokens): the batch is b,
                and q is [total, h_q, d_qk], out [total, h_q, 512] and lse [total, h_q] with
                the same number of rows, at least cu_seqlens_q[b] (rows past it are neither read
                nor written; on the host the offsets are checked against the rows, on a GPU
                they cannot be).
            workspace: at least ``workspace_bytes`` bytes, 256-byte aligned; None: one kept by
                this decoder per (framework, device, stream), allocated on first use (PyTorch:
                from the caching allocator, so CUDA graph capture works).
            stream: None: the current stream of q's framework (PyTorch, CuPy), else the legacy
                default stream; or an int handle, a torch.cuda.Stream, a CuPy stream.

        Raises:
            TypeError: an argument is not an array, or has the wrong dtype.
            ValueError: a wrong shape, device, layout or value (library checks included).
            NotImplementedError: the backend does not support what was asked.
            RuntimeError: a CUDA error, or an internal one (the host ran out of memory).
        """
        shape: Any = getattr(q, "shape", None)
        batched = shape is not None and len(shape) == (3 if self._var_q else 4)
        if out is None:
            if batched:
                out = _arrays.empty(q, (int(shape[0]),) + self._shape_out, self._out_dtype, "out")
        else:
            _arrays.check_writable("out", out)
        if self._lse:
            if lse is None:
                if batched:
                    lse = _arrays.empty(q, (int(shape[0]),) + self._shape_lse, "fp32", "lse")
            else:
                _arrays.check_writable("lse", lse)

        handle = _arrays.stream_handle(stream)
        if self._device_memory and batched and _arrays.dlpack_device(q)[0] in _CUDA_MEMORY:
            if stream is None:
                handle = _arrays.current_stream(q)
            if workspace is None and self._workspace_bytes > 0:
                workspace = self._workspace(q, handle)
        if workspace is not None:
            _arrays.check_writable("workspace", workspace)

        export = _arrays.export
        self._impl.run(
            export("q", q, self._q_kind),
            export("kv_cache", kv_cache, self._kv_kind),
            export("block_table", block_table),
            export("seq_lens", seq_lens),
            export("out", out, self._out_dtype),
            export("lse", lse),
            export("sinks", sinks),
            export("indices", indices),
            export("topk_lens", topk_lens),
            export("workspace", workspace, _BYTES),
            None if softmax_scale is None else float(softmax_scale),
            _scale("q_scale", q_scale),
            _scale("k_scale", k_scale),
            handle,
            export("extra_kv_cache", extra_kv_cache, self._kv_kind),
            export("extra_indices", extra_indices),
            export("extra_topk_lens", extra_topk_lens),
            export("cu_seqlens_q", cu_seqlens_q),
        )
        return (out, lse) if self._lse else out


def host_scale(name: str, value: Any) -> float:
    """A scale given as a host number, checked: finite and > 0.

    The library takes NaN for "not given", so a NaN (or 0, a negative or an infinite value) must
    be refused here, by name, rather than passed on.
    """
    scale = float(value)
    if not (math.isfinite(scale) and scale > 0.0):
        raise ValueError(f"{name}: expected a finite value > 0, given {scale:g}")
    return scale


def _scale(name: str, value: ScaleArg) -> Any:
    """A host number becomes a checked float (NumPy scalars too); an array is exported, so that
    the library reads it where the backend runs, at run time (a captured graph follows it)."""
    if value is None or isinstance(value, bool):
        return value  # bool: the extension refuses it with its usual message
    if isinstance(value, (int, float)):
        return host_scale(name, value)
    if _arrays.framework(value) == "numpy" and type(value).__name__ != "ndarray":
        return host_scale(name, value)
    return _arrays.export(name, value)
