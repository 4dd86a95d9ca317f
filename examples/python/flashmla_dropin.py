"""Code written for FlashMLA's decode API, run by mlakit: only the import changes
(`from flash_mla import ...` becomes `from mlakit.compat import ...`). On a GPU with CUDA tensors
mlakit's kernels run; here, without one, the cpu backend does, on CPU tensors."""

import torch

from mlakit.compat import flash_mla_with_kvcache, get_mla_metadata

device = "cuda" if torch.cuda.is_available() else "cpu"
b, s_q, h_q, h_kv, d, dv, page_size = 2, 2, 16, 1, 576, 512, 64  # two query tokens (MTP)
gen = torch.Generator().manual_seed(0)
cache_seqlens = torch.tensor([100, 37], dtype=torch.int32, device=device)
block_table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32, device=device)
q = torch.randn(b, s_q, h_q, d, generator=gen).to(device, torch.bfloat16)
k_cache = torch.randn(4, page_size, h_kv, d, generator=gen).to(device, torch.bfloat16)

# As FlashMLA's README calls it: the metadata once per batch, then every layer's decode.
tile_scheduler_metadata, num_splits = get_mla_metadata(cache_seqlens, s_q * h_q // h_kv, h_kv)
out, lse = flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, dv,
                                  tile_scheduler_metadata, num_splits, causal=True)  # fmt: skip
assert out.shape == (b, s_q, h_q, dv) and lse.shape == (b, h_q, s_q)  # FlashMLA's shapes
assert torch.isfinite(out.float()).all()
print(device, tuple(out.shape), tuple(lse.shape))
