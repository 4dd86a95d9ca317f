"""Drop-in replacements for the MLA decode calls of FlashMLA and FlashInfer.

Switching is a change of import::

    from mlakit.compat import flash_mla_with_kvcache, get_mla_metadata
    from mlakit.compat import flash_mla_with_kvcache_fp8, get_mla_metadata_dense_fp8
    from mlakit.compat import trtllm_batch_decode_with_kv_cache_mla

The signatures and return values follow the originals (FlashMLA's ``flash_mla_interface.py``, the
fp8 entry points of vLLM's FlashMLA fork in ``vllm.attention.ops.flashmla``, and FlashInfer's
``flashinfer.mla``); every argument is implemented, or raises (NotImplementedError where mlakit
lacks the feature) with a message naming it. PyTorch tensors go through the ``mlakit::decode``
custom op (torch.compile and CUDA graphs work); other arrays through a cached ``mlakit.Decoder``.
"""

from __future__ import annotations

import math
import sys
from typing import Any, List, Optional, Tuple, Union

from . import _arrays, _cache
from ._decoder import dtype_name, host_scale

__all__ = [
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
) -> Tuple[Any, Any]:
    """One decode through mlakit.torch (torch tensors) or a cached Decoder; returns (out, lse)."""
    if _arrays.framework(q) == "torch":
        from . import torch as mlakit_torch

        result = mlakit_torch.decode(
            q, kv_cache, block_table, seq_lens, out=out, return_lse=return_lse,
            softmax_scale=softmax_scale, q_scale=q_scale, k_scale=k_scale, sinks=sinks,
            indices=indices, topk_lens=topk_lens, causal=causal, max_seq_len=max_seq_len,
            pdl=pdl, backend=backend,
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
        pdl=pdl,
        backend="cpu" if host and backend == "auto" else backend,
    )
    result = decoder.run(
        q, kv_cache, block_table, seq_lens, out=out, softmax_scale=softmax_scale,
        q_scale=q_scale, k_scale=k_scale, sinks=sinks, indices=indices, topk_lens=topk_lens,
    )  # fmt: skip
    return result if return_lse else (result, None)


# ---------------------------------------------------------------------------------------------
# FlashMLA (deepseek-ai/FlashMLA, and the fp8 entry points of vLLM's fork)
# ---------------------------------------------------------------------------------------------


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


