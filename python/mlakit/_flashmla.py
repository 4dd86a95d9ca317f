"""FlashMLA's decode calls (deepseek-ai/FlashMLA, and the fp8 entry points of vLLM's fork),
computed by mlakit and re-exported by ``mlakit.compat``: ``flash_mla_with_kvcache`` (dense and
sparse decode) and ``flash_mla_with_kvcache_fp8``. The metadata they take is in
_flashmla_metadata.py.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Optional, Tuple

from . import _arrays
from ._compat_common import (
    _array_dtype,
    _contiguous,
    _decode,
    _not_supported,
    _numel,
    _scale_array,
    _sparse_decode,
)
from ._decoder import host_scale
from ._flashmla_metadata import _check_sched_meta


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
