// The lightning indexer's logits: the cpu reference, called by src/ops/ops.cc after validation.
#pragma once

#include <cstdint>

#include "mlakit/ops.h"

namespace mlakit::ops {

// Checks lengths and page ids first; accumulates in double.
Status indexer_logits_cpu(const IndexerLogitsArgs& args, int64_t ld);
// The GPU kernels: on sm_90 the persistent one (indexer_persistent.cu) or the pipelined one
// (indexer_tma.cu; both TMA into a ring of key tiles, fp8 wgmma) for the page sizes they take,
// else the copy kernel (indexer.cu: cp.async, fp8 wgmma on sm_90, mma.sync on sm_89 and sm_100+).
// kAuto picks; the others run that kernel by itself (tests, `mlakit bench-op indexer --kernel`).
// kUnsupported below sm_89, without code for the device, or (kTma, kTmaWide, kPersistent) for a
// shape the kernel does not take.
enum class IndexerKernel { kAuto, kTma, kTmaWide, kPersistent, kCopy };
Status indexer_logits_cuda(const IndexerLogitsArgs& args, int64_t ld, Stream stream,
                           IndexerKernel kernel = IndexerKernel::kAuto);

// The pipelined kernel (indexer_tma.cu): the page sizes it takes (multiples of 64, or 8, 16 and
// 32), and the kernel itself (kUnsupported off sm_90 or for other shapes, naming the reason).
bool indexer_tma_takes_page_size(int32_t page_size);
// The op's choice (kAuto) on a device of compute capability major.x with `sms` SMs (kTma,
// kPersistent or kCopy), from bench-op on an H200 with cold caches, the kernels in one call
// (docs/ops.md): on sm_90 where the page size and the cache's alignment suit TMA, with a 16-byte
// aligned q, the persistent kernel for next_n 1 to 4 with any head count up to 128 (3-38% faster
// where both were timed); else the pipelined kernel's narrow shape.
// The copy kernel where the keys are fewer 64-position tiles than the device has SMs (one short
// wave: with no pipeline to set up it was faster there, batch 1 x 8K) or on other devices.
IndexerKernel indexer_auto_kernel(const IndexerLogitsArgs& args, int major, int sms);
// The current device's properties the kernels' choices and launches need, queried once a call.
struct IndexerDevice {
  int major = 0, minor = 0, sms = 0, smem_optin = 0;
};
Status indexer_logits_tma(const IndexerLogitsArgs& args, int64_t ld, Stream stream, bool wide,
                          const IndexerDevice& dev);
// The persistent kernel (indexer_persistent.cu): one CTA an SM, each an equal share of all the
// key tiles; the same page sizes as the pipelined one, and q 16-byte aligned.
Status indexer_logits_persistent(const IndexerLogitsArgs& args, int64_t ld, Stream stream,
                                 const IndexerDevice& dev);

}  // namespace mlakit::ops
