"""GPU tests of the upstream-signature shims (PyTorch, CUDA; skipped without a GPU): FlashMLA's
FlashMLASchedMeta form with views, FlashInfer's trtllm call with return_lse, ragged queries and
enable_pdl=None, and BatchMLAPagedAttentionWrapper at page size 1 and inside a captured CUDA
graph re-planned between replays, with uniform and with differing query lengths. Each result
is compared with mlakit's cpu backend on the same inputs (the oracle), with the tolerance of a
bf16 output."""

import itertools
import math

import pytest

torch = pytest.importorskip("torch")

import mlakit.torch as mlakit_torch  # noqa: E402
from mlakit import compat  # noqa: E402

pytestmark = pytest.mark.gpu

LOG2_E = 1 / math.log(2)


def case(b, s_q, h, page, lens, seed=0):
    gen = torch.Generator().manual_seed(seed)
    pages = [(n + page - 1) // page for n in lens]
    num = sum(pages) + 2
    order = torch.randperm(num, generator=gen).to(torch.int32)
    table = torch.zeros((b, max(1, max(pages))), dtype=torch.int32)
    used = 0
    for i, n in enumerate(pages):
        table[i, :n] = order[used : used + n]
        used += n
    q = torch.randn(b, s_q, h, 576, generator=gen).bfloat16()
    kv = torch.randn(num, page, 576, generator=gen).bfloat16()
    return q, kv, table, torch.tensor(lens, dtype=torch.int32)


def cpu_oracle(q, kv, table, lens, scale, causal=True):
    return mlakit_torch.decode(q.cpu(), kv.cpu(), table.cpu(), lens.cpu(), softmax_scale=scale,
                               return_lse=True, causal=causal)  # fmt: skip


def close(got, want):
    torch.testing.assert_close(got.float().cpu(), want.float(), rtol=2e-2, atol=2e-2)


def test_flashmla_sched_meta_with_views():
    q, kv, table, lens = case(3, 2, 64, 64, [0, 300, 1000])
    want, want_lse = cpu_oracle(q, kv, table, lens, 576**-0.5)
    wide = torch.zeros(q.shape[:-1] + (640,), dtype=q.dtype)
    wide[..., :576] = q
    dq, dkv, dt, dl = wide.cuda()[..., :576], kv.cuda().unsqueeze(2), table.cuda(), lens.cuda()
    meta, _ = compat.get_mla_metadata()
    out, lse = compat.flash_mla_with_kvcache(dq, dkv, dt, dl, 512, meta, None, causal=True)
    close(out, want)
    lse = lse.cpu()
    assert torch.isposinf(lse[0]).all()
    torch.testing.assert_close(lse[1:], want_lse.transpose(1, 2)[1:], rtol=1e-4, atol=1e-4)


def test_trtllm_lse_and_pdl():
    q, kv, table, lens = case(4, 3, 128, 64, [5, 700, 64, 2000], seed=1)
    dkv, dt, dl = kv.cuda().unsqueeze(1), table.cuda(), lens.cuda()
    want, want_lse = cpu_oracle(q, kv, table, lens, 0.05)
    lse = torch.empty((12, 128), device="cuda")
    out, got = compat.trtllm_batch_decode_with_kv_cache_mla(
        q.cuda(), dkv, None, 128, 512, 64, dt, dl, 2048, bmm1_scale=0.05, lse=lse,
        return_lse=True, enable_pdl=None)  # fmt: skip
    assert got is lse
    close(out, want)
    torch.testing.assert_close(lse.cpu(), want_lse.reshape(12, 128) * LOG2_E, rtol=1e-4,
                               atol=1e-4)  # fmt: skip


def require_gpu_var_q():
    """Ragged queries run as mlakit's variable query lengths: skips the test when no GPU backend
    runs them on this machine."""
    import mlakit

    try:
        mlakit.Decoder(h_q=16, s_q=2, page_size=64, max_batch=1, max_seq_len=64, var_q=True)
    except NotImplementedError as e:
        pytest.skip(f"no GPU backend runs var_q here: {e}")


def test_trtllm_ragged_queries():
    """1, 3, 0 and 2 tokens (cum_seq_lens_q), packed and written in place; each request as if
    decoded alone; the lse too."""
    require_gpu_var_q()
    q, kv, table, lens = case(4, 3, 128, 64, [5, 700, 64, 2000], seed=1)
    dkv, dt, dl = kv.cuda().unsqueeze(1), table.cuda(), lens.cuda()
    q_lens = [1, 3, 0, 2]
    ragged = torch.cat([q[i, :n] for i, n in enumerate(q_lens)])
    cum = torch.tensor([0, 1, 4, 4, 6], dtype=torch.int32, device="cuda")
    out = torch.full((6, 128, 512), math.nan, dtype=torch.bfloat16, device="cuda")
    result, lse = compat.trtllm_batch_decode_with_kv_cache_mla(
        ragged.cuda(), dkv, None, 128, 512, 64, dt, dl, 2048, bmm1_scale=0.05, out=out,
        cum_seq_lens_q=cum, max_q_len=3, return_lse=True)  # fmt: skip
    assert result is out and lse.shape == (6, 128)
    row = 0
    for i, n in enumerate(q_lens):
        if n:
            alone, alone_lse = cpu_oracle(ragged[row : row + n][None], kv, table[i : i + 1],
                                          lens[i : i + 1], 0.05)  # fmt: skip
            close(out[row : row + n], alone[0])
            torch.testing.assert_close(lse[row : row + n].cpu(), alone_lse[0] * LOG2_E,
                                       rtol=1e-4, atol=1e-4)  # fmt: skip
            row += n


def paged_lists(table, lens, page):
    pages = [(int(n) + page - 1) // page for n in lens]
    indptr = torch.tensor([0] + list(itertools.accumulate(pages)), dtype=torch.int32)
    indices = torch.cat([table[i, :n] for i, n in enumerate(pages)])
    return indptr, indices


@pytest.mark.parametrize("page", [1, 64])
def test_wrapper_matches_the_oracle(page):
    q, kv, table, lens = case(3, 1, 16, page, [0, 129, 777], seed=2)
    want, want_lse = cpu_oracle(q, kv, table, lens, 0.07)
    indptr, indices = paged_lists(table, lens, page)
    mla = compat.BatchMLAPagedAttentionWrapper(torch.empty(1 << 20, dtype=torch.int8,
                                                           device="cuda"))  # fmt: skip
    mla.plan(torch.arange(4, dtype=torch.int32).cuda(), indptr.cuda(), indices.cuda(),
             lens.cuda(), 16, 512, 64, page, False, 0.07, torch.bfloat16, torch.bfloat16)  # fmt: skip
    dq, dkv = q.cuda().reshape(3, 16, 576), kv.cuda()
    out, lse = mla.run(dq[..., :512], dq[..., 512:], dkv[..., :512], dkv[..., 512:],
                       return_lse=True)  # fmt: skip
    close(out.reshape(3, 1, 16, 512), want)
    torch.testing.assert_close(lse.cpu(), want_lse.reshape(3, 16) * LOG2_E, rtol=1e-4, atol=1e-4)


def test_wrapper_in_a_cuda_graph_replans_between_replays():
    """SGLang's flow: buffers given at construction, plan outside the graph (no host reads),
    run captured once, then plan + replay with other lists and lengths."""
    page, h = 1, 16
    steps = [case(2, 1, h, page, [100, 37], seed=3), case(2, 1, h, page, [5, 400], seed=4)]
    num_pages = max(int(s[1].shape[0]) for s in steps)
    kv = torch.zeros((num_pages, page, 576), dtype=torch.bfloat16, device="cuda")
    q = torch.zeros((2, h, 576), dtype=torch.bfloat16, device="cuda")
    buffers = dict(qo_indptr=torch.empty(3, dtype=torch.int32, device="cuda"),
                   kv_indptr=torch.empty(3, dtype=torch.int32, device="cuda"),
                   kv_indices=torch.empty(1024, dtype=torch.int32, device="cuda"),
                   kv_len_arr=torch.empty(2, dtype=torch.int32, device="cuda"))  # fmt: skip
    mla = compat.BatchMLAPagedAttentionWrapper(
        torch.empty(1 << 20, dtype=torch.int8, device="cuda"), use_cuda_graph=True,
        max_seq_len=512, **buffers)  # fmt: skip

    def plan(step):
        sq, skv, stable, slens = step
        indptr, indices = paged_lists(stable, slens, page)
        kv[: skv.shape[0]].copy_(skv.cuda())
        q.copy_(sq.cuda().reshape(2, h, 576))
        mla.plan(torch.arange(3, dtype=torch.int32).cuda(), indptr.cuda(), indices.cuda(),
                 slens.cuda(), h, 512, 64, page, False, 0.07, torch.bfloat16,
                 torch.bfloat16)  # fmt: skip

    def run():
        return mla.run(q[..., :512], q[..., 512:], kv[..., :512], kv[..., 512:])

    plan(steps[0])
    run()  # warm-up: creates the decoder and its workspace outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run()
    for step in steps:
        plan(step)
        graph.replay()
        torch.cuda.synchronize()
        sq, skv, stable, slens = step
        want, _ = cpu_oracle(sq, skv, stable, slens, 0.07)
        close(out.reshape(2, 1, h, 512), want)


def test_wrapper_in_a_cuda_graph_with_query_lengths_that_differ():
    """Speculative decoding in SGLang's graph flow: with max_q_len given at construction, plan
    copies a ragged qo_indptr on the device and the captured run decodes those lengths; a
    re-plan with other lengths (fewer rows than q holds) replays correctly, the rows past
    qo_indptr[-1] untouched."""
    require_gpu_var_q()
    page, h, rows = 64, 16, 8
    steps = [([2, 3, 1], [100, 37, 500]), ([0, 3, 2], [5, 400, 64])]
    q = torch.zeros((rows, h, 576), dtype=torch.bfloat16, device="cuda")
    kv = torch.zeros((32, page, 576), dtype=torch.bfloat16, device="cuda")
    out = torch.empty((rows, h, 512), dtype=torch.bfloat16, device="cuda")
    buffers = dict(qo_indptr=torch.empty(4, dtype=torch.int32, device="cuda"),
                   kv_indptr=torch.empty(4, dtype=torch.int32, device="cuda"),
                   kv_indices=torch.empty(64, dtype=torch.int32, device="cuda"),
                   kv_len_arr=torch.empty(3, dtype=torch.int32, device="cuda"))  # fmt: skip
    mla = compat.BatchMLAPagedAttentionWrapper(
        torch.empty(1 << 20, dtype=torch.int8, device="cuda"), use_cuda_graph=True,
        max_seq_len=512, max_q_len=3, **buffers)  # fmt: skip

    def plan(seed, q_lens, lens):
        sq, skv, stable, slens = case(3, 3, h, page, lens, seed=seed)
        ragged = torch.cat([sq[i, :n] for i, n in enumerate(q_lens)])
        q.fill_(float("nan"))
        q[: ragged.shape[0]].copy_(ragged.cuda())
        kv[: skv.shape[0]].copy_(skv.cuda())
        indptr, indices = paged_lists(stable, slens, page)
        qo = torch.tensor([0] + list(itertools.accumulate(q_lens)), dtype=torch.int32)
        mla.plan(qo.cuda(), indptr.cuda(), indices.cuda(), slens.cuda(), h, 512, 64, page, True,
                 0.07, torch.bfloat16, torch.bfloat16)  # fmt: skip
        return ragged, skv, stable, slens

    def run():
        mla.run(q[..., :512], q[..., 512:], kv[..., :512], kv[..., 512:], out=out)

    plan(5, *steps[0])
    run()  # warm-up: creates the decoder and its workspace outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for seed, (q_lens, lens) in enumerate(steps, start=5):
        ragged, skv, stable, slens = plan(seed, q_lens, lens)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        row = 0
        for i, n in enumerate(q_lens):
            if n:
                want, _ = cpu_oracle(ragged[row : row + n][None], skv, stable[i : i + 1],
                                     slens[i : i + 1], 0.07)  # fmt: skip
                close(out[row : row + n], want[0])
                row += n
        assert out[row:].isnan().all(), "rows past qo_indptr[-1] written"
