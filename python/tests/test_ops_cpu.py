"""mlakit.ops on host arrays (the cpu reference) against the NumPy references of
ops_reference.py: appends byte for byte (every other byte untouched), indexer logits within
float32 rounding, top-k exactly; argument errors by name. The torch part skips without PyTorch."""

import re

import pytest

np = pytest.importorskip("numpy")

import mlakit  # noqa: E402
import ops_reference as ref  # noqa: E402
from numpy_reference import bf16_bits, random_e4m3, v4_page_bytes  # noqa: E402

PAGE = 16


def random_tokens(rng, n, d, dtype):
    """(input bits or fp16 values, their float32 values)."""
    x = (rng.standard_normal((n, d)) * rng.uniform(0.01, 4.0, (n, 1))).astype(np.float32)
    if dtype == "bf16":
        bits = bf16_bits(x)
        return bits, ref.widen(bits, "bf16")
    half = x.astype(np.float16)
    return half, half.astype(np.float32)


def slot_mapping(rng, n, num_pages, skips=2):
    slots = rng.choice(num_pages * PAGE, size=n, replace=False).astype(np.int64)
    slots[rng.choice(n, size=min(skips, n), replace=False)] = -1
    return slots


CASES = [("dense", "bf16"), ("dense", "fp16"), ("dense", "fp8_e4m3"), ("fp8_blockwise", None),
         ("fp8_v4", None)]  # fmt: skip


def new_cache(rng, layout, cache_dtype, num_pages):
    """(cache as the op takes it, its bytes [num_pages, page bytes] sharing memory)."""
    if layout == "fp8_v4":
        raw = rng.integers(0, 256, (num_pages, v4_page_bytes(PAGE)), dtype=np.uint8)
        return raw, raw
    if layout == "fp8_blockwise":
        raw = rng.integers(0, 256, (num_pages, PAGE, 656), dtype=np.uint8)
        return raw, raw.reshape(num_pages, -1)
    dtype = {"bf16": np.uint16, "fp16": np.float16, "fp8_e4m3": np.uint8}[cache_dtype]
    raw = rng.integers(0, 256, (num_pages, PAGE * 576 * np.dtype(dtype).itemsize), dtype=np.uint8)
    return raw.view(dtype).reshape(num_pages, PAGE, 576), raw


@pytest.mark.parametrize("layout,cache_dtype", CASES)
@pytest.mark.parametrize("kv_dtype", ["bf16", "fp16"])
def test_append_kv_matches_reference(layout, cache_dtype, kv_dtype):
    rng = np.random.default_rng(hash((layout, cache_dtype, kv_dtype)) % 2**32)
    num_pages, n = 5, 37
    d = 512 if layout == "fp8_v4" else 576
    kv, x = random_tokens(rng, n, d, kv_dtype)
    slots = slot_mapping(rng, n, num_pages)
    cache, raw = new_cache(rng, layout, cache_dtype, num_pages)
    k_scale = 0.05 if cache_dtype == "fp8_e4m3" else None
    want = ref.append_kv(raw, x, slots, PAGE, layout, cache_dtype or "bf16", k_scale or 1.0)
    got = mlakit.ops.append_kv(kv, slots, cache, kv_layout=layout, k_scale=k_scale,
                               page_size=PAGE if layout == "fp8_v4" else None)  # fmt: skip
    assert got is cache
    np.testing.assert_array_equal(raw, want)


def test_append_kv_strided_rows_and_scale_array():
    rng = np.random.default_rng(1)
    wide, x = random_tokens(rng, 9, 600, "bf16")
    slots = slot_mapping(rng, 9, 2)
    cache, raw = new_cache(rng, "dense", "fp8_e4m3", 2)
    want = ref.append_kv(raw, x[:, :576], slots, PAGE, "dense", "fp8_e4m3", 0.25)
    mlakit.ops.append_kv(wide[:, :576], slots, cache, k_scale=np.array([0.25], np.float32))
    np.testing.assert_array_equal(raw, want)


