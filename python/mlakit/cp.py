"""mlakit.cp: context parallel decode (docs/context-parallel.md; the C++ is mlakit/cp.h).

A request's cache is sharded over ``world`` ranks in runs of ``interleave`` positions: global
position g lives on rank ``(g // interleave) % world`` at local position
``(g // (interleave * world)) * interleave + g % interleave``. Each rank decodes its shard with
``mlakit.Decoder(..., lse=True, cp_world=world, cp_rank=rank, cp_interleave=interleave)`` (the
global ``seq_lens``, a block table of its local pages) into a partial ``(out, lse)``; the caller
gathers the partials of all ranks (its own communication: NCCL, torch.distributed) and
``merge_partials`` combines them, applying the sinks.

    local_len        how many of the global positions 0..len-1 a rank holds
    local_position   a global position's local position on its rank
    rank_of          the rank that holds a global position
    global_position  the global position of a rank's local position
    merge_partials   the partials of all ranks -> the attention output (and the global LSE)

With PyTorch, the communication of the step over torch.distributed (``mlakit.cp_dist``, imported
on first use so that this module needs no PyTorch):

    merge_allgather             all-gather of the partials, every rank merges all heads
    merge_reduce_scatter_heads  all-to-all by heads, rank r merges heads r*h_q/N .. (r+1)*h_q/N-1
    sharded_decode              this rank's decode (mlakit.torch.decode) and one of the merges
"""

from __future__ import annotations

from typing import Any, Tuple

from . import _arrays, _mlakit
from .ops import _placement, _shape

__all__ = ["local_len", "local_position", "rank_of", "global_position", "merge_partials"]

_DIST = ("merge_allgather", "merge_reduce_scatter_heads", "sharded_decode")


