"""Drop-in replacements for the MLA decode calls of FlashMLA and FlashInfer.

Switching is a change of import::

    from mlakit.compat import flash_mla_with_kvcache, get_mla_metadata
    from mlakit.compat import flash_mla_with_kvcache_fp8, get_mla_metadata_dense_fp8
    from mlakit.compat import trtllm_batch_decode_with_kv_cache_mla
    from mlakit.compat import BatchMLAPagedAttentionWrapper

The signatures and return values follow the originals (FlashMLA's ``flash_mla_interface.py`` of
its main branch and the older form, the fp8 entry points of vLLM's FlashMLA fork in
``vllm.attention.ops.flashmla``, and FlashInfer 0.6's ``flashinfer.mla``); every argument is
implemented, or raises (NotImplementedError where mlakit lacks the feature) with a message naming
it. PyTorch tensors go through the ``mlakit::decode`` custom op (torch.compile and CUDA graphs
work); other arrays through a cached ``mlakit.Decoder``.

This module only re-exports; by role:

* _flashmla_metadata.py: ``get_mla_metadata``, ``get_mla_metadata_dense_fp8``,
  ``FlashMLASchedMeta``.
* _flashmla.py: ``flash_mla_with_kvcache``, ``flash_mla_with_kvcache_fp8``.
* _flashinfer_trtllm.py: ``trtllm_batch_decode_with_kv_cache_mla``.
* _flashinfer_wrapper.py: ``BatchMLAPagedAttentionWrapper``.
* _flashinfer.py: what the two FlashInfer shims share; _compat_common.py: what all of them share
  (refusals by name, dtype and scale checks, the decode call).
"""

from __future__ import annotations

# Helpers the shims share, also importable from here.
from ._compat_common import (  # noqa: F401
    _array_dtype,
    _contiguous,
    _decode,
    _not_supported,
    _scale_array,
)
from ._flashinfer_trtllm import trtllm_batch_decode_with_kv_cache_mla
from ._flashinfer_wrapper import BatchMLAPagedAttentionWrapper
from ._flashmla import flash_mla_with_kvcache, flash_mla_with_kvcache_fp8
from ._flashmla_metadata import FlashMLASchedMeta, get_mla_metadata, get_mla_metadata_dense_fp8

__all__ = [
    "FlashMLASchedMeta",
    "BatchMLAPagedAttentionWrapper",
    "get_mla_metadata",
    "get_mla_metadata_dense_fp8",
    "flash_mla_with_kvcache",
    "flash_mla_with_kvcache_fp8",
    "trtllm_batch_decode_with_kv_cache_mla",
]
