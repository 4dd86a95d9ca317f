// Timing of a Decoder the way ../docs/benchmarking prescribes: warm-up, a CUDA graph of repeated
// launches over rotating input copies (cold L2), median over replays. CPU backends: wall clock.
#pragma once

#include <atomic>
#include <functional>
#include <span>
#include <vector>

#include "harness/power.h"
#include "harness/workload.h"
#include "mlakit/mlakit.h"

namespace mlakit::harness {

struct TimingOptions {
  int warmup = 3;         // untimed graph replays
  int replays = 15;       // timed graph replays; the median is reported
  int min_launches = 20;  // runs per graph (cycling through the copies)
  // Untimed replays for at least this long after the warm-up. Right after an idle stretch (the
  // inputs' upload) the GPU runs at its boost clock for some tens of milliseconds before a power
  // cap, if the work reaches it, pulls the clock down (H200, h_q 128 b 64 L 4096: 138-143 us a
  // call in the first 50 ms, 157-161 us in steady state; docs/sm90-decode.md, "The power cap").
  // Times of several candidates compare only when each is taken in the same state.
  double settle_ms = 0;
  size_t cold_bytes = 0;  // input bytes that must be streamed per cycle to keep L2 cold
};

struct Timing {
  double median_us = 0, min_us = 0, max_us = 0;
  int copies = 1, launches = 1;
  PowerReading power;  // SM clock and board power over the timed replays (GPU only)
};

// Number of input copies whose rotation keeps L2 cold for `bytes` of input per run.
int cold_copies(size_t bytes_per_run, size_t l2_bytes, size_t max_total_bytes);

// Uploads cold_copies(...) copies of `host` (q, cache and out bytes per run) to the device.
Status upload_cold_copies(const HostInputs& host, size_t l2_bytes, size_t max_total_bytes,
                          std::vector<DeviceInputs>* copies);

// Times decoder.run over `copies` (each a full set of device inputs) on a fresh stream.
Status time_gpu(const Decoder& decoder, const std::vector<DeviceInputs>& copies,
                const TimingOptions& options, Timing* timing);

// The same machinery for any launch (the ops of mlakit::ops, `mlakit bench-op`): one uncaptured
// call, then a graph of max(min_launches, copies) calls launch(k, stream), k = 0, 1, ... (the
// caller rotates its `copies` input copies by k), replayed as time_gpu does; per-call times.
Status time_gpu_launches(const std::function<Status(int k, Stream stream)>& launch, int copies,
                         const TimingOptions& options, Timing* timing);

// Steps that span several GPUs (a context-parallel decode and its NCCL merge; timing_ranks.cc).
// Rank r runs on device devices[r].
//
// A rank's collectives wait on the device for their peers': when one rank fails before it has
// enqueued its part (or its graph launch fails), the others' never complete. So once a rank may
// have enqueued collectives it waits with RankGroup::sync, never cudaStreamSynchronize, and gives
// up when another rank has failed; on an error of for_each_rank or time_gpu_ranks the caller
// treats the communicators as lost: it aborts them (ncclCommAbort, which makes the waiting NCCL
// kernels return) before it frees any memory they use (cudaFree waits for the device), and does
// not use them again. Not covered: a rank blocked on the host inside an NCCL call (NCCL frees a
// communicator in ncclCommAbort, so it is aborted only once every rank thread has returned).
class RankGroup {
 public:
  // Waits for the work on `stream` (cudaStreamQuery, yielding the CPU); kInternal as soon as
  // another rank of the group has failed, that work left enqueued.
  Status sync(Stream stream) const;

 private:
  friend Status for_each_rank(std::span<const int> devices,
                              const std::function<Status(int rank, const RankGroup& group)>& fn);
  std::atomic<bool> failed_{false};
};

// for_each_rank: fn(r, group) for every rank at once, each on a thread of its own with its device
// current (a rank's NCCL calls may wait for the other ranks' on the host). The first rank to fail
// marks the group failed (the others give up in group.sync); its Status is returned.
Status for_each_rank(std::span<const int> devices,
                     const std::function<Status(int rank, const RankGroup& group)>& fn);
// time_gpu_ranks: one uncaptured call launch(r, 0, stream) per rank, then each rank's graph of
// max(min_launches, copies) calls launch(r, k, stream) (the caller rotates its copies by k), both
// on every rank at once (for_each_rank), then one host thread replays every rank's graph
// together: warm-up, settling (a number of replays fixed from the time of the first), the timed
// replays. Every rank replays as often as the others, so that the collectives inside always
// find their peers. per_rank[r]: rank r's time per call (events on its stream); step: per
// replay the slowest rank's, the median over replays. No power reading. An error may leave
// collectives waiting (above).
Status time_gpu_ranks(std::span<const int> devices,
                      const std::function<Status(int rank, int k, Stream stream)>& launch,
                      int copies, const TimingOptions& options, std::vector<Timing>* per_rank,
                      Timing* step);

// Median of `replays` wall-clock calls of `call` (host work).
Status time_cpu_calls(const std::function<Status()>& call, int replays, Timing* timing);

// Times decoder.run on host inputs (cpu backend): median of `replays` wall-clock runs.
Status time_cpu(const Decoder& decoder, const HostInputs& inputs, void* out, float* lse,
                int replays, Timing* timing);

}  // namespace mlakit::harness
