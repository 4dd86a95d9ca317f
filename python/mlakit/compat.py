"""Drop-in replacements for the MLA decode calls of FlashMLA and FlashInfer.

Switching is a change of import::

    from mlakit.compat import flash_mla_with_kvcache, get_mla_metadata
    from mlakit.compat import flash_mla_with_kvcache_fp8, get_mla_metadata_dense_fp8
    from mlakit.compat import trtllm_batch_decode_with_kv_cache_mla
    from mlakit.compat import BatchMLAPagedAttentionWrapper

The signatures and return values follow the originals (FlashMLA's ``flash_mla_interface.py`` of
its main branch and the older form, the fp8 entry points of vLLM's FlashMLA fork in
``vllm.attention.ops.flashmla``, and FlashInfer 0.6's ``flashinfer.mla``, in _flashinfer.py);
every argument is implemented, or raises (NotImplementedError where mlakit lacks the feature) with
a message naming it. PyTorch tensors go through the ``mlakit::decode``
custom op (torch.compile and CUDA graphs work); other arrays through a cached ``mlakit.Decoder``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any, List, Optional, Tuple, Union

from . import _arrays, _cache
from ._decoder import dtype_name, host_scale

__all__ = [
    "FlashMLASchedMeta",
    "BatchMLAPagedAttentionWrapper",
    "get_mla_metadata",
    "get_mla_metadata_dense_fp8",
    "flash_mla_with_kvcache",
    "flash_mla_with_kvcache_fp8",
    "trtllm_batch_decode_with_kv_cache_mla",
]


def _not_supported(name: str, what: str, why: str = "") -> NotImplementedError:
    because = f" ({why})" if why else ""
    return NotImplementedError(f"{name}: {what} is not supported by mlakit{because}")


def _numel(x: Any) -> int:
    numel = getattr(x, "numel", None)
    if callable(numel):  # torch
        return int(numel())
    count = 1
    for size in x.shape:
        count *= int(size)
    return count


def _array_dtype(name: str, x: Any) -> str:
    dtype = getattr(x, "dtype", None)
    text = str(dtype)
    if text in ("uint8", "torch.uint8"):
        return "fp8_e4m3"
    try:
        return dtype_name(name, dtype)
    except ValueError:
        raise TypeError(
            f"{name}: expected dtype bfloat16, float16 or float8_e4m3fn, given {dtype}"
        ) from None


def _decode(
    q: Any,
    kv_cache: Any,
    block_table: Any,
    seq_lens: Any,
    *,
    out: Any = None,
    lse: Any = None,
    return_lse: bool,
    softmax_scale: float,
    causal: bool,
    q_scale: Any = None,
    k_scale: Any = None,
    sinks: Any = None,
    indices: Any = None,
    topk_lens: Any = None,
    max_seq_len: Optional[int] = None,
    pdl: bool = False,
    backend: str = "auto",
    lse_base2: bool = False,
) -> Tuple[Any, Any]:
    """One decode through mlakit.torch (torch tensors) or a cached Decoder; returns (out, lse)
    (lse in base 2 with ``lse_base2``, written so by the library)."""
    if _arrays.framework(q) == "torch":
        from . import torch as mlakit_torch

        result = mlakit_torch.decode(
            q, kv_cache, block_table, seq_lens, out=out, lse=lse, return_lse=return_lse,
            softmax_scale=softmax_scale, q_scale=q_scale, k_scale=k_scale, sinks=sinks,
            indices=indices, topk_lens=topk_lens, causal=causal, max_seq_len=max_seq_len,
            pdl=pdl, backend=backend, lse_base2=lse_base2,
        )  # fmt: skip
        return result if return_lse else (result, None)

    shape = q.shape
    kv_shape = kv_cache.shape
    blockwise = kv_shape[-1] == 656
    page_size = int(kv_shape[2] if len(kv_shape) == 4 and kv_shape[1] == 1 else kv_shape[1])
    topk = int(indices.shape[-1]) if indices is not None else 0
    if max_seq_len is None:
        max_seq_len = topk if topk > 0 else int(block_table.shape[-1]) * page_size
    q_dtype = _array_dtype("q", q)
    kv_dtype = "fp8_e4m3" if blockwise else _array_dtype("kv_cache", kv_cache)
    host = _arrays.dlpack_device(q)[0] in (1, 3)  # kDLCPU, kDLCUDAHost
    decoder = _cache.decoder_for(
        ("dlpack",) + _arrays.dlpack_device(q),
        int(shape[0]),
        int(max_seq_len),
        h_q=int(shape[2]),
        s_q=int(shape[1]),
        page_size=page_size,
        q_dtype=q_dtype,
        kv_dtype=kv_dtype,
        out_dtype=_array_dtype("out", out) if out is not None else None,
        kv_layout="fp8_blockwise" if blockwise else "dense",
        causal=causal,
        sinks=sinks is not None,
        topk=topk,
        lse=return_lse,
        lse_base2=bool(lse_base2) and bool(return_lse),
        pdl=pdl,
        backend="cpu" if host and backend == "auto" else backend,
    )
    result = decoder.run(
        q, kv_cache, block_table, seq_lens, out=out, lse=lse, softmax_scale=softmax_scale,
        q_scale=q_scale, k_scale=k_scale, sinks=sinks, indices=indices, topk_lens=topk_lens,
    )  # fmt: skip
    return result if return_lse else (result, None)


# ---------------------------------------------------------------------------------------------
# FlashMLA (deepseek-ai/FlashMLA, and the fp8 entry points of vLLM's fork)
# ---------------------------------------------------------------------------------------------


def _contiguous(x: Any) -> Any:
    """``x`` in row-major order: FlashMLA takes strided indices (its sparse test passes views
    with padded rows), mlakit's decode dense ones. A copy of a small array only where needed (a
    device copy on a GPU, captured with a graph)."""
    if x is None:
        return None
    kind = _arrays.framework(x)
    if kind == "torch":
        return x.contiguous()
    if kind == "numpy":
        return sys.modules["numpy"].ascontiguousarray(x)
    return x


def _placeholder_metadata(
    cache_seqlens: Any, num_q_tokens_per_head_k: int, num_heads_k: int
) -> Tuple[Any, Any]:
    """Zero-filled tile_scheduler_metadata [num_sm_parts, 8] and num_splits [b + 1] int32."""
    batch = int(cache_seqlens.shape[0])
    sm_count = 1
    kind = _arrays.framework(cache_seqlens)
    if kind == "torch" and cache_seqlens.is_cuda:
        torch = sys.modules["torch"]
        sm_count = torch.cuda.get_device_properties(cache_seqlens.device).multi_processor_count
    # FlashMLA's split: SMs per KV head and per 64-row block of query heads.
    blocks_m = max(1, -(-int(num_q_tokens_per_head_k) // 64))
    parts = max(1, sm_count // max(1, int(num_heads_k)) // blocks_m)
    if kind == "torch":
        torch = sys.modules["torch"]
        device = cache_seqlens.device
        return (
            torch.zeros((parts, 8), dtype=torch.int32, device=device),
            torch.zeros((batch + 1,), dtype=torch.int32, device=device),
        )
    import numpy

    return numpy.zeros((parts, 8), numpy.int32), numpy.zeros((batch + 1,), numpy.int32)


@dataclasses.dataclass
class FlashMLASchedMeta:
    """FlashMLA's scheduling handle (upstream main): what ``get_mla_metadata()`` returns and
    ``flash_mla_with_kvcache`` takes as ``tile_scheduler_metadata``.

    FlashMLA fills it on the first call and checks later calls against it. mlakit plans its split
    on the device inside each decode, so ``tile_scheduler_metadata`` and ``num_splits`` stay None;
    ``config`` records the first call's shapes and flags as FlashMLA's does, and a later call that
    disagrees raises ``ValueError`` naming the field (FlashMLA asserts), since a handle is valid
    only for one configuration.
    """

    @dataclasses.dataclass
    class Config:
        b: int
        s_q: int
        h_q: int
        page_block_size: int
        h_k: int
        causal: bool
        is_fp8_kvcache: bool
        topk: Optional[int]
        extra_page_block_size: Optional[int]
        extra_topk: Optional[int]

    have_initialized: bool = False
    config: Optional[Config] = None
    tile_scheduler_metadata: Any = None
    num_splits: Any = None


def get_mla_metadata(*args: Any, **kwargs: Any) -> Tuple[Any, Any]:
    """FlashMLA's ``get_mla_metadata``, in both of its forms.

    * No arguments (FlashMLA's main branch): returns ``(FlashMLASchedMeta(), None)``.
    * The older form ``get_mla_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k,
      num_heads_q=None, is_fp8_kvcache=False, topk=None)`` (also vLLM's fork; the older keyword
      ``num_heads_per_head_k`` is accepted for ``num_q_tokens_per_head_k``): returns zero-filled
      placeholders of its shapes, ``tile_scheduler_metadata`` [num_sm_parts, 8] int32 and
      ``num_splits`` [batch_size + 1] int32 on ``cache_seqlens``' device, so that code storing or
      copying them (into CUDA-graph buffers, say) keeps working.

    mlakit computes its split-KV partition on the device inside each decode: either result is
    only passed back to ``flash_mla_with_kvcache``, which accepts both.
    """
    if not args and "cache_seqlens" not in kwargs:
        if kwargs:
            raise TypeError(
                f"get_mla_metadata() got keyword arguments {sorted(kwargs)} without "
                "cache_seqlens (the no-argument form takes none)"
            )
        return FlashMLASchedMeta(), None
    return _old_metadata(*args, **kwargs)


def _old_metadata(
    cache_seqlens: Any,
    num_q_tokens_per_head_k: Optional[int] = None,
    num_heads_k: int = 1,
    num_heads_q: Optional[int] = None,
    is_fp8_kvcache: bool = False,
    topk: Optional[int] = None,
    **kwargs: Any,
) -> Tuple[Any, Any]:
    if num_q_tokens_per_head_k is None:
        num_q_tokens_per_head_k = kwargs.pop("num_heads_per_head_k", None)
    if kwargs:
        raise TypeError(f"get_mla_metadata() got unexpected keyword arguments {sorted(kwargs)}")
    if num_q_tokens_per_head_k is None:
        raise TypeError("get_mla_metadata() missing argument 'num_q_tokens_per_head_k'")
    return _placeholder_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k)


def _check_sched_meta(
    sched_meta: Any,
    num_splits: Any,
    q: Any,
    k_cache: Any,
    causal: bool,
    is_fp8_kvcache: bool,
    indices: Any,
    extra_k_cache: Any,
    extra_indices_in_kvcache: Any,
) -> None:
    """The checks FlashMLA makes of its scheduling handle and of the call's shape, by name:
    num_heads_k (one KV head), ``causal`` with sparse indices (FlashMLA's sparse decode has no
    causal mask), and, with a FlashMLASchedMeta, ``num_splits`` None and the configuration of its
    first call."""
    # ([num_pages, 1, page_size, 576], FlashInfer's form, is taken too.)
    if len(k_cache.shape) == 4 and int(k_cache.shape[2]) != 1 and int(k_cache.shape[1]) != 1:
        raise _not_supported(
            "k_cache", f"num_heads_k {int(k_cache.shape[2])} (shape {list(k_cache.shape)})",
            "MLA has one KV head: [num_blocks, page_block_size, 1, head_dim]",
        )  # fmt: skip
    if indices is not None and causal:
        raise ValueError(
            "causal: expected False with sparse indices (sparse decode attends to the listed "
            "tokens, there is no causal mask), given True"
        )
    if not isinstance(sched_meta, FlashMLASchedMeta):
        return
    if num_splits is not None:
        raise ValueError(
            "num_splits: expected None with a FlashMLASchedMeta (it stands in for both), given "
            f"{type(num_splits).__name__}"
        )
    config = FlashMLASchedMeta.Config(
        b=int(q.shape[0]),
        s_q=int(q.shape[1]),
        h_q=int(q.shape[2]),
        page_block_size=int(k_cache.shape[1]),
        h_k=int(k_cache.shape[2]) if len(k_cache.shape) == 4 else 1,
        causal=bool(causal),
        is_fp8_kvcache=bool(is_fp8_kvcache),
        topk=int(indices.shape[-1]) if indices is not None else None,
        extra_page_block_size=int(extra_k_cache.shape[1]) if extra_k_cache is not None else None,
        extra_topk=(
            int(extra_indices_in_kvcache.shape[-1])
            if extra_indices_in_kvcache is not None
            else None
        ),
    )
    if not sched_meta.have_initialized:
        sched_meta.have_initialized = True
        sched_meta.config = config
        return
    for field in dataclasses.fields(config):
        had, given = getattr(sched_meta.config, field.name), getattr(config, field.name)
        if had != given:
            raise ValueError(
                f"tile_scheduler_metadata: a FlashMLASchedMeta made by a call with {field.name} "
                f"{had}, given a call with {field.name} {given} (a handle serves one "
                "configuration: get a new one from get_mla_metadata())"
            )


def get_mla_metadata_dense_fp8(
    cache_seqlens: Any, num_q_tokens_per_head_k: int, num_heads_k: int
) -> Tuple[Any, Any]:
    """vLLM's ``get_mla_metadata_dense_fp8`` (the metadata of ``flash_mla_with_kvcache_fp8``):
    placeholders of its shapes, as ``get_mla_metadata`` returns; mlakit plans on the device.

    Returns:
        (tile_scheduler_metadata [num_sm_parts, 8] int32, num_splits [batch_size + 1] int32)
    """
    return _placeholder_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k)


def _scale_array(name: str, x: Any, like: Any, like_name: str) -> None:
    """A scale given as an array: one float32 element in the memory of ``like`` (no host read)."""
    dtype = str(getattr(x, "dtype", type(x).__name__))
    if dtype not in ("float32", "torch.float32"):
        raise TypeError(f"{name}: expected dtype float32, given {dtype.replace('torch.', '')}")
    if _numel(x) != 1:
        raise ValueError(
            f"{name}: expected a one-element float32 array, given shape {list(x.shape)}"
        )
    where, like_where = _arrays.dlpack_device(x), _arrays.dlpack_device(like)
    if where != like_where:
        raise ValueError(
            f"{name}: expected an array where {like_name} is (DLPack device {like_where}), "
            f"given one on DLPack device {where}"
        )


def _flashmla_lse(lse: Any) -> Any:
    """mlakit's lse [b, s_q, h_q] as FlashMLA returns it: [b, h_q, s_q], +inf for a row without
    tokens (mlakit writes -inf there, the neutral value of a merge)."""
    if _arrays.framework(lse) == "torch":
        torch = sys.modules["torch"]
        # One kernel, also under torch.compile and CUDA graph capture; no host read.
        return torch.nan_to_num(lse.transpose(1, 2).contiguous(), nan=math.nan, neginf=math.inf)
    np = sys.modules["numpy"]
    flipped = np.ascontiguousarray(lse.transpose(0, 2, 1))
    flipped[np.isneginf(flipped)] = np.inf
    return flipped


def _flash_mla(
    q: Any,
    k_cache: Any,
    block_table: Any,
    cache_seqlens: Any,
    head_dim_v: int,
    softmax_scale: Optional[float],
    causal: bool,
    is_fp8_kvcache: Optional[bool],
    descale_q: Any,
    descale_k: Any,
    indices: Any = None,
    attn_sink: Any = None,
    topk_length: Any = None,
) -> Tuple[Any, Any]:
    """The FlashMLA calls' common body. ``is_fp8_kvcache`` None: the fp8 entry point (an e4m3
    cache with one scale is required)."""
    if head_dim_v != 512:
        raise ValueError(f"head_dim_v: expected 512, given {head_dim_v}")
    blockwise = int(k_cache.shape[-1]) == 656
    q_kind = _array_dtype("q", q)
    kv_kind = "fp8_blockwise" if blockwise else _array_dtype("k_cache", k_cache)
    if is_fp8_kvcache is None:
        if kv_kind != "fp8_e4m3":
            raise TypeError(
                "k_cache: expected [num_blocks, page_block_size, 1, 576] float8_e4m3fn (or its "
                f"bits as uint8), given {'the 656-byte fp8 layout' if blockwise else kv_kind} "
                "(flash_mla_with_kvcache takes the other caches)"
            )
    elif is_fp8_kvcache and kv_kind not in ("fp8_e4m3", "fp8_blockwise"):
        raise ValueError(f"is_fp8_kvcache: expected False for a {kv_kind} k_cache, given True")
    elif not is_fp8_kvcache and blockwise:
        raise ValueError(
            "is_fp8_kvcache: expected True for the 656-byte fp8 k_cache layout, given False"
        )

    # A descale is the dequantization scale of an fp8 input, so it is required with an fp8 q or
    # a per-tensor fp8 cache, optional with the blockwise cache (a factor on its 512 values) and
    # refused with a 16-bit input (mlakit could not apply it).
    for name, value, kind, input_name in (
        ("descale_q", descale_q, q_kind, "q"),
        ("descale_k", descale_k, kv_kind, "k_cache"),
    ):
        if value is None:
            if kind == "fp8_e4m3":
                raise ValueError(
                    f"{name}: expected a one-element float32 tensor (the dequantization scale "
                    f"of an fp8 {input_name}), given None"
                )
            continue
        if kind in ("bf16", "fp16"):
            raise ValueError(
                f"{name}: expected None for a {kind} {input_name} (a descale applies to fp8 "
                f"e4m3 inputs), given {type(value).__name__}"
            )
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            host_scale(name, value)
            continue
        if _numel(value) != 1:
            raise _not_supported(name, "a per-request dequantization scale (one scale per tensor)")
        _scale_array(name, value, q, "q")

    sparse = indices is not None
    out, lse = _decode(
        q,
        k_cache,
        None if sparse else block_table,
        None if sparse else cache_seqlens,
        return_lse=True,
        softmax_scale=q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale,
        causal=bool(causal) and not sparse,
        q_scale=descale_q,
        k_scale=descale_k,
        sinks=attn_sink,
        indices=indices,
        topk_lens=topk_length,
    )
    return out, _flashmla_lse(lse)


# The byte layouts of FlashMLA's fp8 sparse caches, by the last dimension of k_cache: DeepSeek
# V3.2 (656 bytes a token, q of 576) and DeepSeek V4 "model1" (584 bytes a token before the page's
# padding, q of 512).
_SPARSE_FP8_LAYOUTS = {656: ("fp8_blockwise", 576), 584: ("fp8_v4", 512)}


def _sparse_cache_kind(name: str, cache: Any, is_fp8_kvcache: bool, d_qk: int) -> str:
    """The mlakit layout ("fp8_blockwise", "fp8_v4") or dtype of a sparse call's cache, checked
    against ``is_fp8_kvcache`` and q's head dimension ``d_qk``."""
    last = int(cache.shape[-1])
    layout = _SPARSE_FP8_LAYOUTS.get(last)
    if layout is not None:
        if not is_fp8_kvcache:
            raise ValueError(
                f"is_fp8_kvcache: expected True for the {last}-byte fp8 {name} layout, given False"
            )
        if d_qk != layout[1]:
            raise ValueError(
                f"q: expected head dimension {layout[1]} for the {last}-byte {name} layout, "
                f"given {d_qk}"
            )
        return layout[0]
    kind = _array_dtype(name, cache)
    if is_fp8_kvcache and kind != "fp8_e4m3":
        raise ValueError(f"is_fp8_kvcache: expected False for a {kind} {name}, given True")
    if d_qk != 576 or last != 576:
        raise ValueError(
            f"{name}: expected [num_blocks, page_block_size, 1, 576] (or the 656- or 584-byte fp8 "
            f"layouts) for a q of head dimension {d_qk}, given shape {list(cache.shape)}"
        )
    return kind