def test_append_kv_v4_flashmla_view_and_empty():
    rng = np.random.default_rng(2)
    kv, x = random_tokens(rng, 6, 512, "bf16")
    slots = slot_mapping(rng, 6, 3, skips=1)
    raw, _ = new_cache(rng, "fp8_v4", None, 3)
    want = ref.append_kv(raw, x, slots, PAGE, "fp8_v4")
    view = np.lib.stride_tricks.as_strided(raw, (3, PAGE, 584), (raw.shape[1], 584, 1))
    mlakit.ops.append_kv(kv, slots, view, kv_layout="v4")
    np.testing.assert_array_equal(raw, want)
    before = raw.copy()
    mlakit.ops.append_kv(kv[:0], slots[:0], raw, kv_layout="v4", page_size=PAGE)
    np.testing.assert_array_equal(raw, before)


@pytest.mark.parametrize("scale", ["amax", "ue8m0"])
@pytest.mark.parametrize("k_dtype", ["bf16", "fp16"])
def test_append_indexer_matches_reference(scale, k_dtype):
    rng = np.random.default_rng(3 + (scale == "ue8m0") + 2 * (k_dtype == "fp16"))
    num_pages, n = 4, 29
    k, x = random_tokens(rng, n, 128, k_dtype)
    x[0] = 0  # amax 0: the 1e-4 floor
    if k_dtype == "bf16":
        k[0] = 0
    else:
        k[0] = np.float16(0)
    slots = slot_mapping(rng, n, num_pages)
    cache = rng.integers(0, 256, mlakit.ops.indexer_cache_shape(num_pages, PAGE), dtype=np.uint8)
    want = ref.append_indexer(cache, x, slots, PAGE, power_of_two=scale == "ue8m0")
    assert mlakit.ops.append_indexer(k, slots, cache, scale=scale) is cache
    np.testing.assert_array_equal(cache, want)


def paged(rng, lens, spare=2):
    """A block table over shuffled pages; unused slots -1."""
    pages = [-(-int(n) // PAGE) for n in lens]
    width = max(1, max(pages))
    num_pages = sum(pages) + spare
    order = rng.permutation(num_pages).astype(np.int32)
    table = np.full((len(lens), width), -1, np.int32)
    used = 0
    for i, p in enumerate(pages):
        table[i, :p] = order[used : used + p]
        used += p
    return table, num_pages, order[used:]


@pytest.mark.parametrize("next_n", [1, 2])
def test_indexer_logits_matches_reference(next_n):
    rng = np.random.default_rng(10 + next_n)
    lens = np.array([0, 1, 17, 40], np.int32)
    heads = 8
    table, num_pages, unused = paged(rng, lens)
    keys, _ = random_tokens(rng, num_pages * PAGE, 128, "bf16")
    cache = np.zeros(mlakit.ops.indexer_cache_shape(num_pages, PAGE), np.uint8)
    mlakit.ops.append_indexer(keys, np.arange(num_pages * PAGE, dtype=np.int64), cache)
    cache[unused] = 0xFF  # NaN keys and scales: never read
    q = random_e4m3(rng, (len(lens), next_n, heads, 128))
    weights = rng.standard_normal((len(lens) * next_n, heads)).astype(np.float32)
    max_len = table.shape[1] * PAGE
    got = mlakit.ops.indexer_logits(q, weights, cache, table, lens)
    assert got.shape == (len(lens) * next_n, max_len) and got.dtype == np.float32
    want = ref.indexer_logits(q, weights, cache, PAGE, table, lens, max_len)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), finite)
    np.testing.assert_array_equal(got[~finite], want[~finite])
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=1e-6)
    # In place into a wider buffer, weights as [b, next_n, heads].
    wide = np.full((len(lens) * next_n, max_len + 8), 7.0, np.float32)
    mlakit.ops.indexer_logits(q, weights.reshape(len(lens), next_n, heads), cache, table, lens,
                              logits=wide[:, :max_len])  # fmt: skip
    np.testing.assert_array_equal(wide[:, :max_len], got)
    assert (wide[:, max_len:] == 7.0).all()


