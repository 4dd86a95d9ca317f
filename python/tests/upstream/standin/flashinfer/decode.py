"""``flashinfer.decode``: the MLA decode entry point FlashInfer re-exports here."""

from mlakit.compat import trtllm_batch_decode_with_kv_cache_mla

__all__ = ["trtllm_batch_decode_with_kv_cache_mla"]
