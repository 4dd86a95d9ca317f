"""Results of the cpu backend through the Python API, against a NumPy float64 reference."""

import math

import pytest

np = pytest.importorskip("numpy")

import mlakit  # noqa: E402
from numpy_reference import (  # noqa: E402
    assert_close_to_reference,
    make_workload,
    out_values,
    random_bits,
    reference,
)

try:
    import ml_dtypes
except ImportError:  # the raw-bits paths are tested either way
    ml_dtypes = None

# (name, decoder arguments, workload arguments)
DENSE_CASES = [
    ("bf16-h16-page16", dict(h_q=16, page_size=16), dict(b=4, s_q=1, seq_lens=[0, 1, 37, 100])),
    ("bf16-h128-page64", dict(h_q=128, page_size=64), dict(b=2, s_q=1, seq_lens=[200, 65])),
    ("bf16-h1-page1", dict(h_q=1, page_size=1), dict(b=3, s_q=1, seq_lens=[5, 1, 17])),
    ("bf16-mtp-causal", dict(h_q=8, s_q=4, page_size=32), dict(b=3, s_q=4, seq_lens=[2, 40, 71])),
    (
        "bf16-mtp-noncausal",
        dict(h_q=8, s_q=3, page_size=32, causal=False),
        dict(b=2, s_q=3, seq_lens=[3, 50]),
    ),
    ("bf16-page48", dict(h_q=4, page_size=48), dict(b=2, s_q=1, seq_lens=[47, 97])),
    (
        "fp16-h16-mtp",
        dict(h_q=16, s_q=2, page_size=64, q_dtype="fp16"),
        dict(b=2, s_q=2, seq_lens=[64, 130], q_dtype="fp16", kv_dtype="fp16"),
    ),
]


@pytest.mark.parametrize("name,problem,work", DENSE_CASES, ids=[c[0] for c in DENSE_CASES])
def test_dense_matches_reference(name, problem, work):
    rng = np.random.default_rng(len(name))
    w = make_workload(rng, h_q=problem["h_q"], page_size=problem["page_size"], **work)
    decoder = mlakit.Decoder(max_batch=4, max_seq_len=256, backend="cpu", **problem)
    out = decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens)
    assert out.shape == (work["b"], work["s_q"], problem["h_q"], 512)
    want, _ = reference(w, page_size=problem["page_size"], causal=problem.get("causal", True))
    out_dtype = problem.get("q_dtype", "bf16")
    assert_close_to_reference(out_values(out, out_dtype), want, out_dtype)


def test_lse_and_sinks():
    rng = np.random.default_rng(1)
    w = make_workload(rng, b=3, s_q=2, h_q=8, page_size=16, seq_lens=[0, 20, 33])
    sinks = rng.standard_normal(8).astype(np.float32)
    sinks[0] = -np.inf  # changes nothing
    decoder = mlakit.Decoder(
        h_q=8, s_q=2, page_size=16, max_batch=3, max_seq_len=64, sinks=True, lse=True,
        backend="cpu",
    )  # fmt: skip
    out, lse = decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens, sinks=sinks)
    want, want_lse = reference(w, page_size=16, sinks=sinks)
    assert_close_to_reference(out_values(out, "bf16"), want, "bf16")
    assert lse.dtype == np.float32 and lse.shape == (3, 2, 8)
    assert np.all(np.isneginf(lse[0])), "no visible token: lse = -inf"
    np.testing.assert_allclose(lse[1:], want_lse[1:], atol=2e-4, rtol=1e-5)
    assert not out_values(out, "bf16")[0].any(), "no visible token: out = 0"


def test_softmax_scale():
    rng = np.random.default_rng(2)
    w = make_workload(rng, b=2, s_q=1, h_q=4, page_size=16, seq_lens=[30, 9])
    decoder = mlakit.Decoder(h_q=4, page_size=16, max_batch=2, max_seq_len=32, backend="cpu")
    out = decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens, softmax_scale=0.1)
    want, _ = reference(w, page_size=16, softmax_scale=0.1)
    assert_close_to_reference(out_values(out, "bf16"), want, "bf16")


