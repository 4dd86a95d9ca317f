// The all-gather's exchanges of mlakit bench --cp N (bench_cp_rank.h).
#include "bench_cp_rank.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "core/cuda_check.h"

namespace mlakit::tools {

using harness::RankGroup;

Status alloc(size_t bytes, harness::DeviceBuffer* buffer, const char* what) {
  *buffer = harness::DeviceBuffer(std::max<size_t>(bytes, 256));
  if (buffer->get() == nullptr) {
    return Status(StatusCode::kCudaError, str_cat("cudaMalloc of ", bytes, " bytes (", what, ")"));
  }
  return Status::Ok();
}

Status alloc_merge_workspace(CpExchange exchange, CpRank* rank) {
  if (exchange != CpExchange::kSymmetric) {
    return alloc(rank->merge_workspace_bytes, &rank->merge_workspace, "merge workspace");
  }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  const ncclResult_t res = ncclMemAlloc(&rank->symmetric, rank->merge_workspace_bytes);
  if (res != ncclSuccess) {
    return Status(StatusCode::kCudaError, str_cat("ncclMemAlloc of ", rank->merge_workspace_bytes,
                                                  " bytes: ", ncclGetErrorString(res)));
  }
  return Status::Ok();
#else
  return unsupported("--cp-merge symmetric needs NCCL 2.27 or newer (symmetric windows); this is ",
                     NCCL_MAJOR, ".", NCCL_MINOR);
#endif
}

NcclMergeArgs merge_args(const CpCase& cc, const CpRank& rank, int k, bool lse) {
  const harness::DeviceInputs& d = rank.copies[k % rank.copies.size()];
  const Problem& p = cc.c.problem;
  return {.batch = cc.c.batch,
          .s_q = p.s_q,
          .h_q = p.h_q,
          .dtype = p.out_dtype,
          .partial_out = d.args.out,
          .partial_lse = d.args.lse,
          .sinks = p.has_sinks ? rank.sinks.as<float>() : nullptr,
          .out = rank.out.get(),
          .lse = lse ? rank.lse.as<float>() : nullptr};
}

Status prepare_exchange(const CpCase& cc, std::vector<CpRank>& ranks, CpComms& comms, bool host) {
  if (cc.exchange == CpExchange::kApart) return Status::Ok();
  const int world = static_cast<int>(ranks.size());
  for (int r = 0; r < world; ++r) {
    CpRank& rank = ranks[r];
    void* out = nullptr;
    float* lse = nullptr;
    MLAKIT_RETURN_IF_ERROR(nccl_merge_partial_slot(world, r, merge_args(cc, rank, 0, true),
                                                   rank.merge_ws(), &out, &lse));
    MLAKIT_CUDA_RETURN(cudaSetDevice(r));
    if (host) {  // the host decoder's partial, uploaded: copied into the slot
      const harness::DeviceInputs& d = rank.copies[0];
      MLAKIT_CUDA_RETURN(
          cudaMemcpy(out, d.args.out, rank.in.out_bytes(), cudaMemcpyDeviceToDevice));
      MLAKIT_CUDA_RETURN(cudaMemcpy(lse, d.args.lse, rank.in.lse_count() * sizeof(float),
                                    cudaMemcpyDeviceToDevice));
    }
    for (harness::DeviceInputs& d : rank.copies) {
      d.args.out = out;
      d.args.lse = lse;
    }
  }
  if (cc.exchange != CpExchange::kSymmetric) return Status::Ok();
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  std::vector<int> devices(world);
  std::iota(devices.begin(), devices.end(), 0);
  return harness::for_each_rank(devices, [&](int r, const RankGroup&) -> Status {
    CpRank& rank = ranks[r];
    const ncclResult_t res =
        ncclCommWindowRegister(comms.comms[r], rank.symmetric, rank.merge_workspace_bytes,
                               &rank.window, NCCL_WIN_COLL_SYMMETRIC);
    if (res != ncclSuccess) {
      return Status(StatusCode::kInternal,
                    str_cat("ncclCommWindowRegister: ", ncclGetErrorString(res)));
    }
    return Status::Ok();
  });
#else
  (void)comms;
  return Status::Ok();
#endif
}

void release_exchange(std::vector<CpRank>& ranks, CpComms& comms) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  const int world = static_cast<int>(ranks.size());
  std::vector<int> devices(world);
  std::iota(devices.begin(), devices.end(), 0);
  for (int r = 0; r < world; ++r) {  // nothing of the case's still runs
    (void)cudaSetDevice(r);
    (void)cudaDeviceSynchronize();
  }
  if (!comms.aborted) {
    (void)harness::for_each_rank(devices, [&](int r, const RankGroup&) -> Status {
      if (ranks[r].window != nullptr) {
        (void)ncclCommWindowDeregister(comms.comms[r], ranks[r].window);
      }
      ranks[r].window = nullptr;
      return Status::Ok();
    });
  }
  for (int r = 0; r < world; ++r) {
    if (ranks[r].symmetric == nullptr) continue;
    (void)cudaSetDevice(r);
    (void)ncclMemFree(ranks[r].symmetric);
    ranks[r].symmetric = nullptr;
  }
#else
  (void)ranks;
  (void)comms;
#endif
}

}  // namespace mlakit::tools