def _flash_mla_sparse(
    q: Any,
    k_cache: Any,
    head_dim_v: int,
    softmax_scale: Optional[float],
    is_fp8_kvcache: bool,
    indices: Any,
    attn_sink: Any,
    topk_length: Any,
    extra_k_cache: Any,
    extra_indices: Any,
    extra_topk_length: Any,
    descale_q: Any,
    descale_k: Any,
) -> Tuple[Any, Any]:
    """FlashMLA's sparse decode (``indices`` given): the V3.2 and V4 fp8 layouts, and mlakit's
    dense caches with indices, with the optional extra cache attended in the same softmax.
    ``causal`` was refused by _check_sched_meta (the indices say what each query token sees)."""
    if head_dim_v != 512:
        raise ValueError(f"head_dim_v: expected 512, given {head_dim_v}")
    if extra_k_cache is None:
        for name, value in (
            ("extra_indices_in_kvcache", extra_indices),
            ("extra_topk_length", extra_topk_length),
        ):
            if value is not None:
                raise ValueError(
                    f"{name}: expected None without extra_k_cache, given {type(value).__name__}"
                )
    elif extra_indices is None:
        raise ValueError(
            "extra_indices_in_kvcache: expected [batch_size, seq_len_q, extra_topk] int32 with "
            "extra_k_cache, given None"
        )
    d_qk = int(q.shape[-1])
    kind = _sparse_cache_kind("k_cache", k_cache, bool(is_fp8_kvcache), d_qk)
    if extra_k_cache is not None:
        extra_kind = _sparse_cache_kind("extra_k_cache", extra_k_cache, bool(is_fp8_kvcache), d_qk)
        if extra_kind != kind:
            raise ValueError(
                f"extra_k_cache: expected the layout of k_cache ({kind}), given {extra_kind}"
            )
    q_kind = _array_dtype("q", q)
    for name, value, wanted in (
        ("descale_q", descale_q, q_kind == "fp8_e4m3"),
        ("descale_k", descale_k, kind == "fp8_e4m3"),
    ):
        if value is None and wanted:
            raise ValueError(
                f"{name}: expected the dequantization scale of an fp8 input, given None"
            )
        if value is not None and not isinstance(value, (int, float)):
            _scale_array(name, value, q, "q")
    out, lse = _sparse_decode(
        q,
        k_cache,
        softmax_scale=d_qk**-0.5 if softmax_scale is None else softmax_scale,
        q_scale=descale_q,
        k_scale=descale_k,
        sinks=_contiguous(attn_sink),
        indices=_contiguous(indices),
        topk_lens=_contiguous(topk_length),
        extra_kv_cache=extra_k_cache,
        extra_indices=_contiguous(extra_indices),
        extra_topk_lens=_contiguous(extra_topk_length),
        layout="dense" if kind in ("bf16", "fp16", "fp8_e4m3") else kind,
        kv_dtype="fp8_e4m3" if kind.startswith("fp8") else kind,
    )
    return out, _flashmla_lse(lse)


