"""FlashInfer's ``BatchMLAPagedAttentionWrapper``, computed by mlakit (re-exported by
``mlakit.compat``): plan/run over CSR page lists with split q_nope/q_pe and ckv/kpe, as SGLang
drives it; the CSR lists become a block table on the device. What it shares with
``trtllm_batch_decode_with_kv_cache_mla`` is in _flashinfer.py.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Tuple

from ._compat_common import _decode, _not_supported
from ._decoder import host_scale
from ._flashinfer import _backend, _check_heads, _check_query_offsets, _check_query_tokens, _view


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
    ``run`` replays with the new lists. Query lengths that differ between requests run as
    mlakit's variable query lengths (``Decoder(var_q=True)``) over ``qo_indptr`` on the device:
    found by ``plan`` without ``use_cuda_graph``; with it, given a bound by mlakit's keyword
    ``max_q_len`` (without it every request must have ``q_nope.shape[0] / batch_size`` query
    tokens, which is not checked on the device).

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
        max_q_len: Optional[int] = None,
    ) -> None:
        """Arguments as FlashInfer's: ``float_workspace_buffer`` (unused: mlakit keeps its own
        workspace; its device is the wrapper's), ``use_cuda_graph`` and the buffers backing the
        CSR lists in that mode, ``backend`` ("auto", "fa2", "fa3": mlakit's "auto", or an
        mlakit backend name; "cutlass", whose run takes other arguments, is refused).
        mlakit adds ``max_seq_len``: the longest cached length any run will pass, which bounds
        the block table's width in CUDA-graph mode; and ``max_q_len`` (1..16): in CUDA-graph
        mode, the most query tokens any request of a plan has, so that requests may have
        different numbers (0..max_q_len, read from the ``qo_indptr`` buffer on the device);
        None: each has ``q_nope.shape[0] / batch_size``."""
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
        if max_q_len is not None:
            if not self._use_cuda_graph:
                raise ValueError(
                    "max_q_len: expected None without use_cuda_graph (plan reads the query "
                    "lengths), given an int"
                )
            if int(max_q_len) < 1:
                raise ValueError(f"max_q_len: expected 1..16, given {max_q_len}")
            _check_query_tokens("max_q_len", int(max_q_len))
        self._max_q_len = None if max_q_len is None else int(max_q_len)
        self._plan: Optional[dict] = None
        self._block_table: Any = None
        self._cu_buf: Any = None  # with max_q_len: qo_indptr as int32 where the buffer is not

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
        dtypes. Requests may have different query lengths (``qo_indptr``), up to 16 each (with
        ``use_cuda_graph``, up to the ``max_q_len`` given at construction)."""
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

        cu_seqlens_q = None  # the query-token offsets, for variable query lengths (var_q)
        total = None  # the query tokens, where read on the host
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
            s_q = self._max_q_len  # None: from q_nope in run; nothing is read on the host here
            if s_q is not None:
                cu_seqlens_q = qo_buf[: batch + 1]
                if cu_seqlens_q.dtype != torch.int32:  # an int32 copy, always the same memory
                    if self._cu_buf is None:
                        self._cu_buf = torch.empty(batch + 1, dtype=torch.int32,
                                                   device=qo_buf.device)  # fmt: skip
                    cu_seqlens_q = self._cu_buf.copy_(cu_seqlens_q, non_blocking=True)
            kv_indptr, kv_indices, seq_lens = kv_indptr_buf, kv_indices_buf, kv_len_buf
        else:
            kv_indptr = kv_indptr.to(self.device)
            kv_indices = kv_indices.to(self.device)
            seq_lens = kv_len_arr.to(device=self.device, dtype=torch.int32)
            # FlashInfer's plan reads these on the host too.
            cum_q = qo_indptr.cpu()
            _check_query_offsets("qo_indptr", cum_q)
            q_lens = cum_q[1:] - cum_q[:-1]
            pages = (kv_indptr[1:] - kv_indptr[:-1]).cpu()
            s_q = max(1, int(q_lens.max()))
            _check_query_tokens("qo_indptr", s_q)
            if not bool((q_lens == s_q).all()):
                cu_seqlens_q = qo_indptr.to(device=self.device, dtype=torch.int32)
                total = int(cum_q[-1])
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
            batch=batch, s_q=s_q, cu_seqlens_q=cu_seqlens_q, total=total, num_heads=int(num_heads),
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
        batch, cu_seqlens_q = plan["batch"], plan["cu_seqlens_q"]
        s_q = plan["s_q"] or total // batch
        if plan["total"] is not None and plan["total"] != total:
            raise ValueError(
                f"q_nope: expected {plan['total']} rows (qo_indptr[-1] as planned), given {total}"
            )
        if cu_seqlens_q is None and s_q * batch != total:
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
        if cu_seqlens_q is None:
            q = _joined("q_nope, q_pe", q_nope, q_pe, (batch, s_q, h))
            out4 = _view("out", out, (batch, s_q, h, 512))
            lse3 = _view("lse", lse, (batch, s_q, h)) if write_lse else None
        else:  # variable query lengths: packed by query token, as given
            q = _joined("q_nope, q_pe", q_nope, q_pe, (total, h))
            out4 = _view("out", out, (total, h, 512))
            lse3 = _view("lse", lse, (total, h)) if write_lse else None
        _decode(
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
            cu_seqlens_q=cu_seqlens_q,
            max_q_len=s_q if cu_seqlens_q is not None else None,
        )
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
