"""Decoders cached per problem signature, for the call-style APIs (mlakit.torch, mlakit.compat).

A cached decoder serves every batch up to its ``max_batch`` and every length up to its
``max_seq_len``; a call that needs more replaces it with one whose limits are rounded up to powers
of two, so that a growing batch or context makes O(log n) decoders, not one per call. Creating a
decoder may allocate and synchronize: make the first call of each signature before capturing a
CUDA graph (a warm-up run, which torch.compile's CUDA graphs and ``torch.cuda.graph`` users do).
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Tuple

from ._decoder import Decoder

# The library's limits on max_seq_len and max_batch (validate.cc).
_MAX_SEQ_LEN = 1 << 24
_MAX_BATCH = 1 << 20

_lock = threading.Lock()
_decoders: Dict[Tuple[Any, ...], Decoder] = {}


def _round_up_pow2(n: int, limit: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return max(n, min(p, limit))


def decoder_for(device: Tuple[Any, ...], batch: int, seq_len: int, **problem: Any) -> Decoder:
    """A decoder for ``problem`` on ``device`` with max_batch >= batch, max_seq_len >= seq_len.

    ``device`` is a hashable key of where the decoder belongs (made while that device is
    current); ``problem`` holds the other Decoder arguments, all hashable.
    """
    key = (device,) + tuple(sorted(problem.items()))
    decoder = _decoders.get(key)
    if decoder is not None:
        limits = decoder._problem
        if limits["max_batch"] >= batch and limits["max_seq_len"] >= seq_len:
            return decoder
    with _lock:
        decoder = _decoders.get(key)
        old_batch = old_len = 0
        if decoder is not None:
            old_batch = decoder._problem["max_batch"]
            old_len = decoder._problem["max_seq_len"]
            if old_batch >= batch and old_len >= seq_len:
                return decoder
        decoder = Decoder(
            max_batch=max(old_batch, _round_up_pow2(batch, _MAX_BATCH)),
            max_seq_len=max(old_len, _round_up_pow2(seq_len, _MAX_SEQ_LEN)),
            **problem,
        )
        _decoders[key] = decoder
        return decoder


def clear() -> None:
    """Forgets every cached decoder (their workspaces are freed with them)."""
    with _lock:
        _decoders.clear()
