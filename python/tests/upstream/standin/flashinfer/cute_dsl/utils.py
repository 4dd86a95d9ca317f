"""``flashinfer.cute_dsl.utils``."""

from .. import utils as _utils

__all__ = ["is_cute_dsl_arch_supported"]


def is_cute_dsl_arch_supported(major: int, minor: int) -> bool:
    """Whether the "cute-dsl" backend can run: while every FlashInfer backend is reported (see
    ``flashinfer.utils``), yes, since the shims serve it with mlakit; otherwise FlashInfer's rule
    (sm_100 to sm_110)."""
    return _utils.reports_every_backend() or major in (10, 11)
