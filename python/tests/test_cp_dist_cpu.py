"""The context-parallel step over torch.distributed (mlakit.cp_dist) on the gloo backend: 2 and 4
processes, each holding its shard of a random cache (laid out as test_cp_cpu.shard does, after
harness::shard_inputs), run mlakit.cp.sharded_decode in both modes and compare their result with
the unsharded single-process decode (interleave 1 and 64, MTP, requests shorter than N * I, so
empty shards, sinks, base-2 LSEs, outputs given); groups of one and subgroups; the
all_gather fallback; argument errors by name. One spawn per world size keeps the run short.
Skips without PyTorch or torch.distributed with gloo."""

import os

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import mlakit.torch as mt  # noqa: E402
from mlakit import cp, cp_dist  # noqa: E402
from numpy_reference import make_workload  # noqa: E402
from test_cp_cpu import assert_merged_close, shard  # noqa: E402

CASES = [
    # (h_q, s_q, page_size, interleave, seq_lens, sinks, lse_base2)
    (16, 1, 16, 1, [0, 1, 37, 100], False, False),
    (8, 2, 16, 64, [1, 3, 130], False, False),  # MTP; requests shorter than N * 64: empty shards
    (8, 2, 16, 1, [0, 5, 40], True, False),  # sinks, applied once by the merge
    (16, 1, 1, 64, [2, 300], True, True),  # page size 1, base-2 LSEs
]


def as_torch(bits):
    """uint16 bf16 bits (NumPy) as a bfloat16 tensor sharing them."""
    return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)


def bits(t):
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def check_lse(got, want):
    got, want = got.numpy(), want.numpy()
    empty = np.isneginf(want)
    assert (np.isneginf(got) == empty).all(), "the -inf rows differ"
    np.testing.assert_allclose(got[~empty], want[~empty], rtol=1e-5, atol=1e-5)


def problem(seed, h_q, s_q, page_size, seq_lens, with_sinks):
    """The same random problem on every rank: the workload, its unsharded tensors, the sinks."""
    rng = np.random.default_rng(seed)
    w = make_workload(rng, b=len(seq_lens), s_q=s_q, h_q=h_q, page_size=page_size,
                      seq_lens=seq_lens)  # fmt: skip
    sinks = None
    if with_sinks:
        sinks = torch.from_numpy(rng.standard_normal(h_q).astype(np.float32))
        sinks[0] = float("-inf")  # no sink for head 0
    lens = torch.from_numpy(w.seq_lens)
    return w, as_torch(w.q), lens, sinks


def check_case(group, seed, h_q, s_q, page_size, interleave, seq_lens, with_sinks, lse_base2):
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    w, q, lens, sinks = problem(seed, h_q, s_q, page_size, seq_lens, with_sinks)
    want_out, want_lse = mt.decode(q, as_torch(w.kv_cache), torch.from_numpy(w.block_table), lens,
                                   sinks=sinks, return_lse=True, lse_base2=lse_base2)  # fmt: skip
    cache, table = shard(w, page_size, world, rank, interleave)
    cache, table = as_torch(cache), torch.from_numpy(table)
    heads = h_q // world
    mine = slice(rank * heads, (rank + 1) * heads)
    for mode, rows in (("allgather", slice(None)), ("heads", mine)):
        out, lse = cp.sharded_decode(q, cache, table, lens, group=group, cp_interleave=interleave,
                                     mode=mode, sinks=sinks, lse_base2=lse_base2,
                                     return_lse=True)  # fmt: skip
        assert out.shape == want_out[:, :, rows].shape and out.dtype == torch.bfloat16, mode
        assert_merged_close(bits(out), bits(want_out[:, :, rows]))
        check_lse(lse, want_lse[:, :, rows])
    # Outputs given: written in place (poisoned first), returned.
    out = torch.full((len(seq_lens), s_q, heads, 512), float("nan"), dtype=torch.bfloat16)
    lse = torch.full((len(seq_lens), s_q, heads), float("nan"))
    got = cp.sharded_decode(q, cache, table, lens, group=group, cp_interleave=interleave,
                            mode="heads", sinks=sinks, lse_base2=lse_base2, out=out, lse=lse)
    assert got[0] is out and got[1] is lse
    assert_merged_close(bits(out), bits(want_out[:, :, mine]))


def check_all_cases(group):
    for seed, case in enumerate(CASES):
        check_case(group, seed, *case)
    check_var_q(group)


