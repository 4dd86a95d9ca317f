"""FlashInfer's MLA decode calls, computed by mlakit (re-exported by ``mlakit.compat``).

* ``trtllm_batch_decode_with_kv_cache_mla``: FlashInfer 0.6's signature, every parameter
  implemented or refused by name.
* ``BatchMLAPagedAttentionWrapper``: plan/run over CSR page lists with split q_nope/q_pe and
  ckv/kpe, as SGLang drives it; the CSR lists become a block table on the device.

The LSE follows FlashInfer: base 2 by default (``log2(sum(exp2(...)))``, what trtllm-gen and the
wrapper return), natural log with the wrapper's ``return_lse_base_on_e=True``; an empty row is
-inf. The library writes the base-2 LSE itself (``Problem::lse_base2``).
"""

from __future__ import annotations

import sys
from typing import Any, List, Optional, Tuple, Union

from . import _arrays
from ._decoder import host_scale
from .compat import _array_dtype, _contiguous, _decode, _not_supported, _scale_array


# FlashInfer's backend names; each means mlakit's "auto".
_FLASHINFER_BACKENDS = ("auto", "trtllm-gen", "xqa", "cute-dsl", "sparse")
_MLAKIT_BACKENDS = ("cpu", "sm80", "sm90")

# Query tokens per request and query heads that mlakit decodes (kMaxSq, h_q's range).
_MAX_QUERY_TOKENS = 16
_MAX_HEADS = 128