@pytest.mark.parametrize("next_n", [1, 3])
def test_topk_indices_matches_reference(next_n):
    rng = np.random.default_rng(20 + next_n)
    k = 8
    lens = np.array([0, 1, k - 1, k, k + 1, 45, 3 * PAGE + 5], np.int32)
    table, _, _ = paged(rng, lens)
    max_len = int(lens.max())
    logits = rng.standard_normal((len(lens) * next_n, max_len + 3)).astype(np.float32)
    logits[-1, :20] = 1.5  # ties: the lower positions win
    want_idx, want_pos = ref.topk(logits, lens, table, PAGE, k, next_n)
    idx, pos = mlakit.ops.topk_indices(logits, lens, table, k=k, page_size=PAGE, next_n=next_n,
                                       max_len=max_len, return_positions=True)  # fmt: skip
    assert idx.shape == (len(lens), next_n, k) and idx.dtype == np.int32
    np.testing.assert_array_equal(idx.reshape(-1, k), want_idx)
    np.testing.assert_array_equal(pos.reshape(-1, k), want_pos)
    # deterministic=False is a GPU opt-in: the host ignores it.
    idx = mlakit.ops.topk_indices(logits, lens, table, k=k, page_size=PAGE, next_n=next_n,
                                  max_len=max_len, deterministic=False)  # fmt: skip
    np.testing.assert_array_equal(idx.reshape(-1, k), want_idx)
    flat = np.empty((len(lens) * next_n, k), np.int32)
    assert mlakit.ops.topk_indices(logits[:, :max_len], lens, table, page_size=PAGE,
                                   next_n=next_n, indices=flat) is flat  # fmt: skip
    np.testing.assert_array_equal(flat, want_idx)


def pdl_case():
    """pdl=True (programmatic dependent launch, a CUDA launch option) changes nothing on the
    host through mlakit.ops: each op with and without it. Returns the inputs and results."""
    rng = np.random.default_rng(70)
    kv, _ = random_tokens(rng, 9, 576, "bf16")
    slots = slot_mapping(rng, 9, 3)
    raw = rng.integers(0, 256, (3, PAGE, 656), dtype=np.uint8)
    a, b = raw.copy(), raw.copy()
    mlakit.ops.append_kv(kv, slots, a, kv_layout="v32")
    mlakit.ops.append_kv(kv, slots, b, kv_layout="v32", pdl=True)
    np.testing.assert_array_equal(a, b)
    index = np.zeros(mlakit.ops.indexer_cache_shape(3, PAGE), np.uint8)
    index2 = index.copy()
    mlakit.ops.append_indexer(kv[:, :128], slots, index)
    mlakit.ops.append_indexer(kv[:, :128], slots, index2, pdl=True)
    np.testing.assert_array_equal(index, index2)
    lens = np.array([0, 7, 20], np.int32)
    table = np.array([[2, 0], [1, 2], [0, 1]], np.int32)
    q = random_e4m3(rng, (3, 2, 4, 128))
    w = rng.standard_normal((6, 4)).astype(np.float32)
    logits = mlakit.ops.indexer_logits(q, w, index, table, lens)
    np.testing.assert_array_equal(mlakit.ops.indexer_logits(q, w, index, table, lens, pdl=True),
                                  logits)  # fmt: skip
    idx = mlakit.ops.topk_indices(logits, lens, table, k=8, page_size=PAGE, next_n=2)
    np.testing.assert_array_equal(
        mlakit.ops.topk_indices(logits, lens, table, k=8, page_size=PAGE, next_n=2, pdl=True), idx)
    return kv, slots, raw, a, index, lens, table, q, w, logits, idx


def test_pdl_is_ignored_on_the_host():
    pdl_case()


def test_torch_pdl_is_ignored_on_the_host():
    """The torch ops take pdl too (their schemas and fakes), and ignore it on the host."""
    torch = pytest.importorskip("torch")
    import mlakit.torch as mt

    kv, slots, raw, a, index, lens, table, q, w, logits, idx = pdl_case()

    tkv = torch.from_numpy(kv.view(np.int16)).view(torch.bfloat16)
    tslots = torch.from_numpy(slots)
    cache = torch.from_numpy(raw.copy())
    mt.append_kv(tkv, tslots, cache, kv_layout="v32", pdl=True)
    np.testing.assert_array_equal(cache.numpy(), a)
    tindex = torch.zeros(mlakit.ops.indexer_cache_shape(3, PAGE), dtype=torch.uint8)
    mt.append_indexer(tkv[:, :128], tslots, tindex, pdl=True)
    np.testing.assert_array_equal(tindex.numpy(), index)
    tq = torch.from_numpy(q).view(torch.float8_e4m3fn)
    tl = mt.indexer_logits(tq, torch.from_numpy(w), tindex, torch.from_numpy(table),
                           torch.from_numpy(lens), pdl=True)  # fmt: skip
    np.testing.assert_array_equal(tl.numpy(), logits)
    ti = mt.topk_indices(tl, torch.from_numpy(lens), torch.from_numpy(table), k=8, page_size=PAGE,
                         next_n=2, pdl=True)  # fmt: skip
    np.testing.assert_array_equal(ti.numpy(), idx)


