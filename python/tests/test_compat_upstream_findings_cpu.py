"""The shims against what FlashInfer's own tests showed (python/tests/upstream,
scripts/upstream_tests.py), on host arrays: each case a difference those tests found, compared
with mlakit's own decode of the same inputs."""

import math

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from compat_cases import (  # noqa: E402
    LOG2_E, Paged, csr, mlakit_decode, tensors, trtllm, wrapper)
from mlakit import compat  # noqa: E402
from numpy_reference import make_workload  # noqa: E402


# ---- What FlashInfer's own tests showed (python/tests/upstream, scripts/upstream_tests.py) -----


def test_wrapper_writes_a_given_lse_without_return_lse():
    """FlashInfer's run writes ``lse`` whenever one is passed (test_batch_mla_page_attention
    passes one without return_lse and compares it), base 2 unless return_lse_base_on_e."""
    p = Paged(20, b=2, s_q=1, h=4, page=16, seq_lens=[9, 40])
    want, want_lse = p.want()
    mla = wrapper()
    p.plan(mla)
    args = (p.q[..., :512], p.q[..., 512:], p.kv[..., :512], p.kv[..., 512:])
    for base_e, factor in ((False, LOG2_E), (True, 1.0)):
        out, lse = torch.empty_like(want), torch.full(want_lse.shape, math.nan)
        got = mla.run(*args, out=out, lse=lse, return_lse_base_on_e=base_e)
        assert got is out and torch.equal(out, want)
        torch.testing.assert_close(lse, want_lse * factor, rtol=1e-6, atol=0)


def test_wrapper_takes_a_cache_without_pages():
    """Every request empty and no page at all (FlashInfer's test plans kv_len 0): zeros, -inf."""
    mla = wrapper()
    empty = torch.zeros(3, dtype=torch.int32)
    mla.plan(torch.arange(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32),
             torch.zeros(0, dtype=torch.int32), empty, 4, 512, 64, 16, False, 0.1,
             torch.float16, torch.float16)  # fmt: skip
    q = torch.randn(3, 4, 576).half()
    cache = torch.zeros(0, 16, 576).half()
    out, lse = mla.run(q[..., :512], q[..., 512:], cache[..., :512], cache[..., 512:],
                       return_lse=True)  # fmt: skip
    assert torch.equal(out, torch.zeros_like(out)) and torch.isneginf(lse).all()


def test_wrapper_runs_query_lengths_that_differ():
    """Without use_cuda_graph, qo_indptr may give each request its own number of query tokens
    (FlashInfer's trtllm test plans its reference so): each request is decoded as if alone, its
    tokens the last of its cached length (causal, bottom-right)."""
    q_lens, seq_lens, h, page = [2, 0, 3, 1], [20, 5, 33, 1], 4, 16
    w = make_workload(np.random.default_rng(21), b=4, s_q=3, h_q=h, page_size=page,
                      seq_lens=seq_lens)  # fmt: skip
    w.page_size = page
    q4, kv, table, lens = tensors(w)
    ragged = torch.cat([q4[i, :n] for i, n in enumerate(q_lens)])  # [6, h, 576]
    qo_indptr = torch.tensor([0, 2, 2, 5, 6], dtype=torch.int32)
    kv_indptr, kv_indices = csr(w, None)
    mla = wrapper()
    mla.plan(qo_indptr, kv_indptr, kv_indices, lens, h, 512, 64, page, True, 0.07,
             torch.bfloat16, torch.bfloat16)  # fmt: skip
    out, lse = mla.run(ragged[..., :512], ragged[..., 512:], kv[..., :512], kv[..., 512:],
                       return_lse=True)  # fmt: skip
    assert out.shape == (6, h, 512) and lse.shape == (6, h)
    row = 0
    for i, n in enumerate(q_lens):
        if n:
            alone, alone_lse = mlakit_decode(ragged[row : row + n][None], kv, table[i : i + 1],
                                             lens[i : i + 1], 0.07, causal=True)  # fmt: skip
            assert torch.equal(out[row : row + n], alone[0]), f"request {i}"
            torch.testing.assert_close(lse[row : row + n], alone_lse[0] * LOG2_E, rtol=1e-6,
                                       atol=0)  # fmt: skip
            row += n
    with pytest.raises(ValueError, match=r"^q_nope: expected 6 rows \(qo_indptr\[-1\]"):
        mla.run(ragged[:5, :, :512], ragged[:5, :, 512:], kv[..., :512], kv[..., 512:])