def _backend(backend: str, names: Tuple[str, ...] = _FLASHINFER_BACKENDS) -> str:
    if backend in names:
        return "auto"
    if backend in _MLAKIT_BACKENDS:
        return backend
    raise ValueError(
        f"backend: expected one of {', '.join(repr(n) for n in names + _MLAKIT_BACKENDS)} "
        f"(FlashInfer's names mean mlakit's 'auto'), given {backend!r}"
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


def _view(name: str, x: Any, shape: Tuple[int, ...]) -> Any:
    """``x`` seen with ``shape`` without a copy (mlakit writes into it), or ValueError."""
    try:
        if _arrays.framework(x) == "torch":
            return x.view(shape)
        v = x.view()
        v.shape = shape  # NumPy refuses where a copy would be needed
        return v
    except (RuntimeError, AttributeError, ValueError):
        raise ValueError(
            f"{name}: expected an array that can be seen as {list(shape)} without a copy, "
            f"given shape {list(x.shape)}"
        ) from None


def _ragged_layout(
    cum_seq_lens_q: Any, total: int, s_q: int, device: Any
) -> Tuple[Any, Any, Any]:
    """Ragged rows (request i's tokens at cum[i]..cum[i + 1], ``total`` in all) laid out as a
    batch of ``s_q`` slots per request, each request's tokens in its last slots, where the causal
    bound of mlakit's token t (positions < L - s_q + 1 + t) is the ragged token's own. Returns
    ``source`` [b, s_q], the ragged row each slot reads (unused slots repeat a real row, whose
    results are dropped), and per ragged row its (request, slot) to gather the results back.
    Device tensor ops with host-known shapes only: no synchronization, graph-capturable."""
    torch = sys.modules["torch"]
    cum = cum_seq_lens_q.to(device=device, dtype=torch.int64)
    q_lens = cum[1:] - cum[:-1]
    slots = torch.arange(s_q, device=device)
    first = s_q - q_lens  # the slot of each request's first token
    source = (cum[:-1, None] + slots[None, :] - first[:, None]).clamp(0, max(total - 1, 0))
    rows = torch.arange(total, device=device)
    request = torch.searchsorted(cum[1:], rows, right=True)
    slot = first[request] + rows - cum[request]
    return source, request, slot


def _gather_rows(x: Any, source: Any) -> Any:
    """Rows of ``x`` [total, ...] at ``source`` [b, s_q], as [b, s_q, ...]."""
    return x.index_select(0, source.reshape(-1)).reshape(tuple(source.shape) + tuple(x.shape[1:]))


def _check_query_tokens(name: str, s_q: int) -> None:
    """FlashInfer runs any number of query tokens per request (prefill too); mlakit decodes
    1..16 (MTP and speculative decoding)."""
    if s_q > _MAX_QUERY_TOKENS:
        raise _not_supported(
            name, f"{s_q} query tokens per request",
            f"mlakit decodes 1..{_MAX_QUERY_TOKENS} query tokens per request",
        )  # fmt: skip


def _check_heads(name: str, heads: int) -> None:
    """FlashInfer runs any number of query heads; mlakit 1..128 (DeepSeek's 128 and fewer, as
    tensor parallelism divides them)."""
    if heads > _MAX_HEADS:
        raise _not_supported(name, f"{heads} query heads",
                             f"mlakit decodes 1..{_MAX_HEADS} query heads")  # fmt: skip


def multi_ctas_kv_counter_bytes(batch_size: int, num_qo_heads: int, sm_count: int) -> int:
    """The bytes FlashInfer requires of ``multi_ctas_kv_counter_buffer`` (its
    ``get_trtllm_gen_multi_ctas_kv_counter_bytes``): one int32 semaphore per (request, head) or
    per SM, whichever is more, rounded up to 8."""
    semaphores = max(int(batch_size) * int(num_qo_heads), int(sm_count))
    return -(-semaphores // 8) * 8 * 4


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


def _mask_sparse_slots(indices: Any, seq_lens: Any, s_q: int) -> Any:
    """trtllm-gen's sparse mode bounds each query token's index slots as its dense mode bounds
    positions: slot j of token t (of s_q) counts only where j < seq_lens[i] - s_q + 1 + t, which
    is the causal bound when the slots list positions in order (FlashInfer's sparse test checks
    exactly this against a causal reference). The other slots become -1 (empty), in a copy:
    device ops, no synchronization. A request at least topk + s_q - 1 long keeps every slot."""
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
            offset, -1 = empty).
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
            int32 offsets into a [total_q, num_heads, 576] query; PyTorch tensors). They are
            laid out on the device as a batch of max_q_len (<= 16) tokens, each request's in its
            last slots (its causal bound is then its own), and gathered back: no host
            synchronization when max_q_len is given (without it, FlashInfer reads the lengths on
            the host, and so does this). Not with sparse indices.
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

    ragged = cum_seq_lens_q is not None
    indices = block_tables if sparse else None
    if ragged:
        if _arrays.framework(query) != "torch":
            raise TypeError("cum_seq_lens_q: expected PyTorch tensors (query and the offsets)")
        if max_q_len is None:  # FlashInfer reads the lengths on the host here too
            max_q_len = int((cum_seq_lens_q[1:] - cum_seq_lens_q[:-1]).max())
        _check_query_tokens("max_q_len", int(max_q_len))
        source, request, slot = _ragged_layout(cum_seq_lens_q, int(query.shape[0]),
                                               int(max_q_len), query.device)  # fmt: skip
        q4 = _gather_rows(query, source)
        if sparse:  # compact index rows [total_q, topk], one per query token
            indices = _gather_rows(block_tables, source)
    elif len(query.shape) == 3:
        q4 = query.reshape(query.shape[0], 1, query.shape[1], query.shape[2])
    else:
        q4 = query
    b, s_q, h = int(q4.shape[0]), int(q4.shape[1]), int(q4.shape[2])
    _check_query_tokens("query", s_q)
    _check_heads("query", h)
    if multi_ctas_kv_counter_buffer is not None:
        _check_counter_buffer(multi_ctas_kv_counter_buffer, query, b, h)
    if sparse and seq_lens is not None:
        indices = _mask_sparse_slots(indices, seq_lens, s_q)
    indices = _contiguous(indices)

    # Outputs: the caller's, seen in mlakit's [b, s_q, h, ...] shapes (views, written in place).
    out4 = None if out is None or ragged else _view("out", out, (b, s_q, h, int(out.shape[-1])))
    lse3 = None
    if return_lse and lse is not None and not ragged:
        lse3 = _view("lse", lse, (b, s_q, h))

    result, result_lse = _decode(
        q4,
        kv_cache,
        None if sparse else block_tables,
        None if sparse else seq_lens,
        out=out4,
        lse=lse3,
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
    )

    if ragged:  # gather each ragged token's row back from its slot
        flat = result[request, slot]
        out = flat if out is None else out.copy_(flat)
        if return_lse:
            flat_lse = result_lse[request, slot]
            lse = flat_lse if lse is None else lse.copy_(flat_lse.reshape(lse.shape))
    else:
        if out is None:
            out = result if len(query.shape) == 4 else result.reshape(b, h, int(result.shape[-1]))
        if return_lse and lse is None:
            lse = result_lse.reshape(b * s_q, h)
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