def __getattr__(name: str) -> Any:
    # The torch.distributed functions, re-exported without importing PyTorch with this module.
    if name in _DIST:
        from . import cp_dist

        return getattr(cp_dist, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check(world: int, interleave: int, rank: int = 0) -> None:
    if world < 1:
        raise ValueError(f"world: expected a value >= 1, given {world}")
    if interleave < 1:
        raise ValueError(f"interleave: expected a value >= 1, given {interleave}")
    if not 0 <= rank < world:
        raise ValueError(f"rank: expected 0..{world - 1}, given {rank}")


def _position(name: str, value: int) -> int:
    value = int(value)
    if value < 0:
        raise ValueError(f"{name}: expected a value >= 0, given {value}")
    return value


def rank_of(g: int, world: int, interleave: int = 1) -> int:
    """The rank that holds global position ``g`` (``mlakit::cp_rank_of``)."""
    _check(world, interleave)
    return _position("g", g) // interleave % world


def local_position(g: int, world: int, interleave: int = 1) -> int:
    """Global position ``g``'s local position on its rank (``mlakit::cp_local_position``)."""
    _check(world, interleave)
    g = _position("g", g)
    return g // (interleave * world) * interleave + g % interleave


def global_position(j: int, world: int, rank: int, interleave: int = 1) -> int:
    """The global position of local position ``j`` on ``rank`` (``mlakit::cp_global_position``)."""
    _check(world, interleave, rank)
    j = _position("j", j)
    return j // interleave * (interleave * world) + rank * interleave + j % interleave


def local_len(length: int, world: int, rank: int, interleave: int = 1) -> int:
    """How many of the global positions 0..length-1 live on ``rank`` (``mlakit::cp_local_len``):
    the local length of a request of global length ``length``. Local positions keep the global
    order, so a rank's positions below n are its first ``local_len(n, ...)`` local ones."""
    _check(world, interleave, rank)
    length = _position("length", length)
    round_ = interleave * world
    rest = length % round_ - rank * interleave
    return length // round_ * interleave + min(max(rest, 0), interleave)


# Element types of partial_out / out as the extension names them (uint16: bf16 bits, as the
# Decoder's outputs without ml_dtypes).
_OUT_KINDS = {
    "bfloat16": "bf16",
    "uint16": "bf16",
    "float16": "fp16",
    "float32": "fp32",
}


def merge_partials(
    partial_out: Any,
    partial_lse: Any,
    *,
    sinks: Any = None,
    out: Any = None,
    lse: Any = None,
    stream: Any = None,
    lse_base2: bool = False,
) -> Tuple[Any, Any]:
    """Combines the partial results of ``world`` ranks; returns ``(out, lse)``.

    Per row (request, token, head), with lse_k the partial LSE of rank k: ``m = max_k lse_k``,
    ``w_k = exp(lse_k - m)``, ``out = sum_k w_k out_k / sum_k w_k``, ``lse = m + log(sum_k
    w_k)``; with sinks, ``out *= 1 / (1 + exp(sinks[h] - lse))`` (lse unchanged). A partial with
    lse -inf (a rank that holds none of the row's positions) is skipped, its out not read; a
    row whose partials are all -inf gives out 0 and lse -inf. Accumulation is in fp32. With
    ``lse_base2`` the partial LSEs are given and the LSE is returned in base 2 (what decoders made
    with ``lse_base2=True`` write: ``w_k = exp2(lse_k - m)``, ``lse = m + log2(sum_k w_k)``); the
    sinks stay natural-log logits.

    Arrays come from NumPy or PyTorch (or any DLPack framework) and are used in place; all must
    be in the same memory. Host memory runs the cpu merge (synchronous); CUDA memory runs the
    CUDA kernel on the current stream of the arrays' framework (or ``stream=``), without
    allocation or host synchronization (graph-capturable, given ``out`` and ``lse``).

    Arguments:
        partial_out: [world, b, s_q, h_q, 512] bfloat16 (or its bits as uint16), float16 or
            float32, C-contiguous: the ranks' outputs stacked (an all-gather's result).
        partial_lse: [world, b, s_q, h_q] float32, natural log (base 2 with ``lse_base2``), -inf =
            empty partial.
        sinks: optional [h_q] float32 sink logits (-inf: no sink for that head).
        out: [b, s_q, h_q, 512] of partial_out's dtype, written in place; None: a new array.
        lse: [b, s_q, h_q] float32, the global LSE, written in place; None: a new array.
        stream: CUDA arrays: None is the framework's current stream, or an int / stream object.
        lse_base2: partial_lse and the returned lse in base 2 (mlakit.h, "LSE").

    Raises:
        TypeError: an argument is not an array, or has the wrong dtype.
        ValueError: a wrong shape, device or value (library checks included: world
            1..kMaxCpWorld, h_q 1..128, overlapping outputs).
        NotImplementedError: CUDA arrays with a build without CUDA.
    """
    shape = _shape("partial_out", partial_out)
    dtype = str(getattr(partial_out, "dtype", "")).replace("torch.", "").lower()
    kind = _OUT_KINDS.get(dtype)
    if kind is None:
        raise TypeError(
            "partial_out: expected dtype bfloat16 (or its bits as uint16), float16 or float32, "
            f"given {dtype}"
        )
    if len(shape) != 5 or shape[4] != 512:
        raise ValueError(
            f"partial_out: expected shape [world, b, s_q, h_q, 512], given {list(shape)}"
        )
    rows = shape[1:4]
    if out is None:
        out = _arrays.empty(partial_out, rows + (512,), kind, "out")
    else:
        _arrays.check_writable("out", out)
    if lse is None:
        lse = _arrays.empty(partial_out, rows, "fp32", "lse")
    else:
        _arrays.check_writable("lse", lse)
    device, handle = _placement(partial_out, stream)
    export = _arrays.export
    _mlakit.merge_partials(
        export("partial_out", partial_out, kind),
        export("partial_lse", partial_lse),
        export("sinks", sinks),
        export("out", out, kind),
        export("lse", lse),
        kind,
        device,
        handle,
        bool(lse_base2),
    )
    return out, lse
