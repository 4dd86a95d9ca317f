import numpy as np
import mlakit

# A decode batch: 2 requests with 100 and 37 cached tokens, 16 query heads, pages of 64 tokens.
h_q, page_size = 16, 64
rng = np.random.default_rng(0)
q = rng.standard_normal((2, 1, h_q, 576)).astype(np.float16)  # [b, s_q, h_q, 576]
kv_cache = rng.standard_normal((3, page_size, 576)).astype(np.float16)  # [pages, page_size, 576]
block_table = np.array([[0, 1], [2, 0]], dtype=np.int32)  # each request's pages, in order
seq_lens = np.array([100, 37], dtype=np.int32)

decoder = mlakit.Decoder(h_q=h_q, page_size=page_size, max_batch=2, max_seq_len=128,
                         q_dtype="fp16", backend="cpu")  # "auto" on a GPU, with CUDA arrays
out = decoder.run(q, kv_cache, block_table, seq_lens)  # [2, 1, 16, 512] float16

# The same for request 0, head 0, in NumPy: softmax(q . k / sqrt(576)) . v, v = k[:, :512].
k = np.concatenate([kv_cache[0], kv_cache[1]])[:100].astype(np.float64)
scores = k @ q[0, 0, 0].astype(np.float64) / np.sqrt(576)
p = np.exp(scores - scores.max())
assert np.allclose(out[0, 0, 0], (p / p.sum()) @ k[:, :512], atol=2e-3)
print(decoder.backend, out.shape, out.dtype)
