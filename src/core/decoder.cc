// Decoder: validates the problem once, picks a backend, and forwards runs after the per-call
// host-side checks.
#include "core/backend.h"
#include "core/check.h"
#include "mlakit/mlakit.h"

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

}  // namespace

std::vector<BackendInfo> list_backends() {
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
}

Status can_run(std::string_view backend, const Problem& problem) {
  MLAKIT_RETURN_IF_ERROR(validate(problem));
  const BackendEntry* entry = find_backend(backend);
  if (entry == nullptr) {
    return invalid_argument("backend", str_cat("one of ", backend_names()), backend);
  }
  return check_backend(*entry, problem, current_device());
}

Decoder::Decoder(const Problem& problem, int tactic, std::unique_ptr<Backend> backend)
    : problem_(problem), tactic_(tactic), backend_(std::move(backend)) {}

Decoder::~Decoder() = default;

std::string_view Decoder::backend_name() const { return backend_->name(); }

bool Decoder::device_memory() const { return find_backend(backend_->name())->device_memory; }

size_t Decoder::workspace_bytes() const { return backend_->workspace_bytes(); }

Status Decoder::create(const Problem& problem, const DecoderOptions& options,
                       std::unique_ptr<Decoder>* decoder) {
  if (decoder == nullptr) return invalid_argument("decoder", "a non-null pointer", "nullptr");
  MLAKIT_RETURN_IF_ERROR(validate(problem));
  const DeviceInfo device = current_device();

  const BackendEntry* chosen = nullptr;
  if (options.backend == "auto") {
    // Without a tune cache: the first backend in order of preference that can run the problem,
    // among those that take pointers where the caller's data lives (device memory when a GPU is
    // present, host memory otherwise). Never falls back from a GPU to the cpu backend: the
    // caller's device pointers would be read from the host.
    std::string reasons;
    for (const BackendEntry* entry : backend_registry()) {
      if (entry->device_memory != device.present) continue;
      const Status st = check_backend(*entry, problem, device);
      if (st.ok()) {
        chosen = entry;
        break;
      }
      reasons += str_cat(reasons.empty() ? "" : "; ", entry->name, ": ", st.message());
    }
    if (chosen == nullptr) {
      return unsupported("no backend can run this problem (", describe(problem),
                         "): ", reasons.empty() ? "none is available on this machine" : reasons);
    }
  } else {
    chosen = find_backend(options.backend);
    if (chosen == nullptr) {
      return invalid_argument("backend", str_cat("auto or one of ", backend_names()),
                              options.backend);
    }
    MLAKIT_RETURN_IF_ERROR(check_backend(*chosen, problem, device));
  }

  const std::vector<Tactic> tactics = chosen->tactics(problem);
  int tactic = options.tactic < 0 ? tactics.front().id : options.tactic;
  bool known = false;
  std::string ids;
  for (const Tactic& t : tactics) {
    known |= t.id == tactic;
    ids += str_cat(ids.empty() ? "" : ", ", t.id, " (", t.name, ")");
  }
  if (!known) {
    return invalid_argument("tactic", str_cat("one of ", ids, " for backend ", chosen->name),
                            options.tactic);
  }

  std::unique_ptr<Backend> backend;
  MLAKIT_RETURN_IF_ERROR(chosen->create(problem, tactic, device, &backend));
  decoder->reset(new Decoder(problem, tactic, std::move(backend)));
  return Status::Ok();
}

Status Decoder::run(const RunArgs& args, void* workspace, size_t workspace_size,
                    Stream stream) const {
  MLAKIT_RETURN_IF_ERROR(
      validate_args(problem_, args, backend_->workspace_bytes(), workspace, workspace_size));
  return backend_->run(args, workspace, workspace_size, stream);
}

}  // namespace mlakit
