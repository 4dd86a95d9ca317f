"""mlakit.torch.capture_graph without a CUDA device: a named error before any call of the step
(its capture on a GPU is test_gpu.py's, through every graph test there). Skipped where PyTorch is
not installed or a CUDA device is present."""

import pytest

torch = pytest.importorskip("torch")

import mlakit.torch  # noqa: E402


def test_capture_graph_is_public():
    assert "capture_graph" in mlakit.torch.__all__


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_capture_graph_without_cuda_raises_before_calling_fn():
    calls = []
    with pytest.raises(RuntimeError, match="capture_graph: expected a CUDA device, found none"):
        mlakit.torch.capture_graph(lambda: calls.append(1))
    assert calls == []
