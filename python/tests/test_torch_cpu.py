"""PyTorch on host tensors (cpu backend): Decoder.run, the mlakit::decode op, torch.compile and
the dtype handling of torch tensors. Skipped where PyTorch is not installed."""

import re

import pytest

np = pytest.importorskip("numpy")

torch = pytest.importorskip("torch")

import mlakit  # noqa: E402
import mlakit.torch  # noqa: E402
from numpy_reference import (  # noqa: E402
    assert_close_to_reference,
    make_workload,
    pack_queries,
    reference,
    var_q_reference,
)


def as_torch(bits: np.ndarray, dtype) -> "torch.Tensor":
    """Raw bits (uint16 / uint8 NumPy) as a torch tensor of dtype, sharing the bits."""
    if bits.dtype == np.uint16:
        return torch.from_numpy(bits.view(np.int16)).view(dtype)
    return torch.from_numpy(bits).view(dtype)


def values(t: "torch.Tensor") -> np.ndarray:
    return t.float().numpy().astype(np.float64)


@pytest.fixture
def work():
    return make_workload(np.random.default_rng(0), b=3, s_q=2, h_q=8, page_size=16,
                         seq_lens=[0, 21, 40])  # fmt: skip


def tensors(w):
    return (
        as_torch(w.q, torch.bfloat16),
        as_torch(w.kv_cache, torch.bfloat16),
        torch.from_numpy(w.block_table),
        torch.from_numpy(w.seq_lens),
    )


def test_decoder_run_returns_torch(work):
    q, kv, table, lens = tensors(work)
    decoder = mlakit.Decoder(h_q=8, s_q=2, page_size=16, max_batch=3, max_seq_len=64,
                             backend="cpu")  # fmt: skip
    out = decoder.run(q, kv, table, lens)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    want, _ = reference(work, page_size=16)
    assert_close_to_reference(values(out), want, "bf16")


def test_op_matches_decoder_and_reference(work):
    q, kv, table, lens = tensors(work)
    out, lse = mlakit.torch.decode(q, kv, table, lens, return_lse=True)
    want, want_lse = reference(work, page_size=16)
    assert_close_to_reference(values(out), want, "bf16")
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(lse.numpy()[finite], want_lse[finite], atol=2e-4)
    decoder = mlakit.Decoder(h_q=8, s_q=2, page_size=16, max_batch=3, max_seq_len=64,
                             backend="cpu")  # fmt: skip
    assert torch.equal(decoder.run(q, kv, table, lens), out)


def test_op_writes_out_in_place(work):
    q, kv, table, lens = tensors(work)
    out = torch.full((3, 2, 8, 512), float("nan"), dtype=torch.bfloat16)
    result = mlakit.torch.decode(q, kv, table, lens, out=out)
    assert result is out and not out.isnan().any()


def test_torch_compile_fullgraph(work):
    q, kv, table, lens = tensors(work)

    def step(q, kv, table, lens):
        out, lse = mlakit.torch.decode(q * 1, kv, table, lens, return_lse=True)
        return out.float() * 2, lse

    compiled = torch.compile(step, fullgraph=True)
    out, lse = compiled(q, kv, table, lens)
    eager_out, eager_lse = step(q, kv, table, lens)
    assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse)


def test_opcheck(work):
    q, kv, table, lens = tensors(work)
    out = torch.empty((3, 2, 8, 512), dtype=torch.bfloat16)
    lse = torch.empty((3, 2, 8), dtype=torch.float32)
    args = (q, kv, table, lens, out, lse, None, None, None, None, None, 576**-0.5, None, None,
            True, 0, False, "auto", -1)  # fmt: skip
    torch.library.opcheck(torch.ops.mlakit.decode.default, args)


