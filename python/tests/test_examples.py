"""The PyTorch examples run (examples/python/torch_graph.py: the op captured in a CUDA graph on a
GPU, eager on the cpu backend without one; examples/python/flashmla_dropin.py: FlashMLA's decode
calls through mlakit.compat). Each checks its own results; skipped without PyTorch."""

import pathlib
import runpy

import pytest

pytest.importorskip("torch")

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


@pytest.mark.parametrize("name", ["torch_graph.py", "flashmla_dropin.py"])
def test_example_runs(name, capsys):
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    assert capsys.readouterr().out.split()[0] in ("cpu", "cuda")
