"""The FlashMLA and FlashInfer shims on host arrays (NumPy with ml_dtypes; PyTorch CPU tensors
where PyTorch is installed), against the float64 reference, and their unsupported arguments."""

import math

import pytest

np = pytest.importorskip("numpy")

from mlakit import compat  # noqa: E402
from numpy_reference import (  # noqa: E402
    assert_close_to_reference,
    make_workload,
    reference,
)

ml_dtypes = pytest.importorskip("ml_dtypes")

try:
    import torch
except ImportError:
    torch = None

FRAMEWORKS = ["numpy"] + (["torch"] if torch is not None else [])


def wrap(framework, bits, dtype="bf16"):
    """Raw bits as an array of the framework with its real dtype (ints pass through)."""
    if bits.dtype in (np.int32, np.float32):
        return torch.from_numpy(bits) if framework == "torch" else bits
    if framework == "torch":
        if dtype == "bf16":
            return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(bits).view(torch.float8_e4m3fn if dtype == "fp8" else torch.uint8)
    if dtype == "bf16":
        return bits.view(ml_dtypes.bfloat16)
    return bits.view(ml_dtypes.float8_e4m3fn) if dtype == "fp8" else bits


def flashmla_lse(want_lse):
    """The reference LSE [b, s_q, h_q] as FlashMLA returns it: [b, h_q, s_q], +inf (not -inf)
    for a query without visible tokens."""
    flipped = want_lse.transpose(0, 2, 1).copy()
    flipped[np.isneginf(flipped)] = np.inf
    return flipped


