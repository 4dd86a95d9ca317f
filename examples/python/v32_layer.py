"""The attention of one DeepSeek V3.2 decode layer with mlakit, on the cpu device (NumPy arrays).

The sequence of docs/ops.md: (1) append the new tokens' latent + RoPE to the 656-byte fp8 cache
and their indexer keys to the indexer cache, (2) the lightning indexer's logits, (3) the top-k
positions as sparse-decode indices, (4) sparse attention over them. With CUDA tensors (PyTorch)
the same calls run on the GPU on the current stream, with no host synchronization (the indexer's
logits need sm_89 or newer). Sizes are small so that it runs in a second on a CPU; V3.2 has
h_q 128, 64 indexer heads and topk 2048.
"""

import ml_dtypes
import numpy as np

import mlakit

BF16, E4M3 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn
H_Q, INDEX_HEADS, PAGE_SIZE, TOPK = 16, 8, 64, 128


def make_caches(rng, context_lens, num_pages):
    """Caches holding each request's context (written by the same appends), and its pages."""
    block_table = np.full((len(context_lens), num_pages // len(context_lens)), -1, np.int32)
    pages = rng.permutation(num_pages).astype(np.int32)
    block_table[:] = pages.reshape(len(context_lens), -1)
    kv_cache = np.zeros((num_pages, PAGE_SIZE, 656), np.uint8)  # V3.2: 656 bytes a token
    index_cache = np.zeros(mlakit.ops.indexer_cache_shape(num_pages, PAGE_SIZE), np.uint8)
    for i, n in enumerate(context_lens):
        slots = slots_of(block_table[i], np.arange(n))
        mlakit.ops.append_kv(rng.standard_normal((n, 576)).astype(BF16), slots, kv_cache,
                             kv_layout="v32")  # fmt: skip
        mlakit.ops.append_indexer(rng.standard_normal((n, 128)).astype(BF16), slots, index_cache)
    return kv_cache, index_cache, block_table


def slots_of(table_row, positions):
    """Cache slots (page * page_size + offset) of a request's positions, as int64."""
    positions = np.asarray(positions, np.int64)
    return table_row[positions // PAGE_SIZE].astype(np.int64) * PAGE_SIZE + positions % PAGE_SIZE


def decode_step(decoder, kv_cache, index_cache, block_table, seq_lens, new, q, index_q, weights):
    """One layer's attention for one new token per request; seq_lens counts it afterwards."""
    # 1. The new tokens into both caches, at position seq_lens[i] of request i.
    slots = np.concatenate([slots_of(block_table[i], [n]) for i, n in enumerate(seq_lens)])
    mlakit.ops.append_kv(new["kv"], slots, kv_cache, kv_layout="v32")
    mlakit.ops.append_indexer(new["index_k"], slots, index_cache)
    seq_lens = seq_lens + 1
    # 2. The indexer: logits [b, max_len] over every cached token (-inf past the length).
    logits = mlakit.ops.indexer_logits(index_q, weights, index_cache, block_table, seq_lens)
    # 3. The top-k cache slots per query token: [b, 1, TOPK] int32, -1 padded.
    indices = mlakit.ops.topk_indices(logits, seq_lens, block_table, k=TOPK, page_size=PAGE_SIZE)
    # 4. Sparse attention over them.
    out = decoder.run(q, kv_cache, indices=indices)
    return out, seq_lens, logits, indices


def main(seed=0):
    rng = np.random.default_rng(seed)
    context_lens = np.array([90, 300], np.int32)  # one below TOPK: every token is kept
    kv_cache, index_cache, block_table = make_caches(rng, context_lens, num_pages=12)
    b = len(context_lens)
    decoder = mlakit.Decoder(h_q=H_Q, page_size=PAGE_SIZE, max_batch=b, max_seq_len=384,
                             kv_layout="v32", topk=TOPK, backend="cpu")  # fmt: skip
    new = {"kv": rng.standard_normal((b, 576)).astype(BF16),
           "index_k": rng.standard_normal((b, 128)).astype(BF16)}  # fmt: skip
    q = rng.standard_normal((b, 1, H_Q, 576)).astype(BF16)
    index_q = rng.standard_normal((b, 1, INDEX_HEADS, 128)).astype(E4M3)
    weights = (rng.standard_normal((b, INDEX_HEADS)) / INDEX_HEADS).astype(np.float32)
    out, seq_lens, logits, indices = decode_step(
        decoder, kv_cache, index_cache, block_table, context_lens, new, q, index_q, weights
    )
    return dict(out=out, seq_lens=seq_lens, logits=logits, indices=indices, q=q,
                kv_cache=kv_cache, block_table=block_table, new=new)  # fmt: skip


if __name__ == "__main__":
    result = main()
    kept = (result["indices"] >= 0).sum(axis=-1).ravel()
    print("out", result["out"].shape, result["out"].dtype, "tokens kept", kept.tolist())
