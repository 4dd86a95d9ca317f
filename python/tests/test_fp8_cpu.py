"""fp8 e4m3 KV cache through mlakit.Decoder on the cpu backend (NumPy): results against the
float64 reference of the dequantized inputs, scales as host values or one-element arrays read at
run time, and the refusals of bad scales."""

import math

import pytest

np = pytest.importorskip("numpy")

import mlakit  # noqa: E402
from numpy_reference import (  # noqa: E402
    NAN_BF16,
    assert_close_to_reference,
    make_workload,
    out_values,
    reference,
)

try:
    import ml_dtypes
except ImportError:  # raw bits are tested either way
    ml_dtypes = None


def poisoned(shape, out_dtype):
    """An output filled with NaN, so that an element the library does not write shows up."""
    if out_dtype == "fp16":
        return np.full(shape, np.nan, np.float16)
    return np.full(shape, NAN_BF16, np.uint16)  # bf16 bits


def as_scale(value, form):
    """A scale as a float, a NumPy scalar, a [1] array or a 0-d array (the last two: pointers)."""
    if form == "float":
        return float(value)
    if form == "numpy-scalar":
        return np.float32(value)
    if form == "array":
        return np.array([value], np.float32)
    return np.array(value, np.float32)  # "0-d"


# (name, decoder arguments, workload arguments, scale form)
CASES = [
    (
        "fp8q-h16-page64",
        dict(h_q=16, page_size=64, q_dtype="fp8_e4m3"),
        dict(b=4, s_q=1, seq_lens=[0, 1, 100, 129], q_scale=0.5, k_scale=0.25),
        "float",
    ),
    (
        "bf16q-mtp-causal-sinks-lse",
        dict(h_q=8, s_q=3, page_size=16, q_dtype="bf16", sinks=True, lse=True),
        dict(b=3, s_q=3, seq_lens=[2, 40, 17], k_scale=0.125),
        "array",
    ),
    (
        "fp16q-page1",
        dict(h_q=4, page_size=1, q_dtype="fp16"),
        dict(b=2, s_q=1, seq_lens=[5, 0], k_scale=2.0),
        "0-d",
    ),
    (
        "bf16q-h128-out-fp16",
        dict(h_q=128, page_size=32, q_dtype="bf16", out_dtype="fp16"),
        dict(b=1, s_q=1, seq_lens=[70], k_scale=0.75),
        "numpy-scalar",
    ),
    (
        "fp8q-mtp-noncausal-page48",
        dict(h_q=16, s_q=2, page_size=48, q_dtype="fp8", causal=False, lse=True),
        dict(b=2, s_q=2, seq_lens=[47, 97], q_scale=1.5, k_scale=0.0625),
        "array",
    ),
]


@pytest.mark.parametrize("name,problem,work,form", CASES, ids=[c[0] for c in CASES])
def test_fp8_cache_matches_reference(name, problem, work, form):
    rng = np.random.default_rng(len(name))
    q_dtype = {"fp8": "fp8_e4m3"}.get(problem["q_dtype"], problem["q_dtype"])
    h_q, page = problem["h_q"], problem["page_size"]
    w = make_workload(rng, h_q=h_q, page_size=page, q_dtype=q_dtype, kv_dtype="fp8_e4m3", **work)
    decoder = mlakit.Decoder(max_batch=4, max_seq_len=256, kv_dtype="fp8_e4m3", backend="cpu",
                             **problem)  # fmt: skip
    assert decoder.problem["kv_dtype"] == "fp8_e4m3"
    out_dtype = problem.get("out_dtype", "bf16" if q_dtype == "fp8_e4m3" else q_dtype)
    assert decoder.problem["out_dtype"] == out_dtype

    b, s_q = work["b"], work["s_q"]
    out = poisoned((b, s_q, h_q, 512), out_dtype)
    args = dict(out=out, k_scale=as_scale(work["k_scale"], form))
    if q_dtype == "fp8_e4m3":
        args["q_scale"] = as_scale(work["q_scale"], form)
    sinks = None
    if problem.get("sinks"):
        sinks = rng.standard_normal(h_q).astype(np.float32)
        args["sinks"] = sinks
    if problem.get("lse"):
        args["lse"] = np.full((b, s_q, h_q), np.nan, np.float32)
    result = decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens, **args)

    causal = problem.get("causal", True)
    want, want_lse = reference(w, page_size=page, causal=causal, sinks=sinks)
    if problem.get("lse"):
        got, lse = result
        assert got is out and lse is args["lse"]
        finite = np.isfinite(want_lse)
        assert np.array_equal(np.isneginf(lse), ~finite), "lse: -inf exactly where no token"
        np.testing.assert_allclose(lse[finite], want_lse[finite], atol=2e-4, rtol=1e-5)
    else:
        assert result is out
    assert_close_to_reference(out_values(out, out_dtype), want, out_dtype)


def test_fp8_arrays_of_ml_dtypes_and_bits_agree():
    if ml_dtypes is None:
        pytest.skip("ml_dtypes is not installed")
    rng = np.random.default_rng(5)
    w = make_workload(rng, b=2, s_q=1, h_q=8, page_size=16, seq_lens=[30, 9], q_dtype="fp8_e4m3",
                      kv_dtype="fp8_e4m3", q_scale=0.5, k_scale=2.0)  # fmt: skip
    decoder = mlakit.Decoder(h_q=8, page_size=16, max_batch=2, max_seq_len=32,
                             q_dtype=ml_dtypes.float8_e4m3fn, kv_dtype="e4m3",
                             backend="cpu")  # fmt: skip
    assert decoder.problem["q_dtype"] == decoder.problem["kv_dtype"] == "fp8_e4m3"
    bits = decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens, q_scale=0.5, k_scale=2.0)
    typed = decoder.run(w.q.view(ml_dtypes.float8_e4m3fn),
                        w.kv_cache.view(ml_dtypes.float8_e4m3fn), w.block_table, w.seq_lens,
                        q_scale=0.5, k_scale=2.0)  # fmt: skip
    assert typed.dtype == ml_dtypes.bfloat16
    assert np.array_equal(bits.view(np.uint16), typed.view(np.uint16))
    assert_close_to_reference(out_values(typed, "bf16"), reference(w, page_size=16)[0], "bf16")


