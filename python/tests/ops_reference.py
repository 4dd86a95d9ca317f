"""NumPy references of mlakit.ops, written from the rules of docs/ops.md: the bytes the cache
appends write, the indexer's logits in float64, and top-k by a stable sort."""

from __future__ import annotations

import numpy as np

from numpy_reference import BLOCKWISE_BYTES, E4M3, bf16_bits, bf16_value, v4_page_bytes

INDEXER_DIM = 128
_E4M3_POSITIVE = E4M3[:127]  # codes 0..126 (0x7f is NaN), increasing


def e4m3_codes(x: np.ndarray) -> np.ndarray:
    """float32 values -> e4m3 codes: nearest, ties to even, saturated to +-448, sign kept."""
    x = np.asarray(x, np.float32).astype(np.float64)
    a = np.minimum(np.abs(x), 448.0)
    hi = np.clip(np.searchsorted(_E4M3_POSITIVE, a, side="left"), 0, 126)
    lo = np.maximum(hi - 1, 0)
    below, above = a - _E4M3_POSITIVE[lo], _E4M3_POSITIVE[hi] - a
    code = np.where((above < below) | ((above == below) & (hi % 2 == 0)), hi, lo)
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def ceil_log2(v: np.ndarray) -> np.ndarray:
    """Exact ceil(log2(v)) of positive normal float32 values."""
    mantissa, exponent = np.frexp(np.asarray(v, np.float32).astype(np.float64))
    return np.where(mantissa == 0.5, exponent - 1, exponent).astype(np.int64)


def blockwise_scale(amax: np.ndarray) -> np.ndarray:
    v = (np.asarray(amax, np.float32) / np.float32(448)).astype(np.float32)
    safe = np.where(amax > 0, v, np.float32(1))
    return np.where(amax > 0, np.ldexp(np.float32(1), ceil_log2(safe)), 1).astype(np.float32)


def widen(bits: np.ndarray, dtype: str) -> np.ndarray:
    """bf16 bits (uint16) or float16 values -> float32."""
    if dtype == "bf16":
        return bf16_value(bits).astype(np.float32)
    return np.asarray(bits).view(np.float16).astype(np.float32)


def quantize_kv_token(x: np.ndarray, layout: str, cache_dtype: str = "bf16",
                      k_scale: float = 1.0) -> np.ndarray:  # fmt: skip
    """One token's bytes in the cache: dense (576 values of cache_dtype), fp8_blockwise (656
    bytes), fp8_v4 (576 data bytes, then its 8-byte scale row)."""
    x = np.asarray(x, np.float32)
    if layout == "dense":
        if cache_dtype == "bf16":
            return bf16_bits(x).view(np.uint8)
        if cache_dtype == "fp16":
            return x.astype(np.float16).view(np.uint8)
        return e4m3_codes(x / np.float32(k_scale))
    if layout == "fp8_blockwise":
        groups = x[:512].reshape(4, 128)
        scales = blockwise_scale(np.abs(groups).max(axis=1))
        codes = e4m3_codes(groups / scales[:, None]).reshape(-1)
        rope = bf16_bits(x[512:576])
        out = np.concatenate([codes, scales.view(np.uint8), rope.view(np.uint8)])
        assert out.size == BLOCKWISE_BYTES
        return out
    groups = x[:448].reshape(7, 64)
    amax = np.abs(groups).max(axis=1)
    v = (amax / np.float32(448)).astype(np.float32)
    exps = np.where(amax > 0, 127 + ceil_log2(np.where(amax > 0, v, 1)), 127)
    exps = np.clip(exps, 0, 254)
    scales = np.ldexp(np.float32(1), exps - 127).astype(np.float32)
    codes = e4m3_codes(groups / scales[:, None]).reshape(-1)
    rope = bf16_bits(x[448:512])
    row = np.concatenate([exps.astype(np.uint8), [0xFF]]).astype(np.uint8)
    return np.concatenate([codes, rope.view(np.uint8), row])


