#!/usr/bin/env python3
"""torch.topk timed the way `mlakit bench-op topk` times mlakit's top-k, for a side-by-side in one
run (issue 36: mlakit's top-k >= 5x faster than torch.topk on [batch, 128K] rows).

Both: one input tensor that stays in place (warm in L2 as far as it fits), the call captured in a
CUDA graph, `--replays` replays after `--warmup` ones, CUDA events around each replay, median.
The input is N(0, 1) float32 [batch, len], as bench-op's logits; torch.topk(x, k, dim=1) returns
values and indices (sorted), mlakit the k positions as cache slots in position order, so the two
do slightly different work; torch has no cheaper call for the same selection.

    python3 bench/torch_topk.py --batch 1,64 --len 32768,131072 --k 2048

Prints a table (and with --json writes it). Needs PyTorch and a GPU.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_timing import time_graph  # noqa: E402


def ints(text):
    return [int(v) for v in text.split(",")]


def time_topk(batch, length, k, replays, warmup):
    x = torch.randn(batch, length, device="cuda", dtype=torch.float32)
    # mlakit.torch.capture_graph's recipe, written out: this script runs without the mlakit
    # package (on the GPU machine it may time torch before the package is installed).
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            torch.topk(x, k, dim=1)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.topk(x, k, dim=1)
    return time_graph(graph, replays, warmup)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=ints, default=[1, 64])
    parser.add_argument("--len", type=ints, default=[32768, 131072])
    parser.add_argument("--k", type=int, default=2048)
    parser.add_argument("--replays", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("torch_topk.py: needs a GPU", file=sys.stderr)
        return 2
    print(f"device: {torch.cuda.get_device_name()} (torch {torch.__version__})")
    print(f"{'batch':>6} {'len':>8} {'k':>6} {'time_us':>10}")
    rows = []
    for batch in args.batch:
        for length in args.len:
            us = time_topk(batch, length, args.k, args.replays, args.warmup)
            rows.append({"batch": batch, "len": length, "k": args.k, "time_us": us})
            print(f"{batch:>6} {length:>8} {args.k:>6} {us:>10.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
