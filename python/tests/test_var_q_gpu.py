"""GPU tests of variable query lengths (var_q: q, out and lse packed by query token,
cu_seqlens_q): the Decoder and the torch op against the float32 reference of test_gpu.py, each
request alone, sinks, rows past the packed ones untouched, and a CUDA graph replayed with new
offsets. Skipped without a GPU."""

import itertools

import pytest

torch = pytest.importorskip("torch")

import mlakit  # noqa: E402
import mlakit.torch  # noqa: E402
from mlakit.torch import capture_graph  # noqa: E402
from test_gpu import (  # noqa: E402
    DEVICE,
    assert_close,
    assert_lse_close,
    make_case,
    make_decoder,
    reference,
)

pytestmark = pytest.mark.gpu


def require_gpu_var_q():
    """Skips the test when no GPU backend runs variable query lengths on this machine."""
    try:
        mlakit.Decoder(h_q=16, s_q=2, page_size=64, max_batch=1, max_seq_len=64, var_q=True)
    except NotImplementedError as e:
        pytest.skip(f"no GPU backend runs var_q here: {e}")


def pack(q, q_lens, spare=0):
    """Request i's first q_lens[i] tokens of q [b, s_q, h_q, 576], packed by query token, plus
    ``spare`` rows of NaN (past the packed ones: never read); and cu_seqlens_q on the device."""
    rows = [q[i, :n] for i, n in enumerate(q_lens)]
    rows.append(torch.full((spare,) + tuple(q.shape[2:]), float("nan"), dtype=q.dtype,
                           device=q.device))  # fmt: skip
    cu = torch.tensor([0] + list(itertools.accumulate(q_lens)), dtype=torch.int32)
    return torch.cat(rows), cu.to(q.device)


def var_q_reference(q, kv, table, lens, q_lens, **kwargs):
    """(out, lse) of the packed rows: each request alone with a uniform s_q of its q_len."""
    outs, lses = [], []
    for i, n in enumerate(q_lens):
        if n:
            out, lse = reference(q[i : i + 1, :n], kv, table[i : i + 1], lens[i : i + 1], **kwargs)
            outs.append(out[0])
            lses.append(lse[0])
    return torch.cat(outs), torch.cat(lses)


VAR_Q_CASES = [
    # (s_q, h_q, page_size, seq_lens, q_lens, dtype)
    (4, 128, 64, [1, 77, 300, 2050, 9], [1, 4, 0, 3, 2], torch.bfloat16),
    (16, 16, 64, [16, 1000, 5], [16, 1, 7], torch.bfloat16),
    (2, 64, 32, [40, 0, 700, 33], [2, 2, 1, 0], torch.float16),
    (3, 128, 64, [3000], [3], torch.bfloat16),
]


@pytest.mark.parametrize("s_q,h_q,page_size,seq_lens,q_lens,dtype", VAR_Q_CASES)
def test_var_q_decoder_matches_reference(s_q, h_q, page_size, seq_lens, q_lens, dtype):
    require_gpu_var_q()
    q, kv, table, lens = make_case(b=len(q_lens), s_q=s_q, h_q=h_q, page_size=page_size,
                                   seq_lens=seq_lens, dtype=dtype)  # fmt: skip
    packed, cu = pack(q, q_lens, spare=3)
    total = sum(q_lens)
    decoder = make_decoder(q, kv, table, var_q=True, lse=True)
    out = torch.full((total + 3, h_q, 512), float("nan"), dtype=dtype, device=DEVICE)
    lse = torch.full((total + 3, h_q), float("nan"), device=DEVICE)
    decoder.run(packed, kv, table, lens, cu_seqlens_q=cu, out=out, lse=lse)
    torch.cuda.synchronize()
    want, want_lse = var_q_reference(q, kv, table, lens, q_lens)
    assert_close(out[:total], want)
    assert_lse_close(lse[:total], want_lse)
    assert out[total:].isnan().all() and lse[total:].isnan().all(), "rows past cu[b] written"


def test_var_q_sinks_and_the_op():
    require_gpu_var_q()
    q_lens = [3, 0, 1, 2]
    q, kv, table, lens = make_case(b=4, s_q=3, h_q=32, page_size=64, seq_lens=[2, 64, 1, 900])
    packed, cu = pack(q, q_lens)
    sinks = torch.randn(32, device=DEVICE)
    out, lse = mlakit.torch.decode(packed, kv, table, lens, cu_seqlens_q=cu, max_q_len=3,
                                   sinks=sinks, return_lse=True)  # fmt: skip
    want, want_lse = var_q_reference(q, kv, table, lens, q_lens, sinks=sinks)
    assert_close(out, want)
    assert_lse_close(lse, want_lse)
    # Without max_q_len: s_q bounded by the rows (6), the same results.
    again = mlakit.torch.decode(packed, kv, table, lens, cu_seqlens_q=cu, sinks=sinks)
    assert_close(again, want)


@pytest.mark.parametrize("api", ["op", "decoder"])
def test_var_q_cuda_graph_replay_with_changed_offsets(api):
    """A graph captured once replays with other query lengths written into the same offsets
    tensor (and other lengths and queries): rows past the new cu_seqlens_q[b] are left alone."""
    require_gpu_var_q()
    b, h, page, rows = 4, 128, 64, 10
    q, kv, table, lens = make_case(b=b, s_q=4, h_q=h, page_size=page,
                                   seq_lens=[64, 700, 1, 3000])  # fmt: skip
    q_lens = [1, 4, 2, 3]
    packed, cu = pack(q, q_lens)
    out = torch.empty(rows, h, 512, dtype=q.dtype, device=DEVICE)
    decoder = make_decoder(q, kv, table, var_q=True)
    if api == "op":
        graph = capture_graph(lambda: mlakit.torch.decode(packed, kv, table, lens, cu_seqlens_q=cu,
                                                          max_q_len=4, out=out))  # fmt: skip
    else:
        graph = capture_graph(
            lambda: decoder.run(packed, kv, table, lens, cu_seqlens_q=cu, out=out))
    graph.replay()
    torch.cuda.synchronize()
    assert_close(out, var_q_reference(q, kv, table, lens, q_lens)[0])

    q_lens = [0, 2, 4, 1]  # 7 of the 10 rows
    q.copy_(torch.randn_like(q, dtype=torch.float32).to(q.dtype))
    new_rows, new_cu = pack(q, q_lens, spare=rows - 7)
    packed.copy_(new_rows)
    cu.copy_(new_cu)
    table.copy_(table.flip(0))
    lens.copy_(torch.tensor([3000, 5, 129, 64], dtype=torch.int32))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert_close(out[:7], var_q_reference(q, kv, table, lens, q_lens)[0])
    assert out[7:].isnan().all(), "rows past cu[b] written"
