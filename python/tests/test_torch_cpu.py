"""PyTorch on host tensors (cpu backend): Decoder.run, the mlakit::decode op, torch.compile and
the dtype handling of torch tensors. Skipped where PyTorch is not installed."""

import pytest

np = pytest.importorskip("numpy")

torch = pytest.importorskip("torch")

import mlakit  # noqa: E402
import mlakit.torch  # noqa: E402
from numpy_reference import (  # noqa: E402
    assert_close_to_reference,
    make_workload,
    reference,
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
    with pytest.raises(ValueError, match="q: expected a C-contiguous"):
        decoder.run(q.transpose(1, 2).contiguous().transpose(1, 2), kv, table, lens)


def test_decoders_are_cached_per_signature(work):
    from mlakit import _cache

    _cache.clear()
    q, kv, table, lens = tensors(work)
    mlakit.torch.decode(q, kv, table, lens)
    mlakit.torch.decode(q[:1], kv, table[:1], lens[:1])
    assert len(_cache._decoders) == 1
    mlakit.torch.decode(q, kv, table, lens, return_lse=True)
    assert len(_cache._decoders) == 2
