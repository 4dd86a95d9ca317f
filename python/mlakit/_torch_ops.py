"""The ops of ``mlakit.ops`` as PyTorch custom ops (imported by ``mlakit.torch``).

``torch.ops.mlakit.append_kv`` and ``append_indexer`` write their cache in place;
``indexer_logits`` and ``topk_indices`` write their outputs (``logits``; ``indices`` and
``positions``, and a given top-k ``workspace`` as scratch) in place; ``merge_partials``
(``mlakit.cp``) writes ``out`` and ``lse`` in place. Each declares what it mutates and has a fake
implementation that runs the checks tensor metadata decides, so that
torch.compile(fullgraph=True) traces through them.
CUDA tensors run on the current stream without host synchronization, so a captured CUDA graph
replays them with new slot mappings, lengths and block tables. The functional wrappers below
allocate outputs through PyTorch (the graph's pool during capture).
"""

from typing import Optional, Tuple, Union

import torch

from . import cp, ops

_INDEXER_TOKEN_BYTES = ops.INDEXER_DIM + 4
_16BIT = (torch.bfloat16, torch.float16)
_FP8 = getattr(torch, "float8_e4m3fn", None)
_BYTES = tuple(t for t in (torch.uint8, torch.int8, _FP8) if t is not None)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _need(name: str, t: torch.Tensor, dtypes, words: str, ndim: Optional[int] = None) -> None:
    if t.dtype not in dtypes:
        raise TypeError(f"{name}: expected dtype {words}, given {_name(t.dtype)}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D tensor, given shape {list(t.shape)}")


def _same_device(first: torch.Tensor, **others: Optional[torch.Tensor]) -> None:
    for name, t in others.items():
        if t is not None and t.device != first.device:
            raise ValueError(
                f"{name}: expected a tensor on {first.device} (where the op runs), given one on "
                f"{t.device}"
            )


def _check_append_kv(kv, slot_mapping, kv_cache, k_scale_tensor, kv_layout) -> None:
    _need("kv", kv, _16BIT, "bfloat16 or float16", 2)
    _need("slot_mapping", slot_mapping, (torch.int64,), "int64", 1)
    if kv_layout == "dense":
        _need("kv_cache", kv_cache, _16BIT + _BYTES, "bfloat16, float16 or float8_e4m3fn")
    else:
        _need("kv_cache", kv_cache, _BYTES, "a 1-byte type (uint8, int8 or float8_e4m3fn)")
    if k_scale_tensor is not None:
        _need("k_scale", k_scale_tensor, (torch.float32,), "float32")
    _same_device(kv, slot_mapping=slot_mapping, kv_cache=kv_cache, k_scale=k_scale_tensor)


@torch.library.custom_op("mlakit::append_kv", mutates_args=("kv_cache",))
def _append_kv_op(
    kv: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_cache: torch.Tensor,
    k_scale_tensor: Optional[torch.Tensor],
    k_scale: Optional[float],
    kv_layout: str,
    page_size: int,
    pdl: bool = False,
) -> None:
    _check_append_kv(kv, slot_mapping, kv_cache, k_scale_tensor, kv_layout)
    ops.append_kv(kv, slot_mapping, kv_cache, kv_layout=kv_layout,
                  page_size=page_size if page_size > 0 else None,
                  k_scale=k_scale_tensor if k_scale_tensor is not None else k_scale,
                  pdl=pdl)  # fmt: skip


@_append_kv_op.register_fake
def _append_kv_fake(kv, slot_mapping, kv_cache, k_scale_tensor, k_scale, kv_layout, page_size,
                    pdl=False):  # fmt: skip
    _check_append_kv(kv, slot_mapping, kv_cache, k_scale_tensor, kv_layout)


