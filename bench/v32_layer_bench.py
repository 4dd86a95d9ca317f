#!/usr/bin/env python3
"""One DeepSeek V3.2 decode layer's attention step with mlakit's ops, each step and the whole step
captured in CUDA graphs (issue 36: the whole step reported against the sum of its parts).

The step (docs/ops.md, "A whole V3.2 decode layer's attention"), for `batch` requests of `len`
cached tokens and `next_n` new ones each:
  1. append: the new tokens' latent + RoPE into the 656-byte V3.2 cache (`append_kv`) and their
     indexer keys into the indexer cache (`append_indexer`);
  2. indexer: the lightning indexer's logits over every cached position (`indexer_logits`);
  3. top-k: the `topk` largest as sparse-decode indices (`topk_indices`: the op's choice of
     kernel, docs/ops.md);
  4. attention: the sparse decode over them (`mlakit.torch.decode` with `indices`).

On a GPU each step is captured in its own CUDA graph and the four in one graph
(`mlakit.torch.capture_graph`: two warm-up calls on a side stream, then the capture); each graph
is replayed `--replays` times after a warm-up (CUDA events around each replay, median; the
inputs stay in place, so the caches and logits are warm in L2 as far as they fit). Prints a
table and, with --json, writes it. The appends write the same slots every replay (the timing
does not depend on it). `--device cpu` runs the four steps once, eagerly, at the given (small)
sizes: a check of the sequence, no timing.

    python3 bench/v32_layer_bench.py --batch 64 --len 32768 --heads 128 --topk 2048

`--pdl` launches every step with programmatic dependent launch (sm_90: each kernel may start
while the one before it runs, and waits for it before reading; ops.h, `enable_pdl`).

`--dump-logits FILE` instead writes the indexer's logits of the layer (one indexer call after the
caches are filled: rows [batch * next_n, len] of float32) to FILE and exits: top-k inputs with an
indexer's value distribution for `mlakit bench-op topk --len LEN --logits-file FILE`.

Needs PyTorch and the mlakit package (`python/run_tests.sh` installs it).
"""

import argparse
import json
import os
import sys

import torch

import mlakit
import mlakit.torch as mt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also under runpy
from graph_timing import time_graph  # noqa: E402

PAGE = 64
INDEX_DIM = 128


