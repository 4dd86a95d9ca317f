// Helpers of the ops' GPU tests (ops_test.cc, ops_topk_test.cc): device copies of host vectors,
// random numbers, and the top-k tests' inputs and arguments.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "mlakit/ops.h"
#include "sm80_test_util.h"

namespace mlakit::testing {

// A device copy of a host vector, freed with it.
template <typename T>
struct DeviceVec {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceVec(const std::vector<T>& host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<size_t>(n, 1) * sizeof(T)),
              cudaSuccess);
    upload(host);
  }
  ~DeviceVec() { cudaFree(ptr); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  void upload(const std::vector<T>& host) {
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> download() const {
    std::vector<T> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
};

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  float normal() { return std::normal_distribution<float>(0.0f, 1.0f)(gen); }
  int64_t below(int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(gen); }
};

// Top-k inputs: logits random (normal; from 5 levels: ties; or 1 + a uniform fraction: distinct
// values that crowd few histogram bins) up to each row's length and NaN past it (a kernel that
// reads past the length selects a NaN: the largest key); block-table entries past a request's
// pages out of range. Rows are ld = max_len + ld_extra apart (an odd ld: no row is 16-byte
// aligned but the first; a multiple of 4: every one is).
// kRising: 2^(32 j / n), distinct and increasing along the row, so the largest keys (and their
// bin) all lie in the row's last slice (the multi-block kernel's candidate staging overflows).
// kSampleTrap: normal, plus 64 at the positions the cluster kernel samples (j % 16 == j / 16 % 16,
// 1 in 16): the sample puts its bound above every other key, so with k above n / 16 the row has
// fewer than k keys at or above it (the kernel's fallback).
// kSampleTrap and kStreamTrap raise the keys that the cluster and the streaming top-k kernels
// sample (topk_cluster.cu, topk_stream.cu) far above the rest: their samples misjudge the row.
// kSpread: magnitudes 2^-100 .. 2^10 (uniform exponents), about k / 2 of a row's values
// positive: the k-th largest is negative, about a thousand histogram bins below the largest (the
// cluster kernels' picks skip bins by groups, topk_select.cuh).
enum class TopkValues {
  kNormal,
  kTies,
  kCrowded,
  kRising,
  kSampleTrap,
  kStreamTrap,
  kSpread,
  kCoarse,  // normal values rounded to 1/256: a few keys equal to the k-th largest
};

struct TopkInputs {
  int batch, next_n, k, page_size;
  int64_t max_len, ld, bt_stride;
  std::vector<int32_t> lens, table;
  std::vector<float> logits;
};

inline TopkInputs make_topk(Rng& rng, int k, int next_n, int page_size, std::vector<int32_t> lens,
                            TopkValues values, int ld_extra = 5) {
  TopkInputs in{
      .batch = static_cast<int>(lens.size()), .next_n = next_n, .k = k, .page_size = page_size};
  in.lens = std::move(lens);
  in.max_len = std::max<int64_t>(1, *std::max_element(in.lens.begin(), in.lens.end()));
  in.ld = in.max_len + ld_extra;
  in.bt_stride = (in.max_len + page_size - 1) / page_size + 1;
  in.table.assign(in.batch * in.bt_stride, 1 << 29);
  for (int i = 0; i < in.batch; ++i) {
    for (int64_t pg = 0; pg * page_size < in.lens[i]; ++pg) {
      in.table[i * in.bt_stride + pg] = static_cast<int32_t>(rng.below(100000 / page_size + 1));
    }
  }
  in.logits.assign(int64_t{in.batch} * next_n * in.ld, NAN);
  for (int i = 0; i < in.batch; ++i) {
    for (int t = 0; t < next_n; ++t) {
      const int64_t r = int64_t{i} * next_n + t;
      const int64_t n = std::clamp<int64_t>(int64_t{in.lens[i]} - next_n + 1 + t, 0, in.lens[i]);
      for (int64_t j = 0; j < n; ++j) {
        float& x = in.logits[r * in.ld + j];
        switch (values) {
          case TopkValues::kNormal: x = rng.normal(); break;
          case TopkValues::kTies: x = static_cast<float>(rng.below(5)); break;
          case TopkValues::kCrowded:
            x = 1.0f + static_cast<float>(rng.below(1 << 20)) / (1 << 20);
            break;
          case TopkValues::kRising: x = std::exp2(32.0f * static_cast<float>(j) / n); break;
          case TopkValues::kSampleTrap:
            x = rng.normal() + (j % 16 == j / 16 % 16 ? 64.0f : 0.0f);
            break;
          case TopkValues::kStreamTrap:
            x = rng.normal() + (j % 128 / 8 == j / 128 % 16 ? 64.0f : 0.0f);
            break;
          case TopkValues::kCoarse: x = std::round(rng.normal() * 256.0f) / 256.0f; break;
          case TopkValues::kSpread:
            x = (rng.below(2 * n) < k ? 1.0f : -1.0f) *
                std::exp2(static_cast<float>(rng.below(110 << 10)) / 1024.0f - 100.0f);
        }
      }
    }
  }
  return in;
}

inline ops::TopkArgs topk_args(const TopkInputs& in, const float* logits, const int32_t* lens,
                               const int32_t* table, int32_t* indices, int32_t* positions) {
  ops::TopkArgs a;
  a.batch = in.batch;
  a.next_n = in.next_n;
  a.k = in.k;
  a.logits = logits;
  a.max_len = in.max_len;
  a.logits_stride = in.ld;
  a.seq_lens = lens;
  a.block_table = table;
  a.block_table_stride = in.bt_stride;
  a.page_size = in.page_size;
  a.indices = indices;
  a.positions = positions;
  return a;
}

// Device copies of top-k inputs for graph replays: the logits made valid at every position below
// max_len (a replay may lengthen any row), the block table's ids random below 1000, outputs
// poisoned.
struct TopkDeviceInputs {
  DeviceVec<float> logits;
  DeviceVec<int32_t> lens, table, idx, pos;
  TopkDeviceInputs(Rng& rng, TopkInputs& in)
      : logits(valid_logits(rng, in)),
        lens(in.lens),
        table(std::vector<int32_t>(in.table.size())),
        idx(std::vector<int32_t>(out_count(in), -7)),
        pos(std::vector<int32_t>(out_count(in), -7)) {
    for (auto& id : in.table) id = static_cast<int32_t>(rng.below(1000));
    table.upload(in.table);
  }
  ops::TopkArgs args(const TopkInputs& in) const {
    return topk_args(in, logits.ptr, lens.ptr, table.ptr, idx.ptr, pos.ptr);
  }
  static size_t out_count(const TopkInputs& in) {
    return static_cast<size_t>(in.batch) * in.next_n * in.k;
  }
  static const std::vector<float>& valid_logits(Rng& rng, TopkInputs& in) {
    for (float& x : in.logits) {
      if (std::isnan(x)) x = rng.normal();
    }
    return in.logits;
  }
};

// Captures the CUDA top-k of `a` (in's shapes, device pointers; d_lens its lengths) on `stream`
// once (the op, or `kernel` where given), then for each of `lens_list` writes the lengths, replays
// the graph and checks indices and positions against the cpu reference bit for bit.
inline void replay_topk_with_new_lengths(
    TopkInputs& in, const ops::TopkArgs& a, DeviceVec<int32_t>& d_lens,
    const DeviceVec<int32_t>& d_idx, const DeviceVec<int32_t>& d_pos, cudaStream_t stream,
    const std::vector<std::vector<int32_t>>& lens_list,
    const std::function<Status(cudaStream_t)>& kernel = nullptr,
    cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal) {
  const size_t out = static_cast<size_t>(in.batch) * in.next_n * in.k;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MLAKIT_ASSERT_CUDA(cudaStreamBeginCapture(stream, mode));
  const Status captured =
      kernel ? kernel(stream) : ops::topk_indices(ops::Device::kCuda, a, stream);
  MLAKIT_ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  MLAKIT_ASSERT_OK(captured);
  MLAKIT_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (const std::vector<int32_t>& lens : lens_list) {
    in.lens = lens;
    d_lens.upload(lens);
    MLAKIT_ASSERT_CUDA(cudaGraphLaunch(exec, stream));
    MLAKIT_ASSERT_CUDA(cudaStreamSynchronize(stream));
    std::vector<int32_t> cpu_idx(out), cpu_pos(out);
    MLAKIT_ASSERT_OK(ops::topk_indices(
        ops::Device::kCpu, topk_args(in, in.logits.data(), in.lens.data(), in.table.data(),
                                     cpu_idx.data(), cpu_pos.data())));
    EXPECT_TRUE(d_idx.download() == cpu_idx) << lens[0] << " " << lens[1] << " " << lens[2];
    EXPECT_TRUE(d_pos.download() == cpu_pos);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace mlakit::testing