@pytest.mark.parametrize("scales_as", ["floats", "arrays"])
def test_fp8_dense_cache(scales_as):
    rng = np.random.default_rng(3)
    q_scale, k_scale = 0.25, 0.5
    w = make_workload(
        rng, b=2, s_q=1, h_q=8, page_size=64, seq_lens=[100, 3], q_dtype="fp8_e4m3",
        kv_dtype="fp8_e4m3", q_scale=q_scale, k_scale=k_scale,
    )  # fmt: skip
    decoder = mlakit.Decoder(
        h_q=8, page_size=64, max_batch=2, max_seq_len=128, q_dtype="fp8", kv_dtype="fp8",
        backend="cpu",
    )  # fmt: skip
    assert decoder.problem["out_dtype"] == "bf16"
    if scales_as == "arrays":
        scales = dict(
            q_scale=np.array([q_scale], np.float32), k_scale=np.array(k_scale, np.float32)
        )
    else:
        scales = dict(q_scale=q_scale, k_scale=np.float32(k_scale))
    out = decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens, **scales)
    want, _ = reference(w, page_size=64)
    assert_close_to_reference(out_values(out, "bf16"), want, "bf16")


def test_fp8_cache_bf16_query():
    rng = np.random.default_rng(4)
    w = make_workload(
        rng, b=2, s_q=1, h_q=16, page_size=16, seq_lens=[40, 17], kv_dtype="fp8_e4m3",
        k_scale=0.125,
    )  # fmt: skip
    decoder = mlakit.Decoder(
        h_q=16, page_size=16, max_batch=2, max_seq_len=64, kv_dtype="fp8_e4m3", backend="cpu"
    )
    out = decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens, k_scale=0.125)
    want, _ = reference(w, page_size=16)
    assert_close_to_reference(out_values(out, "bf16"), want, "bf16")


def test_fp8_blockwise_cache():
    rng = np.random.default_rng(5)
    w = make_workload(rng, b=2, s_q=2, h_q=16, page_size=64, seq_lens=[70, 5], blockwise=True)
    assert w.kv_cache.dtype == np.uint8 and w.kv_cache.shape[-1] == 656
    decoder = mlakit.Decoder(
        h_q=16, s_q=2, page_size=64, max_batch=2, max_seq_len=128, kv_dtype="fp8_e4m3",
        kv_layout="fp8_blockwise", backend="cpu",
    )  # fmt: skip
    out = decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens)
    want, _ = reference(w, page_size=64)
    assert_close_to_reference(out_values(out, "bf16"), want, "bf16")


def test_sparse_topk():
    rng = np.random.default_rng(6)
    page_size, topk = 16, 24
    w = make_workload(rng, b=3, s_q=2, h_q=8, page_size=page_size, seq_lens=[40, 30, 20])
    cache_slots = w.kv_cache.shape[0] * page_size
    indices = np.full((3, 2, topk), -1, np.int32)
    for i in range(3):
        for t in range(2):
            # Slots of pages this request owns (the unused pages hold NaN); some -1 holes.
            owned = [
                int(w.block_table[i, j // page_size]) * page_size + j % page_size
                for j in range(int(w.seq_lens[i]))
            ]
            chosen = rng.choice(owned, size=topk - 4, replace=False)
            indices[i, t, : topk - 4] = chosen
            rng.shuffle(indices[i, t])
    assert indices.max() < cache_slots
    topk_lens = np.array([topk, 10, 0], np.int32)
    decoder = mlakit.Decoder(
        h_q=8, s_q=2, page_size=page_size, max_batch=3, max_seq_len=64, topk=topk, lse=True,
        backend="cpu",
    )  # fmt: skip
    out, lse = decoder.run(w.q, w.kv_cache, None, None, indices=indices, topk_lens=topk_lens)
    want, want_lse = reference(w, page_size=page_size, indices=indices, topk_lens=topk_lens)
    assert_close_to_reference(out_values(out, "bf16"), want, "bf16")
    finite = np.isfinite(want_lse)
    np.testing.assert_allclose(lse[finite], want_lse[finite], atol=2e-4)
    assert np.all(np.isneginf(lse[~finite]))


def test_out_and_lse_written_in_place():
    rng = np.random.default_rng(7)
    w = make_workload(rng, b=2, s_q=1, h_q=4, page_size=16, seq_lens=[10, 20])
    decoder = mlakit.Decoder(
        h_q=4, page_size=16, max_batch=2, max_seq_len=32, lse=True, backend="cpu"
    )
    out = np.full((2, 1, 4, 512), 0x7FC0, np.uint16)  # NaN bits: every element must be written
    lse = np.full((2, 1, 4), np.nan, np.float32)
    got_out, got_lse = decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens, out=out, lse=lse)
    assert got_out is out and got_lse is lse
    want, want_lse = reference(w, page_size=16)
    assert_close_to_reference(out_values(out, "bf16"), want, "bf16")
    np.testing.assert_allclose(lse, want_lse, atol=2e-4)


def test_layouts_and_dtypes_give_identical_bits():
    """ml_dtypes or raw bits, 3-D or 4-D caches, strided block-table rows: the same result."""
    rng = np.random.default_rng(8)
    w = make_workload(rng, b=2, s_q=1, h_q=8, page_size=16, seq_lens=[33, 18])
    decoder = mlakit.Decoder(h_q=8, page_size=16, max_batch=2, max_seq_len=64, backend="cpu")
    base = decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens).view(np.uint16)

    num_pages = w.kv_cache.shape[0]
    variants = [
        (w.q, w.kv_cache.reshape(num_pages, 16, 1, 576), w.block_table),
        (w.q, w.kv_cache.reshape(num_pages, 1, 16, 576), w.block_table),
    ]
    wide = np.full((2, w.block_table.shape[1] + 5), -1, np.int32)
    wide[:, : w.block_table.shape[1]] = w.block_table
    variants.append((w.q, w.kv_cache, wide[:, : w.block_table.shape[1]]))  # row stride > width
    if ml_dtypes is not None:
        variants.append(
            (w.q.view(ml_dtypes.bfloat16), w.kv_cache.view(ml_dtypes.bfloat16), w.block_table)
        )
    for q, kv, table in variants:
        got = decoder.run(q, kv, table, w.seq_lens)
        np.testing.assert_array_equal(got.view(np.uint16), base)


