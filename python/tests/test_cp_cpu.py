"""Context parallel decode through the Python API on the cpu backend (issue 38): each rank's
Decoder over its shard of a global cache (sharded as tests/cpu/cp_test.cc does, through
harness::shard_inputs), merged by mlakit.cp.merge_partials, equals the unsharded Decoder; sinks
through the merge; torch cpu tensors; the helpers against cp.h's arithmetic; argument errors."""

import pytest

np = pytest.importorskip("numpy")

import mlakit  # noqa: E402
from mlakit import cp  # noqa: E402
from numpy_reference import make_workload, out_values  # noqa: E402


def assert_merged_close(out, want):
    """bf16 merged output against the unsharded bf16 one. The partials are rounded to bf16 before
    the merge and the result again, so allow two bf16 roundings (rtol 2^-7, as
    harness::default_tolerance) plus cancellation noise relative to the magnitude (2^-8 max)."""
    got, ref = out_values(out, "bf16"), out_values(want, "bf16")
    assert np.isfinite(got).all(), "output has NaN or inf"
    err = np.abs(got - ref)
    bad = err > 2.0**-7 * np.abs(ref) + 2.0**-8 * max(1e-6, float(np.abs(ref).max()))
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} differ; max error {err.max():.3g}"
    rel_l2 = np.linalg.norm(got - ref) / max(1e-30, float(np.linalg.norm(ref)))
    assert rel_l2 < 2.0**-8, f"relative L2 error {rel_l2:.3g}"


