// The internal backend interface. A backend is a folder under src/backends/ with one entry in the
// registry (registry.cc): its name, what it supports, whether it can run a problem (and why not),
// its tactics for the tuner, and a factory for a prepared instance.
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "mlakit/mlakit.h"

namespace mlakit {

// A backend prepared for one problem and tactic. `run` gets arguments that validate_args accepted.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual size_t workspace_bytes() const = 0;
  virtual Status run(const RunArgs& args, void* workspace, size_t workspace_size,
                     Stream stream) const = 0;
};

struct Tactic {
  int id = 0;
  std::string_view name;  // e.g. "one-shot", "persistent"
};

struct BackendEntry {
  std::string_view name;
  std::string_view summary;
  std::string_view supports;  // for `mlakit info`
  bool device_memory = false;
  // Whether the backend can run at all on this machine (compiled in, GPU architecture).
  Status (*available)(const DeviceInfo& device) = nullptr;
  // Whether it can run this (already validated) problem; the reason when not.
  Status (*can_run)(const Problem& problem, const DeviceInfo& device) = nullptr;
  std::vector<Tactic> (*tactics)(const Problem& problem) = nullptr;
  Status (*create)(const Problem& problem, int tactic, const DeviceInfo& device,
                   std::unique_ptr<Backend>* backend) = nullptr;
};

// Every backend compiled into this build, in order of preference for `auto` (fastest first).
std::span<const BackendEntry* const> backend_registry();
const BackendEntry* find_backend(std::string_view name);

}  // namespace mlakit
