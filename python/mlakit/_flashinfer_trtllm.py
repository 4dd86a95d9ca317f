"""FlashInfer's ``trtllm_batch_decode_with_kv_cache_mla`` (0.6), computed by mlakit
(re-exported by ``mlakit.compat``): every parameter implemented or refused by name; its fused
scales, counter buffer and sparse index slots as mlakit takes them. What it shares with the
wrapper is in _flashinfer.py.
"""

from __future__ import annotations

import sys
from typing import Any, List, Optional, Tuple, Union

from . import _arrays
from ._compat_common import _array_dtype, _contiguous, _decode, _not_supported, _scale_array
from ._decoder import host_scale
from ._flashinfer import (
    _backend,
    _check_heads,
    _check_query_offsets,
    _check_query_tokens,
    _view,
    multi_ctas_kv_counter_bytes,
)


def _auto_pdl(query: Any) -> bool:
    """FlashInfer's ``enable_pdl=None``: on where the device supports it (sm_90 and newer). Read
    from the device's properties (cached by PyTorch), never from device memory."""
    if _arrays.framework(query) != "torch" or not query.is_cuda:
        return False
    torch = sys.modules["torch"]
    return torch.cuda.get_device_capability(query.device)[0] >= 9


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


def _check_counter_buffer(buffer: Any, query: Any, batch: int, heads: int) -> None:
    """FlashInfer's checks of ``multi_ctas_kv_counter_buffer`` (mlakit does not use the buffer:
    it keeps its own workspace; code that passes one that FlashInfer refuses is refused here
    too). Its size is checked for CUDA tensors, whose SM count is known."""
    if _arrays.framework(buffer) != "torch":
        raise TypeError(
            "multi_ctas_kv_counter_buffer: expected a torch.Tensor, given "
            f"{type(buffer).__name__}"
        )
    if buffer.device != query.device:
        raise ValueError(
            f"multi_ctas_kv_counter_buffer must be on the same device as query: expected "
            f"{query.device}, given {buffer.device}"
        )
    if not buffer.is_contiguous():
        raise ValueError(
            "multi_ctas_kv_counter_buffer must be contiguous: given strides "
            f"{list(buffer.stride())}"
        )
    if buffer.numel() > 0 and buffer.data_ptr() % 16 != 0:
        raise ValueError(
            "multi_ctas_kv_counter_buffer must be 16-byte aligned: given an address "
            f"{buffer.data_ptr() % 16} bytes past a multiple of 16"
        )
    if buffer.is_cuda:
        torch = sys.modules["torch"]
        sm_count = torch.cuda.get_device_properties(buffer.device).multi_processor_count
        need = multi_ctas_kv_counter_bytes(batch, heads, sm_count)
        have = buffer.numel() * buffer.element_size()
        if have < need:
            raise ValueError(
                f"multi_ctas_kv_counter_buffer is too small: expected at least {need} bytes "
                f"(FlashInfer's get_trtllm_gen_multi_ctas_kv_counter_bytes), given {have}"
            )


def _mask_sparse_slots(indices: Any, seq_lens: Any, s_q: int, cu_seqlens_q: Any = None) -> Any:
    """trtllm-gen's sparse mode bounds each query token's index slots as its dense mode bounds
    positions: slot j of token t (of s_q) counts only where j < seq_lens[i] - s_q + 1 + t, which
    is the causal bound when the slots list positions in order (FlashInfer's sparse test checks
    exactly this against a causal reference). The other slots become -1 (empty), in a copy:
    device ops, no synchronization. A request at least topk + s_q - 1 long keeps every slot.
    With ``cu_seqlens_q`` (torch) the rows are packed by query token, [total_q, topk], and s_q
    is each request's own q_len."""
    if cu_seqlens_q is not None:
        return _mask_packed_slots(indices, seq_lens, cu_seqlens_q)
    topk = int(indices.shape[-1])
    if _arrays.framework(indices) == "torch":
        torch = sys.modules["torch"]
        device = indices.device
        bound = seq_lens.to(device=device, dtype=torch.int64)[:, None] + (
            torch.arange(s_q, device=device) - (s_q - 1))[None, :]  # fmt: skip
        keep = torch.arange(topk, device=device)[None, None, :] < bound[:, :, None]
        return indices.masked_fill(~keep, -1)
    np = sys.modules["numpy"]
    bound = np.asarray(seq_lens, dtype=np.int64)[:, None] + (np.arange(s_q) - (s_q - 1))[None, :]
    return np.where(np.arange(topk)[None, None, :] < bound[:, :, None], indices, -1).astype(
        indices.dtype)  # fmt: skip