def test_wrapper_dimensions_flashinfer_runs_are_refused_by_name():
    mla = wrapper()
    p = Paged(22, b=1, s_q=1, h=4, page=16, seq_lens=[5])

    def plan(ckv, kpe):
        mla.plan(p.qo_indptr, p.kv_indptr, p.kv_indices, p.lens, 4, ckv, kpe, 16, True, 0.1,
                 torch.bfloat16, torch.bfloat16)  # fmt: skip

    with pytest.raises(NotImplementedError, match="^head_dim_ckv, head_dim_kpe: 256 and 64 is "):
        plan(256, 64)
    with pytest.raises(NotImplementedError, match="^head_dim_ckv, head_dim_kpe: 512 and 32 is "):
        plan(512, 32)
    with pytest.raises(ValueError, match="^head_dim_ckv, head_dim_kpe: expected 512 and 64"):
        plan(512, -1)


def test_wrapper_fp8_scales_are_checked_in_flashinfers_order():
    """An fp8 cache needs exactly one of ckv_scale and ckv_scale_arr, then kpe_scale (ValueError,
    with FlashInfer's wording where its tests match it); per-token scales are refused."""
    p = Paged(23, b=1, s_q=1, h=4, page=16, seq_lens=[9])
    mla = wrapper()
    mla.plan(p.qo_indptr, p.kv_indptr, p.kv_indices, p.lens, 4, 512, 64, 16, True, 0.1,
             torch.bfloat16, torch.float8_e4m3fn)  # fmt: skip
    kv = p.kv.float().to(torch.float8_e4m3fn)
    args = (p.q[..., :512], p.q[..., 512:], kv[..., :512], kv[..., 512:])
    scales = torch.ones(p.kv.shape[0], 16, 4)
    for kwargs, exception, message in [
        (dict(), ValueError, "Exactly one of ckv_scale or ckv_scale_arr is required with an fp8 "
         "cache, given neither"),
        (dict(ckv_scale=1.0, ckv_scale_arr=scales, kpe_scale=1.0), ValueError,
         "Exactly one of ckv_scale or ckv_scale_arr is required with an fp8 cache, given both"),
        (dict(ckv_scale=1.0), ValueError, "^kpe_scale: expected a float with an fp8 cache"),
        (dict(ckv_scale_arr=scales, kpe_scale=1.0), NotImplementedError, "^ckv_scale_arr: "),
        (dict(ckv_scale=0.5, kpe_scale=-1.0), ValueError, "^kpe_scale: expected a finite value"),
    ]:  # fmt: skip
        with pytest.raises(exception, match=message):
            mla.run(*args, **kwargs)
    with pytest.raises(ValueError, match=r"^ckv_cache.dtype: expected torch.float8_e4m3fn"):
        mla.run(*args[:2], p.kv[..., :512], kv[..., 512:], ckv_scale=1.0, kpe_scale=1.0)


def test_wrapper_graph_mode_sizes_the_table_from_the_buffer_and_ignores_its_tail():
    """Without max_seq_len the block table is as wide as the kv_indices buffer (FlashInfer's own
    graph test passes 2^20 entries for up to 157 requests, 658 MB), filled by one scatter over
    the buffer; entries past kv_indptr[batch] (stale, here out of range) are not read."""
    p = Paged(24, b=3, s_q=1, h=4, page=16, seq_lens=[20, 50, 7])
    indices = torch.full((4096,), 1 << 30, dtype=torch.int32)
    buffers = dict(qo_indptr=torch.empty(4, dtype=torch.int32),
                   kv_indptr=torch.empty(4, dtype=torch.int32), kv_indices=indices,
                   kv_len_arr=torch.empty(3, dtype=torch.int32))  # fmt: skip
    mla = wrapper(use_cuda_graph=True, **buffers)
    p.plan(mla)
    assert mla._block_table.shape == (3, 4096)
    q, kv = p.q, p.kv
    assert torch.equal(mla.run(q[..., :512], q[..., 512:], kv[..., :512], kv[..., 512:]),
                       p.want()[0])  # fmt: skip
    # 300 requests x 2^20 pages of int32 is more than 1 GiB: refused, asking for max_seq_len.
    many = dict(qo_indptr=torch.empty(301, dtype=torch.int32),
                kv_indptr=torch.empty(301, dtype=torch.int32),
                kv_indices=torch.empty(1 << 20, dtype=torch.int32),
                kv_len_arr=torch.empty(300, dtype=torch.int32))  # fmt: skip
    big = wrapper(use_cuda_graph=True, **many)
    with pytest.raises(ValueError, match=r"^max_seq_len: expected BatchMLAPagedAttentionWrapper"):
        big.plan(torch.arange(301, dtype=torch.int32), torch.zeros(301, dtype=torch.int32),
                 torch.zeros(0, dtype=torch.int32), torch.zeros(300, dtype=torch.int32), 4, 512,
                 64, 1, True, 0.1, torch.bfloat16, torch.bfloat16)  # fmt: skip


def test_trtllm_dimensions_flashinfer_runs_are_refused_by_name():
    w = make_workload(np.random.default_rng(25), b=1, s_q=1, h_q=4, page_size=32, seq_lens=[3])
    q, kv, table, lens = tensors(w)
    with pytest.raises(NotImplementedError, match="^kv_lora_rank: 256 \\(FlashInfer's smaller"):
        compat.trtllm_batch_decode_with_kv_cache_mla(q, kv, None, 64, 256, 64, table, lens, 32)
    with pytest.raises(ValueError, match="^kv_lora_rank, qk_rope_head_dim: expected 512 and 64"):
        compat.trtllm_batch_decode_with_kv_cache_mla(q, kv, None, 64, 384, 64, table, lens, 32)


def test_trtllm_refuses_more_than_16_query_tokens():
    w = make_workload(np.random.default_rng(26), b=1, s_q=17, h_q=2, page_size=32,
                      seq_lens=[40])  # fmt: skip
    q, kv, table, lens = tensors(w)
    with pytest.raises(NotImplementedError, match="^query: 17 query tokens per request is not "):
        trtllm(q, kv, table, lens)
    cum = torch.tensor([0, 17], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="^max_q_len: 17 query tokens per request "):
        trtllm(q[0], kv, table, lens, cum_seq_lens_q=cum)


def test_trtllm_counter_buffer_is_checked_as_flashinfer_checks_it():
    """mlakit does not use multi_ctas_kv_counter_buffer (its workspace is its own) but refuses
    what FlashInfer refuses, with FlashInfer's wording, and leaves the buffer untouched."""
    from mlakit._flashinfer import multi_ctas_kv_counter_bytes

    assert multi_ctas_kv_counter_bytes(1, 16, 132) == 136 * 4  # 132 SMs, rounded up to 8
    assert multi_ctas_kv_counter_bytes(16, 128, 132) == 2048 * 4
    assert multi_ctas_kv_counter_bytes(3, 3, 1) == 16 * 4  # rounded up to 8 semaphores
    w = make_workload(np.random.default_rng(27), b=2, s_q=1, h_q=4, page_size=32,
                      seq_lens=[3, 40])  # fmt: skip
    q, kv, table, lens = tensors(w)
    counter = torch.zeros(64, dtype=torch.uint8)
    assert torch.equal(trtllm(q, kv, table, lens, multi_ctas_kv_counter_buffer=counter),
                       trtllm(q, kv, table, lens))  # fmt: skip
    assert not counter.any()
    with pytest.raises(ValueError, match="^multi_ctas_kv_counter_buffer must be contiguous"):
        trtllm(q, kv, table, lens, multi_ctas_kv_counter_buffer=torch.zeros(128)[::2])
    odd = torch.zeros(80, dtype=torch.uint8)[1:]
    with pytest.raises(ValueError, match="^multi_ctas_kv_counter_buffer must be 16-byte aligned"):
        trtllm(q, kv, table, lens, multi_ctas_kv_counter_buffer=odd)


def sparse_case(seed, b, s_q, h, page, seq_lens, topk):
    """Indices listing each request's first ``topk`` positions in order (FlashInfer's sparse
    test's), as cache slots, -1 past the request's length."""
    w = make_workload(np.random.default_rng(seed), b=b, s_q=s_q, h_q=h, page_size=page,
                      seq_lens=seq_lens)  # fmt: skip
    q, kv, table, lens = tensors(w)
    indices = torch.full((b, s_q, topk), -1, dtype=torch.int32)
    for i, n in enumerate(seq_lens):
        positions = torch.arange(min(n, topk))
        indices[i, :, : len(positions)] = table[i, positions // page] * page + positions % page
    return q, kv, table, lens, indices


def test_trtllm_sparse_bounds_each_tokens_slots_by_seq_lens():
    """trtllm-gen's sparse mode: slot j of query token t counts only where j < seq_len - s_q + 1
    + t (FlashInfer's sparse test compares with a causal reference over positions listed in
    order). A request of exactly topk tokens loses its last slot for the first of 2 tokens."""
    q, kv, table, lens, indices = sparse_case(28, b=2, s_q=2, h=4, page=32, seq_lens=[16, 70],
                                              topk=16)  # fmt: skip
    out = trtllm(q, kv, None, lens, sparse_mla_top_k=16, block_tables=indices)
    masked = indices.clone()
    masked[0, 0, 15] = -1  # request 0 (16 tokens): token 0 sees positions < 15
    want, _ = mlakit_decode(q, kv, None, None, 0.06, indices=masked)
    assert torch.equal(out, want)
    unmasked, _ = mlakit_decode(q, kv, None, None, 0.06, indices=indices)
    assert not torch.equal(out[0, 0], unmasked[0, 0]) and torch.equal(out[1], unmasked[1])


def test_trtllm_sparse_with_ragged_queries():
    """cum_seq_lens_q with sparse indices: compact index rows [total_q, topk], one per query
    token (FlashInfer's layout), each request decoded as if alone."""
    q_lens = [1, 2]
    q, kv, table, lens, indices = sparse_case(29, b=2, s_q=2, h=4, page=32, seq_lens=[40, 50],
                                              topk=32)  # fmt: skip
    ragged = torch.cat([q[i, :n] for i, n in enumerate(q_lens)])
    rows = torch.cat([indices[i, :n] for i, n in enumerate(q_lens)])
    cum = torch.tensor([0, 1, 3], dtype=torch.int32)
    out = trtllm(ragged, kv, None, lens, sparse_mla_top_k=32, block_tables=rows,
                 cum_seq_lens_q=cum, max_q_len=2)  # fmt: skip
    assert out.shape == (3, 4, 512)
    row = 0
    for i, n in enumerate(q_lens):
        alone = trtllm(ragged[row : row + n][None], kv, None, lens[i : i + 1],
                       sparse_mla_top_k=32, block_tables=rows[row : row + n][None])  # fmt: skip
        assert torch.equal(out[row : row + n], alone[0]), f"request {i}"
        row += n


def test_wrapper_fp8_cache_with_its_own_kpe_scale():
    """FlashInfer's fp8 tests quantize ckv and kpe with scales of their own: kpe_scale /
    ckv_scale moves onto q_pe, so the result is the decode of the dequantized cache."""
    p = Paged(31, b=2, s_q=1, h=4, page=16, seq_lens=[19, 40])
    ckv_scale, kpe_scale = 0.02, 0.05
    cache = torch.cat([p.kv[..., :512].float() / ckv_scale, p.kv[..., 512:].float() / kpe_scale],
                      -1).clamp(-448, 448).to(torch.float8_e4m3fn)  # fmt: skip
    dequantized = torch.cat([cache[..., :512].float() * ckv_scale,
                             cache[..., 512:].float() * kpe_scale], -1)  # fmt: skip
    want, _ = mlakit_decode(p.q4, dequantized.bfloat16(), p.table, p.lens, 0.07)
    mla = wrapper()
    mla.plan(p.qo_indptr, p.kv_indptr, p.kv_indices, p.lens, 4, 512, 64, 16, True, 0.07,
             torch.bfloat16, torch.float8_e4m3fn)  # fmt: skip
    got = mla.run(p.q[..., :512], p.q[..., 512:], cache[..., :512], cache[..., 512:],
                  ckv_scale=ckv_scale, kpe_scale=kpe_scale)  # fmt: skip
    want = want.reshape(-1, 4, 512).float()  # bf16 outputs: a tolerance of ~2 ulps of the largest
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=8e-3 * float(want.abs().max()))


def test_wrapper_reads_the_first_batch_size_entries_of_longer_lists():
    """FlashInfer's varlen test passes a kv_indptr longer than batch_size + 1; FlashInfer reads
    its first batch_size + 1 entries, and so does this."""
    p = Paged(32, b=2, s_q=1, h=4, page=16, seq_lens=[20, 3])
    mla = wrapper()
    longer = torch.cat([p.kv_indptr, torch.tensor([999, 1000], dtype=torch.int32)])
    mla.plan(p.qo_indptr, longer, p.kv_indices, p.lens, 4, 512, 64, 16, True, 0.07,
             torch.bfloat16, torch.bfloat16)  # fmt: skip
    q, kv = p.q, p.kv
    assert torch.equal(mla.run(q[..., :512], q[..., 512:], kv[..., :512], kv[..., 512:]),
                       p.want()[0])  # fmt: skip


def test_more_than_128_heads_are_refused_by_name():
    """FlashInfer runs 192 heads (its tests do); mlakit 1..128."""
    w = make_workload(np.random.default_rng(33), b=1, s_q=1, h_q=129, page_size=32,
                      seq_lens=[5])  # fmt: skip
    q, kv, table, lens = tensors(w)
    with pytest.raises(NotImplementedError, match="^query: 129 query heads is not supported"):
        trtllm(q, kv, table, lens)
    p = Paged(34, b=1, s_q=1, h=4, page=16, seq_lens=[5])
    with pytest.raises(NotImplementedError, match="^num_heads: 192 query heads is not supported"):
        wrapper().plan(p.qo_indptr, p.kv_indptr, p.kv_indices, p.lens, 192, 512, 64, 16, True,
                       0.1, torch.bfloat16, torch.bfloat16)  # fmt: skip
