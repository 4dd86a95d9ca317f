// GPU tests of the NCCL merges (mlakit/cp_nccl.h) over 2 and 4 GPUs of this machine: one NCCL
// communicator per GPU (ncclCommInitAll), one thread per GPU (harness::for_each_rank). A global
// workload is sharded per rank as a server would lay it out (harness::shard_inputs), each rank's
// partial is merged over NCCL by both paths (all-gather: every rank's result, bit-equal across
// ranks; heads: each rank's heads, put together) and compared with the cpu backend's unsharded
// decode (harness::default_tolerance). The partials come from the cpu backend (the merges alone)
// and from each rank's GPU decode (backend auto; skipped while no GPU backend takes cp_world >
// 1). h_q 16 and 128, s_q 1 and 2 (causal), interleave 1 and 64, requests with empty shards and
// an empty request, sinks (applied by the merge), results written over the partial (in place),
// and the merges captured in a CUDA graph. The all-gather also with each partial in its slot of
// the workspace (nccl_merge_partial_slot: one gather in place) and with that workspace an NCCL
// symmetric window (NCCL 2.27+). Skips with fewer than two GPUs.
#include "mlakit/cp_nccl.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/cuda_check.h"
#include "harness/timing.h"
#include "mlakit/cp.h"
#include "sm80_test_util.h"