def _mask_packed_slots(indices: Any, seq_lens: Any, cu_seqlens_q: Any) -> Any:
    """_mask_sparse_slots for index rows packed by query token: row r = cu[i] + t keeps slot j
    where j < seq_lens[i] - q_len_i + 1 + t. Rows past cu[b] belong to no request and are not
    read; they are masked as the last request's."""
    torch = sys.modules["torch"]
    device = indices.device
    cu = cu_seqlens_q.to(device=device, dtype=torch.int64)
    rows = torch.arange(int(indices.shape[0]), device=device)
    request = torch.searchsorted(cu[1:], rows, right=True).clamp(max=int(cu.shape[0]) - 2)
    first, q_len = cu[request], cu[request + 1] - cu[request]
    bound = seq_lens.to(device=device, dtype=torch.int64)[request] - q_len + 1 + rows - first
    keep = torch.arange(int(indices.shape[-1]), device=device)[None, :] < bound[:, None]
    return indices.masked_fill(~keep, -1)


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
    is_var_seq: bool = True,
    uses_shared_paged_kv_idx: bool = True,
    lse: Any = None,
    return_lse: bool = False,
    cute_dsl_impl: str = "auto",
    kv_scale_format: str = "auto",
    cum_seq_lens_q: Any = None,
    max_q_len: Optional[int] = None,
    multi_ctas_kv_counter_buffer: Any = None,
    sparse_mla_top_k_lens: Any = None,
    enable_dcp: bool = False,
    cp_world: int = 1,
    cp_rank: int = 0,
    causal_seqlens_kv_global: Any = None,
    use_fp16_softmax: Optional[bool] = None,
) -> Union[Any, Tuple[Any, Any]]:
    """FlashInfer's ``flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla`` (0.6), computed by
    mlakit. Every parameter is implemented or refused by name.

    Arguments:
        query: [batch_size, q_len_per_request, num_heads, 576] (q_nope absorbed, then q_rope);
            [batch_size, num_heads, 576] for one token per request; with ``cum_seq_lens_q``
            [total_q, num_heads, 576]. A view with a contiguous last dimension is read in place.
        kv_cache: [num_pages, page_size, 576] or [num_pages, 1, page_size, 576] (ckv, then
            kpe); 656 bytes per token for the DeepSeek V3.2 fp8 layout. Views as for query.
        workspace_buffer, multi_ctas_kv_counter_buffer: FlashInfer's scratch; unused (mlakit
            keeps its own workspace).
        qk_nope_head_dim: unused (it only enters the caller's bmm1_scale).
        kv_lora_rank: must be 512. qk_rope_head_dim: must be 64 (0, NoPE MLA, is refused).
        block_tables: [batch_size, max_num_pages] int32; with sparse_mla_top_k > 0 the sparse
            indices [batch_size, q_len_per_request, sparse_mla_top_k] (page * page_size +
            offset, -1 = empty), or with cum_seq_lens_q [total_q, sparse_mla_top_k].
        seq_lens: [batch_size] int32 cached lengths (the new tokens included).
        max_seq_len: the longest cached length (sizes mlakit's workspace).
        out: [batch_size, q_len_per_request, num_heads, 512] (or [batch_size, num_heads, 512]
            for one token, [total_q, num_heads, 512] with cum_seq_lens_q), written in place and
            returned.
        bmm1_scale, bmm2_scale: FlashInfer's fused scales (see ``_trtllm_scales``): floats, or
            one-element float32 tensors where the query is (fp8 query and cache only).
        sinks: [num_heads] float32 sink logits (a tensor, or a list holding one).
        skip_softmax_threshold_scale_factor: refused (skip-softmax sparsity).
        enable_pdl: programmatic dependent launch; None: on where the device supports it
            (sm_90 and newer), as FlashInfer decides.
        backend: "auto" or FlashInfer's "trtllm-gen", "xqa", "cute-dsl", "sparse" (each
            mlakit's "auto"), or an mlakit backend name.
        is_var_seq: FlashInfer's hint that lengths vary; mlakit always takes variable lengths,
            so either value computes the same.
        uses_shared_paged_kv_idx: must be True (one page table: K and V are the same rows).
        lse, return_lse: with ``return_lse`` returns ``(out, lse)``: lse [batch_size *
            q_len_per_request, num_heads] (or [batch_size, q_len_per_request, num_heads])
            float32, written in place when given, in base 2 as trtllm-gen returns it (natural
            log times log2(e)); -inf for a query that sees no token.
        cute_dsl_impl: "auto", "modular" or "monolithic": FlashInfer's choice among its own
            kernels; checked, no effect here.
        kv_scale_format: "auto", "pow2_fp32" or "arbitrary_fp32": the meaning of the 656-byte
            cache's fp32 scales; mlakit multiplies by them exactly, so both hold.
        cum_seq_lens_q, max_q_len: queries of different lengths per request ([batch_size + 1]
            int32 offsets into a [total_q, num_heads, 576] query; PyTorch tensors), up to
            max_q_len (<= 16) each, 0 included. They run as mlakit's variable query lengths
            (``Decoder(var_q=True)``): query, out, lse and the sparse index rows ([total_q,
            sparse_mla_top_k]) stay packed and are used in place, and query token t of request
            i sees positions (sparse: slots) < seq_lens[i] - q_len_i + 1 + t. No host
            synchronization when max_q_len is given (without it, FlashInfer reads the lengths on
            the host, and so does this).
        sparse_mla_top_k_lens: refused (FlashInfer takes it for NoPE MLA only).
        enable_dcp, cp_world, cp_rank, causal_seqlens_kv_global: decode context parallelism;
            refused (enable_dcp True or cp_world > 1).
        use_fp16_softmax: FlashInfer's lower-precision softmax variant; mlakit's softmax is
            fp32 either way (at least as exact).

    Returns:
        out, or (out, lse) with return_lse.
    """
    _check_mla_dimensions("kv_lora_rank", kv_lora_rank, "qk_rope_head_dim", qk_rope_head_dim)
    if skip_softmax_threshold_scale_factor is not None:
        raise _not_supported("skip_softmax_threshold_scale_factor", "skip-softmax sparsity")
    if not uses_shared_paged_kv_idx:
        raise _not_supported(
            "uses_shared_paged_kv_idx", "False (separate K and V page tables)",
            "MLA's K and V are the same cache rows, read through one block table",
        )  # fmt: skip
    if cute_dsl_impl not in ("auto", "modular", "monolithic"):
        raise ValueError(
            f"cute_dsl_impl: expected 'auto', 'modular' or 'monolithic', given {cute_dsl_impl!r}"
        )
    if kv_scale_format not in ("auto", "pow2_fp32", "arbitrary_fp32"):
        raise ValueError(
            "kv_scale_format: expected 'auto', 'pow2_fp32' or 'arbitrary_fp32', given "
            f"{kv_scale_format!r}"
        )
    if sparse_mla_top_k_lens is not None:
        raise ValueError(
            "sparse_mla_top_k_lens: expected None (FlashInfer takes it for NoPE MLA, "
            "qk_rope_head_dim 0, only), given a tensor"
        )
    if enable_dcp or cp_world != 1 or cp_rank != 0 or causal_seqlens_kv_global is not None:
        raise _not_supported(
            "enable_dcp", "decode context parallelism (enable_dcp, cp_world, cp_rank, "
            "causal_seqlens_kv_global)",
        )  # fmt: skip
    if max_q_len is not None and cum_seq_lens_q is None:
        raise ValueError("max_q_len: expected None without cum_seq_lens_q, given an int")
    if isinstance(sinks, (list, tuple)):
        if len(sinks) != 1:
            raise ValueError(
                f"sinks: expected one [num_heads] tensor, given a list of {len(sinks)}"
            )
        sinks = sinks[0]
    mlakit_backend = _backend(backend)
    pdl = _auto_pdl(query) if enable_pdl is None else bool(enable_pdl)
    sparse = sparse_mla_top_k > 0
    if not sparse and seq_lens is None:
        raise ValueError("seq_lens: expected [batch_size] int32 for dense decode, given None")

    softmax_scale, q_scale, k_scale = _trtllm_scales(query, kv_cache, bmm1_scale, bmm2_scale)

    # Ragged queries run as the library's variable query lengths (var_q): query, out, lse and
    # the sparse index rows stay packed by query token and are used in place.
    cu_seqlens_q = None
    indices = block_tables if sparse else None
    q = query
    if cum_seq_lens_q is not None:
        if _arrays.framework(query) != "torch":
            raise TypeError("cum_seq_lens_q: expected PyTorch tensors (query and the offsets)")
        if len(query.shape) != 3:
            raise ValueError(f"query: expected [total, heads, dim] packed rows with cum_seq_lens_q, "
                             f"given shape {list(query.shape)}")
        if max_q_len is None:  # FlashInfer reads the lengths on the host here too
            cum = cum_seq_lens_q.cpu()
            _check_query_offsets("cum_seq_lens_q", cum, int(query.shape[0]))
            max_q_len = int((cum[1:] - cum[:-1]).max())
        _check_query_tokens("max_q_len", int(max_q_len))
        torch = sys.modules["torch"]
        cu_seqlens_q = cum_seq_lens_q.to(device=query.device, dtype=torch.int32)
        b, s_q, h = int(cu_seqlens_q.shape[0]) - 1, max(1, int(max_q_len)), int(query.shape[1])
    else:
        if len(query.shape) == 3:
            q = query.reshape(query.shape[0], 1, query.shape[1], query.shape[2])
        b, s_q, h = int(q.shape[0]), int(q.shape[1]), int(q.shape[2])
    _check_query_tokens("query", s_q)
    _check_heads("query", h)
    if multi_ctas_kv_counter_buffer is not None:
        _check_counter_buffer(multi_ctas_kv_counter_buffer, query, b, h)
    if sparse and seq_lens is not None:
        indices = _mask_sparse_slots(indices, seq_lens, s_q, cu_seqlens_q)
    indices = _contiguous(indices)

    # Outputs: the caller's, seen in mlakit's shapes (views, written in place): [b, s_q, h, ..],
    # or packed, [total_q, h, ..].
    lead = (int(query.shape[0]),) if cu_seqlens_q is not None else (b, s_q)
    out_view = None if out is None else _view("out", out, lead + (h, int(out.shape[-1])))
    lse_view = None
    if return_lse and lse is not None:
        lse_view = _view("lse", lse, lead + (h,))

    result, result_lse = _decode(
        q,
        kv_cache,
        None if sparse else block_tables,
        None if sparse else seq_lens,
        out=out_view,
        lse=lse_view,
        return_lse=bool(return_lse),
        softmax_scale=softmax_scale,
        causal=True,
        q_scale=q_scale,
        k_scale=k_scale,
        sinks=sinks,
        indices=indices,
        max_seq_len=int(max_seq_len),
        pdl=pdl,
        backend=mlakit_backend,
        lse_base2=bool(return_lse),
        cu_seqlens_q=cu_seqlens_q,
        max_q_len=s_q if cu_seqlens_q is not None else None,
    )

    if out is None:
        out = result if len(query.shape) == 4 or cu_seqlens_q is not None else result.reshape(
            b, h, int(result.shape[-1]))  # fmt: skip
    if return_lse and lse is None:
        lse = result_lse if cu_seqlens_q is not None else result_lse.reshape(b * s_q, h)
    if not return_lse:
        return out
    return out, lse


def _check_mla_dimensions(lora_name: str, lora: int, rope_name: str, rope: int) -> None:
    """mlakit computes DeepSeek's MLA: a latent of 512 and a RoPE part of 64 (d_qk 576). The
    other dimensions FlashInfer runs (a latent of 256; NoPE MLA, rope 0) are refused by name;
    any other value is an error, as in FlashInfer."""
    if lora == 512 and rope == 64:
        return
    if lora == 512 and rope == 0:
        raise _not_supported(rope_name, "0 (NoPE MLA)", "mlakit computes d_qk = 576")
    if lora == 256 and rope == 64:
        raise _not_supported(
            lora_name, "256 (FlashInfer's smaller MLA dimensions)",
            "mlakit computes a latent of 512, d_qk = 576",
        )  # fmt: skip
    raise ValueError(
        f"{lora_name}, {rope_name}: expected 512 and 64 (mlakit; FlashInfer also takes 256 and "
        f"64, and 512 and 0), given {lora} and {rope}"
    )
