"""Variable query lengths (``Decoder(var_q=True)``, ``cu_seqlens_q``) on the cpu backend: packed
rows against the float64 reference and bit for bit against each request run alone with a uniform
s_q of its own q_len; q_len 0 requests; rows past cu_seqlens_q[b] left as they were; views; the
sparse index rows packed too; and every refusal by name (NumPy; the PyTorch op is in
test_torch_cpu.py)."""

import pytest

np = pytest.importorskip("numpy")

import mlakit  # noqa: E402
from numpy_reference import (  # noqa: E402
    NAN_BF16,
    assert_close_to_reference,
    make_workload,
    out_values,
    pack_queries,
    var_q_reference,
)

# (name, decoder arguments, q_lens, seq_lens)
CASES = [
    ("causal", dict(h_q=8, page_size=16), [1, 3, 0, 2], [9, 40, 5, 33]),
    ("noncausal", dict(h_q=4, page_size=32, causal=False), [2, 1, 3], [3, 70, 41]),
    ("sinks-lse", dict(h_q=8, page_size=16, sinks=True, lse=True), [4, 0, 1], [0, 17, 30]),
    ("long-short", dict(h_q=16, page_size=64), [16, 1], [1000, 2]),
    ("page1", dict(h_q=2, page_size=1), [2, 2, 1], [5, 1, 9]),
]


def workload(seed, q_lens, seq_lens, h_q, page_size):
    w = make_workload(np.random.default_rng(seed), b=len(q_lens), s_q=max(max(q_lens), 1),
                      h_q=h_q, page_size=page_size, seq_lens=seq_lens)  # fmt: skip
    q, q_values, cu = pack_queries(w, q_lens)
    return w, q, q_values, cu


def decoder(s_q, max_batch=4, **problem):
    return mlakit.Decoder(s_q=s_q, max_batch=max_batch, max_seq_len=1024, var_q=True,
                          backend="cpu", **problem)  # fmt: skip


def run(dec, w, q, cu, **kwargs):
    result = dec.run(q, w.kv_cache, w.block_table, w.seq_lens, cu_seqlens_q=cu, **kwargs)
    return result if isinstance(result, tuple) else (result, None)


@pytest.mark.parametrize("name,problem,q_lens,seq_lens", CASES, ids=[c[0] for c in CASES])
def test_matches_reference_and_each_request_alone(name, problem, q_lens, seq_lens):
    w, q, q_values, cu = workload(len(name), q_lens, seq_lens, problem["h_q"],
                                  problem["page_size"])  # fmt: skip
    s_q = max(q_lens)
    sinks = None
    if problem.get("sinks"):
        sinks = np.random.default_rng(1).standard_normal(problem["h_q"]).astype(np.float32)
    dec = decoder(s_q, **problem)
    assert dec.problem["var_q"] and "var_q" in repr(dec)
    out, lse = run(dec, w, q, cu, sinks=sinks)
    assert out.shape == (int(cu[-1]), problem["h_q"], 512)
    want, want_lse = var_q_reference(w, q_values, cu, page_size=problem["page_size"],
                                     causal=problem.get("causal", True), sinks=sinks)  # fmt: skip
    assert_close_to_reference(out_values(out, "bf16"), want, "bf16")
    if lse is not None:
        assert lse.shape == (int(cu[-1]), problem["h_q"])
        finite = np.isfinite(want_lse)
        assert np.array_equal(np.isneginf(lse), ~finite)
        np.testing.assert_allclose(lse[finite], want_lse[finite], atol=2e-4, rtol=1e-5)

    # Each request alone, uniform s_q = its q_len: the same bits.
    for i, n in enumerate(q_lens):
        if n == 0:
            continue
        rows = slice(int(cu[i]), int(cu[i + 1]))
        alone = mlakit.Decoder(s_q=n, max_batch=1, max_seq_len=1024, backend="cpu", **problem)
        got = alone.run(q[rows][None], w.kv_cache, w.block_table[i : i + 1], w.seq_lens[i : i + 1],
                        sinks=sinks)  # fmt: skip
        got_out, got_lse = got if isinstance(got, tuple) else (got, None)
        assert np.array_equal(out[rows].view(np.uint16), got_out[0].view(np.uint16)), f"req {i}"
        if lse is not None:
            assert np.array_equal(lse[rows], got_lse[0]), f"request {i}"


