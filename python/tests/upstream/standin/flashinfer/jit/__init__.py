"""``flashinfer.jit``: mlakit has no JIT (its kernels are built with the package), so there is
nothing to build; ``flashinfer.utils.has_flashinfer_jit_cache()`` says so and the tests' warm-up
fixtures do not call these. Calling them raises NotImplementedError naming them."""

from . import attention

__all__ = ["attention", "build_jit_specs"]


def build_jit_specs(*args, **kwargs):
    raise NotImplementedError(
        "build_jit_specs: FlashInfer's JIT is not supported by mlakit (its kernels are prebuilt)"
    )
