#include "graph_pdl_util.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "late_writer.h"

namespace mlakit::testing {
namespace {

struct GraphResources {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~GraphResources() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

// Device buffers of fixed capacity that a captured graph keeps pointing at.
struct FixedBuffers {
  harness::DeviceBuffer q, kv, block_table, seq_lens, sinks, out, lse;
  harness::DeviceBuffer scales;  // fp8: q_scale, k_scale (RunArgs::*_scale_ptr)
  int64_t capacity_pages = 0;
  int64_t stride = 0;
  RunArgs args;
};

// Copies `in` into the fixed buffers: its block table re-laid at the fixed stride (unused slots
// out of range), its cache at the start of the fixed cache.
::testing::AssertionResult load_into(const harness::HostInputs& in, FixedBuffers& b) {
  if (in.num_pages > b.capacity_pages || in.block_table_stride > b.stride) {
    return ::testing::AssertionFailure() << "inputs exceed the fixed capacity";
  }
  std::vector<int32_t> table(static_cast<size_t>(in.batch) * b.stride,
                             static_cast<int32_t>(b.capacity_pages + 7919));
  const float scales[2] = {in.q_scale, in.k_scale};
  for (int i = 0; i < in.batch; ++i) {
    std::copy_n(in.block_table.begin() + i * in.block_table_stride, in.block_table_stride,
                table.begin() + i * b.stride);
  }
  const struct {
    void* dst;
    const void* src;
    size_t bytes;
  } copies[] = {
      {b.q.get(), in.q.data(), in.q.size()},
      {b.kv.get(), in.kv.data(), in.kv.size()},
      {b.block_table.get(), table.data(), table.size() * 4},
      {b.seq_lens.get(), in.seq_lens.data(), in.seq_lens.size() * 4},
      {b.sinks.get(), in.sinks.data(), in.sinks.size() * 4},
      {b.scales.get(), scales, b.scales.get() != nullptr ? sizeof(scales) : 0},
  };
  for (const auto& c : copies) {
    if (c.bytes > 0 && cudaMemcpy(c.dst, c.src, c.bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
      return ::testing::AssertionFailure() << "cudaMemcpy failed";
    }
  }
  cudaMemset(b.out.get(), 0xff, b.out.size());
  cudaMemset(b.lse.get(), 0xff, b.lse.size());
  if (cudaDeviceSynchronize() != cudaSuccess) return ::testing::AssertionFailure() << "sync";
  return ::testing::AssertionSuccess();
}

Output download(const harness::HostInputs& in, const FixedBuffers& b) {
  Output o;
  o.out.resize(in.out_bytes() / 2);
  o.lse.resize(in.lse_count());
  cudaMemcpy(o.out.data(), b.out.get(), in.out_bytes(), cudaMemcpyDeviceToHost);
  cudaMemcpy(o.lse.data(), b.lse.get(), in.lse_count() * 4, cudaMemcpyDeviceToHost);
  return o;
}

}  // namespace

void check_graph_replay(const char* backend, int page_size, DTypes dtypes) {
  const bool fp8 = dtypes.q == DType::kFP8E4M3 || dtypes.kv == DType::kFP8E4M3;
  for (const int h_q : {16, 64}) {
    Problem shape;  // the tactics offered depend on the rows of a tile (sm80: h_q * s_q > 32)
    shape.h_q = h_q;
    shape.s_q = 2;
    shape.q_dtype = dtypes.q;
    shape.kv_dtype = dtypes.kv;
    shape.out_dtype = dtypes.out;
    for (const int tactic : tactic_ids(backend, shape)) {
      SCOPED_TRACE(::testing::Message() << "h_q " << h_q << " tactic " << tactic);
      Problem p = shape;
      p.s_q = 2;
      p.page_size = page_size;
      p.max_batch = 6;
      p.max_seq_len = 1500;
      p.has_sinks = true;
      p.return_lse = true;
      p.enable_pdl = true;

      FixedBuffers b;
      b.stride = p.max_seq_len / p.page_size + 2;
      b.capacity_pages = p.max_batch * b.stride + 4;
      const size_t rows = static_cast<size_t>(p.max_batch) * p.s_q * p.h_q;
      b.q = harness::DeviceBuffer(rows * kDqk * dtype_bytes(p.q_dtype));
      b.kv = harness::DeviceBuffer(b.capacity_pages * p.page_size * kDqk * dtype_bytes(p.kv_dtype));
      b.block_table = harness::DeviceBuffer(p.max_batch * b.stride * 4);
      b.seq_lens = harness::DeviceBuffer(p.max_batch * 4);
      b.sinks = harness::DeviceBuffer(p.h_q * 4);
      b.out = harness::DeviceBuffer(rows * kDv * 2);
      b.lse = harness::DeviceBuffer(rows * 4);
      b.args.batch = p.max_batch;
      b.args.q = b.q.get();
      b.args.kv_cache = b.kv.get();
      b.args.num_pages = b.capacity_pages;
      b.args.block_table = b.block_table.as<int32_t>();
      b.args.block_table_stride = b.stride;
      b.args.seq_lens = b.seq_lens.as<int32_t>();
      b.args.sinks = b.sinks.as<float>();
      b.args.out = b.out.get();
      b.args.lse = b.lse.as<float>();
      if (fp8) {
        b.scales = harness::DeviceBuffer(2 * sizeof(float));
        if (p.q_dtype == DType::kFP8E4M3) b.args.q_scale_ptr = b.scales.as<float>();
        if (p.kv_dtype == DType::kFP8E4M3) b.args.k_scale_ptr = b.scales.as<float>() + 1;
      }

      std::unique_ptr<Decoder> decoder;
      MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend, .tactic = tactic}, &decoder));
      const size_t ws_bytes = decoder->workspace_bytes();
      harness::DeviceBuffer workspace(std::max<size_t>(ws_bytes, 256));

