"""``flashinfer.mla``: mlakit's shims, and records of the MLA dimensions FlashInfer's tests
parametrize over (written here: they describe models, not kernels).

Of these dimensions mlakit computes DeepSeek's (kv_lora_rank 512, qk_rope_head_dim 64); the
shims refuse the others by name (NotImplementedError).
"""

import dataclasses

from mlakit.compat import BatchMLAPagedAttentionWrapper, trtllm_batch_decode_with_kv_cache_mla

__all__ = [
    "BatchMLAPagedAttentionWrapper",
    "MLAHeadDimensions",
    "MLALayerDimensions",
    "deepseek_mla_dimensions",
    "nope_mla_dimensions",
    "smaller_mla_dimensions",
    "supported_mla_head_dimensions",
    "supported_mla_layer_dimensions",
    "trtllm_batch_decode_with_kv_cache_mla",
]


@dataclasses.dataclass(frozen=True)
class MLAHeadDimensions:
    """One MLA head: qk_nope_head_dim and v_head_dim are the non-absorbed head's, kv_lora_rank
    the latent (d_v after absorption), qk_rope_head_dim the RoPE part (d_qk = kv_lora_rank +
    qk_rope_head_dim)."""

    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    kv_lora_rank: int


@dataclasses.dataclass(frozen=True)
class MLALayerDimensions:
    head_dimensions: MLAHeadDimensions
    num_heads: int


# DeepSeek V2/V3/R1 and GLM-5 (d_qk 576, d_v 512).
deepseek_mla_dimensions = MLAHeadDimensions(
    qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, kv_lora_rank=512
)
# A smaller latent (d_qk 320, d_v 256).
smaller_mla_dimensions = MLAHeadDimensions(
    qk_nope_head_dim=64, qk_rope_head_dim=64, v_head_dim=128, kv_lora_rank=256
)
# NoPE MLA (no RoPE part, d_qk 512).
nope_mla_dimensions = MLAHeadDimensions(
    qk_nope_head_dim=256, qk_rope_head_dim=0, v_head_dim=256, kv_lora_rank=512
)

supported_mla_head_dimensions = [
    deepseek_mla_dimensions,
    smaller_mla_dimensions,
    nope_mla_dimensions,
]

supported_mla_layer_dimensions = [
    MLALayerDimensions(head_dimensions=deepseek_mla_dimensions, num_heads=128),  # DeepSeek R1
    MLALayerDimensions(head_dimensions=deepseek_mla_dimensions, num_heads=64),  # GLM-5
    MLALayerDimensions(head_dimensions=smaller_mla_dimensions, num_heads=32),
]
