"""``flashinfer.utils``: the helpers FlashInfer's MLA tests import.

The tests gate each backend on the device: "trtllm-gen" on sm_100 (``get_compute_capability``
major 10), "xqa" on sm_120, "fa3" on sm_90a, "cutlass" on sm_100a. The shims serve every one of
these backend names with mlakit (or refuse it by name: "cutlass"), so on an H100 those gates would
only hide cases from mlakit. While the harness (mlakit_upstream_plugin) runs the upstream tests it
calls ``report_capability``, and then:

* ``get_compute_capability`` answers the capability the harness set for the running case: (12, 0)
  for a case whose ``backend`` parameter is "xqa", (10, 7) otherwise (sm_100-family, which also
  opens the ``use_fp16_softmax`` cases);
* ``is_sm90a_supported``, ``is_sm100a_supported`` and ``is_cute_dsl_arch_supported`` say yes.

Without the harness they answer for the real device, as FlashInfer's do. ``get_device_sm_count``
always reads the real device.
"""

from typing import Optional, Tuple

import torch
from mlakit._flashinfer import multi_ctas_kv_counter_bytes

__all__ = [
    "GPUArchitectureError",
    "device_support_pdl",
    "get_compute_capability",
    "get_device_sm_count",
    "get_trtllm_gen_multi_ctas_kv_counter_bytes",
    "has_flashinfer_jit_cache",
    "is_sm90a_supported",
    "is_sm100a_supported",
    "is_sm110a_supported",
    "report_capability",
    "reports_every_backend",
]

_reported: Optional[Tuple[int, int]] = None


class GPUArchitectureError(Exception):
    """FlashInfer's error for a kernel that the device's architecture lacks."""


def report_capability(capability: Optional[Tuple[int, int]]) -> None:
    """Set (or with None, clear) the capability that ``get_compute_capability`` answers."""
    global _reported
    _reported = None if capability is None else (int(capability[0]), int(capability[1]))


def reports_every_backend() -> bool:
    return _reported is not None


def _device_capability(device: torch.device) -> Tuple[int, int]:
    properties = torch.cuda.get_device_properties(device)
    return int(properties.major), int(properties.minor)


def get_compute_capability(device: torch.device) -> Tuple[int, int]:
    if device.type != "cuda":
        raise ValueError("device must be a cuda device")
    return _reported if _reported is not None else _device_capability(device)


def is_sm90a_supported(device: torch.device) -> bool:
    return reports_every_backend() or _device_capability(device)[0] == 9


def is_sm100a_supported(device: torch.device) -> bool:
    return reports_every_backend() or _device_capability(device)[0] == 10


def is_sm110a_supported(device: torch.device) -> bool:
    # Its one use in these tests skips large prefill cases on Thor (sm_110) for memory; no backend
    # hangs on it, so it answers for the real device.
    return _device_capability(device)[0] == 11


def device_support_pdl(device: torch.device) -> bool:
    return device.type == "cuda" and get_compute_capability(device)[0] >= 9


def get_device_sm_count(device: torch.device) -> int:
    return int(torch.cuda.get_device_properties(device).multi_processor_count)


def get_trtllm_gen_multi_ctas_kv_counter_bytes(
    batch_size: int, num_qo_heads: int, sm_count: int
) -> int:
    """Bytes of the trtllm-gen counter buffer (``multi_ctas_kv_counter_buffer``); mlakit does
    not use the buffer but checks it as FlashInfer does."""
    return multi_ctas_kv_counter_bytes(batch_size, num_qo_heads, sm_count)


def has_flashinfer_jit_cache() -> bool:
    """True: mlakit's kernels are built with the package, nothing is compiled at run time."""
    return True
