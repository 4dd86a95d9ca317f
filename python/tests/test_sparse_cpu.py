"""Sparse decode on the cpu backend: the DeepSeek V4 cache layout, the extra cache, and FlashMLA's
sparse arguments through mlakit.compat, against the NumPy float64 reference."""

import pytest

np = pytest.importorskip("numpy")

import mlakit  # noqa: E402
from mlakit import compat  # noqa: E402
from numpy_reference import (  # noqa: E402
    assert_close_to_reference,
    bf16_bits,
    bf16_value,
    make_v4_cache,
    make_workload,
    out_values,
    sparse_reference,
    v4_page_bytes,
    v4_view,
)

try:
    import torch
except ImportError:
    torch = None

FRAMEWORKS = ["numpy"] + (["torch"] if torch is not None else [])


def random_indices(rng, b, s_q, topk, slots_of, empty=0.2):
    """[b, s_q, topk] int32 slots drawn from slots_of(i) (the request's own), some -1."""
    indices = np.full((b, s_q, topk), -1, np.int32)
    for i in range(b):
        owned = slots_of(i)
        if not owned:
            continue
        drawn = rng.choice(owned, size=(s_q, topk))
        keep = rng.random((s_q, topk)) >= empty
        indices[i][keep] = drawn[keep]
    return indices


