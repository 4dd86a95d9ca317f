"""Stand-in for FlashInfer's Python package (flashinfer-ai/flashinfer ``flashinfer``): the names
its MLA decode tests (``tests/attention/test_trtllm_gen_mla.py``, ``test_deepseek_mla.py``) import,
with the decode calls computed by ``mlakit.compat``. Put the folder above this one on PYTHONPATH
(scripts/upstream_tests.py does) and those tests run against mlakit unchanged.

* ``flashinfer.mla`` / ``flashinfer.decode``: ``trtllm_batch_decode_with_kv_cache_mla`` and
  ``BatchMLAPagedAttentionWrapper`` are mlakit's shims; the MLA dimension records are our own.
* ``flashinfer.utils``: capability checks and small helpers (see its docstring for how the
  device's capability is reported while the upstream tests run).
* ``flashinfer.prefill``, ``flashinfer.jit``: FlashInfer's prefill attention and its JIT are not
  part of mlakit; the names exist so that the test modules import, and calling them raises
  NotImplementedError naming them.
"""

from . import cute_dsl, decode, jit, mla, prefill, utils
from .prefill import single_prefill_with_kv_cache

__version__ = "0.6.18+mlakit"

__all__ = ["cute_dsl", "decode", "jit", "mla", "prefill", "utils", "single_prefill_with_kv_cache"]