def _sparse_page_size(cache: Any) -> int:
    shape = cache.shape
    return int(shape[2] if len(shape) == 4 and shape[1] == 1 else shape[1])


def _sparse_decode(
    q: Any,
    kv_cache: Any,
    *,
    softmax_scale: float,
    q_scale: Any,
    k_scale: Any,
    sinks: Any,
    indices: Any,
    topk_lens: Any,
    extra_kv_cache: Any,
    extra_indices: Any,
    extra_topk_lens: Any,
    layout: str,
    kv_dtype: str,
) -> Tuple[Any, Any]:
    """One sparse decode through mlakit.torch (torch tensors) or a cached Decoder; (out, lse)."""
    if _arrays.framework(q) == "torch":
        from . import torch as mlakit_torch

        return mlakit_torch.decode(
            q, kv_cache, None, None, return_lse=True, softmax_scale=softmax_scale,
            q_scale=q_scale, k_scale=k_scale, sinks=sinks, indices=indices, topk_lens=topk_lens,
            extra_kv_cache=extra_kv_cache, extra_indices=extra_indices,
            extra_topk_lens=extra_topk_lens, causal=False,
        )  # fmt: skip
    topk = int(indices.shape[-1])
    host = _arrays.dlpack_device(q)[0] in (1, 3)  # kDLCPU, kDLCUDAHost
    decoder = _cache.decoder_for(
        ("dlpack",) + _arrays.dlpack_device(q),
        int(q.shape[0]),
        topk,
        h_q=int(q.shape[2]),
        s_q=int(q.shape[1]),
        page_size=_sparse_page_size(kv_cache),
        q_dtype=_array_dtype("q", q),
        kv_dtype=kv_dtype,
        out_dtype=None,
        kv_layout=layout,
        causal=False,
        sinks=sinks is not None,
        topk=topk,
        lse=True,
        pdl=False,
        backend="cpu" if host else "auto",
        extra_topk=int(extra_indices.shape[-1]) if extra_kv_cache is not None else 0,
        extra_page_size=_sparse_page_size(extra_kv_cache) if extra_kv_cache is not None else 0,
    )
    return decoder.run(
        q, kv_cache, softmax_scale=softmax_scale, q_scale=q_scale, k_scale=k_scale, sinks=sinks,
        indices=indices, topk_lens=topk_lens, extra_kv_cache=extra_kv_cache,
        extra_indices=extra_indices, extra_topk_lens=extra_topk_lens,
    )  # fmt: skip