def expect(error, pattern, call, *args, **kwargs):
    with pytest.raises(error, match=pattern):
        call(*args, **kwargs)


def test_argument_errors_name_the_argument():
    rng = np.random.default_rng(30)
    kv, _ = random_tokens(rng, 4, 576, "bf16")
    slots = np.arange(4, dtype=np.int64)
    cache, _ = new_cache(rng, "dense", "bf16", 2)
    ops = mlakit.ops
    expect(TypeError, r"^kv: expected dtype", ops.append_kv, kv.astype(np.float32), slots, cache)
    expect(ValueError, re.escape("kv: expected shape [n_tokens, 576]"), ops.append_kv,
           kv[:, :512], slots, cache)  # fmt: skip
    expect(TypeError, r"^slot_mapping: expected dtype int64, given int32", ops.append_kv, kv,
           slots.astype(np.int32), cache)  # fmt: skip
    expect(ValueError, r"^slot_mapping: expected shape \[n_tokens\]", ops.append_kv, kv,
           slots[:3], cache)  # fmt: skip
    expect(ValueError, r"^slot_mapping\[2\]: expected -1 or a cache slot in 0..31, given 99",
           ops.append_kv, kv, np.array([0, 1, 99, 2], np.int64), cache)  # fmt: skip
    expect(TypeError, r"^slot_mapping: expected an array", ops.append_kv, kv, [0, 1, 2, 3], cache)
    expect(ValueError, r"^k_scale", ops.append_kv, kv, slots, cache, k_scale=0.5)
    fp8, _ = new_cache(rng, "dense", "fp8_e4m3", 2)
    expect(ValueError, r"k_scale", ops.append_kv, kv, slots, fp8)
    for bad in (float("nan"), 0.0, -1.0, float("inf")):
        expect(ValueError, r"^k_scale: expected a finite value > 0", ops.append_kv, kv, slots, fp8,
               k_scale=bad)  # fmt: skip
    expect(TypeError, r"^k_scale: expected None, a float", ops.append_kv, kv, slots, fp8,
           k_scale=True)  # fmt: skip
    expect(ValueError, r"^kv_layout: expected", ops.append_kv, kv, slots, cache, kv_layout="x")

    index = np.zeros(ops.indexer_cache_shape(2, PAGE), np.uint8)
    expect(ValueError, r"^k: expected shape \[n_tokens, 128\]", ops.append_indexer,
           kv[:, :64], slots, index)  # fmt: skip
    expect(ValueError, r"^index_cache: expected shape", ops.append_indexer, kv[:, :128], slots,
           index[:, :-1])  # fmt: skip
    expect(ValueError, r"^scale: expected amax or ue8m0", ops.append_indexer, kv[:, :128], slots,
           index, scale="pow2")  # fmt: skip

    lens = np.array([5, 9], np.int32)
    table = np.array([[0], [1]], np.int32)
    q = random_e4m3(rng, (2, 1, 4, 128))
    w = np.ones((2, 4), np.float32)
    expect(TypeError, r"^q: expected dtype float8_e4m3fn", ops.indexer_logits,
           q.astype(np.float32), w, index, table, lens)  # fmt: skip
    expect(ValueError, r"^weights: expected shape", ops.indexer_logits, q, w[:, :3], index,
           table, lens)  # fmt: skip
    expect(TypeError, r"^seq_lens: expected dtype int32", ops.indexer_logits, q, w, index, table,
           lens.astype(np.int64))  # fmt: skip
    expect(ValueError, r"^block_table: expected shape", ops.indexer_logits, q, w, index,
           table[:1], lens)  # fmt: skip

    logits = np.zeros((2, 16), np.float32)
    expect(ValueError, r"^k: expected a value", ops.topk_indices, logits, lens, table,
           page_size=PAGE)  # fmt: skip
    expect(TypeError, r"^logits: expected dtype float32", ops.topk_indices,
           logits.astype(np.float64), lens, table, k=4, page_size=PAGE)  # fmt: skip
    expect(ValueError, r"^logits: expected shape \[b \* next_n", ops.topk_indices, logits, lens,
           table, k=4, page_size=PAGE, next_n=2)  # fmt: skip
    expect(ValueError, r"^k: expected 1\.\.65536, given 0", ops.topk_indices, logits, lens, table,
           k=0, page_size=PAGE)  # fmt: skip
    expect(ValueError, r"^seq_lens\[1\]", ops.topk_indices, logits, np.array([5, 17], np.int32),
           table, k=4, page_size=PAGE)  # fmt: skip
    expect(ValueError, r"^indices: expected a writable array", ops.topk_indices, logits, lens,
           table, page_size=PAGE, indices=_readonly((2, 4)))  # fmt: skip


