"""``flashinfer.jit.attention``: module generators of FlashInfer's JIT (see ``flashinfer.jit``)."""

__all__ = ["gen_batch_mla_module", "gen_batch_prefill_module", "gen_single_prefill_module"]


def _generator(name: str):
    def refuse(*args, **kwargs):
        raise NotImplementedError(
            f"{name}: FlashInfer's JIT is not supported by mlakit (its kernels are prebuilt)"
        )

    refuse.__name__ = name
    return refuse


gen_batch_mla_module = _generator("gen_batch_mla_module")
gen_batch_prefill_module = _generator("gen_batch_prefill_module")
gen_single_prefill_module = _generator("gen_single_prefill_module")
