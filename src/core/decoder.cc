// Decoder: validates the problem once, picks the backend for each batch bucket (named, or "auto"
// through the tune cache and heuristic), and forwards runs after the per-call host-side checks.
#include <algorithm>

#include "core/backend.h"
#include "core/check.h"
#include "core/guard.h"
#include "mlakit/mlakit.h"
#include "tune/bucket.h"
#include "tune/tuner.h"

namespace mlakit {
namespace {

std::string backend_names() {
  std::string names;
  for (const BackendEntry* entry : backend_registry()) {
    names += names.empty() ? "" : ", ";
    names += entry->name;
  }
  return names;
}

Status check_backend(const BackendEntry& entry, const Problem& problem, const DeviceInfo& device) {
  MLAKIT_RETURN_IF_ERROR(entry.available(device));
  return entry.can_run(problem, device);
}

// Resolves a tactic id (-1: the backend's default) against the backend's list.
Status resolve_tactic(const BackendEntry& entry, const Problem& problem, int requested,
                      int* tactic) {
  const std::vector<Tactic> tactics = entry.tactics(problem);
  *tactic = requested < 0 ? tactics.front().id : requested;
  std::string ids;
  for (const Tactic& t : tactics) {
    if (t.id == *tactic) return Status::Ok();
    ids += str_cat(ids.empty() ? "" : ", ", t.id, " (", t.name, ")");
  }
  return invalid_argument("tactic", str_cat("one of ", ids, " for backend ", entry.name),
                          requested);
}

std::string why_none(const Problem& problem, const DeviceInfo& device) {
  std::string reasons;
  for (const BackendEntry* entry : backend_registry()) {
    if (entry->device_memory != device.present) continue;
    const Status st = check_backend(*entry, problem, device);
    reasons += str_cat(reasons.empty() ? "" : "; ", entry->name, ": ", st.message());
  }
  return str_cat("no backend can run this problem (", describe(problem),
                 "): ", reasons.empty() ? "none is available on this machine" : reasons);
}

}  // namespace

std::vector<BackendInfo> list_backends() {
  try {
    const DeviceInfo device = current_device();
    std::vector<BackendInfo> infos;
    for (const BackendEntry* entry : backend_registry()) {
      const Status available = entry->available(device);
      infos.push_back({.name = std::string(entry->name),
                       .summary = std::string(entry->summary),
                       .supports = std::string(entry->supports),
                       .available = available.ok(),
                       .unavailable_reason = available.message(),
                       .device_memory = entry->device_memory});
    }
    return infos;
  } catch (...) {  // out of host memory (guard.h): nothing to list
    return {};
  }
}

Status can_run(std::string_view backend, const Problem& problem) {
  return guarded("can_run", [&]() -> Status {
    MLAKIT_RETURN_IF_ERROR(validate(problem));
    const BackendEntry* entry = find_backend(backend);
    if (entry == nullptr) {
      return invalid_argument("backend", str_cat("one of ", backend_names()), backend);
    }
    return check_backend(*entry, problem, current_device());
  });
}

Decoder::~Decoder() = default;

const Decoder::Route& Decoder::route(int batch) const {
  const int b = batch <= 0 ? problem_.max_batch : std::min(batch, problem_.max_batch);
  return routes_[by_bucket_[tune::batch_bucket_index(b)]];
}

std::string_view Decoder::backend_name(int batch) const { return route(batch).backend->name(); }

int Decoder::tactic(int batch) const { return route(batch).tactic; }

bool Decoder::device_memory() const {
  return find_backend(routes_.front().backend->name())->device_memory;
}

size_t Decoder::workspace_bytes() const { return workspace_bytes_; }

Status Decoder::create(const Problem& problem, const DecoderOptions& options,
                       std::unique_ptr<Decoder>* decoder) {
  return guarded("Decoder::create", [&]() -> Status {
    if (decoder == nullptr) return invalid_argument("decoder", "a non-null pointer", "nullptr");
    MLAKIT_RETURN_IF_ERROR(validate(problem));
    const DeviceInfo device = current_device();
    std::unique_ptr<Decoder> d(new Decoder());
    d->problem_ = problem;
    const int buckets = tune::batch_bucket_index(problem.max_batch) + 1;

    // (backend, tactic) per batch bucket.
    std::vector<std::pair<const BackendEntry*, int>> picks(buckets);
    if (options.backend != "auto") {
      const BackendEntry* entry = find_backend(options.backend);
      if (entry == nullptr) {
        return invalid_argument("backend", str_cat("auto or one of ", backend_names()),
                                options.backend);
      }
      MLAKIT_RETURN_IF_ERROR(check_backend(*entry, problem, device));
      // Tactic -1: the backend's default for each batch bucket (its tactic order may depend on the
      // batch, as sm90's does), the same choice as auto's heuristic.
      for (int k = 0; k < buckets; ++k) {
        Problem bucket = problem;
        bucket.max_batch = std::min(tune::batch_bucket_at(k), problem.max_batch);
        int tactic = 0;
        MLAKIT_RETURN_IF_ERROR(
            resolve_tactic(*entry, options.tactic < 0 ? bucket : problem, options.tactic, &tactic));
        MLAKIT_RETURN_IF_ERROR(resolve_tactic(*entry, problem, tactic, &tactic));
        picks[k] = {entry, tactic};
      }
    } else {
      // Never falls back from a GPU to the cpu backend: the caller's device pointers would be read
      // from the host. The tuner only considers backends taking this machine's memory.
      const std::string path = tune::cache_path(options.tune_cache_path);
      std::string warning;
      tune::Cache cache = tune::Cache::load(path, tune::current_metadata(device), &warning);
      if (!warning.empty()) d->notes_ += warning + "\n";
      if (options.tune && device.present) {
        const int b = tune::batch_bucket(problem.max_batch);
        const int l = tune::len_bucket(problem.max_seq_len);
        const std::string key = tune::bucket_key(problem, b, l);
        if (tune::stream_capturing(options.stream)) {
          d->notes_ += "tuning skipped: the stream is capturing a CUDA graph\n";
        } else if (cache.find(key) == nullptr) {
          std::vector<tune::Measurement> measured;
          tune::Entry entry;
          const Status st = tune::tune_bucket(problem, b, l, {}, &measured, &entry);
          if (st.ok()) {
            cache.put(key, entry);
            if (!path.empty()) {
              const Status saved = cache.save(path);
              if (!saved.ok()) d->notes_ += "tune cache not saved: " + saved.message() + "\n";
            }
          } else {
            d->notes_ += "tuning failed: " + st.message() + "\n";
          }
        }
      }
      for (int k = 0; k < buckets; ++k) {
        const int batch = std::min(tune::batch_bucket_at(k), problem.max_batch);
        tune::Choice choice = tune::choose(problem, batch, &cache, device);
        const BackendEntry* entry = choice.backend.empty() ? nullptr : find_backend(choice.backend);
        int tactic = 0;
        if (entry == nullptr || entry->device_memory != device.present ||
            !check_backend(*entry, problem, device).ok() ||
            !resolve_tactic(*entry, problem, choice.tactic, &tactic).ok()) {
          if (choice.source != "heuristic") {
            d->notes_ += str_cat("cache entry ", choice.backend, ":", choice.tactic,
                                 " cannot run here; using the heuristic\n");
          }
          choice = tune::heuristic(problem, batch, device);
          entry = choice.backend.empty() ? nullptr : find_backend(choice.backend);
          if (entry == nullptr) return unsupported(why_none(problem, device));
          MLAKIT_RETURN_IF_ERROR(resolve_tactic(*entry, problem, choice.tactic, &tactic));
        }
        picks[k] = {entry, tactic};
        d->notes_ += str_cat("batch <= ", tune::batch_bucket_at(k), ": ", entry->name, ":", tactic,
                             " (", choice.source, ")\n");
      }
    }

    // Prepare each distinct (backend, tactic) once.
    d->by_bucket_.resize(buckets);
    for (int k = 0; k < buckets; ++k) {
      int index = -1;
      for (int r = 0; r < static_cast<int>(d->routes_.size()); ++r) {
        if (d->routes_[r].backend->name() == picks[k].first->name &&
            d->routes_[r].tactic == picks[k].second) {
          index = r;
        }
      }
      if (index < 0) {
        Route route{.tactic = picks[k].second};
        MLAKIT_RETURN_IF_ERROR(
            picks[k].first->create(problem, route.tactic, device, &route.backend));
        d->workspace_bytes_ = std::max(d->workspace_bytes_, route.backend->workspace_bytes());
        d->routes_.push_back(std::move(route));
        index = static_cast<int>(d->routes_.size()) - 1;
      }
      d->by_bucket_[k] = static_cast<uint8_t>(index);
    }
    // The caller allocates the workspace on the device: one larger than the device cannot be had
    // (sizes grow with max_batch x h_q x s_q and max_seq_len).
    if (d->device_memory() && d->workspace_bytes_ > device.global_mem_bytes) {
      return unsupported("the workspace of ", d->routes_.front().backend->name(), " for ",
                         describe(problem), " needs ", d->workspace_bytes_,
                         " bytes of device memory, more than the device's ",
                         device.global_mem_bytes);
    }
    *decoder = std::move(d);
    return Status::Ok();
  });
}

Status Decoder::run(const RunArgs& args, void* workspace, size_t workspace_size,
                    Stream stream) const {
  return guarded("Decoder::run", [&]() -> Status {
    MLAKIT_RETURN_IF_ERROR(
        validate_args(problem_, args, workspace_bytes_, workspace, workspace_size));
    return route(args.batch).backend->run(args, workspace, workspace_size, stream);
  });
}

}  // namespace mlakit
