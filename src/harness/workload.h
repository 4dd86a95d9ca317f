// Synthetic workloads for the mlakit program and the tests: random inputs of a problem's shape in
// storage form, on the host and (for GPU backends) copied to the device.
//
// Poisoning follows the project's testing rules: pages that no request uses and the unused tail of
// each request's last page hold NaN, unused block-table slots hold out-of-range page ids, and the
// output is filled with NaN before each run. In the V4 layout the pad byte of every scale row and
// the padding at the end of every page hold 0xff (a NaN scale).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mlakit/mlakit.h"

namespace mlakit::harness {

struct WorkloadOptions {
  uint64_t seed = 1;
  float magnitude = 1.0f;     // standard deviation of q and kv values
  int extra_pages = 2;        // unused (NaN) pages added to the cache
  int extra_block_slots = 1;  // unused block-table columns per row (out-of-range ids)
  double sparse_empty = 0.1;  // share of -1 slots in sparse indices
  // Sparse indices as a top-k op emits them (ops::topk_indices) instead: a request of n tokens
  // lists min(n, topk) distinct ones in increasing position, then -1 up to topk (a -1 tail when
  // n < topk); sparse_empty is not used.
  bool sparse_tails = false;
  bool topk_lens = false;  // pass per-request top-k lengths
  bool poison = true;      // NaN in unused pages and page tails
  // Problem::var_q: each request's query length, 0..s_q; empty: uniform in 1..s_q from the seed.
  std::vector<int32_t> q_lens;
};

// Inputs in storage form on the host. args() points at these buffers.
struct HostInputs {
  Problem problem;
  int32_t batch = 0;
  int64_t num_pages = 0;
  int64_t block_table_stride = 0;
  std::vector<uint8_t> q;            // [b, s_q, h_q, d_qk] of q_dtype (var_q: packed, below)
  std::vector<uint8_t> kv;           // [num_pages, kv_page_bytes]
  std::vector<int32_t> block_table;  // [b, block_table_stride]
  std::vector<int32_t> seq_lens;     // [b]
  std::vector<int32_t> indices;      // [b, s_q, topk]
  std::vector<int32_t> topk_lens;    // [b] or empty
  std::vector<float> sinks;          // [h_q] or empty
  // The extra cache (Problem::extra_topk > 0): each request's window of extra_topk tokens on pages
  // of its own (the tail of the last one NaN), plus options.extra_pages NaN pages.
  int64_t extra_num_pages = 0;
  std::vector<uint8_t> extra_kv;               // [extra_num_pages, extra page bytes]
  std::vector<int32_t> extra_indices;          // [b, s_q, extra_topk], some -1
  std::vector<int32_t> extra_topk_lens;        // [b] (with options.topk_lens) or empty
  float softmax_scale = kDefaultSoftmaxScale;  // make_inputs: kV4SoftmaxScale for kFp8V4
  float q_scale = NAN, k_scale = NAN;          // set for fp8
  // Problem::var_q: [b + 1] query-token offsets. q, indices and extra_indices then hold the packed
  // rows (row cu_seqlens_q[i] + t: the row (i, t) of the uniform inputs of the same seed) in their
  // first cu_seqlens_q[b] rows and poison after them (NaN in q, out-of-range ids in the indices):
  // no backend reads those; out and lse keep room for b * s_q rows, the rows past the packed ones
  // a canary that no run writes.
  std::vector<int32_t> cu_seqlens_q;

  size_t out_bytes() const;
  size_t lse_count() const;
  // RunArgs over host buffers, writing to `out` / `lse`.
  RunArgs args(void* out, float* lse) const;
};

HostInputs make_inputs(const Problem& problem, std::span<const int32_t> seq_lens,
                       const WorkloadOptions& options = {});

// Context parallelism: the inputs of `rank` of `world` ranks sharding `global` (a dense problem
// without context parallelism) in blocks of `interleave` tokens, as a server would lay them out:
// the same q, the GLOBAL seq_lens, and a local cache holding the rank's tokens (global position
// g at local position cp_local_position(g)) on pages of its own, listed by a local block table.
// Unused pages and page tails are NaN, unused block-table slots out of range, plus
// options.extra_pages NaN pages and options.extra_block_slots unused slots. The problem gets the
// cp fields, return_lse true and has_sinks false (the merge applies the sinks: mlakit/cp.h);
// the sinks stay in `global`.
HostInputs shard_inputs(const HostInputs& global, int32_t world, int32_t rank, int32_t interleave,
                        const WorkloadOptions& options = {});

// Sequence lengths: all equal to `len`, or uniform in [len/8, 2*len) when `variable`. Their
// longest possible (longest_seq_len) must fit an int32.
std::vector<int32_t> make_seq_lens(int batch, int len, bool variable, uint64_t seed);
// The longest length make_seq_lens can give: len, or max(len/8 + 1, 2 * len) - 1 when variable.
int64_t longest_seq_len(int len, bool variable);

// Bytes make_inputs allocates for these lengths (its buffers and its scratch), so that a problem
// too large for the host can be refused before anything is allocated. The device copy of the
// inputs (DeviceInputs::upload) takes device_input_bytes() of them.
uint64_t input_bytes(const Problem& problem, std::span<const int32_t> seq_lens,
                     const WorkloadOptions& options = {});
uint64_t device_input_bytes(const Problem& problem, std::span<const int32_t> seq_lens,
                            const WorkloadOptions& options = {});

// The tuner's ragged batch for a bucket of maximum length `len`: `batch` lengths evenly spread
// over [max(1, len/16), len] for len >= 1 (the longest is `len`; the spread of
// make_seq_lens(batch, len/2, true, ...)), in a seeded random order. Batch 1 gives {len}.
std::vector<int32_t> make_ragged_lens(int batch, int len, uint64_t seed);

// Fills `n` bytes-worth of `dtype` elements with NaN (out poisoning).
void fill_nan(void* data, size_t count, DType dtype);

// A device allocation that frees itself.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  void* get() const { return ptr_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

// A copy of HostInputs in device memory, plus out / lse / workspace buffers.
struct DeviceInputs {
  DeviceBuffer q, kv, block_table, seq_lens, cu_seqlens_q, indices, topk_lens, sinks, out, lse;
  DeviceBuffer extra_kv, extra_indices, extra_topk_lens;
  RunArgs args;  // device pointers

  // Uploads `host`; `out` and `lse` are allocated for the problem's shape.
  static Status upload(const HostInputs& host, DeviceInputs* device);
  // Copies the device output back into `out` (out_bytes) and `lse` (lse_count floats, may be null).
  Status download(const HostInputs& host, void* out, float* lse) const;
  // Fills out (and lse) with NaN on the device.
  Status poison(const HostInputs& host) const;
};

}  // namespace mlakit::harness
