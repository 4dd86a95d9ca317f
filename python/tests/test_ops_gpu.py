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


# --- the multi-block top-k (rows of 8192 positions and more, with a workspace) -------------------


def check_against_torch_topk(logits, lens, positions, k, next_n):
    """The kept values are torch.topk's (as a multiset: ties may keep other positions)."""
    for i, L in enumerate(lens.tolist()):
        for t in range(next_n):
            r = i * next_n + t
            n = min(max(L - next_n + 1 + t, 0), L)
            kept = positions[r][positions[r] >= 0]
            assert kept.numel() == min(n, k)
            if n > k:
                want = torch.topk(logits[r, :n], k).values.sort().values
                assert torch.equal(logits[r, kept.long()].sort().values, want)


@pytest.mark.parametrize(
    "lens,k,next_n",
    [([0, 1, 511, 512, 513, 9000, 40000], 512, 1),
     ([131072], 2048, 1),
     ([8192, 2047, 2049, 70000] * 16, 2048, 1),
     ([3, 20000, 16384], 1024, 3)])  # fmt: skip
def test_topk_multi_block_equals_one_block_and_cpu(lens, k, next_n):
    gen = torch.Generator().manual_seed(6)
    logits, lens_t, table = topk_case(gen, lens, next_n)
    max_len = int(logits.shape[1])
    assert mlakit.ops.topk_workspace_bytes(len(lens), k=k, max_len=max_len, next_n=next_n) > 0
    want = mlakit.ops.topk_indices(logits, lens_t, table, k=k, page_size=PAGE, next_n=next_n,
                                   return_positions=True)  # fmt: skip
    dev = [x.to(DEVICE) for x in (logits, lens_t, table)]
    multi = mt.topk_indices(*dev, k=k, page_size=PAGE, next_n=next_n, return_positions=True)
    one = mt.topk_indices(*dev, k=k, page_size=PAGE, next_n=next_n, return_positions=True,
                          one_block=True)  # fmt: skip
    ops = mlakit.ops.topk_indices(*dev, k=k, page_size=PAGE, next_n=next_n,
                                  return_positions=True)  # fmt: skip
    torch.cuda.synchronize()
    for got in (multi, one, ops):
        assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])
    check_against_torch_topk(logits, lens_t, want[1].reshape(-1, k), k, next_n)
    # deterministic=False: any order (normal values, no ties: the same set), both surfaces.
    for call in (mt.topk_indices, mlakit.ops.topk_indices):
        got = call(*dev, k=k, page_size=PAGE, next_n=next_n, return_positions=True,
                   deterministic=False)  # fmt: skip
        torch.cuda.synchronize()
        for g, w in zip(got, want):
            g, w = g.cpu().reshape(-1, k), w.reshape(-1, k)
            assert torch.equal(g.sort(dim=1).values, w.sort(dim=1).values)


def test_topk_caller_workspace():
    """A preallocated workspace, poisoned, used twice; refused when too small, misaligned, of
    another dtype or in host memory, each by name."""
    gen = torch.Generator().manual_seed(7)
    k = 2048
    logits, lens, table = topk_case(gen, [50000, 9000, 100])
    want = mlakit.ops.topk_indices(logits, lens, table, k=k, page_size=PAGE)
    logits, lens, table = logits.to(DEVICE), lens.to(DEVICE), table.to(DEVICE)
    need = mlakit.ops.topk_workspace_bytes(3, k=k, max_len=int(logits.shape[1]))
    workspace = torch.full((need + 256,), 0xFF, dtype=torch.uint8, device=DEVICE)
    for _ in range(2):
        got = mlakit.ops.topk_indices(logits, lens, table, k=k, page_size=PAGE,
                                      workspace=workspace)  # fmt: skip
        torch.cuda.synchronize()
        assert torch.equal(got.cpu(), want)
    got = mt.topk_indices(logits, lens, table, k=k, page_size=PAGE, workspace=workspace[:need])
    torch.cuda.synchronize()
    assert torch.equal(got.cpu(), want)

    def refused(error, pattern, ws):
        with pytest.raises(error, match=pattern):
            mlakit.ops.topk_indices(logits, lens, table, k=k, page_size=PAGE, workspace=ws)

    refused(ValueError, rf"^workspace: expected at least {need} bytes "
            rf"\(mlakit.ops.topk_workspace_bytes\), given {need - 1} bytes",
            workspace[: need - 1])  # fmt: skip
    refused(ValueError, r"^workspace: expected a 256-byte aligned address, given 0x",
            workspace[1 : need + 1])  # fmt: skip
    refused(TypeError, r"^workspace: expected dtype uint8, given int8", workspace.view(torch.int8))
    refused(ValueError, r"^workspace: expected an array on cuda:\d \(the op runs where its first "
            r"array is\), given an array in host memory", workspace.cpu())  # fmt: skip
    with pytest.raises(ValueError, match=r"^workspace: expected a tensor on cuda:\d"):
        mt.topk_indices(logits, lens, table, k=k, page_size=PAGE, workspace=workspace.cpu())


def test_topk_multi_block_on_a_given_stream():
    """stream= another stream than the current one: the workspace is allocated on it."""
    gen = torch.Generator().manual_seed(8)
    logits, lens, table = topk_case(gen, [60000, 30000])
    want = mlakit.ops.topk_indices(logits, lens, table, k=2048, page_size=PAGE)
    dev = [x.to(DEVICE) for x in (logits, lens, table)]
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    got = mlakit.ops.topk_indices(*dev, k=2048, page_size=PAGE, stream=stream)
    stream.synchronize()
    assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("given_workspace", [False, True])
def test_topk_multi_block_cuda_graph_replay(given_workspace):
    """Captured with rows of 40000 positions (the workspace allocated during capture, from the
    graph's pool, or given), replayed with new lengths and logits."""
    gen = torch.Generator().manual_seed(9)
    k, next_n = 2048, 2
    logits, lens, table = topk_case(gen, [40000, 100, 9000], next_n)
    logits, lens, table = logits.to(DEVICE), lens.to(DEVICE), table.to(DEVICE)
    indices = torch.empty(3, next_n, k, dtype=torch.int32, device=DEVICE)
    need = mlakit.ops.topk_workspace_bytes(3, k=k, max_len=int(logits.shape[1]), next_n=next_n)
    workspace = torch.empty(need, dtype=torch.uint8, device=DEVICE) if given_workspace else None

    def step():
        mt.topk_indices(logits, lens, table, page_size=PAGE, next_n=next_n, indices=indices,
                        workspace=workspace)  # fmt: skip

    step()  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for new_lens in ([100, 40000, 2049], [8192, 0, 39999], [2048, 40000, 40000]):
        lens.copy_(torch.tensor(new_lens, dtype=torch.int32))
        logits.copy_(torch.randn(logits.shape, generator=gen))
        indices.fill_(-7)
        graph.replay()
        torch.cuda.synchronize()
        want = mlakit.ops.topk_indices(logits.cpu(), lens.cpu(), table.cpu(), k=k,
                                       page_size=PAGE, next_n=next_n)  # fmt: skip
        assert torch.equal(indices.cpu(), want)
