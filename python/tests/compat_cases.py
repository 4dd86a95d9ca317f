"""Shared pieces of the shims' CPU tests (test_compat_upstream_cpu.py,
test_compat_upstream_findings_cpu.py): workloads as CPU tensors and the calls of each shim."""

import math

import numpy as np
import torch

import mlakit.torch as mlakit_torch
from mlakit import compat
from numpy_reference import make_workload

LOG2_E = 1 / math.log(2)


def tensors(w):
    """A numpy_reference workload as CPU tensors (bf16 q and cache)."""
    return (
        torch.from_numpy(w.q.view(np.int16)).view(torch.bfloat16),
        torch.from_numpy(w.kv_cache.view(np.int16)).view(torch.bfloat16),
        torch.from_numpy(w.block_table),
        torch.from_numpy(w.seq_lens),
    )


def mlakit_decode(q, kv, table, lens, scale, **kwargs):
    return mlakit_torch.decode(q, kv, table, lens, softmax_scale=scale, return_lse=True, **kwargs)


def flashmla_workload(seed=0, b=3, s_q=2, h=8):
    w = make_workload(np.random.default_rng(seed), b=b, s_q=s_q, h_q=h, page_size=64,
                      seq_lens=[0, 70, 130][:b])  # fmt: skip
    q, kv, table, lens = tensors(w)
    return q, kv.unsqueeze(2), table, lens  # FlashMLA's [num_blocks, page, 1, 576]


def trtllm(q, kv, table, lens, **kwargs):
    table = kwargs.pop("block_tables", table)
    return compat.trtllm_batch_decode_with_kv_cache_mla(
        q, kv, None, 128, 512, 64, table, lens, 256, bmm1_scale=0.06, **kwargs)  # fmt: skip


def csr(w, rng):
    """The workload's block table as FlashInfer's CSR lists (page ids in request order)."""
    pages = [(int(n) + w.page_size - 1) // w.page_size for n in w.seq_lens]
    indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    indices = np.concatenate([w.block_table[i, :n] for i, n in enumerate(pages)]).astype(np.int32)
    return torch.from_numpy(indptr), torch.from_numpy(indices)


class Paged:
    """A workload for the wrapper: q [b * s_q, h, 576] and cache [pages, page, 576] whose
    q_nope/q_pe and ckv/kpe halves are views of one buffer (SGLang's layout)."""

    def __init__(self, seed, b, s_q, h, page, seq_lens):
        w = make_workload(np.random.default_rng(seed), b=b, s_q=s_q, h_q=h, page_size=page,
                          seq_lens=seq_lens)  # fmt: skip
        w.page_size = page
        self.q4, self.kv, self.table, self.lens = tensors(w)
        self.q = self.q4.reshape(b * s_q, h, 576)
        self.kv_indptr, self.kv_indices = csr(w, None)
        self.qo_indptr = torch.arange(b + 1, dtype=torch.int32) * s_q
        self.b, self.s_q, self.h, self.page = b, s_q, h, page

    def plan(self, wrapper, causal=True, scale=0.07):
        wrapper.plan(self.qo_indptr, self.kv_indptr, self.kv_indices, self.lens, self.h, 512, 64,
                     self.page, causal, scale, torch.bfloat16, torch.bfloat16)  # fmt: skip

    def want(self, scale=0.07, causal=True):
        out, lse = mlakit_decode(self.q4, self.kv, self.table, self.lens, scale, causal=causal)
        return out.reshape(-1, self.h, 512), lse.reshape(-1, self.h)


def wrapper(**kwargs):
    return compat.BatchMLAPagedAttentionWrapper(torch.empty(16, dtype=torch.int8), **kwargs)
