"""NumPy helpers of the CPU tests: random workloads as raw bits and the float64 reference.

Inputs are built as the bits mlakit reads (bf16 / fp16 / e4m3 / the 656-byte blockwise tokens /
the DeepSeek V4 pages),
and the reference decodes those same bits to float64, so that the only differences left are the
library's float32 accumulation and the rounding of its output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Optional

import numpy as np

D_QK, D_V, BLOCKWISE_BYTES = 576, 512, 656
NAN_BF16 = 0x7FC0
NAN_E4M3 = 0x7F


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, rounding to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def fp16_value(bits: np.ndarray) -> np.ndarray:
    return bits.view(np.float16).astype(np.float64)


def _e4m3_table() -> np.ndarray:
    table = np.empty(256, np.float64)
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exponent, mantissa = (code >> 3) & 0xF, code & 0x7
        if exponent == 15 and mantissa == 7:
            table[code] = math.nan
        elif exponent == 0:
            table[code] = sign * mantissa / 8 * 2.0**-6
        else:
            table[code] = sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)
    return table


E4M3 = _e4m3_table()


def e4m3_value(codes: np.ndarray) -> np.ndarray:
    return E4M3[codes]


def random_e4m3(rng: np.random.Generator, shape) -> np.ndarray:
    """Random e4m3 codes of magnitude in [2^-3, 2^2] (exponent 4..9), either sign."""
    exponent = rng.integers(4, 10, size=shape)
    mantissa = rng.integers(0, 8, size=shape)
    sign = rng.integers(0, 2, size=shape)
    return ((sign << 7) | (exponent << 3) | mantissa).astype(np.uint8)


def random_bits(rng: np.random.Generator, shape, dtype: str, scale: float = 1.0) -> np.ndarray:
    """Random normal values (times scale) as the bits of dtype: bf16 / fp16 (uint16), fp8."""
    if dtype == "fp8_e4m3":
        return random_e4m3(rng, shape)
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    if dtype == "bf16":
        return bf16_bits(x)
    return x.astype(np.float16).view(np.uint16)


def value(bits: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return bf16_value(bits)
    if dtype == "fp16":
        return fp16_value(bits)
    return e4m3_value(bits)


@dataclass
class Workload:
    """One decode's inputs (raw bits) plus their float64 values for the reference."""

    q: np.ndarray  # [b, s_q, h_q, 576] bits
    kv_cache: np.ndarray  # [num_pages, page_size, 576] bits, or [.., 656] uint8 (blockwise)
    block_table: np.ndarray  # [b, max_pages] int32
    seq_lens: np.ndarray  # [b] int32
    q_values: np.ndarray  # float64, dequantized
    kv_values: np.ndarray  # [num_pages * page_size, 576] float64, dequantized
    extra: Dict[str, np.ndarray] = field(default_factory=dict)