@torch.library.custom_op("mlakit::append_indexer", mutates_args=("index_cache",))
def _append_indexer_op(
    k: torch.Tensor,
    slot_mapping: torch.Tensor,
    index_cache: torch.Tensor,
    scale: str,
    pdl: bool = False,
) -> None:
    _check_append_indexer(k, slot_mapping, index_cache)
    ops.append_indexer(k, slot_mapping, index_cache, scale=scale, pdl=pdl)


def _check_append_indexer(k, slot_mapping, index_cache) -> None:
    _need("k", k, _16BIT, "bfloat16 or float16", 2)
    _need("slot_mapping", slot_mapping, (torch.int64,), "int64", 1)
    _need("index_cache", index_cache, _BYTES, "uint8", 2)
    _same_device(k, slot_mapping=slot_mapping, index_cache=index_cache)


@_append_indexer_op.register_fake
def _append_indexer_fake(k, slot_mapping, index_cache, scale, pdl=False):
    _check_append_indexer(k, slot_mapping, index_cache)


def _check_logits(q, weights, index_cache, block_table, seq_lens, logits) -> None:
    _need("q", q, _BYTES, "float8_e4m3fn (or its bits as uint8)", 4)
    _need("weights", weights, (torch.float32,), "float32")
    _need("index_cache", index_cache, _BYTES, "uint8", 2)
    _need("block_table", block_table, (torch.int32,), "int32", 2)
    _need("seq_lens", seq_lens, (torch.int32,), "int32", 1)
    _need("logits", logits, (torch.float32,), "float32", 2)
    _same_device(q, weights=weights, index_cache=index_cache, block_table=block_table,
                 seq_lens=seq_lens, logits=logits)  # fmt: skip


@torch.library.custom_op("mlakit::indexer_logits", mutates_args=("logits",))
def _indexer_logits_op(
    q: torch.Tensor,
    weights: torch.Tensor,
    index_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    logits: torch.Tensor,
    pdl: bool = False,
) -> None:
    _check_logits(q, weights, index_cache, block_table, seq_lens, logits)
    ops.indexer_logits(q, weights, index_cache, block_table, seq_lens, logits=logits, pdl=pdl)


@_indexer_logits_op.register_fake
def _indexer_logits_fake(q, weights, index_cache, block_table, seq_lens, logits, pdl=False):
    _check_logits(q, weights, index_cache, block_table, seq_lens, logits)


def _check_topk(logits, seq_lens, block_table, indices, positions, workspace) -> None:
    _need("logits", logits, (torch.float32,), "float32", 2)
    _need("seq_lens", seq_lens, (torch.int32,), "int32", 1)
    _need("block_table", block_table, (torch.int32,), "int32", 2)
    _need("indices", indices, (torch.int32,), "int32")
    if positions is not None:
        _need("positions", positions, (torch.int32,), "int32")
    if workspace is not None:
        _need("workspace", workspace, (torch.uint8,), "uint8")
    _same_device(logits, seq_lens=seq_lens, block_table=block_table, indices=indices,
                 positions=positions, workspace=workspace)  # fmt: skip


# The workspace is the multi-block kernel's scratch: None has the op allocate one when the shapes
# need it, through the caching allocator on the current stream (the graph's pool during CUDA
# graph capture). It has no default: the dispatcher drops trailing arguments equal to their
# defaults, and torch's version counter of a mutated argument then indexes past them.
@torch.library.custom_op("mlakit::topk_indices", mutates_args=("indices", "positions", "workspace"))
def _topk_op(
    logits: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    indices: torch.Tensor,
    positions: Optional[torch.Tensor],
    page_size: int,
    next_n: int,
    max_len: int,
    workspace: Optional[torch.Tensor],
    one_block: bool = False,
    deterministic: bool = True,
    pdl: bool = False,
) -> None:
    _check_topk(logits, seq_lens, block_table, indices, positions, workspace)
    ops.topk_indices(logits, seq_lens, block_table, page_size=page_size, next_n=next_n,
                     max_len=max_len, indices=indices, positions=positions, workspace=workspace,
                     one_block=one_block, deterministic=deterministic, pdl=pdl)  # fmt: skip


