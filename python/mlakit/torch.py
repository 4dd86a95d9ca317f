"""PyTorch integration: the ``mlakit::decode`` custom op and ``mlakit.torch.decode``, and the
ops of ``mlakit.ops`` as custom ops (``mlakit::append_kv``, ``append_indexer``,
``indexer_logits``, ``topk_indices``) and the context-parallel merge (``mlakit::merge_partials``;
see ``mlakit/_torch_ops.py``).

``torch.ops.mlakit.decode`` writes into ``out`` (and ``lse``) in place and returns nothing. It
has a fake (meta) implementation, so that ``torch.compile(fullgraph=True)`` traces through it
(it runs the checks that the tensors' metadata decides: dtypes, fp8 scales), and
it allocates only through PyTorch's caching allocator on the current stream, so that it can be
captured in CUDA graphs (``torch.cuda.graph``, ``torch.compile(mode="reduce-overhead")``) and
replayed with new ``seq_lens`` and block tables. Decoders are cached per problem signature (see
``mlakit._cache``); the first call of each signature creates one and should come before capture:
``capture_graph`` does that warm-up and the capture in one call.

Requires PyTorch 2.4 or newer (``torch.library.custom_op``).
"""

from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch

from . import _cache, cp
from ._decoder import host_scale

if not hasattr(torch.library, "custom_op"):
    raise ImportError(f"mlakit.torch needs PyTorch 2.4 or newer, found {torch.__version__}")

# The other steps of a V3.2 decode layer as custom ops (mlakit/_torch_ops.py).
from ._torch_ops import (  # noqa: E402
    append_indexer,
    append_kv,
    indexer_logits,
    merge_partials,
    topk_indices,
)

__all__ = [
    "decode",
    "capture_graph",
    "append_kv",
    "append_indexer",
    "indexer_logits",
    "topk_indices",
    "merge_partials",
]


_DTYPES = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.uint8: "fp8_e4m3",  # raw e4m3 bits
}
_FP8 = getattr(torch, "float8_e4m3fn", None)
if _FP8 is not None:
    _DTYPES[_FP8] = "fp8_e4m3"


def _dtype_of(name: str, t: torch.Tensor) -> str:
    kind = _DTYPES.get(t.dtype)
    if kind is None:
        raise TypeError(
            f"{name}: expected dtype bfloat16, float16 or float8_e4m3fn (or uint8 bits), "
            f"given {str(t.dtype).replace('torch.', '')}"
        )
    return kind


# Bytes a token in the DeepSeek V4 cache (448 e4m3 + 64 bf16 + 8 scale bytes), before the page's
# padding; its q has d_qk 512.
_V4_TOKEN_BYTES = 584

# Query tokens a request may have (mlakit::kMaxSq).
_MAX_QUERY_TOKENS = 16


def _page_size(kv_cache: torch.Tensor) -> int:
    # [num_pages, page_size, d], [num_pages, page_size, 1, d] or [num_pages, 1, page_size, d]
    shape = kv_cache.shape
    if kv_cache.dim() == 4 and shape[1] == 1:
        return int(shape[2])
    return int(shape[1]) if kv_cache.dim() >= 2 else 0


def _check_scale(
    name: str,
    tensor: Optional[torch.Tensor],
    value: Optional[float],
    q: torch.Tensor,
    wanted: Optional[bool],
    what: str,
) -> None:
    """One dequantization scale of the op: a one-element float32 tensor on q's device (read at run
    time, so a captured graph follows it) or a finite host value > 0. ``wanted``: True when the
    problem needs it (fp8 q, dense fp8 cache), False when it forbids it (16-bit q or cache), None
    when it is optional (the blockwise cache); ``what`` names the input it scales."""
    if tensor is not None:
        if value is not None:
            raise ValueError(f"{name}: expected a tensor or a float, given both")
        if tensor.dtype != torch.float32:
            dtype = str(tensor.dtype).replace("torch.", "")
            raise TypeError(f"{name}: expected dtype float32, given {dtype}")
        if tensor.numel() != 1:
            raise ValueError(
                f"{name}: expected a one-element float32 array, given shape {list(tensor.shape)}"
            )
        if tensor.device != q.device:
            raise ValueError(
                f"{name}: expected a tensor on {q.device} (q's device), given one on "
                f"{tensor.device}"
            )
    elif value is not None:
        host_scale(name, value)
    given = tensor is not None or value is not None
    if wanted is True and not given:
        raise ValueError(f"{name}: expected a scale (host value or pointer) for {what}, given none")
    if wanted is False and given:
        raise ValueError(f"{name}: expected none for {what}, given a scale")