      GraphResources g;
      MLAKIT_ASSERT_CUDA(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
      MLAKIT_ASSERT_CUDA(cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeThreadLocal));
      const Status captured = decoder->run(b.args, workspace.get(), ws_bytes, g.stream);
      MLAKIT_ASSERT_CUDA(cudaStreamEndCapture(g.stream, &g.graph));
      MLAKIT_ASSERT_OK(captured);
      MLAKIT_ASSERT_CUDA(cudaGraphInstantiate(&g.exec, g.graph, 0));

      const std::vector<std::vector<int32_t>> rounds = {
          {700, 1, 0, 1500, 33, 260},  // all live (one empty)
          {1200, 90, 0, 0, 0, 0},      // fewer live requests
          {17, 1499, 800, 2, 640, 5},  // new lengths everywhere
          {0, 0, 0, 0, 0, 0},          // nothing live
      };
      uint64_t seed = 40 + 10 * tactic + h_q;
      for (const std::vector<int32_t>& lens : rounds) {
        harness::HostInputs in = harness::make_inputs(p, lens, {.seed = seed++});
        // New scales every round (the same stored values dequantize to other ones): the graph
        // reads them through the pointers.
        in.q_scale *= 1.0f + 0.25f * static_cast<float>(seed % 4);
        in.k_scale *= 1.5f - 0.25f * static_cast<float>(seed % 3);
        Output ref;
        MLAKIT_ASSERT_OK(cpu_reference(in, &ref));

        ASSERT_TRUE(load_into(in, b));
        MLAKIT_ASSERT_CUDA(cudaGraphLaunch(g.exec, g.stream));
        MLAKIT_ASSERT_CUDA(cudaStreamSynchronize(g.stream));
        const Output replayed = download(in, b);

        ASSERT_TRUE(load_into(in, b));
        MLAKIT_ASSERT_OK(decoder->run(b.args, workspace.get(), ws_bytes, g.stream));
        MLAKIT_ASSERT_CUDA(cudaStreamSynchronize(g.stream));
        const Output direct = download(in, b);

        EXPECT_TRUE(bitwise_equal(replayed, direct));
        EXPECT_TRUE(matches_reference(in, replayed, ref));
      }
    }
  }
}

