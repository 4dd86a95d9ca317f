// Context-parallel workloads (harness/workload.h): the inputs of one rank, sharded from a global
// workload's by the token layout of mlakit/cp.h.
#include <algorithm>
#include <cstring>
#include <vector>

#include "harness/workload.h"
#include "mlakit/cp.h"

namespace mlakit::harness {

HostInputs shard_inputs(const HostInputs& global, int32_t world, int32_t rank, int32_t interleave,
                        const WorkloadOptions& opt) {
  const Problem& gp = global.problem;
  HostInputs in;
  in.problem = gp;
  in.problem.cp_world = world;
  in.problem.cp_rank = rank;
  in.problem.cp_interleave = interleave;
  in.problem.return_lse = true;
  in.problem.has_sinks = false;
  const Problem& p = in.problem;
  in.batch = global.batch;
  in.q = global.q;
  in.seq_lens = global.seq_lens;
  in.softmax_scale = global.softmax_scale;
  in.q_scale = global.q_scale;
  in.k_scale = global.k_scale;

  // Local pages: request i's local tokens fill pages of its own, numbered from the end of the
  // cache down (so that a local page id differs from its index), after opt.extra_pages NaN ones.
  std::vector<int64_t> local_pages(in.batch);
  int64_t total = 0, max_pages = 0;
  for (int i = 0; i < in.batch; ++i) {
    const int64_t n = cp_local_len(global.seq_lens[i], world, rank, interleave);
    local_pages[i] = (n + p.page_size - 1) / p.page_size;
    total += local_pages[i];
    max_pages = std::max(max_pages, local_pages[i]);
  }
  in.num_pages = std::max<int64_t>(total + opt.extra_pages, 1);
  in.block_table_stride = std::max<int64_t>(1, max_pages + opt.extra_block_slots);
  in.block_table.assign(in.batch * in.block_table_stride,
                        static_cast<int32_t>(in.num_pages + 7919));
  const size_t page_bytes = kv_page_bytes(p.kv_dtype, p.kv_layout, p.page_size);
  in.kv.assign(static_cast<size_t>(in.num_pages) * page_bytes, 0xff);  // NaN in every dtype
  const bool v4 = p.kv_layout == KvLayout::kFp8V4;
  const size_t data_bytes = v4 ? kV4DataBytes : kv_token_bytes(p.kv_dtype, p.kv_layout);
  int64_t next_page = in.num_pages - 1;
  for (int i = 0; i < in.batch; ++i) {
    int32_t* table = &in.block_table[i * in.block_table_stride];
    const int32_t* global_table = &global.block_table[i * global.block_table_stride];
    for (int64_t k = 0; k < local_pages[i]; ++k) table[k] = static_cast<int32_t>(next_page--);
    for (int64_t g = 0; g < global.seq_lens[i]; ++g) {
      if (cp_rank_of(g, world, interleave) != rank) continue;
      const int64_t j = cp_local_position(g, world, interleave);
      const uint8_t* src = &global.kv[global_table[g / p.page_size] * page_bytes];
      uint8_t* dst = &in.kv[table[j / p.page_size] * page_bytes];
      const int64_t src_off = g % p.page_size, dst_off = j % p.page_size;
      std::memcpy(dst + dst_off * data_bytes, src + src_off * data_bytes, data_bytes);
      if (v4) {
        const int64_t scales = int64_t{p.page_size} * kV4DataBytes;
        std::memcpy(dst + scales + dst_off * kV4ScaleBytes, src + scales + src_off * kV4ScaleBytes,
                    kV4ScaleBytes);
      }
    }
  }
  return in;
}

}  // namespace mlakit::harness
