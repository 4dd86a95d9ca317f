"""``flashinfer.cute_dsl``: FlashInfer's CuTe DSL kernels; its backend name ("cute-dsl") means
mlakit's "auto" in the shims, so the capability check says yes (see ``flashinfer.utils``)."""

from . import utils

__all__ = ["utils"]