def _readonly(shape):
    a = np.zeros(shape, np.int32)
    a.setflags(write=False)
    return a


# --- the multi-block top-k's workspace: its size, and a caller's workspace checked by name ------


def aligned_bytes(n, offset=0):
    """n uint8 bytes at `offset` past a 256-byte boundary (NumPy aligns to 64 at most)."""
    raw = np.empty(n + 512, np.uint8)
    start = (-raw.ctypes.data) % 256 + offset
    return raw[start : start + n]


def test_topk_workspace_bytes():
    size = mlakit.ops.topk_workspace_bytes
    # One row of 8192: 2 slices of 4096; the row histogram (4096 int32 = 16384 bytes), its state
    # (32 bytes, to 16640 at 256), 2 slices of 16 bytes (to 16896), 8192 candidates of 8 bytes.
    assert size(1, k=2048, max_len=8192) == 16896 + 8192 * 8
    # One block a row anyway: rows below 8192, rows not longer than k, no rows.
    assert size(1, k=2048, max_len=8191) == 0
    assert size(4, k=8192, max_len=8192) == 0
    assert size(0, k=2048, max_len=131072) == 0
    # Out of the library's ranges: 0, not an error (topk_indices names the argument).
    assert size(1, k=2048, max_len=131072, next_n=17) == 0
    assert size(-1, k=2048, max_len=131072) == 0
    assert size(1 << 40, k=2048, max_len=131072) == 0
    # Rows are b * next_n; a workspace for the largest batch serves the smaller ones.
    assert size(8, k=2048, max_len=131072, next_n=2) == size(16, k=2048, max_len=131072)
    sizes = [size(b, k=2048, max_len=131072) for b in range(1, 129)]
    assert all(0 < a <= b for a, b in zip(sizes, sizes[1:]))


def test_topk_allocates_no_workspace_inside_a_cupy_capture(monkeypatch):
    """CuPy's pool has no graph-private pool: while CuPy's runtime says the op's stream is being
    captured, no workspace is allocated (one block a row runs); PyTorch's graphs allocate."""
    import sys
    import types

    from mlakit import ops

    status = {"value": 1}
    runtime = types.SimpleNamespace(streamIsCapturing=lambda handle: status["value"])
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    array = type("ndarray", (), {"__module__": "cupy._core.core"})()
    assert ops._cupy_capturing(7)
    assert ops._topk_workspace(array, 64, 1, 131072, 2048, None, 7) is None
    status["value"] = 0
    assert not ops._cupy_capturing(7)


