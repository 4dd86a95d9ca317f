"""GPU tests of sparse decode of the DeepSeek V4 cache (with and without the extra cache) through
the Decoder, the torch op and FlashMLA's call (mlakit.compat), against the NumPy float64
reference of test_sparse_cpu.py; and a CUDA graph replayed with new indices. Skipped without a
GPU, and where no GPU backend runs the V4 layout."""

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

import mlakit  # noqa: E402
import mlakit.torch as mt  # noqa: E402
from mlakit import compat  # noqa: E402
from numpy_reference import assert_close_gpu  # noqa: E402
from test_gpu import DEVICE  # noqa: E402
from test_sparse_cpu import V4Case, values, wrap  # noqa: E402

pytestmark = pytest.mark.gpu


def require_gpu_v4():
    """Skips the test when no GPU backend runs the V4 layout with an extra cache here."""
    try:
        mlakit.Decoder(h_q=16, s_q=1, page_size=64, max_batch=1, max_seq_len=0, kv_layout="v4",
                       topk=64, extra_topk=64)  # fmt: skip
    except NotImplementedError as e:
        pytest.skip(f"no GPU backend runs the V4 layout here: {e}")


def cuda(framework_array):
    return framework_array.to(DEVICE) if framework_array is not None else None


def flashmla_cuda_cache(cache, page_size):
    """FlashMLA's V4 k_cache on the device: the view [num_pages, page_size, 1, 584] of the padded
    pages, made on the device (a strided view moved by .to() would come back without the pads)."""
    pages = torch.from_numpy(cache).to(DEVICE).view(torch.float8_e4m3fn)
    return torch.as_strided(pages, (cache.shape[0], page_size, 1, 584),
                            (cache.shape[1], 584, 584, 1))  # fmt: skip


def cached(c, page, extra_page):
    """The case's caches as FlashMLA's CUDA views, and its index tensors on the device."""
    return dict(
        kv=flashmla_cuda_cache(c.kv, page),
        extra=flashmla_cuda_cache(c.extra_kv, extra_page),
        indices=cuda(torch.from_numpy(c.indices)),
        extra_indices=cuda(torch.from_numpy(c.extra_indices)),
        topk_lens=cuda(torch.from_numpy(c.topk_lens)) if c.topk_lens is not None else None,
        extra_lens=cuda(torch.from_numpy(c.extra_lens)) if c.extra_lens is not None else None,
    )


# (seed, b, s_q, h_q, page, topk, extra_page, extra_topk): each tile (narrow 16 and 32 rows,
# wide 64, two tiles), page sizes that are not powers of two for either cache.
V4_CASES = [
    (31, 3, 1, 16, 64, 128, 64, 64),
    (32, 2, 2, 32, 61, 100, 2, 70),
    (33, 4, 1, 64, 2, 64, 69, 128),
    (34, 2, 2, 128, 576, 520, 53, 7),
]


@pytest.mark.parametrize("seed,b,s_q,h_q,page,topk,extra_page,extra_topk", V4_CASES)
def test_v4_decoder_matches_reference(seed, b, s_q, h_q, page, topk, extra_page, extra_topk):
    require_gpu_v4()
    c = V4Case(seed, b=b, s_q=s_q, h_q=h_q, page=page, topk=topk, extra_page=extra_page,
               extra_topk=extra_topk)  # fmt: skip
    t = cached(c, page, extra_page)
    decoder = mlakit.Decoder(h_q=h_q, s_q=s_q, page_size=page, max_batch=b, max_seq_len=0,
                             kv_layout="v4", topk=topk, extra_topk=extra_topk,
                             extra_page_size=extra_page, sinks=True, lse=True)  # fmt: skip
    assert decoder.backend != "cpu", decoder.backend
    out, lse = decoder.run(cuda(wrap("torch", c.q)), t["kv"], indices=t["indices"],
                           topk_lens=t["topk_lens"], sinks=cuda(torch.from_numpy(c.sinks)),
                           extra_kv_cache=t["extra"], extra_indices=t["extra_indices"],
                           extra_topk_lens=t["extra_lens"])  # fmt: skip
    torch.cuda.synchronize()
    want, want_lse = c.want()
    assert_close_gpu(values(out.cpu()), want, "bf16")
    np.testing.assert_allclose(lse.cpu().numpy(), want_lse, atol=2e-3)


