"""FlashMLA's scheduling metadata (deepseek-ai/FlashMLA, and the fp8 entry points of vLLM's
fork), re-exported by ``mlakit.compat``: ``get_mla_metadata`` in both of its forms,
``get_mla_metadata_dense_fp8``, the ``FlashMLASchedMeta`` handle and the checks FlashMLA makes of
it. mlakit plans its split on the device inside each decode, so the metadata carries no plan.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Optional, Tuple

from . import _arrays
from ._compat_common import _not_supported


def _placeholder_metadata(
    cache_seqlens: Any, num_q_tokens_per_head_k: int, num_heads_k: int
) -> Tuple[Any, Any]:
    """Zero-filled tile_scheduler_metadata [num_sm_parts, 8] and num_splits [b + 1] int32."""
    batch = int(cache_seqlens.shape[0])
    sm_count = 1
    kind = _arrays.framework(cache_seqlens)
    if kind == "torch" and cache_seqlens.is_cuda:
        torch = sys.modules["torch"]
        sm_count = torch.cuda.get_device_properties(cache_seqlens.device).multi_processor_count
    # FlashMLA's split: SMs per KV head and per 64-row block of query heads.
    blocks_m = max(1, -(-int(num_q_tokens_per_head_k) // 64))
    parts = max(1, sm_count // max(1, int(num_heads_k)) // blocks_m)
    if kind == "torch":
        torch = sys.modules["torch"]
        device = cache_seqlens.device
        return (
            torch.zeros((parts, 8), dtype=torch.int32, device=device),
            torch.zeros((batch + 1,), dtype=torch.int32, device=device),
        )
    import numpy

    return numpy.zeros((parts, 8), numpy.int32), numpy.zeros((batch + 1,), numpy.int32)


@dataclasses.dataclass
class FlashMLASchedMeta:
    """FlashMLA's scheduling handle (upstream main): what ``get_mla_metadata()`` returns and
    ``flash_mla_with_kvcache`` takes as ``tile_scheduler_metadata``.

    FlashMLA fills it on the first call and checks later calls against it. mlakit plans its split
    on the device inside each decode, so ``tile_scheduler_metadata`` and ``num_splits`` stay None;
    ``config`` records the first call's shapes and flags as FlashMLA's does, and a later call that
    disagrees raises ``ValueError`` naming the field (FlashMLA asserts), since a handle is valid
    only for one configuration.
    """

    @dataclasses.dataclass
    class Config:
        b: int
        s_q: int
        h_q: int
        page_block_size: int
        h_k: int
        causal: bool
        is_fp8_kvcache: bool
        topk: Optional[int]
        extra_page_block_size: Optional[int]
        extra_topk: Optional[int]

    have_initialized: bool = False
    config: Optional[Config] = None
    tile_scheduler_metadata: Any = None
    num_splits: Any = None


def get_mla_metadata(*args: Any, **kwargs: Any) -> Tuple[Any, Any]:
    """FlashMLA's ``get_mla_metadata``, in both of its forms.

    * No arguments (FlashMLA's main branch): returns ``(FlashMLASchedMeta(), None)``.
    * The older form ``get_mla_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k,
      num_heads_q=None, is_fp8_kvcache=False, topk=None)`` (also vLLM's fork; the older keyword
      ``num_heads_per_head_k`` is accepted for ``num_q_tokens_per_head_k``): returns zero-filled
      placeholders of its shapes, ``tile_scheduler_metadata`` [num_sm_parts, 8] int32 and
      ``num_splits`` [batch_size + 1] int32 on ``cache_seqlens``' device, so that code storing or
      copying them (into CUDA-graph buffers, say) keeps working.

    mlakit computes its split-KV partition on the device inside each decode: either result is
    only passed back to ``flash_mla_with_kvcache``, which accepts both.
    """
    if not args and "cache_seqlens" not in kwargs:
        if kwargs:
            raise TypeError(
                f"get_mla_metadata() got keyword arguments {sorted(kwargs)} without "
                "cache_seqlens (the no-argument form takes none)"
            )
        return FlashMLASchedMeta(), None
    return _old_metadata(*args, **kwargs)


def _old_metadata(
    cache_seqlens: Any,
    num_q_tokens_per_head_k: Optional[int] = None,
    num_heads_k: int = 1,
    num_heads_q: Optional[int] = None,
    is_fp8_kvcache: bool = False,
    topk: Optional[int] = None,
    **kwargs: Any,
) -> Tuple[Any, Any]:
    if num_q_tokens_per_head_k is None:
        num_q_tokens_per_head_k = kwargs.pop("num_heads_per_head_k", None)
    if kwargs:
        raise TypeError(f"get_mla_metadata() got unexpected keyword arguments {sorted(kwargs)}")
    if num_q_tokens_per_head_k is None:
        raise TypeError("get_mla_metadata() missing argument 'num_q_tokens_per_head_k'")
    return _placeholder_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k)


def _check_sched_meta(
    sched_meta: Any,
    num_splits: Any,
    q: Any,
    k_cache: Any,
    causal: bool,
    is_fp8_kvcache: bool,
    indices: Any,
    extra_k_cache: Any,
    extra_indices_in_kvcache: Any,
) -> None:
    """The checks FlashMLA makes of its scheduling handle and of the call's shape, by name:
    num_heads_k (one KV head), ``causal`` with sparse indices (FlashMLA's sparse decode has no
    causal mask), and, with a FlashMLASchedMeta, ``num_splits`` None and the configuration of its
    first call."""
    # ([num_pages, 1, page_size, 576], FlashInfer's form, is taken too.)
    if len(k_cache.shape) == 4 and int(k_cache.shape[2]) != 1 and int(k_cache.shape[1]) != 1:
        raise _not_supported(
            "k_cache", f"num_heads_k {int(k_cache.shape[2])} (shape {list(k_cache.shape)})",
            "MLA has one KV head: [num_blocks, page_block_size, 1, head_dim]",
        )  # fmt: skip
    if indices is not None and causal:
        raise ValueError(
            "causal: expected False with sparse indices (sparse decode attends to the listed "
            "tokens, there is no causal mask), given True"
        )
    if not isinstance(sched_meta, FlashMLASchedMeta):
        return
    if num_splits is not None:
        raise ValueError(
            "num_splits: expected None with a FlashMLASchedMeta (it stands in for both), given "
            f"{type(num_splits).__name__}"
        )
    config = FlashMLASchedMeta.Config(
        b=int(q.shape[0]),
        s_q=int(q.shape[1]),
        h_q=int(q.shape[2]),
        page_block_size=int(k_cache.shape[1]),
        h_k=int(k_cache.shape[2]) if len(k_cache.shape) == 4 else 1,
        causal=bool(causal),
        is_fp8_kvcache=bool(is_fp8_kvcache),
        topk=int(indices.shape[-1]) if indices is not None else None,
        extra_page_block_size=int(extra_k_cache.shape[1]) if extra_k_cache is not None else None,
        extra_topk=(
            int(extra_indices_in_kvcache.shape[-1])
            if extra_indices_in_kvcache is not None
            else None
        ),
    )
    if not sched_meta.have_initialized:
        sched_meta.have_initialized = True
        sched_meta.config = config
        return
    for field in dataclasses.fields(config):
        had, given = getattr(sched_meta.config, field.name), getattr(config, field.name)
        if had != given:
            raise ValueError(
                f"tile_scheduler_metadata: a FlashMLASchedMeta made by a call with {field.name} "
                f"{had}, given a call with {field.name} {given} (a handle serves one "
                "configuration: get a new one from get_mla_metadata())"
            )


def get_mla_metadata_dense_fp8(
    cache_seqlens: Any, num_q_tokens_per_head_k: int, num_heads_k: int
) -> Tuple[Any, Any]:
    """vLLM's ``get_mla_metadata_dense_fp8`` (the metadata of ``flash_mla_with_kvcache_fp8``):
    placeholders of its shapes, as ``get_mla_metadata`` returns; mlakit plans on the device.

    Returns:
        (tile_scheduler_metadata [num_sm_parts, 8] int32, num_splits [batch_size + 1] int32)
    """
    return _placeholder_metadata(cache_seqlens, num_q_tokens_per_head_k, num_heads_k)
