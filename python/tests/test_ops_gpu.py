"""mlakit.ops and its torch custom ops on CUDA tensors: append and top-k equal to the cpu
device's results bit for bit (the kernels are bit-exact with the references), run on the current
stream, under torch.compile(fullgraph=True) and replayed from a CUDA graph with new slot mappings
and lengths; indexer_logits against the cpu device's reference within float accumulation error.
Skipped without a GPU."""

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

import mlakit  # noqa: E402
import mlakit.torch as mt  # noqa: E402

pytestmark = pytest.mark.gpu

DEVICE = "cuda"
PAGE = 64


def host_and_device(t):
    return t, t.to(DEVICE)


@pytest.mark.parametrize(
    "layout,cache", [("dense", torch.bfloat16), ("dense", torch.float8_e4m3fn),
                     ("v32", torch.uint8), ("v4", torch.uint8)])  # fmt: skip
def test_append_kv_equals_cpu(layout, cache):
    gen = torch.Generator().manual_seed(1)
    num_pages, n = 6, 100
    d = 512 if layout == "v4" else 576
    kv = (torch.randn(n, d, generator=gen) * 3).to(torch.bfloat16)
    slots = torch.randperm(num_pages * PAGE, generator=gen)[:n].to(torch.int64)
    slots[::7] = -1
    if layout == "v4":
        page_bytes = -(-PAGE * 584 // 576) * 576
        host = torch.randint(0, 256, (num_pages, page_bytes), generator=gen, dtype=torch.uint8)
    elif layout == "v32":
        host = torch.randint(0, 256, (num_pages, PAGE, 656), generator=gen, dtype=torch.uint8)
    else:
        host = torch.randn(num_pages, PAGE, 576, generator=gen).to(cache)
    dev = host.to(DEVICE)
    k_scale = 0.05 if cache == torch.float8_e4m3fn else None
    page_size = PAGE if layout == "v4" else None
    mlakit.ops.append_kv(kv, slots, host, kv_layout=layout, k_scale=k_scale, page_size=page_size)
    mlakit.ops.append_kv(kv.to(DEVICE), slots.to(DEVICE), dev, kv_layout=layout, k_scale=k_scale,
                         page_size=page_size)  # fmt: skip
    torch.cuda.synchronize()
    assert torch.equal(dev.cpu().view(torch.uint8), host.view(torch.uint8))


@pytest.mark.parametrize("scale", ["amax", "ue8m0"])
def test_append_indexer_equals_cpu(scale):
    gen = torch.Generator().manual_seed(2)
    k = torch.randn(77, 128, generator=gen).to(torch.bfloat16)
    slots = torch.randperm(4 * PAGE, generator=gen)[:77].to(torch.int64)
    host = torch.zeros(mlakit.ops.indexer_cache_shape(4, PAGE), dtype=torch.uint8)
    dev = host.to(DEVICE)
    mlakit.ops.append_indexer(k, slots, host, scale=scale)
    mt.append_indexer(k.to(DEVICE), slots.to(DEVICE), dev, scale=scale)
    torch.cuda.synchronize()
    assert torch.equal(dev.cpu(), host)


def topk_case(gen, lens, next_n=1, extra=0):
    b = len(lens)
    width = -(-max(lens) // PAGE) + extra
    table = torch.randperm(b * width, generator=gen).to(torch.int32).reshape(b, width)
    logits = torch.randn(b * next_n, width * PAGE, generator=gen)
    return logits, torch.tensor(lens, dtype=torch.int32), table


@pytest.mark.parametrize("next_n", [1, 2])
@pytest.mark.parametrize("k", [1, 512, 2048])
def test_topk_equals_cpu(k, next_n):
    gen = torch.Generator().manual_seed(3)
    logits, lens, table = topk_case(gen, [0, 1, k - 1 or 1, k, k + 1, 40000], next_n)
    want = mlakit.ops.topk_indices(logits, lens, table, k=k, page_size=PAGE, next_n=next_n,
                                   return_positions=True)  # fmt: skip
    got = mt.topk_indices(logits.to(DEVICE), lens.to(DEVICE), table.to(DEVICE), k=k,
                          page_size=PAGE, next_n=next_n, return_positions=True)  # fmt: skip
    assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])