@pytest.mark.parametrize("extra", [False, True])
def test_flash_mla_v4_sparse_on_the_gpu(extra):
    """FlashMLA's call with its V4 cache views on CUDA: the same results as the reference (its LSE
    [b, h_q, s_q], +inf for a query without tokens)."""
    require_gpu_v4()
    c = V4Case(41, b=3, s_q=2, h_q=64, page=64, topk=96, extra_page=2, extra_topk=9)
    t = cached(c, 64, 2)
    kwargs = {}
    if extra:
        kwargs = dict(extra_k_cache=t["extra"], extra_indices_in_kvcache=t["extra_indices"],
                      extra_topk_length=t["extra_lens"])  # fmt: skip
    out, lse = compat.flash_mla_with_kvcache(
        cuda(wrap("torch", c.q)), t["kv"], None, None, 512, None, None, softmax_scale=None,
        causal=False, is_fp8_kvcache=True, indices=t["indices"],
        attn_sink=cuda(torch.from_numpy(c.sinks)), topk_length=t["topk_lens"], **kwargs,
    )  # fmt: skip
    torch.cuda.synchronize()
    want, want_lse = c.want(extra=extra)
    assert out.is_cuda and tuple(out.shape) == (3, 2, 64, 512)
    assert_close_gpu(values(out.cpu()), want, "bf16")
    flipped = want_lse.transpose(0, 2, 1).copy()
    flipped[np.isneginf(flipped)] = np.inf
    np.testing.assert_allclose(values(lse.cpu()), flipped, atol=2e-3)


def test_v4_cuda_graph_replay_with_new_indices():
    """The torch op captured once replays with other indices and lengths of both lists written
    into the same tensors."""
    require_gpu_v4()
    c = V4Case(51, b=3, s_q=2, h_q=64, page=64, topk=64, extra_page=16, extra_topk=32)
    t = cached(c, 64, 16)
    q = cuda(wrap("torch", c.q))
    sinks = cuda(torch.from_numpy(c.sinks))
    out = torch.empty(3, 2, 64, 512, dtype=torch.bfloat16, device=DEVICE)
    lse = torch.empty(3, 2, 64, dtype=torch.float32, device=DEVICE)

    def step():
        o, s = mt.decode(q, t["kv"], indices=t["indices"], topk_lens=t["topk_lens"], sinks=sinks,
                         extra_kv_cache=t["extra"], extra_indices=t["extra_indices"],
                         extra_topk_lens=t["extra_lens"], causal=False,
                         return_lse=True)  # fmt: skip
        out.copy_(o)
        lse.copy_(s)

    graph = mt.capture_graph(step)
    for seed in (52, 53):
        other = V4Case(seed, b=3, s_q=2, h_q=64, page=64, topk=64, extra_page=16, extra_topk=32)
        # The caches stay c's; the new indices select among c's tokens (the same request pages).
        other.kv, other.kv_values = c.kv, c.kv_values
        other.extra_kv, other.extra_values = c.extra_kv, c.extra_values
        other.indices = np.roll(c.indices, seed, axis=2)
        other.extra_indices = np.roll(c.extra_indices, seed, axis=2)
        other.q, other.q_values, other.sinks = c.q, c.q_values, c.sinks
        t["indices"].copy_(torch.from_numpy(other.indices))
        t["extra_indices"].copy_(torch.from_numpy(other.extra_indices))
        t["topk_lens"].copy_(torch.from_numpy(other.topk_lens))
        t["extra_lens"].copy_(torch.from_numpy(other.extra_lens))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want, want_lse = other.want()
        assert_close_gpu(values(out.cpu()), want, "bf16")
        np.testing.assert_allclose(lse.cpu().numpy(), want_lse, atol=2e-3)
