"""Timing of a captured CUDA graph for the bench scripts (bench/v32_layer_bench.py,
bench/torch_topk.py): CUDA events around each replay, the median in microseconds, as
`mlakit bench` and `mlakit bench-op` time their graphs. PyTorch only."""

import statistics

import torch


def time_graph(graph, replays, warmup=3):
    """Median microseconds of a replay of `graph` (a torch.cuda.CUDAGraph), after `warmup` ones."""
    for _ in range(warmup):
        graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    return statistics.median(times)
