"""``flashinfer.prefill``: FlashInfer's prefill attention is not part of mlakit. The names exist
so that test modules mixing prefill and MLA decode tests import; using them raises
NotImplementedError naming them."""

__all__ = ["BatchPrefillWithRaggedKVCacheWrapper", "single_prefill_with_kv_cache"]


def _refusal(name: str) -> NotImplementedError:
    return NotImplementedError(
        f"{name}: FlashInfer's prefill attention is not supported by mlakit (MLA decode only)"
    )


def single_prefill_with_kv_cache(*args, **kwargs):
    raise _refusal("single_prefill_with_kv_cache")


class BatchPrefillWithRaggedKVCacheWrapper:
    def __init__(self, *args, **kwargs):
        raise _refusal("BatchPrefillWithRaggedKVCacheWrapper")
