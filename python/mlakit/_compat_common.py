"""What the compat shims (FlashMLA's and FlashInfer's, re-exported by ``mlakit.compat``) share:
refusals by name, dtype and scale checks, and one decode, dense or sparse, through mlakit.torch
(torch tensors) or a cached ``mlakit.Decoder`` (other arrays).
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Tuple

from . import _arrays, _cache
from ._decoder import dtype_name


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
    cu_seqlens_q: Any = None,
    max_q_len: Optional[int] = None,
) -> Tuple[Any, Any]:
    """One decode through mlakit.torch (torch tensors) or a cached Decoder; returns (out, lse)
    (lse in base 2 with ``lse_base2``, written so by the library). With ``cu_seqlens_q`` (torch
    tensors; the shims' ragged queries) q, out and lse are packed by query token (the library's
    var_q), ``max_q_len`` the decoder's s_q."""
    lse_base2 = bool(lse_base2) and bool(return_lse)  # the library refuses base 2 without an lse
    if _arrays.framework(q) == "torch":
        from . import torch as mlakit_torch

        result = mlakit_torch.decode(
            q, kv_cache, block_table, seq_lens, out=out, lse=lse, return_lse=return_lse,
            softmax_scale=softmax_scale, q_scale=q_scale, k_scale=k_scale, sinks=sinks,
            indices=indices, topk_lens=topk_lens, causal=causal, max_seq_len=max_seq_len,
            pdl=pdl, backend=backend, lse_base2=lse_base2, cu_seqlens_q=cu_seqlens_q,
            max_q_len=max_q_len,
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
        lse_base2=lse_base2,
        pdl=pdl,
        backend="cpu" if host and backend == "auto" else backend,
    )
    result = decoder.run(
        q, kv_cache, block_table, seq_lens, out=out, lse=lse, softmax_scale=softmax_scale,
        q_scale=q_scale, k_scale=k_scale, sinks=sinks, indices=indices, topk_lens=topk_lens,
    )  # fmt: skip
    return result if return_lse else (result, None)


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
