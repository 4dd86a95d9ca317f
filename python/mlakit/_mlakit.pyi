"""Type stubs of the C++ extension (python/src/module.cc); use the mlakit package instead."""

from typing import Any, Dict, List, Optional

__version__: str

def current_device() -> Dict[str, Any]: ...
def list_backends() -> List[Dict[str, Any]]: ...
def _raise_status(code: int, message: str) -> None: ...

# mlakit::ops (src/ops.cc); device -1 is host memory, else a CUDA device id.
def append_kv(
    kv: Any, kv_dtype: str, slot_mapping: Any, kv_cache: Any, cache_dtype: str, kv_layout: str,
    page_size: int, k_scale: Any, device: int, stream: int,
) -> None: ...
def append_indexer(
    k: Any, k_dtype: str, slot_mapping: Any, index_cache: Any, page_size: int, scale: str,
    device: int, stream: int,
) -> None: ...
def indexer_logits(
    q: Any, weights: Any, index_cache: Any, page_size: int, block_table: Any, seq_lens: Any,
    logits: Any, device: int, stream: int,
) -> None: ...
def topk_indices(
    logits: Any, seq_lens: Any, block_table: Any, page_size: int, next_n: int, max_len: int,
    indices: Any, positions: Any, workspace: Any, deterministic: bool, device: int, stream: int,
) -> None: ...
def topk_workspace_bytes(batch: int, next_n: int, max_len: int, k: int) -> int: ...
def merge_partials(
    partial_out: Any, partial_lse: Any, sinks: Any, out: Any, lse: Any, dtype: str, device: int,
    stream: int, lse_base2: bool,
) -> None: ...

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
        cp_world: int,
        cp_rank: int,
        cp_interleave: int,
        lse_base2: bool,
        var_q: bool,
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
        cu_seqlens_q: Any,
    ) -> None: ...