def append_kv(cache_bytes: np.ndarray, x: np.ndarray, slots: np.ndarray, page_size: int,
              layout: str, cache_dtype: str = "bf16",
              k_scale: float = 1.0) -> np.ndarray:  # fmt: skip
    """The cache (as [num_pages, page bytes] uint8) after appending float32 tokens x."""
    out = cache_bytes.copy()
    for t, slot in enumerate(slots):
        if slot < 0:
            continue
        page, offset = divmod(int(slot), page_size)
        token = quantize_kv_token(x[t], layout, cache_dtype, k_scale)
        if layout == "fp8_v4":
            out[page, offset * 576 : (offset + 1) * 576] = token[:576]
            start = page_size * 576 + offset * 8
            out[page, start : start + 8] = token[576:]
        else:
            n = token.size
            out[page, offset * n : (offset + 1) * n] = token
    return out


def indexer_scale(amax: np.ndarray, power_of_two: bool) -> np.ndarray:
    s = (np.maximum(np.asarray(amax, np.float32), np.float32(1e-4)) / np.float32(448)).astype(
        np.float32
    )
    if power_of_two:
        s = np.ldexp(np.float32(1), ceil_log2(s)).astype(np.float32)
    return s


def append_indexer(cache: np.ndarray, x: np.ndarray, slots: np.ndarray, page_size: int,
                   power_of_two: bool = False) -> np.ndarray:  # fmt: skip
    out = cache.copy()
    for t, slot in enumerate(slots):
        if slot < 0:
            continue
        page, offset = divmod(int(slot), page_size)
        s = indexer_scale(np.abs(x[t]).max(), power_of_two)
        out[page, offset * 128 : (offset + 1) * 128] = e4m3_codes(x[t] / s)
        start = page_size * 128 + offset * 4
        out[page, start : start + 4] = np.asarray([s], np.float32).view(np.uint8)
    return out


def indexer_keys(cache: np.ndarray, page_size: int):
    """(values [num_pages * page_size, 128] float64, scales [num_pages * page_size])."""
    num_pages = cache.shape[0]
    codes = cache[:, : page_size * 128].reshape(num_pages * page_size, 128)
    scales = cache[:, page_size * 128 :].copy().view(np.float32).reshape(-1)
    return E4M3[codes], scales.astype(np.float64)


def indexer_logits(q_codes, weights, cache, page_size, block_table, seq_lens, max_len):
    """float64 logits [b * next_n, max_len], -inf where not visible."""
    b, next_n, heads, _ = q_codes.shape
    keys, scales = indexer_keys(cache, page_size)
    q = E4M3[q_codes]
    w = np.asarray(weights, np.float64).reshape(b * next_n, heads)
    out = np.full((b * next_n, max_len), -np.inf)
    for i in range(b):
        L = int(seq_lens[i])
        for t in range(next_n):
            visible = L - next_n + 1 + t
            for j in range(max(0, visible)):
                slot = int(block_table[i, j // page_size]) * page_size + j % page_size
                dots = q[i, t] @ keys[slot] * scales[slot]
                out[i * next_n + t, j] = float(np.maximum(dots, 0) @ w[i * next_n + t])
    return out


def topk(logits, seq_lens, block_table, page_size, k, next_n=1):
    """(indices, positions) [b * next_n, k] int32 by a stable sort (ties: lower position)."""
    b = len(seq_lens)
    indices = np.full((b * next_n, k), -1, np.int32)
    positions = np.full((b * next_n, k), -1, np.int32)
    for i in range(b):
        L = int(seq_lens[i])
        for t in range(next_n):
            r = i * next_n + t
            n = min(max(L - next_n + 1 + t, 0), L)
            if n <= k:
                kept = np.arange(n)
            else:
                order = np.argsort(-logits[r, :n].astype(np.float64), kind="stable")
                kept = np.sort(order[:k])
            positions[r, : kept.size] = kept
            pages = block_table[i, kept // page_size]
            indices[r, : kept.size] = pages * page_size + kept % page_size
    return indices, positions


__all__ = [
    "append_indexer",
    "append_kv",
    "bf16_bits",
    "e4m3_codes",
    "indexer_logits",
    "topk",
    "v4_page_bytes",
    "widen",
]