def test_scale_arrays_are_read_at_run_time():
    """A scale array is passed by pointer: a decoder run again after the array changed in place
    uses the new value (on a GPU, a captured graph does the same)."""
    rng = np.random.default_rng(6)
    lens = [50, 21]
    w = make_workload(rng, b=2, s_q=1, h_q=8, page_size=16, seq_lens=lens, q_dtype="fp8_e4m3",
                      kv_dtype="fp8_e4m3", q_scale=1.0, k_scale=1.0)  # fmt: skip
    decoder = mlakit.Decoder(h_q=8, page_size=16, max_batch=2, max_seq_len=64, q_dtype="fp8",
                             backend="cpu")  # fmt: skip
    q_scale, k_scale = np.array([0.5], np.float32), np.array([0.25], np.float32)
    for qs, ks in ((0.5, 0.25), (2.0, 0.125), (0.75, 3.0)):
        q_scale[0], k_scale[0] = qs, ks
        out = poisoned((2, 1, 8, 512), "bf16")
        decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens, out=out, q_scale=q_scale,
                    k_scale=k_scale)  # fmt: skip
        scaled = make_workload(np.random.default_rng(6), b=2, s_q=1, h_q=8, page_size=16,
                               seq_lens=lens, q_dtype="fp8_e4m3", kv_dtype="fp8_e4m3",
                               q_scale=qs, k_scale=ks)  # fmt: skip
        assert np.array_equal(scaled.q, w.q) and np.array_equal(scaled.kv_cache, w.kv_cache)
        want, _ = reference(scaled, page_size=16)
        assert_close_to_reference(out_values(out, "bf16"), want, "bf16")


@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("name", ["q_scale", "k_scale"])
def test_bad_host_scales_are_refused_by_name(name, value):
    w = make_workload(np.random.default_rng(7), b=1, s_q=1, h_q=4, page_size=16, seq_lens=[3],
                      q_dtype="fp8_e4m3", kv_dtype="fp8_e4m3")  # fmt: skip
    decoder = mlakit.Decoder(h_q=4, page_size=16, max_batch=1, max_seq_len=16, q_dtype="fp8",
                             backend="cpu")  # fmt: skip
    scales = dict(q_scale=1.0, k_scale=1.0)
    for given in (value, np.float32(value), int(value) if math.isfinite(value) else value):
        scales[name] = given
        with pytest.raises(ValueError, match=f"^{name}: expected a finite value > 0, given "):
            decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens, **scales)


def test_nan_scale_is_refused_not_taken_for_none():
    """The library reads a NaN host scale as "not given": a NaN from Python must not slip
    through as an absent scale on a 16-bit decoder, nor as a missing one on an fp8 decoder."""
    w = make_workload(np.random.default_rng(8), b=1, s_q=1, h_q=4, page_size=16, seq_lens=[3])
    bf16 = mlakit.Decoder(h_q=4, page_size=16, max_batch=1, max_seq_len=16, backend="cpu")
    with pytest.raises(ValueError, match="^q_scale: expected a finite value > 0, given nan"):
        bf16.run(w.q, w.kv_cache, w.block_table, w.seq_lens, q_scale=math.nan)
    with pytest.raises(ValueError, match="^k_scale: expected a finite value > 0, given nan"):
        bf16.run(w.q, w.kv_cache, w.block_table, w.seq_lens, k_scale=float("nan"))


def test_scale_argument_errors():
    w = make_workload(np.random.default_rng(9), b=1, s_q=1, h_q=4, page_size=16, seq_lens=[3],
                      kv_dtype="fp8_e4m3")  # fmt: skip
    decoder = mlakit.Decoder(h_q=4, page_size=16, max_batch=1, max_seq_len=16,
                             kv_dtype="fp8_e4m3", backend="cpu")  # fmt: skip

    def run(**scales):
        return decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens, **scales)

    with pytest.raises(ValueError, match="^k_scale: expected a scale .* for an fp8 cache"):
        run()
    with pytest.raises(ValueError, match="^q_scale: expected none for a bf16 q, given a scale"):
        run(q_scale=1.0, k_scale=1.0)
    with pytest.raises(TypeError, match="^k_scale: expected dtype float32, given float16"):
        run(k_scale=np.ones(1, np.float16))
    with pytest.raises(ValueError, match="^k_scale: expected a one-element float32 array"):
        run(k_scale=np.ones((1, 2), np.float32))
    with pytest.raises(TypeError, match="^k_scale: expected None, a float or a one-element"):
        run(k_scale=True)
    assert run(k_scale=1).shape == (1, 1, 4, 512)  # an int is a host value


def test_fp8_q_needs_an_fp8_cache():
    with pytest.raises(ValueError, match="q_dtype"):
        mlakit.Decoder(h_q=4, page_size=16, max_batch=1, max_seq_len=16, q_dtype="fp8",
                       kv_dtype="bf16", backend="cpu")  # fmt: skip
    with pytest.raises(ValueError, match="^kv_dtype: expected bf16, fp16 or fp8_e4m3"):
        mlakit.Decoder(h_q=4, page_size=16, max_batch=1, max_seq_len=16, kv_dtype="fp8_e5m2",
                       backend="cpu")  # fmt: skip