def values(x):
    if torch is not None and isinstance(x, torch.Tensor):
        return x.float().numpy().astype(np.float64)
    return np.asarray(x, dtype=np.float64)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_get_mla_metadata_placeholders(framework):
    seqlens = wrap(framework, np.array([5, 9, 100], np.int32))
    tile_meta, num_splits = compat.get_mla_metadata(seqlens, 1 * 128 // 1, 1)
    assert tuple(tile_meta.shape)[1] == 8 and tuple(num_splits.shape) == (4,)
    assert str(tile_meta.dtype).endswith("int32") and str(num_splits.dtype).endswith("int32")
    old = compat.get_mla_metadata(seqlens, num_heads_per_head_k=128, num_heads_k=1)
    assert tuple(old[1].shape) == (4,)
    with pytest.raises(TypeError, match="unexpected keyword"):
        compat.get_mla_metadata(seqlens, 128, 1, bogus=1)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("s_q,causal", [(1, False), (2, True), (2, False)])
def test_flash_mla_dense(framework, s_q, causal):
    rng = np.random.default_rng(s_q)
    b, h_q, page = 3, 16, 64
    w = make_workload(rng, b=b, s_q=s_q, h_q=h_q, page_size=page, seq_lens=[1, 70, 129])
    k_cache = w.kv_cache.reshape(-1, page, 1, 576)  # FlashMLA: [blocks, page, h_kv, d]
    seqlens = wrap(framework, w.seq_lens)
    meta, splits = compat.get_mla_metadata(seqlens, s_q * h_q // 1, 1)
    out, lse = compat.flash_mla_with_kvcache(
        wrap(framework, w.q), wrap(framework, k_cache), wrap(framework, w.block_table), seqlens,
        512, meta, splits, causal=causal,
    )  # fmt: skip
    want, want_lse = reference(w, page_size=page, causal=causal)
    assert tuple(out.shape) == (b, s_q, h_q, 512)
    assert_close_to_reference(values(out), want, "bf16")
    assert tuple(lse.shape) == (b, h_q, s_q)  # FlashMLA's layout
    np.testing.assert_allclose(values(lse), flashmla_lse(want_lse), atol=2e-4)
    if s_q == 2 and causal:  # request 0 (1 token): its first query token sees nothing
        assert np.all(np.isposinf(values(lse)[0, :, 0]))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_flash_mla_sparse_fp8_blockwise(framework):
    rng = np.random.default_rng(7)
    b, s_q, h_q, page, topk = 2, 1, 16, 64, 32
    w = make_workload(rng, b=b, s_q=s_q, h_q=h_q, page_size=page, seq_lens=[100, 64],
                      blockwise=True)  # fmt: skip
    indices = np.full((b, s_q, topk), -1, np.int32)
    for i in range(b):
        owned = [int(w.block_table[i, j // page]) * page + j % page for j in range(w.seq_lens[i])]
        indices[i, 0, :20] = rng.choice(owned, 20, replace=False)
    sink = rng.standard_normal(h_q).astype(np.float32)
    topk_length = np.array([32, 12], np.int32)
    out, lse = compat.flash_mla_with_kvcache(
        wrap(framework, w.q), wrap(framework, w.kv_cache.reshape(-1, page, 1, 656), "fp8"), None,
        None, 512, None, None, is_fp8_kvcache=True, indices=wrap(framework, indices),
        attn_sink=wrap(framework, sink), topk_length=wrap(framework, topk_length),
    )  # fmt: skip
    want, want_lse = reference(w, page_size=page, indices=indices, topk_lens=topk_length,
                               sinks=sink)  # fmt: skip
    assert_close_to_reference(values(out), want, "bf16")
    np.testing.assert_allclose(values(lse), flashmla_lse(want_lse), atol=2e-4)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_flash_mla_fp8_dense_with_descales(framework):
    rng = np.random.default_rng(8)
    fp8 = dict(q_dtype="fp8_e4m3", kv_dtype="fp8_e4m3", q_scale=0.5, k_scale=0.25)
    w = make_workload(rng, b=2, s_q=1, h_q=8, page_size=64, seq_lens=[33, 90], **fp8)
    out, _ = compat.flash_mla_with_kvcache(
        wrap(framework, w.q, "fp8"), wrap(framework, w.kv_cache.reshape(-1, 64, 1, 576), "fp8"),
        wrap(framework, w.block_table), wrap(framework, w.seq_lens), 512, None, None,
        is_fp8_kvcache=True, descale_q=wrap(framework, np.array([0.5], np.float32)),
        descale_k=wrap(framework, np.array([0.25], np.float32)),
    )  # fmt: skip
    want, _ = reference(w, page_size=64)
    assert_close_to_reference(values(out), want, "bf16")


def test_flash_mla_unsupported_arguments():
    w = make_workload(np.random.default_rng(9), b=1, s_q=1, h_q=4, page_size=64, seq_lens=[5])
    k_cache = w.kv_cache.view(ml_dtypes.bfloat16).reshape(-1, 64, 1, 576)
    args = (w.q.view(ml_dtypes.bfloat16), k_cache, w.block_table, w.seq_lens)
    with pytest.raises(ValueError, match="head_dim_v: expected 512, given 128"):
        compat.flash_mla_with_kvcache(*args, 128, None, None)
    for name in ("extra_k_cache", "extra_indices_in_kvcache", "extra_topk_length", "topk_length"):
        with pytest.raises(ValueError, match=f"^{name}: expected None without indices"):
            compat.flash_mla_with_kvcache(*args, 512, None, None, **{name: w.seq_lens})
    with pytest.raises(ValueError, match="^descale_q: expected None for a bf16 q"):
        compat.flash_mla_with_kvcache(*args, 512, None, None, descale_q=np.ones(1, np.float32))
    with pytest.raises(ValueError, match="^descale_k: expected None for a bf16 k_cache"):
        compat.flash_mla_with_kvcache(*args, 512, None, None, descale_k=np.ones(1, np.float32))
    with pytest.raises(ValueError, match="^is_fp8_kvcache: expected False for a bf16 k_cache"):
        compat.flash_mla_with_kvcache(*args, 512, None, None, is_fp8_kvcache=True)


# ---- FlashMLA fp8: vLLM's fork (flash_mla_with_kvcache_fp8, get_mla_metadata_dense_fp8) --------


def fp8_dense_workload(seed, *, q_dtype="fp8_e4m3", seq_lens=(0, 1, 64, 150), s_q=1, h_q=16):
    return make_workload(np.random.default_rng(seed), b=len(seq_lens), s_q=s_q, h_q=h_q,
                         page_size=64, seq_lens=list(seq_lens), q_dtype=q_dtype,
                         kv_dtype="fp8_e4m3", q_scale=0.5, k_scale=0.25)  # fmt: skip


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("s_q,causal", [(1, True), (2, True), (2, False)])
def test_flash_mla_with_kvcache_fp8(framework, s_q, causal):
    """vLLM's FlashMLA backend: get_mla_metadata_dense_fp8 per step, then flash_mla_with_kvcache_fp8
    with the cache unsqueezed to [blocks, 64, 1, 576] and descales layer._q_scale.reshape(1)."""
    w = fp8_dense_workload(20 + s_q, s_q=s_q)
    b, h_q = len(w.seq_lens), w.q.shape[2]
    seq_lens = wrap(framework, w.seq_lens)
    tile_scheduler_metadata, num_splits = compat.get_mla_metadata_dense_fp8(
        seq_lens, s_q * h_q // 1, 1
    )
    assert tuple(tile_scheduler_metadata.shape)[1] == 8 and tuple(num_splits.shape) == (b + 1,)
    assert str(num_splits.dtype).endswith("int32")
    out, lse = compat.flash_mla_with_kvcache_fp8(
        q=wrap(framework, w.q, "fp8"),
        k_cache=wrap(framework, w.kv_cache, "fp8")[:, :, None, :],
        block_table=wrap(framework, w.block_table),
        cache_seqlens=seq_lens,
        head_dim_v=512,
        tile_scheduler_metadata=tile_scheduler_metadata,
        num_splits=num_splits,
        softmax_scale=576**-0.5,
        causal=causal,
        descale_q=wrap(framework, np.array([0.5], np.float32)),
        descale_k=wrap(framework, np.array([0.25], np.float32)),
    )
    want, want_lse = reference(w, page_size=64, causal=causal)
    assert tuple(out.shape) == (b, s_q, h_q, 512) and "bfloat16" in str(out.dtype)
    assert_close_to_reference(values(out), want, "bf16")
    assert tuple(lse.shape) == (b, h_q, s_q)
    assert np.all(np.isposinf(values(lse)[0])), "seq_len 0: lse +inf, as FlashMLA"
    np.testing.assert_allclose(values(lse), flashmla_lse(want_lse), atol=2e-4)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_flash_mla_fp8_cache_with_bf16_query(framework):
    """mlakit's bf16-q mode through both FlashMLA names: descale_q None, descale_k given (a
    float too), is_fp8_kvcache left False as vLLM's older flash_mla_with_kvcache form did."""
    w = fp8_dense_workload(30, q_dtype="bf16", seq_lens=(5, 130))
    q, kv = wrap(framework, w.q), wrap(framework, w.kv_cache, "fp8")
    table, lens = wrap(framework, w.block_table), wrap(framework, w.seq_lens)
    want, _ = reference(w, page_size=64)
    out, _ = compat.flash_mla_with_kvcache_fp8(q, kv, table, lens, 512, None, None,
                                               descale_k=0.25)  # fmt: skip
    assert_close_to_reference(values(out), want, "bf16")
    descale_k = wrap(framework, np.array([0.25], np.float32))
    out, _ = compat.flash_mla_with_kvcache(q, kv, table, lens, 512, None, None, descale_k=descale_k)
    assert_close_to_reference(values(out), want, "bf16")


def test_flash_mla_fp8_descale_tensors_are_read_at_run_time():
    """descale_k is passed by pointer: changed in place, the next call follows it."""
    w = fp8_dense_workload(31, seq_lens=(40, 100))
    descale_q, descale_k = np.array([0.5], np.float32), np.array([0.25], np.float32)
    args = (w.q, w.kv_cache, w.block_table, w.seq_lens, 512, None, None)
    first, _ = compat.flash_mla_with_kvcache_fp8(*args, descale_q=descale_q, descale_k=descale_k)
    descale_k[0] = 0.5
    second, _ = compat.flash_mla_with_kvcache_fp8(*args, descale_q=descale_q, descale_k=descale_k)
    rescaled = make_workload(np.random.default_rng(31), b=2, s_q=1, h_q=16, page_size=64,
                             seq_lens=[40, 100], q_dtype="fp8_e4m3", kv_dtype="fp8_e4m3",
                             q_scale=0.5, k_scale=0.5)  # fmt: skip
    assert_close_to_reference(values(first), reference(w, page_size=64)[0], "bf16")
    assert_close_to_reference(values(second), reference(rescaled, page_size=64)[0], "bf16")


def test_flash_mla_fp8_argument_errors():
    w = fp8_dense_workload(32, seq_lens=(9,))
    one = np.ones(1, np.float32)
    q, kv = w.q, w.kv_cache[:, :, None, :]
    args = (w.block_table, w.seq_lens, 512, None, None)

    def fp8(q=q, kv=kv, **kwargs):
        return compat.flash_mla_with_kvcache_fp8(q, kv, *args, **kwargs)

    with pytest.raises(ValueError, match=r"^descale_q: expected a one-element float32 tensor "
                       r"\(the dequantization scale of an fp8 q\), given None"):  # fmt: skip
        fp8(descale_k=one)
    with pytest.raises(ValueError, match="^descale_k: expected a one-element float32 tensor"):
        fp8(descale_q=one)
    with pytest.raises(NotImplementedError, match="^descale_k: a per-request dequantization"):
        fp8(descale_q=one, descale_k=np.ones(2, np.float32))
    with pytest.raises(TypeError, match="^descale_q: expected dtype float32, given float64"):
        fp8(descale_q=np.ones(1, np.float64), descale_k=one)
    with pytest.raises(ValueError, match="^descale_q: expected a finite value > 0, given 0"):
        fp8(descale_q=0.0, descale_k=one)
    with pytest.raises(ValueError, match="^head_dim_v: expected 512, given 576"):
        compat.flash_mla_with_kvcache_fp8(q, kv, w.block_table, w.seq_lens, 576, None, None)
    bf16_kv = np.zeros(kv.shape, np.uint16).view(ml_dtypes.bfloat16)
    with pytest.raises(TypeError, match="^k_cache: expected .* float8_e4m3fn .*, given bf16"):
        fp8(kv=bf16_kv, descale_q=one, descale_k=one)
    blockwise = np.zeros((kv.shape[0], 64, 1, 656), np.uint8)
    with pytest.raises(TypeError, match="^k_cache: expected .*, given the 656-byte fp8 layout"):
        fp8(kv=blockwise, descale_q=one, descale_k=one)
    with pytest.raises(ValueError, match="^is_fp8_kvcache: expected True for the 656-byte"):
        compat.flash_mla_with_kvcache(q, blockwise, *args)
    with pytest.raises(ValueError, match="^descale_q: expected None for a bf16 q"):
        fp8(q=w.q.astype(np.uint16).view(ml_dtypes.bfloat16), descale_q=one, descale_k=one)


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("layout", ["3d", "4d"])
@pytest.mark.parametrize("q_len", [1, 2])
def test_trtllm_decode(framework, layout, q_len):
    rng = np.random.default_rng(q_len)
    b, h, page = 3, 16, 32
    w = make_workload(rng, b=b, s_q=q_len, h_q=h, page_size=page, seq_lens=[2, 31, 97])
    kv = w.kv_cache if layout == "3d" else w.kv_cache.reshape(-1, 1, page, 576)
    bmm1 = 1 / math.sqrt(128 + 64)  # FlashInfer's convention: the pre-absorption head dim
    out = compat.trtllm_batch_decode_with_kv_cache_mla(
        wrap(framework, w.q), wrap(framework, kv), wrap(framework, np.zeros(16, np.int32)), 128,
        512, 64, wrap(framework, w.block_table), wrap(framework, w.seq_lens), 128,
        bmm1_scale=bmm1,
    )  # fmt: skip
    want, _ = reference(w, page_size=page, softmax_scale=bmm1)
    assert tuple(out.shape) == (b, q_len, h, 512)
    assert_close_to_reference(values(out), want, "bf16")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_trtllm_out_3d_sinks_and_fp8_scales(framework):
    rng = np.random.default_rng(11)
    b, h, page = 2, 8, 64
    bmm1, bmm2 = 0.05, 0.5
    w = make_workload(rng, b=b, s_q=1, h_q=h, page_size=page, seq_lens=[60, 7],
                      kv_dtype="fp8_e4m3", k_scale=bmm2)  # fmt: skip
    sinks = rng.standard_normal(h).astype(np.float32)
    out = wrap(framework, np.zeros((b, h, 512), np.uint16))
    result = compat.trtllm_batch_decode_with_kv_cache_mla(
        wrap(framework, w.q), wrap(framework, w.kv_cache, "fp8"), None, 128, 512, 64,
        wrap(framework, w.block_table), wrap(framework, w.seq_lens), 64, out=out,
        bmm1_scale=bmm1, bmm2_scale=bmm2, sinks=[wrap(framework, sinks)],
    )  # fmt: skip
    assert result is out
    want, _ = reference(w, page_size=page, softmax_scale=bmm1 / bmm2, sinks=sinks)
    assert_close_to_reference(values(out)[:, None], want, "bf16")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_trtllm_sparse(framework):
    rng = np.random.default_rng(12)
    b, h, page, topk = 2, 8, 64, 16
    w = make_workload(rng, b=b, s_q=1, h_q=h, page_size=page, seq_lens=[80, 30])
    indices = np.full((b, 1, topk), -1, np.int32)
    for i in range(b):
        owned = [int(w.block_table[i, j // page]) * page + j % page for j in range(w.seq_lens[i])]
        indices[i, 0, :10] = rng.choice(owned, 10, replace=False)
    out = compat.trtllm_batch_decode_with_kv_cache_mla(
        wrap(framework, w.q), wrap(framework, w.kv_cache), None, 128, 512, 64,
        wrap(framework, indices), wrap(framework, w.seq_lens), 128, sparse_mla_top_k=topk,
        bmm1_scale=0.05,
    )  # fmt: skip
    want, _ = reference(w, page_size=page, softmax_scale=0.05, indices=indices)
    assert_close_to_reference(values(out), want, "bf16")


def test_trtllm_unsupported_arguments():
    w = make_workload(np.random.default_rng(13), b=1, s_q=1, h_q=4, page_size=64, seq_lens=[5])
    q, kv = w.q.view(ml_dtypes.bfloat16), w.kv_cache.view(ml_dtypes.bfloat16)

    def call(**kwargs):
        args = dict(qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64)
        args.update(kwargs)
        return compat.trtllm_batch_decode_with_kv_cache_mla(
            q, kv, None, args.pop("qk_nope_head_dim"), args.pop("kv_lora_rank"),
            args.pop("qk_rope_head_dim"), w.block_table, w.seq_lens, 64, **args,
        )  # fmt: skip

    with pytest.raises(NotImplementedError, match="^kv_lora_rank: 256 \\(FlashInfer's smaller "):
        call(kv_lora_rank=256)
    with pytest.raises(ValueError, match="^kv_lora_rank, qk_rope_head_dim: expected 512 and 64 "):
        call(qk_rope_head_dim=32)
    with pytest.raises(NotImplementedError, match="^skip_softmax_threshold_scale_factor: "):
        call(skip_softmax_threshold_scale_factor=1.0)
    with pytest.raises(NotImplementedError, match="^bmm2_scale: an output scale other than 1.0"):
        call(bmm2_scale=0.5)
    with pytest.raises(NotImplementedError, match="^bmm1_scale: a tensor with a bf16 query is "):
        call(bmm1_scale=np.ones(1, np.float32))
    with pytest.raises(NotImplementedError, match="^bmm2_scale: a tensor with a 16-bit cache is "):
        call(bmm2_scale=np.ones(1, np.float32))
    for bad in (0.0, -0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="^bmm1_scale: expected a finite value > 0, given "):
            call(bmm1_scale=bad)
    with pytest.raises(ValueError, match="^bmm2_scale: expected a finite value > 0, given 0"):
        call(bmm2_scale=0)
    with pytest.raises(TypeError, match="^bmm1_scale: expected dtype float32, given float64"):
        call(bmm1_scale=np.ones(1, np.float64))
    with pytest.raises(ValueError, match="^bmm1_scale: expected a one-element float32 array"):
        call(bmm1_scale=np.ones(2, np.float32))
    with pytest.raises(ValueError, match="sinks: expected one"):
        call(sinks=[np.zeros(4, np.float32)] * 2)


# ---- FlashInfer's fused scales with an fp8 cache: floats and one-element tensors -----------------

BMM1, BMM2 = 0.05, 0.5


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("query", ["fp8", "bf16"])
@pytest.mark.parametrize("bmm1_form", ["float", "tensor"])
@pytest.mark.parametrize("bmm2_form", ["float", "tensor"])
def test_trtllm_fp8_scales(framework, query, bmm1_form, bmm2_form):
    """out = softmax(bmm1_scale * q.k) . v * bmm2_scale on the stored values, whichever form the
    scales take; a form that would need a tensor's value on the host is refused by name."""
    rng = np.random.default_rng(40)
    b, h, page = 3, 8, 32
    # Scales 1: the workload's values are the stored ones, which FlashInfer's scales multiply.
    w = make_workload(rng, b=b, s_q=1, h_q=h, page_size=page, seq_lens=[0, 33, 90],
                      q_dtype="fp8_e4m3" if query == "fp8" else "bf16",
                      kv_dtype="fp8_e4m3")  # fmt: skip
    sinks = rng.standard_normal(h).astype(np.float32)

    def form(value, kind):
        return value if kind == "float" else wrap(framework, np.array([value], np.float32))

    out = wrap(framework, np.full((b, 1, h, 512), 0x7FC0, np.uint16))  # NaN-poisoned bf16
    call = dict(query=wrap(framework, w.q, query), kv_cache=wrap(framework, w.kv_cache, "fp8"),
                workspace_buffer=None, qk_nope_head_dim=128, kv_lora_rank=512,
                qk_rope_head_dim=64, block_tables=wrap(framework, w.block_table),
                seq_lens=wrap(framework, w.seq_lens), max_seq_len=96, out=out,
                bmm1_scale=form(BMM1, bmm1_form), bmm2_scale=form(BMM2, bmm2_form),
                sinks=[wrap(framework, sinks)])  # fmt: skip
    if query == "bf16" and (bmm1_form, bmm2_form) != ("float", "float"):
        name = "bmm1_scale" if bmm1_form == "tensor" else "bmm2_scale"
        with pytest.raises(NotImplementedError, match=f"^{name}: a tensor with a bf16 query is "):
            compat.trtllm_batch_decode_with_kv_cache_mla(**call)
        return
    assert compat.trtllm_batch_decode_with_kv_cache_mla(**call) is out
    want, _ = reference(w, page_size=page, softmax_scale=BMM1, sinks=sinks)
    assert_close_to_reference(values(out), want * BMM2, "bf16")


def test_trtllm_blockwise_cache_takes_no_output_scale():
    """The 656-byte cache's k_scale leaves its RoPE part unscaled: it cannot carry bmm2_scale."""
    rng = np.random.default_rng(42)
    b, h, page, topk = 2, 8, 64, 16
    w = make_workload(rng, b=b, s_q=1, h_q=h, page_size=page, seq_lens=[80, 30], blockwise=True)
    indices = np.full((b, 1, topk), -1, np.int32)
    for i in range(b):
        owned = [int(w.block_table[i, j // page]) * page + j % page for j in range(w.seq_lens[i])]
        indices[i, 0, :10] = rng.choice(owned, 10, replace=False)
    args = (w.q.view(ml_dtypes.bfloat16), w.kv_cache, None, 128, 512, 64, indices, w.seq_lens,
            128)  # fmt: skip
    out = compat.trtllm_batch_decode_with_kv_cache_mla(*args, sparse_mla_top_k=topk,
                                                       bmm1_scale=0.05)  # fmt: skip
    want, _ = reference(w, page_size=page, softmax_scale=0.05, indices=indices)
    assert_close_to_reference(values(out), want, "bf16")
    with pytest.raises(NotImplementedError, match="^bmm2_scale: an output scale other than 1.0 "
                       "with the 656-byte fp8 cache is not supported"):  # fmt: skip
        compat.trtllm_batch_decode_with_kv_cache_mla(*args, sparse_mla_top_k=topk,
                                                     bmm1_scale=0.05, bmm2_scale=0.5)  # fmt: skip


def test_trtllm_tensor_scales_are_read_at_run_time():
    """Tensor scales reach mlakit as pointers (bmm1 / bmm2 as a device division when bmm2 is a
    tensor): changed in place, the next call follows them."""
    rng = np.random.default_rng(41)
    w = make_workload(rng, b=2, s_q=1, h_q=8, page_size=64, seq_lens=[70, 12], q_dtype="fp8_e4m3",
                      kv_dtype="fp8_e4m3")  # fmt: skip
    bmm1, bmm2 = np.array([BMM1], np.float32), np.array([BMM2], np.float32)
    for one, two in ((BMM1, BMM2), (0.02, 2.0)):
        bmm1[0], bmm2[0] = one, two
        out = compat.trtllm_batch_decode_with_kv_cache_mla(
            w.q, w.kv_cache, None, 128, 512, 64, w.block_table, w.seq_lens, 128,
            bmm1_scale=bmm1, bmm2_scale=bmm2,
        )  # fmt: skip
        want, _ = reference(w, page_size=64, softmax_scale=one)
        assert_close_to_reference(values(out), want * two, "bf16")
