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

import mlakit.torch as mlakit_torch  # noqa: E402
from mlakit import compat  # noqa: E402
from numpy_reference import make_workload  # noqa: E402

LOG2_E = 1 / math.log(2)


def tensors(w):
    """A numpy_reference workload as CPU tensors (bf16 q and cache)."""
    return (
        torch.from_numpy(w.q.view(np.int16)).view(torch.bfloat16),
        torch.from_numpy(w.kv_cache.view(np.int16)).view(torch.bfloat16),
        torch.from_numpy(w.block_table),
        torch.from_numpy(w.seq_lens),
    )


def mlakit_decode(q, kv, table, lens, scale, **kwargs):
    return mlakit_torch.decode(q, kv, table, lens, softmax_scale=scale, return_lse=True, **kwargs)


# ---- FlashMLA (main branch) --------------------------------------------------------------------


def flashmla_workload(seed=0, b=3, s_q=2, h=8):
    w = make_workload(np.random.default_rng(seed), b=b, s_q=s_q, h_q=h, page_size=64,
                      seq_lens=[0, 70, 130][:b])  # fmt: skip
    q, kv, table, lens = tensors(w)
    return q, kv.unsqueeze(2), table, lens  # FlashMLA's [num_blocks, page, 1, 576]


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


def trtllm(q, kv, table, lens, **kwargs):
    table = kwargs.pop("block_tables", table)
    return compat.trtllm_batch_decode_with_kv_cache_mla(
        q, kv, None, 128, 512, 64, table, lens, 256, bmm1_scale=0.06, **kwargs)  # fmt: skip


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


def csr(w, rng):
    """The workload's block table as FlashInfer's CSR lists (page ids in request order)."""
    pages = [(int(n) + w.page_size - 1) // w.page_size for n in w.seq_lens]
    indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    indices = np.concatenate([w.block_table[i, :n] for i, n in enumerate(pages)]).astype(np.int32)
    return torch.from_numpy(indptr), torch.from_numpy(indices)


class Paged:
    """A workload for the wrapper: q [b * s_q, h, 576] and cache [pages, page, 576] whose
    q_nope/q_pe and ckv/kpe halves are views of one buffer (SGLang's layout)."""

    def __init__(self, seed, b, s_q, h, page, seq_lens):
        w = make_workload(np.random.default_rng(seed), b=b, s_q=s_q, h_q=h, page_size=page,
                          seq_lens=seq_lens)  # fmt: skip
        w.page_size = page
        self.q4, self.kv, self.table, self.lens = tensors(w)
        self.q = self.q4.reshape(b * s_q, h, 576)
        self.kv_indptr, self.kv_indices = csr(w, None)
        self.qo_indptr = torch.arange(b + 1, dtype=torch.int32) * s_q
        self.b, self.s_q, self.h, self.page = b, s_q, h, page

    def plan(self, wrapper, causal=True, scale=0.07):
        wrapper.plan(self.qo_indptr, self.kv_indptr, self.kv_indices, self.lens, self.h, 512, 64,
                     self.page, causal, scale, torch.bfloat16, torch.bfloat16)  # fmt: skip

    def want(self, scale=0.07, causal=True):
        out, lse = mlakit_decode(self.q4, self.kv, self.table, self.lens, scale, causal=causal)
        return out.reshape(-1, self.h, 512), lse.reshape(-1, self.h)


def wrapper(**kwargs):
    return compat.BatchMLAPagedAttentionWrapper(torch.empty(16, dtype=torch.int8), **kwargs)


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
