"""Stand-in for FlashMLA's Python package (deepseek-ai/FlashMLA ``flash_mla``): the names its
decode tests import, computed by ``mlakit.compat``. Put the folder above this one on PYTHONPATH
(scripts/upstream_tests.py does) and FlashMLA's own tests run against mlakit unchanged.

Only the decode API is served; FlashMLA's prefill and varlen attention (``flash_mla_sparse_fwd``,
``flash_attn_varlen_*``) are not part of mlakit and raise NotImplementedError by name.
"""

from mlakit.compat import FlashMLASchedMeta, flash_mla_with_kvcache, get_mla_metadata

__version__ = "1.0.0"

__all__ = [
    "FlashMLASchedMeta",
    "get_mla_metadata",
    "flash_mla_with_kvcache",
    "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_mla_sparse_fwd",
]


def _prefill(name: str):
    def refuse(*args, **kwargs):
        raise NotImplementedError(
            f"{name}: FlashMLA's prefill attention is not supported by mlakit (decode only)"
        )

    refuse.__name__ = name
    return refuse


flash_mla_sparse_fwd = _prefill("flash_mla_sparse_fwd")
flash_attn_varlen_func = _prefill("flash_attn_varlen_func")
flash_attn_varlen_qkvpacked_func = _prefill("flash_attn_varlen_qkvpacked_func")
flash_attn_varlen_kvpacked_func = _prefill("flash_attn_varlen_kvpacked_func")
