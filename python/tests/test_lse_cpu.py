"""The LSE convention through the Python API (cpu backend; mlakit.h, "LSE"): natural log, -inf
for a row that sees no token; ``lse_base2=True`` gives the natural LSE times log2(e) with the same
out, -inf staying -inf; it needs ``lse=True``; ``mlakit.cp.merge_partials(lse_base2=True)`` takes
and returns base-2 LSEs; the torch op takes the option too (where PyTorch is installed)."""

import math

import pytest

np = pytest.importorskip("numpy")

import mlakit  # noqa: E402
from mlakit import cp  # noqa: E402
from numpy_reference import make_workload  # noqa: E402

H, S, PAGE = 4, 2, 16
LOG2E = np.float32(1.4426950408889634)


@pytest.fixture
def work():
    # Length 0 (every row empty) and 1 (causal MTP: token 0 sees nothing).
    return make_workload(np.random.default_rng(11), b=4, s_q=S, h_q=H, page_size=PAGE,
                         seq_lens=[0, 1, 21, 50])  # fmt: skip


def decoder(base2):
    return mlakit.Decoder(h_q=H, s_q=S, page_size=PAGE, max_batch=4, max_seq_len=64, lse=True,
                          lse_base2=base2, backend="cpu")  # fmt: skip


def test_base2_is_the_natural_lse_times_log2e(work):
    args = (work.q, work.kv_cache, work.block_table, work.seq_lens)
    out_n, lse_n = decoder(False).run(*args)
    out_2, lse_2 = decoder(True).run(*args)
    assert np.array_equal(out_n, out_2)
    empty = np.isneginf(lse_n)
    assert empty[0].all() and empty[1, 0].all() and not empty[2:].any()
    assert np.array_equal(np.isneginf(lse_2), empty)
    assert np.array_equal(lse_2[~empty], lse_n[~empty] * LOG2E)
    assert decoder(True)._problem["lse_base2"] is True
    assert "lse base 2" in decoder(True)._impl.describe()


def test_base2_needs_lse():
    with pytest.raises(ValueError, match="lse_base2"):
        mlakit.Decoder(h_q=H, page_size=PAGE, max_batch=1, max_seq_len=16, lse_base2=True,
                       backend="cpu")  # fmt: skip


def test_merge_takes_and_returns_base2():
    rng = np.random.default_rng(5)
    world, b = 3, 2
    partial_out = rng.standard_normal((world, b, S, H, 512)).astype(np.float32)
    lse = rng.uniform(-3, 5, size=(world, b, S, H)).astype(np.float32)
    lse[1, 0, 0, 0] = -np.inf  # an empty partial: its values are not read
    partial_out[1, 0, 0, 0] = np.nan
    lse[:, 1, 1, 2] = -np.inf  # a row with every partial empty
    out_n, merged_n = cp.merge_partials(partial_out, lse)
    out_2, merged_2 = cp.merge_partials(partial_out, lse * LOG2E, lse_base2=True)
    np.testing.assert_allclose(out_2, out_n, rtol=1e-5, atol=1e-6)
    assert np.isneginf(merged_2[1, 1, 2]) and (out_2[1, 1, 2] == 0).all()
    finite = ~np.isneginf(merged_n)
    np.testing.assert_allclose(merged_2[finite], merged_n[finite] * LOG2E, rtol=1e-5)
    # By hand for one row: weights exp2(lse2_k - m), lse2 = m + log2(sum).
    l2 = (lse * LOG2E)[:, 1, 0, 3].astype(np.float64)
    m = l2.max()
    assert math.isclose(merged_2[1, 0, 3], m + math.log2(np.exp2(l2 - m).sum()), rel_tol=1e-5)


def test_torch_op_takes_the_option(work):
    torch = pytest.importorskip("torch")
    import mlakit.torch as mt

    q = torch.from_numpy(work.q.view(np.int16)).view(torch.bfloat16)
    kv = torch.from_numpy(work.kv_cache.view(np.int16)).view(torch.bfloat16)
    table = torch.from_numpy(work.block_table)
    lens = torch.from_numpy(work.seq_lens)
    out_n, lse_n = mt.decode(q, kv, table, lens, return_lse=True, max_seq_len=64)
    out_2, lse_2 = mt.decode(q, kv, table, lens, return_lse=True, lse_base2=True, max_seq_len=64)
    assert torch.equal(out_n.view(torch.int16), out_2.view(torch.int16))
    finite = ~torch.isneginf(lse_n)
    assert torch.equal(torch.isneginf(lse_2), ~finite)
    torch.testing.assert_close(lse_2[finite], lse_n[finite] * float(LOG2E), rtol=1e-6, atol=0.0)
    po = torch.stack([out_n.float(), out_n.float()])
    pl = torch.stack([lse_2, lse_2])
    merged_out, merged_lse = mt.merge_partials(po, pl, lse_base2=True)
    # Two equal partials: the same out, lse + 1 in base 2.
    torch.testing.assert_close(merged_out, out_n.float(), rtol=1e-5, atol=1e-6)
    assert torch.equal(torch.isneginf(merged_lse), ~finite)
    torch.testing.assert_close(merged_lse[finite], lse_2[finite] + 1.0, rtol=1e-5, atol=1e-5)
