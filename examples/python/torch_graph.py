"""A decode on PyTorch tensors through the mlakit::decode custom op, captured once in a CUDA graph
and replayed with new lengths written into the captured tensor (a serving loop's decode step).
Without a GPU the same op runs eagerly on the cpu backend (no graph)."""

import torch

import mlakit.torch as mt

device = "cuda" if torch.cuda.is_available() else "cpu"
b, h_q, page_size, max_pages = 4, 16, 64, 8
gen = torch.Generator().manual_seed(0)
q = torch.randn(b, 1, h_q, 576, generator=gen).to(device, torch.bfloat16)  # [b, s_q, h_q, 576]
kv_cache = torch.randn(b * max_pages, page_size, 576, generator=gen).to(device, torch.bfloat16)
block_table = torch.randperm(b * max_pages, generator=gen).to(device, torch.int32)
block_table = block_table.reshape(b, max_pages)  # each request's pages, in order
seq_lens = torch.tensor([500, 37, 0, 512], dtype=torch.int32, device=device)  # up to 8 pages
out = torch.empty(b, 1, h_q, 512, dtype=torch.bfloat16, device=device)


def step():
    """The decode step: reads q, the cache, the block table and the lengths; writes out."""
    mt.decode(q, kv_cache, block_table, seq_lens, out=out)


if device == "cuda":
    # Warm-up calls on a side stream (they create the decoder), then the capture.
    run = mt.capture_graph(step).replay
else:
    run = step

for lens in ([500, 37, 0, 512], [1, 64, 65, 300]):  # new lengths each step, same tensors
    seq_lens.copy_(torch.tensor(lens, dtype=torch.int32))
    run()
    want = mt.decode(q, kv_cache, block_table, seq_lens)  # an eager decode of the same inputs
    assert torch.equal(out, want), lens
print(device, tuple(out.shape), out.dtype)