def test_topk_caller_workspace_checked_by_name():
    """The cpu device does not use a workspace but checks it as a GPU call would: size, dtype,
    alignment (the library's check), writability; one_block=True takes none."""
    rng = np.random.default_rng(60)
    k, max_len = 16, 8192
    lens = np.array([max_len, 300], np.int32)
    table, _, _ = paged(rng, lens)
    logits = rng.standard_normal((2, max_len)).astype(np.float32)
    need = mlakit.ops.topk_workspace_bytes(2, k=k, max_len=max_len)
    assert need > 0
    want, _ = ref.topk(logits, lens, table, PAGE, k)
    call = mlakit.ops.topk_indices
    got = call(logits, lens, table, k=k, page_size=PAGE, workspace=aligned_bytes(need))
    np.testing.assert_array_equal(got.reshape(-1, k), want)
    expect(ValueError, re.escape(f"workspace: expected at least {need} bytes "
                                 f"(mlakit.ops.topk_workspace_bytes), given {need - 1} bytes"),
           call, logits, lens, table, k=k, page_size=PAGE,
           workspace=aligned_bytes(need - 1))  # fmt: skip
    expect(ValueError, r"^workspace: expected a 256-byte aligned address, given 0x[0-9a-f]+$",
           call, logits, lens, table, k=k, page_size=PAGE,
           workspace=aligned_bytes(need, offset=64))  # fmt: skip
    expect(TypeError, r"^workspace: expected dtype uint8, given int8", call, logits, lens, table,
           k=k, page_size=PAGE, workspace=aligned_bytes(need).view(np.int8))  # fmt: skip
    expect(TypeError, r"^workspace: expected an array .*given list", call, logits, lens, table,
           k=k, page_size=PAGE, workspace=[0] * need)  # fmt: skip
    readonly = aligned_bytes(need)
    readonly.setflags(write=False)
    expect(ValueError, r"^workspace: expected a writable array", call, logits, lens, table, k=k,
           page_size=PAGE, workspace=readonly)  # fmt: skip
    expect(ValueError, r"^workspace: expected None with one_block=True", call, logits, lens,
           table, k=k, page_size=PAGE, workspace=aligned_bytes(need), one_block=True)  # fmt: skip
    got = call(logits, lens, table, k=k, page_size=PAGE, one_block=True)
    np.testing.assert_array_equal(got.reshape(-1, k), want)
    # Shapes that need no workspace: an empty array is no workspace (its address unchecked).
    short = logits[:, :1000]
    assert mlakit.ops.topk_workspace_bytes(2, k=k, max_len=1000) == 0
    got = call(short, np.array([1000, 300], np.int32), table, k=k, page_size=PAGE,
               workspace=np.empty(0, np.uint8))  # fmt: skip
    want, _ = ref.topk(short, np.array([1000, 300], np.int32), table, PAGE, k)
    np.testing.assert_array_equal(got.reshape(-1, k), want)