namespace mlakit::testing {
namespace {

using harness::RankGroup;

int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

#define MLAKIT_SKIP_WITHOUT_GPUS(n)                                                           \
  do {                                                                                        \
    if (gpu_count() < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs, found " << gpu_count(); \
  } while (0)

// The communicators of GPUs 0..world-1, destroyed with it.
struct Comms {
  std::vector<ncclComm_t> comms;
  std::vector<int> devices;
  explicit Comms(int world) : comms(world, nullptr), devices(world) {
    std::iota(devices.begin(), devices.end(), 0);
    if (ncclCommInitAll(comms.data(), world, devices.data()) != ncclSuccess) comms.clear();
  }
  ~Comms() {
    for (ncclComm_t c : comms) ncclCommDestroy(c);
  }
  Comms(const Comms&) = delete;
  Comms& operator=(const Comms&) = delete;
};

// The worlds this machine can test: 2, and 4 when it has 4 GPUs.
std::vector<int> worlds() {
  std::vector<int> w{2};
  if (gpu_count() >= 4) w.push_back(4);
  return w;
}

struct NcclCase {
  int h_q = 16, s_q = 1, interleave = 1;
  std::vector<int32_t> lens;
  bool sinks = false;
  bool in_place = false;  // out and lse written over the partial
  bool graph = false;     // the merge captured in a CUDA graph, then replayed
};

std::string name(const NcclCase& c, int world) {
  std::string s = "world " + std::to_string(world) + " h_q " + std::to_string(c.h_q) + " s_q " +
                  std::to_string(c.s_q) + " I " + std::to_string(c.interleave) + " lens";
  for (const int32_t l : c.lens) s += " " + std::to_string(l);
  if (c.sinks) s += " sinks";
  if (c.in_place) s += " in-place";
  if (c.graph) s += " graph";
  return s;
}

// Lengths 0 (no token anywhere), 1 and 70 (with I 64 and 4 ranks, ranks 2 and 3 empty), lengths
// that are not multiples of I * N, one 2000 tokens long.
std::vector<NcclCase> cases() {
  return {
      {.h_q = 16, .s_q = 1, .interleave = 1, .lens = {1, 5, 300, 1000}},
      {.h_q = 128, .s_q = 1, .interleave = 64, .lens = {0, 70, 1000, 257}},
      {.h_q = 16, .s_q = 2, .interleave = 64, .lens = {1, 2, 130, 600}, .sinks = true},
      {.h_q = 128, .s_q = 2, .interleave = 1, .lens = {3, 2000}, .in_place = true},
      {.h_q = 16, .s_q = 1, .interleave = 64, .lens = {70, 129, 0}, .sinks = true, .graph = true},
  };
}

// The global workload of a case (bf16, page 64, LSE returned).
harness::HostInputs global_inputs(const NcclCase& c, uint64_t seed) {
  Problem p;
  p.h_q = c.h_q;
  p.s_q = c.s_q;
  p.max_batch = static_cast<int>(c.lens.size());
  p.max_seq_len = std::max(1, *std::max_element(c.lens.begin(), c.lens.end()));
  p.return_lse = true;
  p.has_sinks = c.sinks;
  return harness::make_inputs(p, c.lens, {.seed = seed});
}

// One rank's partial on its GPU: `pristine` as decoded, `work` the merge's input (a fresh copy
// for each merge, since an in-place merge overwrites it).
struct RankPartial {
  harness::DeviceBuffer pristine_out, pristine_lse, work_out, work_lse, sinks;
};

// Checks that every row with no visible token on the rank is the neutral state (out 0, lse -inf).
::testing::AssertionResult empty_rows_are_neutral(const harness::HostInputs& shard,
                                                  const std::vector<uint16_t>& out,
                                                  const std::vector<float>& lse) {
  const Problem& p = shard.problem;
  for (int i = 0; i < shard.batch; ++i) {
    for (int t = 0; t < p.s_q; ++t) {
      const int64_t len = shard.seq_lens[i];
      const int64_t visible = p.s_q == 1 ? len : std::clamp<int64_t>(len - p.s_q + 1 + t, 0, len);
      if (cp_local_len(visible, p.cp_world, p.cp_rank, p.cp_interleave) > 0) continue;
      for (int h = 0; h < p.h_q; ++h) {
        const size_t row = (size_t(i) * p.s_q + t) * p.h_q + h;
        if (lse[row] != -std::numeric_limits<float>::infinity()) {
          return ::testing::AssertionFailure() << "row " << row << ": lse " << lse[row];
        }
        for (int d = 0; d < kDv; ++d) {
          if (out[row * kDv + d] != 0) {
            return ::testing::AssertionFailure() << "row " << row << ": out not 0";
          }
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// The partial of each rank: from the cpu backend, or from the rank's GPU decode (auto). Returns
// kUnsupported when `gpu` and no GPU backend runs the rank's problem.
Status make_partials(const harness::HostInputs& global, const NcclCase& c, const Comms& comms,
                     bool gpu, std::vector<RankPartial>* partials) {
  const int world = static_cast<int>(comms.devices.size());
  partials->clear();
  partials->resize(world);
  return harness::for_each_rank(comms.devices, [&](int r, const RankGroup&) -> Status {
    const harness::HostInputs shard = harness::shard_inputs(global, world, r, c.interleave);
    RankPartial& part = (*partials)[r];
    const size_t out_bytes = shard.out_bytes(), lse_bytes = shard.lse_count() * sizeof(float);
    part.pristine_out = harness::DeviceBuffer(out_bytes);
    part.pristine_lse = harness::DeviceBuffer(lse_bytes);
    part.work_out = harness::DeviceBuffer(out_bytes);
    part.work_lse = harness::DeviceBuffer(lse_bytes);
    if (c.sinks) {
      part.sinks = harness::DeviceBuffer(global.sinks.size() * sizeof(float));
      MLAKIT_CUDA_RETURN(cudaMemcpy(part.sinks.get(), global.sinks.data(), part.sinks.size(),
                                    cudaMemcpyHostToDevice));
    }
    Output host;
    host.out.resize(out_bytes / 2);
    host.lse.resize(shard.lse_count());
    if (!gpu) {
      std::unique_ptr<Decoder> cpu;
      MLAKIT_RETURN_IF_ERROR(Decoder::create(shard.problem, {.backend = "cpu"}, &cpu));
      MLAKIT_RETURN_IF_ERROR(
          cpu->run(shard.args(host.out.data(), host.lse.data()), nullptr, 0, nullptr));
      MLAKIT_CUDA_RETURN(
          cudaMemcpy(part.pristine_out.get(), host.out.data(), out_bytes, cudaMemcpyHostToDevice));
      MLAKIT_CUDA_RETURN(
          cudaMemcpy(part.pristine_lse.get(), host.lse.data(), lse_bytes, cudaMemcpyHostToDevice));
    } else {
      std::unique_ptr<Decoder> decoder;
      MLAKIT_RETURN_IF_ERROR(Decoder::create(shard.problem, {}, &decoder));
      if (!decoder->device_memory()) {
        std::string why;
        for (const char* b : {"sm90", "sm80"}) {
          why += std::string(why.empty() ? "" : "; ") + b + ": " +
                 can_run(b, shard.problem).to_string();
        }
        return unsupported("no GPU backend decodes cp_world > 1 here (", why, ")");
      }
      harness::DeviceInputs dev;
      MLAKIT_RETURN_IF_ERROR(harness::DeviceInputs::upload(shard, &dev));
      harness::DeviceBuffer ws(std::max<size_t>(decoder->workspace_bytes(), 256));
      MLAKIT_RETURN_IF_ERROR(dev.poison(shard));
      MLAKIT_RETURN_IF_ERROR(decoder->run(dev.args, ws.get(), decoder->workspace_bytes(), nullptr));
      MLAKIT_CUDA_RETURN(cudaDeviceSynchronize());
      MLAKIT_RETURN_IF_ERROR(dev.download(shard, host.out.data(), host.lse.data()));
      const ::testing::AssertionResult neutral = empty_rows_are_neutral(shard, host.out, host.lse);
      if (!neutral) {
        return Status(StatusCode::kInternal,
                      str_cat("rank ", r, "'s empty rows: ", neutral.message()));
      }
      MLAKIT_CUDA_RETURN(
          cudaMemcpy(part.pristine_out.get(), dev.out.get(), out_bytes, cudaMemcpyDeviceToDevice));
      MLAKIT_CUDA_RETURN(
          cudaMemcpy(part.pristine_lse.get(), dev.lse.get(), lse_bytes, cudaMemcpyDeviceToDevice));
    }
    MLAKIT_CUDA_RETURN(cudaDeviceSynchronize());  // the merges run on streams of their own
    return Status::Ok();
  });
}

// Where an all-gather's partial lives: apart from the workspace, in the rank's slot of it, or in
// its slot of a workspace registered as an NCCL symmetric window.
enum class Exchange { kApart, kSlot, kSymmetric };

const char* name(Exchange e) {
  return e == Exchange::kApart ? "" : e == Exchange::kSlot ? " in its slot" : " symmetric";
}

// The merge workspace of one rank: cudaMalloc'd, or from ncclMemAlloc and registered on the
// rank's communicator (collectively: every rank's thread calls it), released with it.
struct MergeWorkspace {
  harness::DeviceBuffer plain;
  void* symmetric = nullptr;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  ncclWindow_t window = nullptr;
#endif
  ncclComm_t comm = nullptr;
  Status create(Exchange e, ncclComm_t c, size_t bytes) {
    if (e != Exchange::kSymmetric) {
      plain = harness::DeviceBuffer(std::max<size_t>(bytes, 256));
      return Status::Ok();
    }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    comm = c;
    if (ncclMemAlloc(&symmetric, bytes) != ncclSuccess) {
      return Status(StatusCode::kCudaError, "ncclMemAlloc");
    }
    if (ncclCommWindowRegister(c, symmetric, bytes, &window, NCCL_WIN_COLL_SYMMETRIC) !=
        ncclSuccess) {
      return Status(StatusCode::kInternal, "ncclCommWindowRegister");
    }
    return Status::Ok();
#else
    (void)c;
    return unsupported("symmetric windows need NCCL 2.27");
#endif
  }
  void* get() const { return symmetric != nullptr ? symmetric : plain.get(); }
  ~MergeWorkspace() {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    if (window != nullptr) (void)ncclCommWindowDeregister(comm, window);
    if (symmetric != nullptr) (void)ncclMemFree(symmetric);
#endif
  }
};

// Merges the partials over NCCL (`merge`) on every rank and returns the whole result [b, s_q, h_q,
// 512] (and lse): the all-gather's from rank 0 (every rank's equal to it bit for bit), the heads'
// put together from the ranks'.
void merge_and_collect(const harness::HostInputs& global, const NcclCase& c, const Comms& comms,
                       CpMerge merge, Exchange exchange, std::vector<RankPartial>& partials,
                       Output* got) {
  const int world = static_cast<int>(comms.devices.size());
  const Problem& p = global.problem;
  const int heads = merge == CpMerge::kHeads ? p.h_q / world : p.h_q;
  const size_t rows = size_t(global.batch) * p.s_q;
  std::vector<Output> results(world);
  const Status st = harness::for_each_rank(comms.devices, [&](int r, const RankGroup&) -> Status {
    RankPartial& part = partials[r];
    const size_t out_bytes = rows * heads * kDv * 2, lse_bytes = rows * heads * sizeof(float);
    harness::DeviceBuffer out(out_bytes), lse(lse_bytes);
    NcclMergeArgs a{.batch = global.batch,
                    .s_q = p.s_q,
                    .h_q = p.h_q,
                    .dtype = p.out_dtype,
                    .partial_out = part.work_out.get(),
                    .partial_lse = part.work_lse.as<float>(),
                    .sinks = c.sinks ? part.sinks.as<float>() : nullptr,
                    .out = c.in_place ? part.work_out.get() : out.get(),
                    .lse = c.in_place ? part.work_lse.as<float>() : lse.as<float>()};
    size_t ws_bytes = 0;
    MLAKIT_RETURN_IF_ERROR(nccl_merge_workspace_bytes(merge, world, a, &ws_bytes));
    MergeWorkspace workspace;
    MLAKIT_RETURN_IF_ERROR(workspace.create(exchange, comms.comms[r], ws_bytes));
    void* ws = workspace.get();
    if (exchange != Exchange::kApart) {
      // The partial in the rank's slot; the results apart from the workspace.
      void* slot_out = nullptr;
      float* slot_lse = nullptr;
      MLAKIT_RETURN_IF_ERROR(nccl_merge_partial_slot(world, r, a, ws, &slot_out, &slot_lse));
      a.partial_out = slot_out;
      a.partial_lse = slot_lse;
      a.out = out.get();
      a.lse = lse.as<float>();
    }
    StreamHolder holder;
    cudaStream_t stream = holder.stream;
    // A fresh partial (an in-place merge overwrote the last one), the results poisoned (NaN),
    // all on the merge's stream.
    const auto fresh_partial = [&]() -> Status {
      MLAKIT_CUDA_RETURN(cudaMemcpyAsync(const_cast<void*>(a.partial_out), part.pristine_out.get(),
                                         part.work_out.size(), cudaMemcpyDeviceToDevice, stream));
      MLAKIT_CUDA_RETURN(cudaMemcpyAsync(const_cast<float*>(a.partial_lse), part.pristine_lse.get(),
                                         part.work_lse.size(), cudaMemcpyDeviceToDevice, stream));
      return Status::Ok();
    };
    if (exchange != Exchange::kApart) {
      MLAKIT_CUDA_RETURN(cudaMemsetAsync(ws, 0xff, ws_bytes, stream));
    }
    MLAKIT_RETURN_IF_ERROR(fresh_partial());
    MLAKIT_CUDA_RETURN(cudaMemsetAsync(out.get(), 0xff, out_bytes, stream));
    MLAKIT_CUDA_RETURN(cudaMemsetAsync(lse.get(), 0xff, lse_bytes, stream));
    Status run;
    if (c.graph) {
      // Captured once, replayed twice over a poisoned workspace: the graph holds the whole merge.
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      MLAKIT_CUDA_RETURN(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      run = merge_nccl(merge, comms.comms[r], a, ws, ws_bytes, stream);
      const cudaError_t end = cudaStreamEndCapture(stream, &graph);
      if (run.ok()) run = cuda_status(end, "cudaStreamEndCapture", __FILE__, __LINE__);
      if (run.ok()) {
        run = cuda_status(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate", __FILE__,
                          __LINE__);
      }
      for (int k = 0; k < 2 && run.ok(); ++k) {
        run = cuda_status(cudaMemsetAsync(ws, 0xff, ws_bytes, stream), "cudaMemsetAsync", __FILE__,
                          __LINE__);
        if (run.ok() && exchange != Exchange::kApart) run = fresh_partial();
        if (run.ok()) {
          run = cuda_status(cudaGraphLaunch(exec, stream), "cudaGraphLaunch", __FILE__, __LINE__);
        }
      }
      if (exec != nullptr) cudaGraphExecDestroy(exec);
      if (graph != nullptr) cudaGraphDestroy(graph);
    } else {
      run = merge_nccl(merge, comms.comms[r], a, ws, ws_bytes, stream);
    }
    const cudaError_t sync = cudaStreamSynchronize(stream);
    MLAKIT_RETURN_IF_ERROR(run);
    MLAKIT_CUDA_RETURN(sync);
    Output& res = results[r];
    res.out.resize(out_bytes / 2);
    res.lse.resize(rows * heads);
    MLAKIT_CUDA_RETURN(cudaMemcpy(res.out.data(), a.out, out_bytes, cudaMemcpyDeviceToHost));
    MLAKIT_CUDA_RETURN(cudaMemcpy(res.lse.data(), a.lse, lse_bytes, cudaMemcpyDeviceToHost));
    return Status::Ok();
  });
  MLAKIT_ASSERT_OK(st);
  if (merge == CpMerge::kAllGather) {
    for (int r = 1; r < world; ++r) {
      ASSERT_TRUE(bitwise_equal(results[r], results[0])) << "rank " << r << " vs rank 0";
    }
    *got = results[0];
    return;
  }
  got->out.assign(global.out_bytes() / 2, 0);
  got->lse.assign(global.lse_count(), 0.0f);
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < rows; ++i) {
      std::copy_n(&results[r].out[i * heads * kDv], heads * kDv,
                  &got->out[(i * p.h_q + r * heads) * kDv]);
      std::copy_n(&results[r].lse[i * heads], heads, &got->lse[i * p.h_q + r * heads]);
    }
  }
}

void check_merges(bool gpu_partials) {
  uint64_t seed = 400;
  for (const int world : worlds()) {
    Comms comms(world);
    ASSERT_EQ(comms.comms.size(), size_t(world)) << "ncclCommInitAll of " << world << " GPUs";
    for (const NcclCase& c : cases()) {
      SCOPED_TRACE(name(c, world));
      const harness::HostInputs global = global_inputs(c, seed++);
      Output ref;
      MLAKIT_ASSERT_OK(cpu_reference(global, &ref));
      std::vector<RankPartial> partials;
      const Status made = make_partials(global, c, comms, gpu_partials, &partials);
      if (made.code() == StatusCode::kUnsupported) GTEST_SKIP() << made.message();
      MLAKIT_ASSERT_OK(made);
      const std::pair<CpMerge, Exchange> merges[] = {
          {CpMerge::kAllGather, Exchange::kApart},
          {CpMerge::kHeads, Exchange::kApart},
          {CpMerge::kAllGather, Exchange::kSlot},
          {CpMerge::kAllGather,
           NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0) ? Exchange::kSymmetric : Exchange::kSlot}};
      for (const auto& [merge, exchange] : merges) {
        const std::string how = str_cat(to_string(merge), name(exchange));
        SCOPED_TRACE(how);
        Output got;
        merge_and_collect(global, c, comms, merge, exchange, partials, &got);
        if (::testing::Test::HasFatalFailure()) return;
        const ::testing::AssertionResult result = matches_reference(global, got, ref);
        EXPECT_TRUE(result);
        std::printf("  %-60s %-20s %s\n", name(c, world).c_str(), how.c_str(), result.message());
      }
    }
  }
}

TEST(CpNccl, CpuPartialsMergedOverNcclEqualTheUnshardedDecode) {
  MLAKIT_SKIP_WITHOUT_GPUS(2);
  check_merges(false);
}

TEST(CpNccl, ShardedGpuDecodeMergedOverNcclEqualsTheUnshardedDecode) {
  MLAKIT_SKIP_WITHOUT_GPUS(2);
  check_merges(true);
}

// What a real communicator refuses before anything is sent: h_q not a multiple of N by heads (on
// every rank alike), a communicator of another device, a workspace one byte short (one rank's).
TEST(CpNccl, RefusalsWithACommunicator) {
  MLAKIT_SKIP_WITHOUT_GPUS(2);
  Comms comms(2);
  ASSERT_EQ(comms.comms.size(), 2u);
  harness::DeviceBuffer partial(6 * kDv * 2), lse(6 * 4), out(6 * kDv * 2), ws(1 << 20);
  NcclMergeArgs a{.batch = 1,
                  .s_q = 1,
                  .h_q = 6,
                  .partial_out = partial.get(),
                  .partial_lse = lse.as<float>(),
                  .out = out.get()};
  const Status st = harness::for_each_rank(comms.devices, [&](int r, const RankGroup&) -> Status {
    NcclMergeArgs seven = a;
    seven.h_q = 7;
    const Status heads = merge_heads_nccl(comms.comms[r], seven, ws.get(), 1 << 20, nullptr);
    if (heads.code() != StatusCode::kInvalidArgument ||
        heads.message().find("h_q: expected a multiple of the communicator's size 2") != 0) {
      return Status(StatusCode::kInternal, "h_q 7 by heads: " + heads.to_string());
    }
    return Status::Ok();
  });
  MLAKIT_ASSERT_OK(st);
  // Rank 1's communicator with device 0 current: refused before any NCCL call.
  MLAKIT_ASSERT_CUDA(cudaSetDevice(0));
  const Status other = merge_allgather_nccl(comms.comms[1], a, ws.get(), 1 << 20, nullptr);
  EXPECT_EQ(other.code(), StatusCode::kInvalidArgument) << other.to_string();
  EXPECT_NE(other.message().find("comm: expected a communicator of the current CUDA device 0, "
                                 "given one of device 1"),
            std::string::npos)
      << other.message();
  size_t need = 0;
  MLAKIT_ASSERT_OK(nccl_merge_workspace_bytes(CpMerge::kAllGather, 2, a, &need));
  const Status small = merge_allgather_nccl(comms.comms[0], a, ws.get(), need - 1, nullptr);
  EXPECT_EQ(small.code(), StatusCode::kInvalidArgument) << small.to_string();
  EXPECT_EQ(small.message().rfind("workspace_size", 0), 0u) << small.message();
}

}  // namespace
}  // namespace mlakit::testing