def check_var_q(group):
    """Variable query lengths (cu_seqlens_q): the packed rows' sharded step equals the unsharded
    var_q decode, in both modes, given outputs written in place."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    q_lens = [2, 0, 1, 3]
    w, q, lens, sinks = problem(21, 8, 3, 16, [3, 40, 1, 130], True)
    packed = torch.cat([q[i, :n] for i, n in enumerate(q_lens)])  # [6, 8, 576]
    cu = torch.tensor([0, 2, 2, 3, 6], dtype=torch.int32)
    want_out, want_lse = mt.decode(packed, as_torch(w.kv_cache), torch.from_numpy(w.block_table),
                                   lens, sinks=sinks, return_lse=True, cu_seqlens_q=cu,
                                   max_q_len=3)  # fmt: skip
    cache, table = shard(w, 16, world, rank, 1)
    cache, table = as_torch(cache), torch.from_numpy(table)
    heads = 8 // world
    mine = slice(rank * heads, (rank + 1) * heads)
    for mode, rows in (("allgather", slice(None)), ("heads", mine)):
        out, lse = cp.sharded_decode(packed, cache, table, lens, group=group, mode=mode,
                                     sinks=sinks, return_lse=True, cu_seqlens_q=cu,
                                     max_q_len=3)  # fmt: skip
        assert out.shape == want_out[:, rows].shape, mode
        assert_merged_close(bits(out), bits(want_out[:, rows]))
        check_lse(lse, want_lse[:, rows])
    out = torch.full((6, heads, 512), float("nan"), dtype=torch.bfloat16)
    lse = torch.full((6, heads), float("nan"))
    got = cp.sharded_decode(packed, cache, table, lens, group=group, mode="heads", sinks=sinks,
                            out=out, lse=lse, cu_seqlens_q=cu, max_q_len=3)  # fmt: skip
    assert got[0] is out and got[1] is lse
    assert_merged_close(bits(out), bits(want_out[:, mine]))


def check_one_case(group):
    check_case(group, 1, *CASES[1])


def check_allgather_fallback(group):
    """A backend without all_gather_into_tensor: all_gather into views gives the same bytes."""
    w, q, lens, _ = problem(11, 8, 1, 16, [5, 70], False)
    cache, table = shard(w, 16, dist.get_world_size(group), dist.get_rank(group), 1)
    args = (q, as_torch(cache), torch.from_numpy(table), lens)
    first = cp.sharded_decode(*args, group=group, return_lse=True)
    cp_dist._NO_GATHER_INTO_TENSOR.add("gloo")
    try:
        second = cp.sharded_decode(*args, group=group, return_lse=True)
    finally:
        cp_dist._NO_GATHER_INTO_TENSOR.discard("gloo")
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


def check_group_of_one(group):
    """No communication: the decode alone (sinks applied by it), the merges the identity."""
    w, q, lens, sinks = problem(12, 8, 2, 16, [0, 9, 50], True)
    args = (q, as_torch(w.kv_cache), torch.from_numpy(w.block_table), lens)
    want = mt.decode(*args, sinks=sinks, return_lse=True)
    for mode in ("allgather", "heads"):
        got = cp.sharded_decode(*args, group=group, mode=mode, sinks=sinks, cp_interleave=64,
                                return_lse=True)  # fmt: skip
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    part_out, part_lse = mt.decode(*args, return_lse=True)
    for merge in (cp.merge_allgather, cp.merge_reduce_scatter_heads):
        out, lse = merge(part_out, part_lse, group)
        assert out is part_out and lse is part_lse
        out, lse = merge(part_out, part_lse, group, sinks=sinks)  # a copy, the sinks applied
        assert_merged_close(bits(out), bits(want[0]))
        assert torch.equal(lse, part_lse)


def check_errors(group):
    """Every rank raises before any communication (so no rank waits on the others)."""
    world = dist.get_world_size(group)
    po, pl = torch.zeros((1, 1, 4, 512), dtype=torch.bfloat16), torch.zeros((1, 1, 4))
    for merge in (cp.merge_allgather, cp.merge_reduce_scatter_heads):
        with pytest.raises(TypeError, match="^partial_out: expected a torch.Tensor"):
            merge([0.0], pl, group)
        with pytest.raises(TypeError, match="^partial_out: expected dtype"):
            merge(po.to(torch.int32), pl, group)
        with pytest.raises(ValueError, match=r"^partial_out: expected shape \[b, s_q, h_q, 512\]"):
            merge(po[..., :256], pl, group)
        with pytest.raises(TypeError, match="^partial_lse: expected dtype float32, given float64"):
            merge(po, pl.double(), group)
        with pytest.raises(ValueError, match=r"^partial_lse: expected shape .* given \[1, 1, 3\]"):
            merge(po, pl[..., :3], group)
        with pytest.raises(ValueError, match="^partial_lse: expected a tensor on cpu"):
            merge(po, pl.to("meta"), group)
        with pytest.raises(ValueError, match=r"^sinks: expected shape \[h_q\] = \[4\]"):
            merge(po, pl, group, sinks=torch.zeros(5))
        with pytest.raises(TypeError, match="^out: expected dtype bfloat16, given float16"):
            merge(po, pl, group, out=torch.zeros((1, 1, 4, 512), dtype=torch.float16))
    with pytest.raises(ValueError, match=r"^out: expected shape \[b, s_q, h_q / N, 512\]"):
        cp.merge_reduce_scatter_heads(po, pl, group, out=torch.zeros_like(po))
    odd = f"^h_q: expected a multiple of the group's world size {world}.*given 3"
    with pytest.raises(ValueError, match=odd):
        cp.merge_reduce_scatter_heads(po[:, :, :3], pl[:, :, :3], group)
    w, q, lens, _ = problem(13, 3, 1, 16, [10], False)
    args = (q, as_torch(w.kv_cache), torch.from_numpy(w.block_table), lens)
    with pytest.raises(ValueError, match=odd):
        cp.sharded_decode(*args, group=group, mode="heads")
    with pytest.raises(ValueError, match="^mode: expected one of allgather, heads, given 'ring'"):
        cp.sharded_decode(*args, group=group, mode="ring")
    with pytest.raises(TypeError, match="^cp_world: set by sharded_decode"):
        cp.sharded_decode(*args, group=group, cp_world=world)
    with pytest.raises(ValueError, match="^cp_interleave: expected a value >= 1, given 0"):
        cp.sharded_decode(*args, group=group, cp_interleave=0)


def _worker(rank, world, store, checks):
    torch.set_num_threads(1)  # world processes on a few cores
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        for check, ranks in checks:
            # new_group is collective: every rank creates every group, in the same order.
            groups = [dist.new_group(r) for r in ranks] if ranks else [None]
            mine = next((g for g, r in zip(groups, ranks or [range(world)]) if rank in r))
            check(mine)
    finally:
        dist.destroy_process_group()


def spawn(tmp_path, world, checks):
    store = os.path.join(str(tmp_path), "store")
    torch.multiprocessing.spawn(_worker, args=(world, store, checks), nprocs=world)


def test_two_ranks(tmp_path):
    spawn(tmp_path, 2, [
        (check_all_cases, None),
        (check_allgather_fallback, None),
        (check_errors, None),
        (check_group_of_one, [[0], [1]]),
    ])  # fmt: skip


def test_four_ranks(tmp_path):
    spawn(tmp_path, 4, [
        (check_all_cases, None),
        (check_one_case, [[0, 1], [2, 3]]),  # subgroups: the rank in the group, not the world
    ])  # fmt: skip


def test_decode_takes_the_cp_fields():
    """mlakit.torch.decode with cp_world/cp_rank/cp_interleave is the cp Decoder's run; its
    default max_seq_len covers global lengths past what the local table holds."""
    w, q, lens, _ = problem(14, 8, 2, 16, [0, 3, 100], False)
    cache, table = shard(w, 16, 2, 1, 4)
    assert table.shape[1] * 16 < 100  # the global length exceeds the local table's reach
    out, lse = mt.decode(q, as_torch(cache), torch.from_numpy(table), lens, return_lse=True,
                         cp_world=2, cp_rank=1, cp_interleave=4)  # fmt: skip
    import mlakit

    d = mlakit.Decoder(h_q=8, s_q=2, page_size=16, max_batch=3, max_seq_len=100, backend="cpu",
                       lse=True, cp_world=2, cp_rank=1, cp_interleave=4)  # fmt: skip
    want_out, want_lse = d.run(q, as_torch(cache), torch.from_numpy(table), lens)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    with pytest.raises(ValueError, match="has_sinks"):
        mt.decode(q, as_torch(cache), torch.from_numpy(table), lens, return_lse=True,
                  sinks=torch.zeros(8), cp_world=2, cp_rank=1)  # fmt: skip


def test_reexported_and_needs_a_group():
    assert cp.sharded_decode is cp_dist.sharded_decode
    assert cp.merge_allgather is cp_dist.merge_allgather
    assert cp.merge_reduce_scatter_heads is cp_dist.merge_reduce_scatter_heads
    if dist.is_initialized():
        pytest.skip("a process group is initialized in this process")
    po, pl = torch.zeros((1, 1, 4, 512)), torch.zeros((1, 1, 4))
    with pytest.raises(RuntimeError, match="^group: expected an initialized"):
        cp.merge_allgather(po, pl)
