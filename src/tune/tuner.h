// The autotuner: candidates for a problem, measurement of a bucket, and the choice of a
// (backend, tactic) for a call from the cache, its nearest bucket, or the heuristic.
#pragma once

#include <string>
#include <vector>

#include "mlakit/mlakit.h"
#include "tune/cache.h"

namespace mlakit::tune {

struct Candidate {
  std::string backend;
  int tactic = 0;
  std::string label;  // "sm80:persistent"
};

// Every (backend, tactic) of a backend taking device memory whose can_run accepts the problem;
// `skipped` gets "backend: reason" for the others.
std::vector<Candidate> candidates(const Problem& problem, const DeviceInfo& device,
                                  std::vector<std::string>* skipped);

struct TuneOptions {
  // Also time a ragged batch (harness::make_ragged_lens) and choose by both (see rank()).
  bool ragged = true;
  int replays = 10;
  int warmup = 2;
  // Each candidate runs untimed this long before it is timed (harness::TimingOptions::settle_ms):
  // the candidate timed first after the inputs' upload ran at the boost clock while the others ran
  // power-capped (H200, h_q 128 b 64 L 4096: sm90:0 timed 141.6 us first, sm90:2 over 155 later,
  // 139-143 for both in the bench).
  double settle_ms = 250;
  uint64_t seed = 1;
  size_t max_input_bytes = 0;  // largest synthetic input; 0 = a quarter of the GPU's memory
};

struct Measurement {
  Candidate candidate;
  double time_us = 0;    // every request at the bucket's length
  double ragged_us = 0;  // the ragged batch; 0 when not measured
  Status status;         // not ok: the candidate failed and was skipped
};

// The measurements that ran, best first. With ragged times (on every one of them), a candidate's
// score is the geometric mean of its time over the fastest on each batch, uniform and ragged:
// a schedule sized by the longest request (sm90's cluster tactics) can win the uniform batch by
// a few percent and lose the ragged one by 1.2-1.6x, and servers' batches are ragged. Without,
// the uniform time. Ties go to the faster uniform time. The pointers point into `measurements`.
std::vector<const Measurement*> rank(const std::vector<Measurement>& measurements);

// Measures every candidate on synthetic inputs of the bucket (batch requests of len tokens,
// random data, cold L2, graph replay, median), then on the ragged batch of the bucket when
// options.ragged and batch > 1, and fills `entry` with the winner and runner-up of rank().
Status tune_bucket(const Problem& problem, int batch, int len, const TuneOptions& options,
                   std::vector<Measurement>* measurements, Entry* entry);

struct Choice {
  std::string backend;
  int tactic = -1;
  std::string source;  // "cache", "cache, nearest bucket ...", "heuristic"
};

// The heuristic used without a cache entry (see tuner.cc for the measurements behind it).
Choice heuristic(const Problem& problem, int batch, const DeviceInfo& device);

// Cache entry of the bucket, else the nearest bucket of the same problem, else the heuristic.
Choice choose(const Problem& problem, int batch, const Cache* cache, const DeviceInfo& device);

// Whether `stream` (or, for nullptr, the legacy stream) is capturing a CUDA graph.
bool stream_capturing(Stream stream);

}  // namespace mlakit::tune
