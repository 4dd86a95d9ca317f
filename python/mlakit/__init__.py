"""mlakit: Multi-head Latent Attention (DeepSeek-V3) decode over a paged KV cache.

    import mlakit
    decoder = mlakit.Decoder(h_q=128, page_size=64, max_batch=64, max_seq_len=32768)
    out = decoder.run(q, kv_cache, block_table, seq_lens)   # arrays of any framework

``mlakit.ops`` has the other steps of a V3.2 decode layer (cache append, indexer logits,
top-k), ``mlakit.cp`` the context-parallel sharding helpers and merge. ``mlakit.torch`` (PyTorch
2.4+) adds the ``mlakit::decode`` custom op (and the ops') for torch.compile and CUDA graphs;
``mlakit.compat`` has drop-in replacements for FlashMLA's and FlashInfer's MLA decode. See
docs/python.md.
"""

from __future__ import annotations

import importlib
from typing import Any, Dict

from . import _mlakit, compat, cp, ops
from ._decoder import Decoder

__version__: str = _mlakit.__version__

__all__ = ["Decoder", "compat", "cp", "info", "ops", "__version__"]


def info() -> Dict[str, Any]:
    """The library version, the CUDA device found (or why none) and the compiled-in backends.

    Returns:
        ``{"version": str, "device": {...}, "backends": [{...}, ...]}``: the device dict has
        present, device, name, sm ("90"), sm_count, global_mem_bytes, l2_bytes and error; each
        backend dict has name, summary, supports, available, unavailable_reason and
        device_memory (whether its arrays live in CUDA memory).
    """
    return {
        "version": __version__,
        "device": _mlakit.current_device(),
        "backends": _mlakit.list_backends(),
    }


def __getattr__(name: str) -> Any:
    # `mlakit.torch` on first use: it imports torch, which plain NumPy users need not load.
    if name == "torch":
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'mlakit' has no attribute {name!r}")