def get_mla_metadata(
    cache_seqlens: Any,
    num_q_tokens_per_head_k: Optional[int] = None,
    num_heads_k: int = 1,
    num_heads_q: Optional[int] = None,
    is_fp8_kvcache: bool = False,
    topk: Optional[int] = None,
    **kwargs: Any,
) -> Tuple[Any, Any]:
    """FlashMLA's ``get_mla_metadata``: placeholders of FlashMLA's shapes, ignored by mlakit.

    mlakit computes its split-KV partition on the device inside each decode, so there is nothing
    to prepare; this returns zero-filled ``tile_scheduler_metadata`` [num_sm_parts, 8] int32 and
    ``num_splits`` [batch_size + 1] int32 on ``cache_seqlens``' device, so that code storing or
    copying them (e.g. into CUDA-graph buffers) keeps working. The older keyword
    ``num_heads_per_head_k`` is accepted for ``num_q_tokens_per_head_k``.

    Returns:
        (tile_scheduler_metadata, num_splits)
    """
    if num_q_tokens_per_head_k is None:
        num_q_tokens_per_head_k = kwargs.pop("num_heads_per_head_k", None)
    if kwargs:
        raise TypeError(f"get_mla_metadata() got unexpected keyword arguments {sorted(kwargs)}")
    if num_q_tokens_per_head_k is None:
        raise TypeError("get_mla_metadata() missing argument 'num_q_tokens_per_head_k'")
    return _placeholder_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k)


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
    causal: bool,
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
    dense caches with indices, with the optional extra cache attended in the same softmax."""
    if head_dim_v != 512:
        raise ValueError(f"head_dim_v: expected 512, given {head_dim_v}")
    if causal:
        # FlashMLA asserts this: the indices already say what each query token sees.
        raise ValueError("causal: expected False with indices (sparse attention), given True")
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
        sinks=attn_sink,
        indices=indices,
        topk_lens=topk_length,
        extra_kv_cache=extra_k_cache,
        extra_indices=extra_indices,
        extra_topk_lens=extra_topk_length,
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
        tile_scheduler_metadata, num_splits: from ``get_mla_metadata``; unused (mlakit plans
            its split on the device inside each decode).
        softmax_scale: None: 1/sqrt(head dimension of q).
        causal: with seq_len_q > 1, token t sees positions < L - seq_len_q + 1 + t; must be False
            with indices (as FlashMLA asserts).
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
    if indices is not None:
        return _flash_mla_sparse(q, k_cache, head_dim_v, softmax_scale, causal, is_fp8_kvcache,
                                 indices, attn_sink, topk_length, extra_k_cache,
                                 extra_indices_in_kvcache, extra_topk_length, descale_q,
                                 descale_k)  # fmt: skip
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
# FlashInfer (TensorRT-LLM kernels)
# ---------------------------------------------------------------------------------------------


def _trtllm_scales(
    query: Any, kv_cache: Any, bmm1_scale: Any, bmm2_scale: Any
) -> Tuple[Any, Any, Any]:
    """FlashInfer's fused scales as mlakit's (softmax_scale, q_scale, k_scale).

    FlashInfer computes softmax(bmm1_scale * q.k) . v * bmm2_scale on the stored values; mlakit
    computes softmax(softmax_scale * (q_scale q).(k_scale k)) . (k_scale v), with q_scale only for
    an fp8 query and k_scale (which scales K and V alike) only for an fp8 cache. So k_scale =
    bmm2_scale, and softmax_scale * q_scale * bmm2_scale = bmm1_scale. A tensor scale stays on the
    device (a pointer read at run time): bmm1_scale alone becomes q_scale with softmax_scale =
    1 / bmm2_scale; a tensor bmm2_scale makes q_scale = bmm1_scale / bmm2_scale, one element-wise
    division on the device (FlashInfer itself multiplies a tensor bmm1_scale by log2(e)). A case
    that would need a tensor's value on the host (a softmax scale from a tensor with a 16-bit
    query, whose scale mlakit takes as a host float only) is refused, never synchronized.
    """
    # The 656-byte blockwise cache's k_scale multiplies its 512 fp8 values but not its bf16 RoPE
    # part, so it cannot carry an output scale: bmm2_scale is 1.0 there, as with a 16-bit cache.
    blockwise = int(kv_cache.shape[-1]) == 656
    fp8_cache = not blockwise and _array_dtype("kv_cache", kv_cache) == "fp8_e4m3"
    cache_kind = "the 656-byte fp8 cache" if blockwise else "a 16-bit cache"
    q_kind = _array_dtype("query", query)
    fp8_query = q_kind == "fp8_e4m3"
    tensors = {}
    for name, value in (("bmm1_scale", bmm1_scale), ("bmm2_scale", bmm2_scale)):
        if isinstance(value, bool):
            raise TypeError(f"{name}: expected a float or a one-element float32 tensor, given bool")
        if isinstance(value, (int, float)):
            host_scale(name, value)
        else:
            _scale_array(name, value, query, "query")
            tensors[name] = value
    bmm1_tensor = "bmm1_scale" in tensors
    bmm2_tensor = "bmm2_scale" in tensors

    if not fp8_cache:
        if bmm2_tensor:
            raise _not_supported(
                "bmm2_scale",
                f"a tensor with {cache_kind}",
                "mlakit scales the output only through a per-tensor fp8 cache's dequantization "
                "scale: pass 1.0",
            )
        if float(bmm2_scale) != 1.0:
            raise _not_supported("bmm2_scale", f"an output scale other than 1.0 with {cache_kind}")
    if bmm1_tensor and not fp8_query:
        raise _not_supported(
            "bmm1_scale",
            f"a tensor with a {q_kind} query",
            "the softmax scale of a 16-bit query is a host float in mlakit, and reading the "
            "tensor would synchronize; FlashInfer takes tensor scales for fp8 inputs only: pass "
            "a float",
        )
    if bmm2_tensor and not fp8_query:
        raise _not_supported(
            "bmm2_scale",
            f"a tensor with a {q_kind} query",
            "the softmax scale would be bmm1_scale / bmm2_scale, a device value, and the scale of "
            "a 16-bit query is a host float in mlakit; FlashInfer takes tensor scales for fp8 "
            "inputs only: pass a float, or an fp8 query",
        )

    if not fp8_cache:
        return float(bmm1_scale), (1.0 if fp8_query else None), None
    if not fp8_query:
        return float(bmm1_scale) / float(bmm2_scale), None, float(bmm2_scale)
    if bmm2_tensor:
        return 1.0, _divide(bmm1_scale, bmm2_scale), bmm2_scale
    if bmm1_tensor:
        return 1.0 / float(bmm2_scale), bmm1_scale, float(bmm2_scale)
    return float(bmm1_scale) / float(bmm2_scale), 1.0, float(bmm2_scale)


def _divide(numerator: Any, denominator: Any) -> Any:
    """numerator / denominator as a one-element float32 array of the denominator's framework and
    device, computed there (on a GPU: one kernel on the current stream, captured with a graph)."""
    kind = _arrays.framework(denominator)
    if kind == "torch":
        return sys.modules["torch"].div(numerator, denominator)
    if kind == "numpy":
        np = sys.modules["numpy"]
        return np.divide(numerator, denominator, dtype=np.float32)
    return numerator / denominator


def trtllm_batch_decode_with_kv_cache_mla(
    query: Any,
    kv_cache: Any,
    workspace_buffer: Any,
    qk_nope_head_dim: int,
    kv_lora_rank: int,
    qk_rope_head_dim: int,
    block_tables: Any,
    seq_lens: Any,
    max_seq_len: int,
    sparse_mla_top_k: int = 0,
    out: Any = None,
    bmm1_scale: Union[float, Any] = 1.0,
    bmm2_scale: Union[float, Any] = 1.0,
    sinks: Optional[List[Any]] = None,
    skip_softmax_threshold_scale_factor: Optional[float] = None,
    enable_pdl: Optional[bool] = None,
    backend: str = "auto",
) -> Any:
    """FlashInfer's ``flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla``, computed by mlakit.

    Arguments:
        query: [batch_size, q_len_per_request, num_heads, 576] (q_nope absorbed, then q_rope).
        kv_cache: [num_pages, page_size, 576] or [num_pages, 1, page_size, 576] (ckv, then kpe).
        workspace_buffer: FlashInfer's semaphores; unused (mlakit keeps its own workspace).
        qk_nope_head_dim: unused (it only enters the caller's bmm1_scale).
        kv_lora_rank: must be 512. qk_rope_head_dim: must be 64.
        block_tables: [batch_size, max_num_pages] int32; with sparse_mla_top_k > 0, the sparse
            indices [batch_size, q_len_per_request, sparse_mla_top_k] (page * page_size +
            offset, -1 = empty).
        seq_lens: [batch_size] int32 cached lengths.
        max_seq_len: the longest cached length (sizes mlakit's workspace).
        out: [batch_size, q_len_per_request, num_heads, 512] (or [batch_size, num_heads, 512]
            when q_len_per_request is 1), written in place and returned.
        bmm1_scale: q_scale * k_scale * softmax scale: a float, or a one-element float32
            tensor where the query is, read at run time (with an fp8 query and cache only, as in
            FlashInfer).
        bmm2_scale: v_scale * o_scale: a float, or such a tensor (with an fp8 query and cache
            only); it must be 1.0 with a 16-bit or 656-byte blockwise cache (mlakit has no
            output scale).
        sinks: [num_heads] float32 sink logits (a tensor, or a list holding one).
        skip_softmax_threshold_scale_factor: not supported.
        enable_pdl: programmatic dependent launch (None: off).
        backend: "auto", FlashInfer's "trtllm-gen" / "xqa" (both mean mlakit's "auto"), or an
            mlakit backend name.

    Returns:
        out [batch_size, q_len_per_request, num_heads, 512] (the given ``out`` when one was).
    """
    if kv_lora_rank != 512:
        raise ValueError(f"kv_lora_rank: expected 512, given {kv_lora_rank}")
    if qk_rope_head_dim != 64:
        raise ValueError(f"qk_rope_head_dim: expected 64, given {qk_rope_head_dim}")
    if skip_softmax_threshold_scale_factor is not None:
        raise _not_supported("skip_softmax_threshold_scale_factor", "skip-softmax sparsity")
    if isinstance(sinks, (list, tuple)):
        if len(sinks) != 1:
            raise ValueError(
                f"sinks: expected one [num_heads] tensor, given a list of {len(sinks)}"
            )
        sinks = sinks[0]

    softmax_scale, q_scale, k_scale = _trtllm_scales(query, kv_cache, bmm1_scale, bmm2_scale)

    out4 = out
    if out is not None and len(out.shape) == 3:
        out4 = out.reshape(out.shape[0], 1, out.shape[1], out.shape[2])
    sparse = sparse_mla_top_k > 0
    result, _ = _decode(
        query,
        kv_cache,
        None if sparse else block_tables,
        None if sparse else seq_lens,
        out=out4,
        return_lse=False,
        softmax_scale=softmax_scale,
        causal=True,
        q_scale=q_scale,
        k_scale=k_scale,
        sinks=sinks,
        indices=block_tables if sparse else None,
        max_seq_len=int(max_seq_len),
        pdl=bool(enable_pdl),
        backend="auto" if backend in ("trtllm-gen", "xqa") else backend,
    )
    return out if out is not None else result