def make_layer(args, device):
    """Caches holding `len` tokens of every request (written by the same appends), the block
    table, and the step's inputs and outputs."""
    gen = torch.Generator(device=device).manual_seed(args.seed)
    b, n, total = args.batch, args.next_n, args.len + args.next_n
    pages_per = -(-total // PAGE)
    num_pages = b * pages_per
    table = torch.randperm(num_pages, device=device, generator=gen).to(torch.int32)
    table = table.reshape(b, pages_per)
    kv_cache = torch.zeros((num_pages, PAGE, 656), dtype=torch.uint8, device=device)
    index_cache = torch.zeros((num_pages, PAGE * (INDEX_DIM + 4)), dtype=torch.uint8,
                              device=device)  # fmt: skip

    def slots_of(i, positions):
        return table[i, positions // PAGE].to(torch.int64) * PAGE + positions % PAGE

    for i in range(b):  # the context, one request at a time (bounded memory)
        pos = torch.arange(args.len, device=device)
        slots = slots_of(i, pos)
        kv = torch.randn((args.len, 576), device=device, generator=gen).to(torch.bfloat16)
        mt.append_kv(kv, slots, kv_cache, kv_layout="v32")
        k = torch.randn((args.len, INDEX_DIM), device=device, generator=gen).to(torch.bfloat16)
        mt.append_indexer(k, slots, index_cache)
    new_pos = torch.arange(args.len, total, device=device)
    layer = {
        "kv_cache": kv_cache,
        "index_cache": index_cache,
        "table": table,
        "slots": torch.cat([slots_of(i, new_pos) for i in range(b)]),
        "new_kv": torch.randn((b * n, 576), device=device, generator=gen).to(torch.bfloat16),
        "new_k": torch.randn((b * n, INDEX_DIM), device=device, generator=gen).to(torch.bfloat16),
        "seq_lens": torch.full((b,), total, dtype=torch.int32, device=device),
        "q": torch.randn((b, n, args.heads, 576), device=device, generator=gen).to(torch.bfloat16),
        "index_q": (torch.randn((b, n, args.index_heads, INDEX_DIM), device=device, generator=gen)
                    / 2).to(torch.float8_e4m3fn),  # fmt: skip
        "weights": torch.randn((b * n, args.index_heads), device=device, generator=gen),
        "logits": torch.empty((b * n, pages_per * PAGE), device=device),
        "indices": torch.empty((b, n, args.topk), dtype=torch.int32, device=device),
        "out": torch.empty((b, n, args.heads, 512), dtype=torch.bfloat16, device=device),
    }
    return layer


def steps(args, layer):
    """The four steps as functions of no arguments, writing into the layer's tensors."""
    def append():
        mt.append_kv(layer["new_kv"], layer["slots"], layer["kv_cache"], kv_layout="v32",
                     pdl=args.pdl)  # fmt: skip
        mt.append_indexer(layer["new_k"], layer["slots"], layer["index_cache"], pdl=args.pdl)

    def indexer():
        mt.indexer_logits(layer["index_q"], layer["weights"], layer["index_cache"], layer["table"],
                          layer["seq_lens"], logits=layer["logits"], pdl=args.pdl)  # fmt: skip

    def topk():
        mt.topk_indices(layer["logits"], layer["seq_lens"], layer["table"], k=args.topk,
                        page_size=PAGE, next_n=args.next_n, indices=layer["indices"],
                        pdl=args.pdl)  # fmt: skip

    def attention():
        mt.decode(layer["q"], layer["kv_cache"], indices=layer["indices"], out=layer["out"],
                  pdl=args.pdl)  # fmt: skip

    return {"append": append, "indexer": indexer, "topk": topk, "attention": attention}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--len", type=int, default=32768, help="cached tokens per request")
    parser.add_argument("--next-n", type=int, default=1, help="new tokens per request (MTP)")
    parser.add_argument("--heads", type=int, default=128, help="attention query heads")
    parser.add_argument("--index-heads", type=int, default=64)
    parser.add_argument("--topk", type=int, default=2048)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pdl", action="store_true",
                        help="programmatic dependent launch for every step (sm_90)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--dump-logits", metavar="FILE",
                        help="write the indexer's logits [batch * next_n, len] (float32) and exit")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no GPU (use --device cpu for a check of the sequence)")
    layer = make_layer(args, args.device)
    fns = steps(args, layer)
    if args.dump_logits:
        fns["indexer"]()
        rows = layer["logits"][:, :args.len].contiguous().float().cpu().numpy()
        rows.tofile(args.dump_logits)
        print(f"{args.dump_logits}: the indexer's logits, {rows.shape[0]} rows of {rows.shape[1]} "
              f"float32 (bench-op topk --len {args.len} --logits-file {args.dump_logits})")
        return 0
    if args.device == "cpu":
        for fn in fns.values():
            fn()
        finite = bool(torch.isfinite(layer["out"].float()).all())
        print(f"cpu: the four steps ran; out {list(layer['out'].shape)}, finite: {finite}")
        return 0 if finite else 1

    rows = {name: time_graph(mt.capture_graph(fn), args.replays) for name, fn in fns.items()}
    whole = mt.capture_graph(lambda: [fn() for fn in fns.values()])
    rows["whole step (one graph)"] = time_graph(whole, args.replays)
    parts = sum(rows[name] for name in fns)
    finite = bool(torch.isfinite(layer["out"].float()).all())
    name = torch.cuda.get_device_name()
    print(f"device: {name}; batch {args.batch}, len {args.len}, next_n {args.next_n}, "
          f"h_q {args.heads}, indexer heads {args.index_heads}, topk {args.topk}, page {PAGE}, "
          f"pdl {args.pdl}, mlakit {mlakit.__version__}")  # fmt: skip
    print(f"{'step':<24} {'us':>10}")
    for step, us in rows.items():
        print(f"{step:<24} {us:>10.1f}")
    print(f"{'sum of the four':<24} {parts:>10.1f}")
    print(f"whole / sum: {rows['whole step (one graph)'] / parts:.3f}; out finite: {finite}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "args": vars(args), "us": rows, "sum_us": parts,
                       "out_finite": finite}, f, indent=1)  # fmt: skip
    return 0 if finite else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
