// mlakit context parallel decode over the caller's NCCL communicator (docs/context-parallel.md,
// "The communication (NCCL)"): the two merges of cp.h's partials, with the communication done
// by NCCL collectives on the caller's communicator and stream. For servers without PyTorch (with
// it: python/mlakit/cp_dist.py does the same over torch.distributed).
//
// Built only when mlakit finds NCCL (CMake option MLAKIT_NCCL): the functions live in the static
// library mlakit_nccl (CMake target mlakit::mlakit_nccl), which links libnccl; the core library
// does not depend on NCCL. This header needs no NCCL or CUDA header: ncclComm_t is NCCL's
// `ncclComm*`, declared below.
//
// One step of a rank (every rank of the communicator calls the same functions in the same order,
// with the same shapes, as NCCL's collectives require):
//
//   decoder->run({... out = partial_out, lse = partial_lse ...}, ws, ws_size, stream);
//   merge_allgather_nccl(comm, {... partial_out, partial_lse, out, lse ...}, merge_ws,
//                        merge_ws_size, stream);
//
// Both are asynchronous on `stream` (the decode, the communication and the merge kernel follow
// each other there), allocate nothing, never synchronize the host, and can be captured in a CUDA
// graph (NCCL 2.9+). The communicator is a blocking one (NCCL's default; a non-blocking one,
// ncclConfig_t::blocking 0, is refused when a call returns ncclInProgress), and the current CUDA
// device must be its device. A thread that drives several communicators (one process, several
// GPUs) calls each rank's merge from a thread of its own, not inside ncclGroupStart/ncclGroupEnd:
// the merge kernel must follow the communication on the stream, and inside a group NCCL defers
// the communication to ncclGroupEnd.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mlakit/mlakit.h"

struct ncclComm;  // NCCL's communicator; ncclComm_t is ncclComm*