def _var_q_tokens(q: torch.Tensor, max_q_len: int) -> int:
    """The decoder's s_q with variable query lengths: ``max_q_len``, else a bound read from the
    shape alone (no request has more tokens than q has rows, nor more than 16)."""
    if max_q_len > 0:
        return int(max_q_len)
    return max(1, min(_MAX_QUERY_TOKENS, int(q.shape[0])))


def _check_var_q(
    q: torch.Tensor,
    out: torch.Tensor,
    lse: Optional[torch.Tensor],
    cu_seqlens_q: torch.Tensor,
    max_q_len: int,
) -> None:
    """The metadata checks of variable query lengths: packed rows and [b + 1] int32 offsets on
    q's device (their values are the library's business)."""
    if q.dim() != 3:
        raise ValueError(
            f"q: expected shape [total, h_q, d_qk] (packed by query token, with cu_seqlens_q), "
            f"given {list(q.shape)}"
        )
    if cu_seqlens_q.dtype != torch.int32:
        dtype = str(cu_seqlens_q.dtype).replace("torch.", "")
        raise TypeError(f"cu_seqlens_q: expected dtype int32, given {dtype}")
    if cu_seqlens_q.dim() != 1 or cu_seqlens_q.shape[0] < 2:
        raise ValueError(
            f"cu_seqlens_q: expected shape [b + 1] = [>= 2] (b >= 1 requests), given "
            f"{list(cu_seqlens_q.shape)}"
        )
    if cu_seqlens_q.device != q.device:
        raise ValueError(
            f"cu_seqlens_q: expected a tensor on {q.device} (q's device), given one on "
            f"{cu_seqlens_q.device}"
        )
    if not 0 <= max_q_len <= _MAX_QUERY_TOKENS:
        raise ValueError(
            f"max_q_len: expected 0 (a bound from q's rows) or 1..16, given {max_q_len}"
        )
    rows, heads = int(q.shape[0]), int(q.shape[1])
    for name, t, shape in (("out", out, [rows, heads, 512]), ("lse", lse, [rows, heads])):
        if t is not None and list(t.shape) != shape:
            raise ValueError(
                f"{name}: expected shape {shape} (q's rows, packed by query token), given "
                f"{list(t.shape)}"
            )


def _problem(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    out: torch.Tensor,
    lse: Optional[torch.Tensor],
    sinks: Optional[torch.Tensor],
    indices: Optional[torch.Tensor],
    q_scale_tensor: Optional[torch.Tensor],
    k_scale_tensor: Optional[torch.Tensor],
    q_scale: Optional[float],
    k_scale: Optional[float],
    causal: bool,
    pdl: bool,
    backend: str,
    tactic: int,
    extra_kv_cache: Optional[torch.Tensor] = None,
    extra_indices: Optional[torch.Tensor] = None,
    lse_base2: bool = False,
    cp_world: int = 1,
    cp_rank: int = 0,
    cp_interleave: int = 1,
    cu_seqlens_q: Optional[torch.Tensor] = None,
    max_q_len: int = 0,
) -> Dict[str, Any]:
    """The Decoder arguments of one call, read from the tensors' metadata only (so that the fake
    implementation runs the same checks on fake tensors), with the scales checked against it."""
    var_q = cu_seqlens_q is not None
    if var_q:
        _check_var_q(q, out, lse, cu_seqlens_q, max_q_len)
    elif q.dim() != 4:
        raise ValueError(f"q: expected shape [b, s_q, h_q, d_qk], given {list(q.shape)}")
    elif max_q_len != 0:
        raise ValueError(f"max_q_len: expected 0 without cu_seqlens_q, given {max_q_len}")
    blockwise = kv_cache.dim() >= 1 and kv_cache.shape[-1] == 656
    # The V4 layout: q of d_qk 512 and a cache of 584-byte tokens (FlashMLA's view of its pages).
    v4 = int(q.shape[-1]) == 512
    if v4:
        for name, cache in (("kv_cache", kv_cache), ("extra_kv_cache", extra_kv_cache)):
            if cache is not None and (
                cache.dim() not in (3, 4) or int(cache.shape[-1]) != _V4_TOKEN_BYTES
            ):
                raise ValueError(
                    f"{name}: expected [num_pages, page_size, (1,) 584] bytes (the V4 layout, "
                    f"for a q of d_qk 512), given shape {list(cache.shape)}"
                )
    q_dtype = _dtype_of("q", q)
    kv_dtype = "fp8_e4m3" if blockwise or v4 else _dtype_of("kv_cache", kv_cache)
    _check_scale("q_scale", q_scale_tensor, q_scale, q, q_dtype == "fp8_e4m3",
                 "an fp8 q" if q_dtype == "fp8_e4m3" else f"a {q_dtype} q")  # fmt: skip
    if blockwise or v4:
        k_wanted, k_what = None, "fp8_v4" if v4 else "fp8_blockwise"
    elif kv_dtype == "fp8_e4m3":
        k_wanted, k_what = True, "an fp8 cache"
    else:
        k_wanted, k_what = False, f"a {kv_dtype} cache"
    _check_scale("k_scale", k_scale_tensor, k_scale, q, k_wanted, k_what)
    if q.device.type == "cpu" and backend == "auto":
        backend = "cpu"  # host tensors: the only backend that reads host memory
    return dict(
        h_q=int(q.shape[-2]),
        s_q=_var_q_tokens(q, max_q_len) if var_q else int(q.shape[1]),
        page_size=_page_size(kv_cache),
        q_dtype=q_dtype,
        kv_dtype=kv_dtype,
        out_dtype=_dtype_of("out", out),
        kv_layout="fp8_v4" if v4 else "fp8_blockwise" if blockwise else "dense",
        causal=causal,
        var_q=var_q,
        sinks=sinks is not None,
        topk=int(indices.shape[-1]) if indices is not None else 0,
        lse=lse is not None,
        lse_base2=bool(lse_base2),
        pdl=pdl,
        backend=backend,
        tactic=tactic,
        extra_topk=int(extra_indices.shape[-1]) if extra_indices is not None else 0,
        extra_page_size=_page_size(extra_kv_cache) if extra_kv_cache is not None else 0,
        cp_world=int(cp_world),
        cp_rank=int(cp_rank),
        cp_interleave=int(cp_interleave),
    )