def test_fp8_tensors():
    fp8 = dict(q_dtype="fp8_e4m3", kv_dtype="fp8_e4m3", q_scale=0.5, k_scale=0.25)
    w = make_workload(np.random.default_rng(1), b=2, s_q=1, h_q=4, page_size=16, seq_lens=[9, 30],
                      **fp8)  # fmt: skip
    q = as_torch(w.q, torch.float8_e4m3fn)
    kv = as_torch(w.kv_cache, torch.float8_e4m3fn)
    table, lens = torch.from_numpy(w.block_table), torch.from_numpy(w.seq_lens)
    want, _ = reference(w, page_size=16)
    out = mlakit.torch.decode(q, kv, table, lens, q_scale=0.5, k_scale=torch.tensor([0.25]))
    assert out.dtype == torch.bfloat16
    assert_close_to_reference(values(out), want, "bf16")
    decoder = mlakit.Decoder(h_q=4, page_size=16, max_batch=2, max_seq_len=32, q_dtype=q.dtype,
                             kv_dtype=kv.dtype, backend="cpu")  # fmt: skip
    assert torch.equal(decoder.run(q, kv, table, lens, q_scale=torch.tensor(0.5),
                                   k_scale=0.25), out)  # fmt: skip
    with pytest.raises(TypeError, match="q: expected dtype float8_e4m3fn .*, given float8_e5m2"):
        decoder.run(q.view(torch.float8_e5m2), kv, table, lens, q_scale=0.5, k_scale=0.25)
    bf16 = mlakit.Decoder(h_q=4, page_size=16, max_batch=2, max_seq_len=32, backend="cpu")
    with pytest.raises(TypeError, match="q: expected dtype bfloat16 .*, given float8_e4m3fn"):
        bf16.run(q, kv, table, lens)


def test_requires_grad_and_views(work):
    q, kv, table, lens = tensors(work)
    decoder = mlakit.Decoder(h_q=8, s_q=2, page_size=16, max_batch=3, max_seq_len=64,
                             backend="cpu")  # fmt: skip
    base = decoder.run(q, kv, table, lens)
    got = decoder.run(q.float().requires_grad_().bfloat16(), kv, table, lens)
    assert torch.equal(got, base)
    # A view (head-major storage): read in place, the same bits.
    assert torch.equal(decoder.run(q.transpose(1, 2).contiguous().transpose(1, 2), kv, table, lens),
                       base)  # fmt: skip
    with pytest.raises(ValueError, match="q: expected a view whose last dimension is contiguous"):
        decoder.run(torch.cat([q, q], dim=3)[..., ::2], kv, table, lens)


def test_decoders_are_cached_per_signature(work):
    from mlakit import _cache

    _cache.clear()
    q, kv, table, lens = tensors(work)
    mlakit.torch.decode(q, kv, table, lens)
    mlakit.torch.decode(q[:1], kv, table[:1], lens[:1])
    assert len(_cache._decoders) == 1
    mlakit.torch.decode(q, kv, table, lens, return_lse=True)
    assert len(_cache._decoders) == 2


# ---- fp8 e4m3 cache: torch.float8_e4m3fn tensors, scale tensors, the fake implementation -------


def fp8_work(seed=2, q_dtype="fp8_e4m3", q_scale=0.5, k_scale=0.25):
    return make_workload(np.random.default_rng(seed), b=3, s_q=2, h_q=8, page_size=16,
                         seq_lens=[0, 21, 40], q_dtype=q_dtype, kv_dtype="fp8_e4m3",
                         q_scale=q_scale, k_scale=k_scale)  # fmt: skip


def fp8_tensors(w, q_dtype=torch.float8_e4m3fn):
    q = as_torch(w.q, q_dtype if w.q.dtype == np.uint8 else torch.bfloat16)
    return (q, as_torch(w.kv_cache, torch.float8_e4m3fn), torch.from_numpy(w.block_table),
            torch.from_numpy(w.seq_lens))  # fmt: skip


@pytest.mark.parametrize("form", ["tensor", "0-d", "float"])
def test_fp8_op_with_scale_tensors(form):
    w = fp8_work()
    q, kv, table, lens = fp8_tensors(w)

    def scale(v):
        return {"tensor": torch.tensor([v]), "0-d": torch.tensor(v), "float": v}[form]

    out = torch.full((3, 2, 8, 512), float("nan"), dtype=torch.bfloat16)
    lse = torch.full((3, 2, 8), float("nan"))
    mlakit.torch.decode(q, kv, table, lens, out=out, lse=lse, q_scale=scale(0.5),
                        k_scale=scale(0.25))  # fmt: skip
    want, want_lse = reference(w, page_size=16)
    assert_close_to_reference(values(out), want, "bf16")
    finite = np.isfinite(want_lse)
    assert np.array_equal(np.isneginf(lse.numpy()), ~finite)
    np.testing.assert_allclose(lse.numpy()[finite], want_lse[finite], atol=2e-4)

    # uint8 bits are the same data: the same result, bit for bit.
    bits = mlakit.torch.decode(q.view(torch.uint8), kv.view(torch.uint8), table, lens,
                               q_scale=scale(0.5), k_scale=scale(0.25))  # fmt: skip
    assert torch.equal(bits, out)