@pytest.mark.parametrize("next_n,heads", [(1, 64), (2, 64), (3, 20)])
def test_indexer_logits_equals_cpu(next_n, heads):
    """The fp8 tensor-core kernel against the cpu device's double-precision reference on the same
    e4m3 codes: -inf exactly where the reference has it (past each row's length, on a page id out
    of range), the rest within float accumulation error."""
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("indexer_logits on CUDA needs sm_89 or newer")
    gen = torch.Generator().manual_seed(4)
    lens = [0, 1, 63, 64, 65, 700, 3000]
    b = len(lens)
    width = -(-max(lens) // PAGE) + 1
    num_pages = b * width + 2
    keys = torch.randn(num_pages * PAGE, 128, generator=gen).to(torch.bfloat16)
    cache = torch.zeros(mlakit.ops.indexer_cache_shape(num_pages, PAGE), dtype=torch.uint8)
    mlakit.ops.append_indexer(keys, torch.arange(num_pages * PAGE, dtype=torch.int64), cache)
    table = torch.randperm(num_pages, generator=gen)[: b * width].to(torch.int32).reshape(b, width)
    q = (torch.randn(b, next_n, heads, 128, generator=gen) / 2).to(torch.float8_e4m3fn)
    weights = torch.randn(b * next_n, heads, generator=gen)
    lens_t = torch.tensor(lens, dtype=torch.int32)
    want = mlakit.ops.indexer_logits(q, weights, cache, table, lens_t)
    got = mlakit.ops.indexer_logits(q.to(DEVICE), weights.to(DEVICE), cache.to(DEVICE),
                                    table.to(DEVICE), lens_t.to(DEVICE))  # fmt: skip
    torch.cuda.synchronize()
    got = got.cpu()
    finite = torch.isfinite(want)
    assert torch.equal(torch.isfinite(got), finite)
    # fp8 tensor cores accumulate with less than fp32's precision (sm_90's wgmma: about 2e-4 of a
    # row's largest logit): the bound is 2e-3 of each row's largest |logit|.
    row_max = torch.where(finite, want.abs(), torch.zeros_like(want)).amax(dim=1, keepdim=True)
    err = torch.where(finite, (got - want).abs(), torch.zeros_like(want))
    assert (err <= 2e-3 * row_max + 1e-6).all(), (err / row_max.clamp_min(1e-30)).max()
    # The torch op on the current stream, in place.
    out = torch.full_like(got, 7.0, device=DEVICE)
    mt.indexer_logits(q.to(DEVICE), weights.to(DEVICE), cache.to(DEVICE), table.to(DEVICE),
                      lens_t.to(DEVICE), logits=out)  # fmt: skip
    torch.cuda.synchronize()
    assert torch.equal(out.cpu(), got)


def test_host_tensor_refused_with_cuda_ones():
    kv = torch.zeros(2, 576, dtype=torch.bfloat16, device=DEVICE)
    cache = torch.zeros(1, PAGE, 576, dtype=torch.bfloat16, device=DEVICE)
    message = r"^slot_mapping: expected an array on cuda:\d \(the op runs where its first array"
    with pytest.raises(ValueError, match=message):
        mlakit.ops.append_kv(kv, torch.zeros(2, dtype=torch.int64), cache)


def test_runs_on_the_current_stream():
    gen = torch.Generator().manual_seed(4)
    logits, lens, table = topk_case(gen, [5000, 300])
    want = mlakit.ops.topk_indices(logits, lens, table, k=256, page_size=PAGE)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        got = mlakit.ops.topk_indices(logits.to(DEVICE), lens.to(DEVICE), table.to(DEVICE),
                                      k=256, page_size=PAGE)  # fmt: skip
    stream.synchronize()
    assert torch.equal(got.cpu(), want)


def test_compile_and_cuda_graph_replay_with_new_inputs():
    gen = torch.Generator().manual_seed(5)
    num_pages, n, k = 8, 4, 128
    kv = torch.randn(n, 576, generator=gen).to(torch.bfloat16).to(DEVICE)
    slots = torch.arange(n, dtype=torch.int64, device=DEVICE)
    cache = torch.zeros(num_pages, PAGE, 656, dtype=torch.uint8, device=DEVICE)
    logits, lens, table = topk_case(gen, [300, 2000], extra=1)
    logits, lens, table = logits.to(DEVICE), lens.to(DEVICE), table.to(DEVICE)
    indices = torch.empty(2, 1, k, dtype=torch.int32, device=DEVICE)

    @torch.compile(fullgraph=True)
    def step():
        mt.append_kv(kv, slots, cache, kv_layout="v32")
        mt.topk_indices(logits, lens, table, page_size=PAGE, indices=indices)

    step()  # compile before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for new_lens, new_slots in (([1000, 7], [5, 9, -1, 200]), ([64, 2047], [0, 1, 2, 3])):
        lens.copy_(torch.tensor(new_lens, dtype=torch.int32))
        slots.copy_(torch.tensor(new_slots, dtype=torch.int64))
        logits.copy_(torch.randn(logits.shape, generator=gen))
        cache.zero_()
        graph.replay()
        torch.cuda.synchronize()
        host_cache = torch.zeros(num_pages, PAGE, 656, dtype=torch.uint8)
        mlakit.ops.append_kv(kv.cpu(), slots.cpu(), host_cache, kv_layout="v32")
        assert torch.equal(cache.cpu(), host_cache)
        want = mlakit.ops.topk_indices(logits.cpu(), lens.cpu(), table.cpu(), k=k, page_size=PAGE)
        assert torch.equal(indices.cpu(), want)