@_topk_op.register_fake
def _topk_fake(logits, seq_lens, block_table, indices, positions, page_size, next_n, max_len,
               workspace, one_block=False, deterministic=True, pdl=False):  # fmt: skip
    _check_topk(logits, seq_lens, block_table, indices, positions, workspace)


_MERGE = (torch.bfloat16, torch.float16, torch.float32)


def _check_merge(partial_out, partial_lse, sinks, out, lse) -> None:
    _need("partial_out", partial_out, _MERGE, "bfloat16, float16 or float32", 5)
    _need("partial_lse", partial_lse, (torch.float32,), "float32", 4)
    if sinks is not None:
        _need("sinks", sinks, (torch.float32,), "float32", 1)
    if out.dtype != partial_out.dtype:
        raise TypeError(
            f"out: expected dtype {_name(partial_out.dtype)} (partial_out's), given "
            f"{_name(out.dtype)}"
        )
    _need("lse", lse, (torch.float32,), "float32", 3)
    _same_device(partial_out, partial_lse=partial_lse, sinks=sinks, out=out, lse=lse)


@torch.library.custom_op("mlakit::merge_partials", mutates_args=("out", "lse"))
def _merge_op(
    partial_out: torch.Tensor,
    partial_lse: torch.Tensor,
    sinks: Optional[torch.Tensor],
    out: torch.Tensor,
    lse: torch.Tensor,
    lse_base2: bool = False,
) -> None:
    _check_merge(partial_out, partial_lse, sinks, out, lse)
    cp.merge_partials(partial_out, partial_lse, sinks=sinks, out=out, lse=lse, lse_base2=lse_base2)


@_merge_op.register_fake
def _merge_fake(partial_out, partial_lse, sinks, out, lse, lse_base2=False):
    _check_merge(partial_out, partial_lse, sinks, out, lse)


# --- functional wrappers -------------------------------------------------------------------------


def append_kv(
    kv: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_cache: torch.Tensor,
    *,
    kv_layout: str = "dense",
    page_size: Optional[int] = None,
    k_scale: Union[None, float, torch.Tensor] = None,
    pdl: bool = False,
) -> torch.Tensor:
    """``mlakit.ops.append_kv`` through ``torch.ops.mlakit.append_kv``: writes ``kv_cache`` in
    place and returns it. ``k_scale``: a float or a one-element float32 tensor on kv's device;
    ``pdl``: programmatic dependent launch (as ``mlakit.ops.append_kv``'s)."""
    layout = ops._LAYOUTS.get(str(kv_layout).lower())
    if layout is None:
        raise ValueError(
            f"kv_layout: expected dense, fp8_blockwise (v32) or fp8_v4 (v4), given {kv_layout}"
        )
    tensor = k_scale if isinstance(k_scale, torch.Tensor) else None
    value = None if k_scale is None or tensor is not None else float(k_scale)
    torch.ops.mlakit.append_kv(kv, slot_mapping, kv_cache, tensor, value, layout,
                               0 if page_size is None else int(page_size), bool(pdl))  # fmt: skip
    return kv_cache


def append_indexer(
    k: torch.Tensor,
    slot_mapping: torch.Tensor,
    index_cache: torch.Tensor,
    *,
    scale: str = "amax",
    pdl: bool = False,
) -> torch.Tensor:
    """``mlakit.ops.append_indexer`` through ``torch.ops.mlakit.append_indexer`` (in place)."""
    torch.ops.mlakit.append_indexer(k, slot_mapping, index_cache, scale, bool(pdl))
    return index_cache


