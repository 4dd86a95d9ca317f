#include "tune/tuner.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/backend.h"
#include "core/check.h"
#include "harness/timing.h"
#include "harness/workload.h"
#include "tune/bucket.h"

namespace mlakit::tune {

std::vector<Candidate> candidates(const Problem& problem, const DeviceInfo& device,
                                  std::vector<std::string>* skipped) {
  std::vector<Candidate> out;
  for (const BackendEntry* entry : backend_registry()) {
    if (!entry->device_memory) continue;  // the tuner measures GPU backends
    Status st = entry->available(device);
    if (st.ok()) st = entry->can_run(problem, device);
    if (!st.ok()) {
      if (skipped) skipped->push_back(str_cat(entry->name, ": ", st.message()));
      continue;
    }
    for (const Tactic& t : entry->tactics(problem)) {
      out.push_back({std::string(entry->name), t.id, str_cat(entry->name, ":", t.name)});
    }
  }
  return out;
}

bool stream_capturing(Stream stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t err = cudaStreamIsCapturing(stream, &status);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    // Querying the legacy stream while another stream captures in global mode is itself an error:
    // treat it as capturing.
    return err == cudaErrorStreamCaptureImplicit || err == cudaErrorStreamCaptureUnsupported;
  }
  return status != cudaStreamCaptureStatusNone;
}

std::vector<const Measurement*> rank(const std::vector<Measurement>& measurements) {
  std::vector<const Measurement*> ok;
  for (const Measurement& m : measurements) {
    if (m.status.ok() && m.time_us > 0) ok.push_back(&m);
  }
  if (ok.empty()) return ok;
  const bool ragged =
      std::all_of(ok.begin(), ok.end(), [](const Measurement* m) { return m->ragged_us > 0; });
  double best = ok[0]->time_us, best_ragged = ok[0]->ragged_us;
  for (const Measurement* m : ok) {
    best = std::min(best, m->time_us);
    best_ragged = std::min(best_ragged, m->ragged_us);
  }
  auto score = [&](const Measurement* m) {
    return ragged ? std::sqrt(m->time_us / best * (m->ragged_us / best_ragged)) : m->time_us / best;
  };
  std::stable_sort(ok.begin(), ok.end(), [&](const Measurement* a, const Measurement* b) {
    const double sa = score(a), sb = score(b);
    return sa != sb ? sa < sb : a->time_us < b->time_us;
  });
  return ok;
}

Status tune_bucket(const Problem& problem, int batch, int len, const TuneOptions& options,
                   std::vector<Measurement>* measurements, Entry* entry) {
  const DeviceInfo device = current_device();
  if (!device.present) return unsupported("tuning needs a GPU: ", device.error);
  Problem p = problem;
  p.max_batch = batch;
  p.max_seq_len = len;
  MLAKIT_RETURN_IF_ERROR(validate(p));

  const double bytes = static_cast<double>(batch) * len * kv_token_bytes(p.kv_dtype, p.kv_layout);
  const size_t limit =
      options.max_input_bytes ? options.max_input_bytes : device.global_mem_bytes / 4;
  if (bytes > static_cast<double>(limit)) {
    return unsupported("bucket batch ", batch, ", seq_len ", len, " needs ", bytes / 1e9,
                       " GB of synthetic cache, more than the limit of ", limit / 1e9, " GB");
  }
  std::vector<std::string> skipped;
  const std::vector<Candidate> cands = candidates(p, device, &skipped);
  measurements->clear();
  for (const std::string& why : skipped) {  // backends that cannot run the problem, and why
    const std::string name = why.substr(0, why.find(':'));
    measurements->push_back(
        {.candidate = {.backend = name, .label = name}, .status = unsupported(why)});
  }
  if (cands.empty()) return unsupported("no GPU backend can run ", describe(p));

  std::vector<std::unique_ptr<Decoder>> decoders(cands.size());
  const size_t first = measurements->size();
  for (size_t i = 0; i < cands.size(); ++i) {
    Measurement m{.candidate = cands[i]};
    m.status =
        Decoder::create(p, {.backend = cands[i].backend, .tactic = cands[i].tactic}, &decoders[i]);
    measurements->push_back(m);
  }
  // One batch at a time (its cold copies take up to `limit`): every candidate on `lens`, the
  // median into `field`. A candidate that fails is skipped from then on.
  harness::WorkloadOptions wopt;
  wopt.seed = options.seed;
  wopt.poison = false;
  auto time_all = [&](const std::vector<int32_t>& lens, double Measurement::*field,
                      const char* batch_name) -> Status {
    std::vector<harness::DeviceInputs> dev;
    {
      const harness::HostInputs host = harness::make_inputs(p, lens, wopt);
      MLAKIT_RETURN_IF_ERROR(harness::upload_cold_copies(host, device.l2_bytes, limit, &dev));
    }
    for (size_t i = 0; i < cands.size(); ++i) {
      Measurement& m = (*measurements)[first + i];
      if (!m.status.ok()) continue;
      harness::TimingOptions topt;
      topt.replays = options.replays;
      topt.warmup = options.warmup;
      topt.settle_ms = options.settle_ms;
      harness::Timing timing;
      m.status = harness::time_gpu(*decoders[i], dev, topt, &timing);
      if (!m.status.ok()) {
        m.status = Status(m.status.code(), str_cat(batch_name, " batch: ", m.status.message()));
      }
      m.*field = timing.median_us;
      (void)cudaGetLastError();  // a failed candidate must not poison the next one
    }
    return Status::Ok();
  };
  MLAKIT_RETURN_IF_ERROR(
      time_all(std::vector<int32_t>(batch, len), &Measurement::time_us, "uniform"));
  // The ragged batch: not at batch 1, and not for sparse problems (top-k fixes their work). If
  // it cannot be set up, the uniform times decide and a note says why.
  if (options.ragged && batch > 1 && !p.sparse()) {
    const Status st = time_all(harness::make_ragged_lens(batch, len, options.seed),
                               &Measurement::ragged_us, "ragged");
    if (!st.ok()) {
      for (size_t i = first; i < measurements->size(); ++i) (*measurements)[i].ragged_us = 0;
      measurements->push_back(
          {.candidate = {.label = "ragged batch"},
           .status =
               Status(st.code(), str_cat("ranked on the uniform batch alone: ", st.message()))});
    }
  }
  const std::vector<const Measurement*> ok = rank(*measurements);
  if (ok.empty()) return Status(StatusCode::kInternal, "every candidate failed to run");
  *entry = Entry{.backend = ok[0]->candidate.backend,
                 .tactic = ok[0]->candidate.tactic,
                 .time_us = ok[0]->time_us,
                 .ragged_us = ok[0]->ragged_us};
  if (ok.size() > 1) {
    entry->runner_up = ok[1]->candidate.backend;
    entry->runner_up_tactic = ok[1]->candidate.tactic;
    entry->runner_up_us = ok[1]->time_us;
    entry->runner_up_ragged_us = ok[1]->ragged_us;
  }
  return Status::Ok();
}