@torch.library.custom_op("mlakit::decode", mutates_args=("out", "lse"))
def _decode_op(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: Optional[torch.Tensor],
    seq_lens: Optional[torch.Tensor],
    out: torch.Tensor,
    lse: Optional[torch.Tensor],
    sinks: Optional[torch.Tensor],
    indices: Optional[torch.Tensor],
    topk_lens: Optional[torch.Tensor],
    q_scale_tensor: Optional[torch.Tensor],
    k_scale_tensor: Optional[torch.Tensor],
    softmax_scale: float,
    q_scale: Optional[float],
    k_scale: Optional[float],
    causal: bool,
    max_seq_len: int,
    pdl: bool,
    backend: str,
    tactic: int,
    # Last and optional, so that calls of the op made before the extra cache existed still work.
    extra_kv_cache: Optional[torch.Tensor] = None,
    extra_indices: Optional[torch.Tensor] = None,
    extra_topk_lens: Optional[torch.Tensor] = None,
    lse_base2: bool = False,
    cp_world: int = 1,
    cp_rank: int = 0,
    cp_interleave: int = 1,
    cu_seqlens_q: Optional[torch.Tensor] = None,
    max_q_len: int = 0,
) -> None:
    problem = _problem(q, kv_cache, out, lse, sinks, indices, q_scale_tensor, k_scale_tensor,
                       q_scale, k_scale, causal, pdl, backend, tactic, extra_kv_cache,
                       extra_indices, lse_base2, cp_world, cp_rank, cp_interleave, cu_seqlens_q,
                       max_q_len)  # fmt: skip
    if max_seq_len > 0:
        seq_len = max_seq_len
    elif problem["topk"] > 0:
        seq_len = problem["topk"]
    else:
        pages = int(block_table.shape[-1]) if block_table is not None else 1
        seq_len = pages * problem["page_size"]
        if cp_world > 1 and 0 <= cp_rank < cp_world and cp_interleave >= 1:
            # The table addresses local positions; the longest global length whose local part
            # fits is the global position of the first local one past it. (Invalid cp fields are
            # left to the library's validation, which names them.)
            seq_len = cp.global_position(seq_len, cp_world, cp_rank, cp_interleave)
    device = q.device
    key = (device.type, device.index)
    batch = int(cu_seqlens_q.shape[0]) - 1 if cu_seqlens_q is not None else int(q.shape[0])
    if device.type == "cuda":
        with torch.cuda.device(device):
            decoder = _cache.decoder_for(key, batch, seq_len, **problem)
    else:
        decoder = _cache.decoder_for(key, batch, seq_len, **problem)

    workspace = None
    if decoder.workspace_bytes > 0:
        # Fresh from the caching allocator on the current stream: concurrent streams and CUDA
        # graphs (the graph's private pool) each get their own.
        workspace = torch.empty(decoder.workspace_bytes, dtype=torch.uint8, device=device)
    decoder.run(
        q,
        kv_cache,
        block_table,
        seq_lens,
        out=out,
        lse=lse,
        softmax_scale=softmax_scale,
        q_scale=q_scale_tensor if q_scale_tensor is not None else q_scale,
        k_scale=k_scale_tensor if k_scale_tensor is not None else k_scale,
        sinks=sinks,
        indices=indices,
        topk_lens=topk_lens,
        workspace=workspace,
        extra_kv_cache=extra_kv_cache,
        extra_indices=extra_indices,
        extra_topk_lens=extra_topk_lens,
        cu_seqlens_q=cu_seqlens_q,
    )