def flash_mla_with_kvcache(
    q: Any,
    k_cache: Any,
    block_table: Any,
    cache_seqlens: Any,
    head_dim_v: int,
    tile_scheduler_metadata: Any = None,
    num_splits: Any = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    is_fp8_kvcache: bool = False,
    indices: Any = None,
    attn_sink: Any = None,
    extra_k_cache: Any = None,
    extra_indices_in_kvcache: Any = None,
    topk_length: Any = None,
    extra_topk_length: Any = None,
    *,
    descale_q: Any = None,
    descale_k: Any = None,
) -> Tuple[Any, Any]:
    """FlashMLA's ``flash_mla_with_kvcache`` (dense and sparse decode), computed by mlakit.

    Arguments:
        q: [batch_size, seq_len_q, num_heads_q, 576] bf16 / fp16, or fp8 e4m3 with
            ``descale_q`` (the fp8 cache's bf16-q or fp8-q mode); head dimension 512 with the V4
            cache.
        k_cache: [num_blocks, page_block_size, 1, 576] (bf16 / fp16 as q; fp8 e4m3 with
            ``descale_k``), or 656 bytes per token with ``is_fp8_kvcache`` (the V3.2 layout), or
            with ``is_fp8_kvcache`` and indices the DeepSeek V4 ("model1") layout: FlashMLA's view
            [num_blocks, page_block_size, 1, 584] of pages of page_block_size * 584 bytes padded
            to a multiple of 576 (each page: the tokens' 448 e4m3 + 64 bf16 values, then their
            rows of 7 UE8M0 scales and a pad byte).
        block_table: [batch_size, max_num_blocks_per_seq] int32 (unused when sparse).
        cache_seqlens: [batch_size] int32 (unused when sparse).
        head_dim_v: must be 512.
        tile_scheduler_metadata, num_splits: from ``get_mla_metadata``: a FlashMLASchedMeta
            and None (FlashMLA's main branch; the handle records the first call's configuration
            and later calls must agree with it), or the older placeholder tensors. mlakit plans
            its split on the device inside each decode, so neither carries a plan.
        softmax_scale: None: 1/sqrt(head dimension of q).
        causal: with seq_len_q > 1, token t sees positions < L - seq_len_q + 1 + t; must be
            False with sparse ``indices`` (as FlashMLA asserts).
        is_fp8_kvcache: True for an fp8 cache: the 656- and 584-byte layouts (required there) or
            e4m3 with ``descale_k`` (where vLLM's older form leaves it False); False for bf16 /
            fp16.
        indices: [batch_size, seq_len_q, topk] int32 cache slots, -1 = empty (sparse).
        attn_sink: [num_heads_q] float32 sink logits.
        topk_length: [batch_size] int32: only the first topk_length[i] indices count (sparse).
        extra_k_cache: sparse only: a second cache in k_cache's layout (its own page size and
            block count) whose ``extra_indices_in_kvcache`` [batch_size, seq_len_q, extra_topk]
            slots are attended in the same softmax; ``extra_topk_length`` [batch_size] int32
            bounds them as topk_length does.
        descale_q, descale_k: the dequantization scales of an fp8 q / cache (vLLM's keywords):
            one-element float32 tensors where q is, read at run time (a captured CUDA graph
            follows them), or floats. Required with fp8 e4m3 inputs (descale_k is optional with
            the 656-byte layout, where it multiplies the 512 fp8 values, not the bf16 RoPE part),
            refused with 16-bit ones; per-request scales are not supported.

    Returns:
        (out [batch_size, seq_len_q, num_heads_q, 512], softmax_lse [batch_size, num_heads_q,
        seq_len_q] float32, natural log, +inf for a query without visible tokens).
    """
    _check_sched_meta(tile_scheduler_metadata, num_splits, q, k_cache, causal, is_fp8_kvcache,
                      indices, extra_k_cache, extra_indices_in_kvcache)  # fmt: skip
    if indices is not None:
        return _flash_mla_sparse(q, k_cache, head_dim_v, softmax_scale, is_fp8_kvcache, indices,
                                 attn_sink, topk_length, extra_k_cache, extra_indices_in_kvcache,
                                 extra_topk_length, descale_q, descale_k)  # fmt: skip
    for name, value in (
        ("topk_length", topk_length),
        ("extra_k_cache", extra_k_cache),
        ("extra_indices_in_kvcache", extra_indices_in_kvcache),
        ("extra_topk_length", extra_topk_length),
    ):
        if value is not None:  # FlashMLA's dense decode asserts the same
            raise ValueError(
                f"{name}: expected None without indices (dense attention), given "
                f"{type(value).__name__}"
            )
    return _flash_mla(q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale, causal,
                      bool(is_fp8_kvcache), descale_q, descale_k, indices, attn_sink,
                      topk_length)  # fmt: skip


