"""Views through the Python API (cpu backend): q, the KV cache and out with a contiguous last
dimension and free outer strides are read and written in place, with the bits of the dense run;
NumPy and (where installed) PyTorch views alike."""

import pytest

np = pytest.importorskip("numpy")

import mlakit  # noqa: E402
from numpy_reference import make_workload  # noqa: E402

H, S, PAGE = 4, 2, 16


def padded(x, pad, fill=0xFFFF):
    """x copied into an array whose last dimension is `pad` wider (the rest NaN bits), sliced
    back: a view whose rows are further apart than they are long."""
    big = np.full(x.shape[:-1] + (x.shape[-1] + pad,), fill, x.dtype)
    big[..., : x.shape[-1]] = x
    return big[..., : x.shape[-1]]


@pytest.fixture
def work():
    return make_workload(np.random.default_rng(7), b=3, s_q=S, h_q=H, page_size=PAGE,
                         seq_lens=[0, 21, 50])  # fmt: skip


def decoder():
    return mlakit.Decoder(h_q=H, s_q=S, page_size=PAGE, max_batch=3, max_seq_len=64, lse=True,
                          backend="cpu")  # fmt: skip


def test_numpy_views_give_the_dense_bits(work):
    d = decoder()
    base_out, base_lse = d.run(work.q, work.kv_cache, work.block_table, work.seq_lens)

    # q: rows padded, and stored head-major ([b, h, s, 576] seen as [b, s, h, 576]).
    q_padded = padded(work.q, 64)
    q_head_major = np.ascontiguousarray(work.q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    # The cache: pages padded (vLLM's layout) and tokens padded.
    n = work.kv_cache.shape[0]
    pages = np.full((n, PAGE * 576 + 64), 0xFFFF, work.kv_cache.dtype)
    pages[:, : PAGE * 576] = work.kv_cache.reshape(n, -1)
    kv_padded_pages = pages[:, : PAGE * 576].reshape(n, PAGE, 576)
    assert kv_padded_pages.strides[0] == (PAGE * 576 + 64) * 2
    kv_padded_tokens = padded(work.kv_cache, 8)
    for q, kv in [(q_padded, kv_padded_pages), (q_head_major, kv_padded_tokens)]:
        assert not q.flags.c_contiguous and not kv.flags.c_contiguous
        # out: rows padded; the padding keeps its sentinel.
        out_big = np.full((3, S, H, 512 + 64), 0x1234, np.uint16)
        out = out_big[..., :512]
        lse = np.full((3, S, H), np.nan, np.float32)
        got, got_lse = d.run(q, kv, work.block_table, work.seq_lens, out=out, lse=lse)
        assert got is out
        np.testing.assert_array_equal(out.view(np.uint16), base_out.view(np.uint16))
        np.testing.assert_array_equal(lse, base_lse)
        assert (out_big[..., 512:] == 0x1234).all(), "out was written outside its rows"


def test_numpy_4d_cache_views(work):
    """FlashMLA's [pages, page, 1, 576] and FlashInfer's [pages, 1, page, 576], padded."""
    d = decoder()
    base, _ = d.run(work.q, work.kv_cache, work.block_table, work.seq_lens)
    kv = padded(work.kv_cache, 64)
    for view in (kv[:, :, None, :], kv[:, None, :, :]):
        got, _ = d.run(work.q, view, work.block_table, work.seq_lens)
        np.testing.assert_array_equal(got.view(np.uint16), base.view(np.uint16))


def test_overlapping_out_rows_are_refused(work):
    d = decoder()
    big = np.zeros((3, S, H, 512), np.uint16)
    # Heads 256 apart: each row of 512 runs into the next head's.
    out = np.lib.stride_tricks.as_strided(big, shape=(3, S, H, 512),
                                          strides=(S * H * 1024, H * 1024, 512, 2))  # fmt: skip
    with pytest.raises(ValueError, match="out strides: expected rows that do not overlap"):
        d.run(work.q, work.kv_cache, work.block_table, work.seq_lens, out=out)


def test_torch_views_give_the_dense_bits(work):
    torch = pytest.importorskip("torch")
    d = decoder()
    base, base_lse = d.run(work.q, work.kv_cache, work.block_table, work.seq_lens)
    q = torch.from_numpy(padded(work.q, 64).view(np.int16)).view(torch.bfloat16)
    kv_big = torch.from_numpy(padded(work.kv_cache, 64).view(np.int16)).view(torch.bfloat16)
    out_big = torch.zeros((3, S, H, 1024), dtype=torch.bfloat16)
    out = out_big[..., 256:768]  # 16-byte aligned rows inside wider ones
    got, got_lse = d.run(q, kv_big, torch.from_numpy(work.block_table),
                         torch.from_numpy(work.seq_lens), out=out)  # fmt: skip
    assert got is out and not out.is_contiguous()
    np.testing.assert_array_equal(out.view(torch.int16).numpy().view(np.uint16),
                                  base.view(np.uint16))  # fmt: skip
    np.testing.assert_array_equal(got_lse.numpy(), base_lse)
    assert not out_big[..., :256].any() and not out_big[..., 768:].any()
