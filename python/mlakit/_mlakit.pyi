"""Type stubs of the C++ extension (python/src/module.cc); use the mlakit package instead."""

from typing import Any, Dict, List, Optional

__version__: str

def current_device() -> Dict[str, Any]: ...
def list_backends() -> List[Dict[str, Any]]: ...
def _raise_status(code: int, message: str) -> None: ...

class Decoder:
    def __init__(
        self,
        h_q: int,
        s_q: int,
        page_size: int,
        max_batch: int,
        max_seq_len: int,
        q_dtype: str,
        kv_dtype: str,
        out_dtype: str,
        kv_layout: str,
        causal: bool,
        sinks: bool,
        topk: int,
        lse: bool,
        pdl: bool,
        backend: str,
        tactic: int,
        tune_cache: str,
        extra_topk: int,
        extra_page_size: int,
    ) -> None: ...
    @property
    def backend(self) -> str: ...
    @property
    def tactic(self) -> int: ...
    @property
    def workspace_bytes(self) -> int: ...
    @property
    def device_memory(self) -> bool: ...
    @property
    def device(self) -> int: ...
    @property
    def problem(self) -> Dict[str, Any]: ...
    def describe(self) -> str: ...
    def run(
        self,
        q: Any,
        kv_cache: Any,
        block_table: Any,
        seq_lens: Any,
        out: Any,
        lse: Any,
        sinks: Any,
        indices: Any,
        topk_lens: Any,
        workspace: Any,
        softmax_scale: Optional[float],
        q_scale: Any,
        k_scale: Any,
        stream: int,
        extra_kv_cache: Any,
        extra_indices: Any,
        extra_topk_lens: Any,
    ) -> None: ...