void check_pdl_bitwise(const char* backend, int page_size, DTypes dtypes) {
  struct Shape {
    int h_q, s_q;
  };
  for (const Shape shape : {Shape{16, 1}, Shape{128, 2}}) {
    Problem shape_problem;  // the tactics offered depend on the rows of a tile
    shape_problem.h_q = shape.h_q;
    shape_problem.s_q = shape.s_q;
    shape_problem.q_dtype = dtypes.q;
    shape_problem.kv_dtype = dtypes.kv;
    shape_problem.out_dtype = dtypes.out;
    for (const int tactic : tactic_ids(backend, shape_problem)) {
      SCOPED_TRACE(::testing::Message()
                   << "h_q " << shape.h_q << " s_q " << shape.s_q << " tactic " << tactic);
      Problem p = shape_problem;
      p.s_q = shape.s_q;
      p.page_size = page_size;
      p.max_batch = 5;
      p.max_seq_len = 3000;
      p.has_sinks = true;
      p.return_lse = true;
      // Two workloads with different lengths, the first run twice: a, b, a again.
      const std::vector<int32_t> lens_a = {3000, 60, 0, 1, 65};
      const std::vector<int32_t> lens_b = {5, 2000, 700, 1200, 0};
      const harness::HostInputs in_a = harness::make_inputs(p, lens_a, {.seed = 7});
      const harness::HostInputs in_b = harness::make_inputs(p, lens_b, {.seed = 8});
      harness::DeviceInputs dev_a1, dev_b, dev_a2;
      MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in_a, &dev_a1));
      MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in_b, &dev_b));
      MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in_a, &dev_a2));

      Output results[2][3];
      for (const bool pdl : {false, true}) {
        p.enable_pdl = pdl;
        std::unique_ptr<Decoder> decoder;
        MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend, .tactic = tactic}, &decoder));
        const size_t ws_bytes = decoder->workspace_bytes();
        harness::DeviceBuffer workspace(std::max<size_t>(ws_bytes, 256));
        MLAKIT_ASSERT_OK(dev_a1.poison(in_a));
        MLAKIT_ASSERT_OK(dev_b.poison(in_b));
        MLAKIT_ASSERT_OK(dev_a2.poison(in_a));
        MLAKIT_ASSERT_CUDA(cudaDeviceSynchronize());
        cudaStream_t stream = nullptr;
        MLAKIT_ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        // Back to back on one workspace, no synchronization in between.
        const harness::DeviceInputs* runs[] = {&dev_a1, &dev_b, &dev_a2};
        for (const harness::DeviceInputs* d : runs) {
          MLAKIT_ASSERT_OK(decoder->run(d->args, workspace.get(), ws_bytes, stream));
        }
        MLAKIT_ASSERT_CUDA(cudaStreamSynchronize(stream));
        cudaStreamDestroy(stream);
        const harness::HostInputs* ins[] = {&in_a, &in_b, &in_a};
        for (int k = 0; k < 3; ++k) {
          Output& o = results[pdl][k];
          o.out.resize(ins[k]->out_bytes() / 2);
          o.lse.resize(ins[k]->lse_count());
          MLAKIT_ASSERT_OK(runs[k]->download(*ins[k], o.out.data(), o.lse.data()));
        }
      }
      for (int k = 0; k < 3; ++k) {
        EXPECT_TRUE(bitwise_equal(results[0][k], results[1][k])) << "run " << k;
      }
      EXPECT_TRUE(bitwise_equal(results[1][0], results[1][2]));
      Output ref;
      MLAKIT_ASSERT_OK(cpu_reference(in_b, &ref));
      EXPECT_TRUE(matches_reference(in_b, results[1][1], ref));
    }
  }
}

