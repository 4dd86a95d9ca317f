"""mlakit.cp_dist: the communication of a context-parallel decode step over torch.distributed.

One process per rank (a vLLM / SGLang style server, one process per GPU), any backend that
torch.distributed offers (NCCL on GPUs, gloo on CPU). Each rank decodes its shard of the cache
into a partial ``(out, lse)`` (``mlakit.torch.decode`` with ``cp_world``, ``cp_rank``,
``cp_interleave``); then either

    merge_allgather             every rank gathers all N partials and merges them: every rank
                                ends with the whole merged output [b, s_q, h_q, 512]
    merge_reduce_scatter_heads  the partials are exchanged by heads (all-to-all): rank r merges
                                and ends with heads r*h_q/N .. (r+1)*h_q/N - 1 of the output
    sharded_decode              the whole step: this rank's decode, then one of the two merges

The merges run ``mlakit.torch.merge_partials`` on the gathered [N, ...] partials, on the current
stream of the tensors' device (the collectives are ordered with it by torch.distributed). Sinks
are applied once, by the merge (a rank's decode refuses them with cp_world > 1).
docs/context-parallel.md, "The communication", gives the bytes each moves and when to use which.
"""

from __future__ import annotations

from typing import Any, Optional, Set, Tuple, Union

import torch
import torch.distributed as dist

from .torch import decode, merge_partials

__all__ = ["merge_allgather", "merge_reduce_scatter_heads", "sharded_decode"]

_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_MODES = ("allgather", "heads")

# Backends whose all_gather_into_tensor raised (older gloo, MPI): they get all_gather into views of
# the gathered tensor instead. Every rank of a group has the same backend, so all take one path.
_NO_GATHER_INTO_TENSOR: Set[str] = set()


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _group_info(group: Any) -> Tuple[int, int]:
    """(world size, this process's rank in the group)."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "group: expected an initialized torch.distributed process group "
            "(torch.distributed.init_process_group), given none"
        )
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError(f"group: expected a group this process belongs to, given one of {world}")
    return world, rank


def _tensor(name: str, t: Any) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, given {type(t).__name__}")
    return t


def _check(
    name: str,
    t: Optional[torch.Tensor],
    shape: Tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    words: str,
) -> None:
    """``t`` (when given) has ``shape``, ``dtype`` and lives on ``device``; ``words`` says what
    the shape is, for the message."""
    if t is None:
        return
    _tensor(name, t)
    if t.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {_name(dtype)}, given {_name(t.dtype)}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name}: expected shape {words} = {list(shape)}, given {list(t.shape)}")
    if t.device != device:
        raise ValueError(
            f"{name}: expected a tensor on {device} (partial_out's device), given one on {t.device}"
        )


def _check_partials(
    partial_out: Any, partial_lse: Any, sinks: Any
) -> Tuple[torch.Tensor, torch.Tensor, Tuple[int, int, int]]:
    """The checks both merges share; returns the tensors and (b, s_q, h_q)."""
    partial_out = _tensor("partial_out", partial_out)
    if partial_out.dtype not in _OUT_DTYPES:
        raise TypeError(
            f"partial_out: expected dtype bfloat16, float16 or float32, given "
            f"{_name(partial_out.dtype)}"
        )
    if partial_out.dim() != 4 or partial_out.shape[3] != 512:
        raise ValueError(
            f"partial_out: expected shape [b, s_q, h_q, 512] (this rank's partial), given "
            f"{list(partial_out.shape)}"
        )
    rows = tuple(int(n) for n in partial_out.shape[:3])
    device = partial_out.device
    _tensor("partial_lse", partial_lse)
    _check("partial_lse", partial_lse, rows, torch.float32, device, "[b, s_q, h_q]")
    _check("sinks", sinks, (rows[2],), torch.float32, device, "[h_q]")
    return partial_out, partial_lse, rows  # type: ignore[return-value]


def _all_gather(gathered: torch.Tensor, local: torch.Tensor, group: Any) -> None:
    """``gathered`` [N, *local.shape] = every rank's ``local``, in rank order."""
    backend = str(dist.get_backend(group))
    if backend not in _NO_GATHER_INTO_TENSOR:
        try:
            # As the concatenation along dim 0, the one form of the output every backend takes
            # (gloo refuses the stacked [N, ...] form that NCCL also accepts).
            flat = gathered.view((gathered.shape[0] * local.shape[0],) + tuple(local.shape[1:]))
            dist.all_gather_into_tensor(flat, local, group=group)
            return
        except (RuntimeError, NotImplementedError) as e:
            # Only the refusal of the op ("no support for _allgather_base", "does not support"),
            # raised before anything is sent; a failure of the transport propagates.
            if "support" not in str(e).lower():
                raise
            _NO_GATHER_INTO_TENSOR.add(backend)
    dist.all_gather(list(gathered.unbind(0)), local, group=group)