def test_fp8_cache_and_query():
    """The fp8-q mode with variable query lengths: each request's rows equal its run alone."""
    q_lens = [2, 1, 0]
    w = make_workload(np.random.default_rng(9), b=3, s_q=2, h_q=4, page_size=16,
                      seq_lens=[30, 3, 8], q_dtype="fp8_e4m3", kv_dtype="fp8_e4m3",
                      q_scale=0.5, k_scale=0.25)  # fmt: skip
    q, q_values, cu = pack_queries(w, q_lens)
    fp8 = dict(h_q=4, page_size=16, q_dtype="fp8_e4m3", kv_dtype="fp8_e4m3", lse=True)
    scales = dict(q_scale=0.5, k_scale=0.25)
    out, lse = decoder(2, **fp8).run(q, w.kv_cache, w.block_table, w.seq_lens, cu_seqlens_q=cu,
                                     **scales)  # fmt: skip
    want, _ = var_q_reference(w, q_values, cu, page_size=16)
    assert_close_to_reference(out_values(out, "bf16"), want, "bf16")
    for i, n in enumerate(q_lens[:2]):
        rows = slice(int(cu[i]), int(cu[i + 1]))
        alone = mlakit.Decoder(s_q=n, max_batch=1, max_seq_len=64, backend="cpu", **fp8)
        got, got_lse = alone.run(q[rows][None], w.kv_cache, w.block_table[i : i + 1],
                                 w.seq_lens[i : i + 1], **scales)  # fmt: skip
        assert np.array_equal(out[rows].view(np.uint16), got[0].view(np.uint16))
        assert np.array_equal(lse[rows], got_lse[0])


def test_rows_past_the_packed_ones_are_left_alone():
    """q, out and lse with more rows than cu_seqlens_q[b]: the extra rows are neither read (NaN
    in q) nor written (NaN canaries in out and lse), and q_len 0 requests write nothing."""
    q_lens = [0, 2, 0, 1]
    w, q, _, cu = workload(3, q_lens, [4, 20, 0, 35], 4, 16)
    spare = np.full((3,) + q.shape[1:], NAN_BF16, np.uint16)
    q = np.concatenate([q, spare])  # 6 rows, 3 packed
    dec = decoder(2, h_q=4, page_size=16, lse=True)
    out = np.full((6, 4, 512), NAN_BF16, np.uint16)
    lse = np.full((6, 4), np.nan, np.float32)
    run(dec, w, q, cu, out=out, lse=lse)
    assert not np.isnan(out_values(out[:3], "bf16")).any() and not np.isnan(lse[:3]).any()
    assert (out[3:] == NAN_BF16).all() and np.isnan(lse[3:]).all()
    # Every request empty: nothing is written at all.
    out[:] = NAN_BF16
    lse[:] = np.nan
    zeros = np.zeros(5, np.int32)
    dec.run(q, w.kv_cache, w.block_table, w.seq_lens, cu_seqlens_q=zeros, out=out, lse=lse)
    assert (out == NAN_BF16).all() and np.isnan(lse).all()


def test_views_are_read_and_written_in_place():
    q_lens = [2, 1, 3]
    w, q, _, cu = workload(4, q_lens, [30, 7, 50], 4, 16)
    dec = decoder(3, h_q=4, page_size=16)
    base, _ = run(dec, w, q, cu)
    # q and out with padded heads (slices of wider buffers).
    wide = np.zeros((q.shape[0], 4, 640), np.uint16)
    wide[..., :576] = q
    out = np.zeros((q.shape[0], 4, 640), np.uint16)[..., :512]
    got, _ = run(dec, w, wide[..., :576], cu, out=out)
    assert got is out and np.array_equal(out, base.view(np.uint16))


def test_sparse_index_rows_are_packed_too():
    """Sparse decode with var_q: indices [total, topk], one row per packed query token, topk_lens
    [b]; each request's rows equal its run alone."""
    q_lens = [2, 0, 3]
    w, q, _, cu = workload(5, q_lens, [40, 10, 64], 4, 16)
    rng = np.random.default_rng(6)
    pages = w.block_table[w.block_table >= 0]
    slots = (pages[:, None] * 16 + np.arange(16)[None, :]).ravel()  # the requests' pages
    indices = rng.choice(slots, size=(int(cu[-1]), 8)).astype(np.int32)
    indices[0, 3] = -1
    topk_lens = np.array([8, 8, 5], np.int32)
    dec = mlakit.Decoder(h_q=4, s_q=3, page_size=16, max_batch=3, max_seq_len=64, topk=8,
                         var_q=True, lse=True, backend="cpu")  # fmt: skip
    out, lse = dec.run(q, w.kv_cache, indices=indices, topk_lens=topk_lens, cu_seqlens_q=cu)
    for i, n in enumerate(q_lens):
        if n == 0:
            continue
        rows = slice(int(cu[i]), int(cu[i + 1]))
        alone = mlakit.Decoder(h_q=4, s_q=n, page_size=16, max_batch=1, max_seq_len=64, topk=8,
                               lse=True, backend="cpu")  # fmt: skip
        want, want_lse = alone.run(q[rows][None], w.kv_cache, indices=indices[rows][None],
                                   topk_lens=topk_lens[i : i + 1])  # fmt: skip
        assert np.array_equal(out[rows].view(np.uint16), want[0].view(np.uint16)), f"req {i}"
        assert np.array_equal(lse[rows], want_lse[0])
    with pytest.raises(ValueError, match=r"^indices: expected shape \[total, topk\] \(q's rows\)"):
        dec.run(q, w.kv_cache, indices=indices[None], cu_seqlens_q=cu)