void check_inputs_written_late(const char* backend, int page_size) {
  for (const int h_q : {16, 128}) {
    Problem shape;
    shape.h_q = h_q;
    for (const int tactic : tactic_ids(backend, shape)) {
      SCOPED_TRACE(::testing::Message() << "h_q " << h_q << " tactic " << tactic);
      Problem p;
      p.h_q = h_q;
      p.page_size = page_size;
      p.max_batch = 6;
      p.max_seq_len = 3000;
      p.return_lse = true;
      p.enable_pdl = true;
      const std::vector<int32_t> lens = {3000, 60, 0, 1, 1100, 65};
      const harness::HostInputs in = harness::make_inputs(p, lens, {.seed = 90u + h_q + tactic});
      Output ref;
      MLAKIT_ASSERT_OK(cpu_reference(in, &ref));
      harness::DeviceInputs dev;
      MLAKIT_ASSERT_OK(harness::DeviceInputs::upload(in, &dev));
      // The values the late kernel writes (the real ones), and what the buffers hold before.
      const int64_t table_size = static_cast<int64_t>(in.block_table.size());
      std::vector<int32_t> real(in.seq_lens.begin(), in.seq_lens.end());
      real.insert(real.end(), in.block_table.begin(), in.block_table.end());
      harness::DeviceBuffer staged(real.size() * 4);
      MLAKIT_ASSERT_CUDA(
          cudaMemcpy(staged.get(), real.data(), real.size() * 4, cudaMemcpyHostToDevice));
      // The table reversed: page ids of the cache, but not the requests' own.
      const std::vector<int32_t> reversed(in.block_table.rbegin(), in.block_table.rend());

      std::unique_ptr<Decoder> decoder;
      MLAKIT_ASSERT_OK(Decoder::create(p, {.backend = backend, .tactic = tactic}, &decoder));
      const size_t ws_bytes = decoder->workspace_bytes();
      harness::DeviceBuffer workspace(std::max<size_t>(ws_bytes, 256));
      cudaStream_t stream = nullptr;
      MLAKIT_ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

      Output late[2];
      const std::vector<int32_t> before_lens[2] = {{1, 2000, 7, 0, 64, 3000}, lens};
      for (int k = 0; k < 2; ++k) {
        MLAKIT_ASSERT_CUDA(cudaMemcpy(dev.seq_lens.get(), before_lens[k].data(),
                                      before_lens[k].size() * 4, cudaMemcpyHostToDevice));
        MLAKIT_ASSERT_CUDA(cudaMemcpy(dev.block_table.get(), reversed.data(), table_size * 4,
                                      cudaMemcpyHostToDevice));
        MLAKIT_ASSERT_OK(dev.poison(in));
        MLAKIT_ASSERT_CUDA(cudaDeviceSynchronize());
        const int32_t* src = static_cast<const int32_t*>(staged.get());
        MLAKIT_ASSERT_CUDA(launch_late_copy(
            {src, static_cast<int32_t*>(dev.seq_lens.get()), static_cast<int64_t>(lens.size())},
            {src + lens.size(), static_cast<int32_t*>(dev.block_table.get()), table_size}, 50'000,
            stream));
        MLAKIT_ASSERT_OK(decoder->run(dev.args, workspace.get(), ws_bytes, stream));
        MLAKIT_ASSERT_CUDA(cudaStreamSynchronize(stream));
        late[k].out.resize(in.out_bytes() / 2);
        late[k].lse.resize(in.lse_count());
        MLAKIT_ASSERT_OK(dev.download(in, late[k].out.data(), late[k].lse.data()));
      }
      // The same inputs in place before the run (dev holds them now).
      Output direct;
      MLAKIT_ASSERT_OK(run_device(*decoder, in, dev, workspace.get(), stream, &direct));
      cudaStreamDestroy(stream);
      for (int k = 0; k < 2; ++k) {
        EXPECT_TRUE(bitwise_equal(late[k], direct)) << "case " << k;
        EXPECT_TRUE(matches_reference(in, late[k], ref)) << "case " << k;
      }
    }
  }
}

}  // namespace mlakit::testing