def test_fp8_cache_bf16_query_op():
    w = fp8_work(seed=3, q_dtype="bf16", k_scale=0.125)
    q, kv, table, lens = fp8_tensors(w)
    assert q.dtype == torch.bfloat16
    out = mlakit.torch.decode(q, kv, table, lens, k_scale=torch.tensor([0.125]),
                              out_dtype=torch.float16)  # fmt: skip
    assert out.dtype == torch.float16
    assert_close_to_reference(values(out), reference(w, page_size=16)[0], "fp16")


def test_fp8_torch_compile_follows_scale_tensors():
    w = fp8_work(q_scale=1.0, k_scale=1.0)
    q, kv, table, lens = fp8_tensors(w)
    q_scale, k_scale = torch.tensor([0.5]), torch.tensor([0.25])

    def step(q, kv, table, lens, q_scale, k_scale):
        return mlakit.torch.decode(q, kv, table, lens, q_scale=q_scale, k_scale=k_scale) * 2

    compiled = torch.compile(step, fullgraph=True)
    for qs, ks in ((0.5, 0.25), (2.0, 0.125)):
        q_scale.fill_(qs)
        k_scale.fill_(ks)
        got = compiled(q, kv, table, lens, q_scale, k_scale)
        assert torch.equal(got, step(q, kv, table, lens, q_scale, k_scale))
        want, _ = reference(fp8_work(q_scale=qs, k_scale=ks), page_size=16)
        assert_close_to_reference(values(got) / 2, want, "bf16")


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float8_e4m3fn])
def test_fp8_opcheck(dtype):
    q, kv, table, lens = fp8_tensors(fp8_work())
    q, kv = q.view(dtype), kv.view(dtype)
    out = torch.empty((3, 2, 8, 512), dtype=torch.bfloat16)
    lse = torch.empty((3, 2, 8), dtype=torch.float32)
    # opcheck's schema test multiplies the inputs, which PyTorch does not implement for float8 on
    # the CPU: float8 runs the other tests, the same bits as uint8 all of them.
    utils = "ALL" if dtype == torch.uint8 else (
        "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")  # fmt: skip
    for q_scale_tensor, q_scale in ((torch.tensor([0.5]), None), (None, 0.5)):
        args = (q, kv, table, lens, out, lse, None, None, None, q_scale_tensor,
                torch.tensor([0.25]), 576**-0.5, q_scale, None, True, 0, False, "auto",
                -1)  # fmt: skip
        torch.library.opcheck(torch.ops.mlakit.decode.default, args, test_utils=utils)


def _raw_op_args(q, kv, table, lens, **override):
    args = dict(q=q, kv_cache=kv, block_table=table, seq_lens=lens,
                out=torch.empty((q.shape[0], q.shape[1], q.shape[2], 512), dtype=torch.bfloat16),
                lse=None, sinks=None, indices=None, topk_lens=None, q_scale_tensor=None,
                k_scale_tensor=None, softmax_scale=576**-0.5, q_scale=None, k_scale=None,
                causal=True, max_seq_len=0, pdl=False, backend="auto", tactic=-1)  # fmt: skip
    args.update(override)
    return list(args.values())


FP8_OP_ERRORS = [
    (dict(k_scale=0.25), ValueError, "q_scale: expected a scale (host value or pointer) for an "
     "fp8 q, given none"),
    (dict(q_scale=0.5), ValueError, "k_scale: expected a scale (host value or pointer) for an "
     "fp8 cache, given none"),
    (dict(q_scale=float("nan"), k_scale=0.25), ValueError,
     "q_scale: expected a finite value > 0, given nan"),
    (dict(q_scale=0.5, k_scale=-2.0), ValueError, "k_scale: expected a finite value > 0, given -2"),
    (dict(q_scale=0.5, k_scale_tensor=torch.ones(1, dtype=torch.float64)), TypeError,
     "k_scale: expected dtype float32, given float64"),
    (dict(q_scale_tensor=torch.ones(2), k_scale=0.25), ValueError,
     "q_scale: expected a one-element float32 array, given shape [2]"),
    (dict(q_scale=0.5, q_scale_tensor=torch.ones(1), k_scale=0.25), ValueError,
     "q_scale: expected a tensor or a float, given both"),
]  # fmt: skip


