"""The context-parallel communication over NCCL, one process per GPU (2, and 4 where there are
4 GPUs): each rank's partial from the cpu backend (the GPU backends refuse cp_world > 1 for now),
moved to its GPU, merged by mlakit.cp.merge_allgather / merge_reduce_scatter_heads on NCCL and the
CUDA merge, against the unsharded decode; then mlakit.cp.sharded_decode on CUDA tensors end to
end, skipped while the GPU backends refuse cp_world > 1 (issue 38). Marked gpu; skips with fewer
than two GPUs or without NCCL. NVLink multicast stays off (NCCL_NVLS_ENABLE=0)."""

import os

import pytest

os.environ["NCCL_NVLS_ENABLE"] = "0"  # before any NCCL communicator; the children inherit it

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import mlakit.torch as mt  # noqa: E402
from mlakit import cp  # noqa: E402
from test_cp_cpu import assert_merged_close, shard  # noqa: E402
from test_cp_dist_cpu import CASES, as_torch, bits, check_lse, problem  # noqa: E402

pytestmark = pytest.mark.gpu

# The refusal sharded_decode meets while the GPU backends do not run cp_world > 1.
_REFUSED = "refused"


def _gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_merges(rank, world):
    """Partials from the cpu backend, communicated and merged on the GPUs."""
    dev = torch.device("cuda", rank)
    for seed, (h_q, s_q, page_size, interleave, seq_lens, with_sinks, base2) in enumerate(CASES):
        w, q, lens, sinks = problem(seed, h_q, s_q, page_size, seq_lens, with_sinks)
        full = (q, as_torch(w.kv_cache), torch.from_numpy(w.block_table), lens)
        want_out, want_lse = mt.decode(*full, sinks=sinks, return_lse=True, lse_base2=base2)
        cache, table = shard(w, page_size, world, rank, interleave)
        part_out, part_lse = mt.decode(q, as_torch(cache), torch.from_numpy(table), lens,
                                       return_lse=True, lse_base2=base2, cp_world=world,
                                       cp_rank=rank, cp_interleave=interleave)  # fmt: skip
        heads = h_q // world
        mine = slice(rank * heads, (rank + 1) * heads)
        gpu_sinks = None if sinks is None else sinks.to(dev)
        for merge, rows in ((cp.merge_allgather, slice(None)),
                            (cp.merge_reduce_scatter_heads, mine)):  # fmt: skip
            out, lse = merge(part_out.to(dev), part_lse.to(dev), sinks=gpu_sinks, lse_base2=base2)
            assert out.device == dev and lse.device == dev
            assert_merged_close(bits(out.cpu()), bits(want_out[:, :, rows]))
            check_lse(lse.cpu(), want_lse[:, :, rows])


def check_sharded_decode(rank, world, marker):
    """The whole step on CUDA tensors; writes ``marker`` when the GPU backend refuses cp."""
    dev = torch.device("cuda", rank)
    h_q, s_q, page_size, interleave = 16, 2, 64, 64
    w, q, lens, sinks = problem(21, h_q, s_q, page_size, [1, 100, 1000], True)
    want_out, want_lse = mt.decode(q, as_torch(w.kv_cache), torch.from_numpy(w.block_table), lens,
                                   sinks=sinks, return_lse=True)  # fmt: skip
    cache, table = shard(w, page_size, world, rank, interleave)
    args = (q.to(dev), as_torch(cache).to(dev), torch.from_numpy(table).to(dev), lens.to(dev))
    heads = h_q // world
    mine = slice(rank * heads, (rank + 1) * heads)
    for mode, rows in (("allgather", slice(None)), ("heads", mine)):
        try:
            out, lse = cp.sharded_decode(*args, cp_interleave=interleave, mode=mode,
                                         sinks=sinks.to(dev), return_lse=True)  # fmt: skip
        except NotImplementedError as e:
            if "cp_world" not in str(e):
                raise
            with open(marker, "w") as f:
                f.write(str(e))
            return
        torch.cuda.synchronize(dev)
        assert_merged_close(bits(out.cpu()), bits(want_out[:, :, rows]))
        check_lse(lse.cpu(), want_lse[:, :, rows])


def _worker(rank, world, store, marker):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))  # fmt: skip
    try:
        check_merges(rank, world)
        check_sharded_decode(rank, world, f"{marker}.{rank}")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_nccl(tmp_path, world):
    if not (dist.is_available() and dist.is_nccl_available()):
        pytest.skip("torch.distributed has no NCCL")
    if _gpus() < world:
        pytest.skip(f"needs {world} GPUs, found {_gpus()}")
    marker = os.path.join(str(tmp_path), _REFUSED)
    store = os.path.join(str(tmp_path), "store")
    torch.multiprocessing.spawn(_worker, args=(world, store, marker), nprocs=world)
    refused = [f for f in os.listdir(str(tmp_path)) if f.startswith(_REFUSED)]
    if refused:
        with open(os.path.join(str(tmp_path), refused[0])) as f:
            pytest.skip(f"merges passed; sharded_decode on CUDA: {f.read()}")