namespace mlakit {

// Which merge: every rank gets every head, or each rank its h_q / N heads.
enum class CpMerge : int32_t {
  // ncclAllGather of the N partials (outputs and LSEs, one NCCL group), then merge_partials of
  // all b * s_q * h_q rows: every rank ends with the whole output [b, s_q, h_q, 512]. With the
  // partial written into the rank's slot of the workspace (nccl_merge_partial_slot) the exchange
  // is one in-place ncclAllGather of whole slots, which NCCL 2.27+ runs on its symmetric-memory
  // kernels when the workspace is a symmetric window on every rank (below).
  kAllGather = 0,
  // An all-to-all by heads (grouped ncclSend / ncclRecv): rank r receives heads r * h_q / N ..
  // (r + 1) * h_q / N - 1 of every rank's partial and merges them: [b, s_q, h_q / N, 512]. N
  // times fewer bytes and rows than kAllGather; h_q must be a multiple of N.
  kHeads = 1,
};

std::string_view to_string(CpMerge merge);  // "allgather", "heads"

// The arguments of one rank's merge. Every rank passes the same shapes and dtype.
struct NcclMergeArgs {
  int32_t batch = 0;           // b, 0..kMaxBatch (0: nothing is sent or written)
  int32_t s_q = 1;             // 1..kMaxSq
  int32_t h_q = 0;             // 1..kMaxHeads; kHeads: a multiple of the communicator's size N
  DType dtype = DType::kBF16;  // of partial_out and out: bf16, fp16 or fp32
  // This rank's partial, as Decoder::run wrote it (Problem::cp_world / cp_rank, return_lse):
  // contiguous; partial_out 16-byte aligned.
  const void* partial_out = nullptr;   // [b, s_q, h_q, 512] of dtype
  const float* partial_lse = nullptr;  // [b, s_q, h_q], natural log (base 2: lse_base2)
  const float* sinks = nullptr;        // [h_q] every head's sink logit, or null; kHeads applies
                                       // its heads' slice
  // The result, contiguous, 16-byte aligned. It may be the partial itself (in place: the partial
  // is sent before the merge writes), but not the workspace or the sinks.
  void* out = nullptr;     // kAllGather: [b, s_q, h_q, 512]; kHeads: [b, s_q, h_q / N, 512]
  float* lse = nullptr;    // kAllGather: [b, s_q, h_q]; kHeads: [b, s_q, h_q / N]; or null
  bool lse_base2 = false;  // partial_lse and lse in base 2 (Problem::lse_base2)
};

// The workspace of a merge of `world` ranks with the shapes of `args` (its pointers are not
// read): size it once for the largest batch. 0 for batch 0. kAllGather: the gathered partials
// [N, b, s_q, h_q, 512] and LSEs [N, b, s_q, h_q]; kHeads: the same bytes received plus as much
// for what is sent (the partial packed by destination rank), each region 256-byte aligned.
// kInvalidArgument naming the field (world 1..kMaxCpWorld, the shape, h_q a multiple of world
// for kHeads).
Status nccl_merge_workspace_bytes(CpMerge merge, int32_t world, const NcclMergeArgs& args,
                                  size_t* bytes);

// kAllGather in place: where rank `rank` of `world` writes its partial (the decode's out and lse,
// the shapes of `args`; its pointers are not read) inside `workspace` (nccl_merge_workspace_bytes
// bytes, 256-byte aligned). Passing these as args.partial_out / partial_lse makes the exchange one
// ncclAllGather in place: no copy, one collective. If, besides, every rank's workspace is a
// symmetric NCCL window (allocated by ncclMemAlloc and registered by ncclCommWindowRegister with
// NCCL_WIN_COLL_SYMMETRIC, collectively, at the same offset in the same registration on every
// rank; NCCL 2.27+), NCCL runs that collective on its symmetric-memory kernels, its lowest
// latency for small messages (docs/context-parallel.md). The slots keep each rank's out and LSE
// side by side; merge_partials then reads them by strides. Like the shapes, this is every rank's
// choice alike: all ranks pass their slots or none (the two paths issue different collectives).
// The slots depend on the batch: ask again for each batch (host arithmetic only). args.out and
// args.lse stay apart from the workspace. kInvalidArgument as nccl_merge_workspace_bytes, or
// naming rank or workspace (not read at batch 0).
Status nccl_merge_partial_slot(int32_t world, int32_t rank, const NcclMergeArgs& args,
                               void* workspace, void** partial_out, float** partial_lse);

// One rank's merge over `comm` (its size is N, its rank r) on `stream`, with a `workspace` of
// nccl_merge_workspace_bytes bytes (256-byte aligned; device memory of the communicator's
// device). Sinks are applied here, once (the ranks' decodes have none).
//
// Errors. A bad argument is kInvalidArgument naming it, with the expected and the given value,
// checked before this rank sends anything. Only some checks answer alike on every rank (given
// the same merge, shapes and dtype on every rank, as required): merge, batch, s_q, h_q, dtype,
// and h_q a multiple of N for kHeads. The others are this rank's own: comm (null, an earlier
// asynchronous error, another device's), the pointers (null, alignment), the workspace (size,
// alignment) and the overlaps. A failed NCCL call is a Status naming the call with
// ncclGetErrorString and ncclGetLastError (ncclUnhandledCudaError: kCudaError;
// ncclInvalidArgument / ncclInvalidUsage: kInvalidArgument; else kInternal); one inside the
// merge's NCCL group (an ncclAllGather, ncclSend or ncclRecv) leaves this rank's part of the
// exchange unsent or only partly sent.
// So an error on one rank is fatal for the communicator, unless it is one of the shape refusals
// above, which every rank makes alike: the other ranks may have enqueued their part, which then
// waits on the device for this rank's, forever. The caller aborts the communicator on every rank
// (ncclCommAbort, which also makes the waiting NCCL kernels return) before it frees any memory
// they use, never blocks in cudaStreamSynchronize on such a stream meanwhile (NCCL's advice:
// poll cudaStreamQuery and ncclCommGetAsyncError), and re-creates the communicator to go on.
Status merge_allgather_nccl(ncclComm* comm, const NcclMergeArgs& args, void* workspace,
                            size_t workspace_size, Stream stream);
Status merge_heads_nccl(ncclComm* comm, const NcclMergeArgs& args, void* workspace,
                        size_t workspace_size, Stream stream);
// Either, by `merge`.
Status merge_nccl(CpMerge merge, ncclComm* comm, const NcclMergeArgs& args, void* workspace,
                  size_t workspace_size, Stream stream);

}  // namespace mlakit