class V4Case:
    """Random V4 inputs: a main cache whose requests own shuffled pages, an extra cache holding
    each request's window, both with spare NaN pages; q of d_qk 512 as bf16 bits."""

    def __init__(self, seed, *, b, s_q, h_q, page, topk, extra_page, extra_topk, lens=True):
        rng = np.random.default_rng(seed)
        self.page, self.extra_page = page, extra_page
        owned_pages = 3
        num_pages = b * owned_pages + 2
        order = rng.permutation(num_pages)
        unused = order[b * owned_pages :]
        self.kv, self.kv_values = make_v4_cache(rng, num_pages, page, unused=unused)
        self.indices = random_indices(
            rng, b, s_q, topk,
            lambda i: [int(pg) * page + o for pg in order[i * owned_pages : (i + 1) * owned_pages]
                       for o in range(page)],
        )  # fmt: skip
        window_pages = -(-extra_topk // extra_page)
        extra_num = max(1, b * window_pages + 1)
        extra_order = rng.permutation(extra_num)
        self.extra_kv, self.extra_values = make_v4_cache(
            rng, extra_num, extra_page, unused=extra_order[b * window_pages :]
        )
        self.extra_indices = np.full((b, s_q, extra_topk), -1, np.int32)
        for i in range(b):
            for k in range(extra_topk):
                pg = int(extra_order[i * window_pages + k // extra_page])
                self.extra_indices[i, :, k] = pg * extra_page + k % extra_page
        self.extra_indices[rng.random(self.extra_indices.shape) < 0.2] = -1
        self.extra_indices[0, :, 0] = int(extra_order[0]) * extra_page  # request 0 sees one
        self.topk_lens = rng.integers(0, topk + 1, b).astype(np.int32) if lens else None
        self.extra_lens = rng.integers(0, extra_topk + 1, b).astype(np.int32) if lens else None
        if lens:
            self.topk_lens[0] = 0  # request 0 sees the extra cache only
            self.extra_lens[0] = max(1, self.extra_lens[0])
            if b > 1:
                self.extra_lens[1] = 0  # request 1 sees the main cache only
        self.q = bf16_bits(rng.standard_normal((b, s_q, h_q, 512)).astype(np.float32))
        self.q_values = bf16_value(self.q)
        self.sinks = rng.standard_normal(h_q).astype(np.float32)

    def want(self, *, extra=True, sinks=True, scale=512**-0.5):
        caches = [(self.kv_values, self.indices, self.topk_lens)]
        if extra:
            caches.append((self.extra_values, self.extra_indices, self.extra_lens))
        return sparse_reference(self.q_values, caches, softmax_scale=scale,
                                sinks=self.sinks if sinks else None)  # fmt: skip


@pytest.mark.parametrize("s_q", [1, 2, 4])
@pytest.mark.parametrize("view", [False, True], ids=["pages", "flashmla-view"])
def test_v4_with_extra_cache_matches_reference(s_q, view):
    c = V4Case(s_q, b=3, s_q=s_q, h_q=8, page=5, topk=24, extra_page=3, extra_topk=10)
    decoder = mlakit.Decoder(h_q=8, s_q=s_q, page_size=5, max_batch=4, max_seq_len=0,
                             kv_layout="v4", topk=24, extra_topk=10, extra_page_size=3,
                             sinks=True, lse=True, backend="cpu")  # fmt: skip
    assert decoder.problem["kv_layout"] == "fp8_v4" and decoder.problem["d_qk"] == 512
    assert decoder.problem["extra_topk"] == 10 and decoder.problem["extra_page_size"] == 3
    kv = v4_view(c.kv, 5) if view else c.kv
    extra = v4_view(c.extra_kv, 3) if view else c.extra_kv
    out, lse = decoder.run(c.q, kv, indices=c.indices, topk_lens=c.topk_lens, sinks=c.sinks,
                           extra_kv_cache=extra, extra_indices=c.extra_indices,
                           extra_topk_lens=c.extra_lens)  # fmt: skip
    want, want_lse = c.want()
    assert_close_to_reference(out_values(out, "bf16"), want, "bf16")
    np.testing.assert_allclose(lse, want_lse, atol=2e-4)
    assert np.isfinite(want_lse[0]).all(), "request 0 sees its extra tokens"


def test_v4_empty_rows_and_extra_only():
    c = V4Case(11, b=2, s_q=2, h_q=4, page=16, topk=8, extra_page=16, extra_topk=8)
    c.indices[0] = -1
    c.extra_indices[0, 0] = -1  # request 0, token 0: nothing anywhere
    c.topk_lens = c.extra_lens = None
    decoder = mlakit.Decoder(h_q=4, s_q=2, page_size=16, max_batch=2, max_seq_len=0,
                             kv_layout="fp8_v4", topk=8, extra_topk=8, lse=True,
                             backend="cpu")  # fmt: skip
    out, lse = decoder.run(c.q, c.kv, indices=c.indices, extra_kv_cache=c.extra_kv,
                           extra_indices=c.extra_indices)  # fmt: skip
    want, want_lse = c.want(sinks=False)
    assert (out_values(out, "bf16")[0, 0] == 0).all()
    assert np.isneginf(lse[0, 0]).all()
    assert_close_to_reference(out_values(out, "bf16"), want, "bf16")
    np.testing.assert_allclose(lse, want_lse, atol=2e-4)


def test_extra_cache_with_the_v32_layout():
    rng = np.random.default_rng(5)
    page = 16
    w = make_workload(rng, b=2, s_q=1, h_q=4, page_size=page, seq_lens=[40, 20], blockwise=True)
    e = make_workload(rng, b=2, s_q=1, h_q=4, page_size=4, seq_lens=[8, 8], blockwise=True)
    slots = lambda work, p: (lambda i: [int(work.block_table[i, j // p]) * p + j % p  # noqa: E731
                                        for j in range(int(work.seq_lens[i]))])  # fmt: skip
    indices = random_indices(rng, 2, 1, 16, slots(w, page))
    extra_indices = random_indices(rng, 2, 1, 8, slots(e, 4))
    decoder = mlakit.Decoder(h_q=4, page_size=page, max_batch=2, max_seq_len=0, kv_layout="v32",
                             topk=16, extra_topk=8, extra_page_size=4, lse=True,
                             backend="cpu")  # fmt: skip
    out, lse = decoder.run(w.q, w.kv_cache, indices=indices, extra_kv_cache=e.kv_cache,
                           extra_indices=extra_indices)  # fmt: skip
    want, want_lse = sparse_reference(
        w.q_values, [(w.kv_values, indices, None), (e.kv_values, extra_indices, None)],
        softmax_scale=576**-0.5,
    )  # fmt: skip
    assert_close_to_reference(out_values(out, "bf16"), want, "bf16")
    np.testing.assert_allclose(lse, want_lse, atol=2e-4)


def test_decoder_refuses_misplaced_sparse_arguments():
    c = V4Case(3, b=1, s_q=1, h_q=4, page=4, topk=8, extra_page=4, extra_topk=4, lens=False)
    plain = mlakit.Decoder(h_q=4, page_size=4, max_batch=1, max_seq_len=0, kv_layout="v4",
                           topk=8, backend="cpu")  # fmt: skip
    with pytest.raises(ValueError, match=r"^extra_kv_cache: expected None \(the decoder was made "
                                         r"with extra_topk=0\)"):  # fmt: skip
        plain.run(c.q, c.kv, indices=c.indices, extra_kv_cache=c.extra_kv)
    with_extra = mlakit.Decoder(h_q=4, page_size=4, max_batch=1, max_seq_len=0, kv_layout="v4",
                                topk=8, extra_topk=4, backend="cpu")  # fmt: skip
    with pytest.raises(TypeError, match=r"^extra_indices: expected an array"):
        with_extra.run(c.q, c.kv, indices=c.indices, extra_kv_cache=c.extra_kv)
    with pytest.raises(ValueError, match=r"^q: expected shape \[b, s_q, h_q, 512\]"):
        with_extra.run(np.zeros((1, 1, 4, 576), np.uint16), c.kv, indices=c.indices,
                       extra_kv_cache=c.extra_kv, extra_indices=c.extra_indices)  # fmt: skip
    page_bytes = v4_page_bytes(4)
    with pytest.raises(ValueError, match=rf"^kv_cache: expected shape \[num_pages, {page_bytes}\]"):
        with_extra.run(c.q, c.kv[:, :-1], indices=c.indices, extra_kv_cache=c.extra_kv,
                       extra_indices=c.extra_indices)  # fmt: skip
    # A contiguous [num_pages, 4, 1, 584] array has pages 2336 bytes apart, not 2880: refused.
    packed = np.ascontiguousarray(v4_view(c.kv, 4))
    with pytest.raises(ValueError, match=rf"^kv_cache: expected strides \[{page_bytes}, 584"):
        with_extra.run(c.q, packed, indices=c.indices, extra_kv_cache=c.extra_kv,
                       extra_indices=c.extra_indices)  # fmt: skip
    with pytest.raises(ValueError, match=r"^kv_dtype: expected fp8_e4m3 with kv_layout fp8_v4"):
        mlakit.Decoder(h_q=4, max_batch=1, max_seq_len=0, kv_layout="v4", kv_dtype="bf16",
                       topk=8, backend="cpu")  # fmt: skip
    with pytest.raises(ValueError, match=r"^extra_topk: expected 0 for a dense problem"):
        mlakit.Decoder(h_q=4, max_batch=1, max_seq_len=16, extra_topk=4, backend="cpu")


# ---- FlashMLA's sparse arguments (mlakit.compat) --------------------------------------------


def wrap(framework, x):
    """A uint16 array as bfloat16, ints and floats as they are."""
    if framework == "torch":
        if x.dtype == np.uint16:
            return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(x)
    if x.dtype == np.uint16:
        ml_dtypes = pytest.importorskip("ml_dtypes")
        return x.view(ml_dtypes.bfloat16)
    return x


def flashmla_cache(framework, cache, page_size):
    """FlashMLA's V4 k_cache: the view [num_pages, page_size, 1, 584] of the padded pages
    (float8_e4m3fn in PyTorch, as FlashMLA allocates it; uint8 in NumPy)."""
    if framework == "torch":
        pages = torch.from_numpy(cache).view(torch.float8_e4m3fn)
        return torch.as_strided(pages, (cache.shape[0], page_size, 1, 584),
                                (cache.shape[1], 584, 584, 1))  # fmt: skip
    return v4_view(cache, page_size)


def values(x):
    if torch is not None and isinstance(x, torch.Tensor):
        return x.float().numpy().astype(np.float64)
    return np.asarray(x, dtype=np.float64)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("extra", [False, True])
def test_flash_mla_v4_sparse(framework, extra):
    c = V4Case(21, b=3, s_q=2, h_q=16, page=64, topk=32, extra_page=2, extra_topk=6)
    kwargs = {}
    if extra:
        kwargs = dict(extra_k_cache=flashmla_cache(framework, c.extra_kv, 2),
                      extra_indices_in_kvcache=wrap(framework, c.extra_indices),
                      extra_topk_length=wrap(framework, c.extra_lens))  # fmt: skip
    out, lse = compat.flash_mla_with_kvcache(
        wrap(framework, c.q), flashmla_cache(framework, c.kv, 64), None, None, 512, None, None,
        softmax_scale=None, causal=False, is_fp8_kvcache=True,
        indices=wrap(framework, c.indices), attn_sink=wrap(framework, c.sinks),
        topk_length=wrap(framework, c.topk_lens), **kwargs,
    )  # fmt: skip
    want, want_lse = c.want(extra=extra)
    assert tuple(out.shape) == (3, 2, 16, 512) and tuple(lse.shape) == (3, 16, 2)
    assert_close_to_reference(values(out), want, "bf16")
    flipped = want_lse.transpose(0, 2, 1).copy()
    flipped[np.isneginf(flipped)] = np.inf  # FlashMLA's lse of a query without tokens
    np.testing.assert_allclose(values(lse), flipped, atol=2e-4)


def test_flash_mla_sparse_argument_errors():
    c = V4Case(4, b=1, s_q=1, h_q=4, page=4, topk=8, extra_page=4, extra_topk=4, lens=False)
    q, kv = wrap("numpy", c.q), v4_view(c.kv, 4)
    call = compat.flash_mla_with_kvcache
    with pytest.raises(ValueError, match=r"^causal: expected False with sparse indices"):
        call(q, kv, None, None, 512, causal=True, is_fp8_kvcache=True, indices=c.indices)
    with pytest.raises(ValueError, match=r"^is_fp8_kvcache: expected True for the 584-byte"):
        call(q, kv, None, None, 512, is_fp8_kvcache=False, indices=c.indices)
    with pytest.raises(ValueError, match=r"^extra_indices_in_kvcache: expected \[batch_size"):
        call(q, kv, None, None, 512, is_fp8_kvcache=True, indices=c.indices,
             extra_k_cache=v4_view(c.extra_kv, 4))  # fmt: skip
    with pytest.raises(ValueError, match=r"^extra_topk_length: expected None without extra_k"):
        call(q, kv, None, None, 512, is_fp8_kvcache=True, indices=c.indices,
             extra_topk_length=np.zeros(1, np.int32))  # fmt: skip
    with pytest.raises(ValueError, match=r"^extra_k_cache: expected None without indices"):
        call(q, kv, np.zeros((1, 1), np.int32), np.zeros(1, np.int32), 512,
             extra_k_cache=v4_view(c.extra_kv, 4))  # fmt: skip
    with pytest.raises(ValueError, match=r"^q: expected head dimension 512 for the 584-byte"):
        call(wrap("numpy", np.zeros((1, 1, 4, 576), np.uint16)), kv, None, None, 512,
             is_fp8_kvcache=True, indices=c.indices)  # fmt: skip
    with pytest.raises(ValueError, match=r"^head_dim_v: expected 512, given 448"):
        call(q, kv, None, None, 448, is_fp8_kvcache=True, indices=c.indices)


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
def test_torch_decode_v4_with_extra_cache():
    import mlakit.torch as mt

    c = V4Case(8, b=2, s_q=1, h_q=8, page=16, topk=16, extra_page=8, extra_topk=8)
    q = wrap("torch", c.q)
    kv, extra = flashmla_cache("torch", c.kv, 16), flashmla_cache("torch", c.extra_kv, 8)
    args = dict(indices=torch.from_numpy(c.indices), topk_lens=torch.from_numpy(c.topk_lens),
                sinks=torch.from_numpy(c.sinks), extra_kv_cache=extra,
                extra_indices=torch.from_numpy(c.extra_indices),
                extra_topk_lens=torch.from_numpy(c.extra_lens), causal=False,
                return_lse=True)  # fmt: skip
    out, lse = mt.decode(q, kv, **args)
    want, want_lse = c.want()
    assert_close_to_reference(values(out), want, "bf16")
    np.testing.assert_allclose(lse.numpy(), want_lse, atol=2e-4)
