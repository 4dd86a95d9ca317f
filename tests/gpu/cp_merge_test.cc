// GPU tests of merge_partials' CUDA kernel (src/ops/merge/merge.cu) against its cpu reference
// (merge_cpu.cc, which tests/cpu/cp_test.cc checks against the unsharded decode): bf16, fp16 and
// fp32 partials; 1..64 ranks; h_q 1, 16, 96 (not a power of two), 128; s_q 1..4; rows with some
// and with all partials empty (their values NaN: never read); sinks with -inf entries; outputs
// poisoned before each run; captured in a CUDA graph and replayed with new LSEs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "mlakit/cp.h"
#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

using ops::Device;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct DeviceBytes {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBytes(size_t n) : bytes(n) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(n, 1)), cudaSuccess);
  }
  ~DeviceBytes() { cudaFree(ptr); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void upload(const void* host) {
    EXPECT_EQ(cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  void download(void* host) const {
    EXPECT_EQ(cudaMemcpy(host, ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  }
};

struct MergeCase {
  int world, batch, s_q, h_q;
  DType dtype;
  bool sinks;
  bool lse_base2 = false;  // partial LSEs given (and the LSE written) in base 2
  bool strided = false;    // the GPU's partials apart by strides, NaN between them
};

struct MergeInputs {
  std::vector<uint8_t> partial_out;  // [N, rows, 512] of dtype
  std::vector<float> partial_lse;    // [N, rows]
  std::vector<float> sinks;          // [h_q] or empty
};

float value_of(const std::vector<uint8_t>& v, size_t k, DType dtype) {
  if (dtype == DType::kFP32) {
    float x;
    std::memcpy(&x, &v[k * 4], 4);
    return x;
  }
  uint16_t h;
  std::memcpy(&h, &v[k * 2], 2);
  return dtype == DType::kBF16 ? bf16_to_float(h) : fp16_to_float(h);
}

void set_value(std::vector<uint8_t>& v, size_t k, DType dtype, float x) {
  if (dtype == DType::kFP32) {
    std::memcpy(&v[k * 4], &x, 4);
    return;
  }
  const uint16_t h = dtype == DType::kBF16 ? float_to_bf16(x) : float_to_fp16(x);
  std::memcpy(&v[k * 2], &h, 2);
}

// Random partials: LSEs spread over +-8, every fifth partial empty (-inf, values NaN), every
// seventh row empty on every rank.
MergeInputs make_merge(const MergeCase& c, std::mt19937_64& rng) {
  const size_t rows = size_t(c.batch) * c.s_q * c.h_q, elem = dtype_bytes(c.dtype);
  std::normal_distribution<float> normal;
  MergeInputs in;
  in.partial_out.resize(c.world * rows * kDv * elem);
  in.partial_lse.resize(c.world * rows);
  for (size_t k = 0; k < c.world * rows; ++k) {
    const size_t row = k % rows;
    const bool empty = rng() % 5 == 0 || row % 7 == 6;
    in.partial_lse[k] = empty ? kNegInf : 8.0f * normal(rng);
    for (int d = 0; d < kDv; ++d) {
      set_value(in.partial_out, k * kDv + d, c.dtype, empty ? NAN : normal(rng));
    }
  }
  if (c.sinks) {
    for (int h = 0; h < c.h_q; ++h) in.sinks.push_back(h % 8 == 7 ? kNegInf : 3.0f * normal(rng));
  }
  return in;
}

// Runs the kernel and the reference and compares: values within one unit in the last place of
// the output dtype (relative to the row's largest) plus fp32 rounding, LSEs within 1e-5.
void expect_gpu_equals_cpu(const MergeCase& c, std::mt19937_64& rng) {
  SCOPED_TRACE(::testing::Message()
               << "world " << c.world << " batch " << c.batch << " s_q " << c.s_q << " h_q "
               << c.h_q << " " << to_string(c.dtype) << (c.sinks ? " sinks" : "")
               << (c.lse_base2 ? " base 2" : "") << (c.strided ? " strided" : ""));
  const MergeInputs in = make_merge(c, rng);
  const size_t rows = size_t(c.batch) * c.s_q * c.h_q, elem = dtype_bytes(c.dtype);
  std::vector<uint8_t> cpu_out(rows * kDv * elem), gpu_out(rows * kDv * elem);
  std::vector<float> cpu_lse(rows), gpu_lse(rows);
  MergeArgs a{.world = c.world,
              .batch = c.batch,
              .s_q = c.s_q,
              .h_q = c.h_q,
              .dtype = c.dtype,
              .partial_out = in.partial_out.data(),
              .partial_lse = in.partial_lse.data(),
              .sinks = c.sinks ? in.sinks.data() : nullptr,
              .out = cpu_out.data(),
              .lse = cpu_lse.data(),
              .lse_base2 = c.lse_base2};
  MLAKIT_ASSERT_OK(merge_partials(Device::kCpu, a));

  // Strided: each rank's out 40 elements and its LSEs 3 past the previous one's end (NaN there).
  const int64_t out_stride = c.strided ? int64_t(rows) * kDv + 40 : 0;
  const int64_t lse_stride = c.strided ? int64_t(rows) + 3 : 0;
  std::vector<uint8_t> partial_out = in.partial_out;
  std::vector<float> partial_lse = in.partial_lse;
  if (c.strided) {
    partial_out.assign(c.world * out_stride * elem, 0xff);
    partial_lse.assign(c.world * lse_stride, NAN);
    for (int k = 0; k < c.world; ++k) {
      std::memcpy(&partial_out[k * out_stride * elem], &in.partial_out[k * rows * kDv * elem],
                  rows * kDv * elem);
      std::memcpy(&partial_lse[k * lse_stride], &in.partial_lse[k * rows], rows * sizeof(float));
    }
  }
  DeviceBytes d_partial(partial_out.size()), d_lse_in(partial_lse.size() * sizeof(float)),
      d_sinks(in.sinks.size() * sizeof(float)), d_out(gpu_out.size()), d_lse(rows * sizeof(float));
  d_partial.upload(partial_out.data());
  d_lse_in.upload(partial_lse.data());
  a.partial_out_stride = out_stride;
  a.partial_lse_stride = lse_stride;
  if (c.sinks) d_sinks.upload(in.sinks.data());
  MLAKIT_ASSERT_CUDA(cudaMemset(d_out.ptr, 0xff, d_out.bytes));  // NaN
  MLAKIT_ASSERT_CUDA(cudaMemset(d_lse.ptr, 0xff, d_lse.bytes));
  a.partial_out = d_partial.ptr;
  a.partial_lse = static_cast<const float*>(d_lse_in.ptr);
  a.sinks = c.sinks ? static_cast<const float*>(d_sinks.ptr) : nullptr;
  a.out = d_out.ptr;
  a.lse = static_cast<float*>(d_lse.ptr);
  MLAKIT_ASSERT_OK(merge_partials(Device::kCuda, a, nullptr));
  MLAKIT_ASSERT_CUDA(cudaDeviceSynchronize());
  d_out.download(gpu_out.data());
  d_lse.download(gpu_lse.data());

  const double ulp = c.dtype == DType::kBF16 ? 0x1.0p-7 : c.dtype == DType::kFP16 ? 0x1.0p-10 : 0;
  double max_err = 0;
  for (size_t row = 0; row < rows; ++row) {
    if (std::isinf(cpu_lse[row])) {
      ASSERT_EQ(gpu_lse[row], cpu_lse[row]) << "row " << row;
    } else {
      ASSERT_NEAR(gpu_lse[row], cpu_lse[row], 1e-5 * (1 + std::fabs(cpu_lse[row])))
          << "row " << row;
    }
    double row_max = 0;
    for (int d = 0; d < kDv; ++d) {
      row_max = std::max(row_max, double(std::fabs(value_of(cpu_out, row * kDv + d, c.dtype))));
    }
    for (int d = 0; d < kDv; ++d) {
      const float want = value_of(cpu_out, row * kDv + d, c.dtype);
      const float got = value_of(gpu_out, row * kDv + d, c.dtype);
      ASSERT_TRUE(std::isfinite(got)) << "row " << row << " d " << d;
      const double err = std::fabs(double(got) - want);
      max_err = std::max(max_err, err);
      ASSERT_LE(err, 1e-6 + (ulp + 1e-5) * row_max) << "row " << row << " d " << d;
    }
  }
  ::testing::Test::RecordProperty("max_abs_err", std::to_string(max_err));
}

TEST(CpMergeGpu, EqualsTheCpuReference) {
  MLAKIT_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(38);
  for (const DType dtype : {DType::kBF16, DType::kFP16, DType::kFP32}) {
    for (const int world : {1, 2, 3, 4, 8, 64}) {
      for (const int h_q : {1, 16, 96, 128}) {
        const int s_q = 1 + static_cast<int>(rng() % 4), batch = 1 + static_cast<int>(rng() % 5);
        expect_gpu_equals_cpu({world, batch, s_q, h_q, dtype, rng() % 2 == 0}, rng);
      }
    }
  }
}

// MergeArgs::lse_base2: the kernel takes base-2 partial LSEs and writes a base-2 LSE, as the cpu
// reference does (the same partials read as base 2).
TEST(CpMergeGpu, Base2EqualsTheCpuReference) {
  MLAKIT_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(382);
  for (const DType dtype : {DType::kBF16, DType::kFP32}) {
    for (const int world : {1, 3, 8}) {
      expect_gpu_equals_cpu({world, 3, 2, 16, dtype, world != 3, /*lse_base2=*/true}, rng);
    }
  }
}

// MergeArgs::partial_out_stride / partial_lse_stride (the NCCL merge's in-place slots).
TEST(CpMergeGpu, StridedPartialsEqualTheCpuReference) {
  MLAKIT_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(39);
  for (const DType dtype : {DType::kBF16, DType::kFP16, DType::kFP32}) {
    for (const int world : {1, 2, 4}) {
      expect_gpu_equals_cpu({.world = world,
                             .batch = 3,
                             .s_q = 2,
                             .h_q = 16,
                             .dtype = dtype,
                             .sinks = true,
                             .strided = true},
                            rng);
    }
  }
}

TEST(CpMergeGpu, LargeBatchManyBlocks) {
  MLAKIT_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(3838);
  expect_gpu_equals_cpu({4, 64, 2, 128, DType::kBF16, true}, rng);
}

TEST(CpMergeGpu, GraphReplayWithNewPartials) {
  MLAKIT_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(383838);
  const MergeCase c{3, 4, 2, 16, DType::kBF16, true};
  const size_t rows = size_t(c.batch) * c.s_q * c.h_q, out_bytes = rows * kDv * 2;
  MergeInputs in = make_merge(c, rng);
  DeviceBytes d_partial(in.partial_out.size()), d_lse_in(in.partial_lse.size() * sizeof(float)),
      d_sinks(in.sinks.size() * sizeof(float)), d_out(out_bytes), d_lse(rows * sizeof(float));
  d_sinks.upload(in.sinks.data());
  StreamHolder stream;
  const MergeArgs a{.world = c.world,
                    .batch = c.batch,
                    .s_q = c.s_q,
                    .h_q = c.h_q,
                    .dtype = c.dtype,
                    .partial_out = d_partial.ptr,
                    .partial_lse = static_cast<const float*>(d_lse_in.ptr),
                    .sinks = static_cast<const float*>(d_sinks.ptr),
                    .out = d_out.ptr,
                    .lse = static_cast<float*>(d_lse.ptr)};
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  MLAKIT_ASSERT_CUDA(cudaStreamBeginCapture(stream.stream, cudaStreamCaptureModeThreadLocal));
  const Status captured = merge_partials(Device::kCuda, a, stream.stream);
  MLAKIT_ASSERT_CUDA(cudaStreamEndCapture(stream.stream, &graph));
  MLAKIT_ASSERT_OK(captured);
  MLAKIT_ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    if (replay > 0) {
      const std::vector<float> sinks = in.sinks;
      in = make_merge(c, rng);
      in.sinks = sinks;
    }
    d_partial.upload(in.partial_out.data());
    d_lse_in.upload(in.partial_lse.data());
    MLAKIT_ASSERT_CUDA(cudaGraphLaunch(exec, stream.stream));
    MLAKIT_ASSERT_CUDA(cudaStreamSynchronize(stream.stream));
    std::vector<uint8_t> cpu_out(out_bytes), gpu_out(out_bytes);
    std::vector<float> cpu_lse(rows), gpu_lse(rows);
    MergeArgs h = a;
    h.partial_out = in.partial_out.data();
    h.partial_lse = in.partial_lse.data();
    h.sinks = in.sinks.data();
    h.out = cpu_out.data();
    h.lse = cpu_lse.data();
    MLAKIT_ASSERT_OK(merge_partials(Device::kCpu, h));
    d_out.download(gpu_out.data());
    d_lse.download(gpu_lse.data());
    for (size_t row = 0; row < rows; ++row) {
      if (std::isinf(cpu_lse[row])) {
        ASSERT_EQ(gpu_lse[row], cpu_lse[row]);
      } else {
        ASSERT_NEAR(gpu_lse[row], cpu_lse[row], 1e-5 * (1 + std::fabs(cpu_lse[row])));
      }
      for (int d = 0; d < kDv; ++d) {
        const float want = value_of(cpu_out, row * kDv + d, c.dtype);
        ASSERT_NEAR(value_of(gpu_out, row * kDv + d, c.dtype), want,
                    1e-5 + 0x1.0p-7 * std::fabs(want))
            << "replay " << replay << " row " << row << " d " << d;
      }
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
}  // namespace mlakit::testing