def test_output_dtypes():
    rng = np.random.default_rng(9)
    w = make_workload(rng, b=1, s_q=1, h_q=2, page_size=16, seq_lens=[5])
    decoder = mlakit.Decoder(h_q=2, page_size=16, max_batch=1, max_seq_len=16, backend="cpu")
    out = decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens)
    expected = ml_dtypes.bfloat16 if ml_dtypes is not None else np.uint16
    assert out.dtype == np.dtype(expected)
    fp16 = mlakit.Decoder(
        h_q=2, page_size=16, max_batch=1, max_seq_len=16, q_dtype=np.float16, backend="cpu"
    )
    q16 = random_bits(rng, (1, 1, 2, 576), "fp16").view(np.float16)
    kv16 = random_bits(rng, w.kv_cache.shape, "fp16").view(np.float16)
    assert fp16.run(q16, kv16, w.block_table, w.seq_lens).dtype == np.float16


def test_read_only_inputs_are_accepted():
    rng = np.random.default_rng(10)
    w = make_workload(rng, b=1, s_q=1, h_q=2, page_size=16, seq_lens=[9])
    for array in (w.q, w.kv_cache, w.block_table, w.seq_lens):
        array.flags.writeable = False
    decoder = mlakit.Decoder(h_q=2, page_size=16, max_batch=1, max_seq_len=16, backend="cpu")
    out = decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens)
    want, _ = reference(w, page_size=16)
    assert_close_to_reference(out_values(out, "bf16"), want, "bf16")


def test_decoder_properties_and_info():
    decoder = mlakit.Decoder(h_q=16, page_size=32, max_batch=8, max_seq_len=1024, backend="cpu")
    assert decoder.backend == "cpu"
    assert decoder.workspace_bytes == 0
    assert decoder.device_memory is False
    assert decoder.device == -1
    assert decoder.tactic == 0
    problem = decoder.problem
    assert problem["h_q"] == 16 and problem["page_size"] == 32 and problem["kv_dtype"] == "bf16"
    assert "cpu" in repr(decoder)

    info = mlakit.info()
    assert info["version"] == mlakit.__version__
    names = {b["name"]: b for b in info["backends"]}
    assert names["cpu"]["available"] and not names["cpu"]["device_memory"]
    assert set(info["device"]) >= {"present", "name", "sm", "sm_count", "error"}


def test_version_matches_package_metadata():
    from importlib.metadata import version

    assert mlakit.__version__ == version("mlakit")
    assert mlakit.__version__.count(".") == 2


def test_auto_backend_without_gpu_is_cpu():
    if mlakit.info()["device"]["present"]:
        pytest.skip("a GPU is present: auto picks a GPU backend")
    decoder = mlakit.Decoder(h_q=4, page_size=16, max_batch=1, max_seq_len=16)
    assert decoder.backend == "cpu"


def test_default_softmax_scale_is_one_over_sqrt_576():
    rng = np.random.default_rng(11)
    w = make_workload(rng, b=1, s_q=1, h_q=2, page_size=16, seq_lens=[12])
    decoder = mlakit.Decoder(h_q=2, page_size=16, max_batch=1, max_seq_len=16, backend="cpu")
    a = decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens)
    b = decoder.run(w.q, w.kv_cache, w.block_table, w.seq_lens, softmax_scale=1 / math.sqrt(576))
    np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))
