// Tuning buckets: the static facts of a problem plus its batch and sequence length rounded to a
// bucket. The GPU, SM count and library version live in the cache's metadata block instead.
#pragma once

#include <string>

#include "mlakit/mlakit.h"

namespace mlakit::tune {

// Powers of two up to 256, then multiples of 256 (rounded up).
int batch_bucket(int batch);
// Index of a batch's bucket: 0..8 for 1..256, then 9, 10, ... for 512, 768, ...
int batch_bucket_index(int batch);
int batch_bucket_at(int index);
// The maximum sequence length rounded up to a power of two (at least 1).
int len_bucket(int max_seq_len);

// "h128.s1.p64.q-bf16.kv-bf16.out-bf16.dense.causal.sinks0.lse0.pdl0.topk0", then
// ".extra<extra_topk>.ep<extra page size>" with an extra cache, ".cp<N>r<rank>i<I>" with
// context parallelism and ".varq" with variable query lengths (absent otherwise: earlier caches'
// keys stay valid). The tuner times a var_q bucket on query lengths drawn from 1..s_q.
std::string problem_key(const Problem& problem);
// problem_key + "|b<batch bucket>|L<len bucket>"
std::string bucket_key(const Problem& problem, int batch_bucket, int len_bucket);

}  // namespace mlakit::tune
