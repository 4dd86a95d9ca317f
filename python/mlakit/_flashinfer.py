"""FlashInfer's MLA decode calls, computed by mlakit (re-exported by ``mlakit.compat``): what
the two shims share (backend names, mlakit's limits, views).

* ``trtllm_batch_decode_with_kv_cache_mla`` (_flashinfer_trtllm.py): FlashInfer 0.6's
  signature, every parameter implemented or refused by name.
* ``BatchMLAPagedAttentionWrapper`` (_flashinfer_wrapper.py): plan/run over CSR page lists with
  split q_nope/q_pe and ckv/kpe, as SGLang drives it; the CSR lists become a block table on the
  device.

The LSE follows FlashInfer: base 2 by default (``log2(sum(exp2(...)))``, what trtllm-gen and the
wrapper return), natural log with the wrapper's ``return_lse_base_on_e=True``; an empty row is
-inf. The library writes the base-2 LSE itself (``Problem::lse_base2``).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from . import _arrays
from ._compat_common import _not_supported


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


def _check_query_tokens(name: str, s_q: int) -> None:
    """FlashInfer runs any number of query tokens per request (prefill too); mlakit decodes
    1..16 (MTP and speculative decoding)."""
    if s_q > _MAX_QUERY_TOKENS:
        raise _not_supported(
            name, f"{s_q} query tokens per request",
            f"mlakit decodes 1..{_MAX_QUERY_TOKENS} query tokens per request",
        )  # fmt: skip


def _check_query_offsets(name: str, cum: Any, rows: Optional[int] = None) -> None:
    """Query-token offsets read on the host ([b + 1]): 0 first, never decreasing, and at most
    `rows` (the packed query rows) last. The GPU backends trust the offsets they are given, so a
    shim that has them on the host checks them (a wrong one would write out rows past the
    tensor)."""
    vals = [int(v) for v in cum.tolist()]
    if vals and vals[0] != 0:
        raise ValueError(f"{name}[0]: expected 0, given {vals[0]}")
    for k in range(1, len(vals)):
        if vals[k] < vals[k - 1]:
            raise ValueError(
                f"{name}[{k}]: expected at least {name}[{k - 1}] = {vals[k - 1]}, given {vals[k]}")
    if rows is not None and vals and vals[-1] > rows:
        raise ValueError(
            f"{name}[{len(vals) - 1}]: expected at most the {rows} query rows, given {vals[-1]}")


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