// The heuristic: the first backend, in the registry's order of preference, that takes memory
// where this machine's data lives and can run the problem, with that backend's default tactic.
// Measured basis (H200, 2026-11-21, bench/results/2026-11-21-h200-sm80/tune.json): over the 34
// standard-grid buckets of h_q 128 and 16 on uniform batches, sm80's persistent tactic wins 22
// (by up to 20%), one-shot 12 (by a median 2.2%, at most 10.5%); on skewed batches (one request
// 32x longer) persistent is 3.6-5.9x faster (docs/sm80-decode.md). Sequence lengths live on the
// device, so the heuristic cannot see skew: it takes the persistent default.
// sm90 once deferred to sm80 at h_q * s_q <= 16 (sm80's 16-row tile was 5-18% faster on 15 of the
// 17 cases of h_q 16, s_q 1); sm90's narrow tile is now the faster there on 15 of 17
// (bench/results/2026-11-21-h200-narrow), so the registry's order holds everywhere.
// The tactic is the backend's default for the bucket's batch (`tactics` of the problem with
// max_batch = batch: sm90 orders by batch and length).
Choice heuristic(const Problem& problem, int batch, const DeviceInfo& device) {
  for (const BackendEntry* entry : backend_registry()) {
    if (entry->device_memory != device.present) continue;
    if (!entry->available(device).ok() || !entry->can_run(problem, device).ok()) continue;
    Problem bucket = problem;
    bucket.max_batch = std::clamp(batch, 1, problem.max_batch);
    const std::vector<Tactic> tactics = entry->tactics(bucket);
    return {.backend = std::string(entry->name),
            .tactic = tactics.empty() ? -1 : tactics.front().id,
            .source = "heuristic"};
  }
  return {};
}

Choice choose(const Problem& problem, int batch, const Cache* cache, const DeviceInfo& device) {
  if (cache != nullptr) {
    const int b = batch_bucket(batch), l = len_bucket(problem.max_seq_len);
    if (const Entry* e = cache->find(bucket_key(problem, b, l))) {
      return {.backend = e->backend, .tactic = e->tactic, .source = "cache"};
    }
    std::string key;
    if (const Entry* e = cache->nearest(problem, b, l, &key)) {
      return {.backend = e->backend,
              .tactic = e->tactic,
              .source = str_cat("cache, nearest bucket ", key.substr(key.find('|') + 1))};
    }
  }
  return heuristic(problem, batch, device);
}

}  // namespace mlakit::tune