def make_workload(
    rng: np.random.Generator,
    *,
    b: int,
    s_q: int,
    h_q: int,
    page_size: int,
    seq_lens,
    q_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    blockwise: bool = False,
    q_scale: float = 1.0,
    k_scale: float = 1.0,
    spare_pages: int = 3,
) -> Workload:
    """Pages shuffled over the cache, unused pages poisoned with NaN, unused table slots -1."""
    seq_lens = np.asarray(seq_lens, dtype=np.int32)
    pages_per_seq = [(int(n) + page_size - 1) // page_size for n in seq_lens]
    max_pages = max(1, max(pages_per_seq))
    num_pages = sum(pages_per_seq) + spare_pages
    order = rng.permutation(num_pages).astype(np.int32)
    block_table = np.full((b, max_pages), -1, np.int32)
    used = 0
    for i, n in enumerate(pages_per_seq):
        block_table[i, :n] = order[used : used + n]
        used += n
    unused = order[used:]

    q = random_bits(rng, (b, s_q, h_q, D_QK), q_dtype)
    q_values = value(q, q_dtype) * (q_scale if q_dtype == "fp8_e4m3" else 1.0)
    tokens = num_pages * page_size
    if blockwise:
        nope = random_e4m3(rng, (tokens, D_V))
        scales = rng.uniform(0.01, 0.1, size=(tokens, 4)).astype(np.float32)
        rope = bf16_bits(rng.standard_normal((tokens, 64)).astype(np.float32))
        raw = np.concatenate([nope, scales.view(np.uint8), rope.view(np.uint8)], axis=1)
        kv_values = np.concatenate(
            [e4m3_value(nope) * np.repeat(scales.astype(np.float64), 128, axis=1),
             bf16_value(rope)], axis=1,
        ) * k_scale  # fmt: skip
        kv_cache = raw.reshape(num_pages, page_size, BLOCKWISE_BYTES)
        kv_cache[unused] = 0xFF  # NaN e4m3 codes and NaN scales
    else:
        kv_cache = random_bits(rng, (num_pages, page_size, D_QK), kv_dtype)
        scale = k_scale if kv_dtype == "fp8_e4m3" else 1.0
        kv_values = value(kv_cache, kv_dtype).reshape(tokens, D_QK) * scale
        kv_cache[unused] = NAN_E4M3 if kv_dtype == "fp8_e4m3" else NAN_BF16
    return Workload(q, kv_cache, block_table, seq_lens, q_values, kv_values)


V4_NOPE, V4_DATA_BYTES, V4_TOKEN_BYTES = 448, 576, 584


def v4_page_bytes(page_size: int) -> int:
    """Bytes of a DeepSeek V4 page: page_size * 584, rounded up to a multiple of 576."""
    return -(-page_size * V4_TOKEN_BYTES // 576) * 576


def make_v4_cache(rng: np.random.Generator, num_pages: int, page_size: int, unused=()):
    """A DeepSeek V4 cache [num_pages, page bytes] uint8 and its values [tokens, 512] float64.

    Per page: every token's 448 e4m3 + 64 bf16 values, then every token's 7 UE8M0 exponents and a
    pad byte, then padding. Pad bytes, padding and the pages in ``unused`` are 0xff (NaN).
    """
    tokens = num_pages * page_size
    nope = random_e4m3(rng, (tokens, V4_NOPE))
    exponents = rng.integers(127 - 6, 127 + 3, size=(tokens, 7)).astype(np.uint8)  # 2^-6..2^2
    rope = bf16_bits(rng.standard_normal((tokens, 64)).astype(np.float32))
    cache = np.full((num_pages, v4_page_bytes(page_size)), 0xFF, np.uint8)
    data = np.concatenate([nope, rope.view(np.uint8)], axis=1).reshape(num_pages, -1)
    cache[:, : page_size * V4_DATA_BYTES] = data
    scale_rows = np.full((tokens, 8), 0xFF, np.uint8)
    scale_rows[:, :7] = exponents
    start = page_size * V4_DATA_BYTES
    cache[:, start : start + page_size * 8] = scale_rows.reshape(num_pages, -1)
    scales = np.ldexp(1.0, exponents.astype(np.int64) - 127)
    values = np.concatenate(
        [e4m3_value(nope) * np.repeat(scales, 64, axis=1), bf16_value(rope)], axis=1
    )
    for page in unused:
        cache[page] = 0xFF
    return cache, values


def v4_view(cache: np.ndarray, page_size: int) -> np.ndarray:
    """FlashMLA's view of a V4 cache: [num_pages, page_size, 1, 584], pages page bytes apart."""
    num_pages, page_bytes = cache.shape
    return np.lib.stride_tricks.as_strided(
        cache, (num_pages, page_size, 1, V4_TOKEN_BYTES), (page_bytes, V4_TOKEN_BYTES, 1, 1)
    )


def sparse_reference(
    q_values: np.ndarray,
    caches,
    *,
    softmax_scale: float,
    sinks: Optional[np.ndarray] = None,
):
    """Sparse decode over several caches in one softmax: ``caches`` holds (values [tokens, d],
    indices [b, s_q, k], lens [b] or None) for the main and the extra cache. (out, lse) float64."""
    b, s_q, h_q, _ = q_values.shape
    out = np.zeros((b, s_q, h_q, D_V))
    lse = np.full((b, s_q, h_q), -np.inf)
    for i in range(b):
        for t in range(s_q):
            rows = []
            for values, indices, lens in caches:
                k = indices.shape[-1] if lens is None else int(lens[i])
                rows += [values[int(x)] for x in indices[i, t, :k] if x >= 0]
            if not rows:
                continue
            out[i, t], lse[i, t] = _attend(q_values[i, t], np.stack(rows), softmax_scale, sinks)
    return out, lse


def _attend(q_values: np.ndarray, kv: np.ndarray, softmax_scale: float, sinks) -> tuple:
    """One query token's (out [h_q, 512], lse [h_q]) over the rows ``kv`` [n, d_qk], n >= 1."""
    scores = softmax_scale * (q_values @ kv.T)  # [h_q, n]
    top = scores.max(axis=1, keepdims=True)
    weights = np.exp(scores - top)
    total = weights.sum(axis=1, keepdims=True)
    row_lse = (top + np.log(total))[:, 0]
    o = (weights / total) @ kv[:, :D_V]
    if sinks is not None:
        o *= (1.0 / (1.0 + np.exp(sinks.astype(np.float64) - row_lse)))[:, None]
    return o, row_lse


def pack_queries(w: Workload, q_lens) -> tuple:
    """Variable query lengths from a workload of s_q = max(q_lens): request i keeps its first
    q_lens[i] tokens, packed by query token. Returns (q bits [total, h_q, d_qk], q values,
    cu_seqlens_q [b + 1] int32)."""
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    q = np.concatenate([w.q[i, :n] for i, n in enumerate(q_lens)])
    values = np.concatenate([w.q_values[i, :n] for i, n in enumerate(q_lens)])
    return q, values, cu


def var_q_reference(
    w: Workload,
    q_values: np.ndarray,
    cu_seqlens_q: np.ndarray,
    *,
    page_size: int,
    softmax_scale: float = 1 / math.sqrt(D_QK),
    causal: bool = True,
    sinks: Optional[np.ndarray] = None,
):
    """(out [total, h_q, 512], lse [total, h_q]) float64 of packed queries (q_values [total, h_q,
    d_qk], request i's tokens at rows cu_seqlens_q[i]..): token t of request i with q_len query
    tokens sees positions < L_i - q_len + 1 + t when causal (mlakit.h, Problem::var_q)."""
    total, h_q = q_values.shape[0], q_values.shape[1]
    out = np.zeros((total, h_q, D_V))
    lse = np.full((total, h_q), -np.inf)
    for i in range(len(cu_seqlens_q) - 1):
        first, q_len = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1] - cu_seqlens_q[i])
        length = int(w.seq_lens[i])
        for t in range(q_len):
            visible = length - q_len + 1 + t if causal else length
            visible = min(max(visible, 0), length)
            slots = [
                int(w.block_table[i, j // page_size]) * page_size + j % page_size
                for j in range(visible)
            ]
            if slots:
                out[first + t], lse[first + t] = _attend(
                    q_values[first + t], w.kv_values[slots], softmax_scale, sinks)  # fmt: skip
    return out, lse


def reference(
    w: Workload,
    *,
    page_size: int,
    softmax_scale: float = 1 / math.sqrt(D_QK),
    causal: bool = True,
    sinks: Optional[np.ndarray] = None,
    indices: Optional[np.ndarray] = None,
    topk_lens: Optional[np.ndarray] = None,
):
    """(out [b, s_q, h_q, 512], lse [b, s_q, h_q]) in float64, per docs/math-and-layouts.md."""
    b, s_q, h_q, _ = w.q.shape
    out = np.zeros((b, s_q, h_q, D_V))
    lse = np.full((b, s_q, h_q), -np.inf)
    for i in range(b):
        for t in range(s_q):
            if indices is not None:
                k = indices.shape[-1] if topk_lens is None else int(topk_lens[i])
                slots = [int(x) for x in indices[i, t, :k] if x >= 0]
            else:
                length = int(w.seq_lens[i])
                visible = length if (s_q == 1 or not causal) else length - s_q + 1 + t
                visible = min(max(visible, 0), length)
                slots = [
                    int(w.block_table[i, j // page_size]) * page_size + j % page_size
                    for j in range(visible)
                ]
            if slots:
                out[i, t], lse[i, t] = _attend(w.q_values[i, t], w.kv_values[slots],
                                               softmax_scale, sinks)  # fmt: skip
    return out, lse


def assert_close_to_reference(got: np.ndarray, want: np.ndarray, out_dtype: str) -> None:
    """Element-wise: the output's own rounding (2^-8 bf16, 2^-10 fp16) plus float32 noise."""
    rtol = 2.0**-8 if out_dtype == "bf16" else 2.0**-10
    atol = 1e-5 * max(1.0, float(np.abs(want).max()))
    assert np.isfinite(got).all(), "output has NaN or inf"
    err = np.abs(got - want)
    bad = err > atol + rtol * np.abs(want)
    assert not bad.any(), (
        f"{int(bad.sum())} of {bad.size} elements differ; max error {err.max():.3g} at "
        f"{np.unravel_index(err.argmax(), err.shape)}"
    )


def assert_close_gpu(got: np.ndarray, want: np.ndarray, out_dtype: str) -> None:
    """A GPU kernel's bound, the C++ tests' one (harness::default_tolerance): it rounds P to 16
    bits before the PV product and sums in another order, so the error is bounded by 2 output
    ulps of the largest reference value, not elementwise."""
    ulp = 2.0**-8 if out_dtype == "bf16" else 2.0**-11
    bound = 1e-5 + 2 * ulp * float(np.abs(want).max())
    assert np.isfinite(got).all(), "output has NaN or inf"
    err = np.abs(got - want)
    assert err.max() <= bound, (
        f"max error {err.max():.3g} at {np.unravel_index(err.argmax(), err.shape)}, bound "
        f"{bound:.3g} (2 {out_dtype} ulps of the largest value)"
    )


def out_values(out: np.ndarray, out_dtype: str) -> np.ndarray:
    """float64 values of an output array (ml_dtypes bfloat16, raw uint16 or float16)."""
    if out.dtype == np.float16:
        return out.astype(np.float64)
    bits = out.view(np.uint16)
    return bf16_value(bits) if out_dtype == "bf16" else fp16_value(bits)