def refusal_cases():
    good = np.array([0, 1, 3], np.int32)
    return [
        (dict(cu_seqlens_q=None), TypeError,
         r"^cu_seqlens_q: expected an array \(the decoder was made with var_q=True\), given None"),
        (dict(cu_seqlens_q=good.astype(np.int64)), TypeError,
         "^cu_seqlens_q: expected dtype int32, given int64"),
        (dict(cu_seqlens_q=good[None]), ValueError,
         r"^cu_seqlens_q: expected shape \[b \+ 1\] = \[\*\], given \[1, 3\]"),
        (dict(cu_seqlens_q=good[:1]), ValueError,
         r"^cu_seqlens_q: expected shape \[b \+ 1\] = \[>= 2\] \(b >= 1 requests\), given \[1\]"),
        (dict(cu_seqlens_q=np.array([0, 1, 3, 3], np.int32)), ValueError,
         r"^block_table: expected shape \[b, max_pages\] = \[3, >= 1\], given \[2, "),
        (dict(cu_seqlens_q=np.array([0, 2, 4], np.int32)), ValueError,
         r"^cu_seqlens_q\[2\]: expected 0..3 \(the rows of q, out and lse\), given 4"),
        (dict(cu_seqlens_q=np.array([1, 2, 3], np.int32)), ValueError,
         r"^cu_seqlens_q\[0\]: expected 0, given 1"),
        (dict(cu_seqlens_q=np.array([0, 3, 3], np.int32)), ValueError,
         r"^cu_seqlens_q\[1\]: expected 0..2 \(cu_seqlens_q\[0\] plus a query length of 0..s_q 2"),
        (dict(cu_seqlens_q=np.array([0, 2, 1], np.int32)), ValueError,
         r"^cu_seqlens_q\[2\]: expected 2..4 "),
        (dict(out=np.zeros((4, 2, 512), np.uint16)), ValueError,
         r"^out: expected shape \[total, h_q, 512\] \(q's rows\) = \[3, 2, 512\], given \[4, 2"),
        (dict(lse=np.zeros((3, 2, 1), np.float32)), ValueError,
         r"^lse: expected shape \[total, h_q\] \(q's rows\) = \[3, 2\], given \[3, 2, 1\]"),
    ]  # fmt: skip


@pytest.mark.parametrize("override,exception,message", refusal_cases())
def test_refusals_by_name(override, exception, message):
    w, q, _, cu = workload(7, [1, 2], [5, 9], 2, 16)
    dec = decoder(2, h_q=2, page_size=16, lse=True)
    args = dict(cu_seqlens_q=cu)
    args.update(override)
    with pytest.raises(exception, match=message):
        dec.run(q, w.kv_cache, w.block_table, w.seq_lens, **args)


def test_batched_q_and_offsets_without_var_q_are_refused():
    w, q, _, cu = workload(8, [1, 2], [5, 9], 2, 16)
    dec = decoder(2, h_q=2, page_size=16)
    with pytest.raises(ValueError, match=r"^q: expected shape \[total, h_q, 576\] = \[\*, 2, 576"):
        dec.run(w.q, w.kv_cache, w.block_table, w.seq_lens, cu_seqlens_q=cu)
    uniform = mlakit.Decoder(h_q=2, s_q=2, page_size=16, max_batch=2, max_seq_len=64,
                             backend="cpu")  # fmt: skip
    with pytest.raises(ValueError, match=r"^cu_seqlens_q: expected None \(the decoder was made "
                       r"with var_q=False\), given numpy.ndarray"):  # fmt: skip
        uniform.run(w.q, w.kv_cache, w.block_table, w.seq_lens, cu_seqlens_q=cu)