def _single_rank(partial_out, partial_lse, sinks, lse_base2, out, lse):
    """A group of one: no communication. Without sinks or outputs, the rank's own result; else
    the merge of that one partial (the sinks applied, written into out / lse)."""
    if sinks is None and out is None and lse is None:
        return partial_out, partial_lse
    return merge_partials(partial_out.contiguous().unsqueeze(0),
                          partial_lse.contiguous().unsqueeze(0), sinks=sinks, out=out, lse=lse,
                          lse_base2=lse_base2)  # fmt: skip


def merge_allgather(
    partial_out: torch.Tensor,
    partial_lse: torch.Tensor,
    group: Any = None,
    *,
    sinks: Optional[torch.Tensor] = None,
    lse_base2: bool = False,
    out: Optional[torch.Tensor] = None,
    lse: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merges the partials of every rank of ``group``; every rank gets the whole result.

    All-gathers the partial LSEs and outputs ([N, b, s_q, h_q] and [N, b, s_q, h_q, 512]) and
    merges them with ``mlakit.torch.merge_partials``. Collective: every rank of the group calls
    it, with tensors of the same shapes and dtypes.

    Arguments:
        partial_out: [b, s_q, h_q, 512] bfloat16, float16 or float32: this rank's partial output.
        partial_lse: [b, s_q, h_q] float32 on the same device: its LSE (natural log, base 2 with
            ``lse_base2``; -inf: the rank holds none of the row's positions).
        group: the process group (None: the default one).
        sinks: optional [h_q] float32 sink logits, applied by the merge (once).
        lse_base2: the partial LSEs and the returned one in base 2.
        out: [b, s_q, h_q, 512] of partial_out's dtype, written in place; None: a new tensor.
        lse: [b, s_q, h_q] float32, the global LSE, written in place; None: a new tensor.

    Returns:
        ``(out, lse)``. A group of one communicates nothing and returns the rank's own
        ``(partial_out, partial_lse)``, merged alone (a copy, sinks applied) when sinks, out or
        lse are given.
    """
    partial_out, partial_lse, rows = _check_partials(partial_out, partial_lse, sinks)
    device = partial_out.device
    _check("out", out, rows + (512,), partial_out.dtype, device, "[b, s_q, h_q, 512]")
    _check("lse", lse, rows, torch.float32, device, "[b, s_q, h_q]")
    world, _ = _group_info(group)
    if world == 1:
        return _single_rank(partial_out, partial_lse, sinks, lse_base2, out, lse)
    gathered_lse = partial_lse.new_empty((world,) + rows)
    gathered_out = partial_out.new_empty((world,) + rows + (512,))
    _all_gather(gathered_lse, partial_lse.contiguous(), group)
    _all_gather(gathered_out, partial_out.contiguous(), group)
    return merge_partials(gathered_out, gathered_lse, sinks=sinks, out=out, lse=lse,
                          lse_base2=lse_base2)  # fmt: skip


def _by_heads(t: torch.Tensor, world: int) -> torch.Tensor:
    """[b, s_q, h_q, ...] -> [N, b, s_q, h_q / N, ...], contiguous: slice k holds the heads of
    rank k, the layout all_to_all_single sends (and its output is merge_partials')."""
    b, s_q, h_q = t.shape[:3]
    split = t.reshape((b, s_q, world, h_q // world) + tuple(t.shape[3:]))
    return split.movedim(2, 0).contiguous()


def merge_reduce_scatter_heads(
    partial_out: torch.Tensor,
    partial_lse: torch.Tensor,
    group: Any = None,
    *,
    sinks: Optional[torch.Tensor] = None,
    lse_base2: bool = False,
    out: Optional[torch.Tensor] = None,
    lse: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merges the partials of every rank of ``group`` by heads: rank r ends with heads
    ``r * h_q / N .. (r + 1) * h_q / N - 1`` of the result (N the group's size).

    Two ``all_to_all_single``: every rank sends each other rank that rank's heads of its partial
    output and LSE, and receives its own heads of every rank's partial ([N, b, s_q, h_q / N, 512]
    and [N, b, s_q, h_q / N]), which ``mlakit.torch.merge_partials`` merges. Each rank moves 1/N of
    what ``merge_allgather`` moves and merges 1/N of the rows. Collective, as merge_allgather.

    Arguments: as ``merge_allgather``, except
        sinks: [h_q] float32, all the heads' sink logits (the rank applies its slice).
        out: [b, s_q, h_q / N, 512] of partial_out's dtype, this rank's heads; None: a new tensor.
        lse: [b, s_q, h_q / N] float32, their global LSE; None: a new tensor.

    Raises:
        ValueError: h_q is not a multiple of N (the message names both), or an argument's shape
        or device is wrong. TypeError: an argument's type or dtype is wrong.
    """
    partial_out, partial_lse, rows = _check_partials(partial_out, partial_lse, sinks)
    world, rank = _group_info(group)
    b, s_q, h_q = rows
    if h_q % world != 0:
        raise ValueError(
            f"h_q: expected a multiple of the group's world size {world} (heads are split evenly "
            f"over the ranks), given {h_q}"
        )
    heads = h_q // world
    mine = (b, s_q, heads)
    device = partial_out.device
    _check("out", out, mine + (512,), partial_out.dtype, device, "[b, s_q, h_q / N, 512]")
    _check("lse", lse, mine, torch.float32, device, "[b, s_q, h_q / N]")
    if sinks is not None:
        sinks = sinks[rank * heads : (rank + 1) * heads]
    if world == 1:
        return _single_rank(partial_out, partial_lse, sinks, lse_base2, out, lse)
    received_lse = partial_lse.new_empty((world,) + mine)
    received_out = partial_out.new_empty((world,) + mine + (512,))
    dist.all_to_all_single(received_lse, _by_heads(partial_lse, world), group=group)
    dist.all_to_all_single(received_out, _by_heads(partial_out, world), group=group)
    return merge_partials(received_out, received_lse, sinks=sinks, out=out, lse=lse,
                          lse_base2=lse_base2)  # fmt: skip


# Arguments of mlakit.torch.decode that sharded_decode sets itself.
_SET_BY_STEP = ("cp_world", "cp_rank")


def sharded_decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: Optional[torch.Tensor],
    seq_lens: Optional[torch.Tensor],
    *,
    group: Any = None,
    cp_interleave: int = 1,
    mode: str = "allgather",
    sinks: Optional[torch.Tensor] = None,
    lse_base2: bool = False,
    return_lse: bool = False,
    out: Optional[torch.Tensor] = None,
    lse: Optional[torch.Tensor] = None,
    **decode_args: Any,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """One context-parallel decode step on this rank: the decode of its shard, then the merge.

    The rank decodes with ``mlakit.torch.decode(..., cp_world=N, cp_rank=r, cp_interleave=...,
    return_lse=True)`` (N, r: the group's size and this process's rank in it), then merges with
    ``merge_allgather`` (``mode="allgather"``: every rank gets all heads) or
    ``merge_reduce_scatter_heads`` (``mode="heads"``: rank r gets heads r*h_q/N .. (r+1)*h_q/N-1).
    A group of one decodes alone (cp off; the decode applies the sinks) and communicates nothing.

    Arguments:
        q: [b, s_q, h_q, d_qk], every rank the same; with ``cu_seqlens_q`` (variable query
            lengths, a ``decode_args`` entry) packed [total, h_q, d_qk], and out / lse then
            [total, h_q (/ N), 512] / [total, h_q (/ N)].
        kv_cache, block_table: this rank's shard (global position g on rank
            ``mlakit.cp.rank_of(g, N, cp_interleave)`` at local position ``local_position``).
        seq_lens: [b] int32, the GLOBAL lengths.
        group: the process group of the ranks sharing the cache (None: the default one).
        cp_interleave: tokens per shard block (1: vLLM's DCP; 64: SGLang / Helix).
        mode: "allgather" or "heads".
        sinks: optional [h_q] float32 sink logits, applied once, by the merge.
        lse_base2: the LSE in base 2 (the partials' and the returned one).
        return_lse: also return the global LSE (of this rank's heads with mode "heads").
        out, lse: where the merged result goes: [b, s_q, h_q, 512] and [b, s_q, h_q] ("allgather")
            or [b, s_q, h_q / N, 512] and [b, s_q, h_q / N] ("heads"); None: new tensors.
        decode_args: the other arguments of ``mlakit.torch.decode`` (softmax_scale, q_scale,
            k_scale, causal, max_seq_len, out_dtype (the partials'), indices, backend, ...).

    Returns:
        ``out``, or ``(out, lse)`` with ``return_lse`` or a given ``lse``.

    Raises:
        ValueError: an unknown mode, h_q not a multiple of N with mode "heads", cp_interleave < 1,
        wrong shapes or devices. TypeError: cp_world or cp_rank given (the group sets them),
        wrong dtypes.
    """
    if mode not in _MODES:
        raise ValueError(f"mode: expected one of {', '.join(_MODES)}, given {mode!r}")
    for name in _SET_BY_STEP:
        if name in decode_args:
            raise TypeError(f"{name}: set by sharded_decode from the group, not an argument")
    if int(cp_interleave) < 1:
        raise ValueError(f"cp_interleave: expected a value >= 1, given {cp_interleave}")
    _tensor("q", q)
    world, rank = _group_info(group)
    # q [b, s_q, h_q, d_qk], or with cu_seqlens_q (var_q) packed [total, h_q, d_qk].
    var_q = decode_args.get("cu_seqlens_q") is not None
    h_q = int(q.shape[-2]) if q.dim() == (3 if var_q else 4) else 0
    if mode == "heads" and h_q and h_q % world != 0:
        # Before the decode, so that every rank refuses before any communication.
        raise ValueError(
            f"h_q: expected a multiple of the group's world size {world} with mode 'heads', "
            f"given {h_q}"
        )
    want_lse = return_lse or lse is not None
    if world == 1:
        return decode(q, kv_cache, block_table, seq_lens, sinks=sinks, lse_base2=lse_base2,
                      out=out, lse=lse, return_lse=want_lse, **decode_args)  # fmt: skip
    part_out, part_lse = decode(q, kv_cache, block_table, seq_lens, return_lse=True,
                                lse_base2=lse_base2, cp_world=world, cp_rank=rank,
                                cp_interleave=int(cp_interleave), **decode_args)  # fmt: skip
    merge = merge_allgather if mode == "allgather" else merge_reduce_scatter_heads
    if not var_q:
        out, lse = merge(part_out, part_lse, group, sinks=sinks, lse_base2=lse_base2, out=out,
                         lse=lse)  # fmt: skip
        return (out, lse) if want_lse else out
    # var_q: the packed rows merge as requests of one query token each ([total, 1, h_q, ...]).
    given_out, given_lse = out, lse
    out, lse = merge(part_out[:, None], part_lse[:, None], group, sinks=sinks,
                     lse_base2=lse_base2, out=None if out is None else out[:, None],
                     lse=None if lse is None else lse[:, None])  # fmt: skip
    out = given_out if given_out is not None else out[:, 0]
    lse = given_lse if given_lse is not None else lse[:, 0]
    return (out, lse) if want_lse else out