@_decode_op.register_fake
def _decode_fake(
    q, kv_cache, block_table, seq_lens, out, lse, sinks, indices, topk_lens, q_scale_tensor,
    k_scale_tensor, softmax_scale, q_scale, k_scale, causal, max_seq_len, pdl, backend, tactic,
    extra_kv_cache=None, extra_indices=None, extra_topk_lens=None, lse_base2=False, cp_world=1,
    cp_rank=0, cp_interleave=1, cu_seqlens_q=None, max_q_len=0,
):  # fmt: skip
    # Writes out (and lse) in place and returns nothing; the checks that metadata decides (dtypes,
    # scales, the shapes of packed rows) raise here as they would at run time, so that
    # torch.compile reports them.
    _problem(q, kv_cache, out, lse, sinks, indices, q_scale_tensor, k_scale_tensor, q_scale,
             k_scale, causal, pdl, backend, tactic, extra_kv_cache, extra_indices,
             lse_base2, cp_world, cp_rank, cp_interleave, cu_seqlens_q, max_q_len)  # fmt: skip
    return None


def _split_scale(scale: Union[None, float, torch.Tensor]):
    """A scale as the op takes it: (tensor, None) or (None, float)."""
    if isinstance(scale, torch.Tensor):
        return scale, None
    return None, (None if scale is None else float(scale))


def decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: Optional[torch.Tensor] = None,
    seq_lens: Optional[torch.Tensor] = None,
    *,
    out: Optional[torch.Tensor] = None,
    lse: Optional[torch.Tensor] = None,
    return_lse: bool = False,
    lse_base2: bool = False,
    softmax_scale: Optional[float] = None,
    q_scale: Union[None, float, torch.Tensor] = None,
    k_scale: Union[None, float, torch.Tensor] = None,
    sinks: Optional[torch.Tensor] = None,
    indices: Optional[torch.Tensor] = None,
    topk_lens: Optional[torch.Tensor] = None,
    extra_kv_cache: Optional[torch.Tensor] = None,
    extra_indices: Optional[torch.Tensor] = None,
    extra_topk_lens: Optional[torch.Tensor] = None,
    causal: bool = True,
    max_seq_len: Optional[int] = None,
    out_dtype: Optional[torch.dtype] = None,
    pdl: bool = False,
    backend: str = "auto",
    tactic: int = -1,
    cp_world: int = 1,
    cp_rank: int = 0,
    cp_interleave: int = 1,
    cu_seqlens_q: Optional[torch.Tensor] = None,
    max_q_len: Optional[int] = None,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """MLA decode on PyTorch tensors through the ``mlakit::decode`` custom op.

    The problem (heads, s_q, page size, dtypes, layout, features) is read from the tensors;
    ``sinks``, ``indices`` (sparse, topk = indices.shape[-1]), ``extra_kv_cache`` with
    ``extra_indices`` (the extra cache, extra_topk = extra_indices.shape[-1], its page size from
    its shape) and ``lse`` / ``return_lse`` turn the matching features on. A q of d_qk 512 means
    the DeepSeek V4 layout: the caches are FlashMLA's [num_pages, page_size, (1,) 584] uint8 /
    float8_e4m3fn views of pages of page_size * 584 bytes padded to a multiple of 576. Shapes and
    the meaning of each argument are those of ``mlakit.Decoder.run``. Works under
    ``torch.compile(fullgraph=True)`` and CUDA graph capture.

    q and the cache may be ``torch.float8_e4m3fn`` (or their bits as ``torch.uint8``); their
    scales ``q_scale`` / ``k_scale`` are floats or one-element float32 tensors on q's device,
    read at run time (a captured CUDA graph follows a tensor whose value changes).

    Arguments beyond ``Decoder.run``'s:
        return_lse: also return the LSE [b, s_q, h_q] float32 (allocated unless ``lse`` is given).
        lse_base2: the LSE in base 2 (natural * log2(e), -inf stays -inf; mlakit.h, "LSE").
        causal: with s_q > 1, token t sees positions < L - s_q + 1 + t.
        softmax_scale: None: 1/sqrt(d_qk) (d_qk = q.shape[-1]).
        max_seq_len: bound on the cached lengths for sizing the decoder; None: what the block
            table can address (``block_table.shape[1] * page_size``; with ``cp_world > 1`` the
            longest global length whose local part fits that), or topk when sparse.
        out_dtype: dtype of a new ``out``; None: the cache's dtype if 16-bit, else q's, else
            bfloat16.
        pdl, backend, tactic: as for ``mlakit.Decoder`` (host tensors use the cpu backend).
        cp_world, cp_rank, cp_interleave: context parallelism, as for ``mlakit.Decoder``: the
            cache and block table are this rank's shard, ``seq_lens`` global; needs an lse and no
            sinks (the merge applies them). ``mlakit.cp.sharded_decode`` runs the whole step.
        cu_seqlens_q: variable query lengths (``mlakit.Decoder``'s var_q): [b + 1] int32 offsets
            on q's device; q is then packed by query token, [total, h_q, d_qk], and out / lse
            are [total, h_q, 512] / [total, h_q] (rows past cu_seqlens_q[b] are left as they
            are). Never read on the host.
        max_q_len: with cu_seqlens_q, the most query tokens any request has (the decoder's
            s_q); None: a bound from the shape alone, min(16, q.shape[0]).

    Returns:
        ``out`` [b, s_q, h_q, 512] ([total, h_q, 512] with cu_seqlens_q), or ``(out, lse)`` when
        an lse was given or asked for.
    """
    if out is None:
        if out_dtype is None:
            if kv_cache.dtype in (torch.bfloat16, torch.float16):
                out_dtype = kv_cache.dtype
            elif q.dtype in (torch.bfloat16, torch.float16):
                out_dtype = q.dtype
            else:
                out_dtype = torch.bfloat16
        out = q.new_empty(tuple(q.shape[:-1]) + (512,), dtype=out_dtype)
    if lse is None and return_lse:
        lse = q.new_empty(tuple(q.shape[:-1]), dtype=torch.float32)
    q_scale_tensor, q_scale_value = _split_scale(q_scale)
    k_scale_tensor, k_scale_value = _split_scale(k_scale)
    torch.ops.mlakit.decode(
        q,
        kv_cache,
        block_table,
        seq_lens,
        out,
        lse,
        sinks,
        indices,
        topk_lens,
        q_scale_tensor,
        k_scale_tensor,
        int(q.shape[-1]) ** -0.5 if softmax_scale is None else float(softmax_scale),
        q_scale_value,
        k_scale_value,
        causal,
        0 if max_seq_len is None else int(max_seq_len),
        pdl,
        backend,
        tactic,
        extra_kv_cache,
        extra_indices,
        extra_topk_lens,
        bool(lse_base2),
        int(cp_world),
        int(cp_rank),
        int(cp_interleave),
        cu_seqlens_q,
        0 if max_q_len is None else int(max_q_len),
    )
    return (out, lse) if lse is not None else out


def capture_graph(fn: Callable[[], Any], warmups: int = 2) -> "torch.cuda.CUDAGraph":
    """``fn`` captured in a new ``torch.cuda.CUDAGraph``, after ``warmups`` calls on a side stream.

    The warm-up is the one PyTorch's CUDA graph documentation asks for: what a first call does
    that capture forbids (mlakit creating a decoder, which may allocate and synchronize; lazy
    library initialization) happens before the capture, on a side stream that waits for the
    current one and that the current one then waits for. ``fn`` takes no arguments and reads and
    writes tensors that stay in place: replay with ``graph.replay()`` after writing new inputs
    (``seq_lens``, block tables, queries, scale tensors) into them. Needs a CUDA device; the
    capture runs on the current device.

    Args:
        fn: the step to capture, called ``warmups + 1`` times (the last call is captured).
        warmups: calls before the capture; 0 skips the warm-up.

    Returns:
        The captured graph. The captured call launches no kernels: until the first replay,
        ``fn``'s outputs hold the last warm-up call's results.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("capture_graph: expected a CUDA device, found none")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph
