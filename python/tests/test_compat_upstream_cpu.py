"""The shims against the current upstream signatures, on host arrays: FlashMLA's main branch
(``get_mla_metadata()`` and ``FlashMLASchedMeta``), FlashInfer 0.6's
``trtllm_batch_decode_with_kv_cache_mla`` (every parameter, the base-2 LSE, ragged queries) and
``BatchMLAPagedAttentionWrapper`` (CSR page lists, split q and cache, CUDA-graph planning without
host reads). Results are compared bit for bit with mlakit's own decode of the same inputs, whose
accuracy the other tests establish."""

import inspect
import math

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from compat_cases import (  # noqa: E402
    LOG2_E, Paged, csr, flashmla_workload, mlakit_decode, tensors, trtllm, wrapper)
from mlakit import compat  # noqa: E402
from numpy_reference import make_workload  # noqa: E402


# ---- FlashMLA (main branch) --------------------------------------------------------------------


def test_get_mla_metadata_without_arguments_returns_a_sched_meta():
    meta, splits = compat.get_mla_metadata()
    assert isinstance(meta, compat.FlashMLASchedMeta) and splits is None
    assert not meta.have_initialized and meta.config is None
    with pytest.raises(TypeError, match="without cache_seqlens"):
        compat.get_mla_metadata(num_heads_k=1)
    # The older form still returns FlashMLA's placeholder tensors.
    tile, num_splits = compat.get_mla_metadata(torch.tensor([1, 2], dtype=torch.int32), 64, 1)
    assert tile.shape[1] == 8 and tuple(num_splits.shape) == (3,)


def test_sched_meta_decode_matches_the_older_form():
    q, kv, table, lens = flashmla_workload()
    meta, _ = compat.get_mla_metadata()
    out, lse = compat.flash_mla_with_kvcache(q, kv, table, lens, 512, meta, None, causal=True)
    old_meta, old_splits = compat.get_mla_metadata(lens, 2 * 8, 1)
    old_out, old_lse = compat.flash_mla_with_kvcache(q, kv, table, lens, 512, old_meta,
                                                     old_splits, causal=True)  # fmt: skip
    assert torch.equal(out, old_out) and torch.equal(lse, old_lse)
    assert lse.shape == (3, 8, 2) and torch.isposinf(lse[0]).all(), "FlashMLA: +inf when empty"
    assert meta.have_initialized
    assert meta.config == compat.FlashMLASchedMeta.Config(
        b=3, s_q=2, h_q=8, page_block_size=64, h_k=1, causal=True, is_fp8_kvcache=False,
        topk=None, extra_page_block_size=None, extra_topk=None,
    )  # fmt: skip
    # The same handle serves later calls of the same configuration, with new lengths.
    again, _ = compat.flash_mla_with_kvcache(q, kv, table, (lens - 1).clamp(min=0), 512, meta,
                                             causal=True)  # fmt: skip
    assert again.shape == out.shape


def test_sched_meta_refuses_another_configuration():
    q, kv, table, lens = flashmla_workload()
    meta, _ = compat.get_mla_metadata()
    compat.flash_mla_with_kvcache(q, kv, table, lens, 512, meta, causal=True)
    with pytest.raises(ValueError, match="^tile_scheduler_metadata: .* with causal True, given a "
                       "call with causal False"):  # fmt: skip
        compat.flash_mla_with_kvcache(q, kv, table, lens, 512, meta, causal=False)
    with pytest.raises(ValueError, match="with b 3, given a call with b 2"):
        compat.flash_mla_with_kvcache(q[:2], kv, table[:2], lens[:2], 512, meta, causal=True)
    with pytest.raises(ValueError, match="^num_splits: expected None with a FlashMLASchedMeta"):
        compat.flash_mla_with_kvcache(q, kv, table, lens, 512, compat.FlashMLASchedMeta(),
                                      torch.zeros(4, dtype=torch.int32))  # fmt: skip


def test_flashmla_refusals_by_name():
    q, kv, table, lens = flashmla_workload()
    two_heads = kv.expand(-1, -1, 2, -1)
    with pytest.raises(NotImplementedError, match="^k_cache: num_heads_k 2"):
        compat.flash_mla_with_kvcache(q, two_heads, table, lens, 512, None, None)
    indices = torch.zeros((3, 2, 8), dtype=torch.int32)
    with pytest.raises(ValueError, match="^causal: expected False with sparse indices"):
        compat.flash_mla_with_kvcache(q, kv, None, None, 512, None, None, causal=True,
                                      indices=indices)  # fmt: skip


def test_flashmla_reads_views_in_place():
    """vLLM slices q out of a wider buffer and pads its pages: read without copies."""
    q, kv, table, lens = flashmla_workload(seed=3)
    want, want_lse = compat.flash_mla_with_kvcache(q, kv, table, lens, 512, None, None)
    wide_q = torch.zeros(q.shape[:-1] + (640,), dtype=q.dtype)
    wide_q[..., :576] = q
    pages = torch.zeros((kv.shape[0], 64 * 576 + 64), dtype=kv.dtype)
    pages[:, : 64 * 576] = kv.reshape(kv.shape[0], -1)
    padded_kv = pages[:, : 64 * 576].view(kv.shape[0], 64, 1, 576)
    assert not padded_kv.is_contiguous()
    got, got_lse = compat.flash_mla_with_kvcache(wide_q[..., :576], padded_kv, table, lens, 512,
                                                 None, None)  # fmt: skip
    assert torch.equal(got, want) and torch.equal(got_lse, want_lse)


def test_flashmla_sparse_takes_strided_indices():
    """FlashMLA's sparse test passes indices (and q) as views with padded rows: read as given."""
    w = make_workload(np.random.default_rng(30), b=2, s_q=2, h_q=8, page_size=64,
                      seq_lens=[70, 100])  # fmt: skip
    q, kv, table, lens = tensors(w)
    kv = kv.unsqueeze(2)
    indices = torch.full((2, 2, 32), -1, dtype=torch.int32)
    for i in range(2):
        indices[i, :, :20] = table[i, 0] * 64 + torch.arange(20)
    wide = torch.full((2, 2, 32 + 128), 7, dtype=torch.int32)
    wide[..., :32] = indices
    strided = wide[..., :32]
    assert not strided.is_contiguous()
    sinks = torch.tensor([0.5, -math.inf, math.inf, 0.0, 1.0, -1.0, 2.0, 0.25])
    want = compat.flash_mla_with_kvcache(q, kv, None, None, 512, None, None, indices=indices,
                                         attn_sink=sinks)  # fmt: skip
    got = compat.flash_mla_with_kvcache(q, kv, None, None, 512, None, None, indices=strided,
                                        attn_sink=sinks)  # fmt: skip
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(got[0][:, :, 2], torch.zeros_like(got[0][:, :, 2])), "+inf sink: zeros"


# ---- FlashInfer: trtllm_batch_decode_with_kv_cache_mla ----------------------------------------

# FlashInfer 0.6.18's parameters, in order.
TRTLLM_PARAMETERS = [
    "query", "kv_cache", "workspace_buffer", "qk_nope_head_dim", "kv_lora_rank",
    "qk_rope_head_dim", "block_tables", "seq_lens", "max_seq_len", "sparse_mla_top_k", "out",
    "bmm1_scale", "bmm2_scale", "sinks", "skip_softmax_threshold_scale_factor", "enable_pdl",
    "backend", "is_var_seq", "uses_shared_paged_kv_idx", "lse", "return_lse", "cute_dsl_impl",
    "kv_scale_format", "cum_seq_lens_q", "max_q_len", "multi_ctas_kv_counter_buffer",
    "sparse_mla_top_k_lens", "enable_dcp", "cp_world", "cp_rank", "causal_seqlens_kv_global",
    "use_fp16_softmax",
]  # fmt: skip


def test_trtllm_signature_is_flashinfers():
    params = inspect.signature(compat.trtllm_batch_decode_with_kv_cache_mla).parameters
    assert list(params) == TRTLLM_PARAMETERS
    assert params["enable_pdl"].default is None and params["is_var_seq"].default is True


def test_trtllm_lse_is_base_2_and_written_in_place():
    w = make_workload(np.random.default_rng(4), b=3, s_q=2, h_q=8, page_size=32,
                      seq_lens=[0, 40, 90])  # fmt: skip
    q, kv, table, lens = tensors(w)
    want, want_lse = mlakit_decode(q, kv, table, lens, 0.06)
    lse = torch.full((6, 8), math.nan)
    out, got_lse = trtllm(q, kv, table, lens, lse=lse, return_lse=True, enable_pdl=None,
                          is_var_seq=False, use_fp16_softmax=True,
                          multi_ctas_kv_counter_buffer=torch.zeros(8, dtype=torch.uint8),
                          cute_dsl_impl="modular", kv_scale_format="arbitrary_fp32",
                          backend="trtllm-gen")  # fmt: skip
    assert got_lse is lse
    assert torch.equal(out, want)
    assert torch.isneginf(lse[:2]).all(), "an empty row stays -inf"
    torch.testing.assert_close(lse[2:], want_lse.reshape(6, 8)[2:] * LOG2_E, rtol=1e-6, atol=0)
    # Without a buffer: [b * q_len, heads], base 2.
    _, fresh = trtllm(q, kv, table, lens, return_lse=True)
    assert fresh.shape == (6, 8) and torch.equal(fresh, lse)
    assert torch.equal(trtllm(q, kv, table, lens), want)


def test_trtllm_ragged_queries():
    """cum_seq_lens_q: each request's tokens attend causally from its own end, as if decoded
    alone with its own s_q."""
    q_lens = [1, 3, 0, 2]
    w = make_workload(np.random.default_rng(5), b=4, s_q=3, h_q=4, page_size=16,
                      seq_lens=[9, 40, 5, 33])  # fmt: skip
    q_all, kv, table, lens = tensors(w)
    ragged = torch.cat([q_all[i, :n] for i, n in enumerate(q_lens)])  # [6, 4, 576]
    cum = torch.tensor([0, 1, 4, 4, 6], dtype=torch.int32)
    for max_q_len in (3, None):
        out, lse = trtllm(ragged, kv, table, lens, cum_seq_lens_q=cum, max_q_len=max_q_len,
                          return_lse=True)  # fmt: skip
        assert out.shape == (6, 4, 512) and lse.shape == (6, 4)
        row = 0
        for i, n in enumerate(q_lens):
            if n == 0:
                continue
            want, want_lse = mlakit_decode(ragged[row : row + n][None], kv, table[i : i + 1],
                                           lens[i : i + 1], 0.06)  # fmt: skip
            assert torch.equal(out[row : row + n], want[0]), f"request {i}"
            torch.testing.assert_close(lse[row : row + n], want_lse[0] * LOG2_E, rtol=1e-6,
                                       atol=0)  # fmt: skip
            row += n
    given = torch.zeros((6, 4, 512), dtype=torch.bfloat16)
    assert trtllm(ragged, kv, table, lens, cum_seq_lens_q=cum, max_q_len=3, out=given) is given


def test_ragged_query_offsets_read_on_the_host_are_checked():
    """Offsets the shims read on the host (trtllm without max_q_len, the wrapper's eager plan)
    are checked before a backend that trusts them gets them: 0 first, never decreasing, at most
    the query rows last."""
    w = make_workload(np.random.default_rng(6), b=2, s_q=3, h_q=4, page_size=16,
                      seq_lens=[9, 40])  # fmt: skip
    q_all, kv, table, lens = tensors(w)
    ragged = q_all[:, :1].reshape(2, 4, 576)
    for cum, message in [([1, 1, 2], r"cum_seq_lens_q\[0\]: expected 0, given 1"),
                         ([0, 5, 2], r"cum_seq_lens_q\[2\]: expected at least cum_seq_lens_q\[1\] = 5"),
                         ([0, 1, 3], r"cum_seq_lens_q\[2\]: expected at most the 2 query rows, given 3")]:
        with pytest.raises(ValueError, match=message):
            trtllm(ragged, kv, table, lens, cum_seq_lens_q=torch.tensor(cum, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"query: expected \[total, heads, dim\]"):
        trtllm(ragged[None], kv, table, lens, cum_seq_lens_q=torch.tensor([0, 1, 2], dtype=torch.int32))


def padded(x, cum, s_q):
    """The layout the shims ran ragged queries in before mlakit had variable query lengths: a
    batch of s_q slots per request, each request's rows in its last slots (where a uniform s_q's
    causal bound is the request's own), the unused slots repeating row 0. Returns the padded
    [b, s_q, ...] array and the (request, slot) of each ragged row, to gather results back."""
    q_lens = (cum[1:] - cum[:-1]).tolist()
    source = torch.zeros((len(q_lens), s_q), dtype=torch.int64)
    request, slot = [], []
    for i, n in enumerate(q_lens):
        source[i, s_q - n :] = torch.arange(int(cum[i]), int(cum[i]) + n)
        request += [i] * n
        slot += range(s_q - n, s_q)
    return x[source.reshape(-1)].reshape((len(q_lens), s_q) + tuple(x.shape[1:])), request, slot


def test_trtllm_ragged_queries_equal_the_padded_layout():
    """Ragged queries now run as mlakit's variable query lengths (packed, in place): the same
    bits as the padded layout the shim ran before, dense and sparse (whose slots are bounded by
    each request's own q_len: slot j of token t counts where j < seq_len - q_len + 1 + t)."""
    q_lens, seq_lens, topk = [2, 0, 3, 1], [3, 9, 20, 1], 8
    w = make_workload(np.random.default_rng(27), b=4, s_q=3, h_q=4, page_size=16,
                      seq_lens=seq_lens)  # fmt: skip
    q4, kv, table, lens = tensors(w)
    ragged = torch.cat([q4[i, :n] for i, n in enumerate(q_lens)])  # [6, 4, 576]
    cum = torch.tensor([0, 2, 2, 5, 6], dtype=torch.int32)
    q_pad, request, slot = padded(ragged, cum, 3)
    out, lse = trtllm(ragged, kv, table, lens, cum_seq_lens_q=cum, max_q_len=3, return_lse=True)
    want, want_lse = mlakit_decode(q_pad, kv, table, lens, 0.06, lse_base2=True)
    assert torch.equal(out, want[request, slot]) and torch.equal(lse, want_lse[request, slot])

    # Sparse: each token's first topk positions in order, as FlashInfer's sparse test lists them
    # (request 0's first token, of 2 with 3 cached, keeps slots < 2).
    positions = torch.arange(topk)
    rows = torch.stack([table[i, positions // 16] * 16 + positions % 16
                        for i, n in enumerate(q_lens) for _ in range(n)]).to(torch.int32)
    out = trtllm(ragged, kv, None, lens, sparse_mla_top_k=topk, block_tables=rows,
                 cum_seq_lens_q=cum, max_q_len=3)  # fmt: skip
    index_pad = padded(rows, cum, 3)[0]
    bound = lens[:, None].long() - 3 + 1 + torch.arange(3)[None, :]  # uniform s_q 3
    index_pad = index_pad.masked_fill(positions[None, None, :] >= bound[:, :, None], -1)
    want, _ = mlakit_decode(q_pad, kv, None, None, 0.06, indices=index_pad)
    assert torch.equal(out, want[request, slot])


@pytest.mark.parametrize(
    "kwargs,exception,message",
    [
        (dict(uses_shared_paged_kv_idx=False), NotImplementedError, "^uses_shared_paged_kv_idx: "),
        (dict(enable_dcp=True), NotImplementedError, "^enable_dcp: decode context parallelism"),
        (dict(cp_world=2), NotImplementedError, "^enable_dcp: "),
        (dict(sparse_mla_top_k_lens=torch.ones(2, dtype=torch.int32)), ValueError,
         "^sparse_mla_top_k_lens: expected None"),
        (dict(cute_dsl_impl="fast"), ValueError, "^cute_dsl_impl: expected"),
        (dict(kv_scale_format="int8"), ValueError, "^kv_scale_format: expected"),
        (dict(max_q_len=2), ValueError, "^max_q_len: expected None without cum_seq_lens_q"),
        (dict(backend="magic"), ValueError, "^backend: expected one of"),
        (dict(skip_softmax_threshold_scale_factor=1.0), NotImplementedError,
         "^skip_softmax_threshold_scale_factor"),
    ],
)  # fmt: skip
def test_trtllm_refusals_by_name(kwargs, exception, message):
    w = make_workload(np.random.default_rng(6), b=2, s_q=1, h_q=4, page_size=16,
                      seq_lens=[3, 20])  # fmt: skip
    with pytest.raises(exception, match=message):
        trtllm(*tensors(w), **kwargs)


def test_trtllm_nope_mla_is_refused():
    w = make_workload(np.random.default_rng(6), b=1, s_q=1, h_q=4, page_size=16, seq_lens=[3])
    q, kv, table, lens = tensors(w)
    with pytest.raises(NotImplementedError, match="^qk_rope_head_dim: 0"):
        compat.trtllm_batch_decode_with_kv_cache_mla(q, kv, None, 128, 512, 0, table, lens, 16)


# ---- FlashInfer: BatchMLAPagedAttentionWrapper ---------------------------------------------------


@pytest.mark.parametrize("page,s_q", [(1, 1), (16, 2)])
def test_wrapper_matches_mlakit(page, s_q):
    p = Paged(7, b=3, s_q=s_q, h=8, page=page, seq_lens=[0, 37, 64])
    want, want_lse = p.want()
    mla = wrapper()
    p.plan(mla)
    # Split views of one buffer (joined without a copy) and separate tensors (concatenated).
    split = (p.q[..., :512], p.q[..., 512:], p.kv[..., :512], p.kv[..., 512:])
    separate = tuple(x.clone() for x in split)
    for args in (split, separate):
        assert torch.equal(mla.run(*args), want)
        out, lse = mla.run(*args, return_lse=True)
        assert torch.equal(out, want)
        torch.testing.assert_close(lse, want_lse * LOG2_E, rtol=1e-6, atol=0)  # base 2
        assert torch.isneginf(lse[: s_q]).all()
        out_buf, lse_buf = torch.empty_like(want), torch.empty(want_lse.shape)
        got = mla.run(*args, out=out_buf, lse=lse_buf, return_lse=True, return_lse_base_on_e=True)
        assert got[0] is out_buf and got[1] is lse_buf
        assert torch.equal(out_buf, want) and torch.equal(lse_buf, want_lse)


def test_wrapper_cuda_graph_plan_reads_nothing_on_the_host(monkeypatch):
    """With use_cuda_graph, plan converts the lists with tensor ops into a block table it keeps
    (a captured run reads the same memory after each re-plan)."""
    p = Paged(8, b=2, s_q=1, h=4, page=16, seq_lens=[20, 50])
    buffers = dict(qo_indptr=torch.empty(3, dtype=torch.int32),
                   kv_indptr=torch.empty(3, dtype=torch.int32),
                   kv_indices=torch.empty(64, dtype=torch.int32),
                   kv_len_arr=torch.empty(2, dtype=torch.int32))  # fmt: skip
    mla = wrapper(use_cuda_graph=True, max_seq_len=128, **buffers)

    def host_read(*args, **kwargs):
        raise AssertionError("plan read a tensor on the host")

    with monkeypatch.context() as m:
        for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__index__"):
            m.setattr(torch.Tensor, name, host_read)
        p.plan(mla)
    table = mla._block_table
    assert table.shape == (2, 8)
    q, kv = p.q, p.kv
    assert torch.equal(mla.run(q[..., :512], q[..., 512:], kv[..., :512], kv[..., 512:]),
                       p.want()[0])  # fmt: skip
    # A new step: other lists, the same block table memory.
    p2 = Paged(9, b=2, s_q=1, h=4, page=16, seq_lens=[70, 3])
    p2.plan(mla)
    assert mla._block_table is table
    q, kv = p2.q, p2.kv
    assert torch.equal(mla.run(q[..., :512], q[..., 512:], kv[..., :512], kv[..., 512:]),
                       p2.want()[0])  # fmt: skip
    # Without max_seq_len the kv_indices buffer bounds the width.
    sized = wrapper(use_cuda_graph=True, **buffers)
    p.plan(sized)
    assert sized._block_table.shape == (2, 64)


@pytest.mark.parametrize("qo_dtype", [torch.int32, torch.int64])
def test_wrapper_cuda_graph_with_max_q_len_runs_query_lengths_that_differ(monkeypatch, qo_dtype):
    """With use_cuda_graph and max_q_len, plan reads nothing on the host and run decodes the
    query lengths of the qo_indptr buffer (mlakit's var_q, on the device): the same bits as the
    plan without use_cuda_graph, which reads them; a re-plan with other lengths reuses the same
    offsets memory; query rows past qo_indptr[-1] are left alone."""
    q_lens, seq_lens, h, page = [2, 0, 3, 1], [20, 5, 33, 1], 4, 16
    w = make_workload(np.random.default_rng(32), b=4, s_q=3, h_q=h, page_size=page,
                      seq_lens=seq_lens)  # fmt: skip
    w.page_size = page
    q4, kv, table, lens = tensors(w)
    ragged = torch.cat([q4[i, :n] for i, n in enumerate(q_lens)] + [q4[0, :2]])  # 6 + 2 rows
    kv_indptr, kv_indices = csr(w, None)
    plan_args = (kv_indptr, kv_indices, lens, h, 512, 64, page, True, 0.07, torch.bfloat16,
                 torch.bfloat16)  # fmt: skip
    buffers = dict(qo_indptr=torch.empty(5, dtype=qo_dtype),
                   kv_indptr=torch.empty(5, dtype=torch.int32),
                   kv_indices=torch.empty(64, dtype=torch.int32),
                   kv_len_arr=torch.empty(4, dtype=torch.int32))  # fmt: skip
    graph = wrapper(use_cuda_graph=True, max_seq_len=64, max_q_len=3, **buffers)
    args = (ragged[..., :512], ragged[..., 512:], kv[..., :512], kv[..., 512:])

    def host_read(*args, **kwargs):
        raise AssertionError("plan read a tensor on the host")

    pointers = set()
    for lengths in ([0, 2, 2, 5, 6], [0, 3, 4, 4, 7]):
        qo_indptr = torch.tensor(lengths, dtype=torch.int32)
        with monkeypatch.context() as m:
            for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__index__"):
                m.setattr(torch.Tensor, name, host_read)
            graph.plan(qo_indptr.to(qo_dtype), *plan_args)
        offsets = graph._plan["cu_seqlens_q"]
        pointers.add(offsets.data_ptr())
        assert offsets.dtype == torch.int32 and len(pointers) == 1, "a captured run reads it"
        out = torch.full((8, h, 512), math.nan, dtype=torch.bfloat16)
        lse = torch.full((8, h), math.nan)
        graph.run(*args, out=out, lse=lse)
        total = lengths[-1]
        eager = wrapper()
        eager.plan(qo_indptr, *plan_args)
        want, want_lse = eager.run(*(x[:total] if i < 2 else x for i, x in enumerate(args)),
                                   return_lse=True)  # fmt: skip
        assert torch.equal(out[:total], want) and torch.equal(lse[:total], want_lse)
        assert out[total:].isnan().all() and lse[total:].isnan().all()


def test_wrapper_max_q_len_refusals():
    buffers = dict(qo_indptr=torch.empty(3, dtype=torch.int32),
                   kv_indptr=torch.empty(3, dtype=torch.int32),
                   kv_indices=torch.empty(8, dtype=torch.int32),
                   kv_len_arr=torch.empty(2, dtype=torch.int32))  # fmt: skip
    with pytest.raises(ValueError, match="^max_q_len: expected None without use_cuda_graph"):
        wrapper(max_q_len=2)
    with pytest.raises(ValueError, match="^max_q_len: expected 1..16, given 0"):
        wrapper(use_cuda_graph=True, max_q_len=0, **buffers)
    with pytest.raises(NotImplementedError, match="^max_q_len: 17 query tokens per request is "
                       "not supported by mlakit"):  # fmt: skip
        wrapper(use_cuda_graph=True, max_q_len=17, **buffers)


def test_wrapper_refusals_by_name():
    p = Paged(10, b=2, s_q=1, h=4, page=16, seq_lens=[5, 9])
    mla = wrapper()
    with pytest.raises(RuntimeError, match="call plan"):
        mla.run(p.q[..., :512], p.q[..., 512:], p.kv[..., :512], p.kv[..., 512:])
    with pytest.raises(NotImplementedError, match="^backend: 'cutlass'"):
        wrapper(backend="cutlass")
    with pytest.raises(ValueError, match="^kv_indices: expected a buffer with use_cuda_graph"):
        wrapper(use_cuda_graph=True, qo_indptr=p.qo_indptr, kv_indptr=p.kv_indptr,
                kv_len_arr=p.lens)  # fmt: skip
    with pytest.raises(NotImplementedError, match="^head_dim_kpe: 0"):
        mla.plan(p.qo_indptr, p.kv_indptr, p.kv_indices, p.lens, 4, 512, 0, 16, True, 0.1,
                 torch.bfloat16, torch.bfloat16)  # fmt: skip
    with pytest.raises(NotImplementedError, match="^use_profiler"):
        mla.plan(p.qo_indptr, p.kv_indptr, p.kv_indices, p.lens, 4, 512, 64, 16, True, 0.1,
                 torch.bfloat16, torch.bfloat16, use_profiler=True)  # fmt: skip
    long = torch.tensor([0, 1, 18], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="^qo_indptr: 17 query tokens per request is "
                       "not supported by mlakit"):  # fmt: skip
        mla.plan(long, p.kv_indptr, p.kv_indices, p.lens, 4, 512, 64, 16, True, 0.1,
                 torch.bfloat16, torch.bfloat16)  # fmt: skip
    p.plan(mla)
    args = (p.q[..., :512], p.q[..., 512:], p.kv[..., :512], p.kv[..., 512:])
    with pytest.raises(ValueError, match=r"^q_nope.dtype: expected torch.bfloat16 \(the planned "
                       r"q_data_type\), given torch.float16"):  # fmt: skip
        mla.run(p.q[..., :512].half(), *args[1:])
    for kwargs, exception, message in [
        (dict(o_scale=1.0), NotImplementedError, "^o_scale"),
        (dict(profiler_buffer=torch.empty(1)), NotImplementedError, "^profiler_buffer"),
        (dict(ckv_scale_arr=torch.ones(1)), ValueError, "^ckv_scale, ckv_scale_arr, kpe_scale: "),
        (dict(ckv_scale=1.0, kpe_scale=1.0), ValueError, "^ckv_scale, ckv_scale_arr, kpe_scale: "
         "expected None with a 16-bit cache"),
        (dict(page_table=p.table), ValueError, "^kv_len, page_table: expected None"),
    ]:
        with pytest.raises(exception, match=message):
            mla.run(*args, **kwargs)