def test_torch_topk_workspace_checks():
    """The torch op checks a workspace's dtype and device from metadata (its fake too: a CUDA
    call with a host workspace is refused without a GPU), and runs with one on host tensors."""
    torch = pytest.importorskip("torch")
    import mlakit.torch as mt

    k, max_len = 8, 8192
    lens = torch.tensor([max_len, 20], dtype=torch.int32)
    table = torch.arange(2 * (max_len // PAGE), dtype=torch.int32).reshape(2, -1)
    logits = torch.randn(2, max_len, generator=torch.Generator().manual_seed(61))
    need = mlakit.ops.topk_workspace_bytes(2, k=k, max_len=max_len)
    workspace = torch.from_numpy(aligned_bytes(need))
    want, _ = ref.topk(logits.numpy(), lens.numpy(), table.numpy(), PAGE, k)
    got = mt.topk_indices(logits, lens, table, k=k, page_size=PAGE, workspace=workspace)
    np.testing.assert_array_equal(got.numpy().reshape(-1, k), want)
    got = mt.topk_indices(logits, lens, table, k=k, page_size=PAGE, one_block=True)
    np.testing.assert_array_equal(got.numpy().reshape(-1, k), want)
    got = mt.topk_indices(logits, lens, table, k=k, page_size=PAGE, deterministic=False)
    np.testing.assert_array_equal(got.numpy().reshape(-1, k), want)
    with pytest.raises(ValueError, match=r"^workspace: expected at least \d+ bytes"):
        mt.topk_indices(logits, lens, table, k=k, page_size=PAGE, workspace=workspace[:-1])
    with pytest.raises(TypeError, match=r"^workspace: expected dtype uint8, given float32"):
        mt.topk_indices(logits, lens, table, k=k, page_size=PAGE, workspace=logits)

    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        cuda = dict(device="cuda")
        f_logits = torch.empty(2, max_len, **cuda)
        f_lens = torch.empty(2, dtype=torch.int32, **cuda)
        f_table = torch.empty(2, max_len // PAGE, dtype=torch.int32, **cuda)
        host = torch.empty(need, dtype=torch.uint8)
        message = r"^workspace: expected a tensor on cuda:0 \(where the op runs\), given one on cpu"
        with pytest.raises(ValueError, match=message):
            mt.topk_indices(f_logits, f_lens, f_table, k=k, page_size=PAGE, workspace=host)
        idx = mt.topk_indices(f_logits, f_lens, f_table, k=k, page_size=PAGE,
                              workspace=torch.empty(need, dtype=torch.uint8, **cuda))  # fmt: skip
        assert idx.shape == (2, 1, k) and idx.device.type == "cuda"


# --- PyTorch (host tensors): the same ops through the module and through the custom ops -------


def test_torch_host_tensors_and_custom_ops():
    torch = pytest.importorskip("torch")
    import mlakit.torch as mt

    rng = np.random.default_rng(40)
    kv, x = random_tokens(rng, 11, 576, "bf16")
    slots = slot_mapping(rng, 11, 3)
    raw = rng.integers(0, 256, (3, PAGE, 656), dtype=np.uint8)
    want = ref.append_kv(raw.reshape(3, -1), x, slots, PAGE, "fp8_blockwise")
    tkv = torch.from_numpy(kv.view(np.int16)).view(torch.bfloat16)
    cache = torch.from_numpy(raw.copy())
    mlakit.ops.append_kv(tkv, torch.from_numpy(slots), cache, kv_layout="v32")
    np.testing.assert_array_equal(cache.numpy().reshape(3, -1), want)
    cache2 = torch.from_numpy(raw.copy())
    mt.append_kv(tkv, torch.from_numpy(slots), cache2, kv_layout="v32")
    assert torch.equal(cache, cache2)

    index = torch.zeros(mlakit.ops.indexer_cache_shape(3, PAGE), dtype=torch.uint8)
    mt.append_indexer(tkv[:, :128], torch.from_numpy(slots), index)
    want_index = ref.append_indexer(np.zeros(tuple(index.shape), np.uint8), x[:, :128], slots,
                                    PAGE)  # fmt: skip
    np.testing.assert_array_equal(index.numpy(), want_index)

    lens = torch.tensor([0, 7, 20], dtype=torch.int32)
    table = torch.tensor([[2, 0], [1, 2], [0, 1]], dtype=torch.int32)
    q = torch.from_numpy(random_e4m3(rng, (3, 1, 4, 128))).view(torch.float8_e4m3fn)
    w = torch.randn(3, 4)
    logits = mt.indexer_logits(q, w, index, table, lens)
    want_logits = mlakit.ops.indexer_logits(q.view(torch.uint8).numpy(), w.numpy(),
                                            index.numpy(), table.numpy(), lens.numpy())  # fmt: skip
    np.testing.assert_array_equal(logits.numpy(), want_logits)
    idx, pos = mt.topk_indices(logits, lens, table, k=8, page_size=PAGE, return_positions=True)
    want_idx, want_pos = ref.topk(want_logits, lens.numpy(), table.numpy(), PAGE, 8)
    np.testing.assert_array_equal(idx.numpy().reshape(-1, 8), want_idx)
    np.testing.assert_array_equal(pos.numpy().reshape(-1, 8), want_pos)


def test_torch_ops_compile_and_fake():
    torch = pytest.importorskip("torch")
    import mlakit.torch as mt

    rng = np.random.default_rng(41)
    kv, _ = random_tokens(rng, 5, 576, "bf16")
    tkv = torch.from_numpy(kv.view(np.int16)).view(torch.bfloat16)
    slots = torch.from_numpy(slot_mapping(rng, 5, 2))
    lens = torch.tensor([9, 30], dtype=torch.int32)
    table = torch.tensor([[1, 0], [0, 1]], dtype=torch.int32)

    def step(kv_in, slots_in, cache, index, q, w):
        mt.append_kv(kv_in, slots_in, cache)
        mt.append_indexer(kv_in[:, :128], slots_in, index)
        logits = mt.indexer_logits(q, w, index, table, lens)
        return mt.topk_indices(logits, lens, table, k=4, page_size=PAGE)

    def inputs():
        cache = torch.zeros(2, PAGE, 576, dtype=torch.bfloat16)
        index = torch.zeros(mlakit.ops.indexer_cache_shape(2, PAGE), dtype=torch.uint8)
        q = torch.from_numpy(random_e4m3(np.random.default_rng(5), (2, 1, 4, 128)))
        return cache, index, q.view(torch.float8_e4m3fn), torch.ones(2, 4)

    c1, i1, q1, w1 = inputs()
    eager = step(tkv, slots, c1, i1, q1, w1)
    c2, i2, q2, w2 = inputs()
    compiled = torch.compile(step, fullgraph=True, backend="eager")(tkv, slots, c2, i2, q2, w2)
    assert torch.equal(eager, compiled) and torch.equal(c1, c2) and torch.equal(i1, i2)

    # The fake implementations: shapes and dtypes without running, mutation declared.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(4, 2, 8, 128, dtype=torch.float8_e4m3fn)
        w = torch.empty(8, 8)
        index = torch.empty(10, PAGE * 132, dtype=torch.uint8)
        t = torch.empty(4, 3, dtype=torch.int32)
        n = torch.empty(4, dtype=torch.int32)
        logits = mt.indexer_logits(q, w, index, t, n)
        assert logits.shape == (8, 3 * PAGE) and logits.dtype == torch.float32
        idx = mt.topk_indices(logits, n, t, k=16, page_size=PAGE, next_n=2)
        assert idx.shape == (4, 2, 16) and idx.dtype == torch.int32
    for name in ("append_kv", "append_indexer"):
        schema = getattr(torch.ops.mlakit, name).default._schema
        assert any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def test_torch_opcheck():
    """torch.library.opcheck on each op: the schema's mutation declarations, the fake
    implementations and dispatch (uint8 bits for the fp8 q, which the schema test multiplies)."""
    torch = pytest.importorskip("torch")
    import mlakit.torch  # noqa: F401  (registers the ops)

    rng = np.random.default_rng(50)
    kv, _ = random_tokens(rng, 6, 576, "bf16")
    tkv = torch.from_numpy(kv.view(np.int16)).view(torch.bfloat16)
    slots = torch.from_numpy(slot_mapping(rng, 6, 2))
    cache = torch.zeros(2, PAGE, 656, dtype=torch.uint8)
    ops = torch.ops.mlakit
    blockwise = (tkv, slots, cache, None, None, "fp8_blockwise", 0)
    torch.library.opcheck(ops.append_kv.default, blockwise)
    dense = torch.zeros(2, PAGE, 576, dtype=torch.bfloat16)
    torch.library.opcheck(ops.append_kv.default, (tkv, slots, dense, None, None, "dense", 0))
    index = torch.zeros(mlakit.ops.indexer_cache_shape(2, PAGE), dtype=torch.uint8)
    torch.library.opcheck(ops.append_indexer.default, (tkv[:, :128].contiguous(), slots, index,
                                                       "amax"))  # fmt: skip
    q = torch.from_numpy(random_e4m3(rng, (2, 1, 4, 128)))
    w = torch.randn(2, 4)
    table = torch.tensor([[1, 0], [0, 1]], dtype=torch.int32)
    lens = torch.tensor([5, 20], dtype=torch.int32)
    logits = torch.empty(2, 2 * PAGE)
    torch.library.opcheck(ops.indexer_logits.default, (q, w, index, table, lens, logits))
    logits = torch.randn(2, 2 * PAGE)
    indices = torch.empty(2, 1, 8, dtype=torch.int32)
    positions = torch.empty(2, 1, 8, dtype=torch.int32)
    torch.library.opcheck(ops.topk_indices.default,
                          (logits, lens, table, indices, positions, PAGE, 1, 2 * PAGE, None))  # fmt: skip
    torch.library.opcheck(ops.topk_indices.default,
                          (logits, lens, table, indices, None, PAGE, 1, 2 * PAGE, None))  # fmt: skip
    # With a workspace (empty: these rows need none, and a copy opcheck makes stays valid) and
    # with one_block.
    empty = torch.empty(0, dtype=torch.uint8)
    torch.library.opcheck(ops.topk_indices.default,
                          (logits, lens, table, indices, positions, PAGE, 1, 2 * PAGE, empty,
                           False))  # fmt: skip
    torch.library.opcheck(ops.topk_indices.default,
                          (logits, lens, table, indices, None, PAGE, 1, 2 * PAGE, None, True))  # fmt: skip