def flash_mla_with_kvcache_fp8(
    q: Any,
    k_cache: Any,
    block_table: Any,
    cache_seqlens: Any,
    head_dim_v: int,
    tile_scheduler_metadata: Any = None,
    num_splits: Any = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    descale_q: Any = None,
    descale_k: Any = None,
) -> Tuple[Any, Any]:
    """The dense fp8 decode of vLLM's FlashMLA fork (``vllm.attention.ops.flashmla``), computed
    by mlakit: a per-tensor-scaled fp8 e4m3 cache.

    Arguments:
        q: [batch_size, seq_len_q, num_heads_q, 576] fp8 e4m3 with ``descale_q`` (mlakit's fp8-q
            mode); also bf16 / fp16 without it (the bf16-q mode, which the fork lacks).
        k_cache: [num_blocks, page_block_size, 1, 576] (or 3-D) fp8 e4m3, or its bits as uint8.
        block_table: [batch_size, max_num_blocks_per_seq] int32.
        cache_seqlens: [batch_size] int32.
        head_dim_v: must be 512.
        tile_scheduler_metadata, num_splits: from ``get_mla_metadata_dense_fp8``; unused.
        softmax_scale: None: 1/sqrt(576).
        causal: with seq_len_q > 1, token t sees positions < L - seq_len_q + 1 + t.
        descale_q, descale_k: one-element float32 tensors where q is (read at run time, so a
            captured CUDA graph follows them; vLLM passes ``layer._q_scale.reshape(1)``), or
            floats. value = e4m3 * descale; descale_k scales K and V.

    Returns:
        (out [batch_size, seq_len_q, num_heads_q, 512] bf16 (q's dtype for a 16-bit q),
        softmax_lse [batch_size, num_heads_q, seq_len_q] float32, natural log, +inf for a query
        without visible tokens).
    """
    return _flash_mla(q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale, causal,
                      None, descale_q, descale_k)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# FlashInfer: in _flashinfer.py, which uses the helpers above.
# ---------------------------------------------------------------------------------------------

from ._flashinfer import (  # noqa: E402
    BatchMLAPagedAttentionWrapper,
    trtllm_batch_decode_with_kv_cache_mla,
)
