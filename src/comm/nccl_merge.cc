// The NCCL merges of context-parallel partials (mlakit/cp_nccl.h): the checks
// (nccl_merge_check.cc), the communication on the caller's communicator and stream, then
// merge_partials' kernel on what was received.
//
// kAllGather: one NCCL group of two ncclAllGather (the LSEs, the outputs), which NCCL runs as one
// launch, into the workspace [N, ...]; then the merge of all rows.
// kHeads: pack_heads lays the partial out by destination rank; one NCCL group of ncclSend /
// ncclRecv with every other rank (outputs and LSEs, one launch); then the merge of this rank's
// heads. Bytes each moves: docs/context-parallel.md, "The communication".
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm/nccl_merge_check.h"
#include "comm/pack_heads.h"
#include "core/check.h"
#include "core/cuda_check.h"
#include "core/guard.h"
#include "mlakit/cp.h"
#include "mlakit/cp_nccl.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 9, 0)
#error "mlakit's NCCL merges need NCCL 2.9 or newer (graph capture of collectives and send/recv)"
#endif

namespace mlakit {
namespace {

Status nccl_status(ncclResult_t result, ncclComm_t comm, const char* call, const char* file,
                   int line) {
  if (result == ncclSuccess) return Status::Ok();
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)  // non-blocking communicators
  if (result == ncclInProgress) {
    // A non-blocking communicator (ncclConfig_t::blocking 0) may enqueue the communication after
    // returning: the merge kernel would not follow it on the stream.
    return unsupported(call, " returned ncclInProgress at ", file, ":", line,
                       ": the merges take blocking communicators only (ncclConfig_t::blocking 1, "
                       "NCCL's default)");
  }
#endif
  const StatusCode code = result == ncclUnhandledCudaError ? StatusCode::kCudaError
                          : result == ncclInvalidArgument || result == ncclInvalidUsage
                              ? StatusCode::kInvalidArgument
                              : StatusCode::kInternal;
  std::string detail;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') detail = str_cat(": ", last);
#else
  (void)comm;
#endif
  return Status(code, str_cat(call, " failed at ", file, ":", line, ": ",
                              ncclGetErrorString(result), detail));
}

#define MLAKIT_NCCL_RETURN(comm, call) \
  MLAKIT_RETURN_IF_ERROR(nccl_status((call), (comm), #call, __FILE__, __LINE__))

// The communicator's size and this process's rank in it; it must belong to the current device.
Status comm_info(ncclComm_t comm, int* world, int* rank) {
  if (comm == nullptr) return invalid_argument("comm", "an NCCL communicator", "nullptr");
  int device = -1, current = -1;
  ncclResult_t state = ncclSuccess;  // an error a previous operation left, or initialization
  MLAKIT_NCCL_RETURN(comm, ncclCommGetAsyncError(comm, &state));
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  if (state == ncclInProgress) {
    return invalid_argument("comm", "an initialized communicator", "one still initializing");
  }
#endif
  MLAKIT_RETURN_IF_ERROR(
      nccl_status(state, comm, "the communicator (ncclCommGetAsyncError)", __FILE__, __LINE__));
  MLAKIT_NCCL_RETURN(comm, ncclCommCount(comm, world));
  MLAKIT_NCCL_RETURN(comm, ncclCommUserRank(comm, rank));
  MLAKIT_NCCL_RETURN(comm, ncclCommCuDevice(comm, &device));
  MLAKIT_CUDA_RETURN(cudaGetDevice(&current));
  if (device != current) {
    return invalid_argument("comm", str_cat("a communicator of the current CUDA device ", current),
                            str_cat("one of device ", device));
  }
  return Status::Ok();
}

// The NCCL calls of `calls` as one group (one launch); ncclGroupEnd closes the group whatever
// happened. After a failed call, ncclGroupEnd returns that error and drops everything the group
// had queued, so this rank sends nothing (NCCL's source, 2.9 to 2.30; its documentation says
// instead that a call refused with ncclInvalidArgument alone has no effect, the rest of the group
// being sent). Either way the peers' parts are enqueued and wait for this rank's: cp_nccl.h tells
// the caller to treat it as fatal for the communicator.
template <typename Calls>
Status grouped(ncclComm_t comm, Calls&& calls) {
  MLAKIT_NCCL_RETURN(comm, ncclGroupStart());
  const Status status = calls();
  const ncclResult_t end = ncclGroupEnd();
  MLAKIT_RETURN_IF_ERROR(status);
  MLAKIT_NCCL_RETURN(comm, end);
  return Status::Ok();
}

Status merge(CpMerge how, ncclComm_t comm, const NcclMergeArgs& a, void* workspace,
             size_t workspace_size, Stream stream) {
  int world = 0, rank = 0;
  MLAKIT_RETURN_IF_ERROR(comm_info(comm, &world, &rank));
  comm::MergeLayout l;
  MLAKIT_RETURN_IF_ERROR(comm::check_merge(how, world, rank, a, workspace, workspace_size, &l));
  if (a.batch == 0) return Status::Ok();
  uint8_t* ws = static_cast<uint8_t*>(workspace);
  uint8_t* recv_out = ws + l.recv_out;
  float* recv_lse = reinterpret_cast<float*>(ws + l.recv_lse);

  const bool in_slot = how == CpMerge::kAllGather && comm::partial_in_slot(l, rank, a, workspace);
  if (in_slot) {
    // One collective over whole slots, in place (sendbuff = recvbuff + rank * count): NCCL's
    // symmetric kernels take it when the workspace is a symmetric window.
    MLAKIT_NCCL_RETURN(comm,
                       ncclAllGather(ws + rank * l.slot, ws, l.slot, ncclUint8, comm, stream));
  } else if (how == CpMerge::kAllGather) {
    // Bytes (ncclUint8): nothing is reduced, so the element type does not matter.
    MLAKIT_RETURN_IF_ERROR(grouped(comm, [&]() -> Status {
      MLAKIT_NCCL_RETURN(
          comm, ncclAllGather(a.partial_lse, recv_lse, l.slice_lse, ncclUint8, comm, stream));
      MLAKIT_NCCL_RETURN(
          comm, ncclAllGather(a.partial_out, recv_out, l.slice_out, ncclUint8, comm, stream));
      return Status::Ok();
    }));
  } else {
    uint8_t* send_out = ws + l.send_out;
    uint8_t* send_lse = ws + l.send_lse;
    MLAKIT_RETURN_IF_ERROR(
        comm::pack_heads({.partial_out = a.partial_out,
                          .partial_lse = a.partial_lse,
                          .send_out = send_out,
                          .send_lse = reinterpret_cast<float*>(send_lse),
                          .self_out = recv_out + rank * l.slice_out,
                          .self_lse = recv_lse + rank * l.rows,
                          .rows = int64_t{a.batch} * a.s_q,
                          .world = world,
                          .self = rank,
                          .heads = l.heads,
                          .head_bytes = static_cast<int32_t>(kDv * dtype_bytes(a.dtype))},
                         stream));
    MLAKIT_RETURN_IF_ERROR(grouped(comm, [&]() -> Status {
      for (int k = 0; k < world; ++k) {
        if (k == rank) continue;
        MLAKIT_NCCL_RETURN(
            comm, ncclSend(send_lse + k * l.slice_lse, l.slice_lse, ncclUint8, k, comm, stream));
        MLAKIT_NCCL_RETURN(
            comm, ncclRecv(recv_lse + k * l.rows, l.slice_lse, ncclUint8, k, comm, stream));
        MLAKIT_NCCL_RETURN(
            comm, ncclSend(send_out + k * l.slice_out, l.slice_out, ncclUint8, k, comm, stream));
        MLAKIT_NCCL_RETURN(
            comm, ncclRecv(recv_out + k * l.slice_out, l.slice_out, ncclUint8, k, comm, stream));
      }
      return Status::Ok();
    }));
  }
  const int64_t first_head = how == CpMerge::kHeads ? int64_t{rank} * l.heads : 0;
  const size_t elem = dtype_bytes(a.dtype);
  return merge_partials(
      ops::Device::kCuda,
      {.world = world,
       .batch = a.batch,
       .s_q = a.s_q,
       .h_q = l.heads,
       .dtype = a.dtype,
       .partial_out = in_slot ? static_cast<void*>(ws) : recv_out,
       .partial_lse = in_slot ? reinterpret_cast<float*>(ws + l.slot_lse) : recv_lse,
       .partial_out_stride = in_slot ? static_cast<int64_t>(l.slot / elem) : 0,
       .partial_lse_stride = in_slot ? static_cast<int64_t>(l.slot / sizeof(float)) : 0,
       .sinks = a.sinks != nullptr ? a.sinks + first_head : nullptr,
       .out = a.out,
       .lse = a.lse,
       .lse_base2 = a.lse_base2},
      stream);
}

}  // namespace

Status nccl_merge_workspace_bytes(CpMerge how, int32_t world, const NcclMergeArgs& args,
                                  size_t* bytes) {
  return guarded("nccl_merge_workspace_bytes", [&]() -> Status {
    if (bytes == nullptr) return invalid_argument("bytes", "a pointer", "nullptr");
    comm::MergeLayout l;
    MLAKIT_RETURN_IF_ERROR(comm::merge_layout(how, world, args, &l));
    *bytes = l.bytes;
    return Status::Ok();
  });
}

Status nccl_merge_partial_slot(int32_t world, int32_t rank, const NcclMergeArgs& args,
                               void* workspace, void** partial_out, float** partial_lse) {
  return guarded("nccl_merge_partial_slot", [&]() -> Status {
    if (partial_out == nullptr) return invalid_argument("partial_out", "a pointer", "nullptr");
    if (partial_lse == nullptr) return invalid_argument("partial_lse", "a pointer", "nullptr");
    return comm::partial_slot(world, rank, args, workspace, partial_out, partial_lse);
  });
}

Status merge_nccl(CpMerge how, ncclComm* comm, const NcclMergeArgs& args, void* workspace,
                  size_t workspace_size, Stream stream) {
  return guarded("merge_nccl",
                 [&] { return merge(how, comm, args, workspace, workspace_size, stream); });
}

Status merge_allgather_nccl(ncclComm* comm, const NcclMergeArgs& args, void* workspace,
                            size_t workspace_size, Stream stream) {
  return guarded("merge_allgather_nccl", [&] {
    return merge(CpMerge::kAllGather, comm, args, workspace, workspace_size, stream);
  });
}

Status merge_heads_nccl(ncclComm* comm, const NcclMergeArgs& args, void* workspace,
                        size_t workspace_size, Stream stream) {
  return guarded("merge_heads_nccl", [&] {
    return merge(CpMerge::kHeads, comm, args, workspace, workspace_size, stream);
  });
}

}  // namespace mlakit
