// mlakit bench --cp N (cmd_bench_cp.cc): the communicators of GPUs 0..N-1, one rank's state of a
// case, and the all-gather's in-place and symmetric-window exchanges (--cp-merge inplace,
// symmetric: the partials decoded into the ranks' slots of the merge workspace).
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "bench_cp_row.h"
#include "core/check.h"
#include "harness/timing.h"
#include "mlakit/cp_nccl.h"
#include "mlakit/mlakit.h"

namespace mlakit::tools {

// The communicators of GPUs 0..N-1, destroyed with it.
struct CpComms {
  std::vector<ncclComm_t> comms;
  bool aborted = false;
  // After an error once collectives may have been enqueued: NCCL's remedy for an error within a
  // group, ncclCommAbort on every communicator, which also makes the NCCL kernels that wait for
  // a peer return. Called with no rank thread running (NCCL frees the communicator); they are not
  // used again.
  void abort() {
    for (ncclComm_t& c : comms) {
      if (c != nullptr) (void)ncclCommAbort(c);
      c = nullptr;
    }
    aborted = true;
  }
  ~CpComms() {
    for (ncclComm_t c : comms) {
      if (c != nullptr) ncclCommDestroy(c);
    }
  }
  Status init(int world) {
    std::vector<int> devices(world);
    std::iota(devices.begin(), devices.end(), 0);
    comms.assign(world, nullptr);
    const ncclResult_t r = ncclCommInitAll(comms.data(), world, devices.data());
    if (r != ncclSuccess) {
      comms.clear();
      return Status(StatusCode::kInternal,
                    str_cat("ncclCommInitAll of ", world, " GPUs: ", ncclGetErrorString(r)));
    }
    return Status::Ok();
  }
};

// One rank of a case: its shard, its decoder, the device copies of its inputs (their out / lse
// are its partial), the merge's workspace and result.
struct CpRank {
  harness::HostInputs in;  // the shard (its cache released once uploaded)
  std::unique_ptr<Decoder> decoder;
  std::vector<harness::DeviceInputs> copies;
  harness::DeviceBuffer workspace, sinks;
  size_t workspace_bytes = 0;
  harness::DeviceBuffer merge_workspace, out, lse;
  size_t merge_workspace_bytes = 0;
  uint64_t cache_bytes = 0;
  // CpExchange::kSymmetric: the merge workspace from ncclMemAlloc, registered on the rank's
  // communicator (released by release_exchange before the communicators go).
  void* symmetric = nullptr;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  ncclWindow_t window = nullptr;
#endif
  void* merge_ws() const { return symmetric != nullptr ? symmetric : merge_workspace.get(); }
};

// cudaMalloc of at least 256 bytes into *buffer; kCudaError naming `what`.
Status alloc(size_t bytes, harness::DeviceBuffer* buffer, const char* what);

// The rank's merge workspace (rank->merge_workspace_bytes): cudaMalloc'd, or for kSymmetric from
// ncclMemAlloc (NCCL 2.27+; else kUnsupported).
Status alloc_merge_workspace(CpExchange exchange, CpRank* rank);

// The merge's arguments of copy k of the rank's inputs (its partial), the result into rank.out
// and, with `lse`, rank.lse.
NcclMergeArgs merge_args(const CpCase& cc, const CpRank& rank, int k, bool lse);

// In place (inplace, symmetric): every copy's decode writes its partial into the rank's slot of
// the merge workspace (nccl_merge_partial_slot; `host`: the host decoder's uploaded partial is
// copied there); symmetric: the workspaces registered as one symmetric window, collectively (a
// thread a rank).
Status prepare_exchange(const CpCase& cc, std::vector<CpRank>& ranks, CpComms& comms, bool host);

// The symmetric windows deregistered (collectively, once every device is idle; not after an
// abort) and their memory freed.
void release_exchange(std::vector<CpRank>& ranks, CpComms& comms);

}  // namespace mlakit::tools