def indexer_logits(
    q: torch.Tensor,
    weights: torch.Tensor,
    index_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    max_len: Optional[int] = None,
    logits: Optional[torch.Tensor] = None,
    pdl: bool = False,
) -> torch.Tensor:
    """``mlakit.ops.indexer_logits`` through ``torch.ops.mlakit.indexer_logits``; a new
    ``logits`` [b * next_n, max_len] float32 unless given (max_len: None is what the block table
    addresses). CUDA tensors need sm_89 or newer."""
    if logits is None:
        if q.dim() != 4 or index_cache.dim() != 2:
            raise ValueError(
                f"q: expected shape [b, next_n, heads, 128] and index_cache [num_pages, "
                f"page_size * 132], given {list(q.shape)} and {list(index_cache.shape)}"
            )
        if max_len is None:
            page_size = int(index_cache.shape[1]) // _INDEXER_TOKEN_BYTES
            max_len = int(block_table.shape[-1]) * page_size
        rows = int(q.shape[0]) * int(q.shape[1])
        logits = torch.empty((rows, int(max_len)), dtype=torch.float32, device=q.device)
    torch.ops.mlakit.indexer_logits(q, weights, index_cache, block_table, seq_lens, logits,
                                    bool(pdl))  # fmt: skip
    return logits


def topk_indices(
    logits: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    *,
    k: Optional[int] = None,
    page_size: int,
    next_n: int = 1,
    max_len: Optional[int] = None,
    indices: Optional[torch.Tensor] = None,
    positions: Optional[torch.Tensor] = None,
    return_positions: bool = False,
    workspace: Optional[torch.Tensor] = None,
    one_block: bool = False,
    deterministic: bool = True,
    pdl: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """``mlakit.ops.topk_indices`` through ``torch.ops.mlakit.topk_indices``: new ``indices``
    [b, next_n, k] int32 (the sparse decode's) unless given; ``(indices, positions)`` when
    positions are given or asked for. On CUDA tensors rows of 8192 positions and more run the
    multi-block kernel, its workspace from the caching allocator unless ``workspace`` (uint8, at
    least ``mlakit.ops.topk_workspace_bytes(...)`` bytes) is given; ``one_block=True``: the
    one-block kernel; ``deterministic=False``: as ``mlakit.ops.topk_indices``'s (opt-in)."""
    if indices is None:
        if k is None:
            raise ValueError("k: expected a value 1..65536 (or indices=), given None")
        shape = (int(seq_lens.shape[0]), int(next_n), int(k))
        indices = torch.empty(shape, dtype=torch.int32, device=logits.device)
    if positions is None and return_positions:
        positions = torch.empty_like(indices)
    if max_len is None:
        max_len = int(logits.shape[-1])
    torch.ops.mlakit.topk_indices(logits, seq_lens, block_table, indices, positions,
                                  int(page_size), int(next_n), int(max_len), workspace,
                                  bool(one_block), bool(deterministic), bool(pdl))  # fmt: skip
    return (indices, positions) if positions is not None else indices


def merge_partials(
    partial_out: torch.Tensor,
    partial_lse: torch.Tensor,
    *,
    sinks: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    lse: Optional[torch.Tensor] = None,
    lse_base2: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``mlakit.cp.merge_partials`` through ``torch.ops.mlakit.merge_partials``: new ``out``
    [b, s_q, h_q, 512] (partial_out's dtype) and ``lse`` [b, s_q, h_q] float32 unless given;
    returns ``(out, lse)``. CUDA tensors run on the current stream. ``lse_base2``: the partial
    LSEs and the returned one in base 2."""
    if partial_out.dim() != 5:
        raise ValueError(
            f"partial_out: expected shape [world, b, s_q, h_q, 512], given "
            f"{list(partial_out.shape)}"
        )
    rows = tuple(int(n) for n in partial_out.shape[1:4])
    if out is None:
        out = torch.empty(rows + (512,), dtype=partial_out.dtype, device=partial_out.device)
    if lse is None:
        lse = torch.empty(rows, dtype=torch.float32, device=partial_out.device)
    torch.ops.mlakit.merge_partials(partial_out, partial_lse, sinks, out, lse, bool(lse_base2))
    return out, lse