@pytest.mark.parametrize("override,exception,message", FP8_OP_ERRORS)
def test_fp8_op_errors_eager_and_fake_agree(override, exception, message):
    """The fake implementation checks what the metadata decides, so torch.compile reports the
    error that the eager call raises."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    q, kv, table, lens = fp8_tensors(fp8_work())
    with pytest.raises(exception, match="^" + re.escape(message)):
        torch.ops.mlakit.decode(*_raw_op_args(q, kv, table, lens, **override))
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in (q, kv, table, lens)]
        override = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
                    for k, v in override.items()}  # fmt: skip
        with pytest.raises(exception, match="^" + re.escape(message)):
            torch.ops.mlakit.decode(*_raw_op_args(*fake, **override))


def test_scales_refused_for_16bit_tensors(work):
    q, kv, table, lens = tensors(work)
    with pytest.raises(ValueError, match="^q_scale: expected none for a bf16 q, given a scale"):
        mlakit.torch.decode(q, kv, table, lens, q_scale=torch.tensor([1.0]))
    with pytest.raises(ValueError, match="^k_scale: expected none for a bf16 cache"):
        mlakit.torch.decode(q, kv, table, lens, k_scale=1.0)
    with pytest.raises(TypeError, match="^q: expected dtype bfloat16, float16 or float8_e4m3fn"):
        mlakit.torch.decode(q.view(torch.int16), kv, table, lens)


# ---- variable query lengths: cu_seqlens_q, packed rows ------------------------------------------


@pytest.fixture
def var_q_work():
    """Requests of 1, 3, 0 and 2 query tokens packed into 6 rows, and the workload they come
    from (s_q 3)."""
    w = make_workload(np.random.default_rng(9), b=4, s_q=3, h_q=8, page_size=16,
                      seq_lens=[9, 40, 5, 33])  # fmt: skip
    q, q_values, cu = pack_queries(w, [1, 3, 0, 2])
    kv, table, lens = tensors(w)[1:]
    return w, q_values, (as_torch(q, torch.bfloat16), kv, table, lens, torch.from_numpy(cu))


def test_var_q_op_matches_reference_and_decoder(var_q_work):
    w, q_values, (q, kv, table, lens, cu) = var_q_work
    out, lse = mlakit.torch.decode(q, kv, table, lens, cu_seqlens_q=cu, return_lse=True)
    assert out.shape == (6, 8, 512) and lse.shape == (6, 8)
    want, want_lse = var_q_reference(w, q_values, cu.numpy(), page_size=16)
    assert_close_to_reference(values(out), want, "bf16")
    np.testing.assert_allclose(lse.numpy(), want_lse, atol=2e-4, rtol=1e-5)
    # The decoder's s_q: a bound from q's rows (6) without max_q_len, the longest (3) with it.
    assert torch.equal(mlakit.torch.decode(q, kv, table, lens, cu_seqlens_q=cu, max_q_len=3), out)
    decoder = mlakit.Decoder(h_q=8, s_q=3, page_size=16, max_batch=4, max_seq_len=64, var_q=True,
                             backend="cpu")  # fmt: skip
    assert torch.equal(decoder.run(q, kv, table, lens, cu_seqlens_q=cu), out)
    given = torch.full((6, 8, 512), float("nan"), dtype=torch.bfloat16)
    assert mlakit.torch.decode(q, kv, table, lens, cu_seqlens_q=cu, out=given) is given
    assert torch.equal(given, out)


def test_var_q_torch_compile_fullgraph(var_q_work):
    q, kv, table, lens, cu = var_q_work[2]

    def step(q, kv, table, lens, cu):
        out, lse = mlakit.torch.decode(q * 1, kv, table, lens, cu_seqlens_q=cu, max_q_len=3,
                                       return_lse=True)  # fmt: skip
        return out.float() * 2, lse

    compiled = torch.compile(step, fullgraph=True)
    out, lse = compiled(q, kv, table, lens, cu)
    eager_out, eager_lse = step(q, kv, table, lens, cu)
    assert torch.equal(out, eager_out) and torch.equal(lse, eager_lse)
    # New offsets in the same tensor: the same compiled graph follows them.
    cu.copy_(torch.tensor([0, 2, 2, 5, 6], dtype=torch.int32))
    out, lse = compiled(q, kv, table, lens, cu)
    assert torch.equal(out, step(q, kv, table, lens, cu)[0])


def _var_q_op_args(q_, kv, table, lens, cu, **override):
    q = override.pop("q", q_)
    rows = q_.shape[0]
    args = dict(q=q, kv_cache=kv, block_table=table, seq_lens=lens,
                out=torch.empty((rows, q_.shape[-2], 512), dtype=torch.bfloat16),
                lse=torch.empty((rows, q_.shape[-2]), dtype=torch.float32), sinks=None,
                indices=None, topk_lens=None, q_scale_tensor=None, k_scale_tensor=None,
                softmax_scale=576**-0.5, q_scale=None, k_scale=None, causal=True, max_seq_len=0,
                pdl=False, backend="auto", tactic=-1, extra_kv_cache=None, extra_indices=None,
                extra_topk_lens=None, lse_base2=False, cp_world=1, cp_rank=0, cp_interleave=1,
                cu_seqlens_q=cu, max_q_len=3)  # fmt: skip
    args.update(override)
    return list(args.values())


@pytest.mark.parametrize("max_q_len", [3, 0])
def test_var_q_opcheck(var_q_work, max_q_len):
    args = _var_q_op_args(*var_q_work[2], max_q_len=max_q_len)
    torch.library.opcheck(torch.ops.mlakit.decode.default, args)


def var_q_op_errors():
    q = torch.zeros((6, 8, 576), dtype=torch.bfloat16)
    return [
        (dict(cu_seqlens_q=torch.zeros(5, dtype=torch.int64)), TypeError,
         "cu_seqlens_q: expected dtype int32, given int64"),
        (dict(cu_seqlens_q=torch.zeros((1, 5), dtype=torch.int32)), ValueError,
         "cu_seqlens_q: expected shape [b + 1] = [>= 2] (b >= 1 requests), given [1, 5]"),
        (dict(q=q[None]), ValueError,
         "q: expected shape [total, h_q, d_qk] (packed by query token, with cu_seqlens_q), "
         "given [1, 6, 8, 576]"),
        (dict(out=torch.empty((5, 8, 512), dtype=torch.bfloat16)), ValueError,
         "out: expected shape [6, 8, 512] (q's rows, packed by query token), given [5, 8, 512]"),
        (dict(lse=torch.empty((6, 8, 1))), ValueError,
         "lse: expected shape [6, 8] (q's rows, packed by query token), given [6, 8, 1]"),
        (dict(max_q_len=-1), ValueError,
         "max_q_len: expected 0 (a bound from q's rows) or 1..16, given -1"),
        (dict(max_q_len=17), ValueError,
         "max_q_len: expected 0 (a bound from q's rows) or 1..16, given 17"),
    ]  # fmt: skip


@pytest.mark.parametrize("override,exception,message", var_q_op_errors())
def test_var_q_op_errors_eager_and_fake_agree(var_q_work, override, exception, message):
    from torch._subclasses.fake_tensor import FakeTensorMode

    inputs = var_q_work[2]
    with pytest.raises(exception, match="^" + re.escape(message)):
        torch.ops.mlakit.decode(*_var_q_op_args(*inputs, **override))
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in inputs]
        override = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v
                    for k, v in override.items()}  # fmt: skip
        with pytest.raises(exception, match="^" + re.escape(message)):
            torch.ops.mlakit.decode(*_var_q_op_args(*fake, **override))


def test_var_q_arguments_without_offsets_are_refused(work):
    q, kv, table, lens = tensors(work)
    with pytest.raises(ValueError, match="^max_q_len: expected 0 without cu_seqlens_q, given 2"):
        mlakit.torch.decode(q, kv, table, lens, max_q_len=2)
    with pytest.raises(ValueError, match=r"^q: expected shape \[b, s_q, h_q, d_qk\]"):
        mlakit.torch.decode(q[0], kv, table, lens)