# ---------------------------------------------------------------------------------------------
# BatchMLAPagedAttentionWrapper
# ---------------------------------------------------------------------------------------------

# Above this many bytes, a block table sized from the kv_indices buffer (CUDA-graph mode without
# max_seq_len) is refused rather than allocated. FlashInfer's own test of the graph mode plans 157
# requests with a buffer of 2^20 pages: 658 MB.
_MAX_GRAPH_TABLE_BYTES = 1 << 30

# The library's limit on max_seq_len (validate.cc): a wider block table could not be read.
_MAX_SEQ_LEN = 1 << 24


def _joined(name: str, first: Any, second: Any, lead: Tuple[int, ...]) -> Any:
    """``first`` [..., 512] and ``second`` [..., 64] as one [..., 576] tensor with shape ``lead``
    + (576,): a view when ``second`` starts right after ``first`` in one buffer with the same
    outer strides (SGLang's and FlashInfer's own ``x[..., :512]`` / ``x[..., 512:]``), otherwise
    a concatenated copy."""
    torch = sys.modules["torch"]
    d_first = int(first.shape[-1])
    adjacent = (
        first.dtype == second.dtype
        and first.device == second.device
        and first.shape[:-1] == second.shape[:-1]
        and first.stride()[:-1] == second.stride()[:-1]
        and first.stride(-1) == 1
        and second.stride(-1) == 1
        and second.data_ptr() == first.data_ptr() + d_first * first.element_size()
    )
    if adjacent:
        whole = first.as_strided(tuple(first.shape[:-1]) + (576,), first.stride())
    else:
        whole = torch.cat([first, second], dim=-1)
    try:
        return whole.view(lead + (576,))
    except RuntimeError:
        raise ValueError(
            f"{name}: expected shape {list(lead) + [576]} once joined, given {list(whole.shape)}"
        ) from None


