"""The CUDA path of mlakit.cp.merge_partials (torch CUDA tensors, the current stream) against the
cpu merge of the same partials; the torch custom op under CUDA graph capture. Marked gpu: skips
without PyTorch and a CUDA device, and asks for a build with CUDA."""

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from mlakit import cp  # noqa: E402

pytestmark = pytest.mark.gpu


def partials(rng, world, b, s_q, h_q):
    po = rng.standard_normal((world, b, s_q, h_q, 512)).astype(np.float32)
    pl = (rng.standard_normal((world, b, s_q, h_q)) * 3).astype(np.float32)
    pl[rng.random(pl.shape) < 0.2] = -np.inf  # empty partials
    pl[:, 0, 0, 0] = -np.inf  # a row no rank holds
    return po, pl


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("with_sinks", [False, True])
def test_cuda_merge_matches_cpu(dtype, with_sinks):
    rng = np.random.default_rng(5)
    po, pl = partials(rng, 4, 3, 2, 16)
    sinks = rng.standard_normal(16).astype(np.float32) if with_sinks else None
    cpu_po = torch.from_numpy(po).to(dtype)
    cpu_sinks = None if sinks is None else torch.from_numpy(sinks)
    want_out, want_lse = cp.merge_partials(cpu_po, torch.from_numpy(pl), sinks=cpu_sinks)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # runs on the current stream
        out, lse = cp.merge_partials(
            cpu_po.cuda(),
            torch.from_numpy(pl).cuda(),
            sinks=None if cpu_sinks is None else cpu_sinks.cuda(),
        )
    stream.synchronize()
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(out.cpu().float(), want_out.float(), rtol=tol, atol=tol)
    torch.testing.assert_close(lse.cpu(), want_lse, rtol=1e-5, atol=1e-5)


def test_mixed_devices_are_refused_by_name():
    po = torch.zeros((2, 1, 1, 4, 512), device="cuda")
    with pytest.raises(ValueError, match="^partial_lse:"):
        cp.merge_partials(po, torch.zeros((2, 1, 1, 4)))


def test_custom_op_under_cuda_graph_capture():
    import mlakit.torch as mt

    rng = np.random.default_rng(9)
    po, pl = partials(rng, 2, 2, 1, 8)
    gpo, gpl = torch.from_numpy(po).cuda(), torch.from_numpy(pl).cuda()
    out = torch.empty((2, 1, 8, 512), device="cuda")
    lse = torch.empty((2, 1, 8), device="cuda")
    mt.merge_partials(gpo, gpl, out=out, lse=lse)  # warm up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mt.merge_partials(gpo, gpl, out=out, lse=lse)
    po2, pl2 = partials(rng, 2, 2, 1, 8)
    gpo.copy_(torch.from_numpy(po2))
    gpl.copy_(torch.from_numpy(pl2))
    graph.replay()
    torch.cuda.synchronize()
    want_out, want_lse = cp.merge_partials(po2, pl2)
    np.testing.assert_allclose(out.cpu().numpy(), want_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lse.cpu().numpy(), want_lse, rtol=1e-5, atol=1e-5)
