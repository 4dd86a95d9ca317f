"""GPU tests (PyTorch, CUDA): results against a PyTorch float32 reference, in-place outputs,
streams, torch.compile(fullgraph=True), CUDA graph capture and replay with changed inputs, and
the compat shims on the argument sets their originals document. Skipped without a GPU."""

import math
import os

import pytest

torch = pytest.importorskip("torch")

import mlakit  # noqa: E402
import mlakit.torch  # noqa: E402
from mlakit.torch import capture_graph  # noqa: E402
from mlakit import compat  # noqa: E402

pytestmark = pytest.mark.gpu

DEVICE = "cuda"
SCALE = 576**-0.5


# ---- workloads and the float32 reference ---------------------------------------------------


def make_case(*, b, s_q, h_q, page_size, seq_lens, dtype=torch.bfloat16, seed=0, spare=2):
    """Pages shuffled over the cache; spare pages (and the unused block-table slots, which point
    at one of them) hold NaN, so that a kernel reading what it should not shows up."""
    gen = torch.Generator().manual_seed(seed)
    pages_per = [(n + page_size - 1) // page_size for n in seq_lens]
    max_pages = max(1, max(pages_per)) + 1
    num_pages = sum(pages_per) + spare
    order = torch.randperm(num_pages, generator=gen).to(torch.int32)
    poison_page = int(order[-1])
    table = torch.full((b, max_pages), poison_page, dtype=torch.int32)
    used = 0
    for i, n in enumerate(pages_per):
        table[i, :n] = order[used : used + n]
        used += n
    kv = torch.randn(num_pages, page_size, 576, generator=gen).to(dtype)
    kv[order[used:].long()] = float("nan")
    q = torch.randn(b, s_q, h_q, 576, generator=gen).to(dtype)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    return q.to(DEVICE), kv.to(DEVICE), table.to(DEVICE), lens.to(DEVICE)


def reference(q, kv, table, lens, *, softmax_scale=SCALE, causal=True, sinks=None):
    """out [b, s_q, h_q, 512] and lse [b, s_q, h_q] in float32 (docs/math-and-layouts.md)."""
    b, s_q, h_q, _ = q.shape
    page_size = kv.shape[-2]
    flat = kv.reshape(-1, 576).float()
    out = torch.zeros(b, s_q, h_q, 512, device=q.device)
    lse = torch.full((b, s_q, h_q), float("-inf"), device=q.device)
    for i, length in enumerate(lens.tolist()):
        if length == 0:
            continue
        pos = torch.arange(length, device=q.device)
        slots = table[i].long()[pos // page_size] * page_size + pos % page_size
        k = flat[slots]  # [L, 576]
        scores = torch.einsum("thd,ld->thl", q[i].float(), k) * softmax_scale
        if causal and s_q > 1:
            limit = length - s_q + 1 + torch.arange(s_q, device=q.device)  # token t sees < limit
            scores = scores.masked_fill((pos[None, :] >= limit[:, None])[:, None, :], -math.inf)
        row_lse = torch.logsumexp(scores, dim=-1)  # [s_q, h_q]
        weights = torch.nan_to_num(torch.exp(scores - row_lse[..., None]), nan=0.0)
        o = weights @ k[:, :512]
        if sinks is not None:  # out *= exp(lse) / (exp(lse) + exp(sink))
            o = o * torch.sigmoid(row_lse - sinks.float())[..., None]
        out[i], lse[i] = o, row_lse
    return out, lse


def assert_close(got, want, what="out", rel_l2_max=1e-2):
    """Max error within 2% of the largest reference value, relative L2 error <= rel_l2_max. The
    fp8-q mode's fp8 products (rel_l2_max 3e-2, per its documented error: P rounded to e4m3) get
    the library's own elementwise bound for them, 2^-4 of the largest value."""
    got = got.float()
    assert torch.isfinite(got).all(), f"{what}: NaN or inf in the result"
    err = (got - want).abs()
    share = 2**-4 if rel_l2_max >= 3e-2 else 0.02
    max_err, bound = err.max().item(), share * want.abs().max().item() + 1e-3
    rel_l2 = ((got - want).norm() / want.norm().clamp_min(1e-12)).item()
    assert max_err <= bound and rel_l2 <= rel_l2_max, (
        f"{what}: max error {max_err:.3g} (bound {bound:.3g}), relative L2 {rel_l2:.3g}"
    )


def assert_lse_close(got, want):
    finite = torch.isfinite(want)
    assert torch.equal(got[~finite], want[~finite]), "lse: +-inf where not expected"
    assert torch.isfinite(got[finite]).all(), "lse: +-inf where not expected"
    err = (got[finite] - want[finite]).abs()
    assert err.numel() == 0 or err.max().item() <= 1e-2 + 1e-3 * want[finite].abs().max().item()


def make_decoder(q, kv, table, **kwargs):
    args = dict(h_q=q.shape[2], s_q=q.shape[1], page_size=kv.shape[-2], max_batch=q.shape[0],
                max_seq_len=table.shape[1] * kv.shape[-2], q_dtype=q.dtype)  # fmt: skip
    args.update(kwargs)
    return mlakit.Decoder(**args)


# ---- Decoder.run ----------------------------------------------------------------------------

CASES = [
    # (b, s_q, h_q, page_size, seq_lens, dtype, causal)
    (5, 1, 128, 64, [0, 1, 77, 300, 2050], torch.bfloat16, True),
    (4, 1, 16, 16, [1, 15, 16, 17], torch.bfloat16, True),
    (3, 1, 8, 1, [1, 2, 150], torch.bfloat16, True),
    (3, 1, 64, 32, [40, 33, 700], torch.float16, True),
    (3, 2, 16, 64, [1, 65, 129], torch.bfloat16, True),
    (2, 4, 32, 128, [3, 260], torch.float16, True),
    (2, 4, 16, 64, [5, 90], torch.bfloat16, False),
    (1, 8, 128, 64, [1000], torch.bfloat16, True),
]


@pytest.mark.parametrize("b,s_q,h_q,page_size,seq_lens,dtype,causal", CASES)
def test_decoder_matches_reference(b, s_q, h_q, page_size, seq_lens, dtype, causal):
    q, kv, table, lens = make_case(b=b, s_q=s_q, h_q=h_q, page_size=page_size,
                                   seq_lens=seq_lens, dtype=dtype)  # fmt: skip
    decoder = make_decoder(q, kv, table, causal=causal)
    assert decoder.device_memory and decoder.backend != "cpu"
    out = decoder.run(q, kv, table, lens)
    assert out.dtype == dtype and out.device == q.device and out.shape == (b, s_q, h_q, 512)
    want, _ = reference(q, kv, table, lens, causal=causal)
    assert_close(out, want)


@pytest.mark.parametrize("tactic", [0, 1])
def test_tactics_and_pdl(tactic):
    q, kv, table, lens = make_case(b=3, s_q=1, h_q=128, page_size=64, seq_lens=[10, 500, 4000])
    plain = make_decoder(q, kv, table, tactic=tactic).run(q, kv, table, lens)
    with_pdl = make_decoder(q, kv, table, tactic=tactic, pdl=True).run(q, kv, table, lens)
    torch.cuda.synchronize()
    assert torch.equal(plain, with_pdl), "PDL on and off must give identical bits"
    assert_close(plain, reference(q, kv, table, lens)[0])


def test_lse_and_sinks():
    q, kv, table, lens = make_case(b=3, s_q=2, h_q=16, page_size=64, seq_lens=[0, 1, 300])
    sinks = torch.randn(16, device=DEVICE)
    decoder = make_decoder(q, kv, table, sinks=True, lse=True)
    out, lse = decoder.run(q, kv, table, lens, sinks=sinks)
    want, want_lse = reference(q, kv, table, lens, sinks=sinks)
    assert_close(out, want)
    assert lse.dtype == torch.float32 and lse.shape == (3, 2, 16)
    assert_lse_close(lse, want_lse)


def test_cupy_arrays():
    """CuPy arrays go in without copies (DLPack) and the output is a new CuPy array."""
    cupy = pytest.importorskip("cupy")
    q, kv, table, lens = make_case(b=3, s_q=1, h_q=16, page_size=64, seq_lens=[0, 70, 900],
                                   dtype=torch.float16)  # fmt: skip
    torch.cuda.synchronize()
    cq, ckv, ctable, clens = (cupy.from_dlpack(t) for t in (q, kv, table, lens))
    assert cq.data.ptr == q.data_ptr(), "from_dlpack must be a view"
    decoder = make_decoder(q, kv, table)
    out = decoder.run(cq, ckv, ctable, clens)
    assert isinstance(out, cupy.ndarray) and out.dtype == cupy.float16
    assert out.shape == (3, 1, 16, 512)
    cupy.cuda.runtime.deviceSynchronize()
    assert_close(torch.from_dlpack(out), reference(q, kv, table, lens)[0])


def test_jax_arrays_with_out():
    """JAX arrays go in through DLPack; JAX arrays are immutable and mlakit allocates nothing for
    them, so the output and the workspace are given (PyTorch) arrays, written in place."""
    # JAX would otherwise take 75% of the GPU's memory for itself, starving the other tests.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    q, kv, table, lens = make_case(b=2, s_q=2, h_q=32, page_size=64, seq_lens=[5, 333])
    torch.cuda.synchronize()
    try:
        jq, jkv, jtable, jlens = (jax.dlpack.from_dlpack(t) for t in (q, kv, table, lens))
    except Exception as e:  # a JAX without a CUDA backend cannot take CUDA arrays
        pytest.skip(f"JAX cannot import CUDA arrays here: {e}")
    decoder = make_decoder(q, kv, table)
    out = torch.full((2, 2, 32, 512), float("nan"), dtype=q.dtype, device=DEVICE)
    workspace = torch.empty(max(decoder.workspace_bytes, 256), dtype=torch.uint8, device=DEVICE)
    got = decoder.run(jq, jkv, jtable, jlens, out=out, workspace=workspace)
    assert got is out
    torch.cuda.synchronize()
    assert_close(out, reference(q, kv, table, lens)[0])


def test_out_and_lse_in_place():
    q, kv, table, lens = make_case(b=2, s_q=1, h_q=32, page_size=64, seq_lens=[100, 7])
    decoder = make_decoder(q, kv, table, lse=True)
    out = torch.full((2, 1, 32, 512), float("nan"), dtype=q.dtype, device=DEVICE)
    lse = torch.full((2, 1, 32), float("nan"), device=DEVICE)
    got_out, got_lse = decoder.run(q, kv, table, lens, out=out, lse=lse)
    assert got_out is out and got_lse is lse
    want, want_lse = reference(q, kv, table, lens)
    assert_close(out, want)
    assert_lse_close(lse, want_lse)


def test_current_and_explicit_streams():
    q, kv, table, lens = make_case(b=2, s_q=1, h_q=16, page_size=64, seq_lens=[300, 64])
    decoder = make_decoder(q, kv, table)
    fresh = torch.randn_like(q, dtype=torch.float32).to(q.dtype)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        q.copy_(fresh)  # ordered before the run only if the run is on `side`
        out = decoder.run(q, kv, table, lens)
    torch.cuda.synchronize()
    assert_close(out, reference(q, kv, table, lens)[0])
    other = torch.cuda.Stream()
    other.wait_stream(torch.cuda.current_stream())
    out2 = decoder.run(q, kv, table, lens, stream=other)
    other.synchronize()
    assert torch.equal(out, out2)


def test_explicit_workspace():
    q, kv, table, lens = make_case(b=2, s_q=1, h_q=16, page_size=64, seq_lens=[3000, 64])
    decoder = make_decoder(q, kv, table)
    workspace = torch.empty(max(decoder.workspace_bytes, 1), dtype=torch.uint8, device=DEVICE)
    out = decoder.run(q, kv, table, lens, workspace=workspace)
    assert_close(out, reference(q, kv, table, lens)[0])
    if decoder.workspace_bytes > 0:
        with pytest.raises(ValueError, match="workspace: expected at least"):
            decoder.run(q, kv, table, lens, workspace=workspace[: decoder.workspace_bytes - 1])


def test_host_arrays_are_rejected():
    q, kv, table, lens = make_case(b=1, s_q=1, h_q=16, page_size=64, seq_lens=[10])
    decoder = make_decoder(q, kv, table)
    with pytest.raises(ValueError, match=r"q: expected an array on cuda:\d+ .*given an array in "
                                         r"host memory"):  # fmt: skip
        decoder.run(q.cpu(), kv, table, lens)
    with pytest.raises(ValueError, match="seq_lens: expected an array on cuda"):
        decoder.run(q, kv, table, lens.cpu())


def test_unsupported_problem_is_not_implemented():
    with pytest.raises(NotImplementedError):
        mlakit.Decoder(h_q=16, page_size=48, max_batch=1, max_seq_len=64)  # no GPU backend


# ---- PyTorch op: torch.compile and CUDA graphs ---------------------------------------------


def test_op_matches_reference_with_lse():
    q, kv, table, lens = make_case(b=3, s_q=2, h_q=128, page_size=64, seq_lens=[1, 64, 1500])
    out, lse = mlakit.torch.decode(q, kv, table, lens, return_lse=True)
    want, want_lse = reference(q, kv, table, lens)
    assert_close(out, want)
    assert_lse_close(lse, want_lse)


def test_torch_compile_fullgraph():
    q, kv, table, lens = make_case(b=4, s_q=1, h_q=128, page_size=64, seq_lens=[5, 64, 700, 0])
    w = torch.randn(512, 64, device=DEVICE, dtype=q.dtype)

    def layer(q, kv, table, lens):
        out = mlakit.torch.decode(q * 1.0, kv, table, lens)
        return out @ w

    compiled = torch.compile(layer, fullgraph=True)
    got = compiled(q, kv, table, lens)
    want = (reference(q, kv, table, lens)[0].to(q.dtype) @ w).float()
    assert_close(got, want)
    table.copy_(table.flip(0))  # new values, same compiled graph
    lens.copy_(lens.flip(0))
    want = (reference(q, kv, table, lens)[0].to(q.dtype) @ w).float()
    assert_close(compiled(q, kv, table, lens), want)


@pytest.mark.parametrize("api", ["op", "decoder"])
def test_cuda_graph_replay_with_changed_inputs(api):
    b, page = 4, 64
    q, kv, table, lens = make_case(b=b, s_q=1, h_q=128, page_size=page,
                                   seq_lens=[64, 700, 1, 3000])  # fmt: skip
    out = torch.empty(b, 1, 128, 512, dtype=q.dtype, device=DEVICE)
    decoder = make_decoder(q, kv, table)
    if api == "op":
        graph = capture_graph(lambda: mlakit.torch.decode(q, kv, table, lens, out=out))
    else:
        graph = capture_graph(lambda: decoder.run(q, kv, table, lens, out=out))

    graph.replay()
    torch.cuda.synchronize()
    assert_close(out, reference(q, kv, table, lens)[0])

    # New lengths (within the table's capacity), a permuted block table and new queries.
    lens.copy_(torch.tensor([3000, 0, 129, 64], dtype=torch.int32))
    table.copy_(table.flip(0))
    q.copy_(torch.randn_like(q, dtype=torch.float32).to(q.dtype))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    want = reference(q, kv, table, lens)[0]
    assert_close(out, want)
    assert not out[1].float().any(), "a request with seq_len 0 gets a zero output"


# ---- compat shims on their originals' documented argument sets ------------------------------


@pytest.mark.parametrize("s_q,causal", [(1, False), (2, True)])
def test_flash_mla_dense_decode(s_q, causal):
    """FlashMLA's README: get_mla_metadata once, then flash_mla_with_kvcache per layer."""
    b, h_q, h_kv, dv, page = 4, 128, 1, 512, 64
    q, kv, table, cache_seqlens = make_case(b=b, s_q=s_q, h_q=h_q, page_size=page,
                                            seq_lens=[1, 65, 640, 2000])  # fmt: skip
    blocked_k = kv.view(-1, page, h_kv, 576)
    tile_scheduler_metadata, num_splits = compat.get_mla_metadata(
        cache_seqlens, s_q * h_q // h_kv, h_kv
    )
    assert tile_scheduler_metadata.dtype == torch.int32 and num_splits.shape == (b + 1,)
    out, lse = compat.flash_mla_with_kvcache(
        q, blocked_k, table, cache_seqlens, dv, tile_scheduler_metadata, num_splits,
        causal=causal,
    )  # fmt: skip
    want, want_lse = reference(q, kv, table, cache_seqlens, causal=causal)
    assert out.shape == (b, s_q, h_q, dv) and out.dtype == q.dtype
    assert_close(out, want)
    assert lse.shape == (b, h_q, s_q) and lse.dtype == torch.float32
    flashmla = want_lse.transpose(1, 2)  # FlashMLA: +inf for a query without visible tokens
    assert_lse_close(lse, flashmla.masked_fill(flashmla.isneginf(), float("inf")))


@pytest.mark.parametrize("page_size,q_len,layout", [(64, 1, "4d"), (32, 1, "3d"), (64, 2, "4d")])
def test_trtllm_batch_decode_mla(page_size, q_len, layout):
    """FlashInfer's trtllm-gen MLA decode: query [b, q_len, h, 576], kv_cache [pages, 1, page,
    576] (or 3-D), zeroed workspace_buffer, bmm1_scale = 1/sqrt(qk_nope + qk_rope)."""
    b, h = 4, 128
    q, kv, table, seq_lens = make_case(b=b, s_q=q_len, h_q=h, page_size=page_size,
                                       seq_lens=[1, 100, 1000, 4000])  # fmt: skip
    kv_cache = kv.unsqueeze(1) if layout == "4d" else kv
    workspace_buffer = torch.zeros(1 << 20, dtype=torch.int8, device=DEVICE)
    bmm1_scale = 1 / math.sqrt(128 + 64)
    max_seq_len = table.shape[1] * page_size
    out = compat.trtllm_batch_decode_with_kv_cache_mla(
        query=q, kv_cache=kv_cache, workspace_buffer=workspace_buffer, qk_nope_head_dim=128,
        kv_lora_rank=512, qk_rope_head_dim=64, block_tables=table, seq_lens=seq_lens,
        max_seq_len=max_seq_len, bmm1_scale=bmm1_scale, bmm2_scale=1.0,
    )  # fmt: skip
    assert out.shape == (b, q_len, h, 512) and out.dtype == torch.bfloat16
    assert_close(out, reference(q, kv, table, seq_lens, softmax_scale=bmm1_scale)[0])

    given = torch.empty_like(out)
    result = compat.trtllm_batch_decode_with_kv_cache_mla(
        q, kv_cache, workspace_buffer, 128, 512, 64, table, seq_lens, max_seq_len, out=given,
        bmm1_scale=bmm1_scale,
    )  # fmt: skip
    assert result is given
    torch.cuda.synchronize()
    assert torch.equal(given, out)


# ---- fp8 e4m3 cache (skipped while no GPU backend runs it) ----------------------------------

FP8 = torch.float8_e4m3fn


def require_gpu_fp8(q_dtype):
    """Skips the test when no GPU backend runs an fp8 cache with this q dtype on this machine."""
    try:
        mlakit.Decoder(h_q=16, page_size=64, max_batch=1, max_seq_len=64, q_dtype=q_dtype,
                       kv_dtype="fp8_e4m3")  # fmt: skip
    except NotImplementedError as e:
        pytest.skip(f"no GPU backend runs an fp8 cache with a {q_dtype} q here: {e}")


def make_fp8_case(*, b, s_q, h_q, page_size, seq_lens, fp8_q, q_scale=0.5, k_scale=0.25, seed=0):
    """N(0, 1/4) data quantized to e4m3 (value = e4m3 * scale); returns the stored tensors and
    the dequantized q and cache the reference reads (NaN pages stay NaN)."""
    q, kv, table, lens = make_case(b=b, s_q=s_q, h_q=h_q, page_size=page_size, seq_lens=seq_lens,
                                   dtype=torch.float32, seed=seed)  # fmt: skip
    q, kv = q * 0.5, kv * 0.5
    kv8 = (kv / k_scale).to(FP8)
    q_stored = (q / q_scale).to(FP8) if fp8_q else q.to(torch.bfloat16)
    q_values = q_stored.float() * (q_scale if fp8_q else 1.0)
    return q_stored, kv8, table, lens, q_values, kv8.float() * k_scale


FP8_CASES = [
    # (b, s_q, h_q, page_size, seq_lens)
    (4, 1, 128, 64, [0, 1, 77, 2050]),
    (3, 2, 16, 64, [1, 65, 700]),
    (2, 1, 64, 32, [33, 1000]),
]


@pytest.mark.parametrize("fp8_q", [False, True], ids=["bf16q", "fp8q"])
@pytest.mark.parametrize("b,s_q,h_q,page_size,seq_lens", FP8_CASES)
def test_fp8_decoder_matches_reference(fp8_q, b, s_q, h_q, page_size, seq_lens):
    require_gpu_fp8("fp8_e4m3" if fp8_q else "bf16")
    q, kv8, table, lens, q_values, kv_values = make_fp8_case(
        b=b, s_q=s_q, h_q=h_q, page_size=page_size, seq_lens=seq_lens, fp8_q=fp8_q)
    decoder = make_decoder(q, kv8, table, kv_dtype="fp8_e4m3", lse=True)
    out = torch.full((b, s_q, h_q, 512), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    scales = dict(k_scale=torch.tensor([0.25], device=DEVICE))
    if fp8_q:
        scales["q_scale"] = 0.5  # a host value and a device pointer in one call
    _, lse = decoder.run(q, kv8, table, lens, out=out, **scales)
    want, want_lse = reference(q_values, kv_values, table, lens)
    assert_close(out, want, rel_l2_max=3e-2 if fp8_q else 1e-2)
    assert_lse_close(lse, want_lse)


@pytest.mark.parametrize("api", ["op", "decoder"])
def test_fp8_cuda_graph_follows_scale_tensors(api):
    require_gpu_fp8("fp8_e4m3")
    b = 3
    q, kv8, table, lens, _, _ = make_fp8_case(b=b, s_q=1, h_q=128, page_size=64,
                                              seq_lens=[64, 700, 3000], fp8_q=True)  # fmt: skip
    q_scale = torch.tensor([0.5], device=DEVICE)
    k_scale = torch.tensor([0.25], device=DEVICE)
    out = torch.empty(b, 1, 128, 512, dtype=torch.bfloat16, device=DEVICE)
    if api == "op":
        graph = capture_graph(lambda: mlakit.torch.decode(
            q, kv8, table, lens, out=out, q_scale=q_scale, k_scale=k_scale))
    else:
        decoder = make_decoder(q, kv8, table, kv_dtype="fp8_e4m3")
        graph = capture_graph(lambda: decoder.run(q, kv8, table, lens, out=out, q_scale=q_scale,
                                                  k_scale=k_scale))  # fmt: skip
    for qs, ks in ((0.5, 0.25), (2.0, 0.125), (0.25, 1.5)):
        q_scale.fill_(qs)
        k_scale.fill_(ks)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want, _ = reference(q.float() * qs, kv8.float() * ks, table, lens)
        assert_close(out, want, rel_l2_max=3e-2)


def test_flash_mla_with_kvcache_fp8_in_a_graph():
    """vLLM's FlashMLA backend with an fp8 cache: get_mla_metadata_dense_fp8, then
    flash_mla_with_kvcache_fp8 with descale_q / descale_k = layer scales reshaped to [1],
    captured in a CUDA graph and replayed after the scales changed."""
    require_gpu_fp8("fp8_e4m3")
    b, s_q, h_q, page = 4, 2, 128, 64
    q, kv8, table, lens, _, _ = make_fp8_case(b=b, s_q=s_q, h_q=h_q, page_size=page,
                                              seq_lens=[1, 65, 640, 2000], fp8_q=True)  # fmt: skip
    descale_q = torch.tensor(0.5, device=DEVICE)  # a layer's scalar scale
    descale_k = torch.tensor(0.25, device=DEVICE)
    meta, splits = compat.get_mla_metadata_dense_fp8(lens, s_q * h_q, 1)
    assert meta.dtype == torch.int32 and meta.shape[1] == 8 and splits.shape == (b + 1,)
    result = {}

    def step():
        result["out"], result["lse"] = compat.flash_mla_with_kvcache_fp8(
            q=q, k_cache=kv8.unsqueeze(-2), block_table=table, cache_seqlens=lens,
            head_dim_v=512, tile_scheduler_metadata=meta, num_splits=splits,
            softmax_scale=SCALE, causal=True, descale_q=descale_q.reshape(1),
            descale_k=descale_k.reshape(1),
        )  # fmt: skip

    graph = capture_graph(step)
    for qs, ks in ((0.5, 0.25), (1.0, 0.5)):
        descale_q.fill_(qs)
        descale_k.fill_(ks)
        graph.replay()
        torch.cuda.synchronize()
        want, want_lse = reference(q.float() * qs, kv8.float() * ks, table, lens)
        assert result["out"].dtype == torch.bfloat16
        assert_close(result["out"], want, rel_l2_max=3e-2)
        flashmla = want_lse.transpose(1, 2).masked_fill(want_lse.transpose(1, 2).isneginf(),
                                                        float("inf"))  # fmt: skip
        assert_lse_close(result["lse"], flashmla)


def test_trtllm_fp8_tensor_scales_in_a_graph():
    """FlashInfer's on-device fused scales (fp8 query and cache): bmm1_scale and bmm2_scale as
    one-element tensors, captured in a CUDA graph and followed when they change."""
    require_gpu_fp8("fp8_e4m3")
    b, h, page = 4, 128, 64
    q, kv8, table, lens, _, _ = make_fp8_case(b=b, s_q=1, h_q=h, page_size=page,
                                              seq_lens=[1, 100, 1000, 4000],
                                              fp8_q=True)  # fmt: skip
    bmm1 = torch.tensor([0.05], device=DEVICE)
    bmm2 = torch.tensor([0.5], device=DEVICE)
    out = torch.empty(b, h, 512, dtype=torch.bfloat16, device=DEVICE)
    workspace_buffer = torch.zeros(1 << 20, dtype=torch.int8, device=DEVICE)
    graph = capture_graph(lambda: compat.trtllm_batch_decode_with_kv_cache_mla(
        q, kv8.unsqueeze(1), workspace_buffer, 128, 512, 64, table, lens,
        table.shape[1] * page, out=out, bmm1_scale=bmm1, bmm2_scale=bmm2))  # fmt: skip
    for one, two in ((0.05, 0.5), (0.02, 2.0)):
        bmm1.fill_(one)
        bmm2.fill_(two)
        graph.replay()
        torch.cuda.synchronize()
        want, _ = reference(q.float(), kv8.float(), table, lens, softmax_scale=one)
        assert_close(out.unsqueeze(1), want * two, rel_l2_max=3e-2)