class BatchMLAPagedAttentionWrapper:
    """FlashInfer's ``flashinfer.mla.BatchMLAPagedAttentionWrapper``, computed by mlakit
    (PyTorch tensors; host tensors run on the cpu backend).

    ``plan`` takes FlashInfer's CSR page lists (``kv_indptr`` / ``kv_indices``) and turns them
    into a block table on the device with tensor ops. Without ``use_cuda_graph`` it reads the
    page counts and query lengths on the host once, as FlashInfer's plan does. With
    ``use_cuda_graph`` it never synchronizes: the block table is a buffer of fixed width
    (``max_seq_len / page_size`` pages, mlakit's keyword, else the length of the ``kv_indices``
    buffer given at construction) that each ``plan`` rewrites in place, so a graph captured around
    ``run`` replays with the new lists; every request must then have the same number of query
    tokens (``q_nope.shape[0] / batch_size``), which is not checked on the device.

    ``run`` joins q_nope/q_pe and ckv/kpe without a copy when each pair is one buffer split at
    512 (``x[..., :512]``, ``x[..., 512:]``); other pairs are concatenated (a copy of the cache
    per call). The LSE is base 2 unless ``return_lse_base_on_e``, as FlashInfer returns it.
    """

    def __init__(
        self,
        float_workspace_buffer: Any,
        use_cuda_graph: bool = False,
        qo_indptr: Any = None,
        kv_indptr: Any = None,
        kv_indices: Any = None,
        kv_len_arr: Any = None,
        backend: str = "auto",
        *,
        max_seq_len: Optional[int] = None,
    ) -> None:
        """Arguments as FlashInfer's: ``float_workspace_buffer`` (unused: mlakit keeps its own
        workspace; its device is the wrapper's), ``use_cuda_graph`` and the buffers backing the
        CSR lists in that mode, ``backend`` ("auto", "fa2", "fa3": mlakit's "auto", or an
        mlakit backend name; "cutlass", whose run takes other arguments, is refused).
        mlakit adds ``max_seq_len``: the longest cached length any run will pass, which bounds
        the block table's width in CUDA-graph mode."""
        self.device = float_workspace_buffer.device
        if backend == "cutlass":
            raise _not_supported(
                "backend", "'cutlass' (FlashInfer's SM100 kernel, with its own run arguments)",
                "use 'auto'",
            )  # fmt: skip
        self._backend = _backend(backend, ("auto", "fa2", "fa3"))
        self._use_cuda_graph = bool(use_cuda_graph)
        self._buffers = (qo_indptr, kv_indptr, kv_indices, kv_len_arr)
        if self._use_cuda_graph:
            for name, buf in zip(("qo_indptr", "kv_indptr", "kv_indices", "kv_len_arr"),
                                 self._buffers):  # fmt: skip
                if buf is None:
                    raise ValueError(
                        f"{name}: expected a buffer with use_cuda_graph=True, given None"
                    )
        self._max_seq_len = max_seq_len
        self._plan: Optional[dict] = None
        self._block_table: Any = None

    def plan(
        self,
        qo_indptr: Any,
        kv_indptr: Any,
        kv_indices: Any,
        kv_len_arr: Any,
        num_heads: int,
        head_dim_ckv: int,
        head_dim_kpe: int,
        page_size: int,
        causal: bool,
        sm_scale: float,
        q_data_type: Any,
        kv_data_type: Any,
        use_profiler: bool = False,
    ) -> None:
        """FlashInfer's ``plan``: CSR lists (``kv_indptr`` [batch_size + 1], ``kv_indices``
        page ids, ``kv_len_arr`` [batch_size] cached lengths), shapes, ``causal`` (bottom-right:
        query token t of a request's s_q sees positions < L - s_q + 1 + t), ``sm_scale`` and
        dtypes. Without ``use_cuda_graph`` requests may have different query lengths
        (``qo_indptr``), up to 16 each."""
        torch = sys.modules["torch"]
        if head_dim_ckv <= 0 or head_dim_kpe < 0:
            raise ValueError(
                f"head_dim_ckv, head_dim_kpe: expected 512 and 64, given {head_dim_ckv} and "
                f"{head_dim_kpe}"
            )
        if head_dim_kpe == 0:
            raise _not_supported("head_dim_kpe", "0 (NoPE MLA)", "mlakit computes d_qk = 576")
        if (head_dim_ckv, head_dim_kpe) != (512, 64):
            raise _not_supported(
                "head_dim_ckv, head_dim_kpe", f"{head_dim_ckv} and {head_dim_kpe}",
                "mlakit computes DeepSeek's MLA: a latent of 512 and a RoPE part of 64",
            )  # fmt: skip
        if use_profiler:
            raise _not_supported("use_profiler", "FlashInfer's intra-kernel profiler")
        supported = (torch.bfloat16, torch.float16, torch.float8_e4m3fn)
        if kv_data_type not in supported:
            raise ValueError(
                f"kv_data_type: expected torch.bfloat16, torch.float16 or torch.float8_e4m3fn, "
                f"given {kv_data_type}"
            )
        if q_data_type not in (torch.bfloat16, torch.float16):
            raise ValueError(
                f"q_data_type: expected torch.bfloat16 or torch.float16, given {q_data_type}"
            )
        host_scale("sm_scale", sm_scale)
        _check_heads("num_heads", int(num_heads))
        batch = int(qo_indptr.shape[0]) - 1
        if batch < 1 or int(kv_indptr.shape[0]) <= batch or int(kv_len_arr.shape[0]) < batch:
            raise ValueError(
                f"kv_indptr, kv_len_arr: expected [{batch + 1}] and [{batch}] (batch_size from "
                f"qo_indptr), given {list(kv_indptr.shape)} and {list(kv_len_arr.shape)}"
            )
        # FlashInfer reads the first batch_size + 1 and batch_size entries of longer arrays (its
        # own varlen test passes a kv_indptr of 3 x (batch_size / 3 + 1) entries).
        kv_indptr, kv_len_arr = kv_indptr[: batch + 1], kv_len_arr[:batch]

        ragged = None
        if self._use_cuda_graph:
            qo_buf, kv_indptr_buf, kv_indices_buf, kv_len_buf = self._buffers
            qo_buf.copy_(qo_indptr, non_blocking=True)
            kv_indptr_buf.copy_(kv_indptr, non_blocking=True)
            kv_indices_buf[: int(kv_indices.shape[0])].copy_(kv_indices, non_blocking=True)
            kv_len_buf.copy_(kv_len_arr, non_blocking=True)
            if self._max_seq_len is not None:
                width = max(1, -(-int(self._max_seq_len) // page_size))
            else:
                width = min(int(kv_indices_buf.shape[0]), max(1, _MAX_SEQ_LEN // page_size))
                if batch * width * 4 > _MAX_GRAPH_TABLE_BYTES:
                    raise ValueError(
                        f"max_seq_len: expected BatchMLAPagedAttentionWrapper(..., "
                        f"max_seq_len=...) with use_cuda_graph: without it the block table is "
                        f"as wide as the kv_indices buffer ({width} pages x {batch} requests, "
                        f"more than {_MAX_GRAPH_TABLE_BYTES >> 20} MiB), given None"
                    )
            s_q = None  # from q_nope in run: not read on the host here
            kv_indptr, kv_indices, seq_lens = kv_indptr_buf, kv_indices_buf, kv_len_buf
        else:
            kv_indptr = kv_indptr.to(self.device)
            kv_indices = kv_indices.to(self.device)
            seq_lens = kv_len_arr.to(device=self.device, dtype=torch.int32)
            # FlashInfer's plan reads these on the host too.
            cum_q = qo_indptr.cpu()
            q_lens = cum_q[1:] - cum_q[:-1]
            pages = (kv_indptr[1:] - kv_indptr[:-1]).cpu()
            s_q = max(1, int(q_lens.max()))
            _check_query_tokens("qo_indptr", s_q)
            if not bool((q_lens == s_q).all()):
                # Laid out as a batch of s_q slots, each request's tokens in its last ones.
                total = int(cum_q[-1])
                ragged = (total,) + _ragged_layout(cum_q, total, s_q, self.device)
            width = max(1, int(pages.max()))
        if (
            self._block_table is None
            or tuple(self._block_table.shape) != (batch, width)
            or self._block_table.device != kv_indices.device
        ):
            if self._use_cuda_graph and self._block_table is not None:
                fixed = int(self._block_table.shape[0])
                raise ValueError(
                    f"plan: with use_cuda_graph the batch size is fixed ({fixed} requests), "
                    f"given {batch}"
                )
            # One spare element past the table takes the list entries that belong to no row.
            self._table_storage = torch.zeros(batch * width + 1, dtype=torch.int32,
                                              device=kv_indices.device)  # fmt: skip
            self._block_table = self._table_storage[:-1].view(batch, width)
        self._fill_block_table(kv_indptr, kv_indices, batch, width)
        self._plan = dict(
            batch=batch, s_q=s_q, ragged=ragged, num_heads=int(num_heads),
            page_size=int(page_size), causal=bool(causal), sm_scale=float(sm_scale),
            q_dtype=q_data_type, kv_dtype=kv_data_type, seq_lens=seq_lens,
            max_seq_len=width * int(page_size),
        )  # fmt: skip

    def _fill_block_table(self, kv_indptr: Any, kv_indices: Any, batch: int, width: int) -> None:
        """block_table[i, j] = kv_indices[kv_indptr[i] + j] for j < the request's page count:
        one scatter over the list's entries (work in proportion to its length, not to batch x
        width), in place, no synchronization. Entries past kv_indptr[batch] or past the table's
        width go to the spare element; slots past a request's pages keep what they held (the
        kernels read a request's first ceil(L / page_size) pages only)."""
        torch = sys.modules["torch"]
        device = kv_indices.device
        count = int(kv_indices.shape[0])
        if count == 0:
            return
        indptr = kv_indptr[: batch + 1].to(device=device, dtype=torch.int64)
        entries = torch.arange(count, device=device)
        row = torch.searchsorted(indptr[1:], entries, right=True).clamp(max=batch - 1)
        column = entries - indptr[row]
        inside = (entries < indptr[batch]) & (column < width) & (column >= 0)
        target = torch.where(inside, row * width + column, batch * width)
        self._table_storage.index_copy_(0, target, kv_indices.to(torch.int32))

    def run(
        self,
        q_nope: Any,
        q_pe: Any,
        ckv_cache: Any,
        kpe_cache: Any,
        out: Any = None,
        lse: Any = None,
        return_lse: bool = False,
        profiler_buffer: Any = None,
        kv_len: Any = None,
        page_table: Any = None,
        return_lse_base_on_e: bool = False,
        o_scale: Optional[float] = None,
        *,
        ckv_scale: Optional[float] = None,
        ckv_scale_arr: Any = None,
        kpe_scale: Optional[float] = None,
    ) -> Any:
        """FlashInfer's ``run``: q_nope [total_q, num_heads, 512], q_pe [total_q, num_heads,
        64], ckv_cache [num_pages, page_size, 512], kpe_cache [num_pages, page_size, 64]; out
        [total_q, num_heads, 512] written in place when given; ``lse`` [total_q, num_heads]
        written when given, as FlashInfer does, also without ``return_lse`` (base 2 unless
        ``return_lse_base_on_e``). An fp8 cache takes ``ckv_scale`` and ``kpe_scale`` (see
        ``_k_scale``); ``ckv_scale_arr`` (per-token scales), ``o_scale`` (fp8 output) and
        ``profiler_buffer`` are refused. Returns out, or (out, lse) with return_lse."""
        torch = sys.modules["torch"]
        if profiler_buffer is not None:
            raise _not_supported("profiler_buffer", "FlashInfer's intra-kernel profiler")
        if o_scale is not None:
            raise _not_supported("o_scale", "an fp8 output (mlakit writes bf16 or fp16)")
        total, h = int(q_nope.shape[0]), int(q_nope.shape[1])
        if kv_len is not None or page_table is not None:
            raise ValueError(
                "kv_len, page_table: expected None (FlashInfer's cutlass backend takes them; "
                "this wrapper uses the lists given to plan)"
            )
        if self._plan is None:
            raise RuntimeError("BatchMLAPagedAttentionWrapper.run: call plan() first")
        plan, table = self._plan, self._block_table
        for name, x, want, what in (
            ("q_nope", q_nope, plan["q_dtype"], "q_data_type"),
            ("q_pe", q_pe, plan["q_dtype"], "q_data_type"),
            ("ckv_cache", ckv_cache, plan["kv_dtype"], "kv_data_type"),
            ("kpe_cache", kpe_cache, plan["kv_dtype"], "kv_data_type"),
        ):
            if x.dtype != want:
                raise ValueError(
                    f"{name}.dtype: expected {want} (the planned {what}), given {x.dtype}"
                )
        batch, ragged = plan["batch"], plan["ragged"]
        s_q = plan["s_q"] or total // batch
        if ragged is not None and ragged[0] != total:
            raise ValueError(
                f"q_nope: expected {ragged[0]} rows (qo_indptr[-1] as planned), given {total}"
            )
        if ragged is None and s_q * batch != total:
            raise ValueError(
                f"q_nope: expected batch_size x s_q = {batch} x s_q rows, given {total}"
            )
        _check_query_tokens("q_nope", s_q)
        k_scale, rope_factor = self._k_scale(plan["kv_dtype"], ckv_scale, ckv_scale_arr,
                                             kpe_scale)  # fmt: skip
        if rope_factor != 1.0:  # kpe_scale / ckv_scale moves onto the query's RoPE part
            q_pe = (q_pe.float() * rope_factor).to(q_pe.dtype)

        pages, page_size = int(ckv_cache.shape[0]), plan["page_size"]
        kv = _joined("ckv_cache, kpe_cache", ckv_cache, kpe_cache, (pages, page_size))
        if pages == 0:  # every request is empty (FlashInfer's tests plan kv_len 0): one page of
            # zeros stands in, which no request reads (mlakit takes no cache without memory)
            kv = torch.zeros((1, page_size, 576), dtype=kv.dtype, device=kv.device)
        write_lse = bool(return_lse) or lse is not None
        if out is None:
            out = torch.empty((total, h, 512), dtype=q_nope.dtype, device=q_nope.device)
        if write_lse and lse is None:
            lse = torch.empty((total, h), dtype=torch.float32, device=q_nope.device)
        if ragged is None:
            q = _joined("q_nope, q_pe", q_nope, q_pe, (batch, s_q, h))
            out4 = _view("out", out, (batch, s_q, h, 512))
            lse3 = _view("lse", lse, (batch, s_q, h)) if write_lse else None
        else:
            _, source, request, slot = ragged
            q = _gather_rows(_joined("q_nope, q_pe", q_nope, q_pe, (total, h)), source)
            out4, lse3 = None, None
        result, result_lse = _decode(
            q,
            kv,
            table,
            plan["seq_lens"],
            out=out4,
            lse=lse3,
            return_lse=write_lse,
            softmax_scale=plan["sm_scale"],
            causal=plan["causal"],
            k_scale=k_scale,
            max_seq_len=plan["max_seq_len"],
            backend=self._backend,
            lse_base2=write_lse and not return_lse_base_on_e,
        )
        if ragged is not None:  # each ragged row from its slot
            out.copy_(result[request, slot])
            if write_lse:
                lse.copy_(result_lse[request, slot].reshape(lse.shape))
        return (out, lse) if return_lse else out

    @staticmethod
    def _k_scale(
        kv_dtype: Any, ckv_scale: Optional[float], ckv_scale_arr: Any, kpe_scale: Optional[float]
    ) -> Tuple[Optional[float], float]:
        """The cache scales of ``run``, checked in FlashInfer's order (an fp8 cache needs exactly
        one of ckv_scale and ckv_scale_arr, and kpe_scale; a 16-bit cache takes none), as
        mlakit's one k_scale and a factor on the query's RoPE part.

        mlakit's fp8 cache has one scale, applied to all 576 values: k_scale = ckv_scale. The
        RoPE part only enters the logits, q_pe . (kpe_scale kpe) = (kpe_scale / ckv_scale) q_pe
        . (ckv_scale kpe), so a kpe_scale of its own becomes the factor kpe_scale / ckv_scale on
        q_pe (a copy of q_pe, rounded to its dtype: a relative error of 2^-9 in bf16 on the
        RoPE logits, less than FlashInfer's own bf16 dequantization of the cache)."""
        torch = sys.modules["torch"]
        if kv_dtype != torch.float8_e4m3fn:
            if ckv_scale is not None or ckv_scale_arr is not None or kpe_scale is not None:
                raise ValueError(
                    "ckv_scale, ckv_scale_arr, kpe_scale: expected None with a 16-bit cache "
                    "(they are only valid when kv_data_type is FP8)"
                )
            return None, 1.0
        if (ckv_scale is None) == (ckv_scale_arr is None):
            raise ValueError(
                "ckv_scale, ckv_scale_arr: Exactly one of ckv_scale or ckv_scale_arr is required "
                f"with an fp8 cache, given {'neither' if ckv_scale is None else 'both'}"
            )
        if kpe_scale is None:
            raise ValueError("kpe_scale: expected a float with an fp8 cache, given None")
        if ckv_scale_arr is not None:
            raise _not_supported("ckv_scale_arr", "per-token, per-128-channel cache scales",
                                 "mlakit's fp8 cache has one scale")  # fmt: skip
        k_scale = host_scale("ckv_scale", ckv_scale)
        host_scale("kpe_scale", kpe_scale)
        return k_scale, float(kpe_scale) / float(ckv_scale)
