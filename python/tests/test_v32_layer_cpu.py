"""The V3.2 decode layer of examples/python/v32_layer.py (append, indexer logits, top-k, sparse
decode on the cpu device) runs, and each step agrees with the NumPy references."""

import pathlib
import runpy

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("ml_dtypes")

import ops_reference as ref  # noqa: E402
from numpy_reference import (  # noqa: E402
    E4M3,
    assert_close_to_reference,
    bf16_value,
    sparse_reference,
)

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / "v32_layer.py"


def blockwise_values(cache):
    """[num_pages * page_size, 576] float64 of a 656-byte-token cache."""
    tokens = cache.reshape(-1, 656)
    scales = tokens[:, 512:528].copy().view(np.float32).astype(np.float64)
    nope = E4M3[tokens[:, :512]] * np.repeat(scales, 128, axis=1)
    rope = bf16_value(tokens[:, 528:].copy().view(np.uint16))
    return np.concatenate([nope, rope], axis=1)


def test_v32_layer_example():
    example = runpy.run_path(str(EXAMPLE))
    r = example["main"]()
    page, topk = example["PAGE_SIZE"], example["TOPK"]
    seq_lens, table = r["seq_lens"], r["block_table"]
    np.testing.assert_array_equal(seq_lens, [91, 301])

    # 1. The new token of each request sits at its last position, quantized as the rules say.
    for i, n in enumerate(seq_lens):
        slot = int(table[i, (n - 1) // page]) * page + (n - 1) % page
        x = r["new"]["kv"][i].astype(np.float32)
        want = ref.quantize_kv_token(x, "fp8_blockwise")
        np.testing.assert_array_equal(r["kv_cache"].reshape(-1, 656)[slot], want)

    # 2-3. Top-k of the logits: every position of the short request, the top TOPK of the long.
    logits, indices = r["logits"], r["indices"]
    for row, n in enumerate(seq_lens):
        assert np.isfinite(logits[row, :n]).all() and np.isneginf(logits[row, n:]).all()
    want_idx, _ = ref.topk(logits, seq_lens, table, page, topk)
    np.testing.assert_array_equal(indices.reshape(-1, topk), want_idx)
    assert (indices[0, 0] >= 0).sum() == seq_lens[0] and (indices[1, 0] >= 0).all()

    # 4. The sparse decode over those slots, against float64 attention over the dequantized cache.
    values = blockwise_values(r["kv_cache"])
    want, _ = sparse_reference(r["q"].astype(np.float64), [(values, indices, None)],
                               softmax_scale=576**-0.5)  # fmt: skip
    assert_close_to_reference(r["out"].astype(np.float64), want, "bf16")


def test_v32_layer_example_runs_as_a_script(capsys):
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert capsys.readouterr().out.startswith("out (2, 1, 16, 512)")


def test_layer_benchmark_runs_its_steps_on_the_cpu_device():
    """bench/v32_layer_bench.py's sequence (torch tensors through mlakit.torch's ops), once on the
    cpu device at small sizes: the check the benchmark offers without a GPU."""
    pytest.importorskip("torch")
    bench = runpy.run_path(str(EXAMPLE.parents[2] / "bench" / "v32_layer_bench.py"))
    assert bench["main"](["--device", "cpu", "--batch", "2", "--len", "130", "--heads", "16",
                          "--index-heads", "8", "--topk", "64", "--next-n", "2"]) == 0  # fmt: skip


def test_layer_benchmark_dumps_the_indexer_logits(tmp_path):
    """--dump-logits writes the indexer's logits of the layer, rows [batch * next_n, len] of
    float32 (what `mlakit bench-op topk --logits-file` reads): the indexer step's output on the
    same layer (same seed), its first len positions."""
    torch = pytest.importorskip("torch")
    bench = runpy.run_path(str(EXAMPLE.parents[2] / "bench" / "v32_layer_bench.py"))
    path = tmp_path / "logits.f32"
    args = ["--device", "cpu", "--batch", "2", "--len", "130", "--heads", "16", "--index-heads",
            "8", "--topk", "64", "--next-n", "2"]  # fmt: skip
    assert bench["main"](args + ["--dump-logits", str(path)]) == 0
    rows = np.fromfile(path, dtype=np.float32).reshape(4, 130)
    ns = bench["argparse"].Namespace(batch=2, len=130, next_n=2, heads=16, index_heads=8, topk=64,
                                     seed=1, pdl=False)  # fmt: skip
    layer = bench["make_layer"](ns, "cpu")
    bench["steps"](ns, layer)["indexer"]()
    assert np.array_equal(rows, layer["logits"][:, :130].numpy())
    assert np.isfinite(rows).all()