def shard(w, page_size, world, rank, interleave):
    """Rank ``rank``'s cache and block table, as harness::shard_inputs builds them: request i's
    local tokens fill pages of its own numbered from the end of the cache down, every other byte
    NaN, unused table slots out of range."""
    lens = [int(n) for n in w.seq_lens]
    local_pages = [-(-cp.local_len(n, world, rank, interleave) // page_size) for n in lens]
    num_pages = max(sum(local_pages), 1)
    table = np.full((len(lens), max(1, max(local_pages))), num_pages + 7919, np.int32)
    cache = np.full((num_pages,) + w.kv_cache.shape[1:], 0xFFFF, w.kv_cache.dtype)  # NaN bf16
    next_page = num_pages - 1
    for i, n in enumerate(lens):
        for k in range(local_pages[i]):
            table[i, k] = next_page
            next_page -= 1
        for g in range(n):
            if cp.rank_of(g, world, interleave) != rank:
                continue
            j = cp.local_position(g, world, interleave)
            src = w.kv_cache[w.block_table[i, g // page_size], g % page_size]
            cache[table[i, j // page_size], j % page_size] = src
    return cache, table


CASES = [
    # (h_q, s_q, page_size, world, interleave, seq_lens)
    (16, 1, 16, 2, 1, [0, 1, 37, 100]),
    (8, 3, 16, 3, 4, [0, 2, 13, 90]),
    (4, 2, 1, 4, 64, [1, 3, 300]),
    (128, 1, 64, 2, 64, [129, 64]),
]


def sharded_and_unsharded(rng, h_q, s_q, page_size, world, interleave, seq_lens, sinks=None):
    b = len(seq_lens)
    w = make_workload(rng, b=b, s_q=s_q, h_q=h_q, page_size=page_size, seq_lens=seq_lens)
    common = dict(h_q=h_q, s_q=s_q, page_size=page_size, max_batch=b, backend="cpu", lse=True,
                  max_seq_len=max(seq_lens))  # fmt: skip
    full = mlakit.Decoder(sinks=sinks is not None, **common)
    want = full.run(w.q, w.kv_cache, w.block_table, w.seq_lens, sinks=sinks)
    partial_out = np.empty((world, b, s_q, h_q, 512), want[0].dtype)
    partial_lse = np.empty((world, b, s_q, h_q), np.float32)
    for rank in range(world):
        cache, table = shard(w, page_size, world, rank, interleave)
        d = mlakit.Decoder(cp_world=world, cp_rank=rank, cp_interleave=interleave, **common)
        assert d.problem["cp_rank"] == rank and d.problem["cp_world"] == world
        d.run(w.q, cache, table, w.seq_lens, out=partial_out[rank], lse=partial_lse[rank])
    return partial_out, partial_lse, want


@pytest.mark.parametrize("h_q,s_q,page_size,world,interleave,seq_lens", CASES)
def test_sharded_decode_merges_to_unsharded(h_q, s_q, page_size, world, interleave, seq_lens):
    rng = np.random.default_rng(world * 100 + interleave)
    partial_out, partial_lse, (want_out, want_lse) = sharded_and_unsharded(
        rng, h_q, s_q, page_size, world, interleave, seq_lens
    )
    out, lse = cp.merge_partials(partial_out, partial_lse)
    assert out.shape == want_out.shape and out.dtype == want_out.dtype
    assert_merged_close(out, want_out)
    empty = np.isneginf(want_lse)
    assert (np.isneginf(lse) == empty).all()
    np.testing.assert_allclose(lse[~empty], want_lse[~empty], rtol=1e-5, atol=1e-5)


def test_sinks_are_applied_by_the_merge():
    rng = np.random.default_rng(7)
    h_q = 8
    sinks = rng.standard_normal(h_q).astype(np.float32)
    sinks[0] = -np.inf  # no sink for head 0
    partial_out, partial_lse, (want_out, _) = sharded_and_unsharded(
        rng, h_q, 2, 16, 3, 2, [0, 5, 40], sinks=sinks
    )
    out = np.full(want_out.shape, 0xFFFF, want_out.dtype)  # poisoned
    lse = np.full(partial_lse.shape[1:], np.nan, np.float32)
    got_out, got_lse = cp.merge_partials(partial_out, partial_lse, sinks=sinks, out=out, lse=lse)
    assert got_out is out and got_lse is lse
    assert_merged_close(out, want_out)


def test_merge_formula_fp32_and_empty_rows():
    rng = np.random.default_rng(3)
    po = rng.standard_normal((3, 2, 1, 4, 512)).astype(np.float32)
    pl = (rng.standard_normal((3, 2, 1, 4)) * 3).astype(np.float32)
    pl[:, 1, 0, 2] = -np.inf  # a row no rank holds
    pl[1, 0, 0, 0] = -np.inf  # one empty partial
    po[1, 0, 0, 0] = np.nan  # ... whose out is not read
    out, lse = cp.merge_partials(po, pl)
    m = pl.max(axis=0)
    w = np.exp(pl - np.where(np.isneginf(m), 0, m))
    total = w.sum(axis=0)
    want = np.einsum("kbsh,kbshd->bshd", w, np.nan_to_num(po)) / np.where(total > 0, total, 1)[
        ..., None
    ]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    assert (out[1, 0, 2] == 0).all() and np.isneginf(lse[1, 0, 2])
    ok = total > 0
    np.testing.assert_allclose(lse[ok], m[ok] + np.log(total[ok]), rtol=1e-5)


def test_helpers_match_the_arithmetic():
    for world in (1, 2, 3, 7):
        for interleave in (1, 3, 64):
            count = [0] * world
            for g in range(3 * world * interleave + 5):
                for r in range(world):
                    assert cp.local_len(g, world, r, interleave) == count[r]
                r = cp.rank_of(g, world, interleave)
                assert r == g // interleave % world
                j = cp.local_position(g, world, interleave)
                assert j == count[r]
                assert cp.global_position(j, world, r, interleave) == g
                count[r] += 1
    assert [cp.local_len(1000, 4, r, 64) for r in range(4)] == [256, 256, 256, 232]


def test_helper_errors_name_the_argument():
    with pytest.raises(ValueError, match="^world:"):
        cp.local_len(10, 0, 0)
    with pytest.raises(ValueError, match="^rank:"):
        cp.local_len(10, 2, 2)
    with pytest.raises(ValueError, match="^interleave:"):
        cp.rank_of(3, 2, 0)
    with pytest.raises(ValueError, match="^g:"):
        cp.local_position(-1, 2)


def test_decoder_cp_validation_comes_from_the_library():
    common = dict(h_q=4, max_batch=1, max_seq_len=64, backend="cpu")
    with pytest.raises(ValueError, match="cp_rank"):
        mlakit.Decoder(cp_world=2, cp_rank=2, lse=True, **common)
    with pytest.raises(ValueError, match="cp_world"):
        mlakit.Decoder(cp_world=0, **common)
    with pytest.raises(ValueError, match="cp_interleave"):
        mlakit.Decoder(cp_world=2, cp_interleave=0, lse=True, **common)
    with pytest.raises(ValueError, match="return_lse"):
        mlakit.Decoder(cp_world=2, **common)
    with pytest.raises(ValueError, match="has_sinks"):
        mlakit.Decoder(cp_world=2, lse=True, sinks=True, **common)
    d = mlakit.Decoder(**common)
    assert (d.problem["cp_world"], d.problem["cp_rank"], d.problem["cp_interleave"]) == (1, 0, 1)


def test_merge_argument_errors_name_the_argument():
    po = np.zeros((2, 1, 1, 4, 512), np.float32)
    pl = np.zeros((2, 1, 1, 4), np.float32)
    with pytest.raises(TypeError, match="^partial_out:"):
        cp.merge_partials([1.0], pl)
    with pytest.raises(TypeError, match="^partial_out:"):
        cp.merge_partials(po.astype(np.int32), pl)
    with pytest.raises(ValueError, match="^partial_out:"):
        cp.merge_partials(po[..., :256], pl)
    with pytest.raises(ValueError, match="^partial_lse:"):
        cp.merge_partials(po, pl[:1])
    with pytest.raises(TypeError, match="^partial_lse:"):
        cp.merge_partials(po, pl.astype(np.float64))
    with pytest.raises(ValueError, match="^sinks:"):
        cp.merge_partials(po, pl, sinks=np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="^out:"):
        cp.merge_partials(po, pl, out=np.zeros((1, 1, 4, 512), np.float16))
    with pytest.raises(ValueError, match="^lse:"):
        cp.merge_partials(po, pl, lse=np.zeros((1, 1, 5), np.float32))
    with pytest.raises(ValueError, match="^world:"):  # kMaxCpWorld is 64
        big = np.zeros((65, 1, 1, 1, 512), np.float32)
        cp.merge_partials(big, np.zeros((65, 1, 1, 1), np.float32))
    out = np.zeros((1, 1, 4, 512), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="^out:"):
        cp.merge_partials(po, pl, out=out)


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    import mlakit.torch as mt

    rng = np.random.default_rng(11)
    po = rng.standard_normal((3, 2, 2, 4, 512)).astype(np.float32)
    pl = rng.standard_normal((3, 2, 2, 4)).astype(np.float32)
    sinks = rng.standard_normal(4).astype(np.float32)
    want_out, want_lse = cp.merge_partials(po, pl, sinks=sinks)
    for dtype in (torch.float32, torch.bfloat16):
        tpo = torch.from_numpy(po).to(dtype)
        out, lse = cp.merge_partials(tpo, torch.from_numpy(pl), sinks=torch.from_numpy(sinks))
        assert out.dtype == dtype and lse.dtype == torch.float32
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        np.testing.assert_allclose(out.float().numpy(), want_out, rtol=tol, atol=tol)
        np.testing.assert_allclose(lse.numpy(), want_lse, rtol=1e-5)
        out2, lse2 = mt.merge_partials(tpo, torch.from_numpy(pl), sinks=torch.from_numpy(sinks))
        assert torch.equal(out2, out) and torch.equal(lse2, lse)
    with pytest.raises(TypeError, match="^partial_lse:"):
        mt.merge_partials(torch.from_numpy(po), torch.from_numpy(pl).double())
    compiled = torch.compile(mt.merge_partials, fullgraph=True, backend="eager")
    out3, _ = compiled(torch.from_numpy(po), torch.from_numpy(pl))
    np.testing.assert_allclose(out3.numpy(), cp.merge_partials(po, pl)[0], rtol=1e-6)
