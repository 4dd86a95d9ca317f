// The backend registry: one line per backend, in order of preference for `auto`.
#include <array>

#include "core/backend.h"
#include "core/check.h"

#ifdef MLAKIT_NO_CUDA
#include <cuda_runtime_api.h>  // the stand-in: kMlakitNoCudaReason
#endif

namespace mlakit {

const BackendEntry& cpu_backend_entry();
#ifdef MLAKIT_WITH_SM90
const BackendEntry& sm90_backend_entry();
#endif
#ifdef MLAKIT_WITH_SM80
const BackendEntry& sm80_backend_entry();
#endif

#ifdef MLAKIT_NO_CUDA
namespace {

// A build without CUDA lists the GPU backends anyway, unavailable, saying why.
template <const char* kName>
const BackendEntry& absent_backend_entry() {
  static const auto why = [](const Problem&, const DeviceInfo&) {
    return unsupported("backend ", kName, " is not in this build: ", kMlakitNoCudaReason);
  };
  static const BackendEntry entry{
      .name = kName,
      .summary = "CUDA backend (not in this build)",
      .supports = "nothing here: this build has no CUDA backends",
      .device_memory = true,
      .available = [](const DeviceInfo& d) { return why(Problem{}, d); },
      .can_run = why,
      .tactics = [](const Problem&) { return std::vector<Tactic>{}; },
      .create = [](const Problem& p, int, const DeviceInfo& d,
                   std::unique_ptr<Backend>*) { return why(p, d); },
  };
  return entry;
}
constexpr char kSm90[] = "sm90";
constexpr char kSm80[] = "sm80";

}  // namespace
#endif

std::span<const BackendEntry* const> backend_registry() {
  static const auto entries = std::to_array<const BackendEntry*>({
#ifdef MLAKIT_WITH_SM90
      &sm90_backend_entry(),
#endif
#ifdef MLAKIT_WITH_SM80
      &sm80_backend_entry(),
#endif
#ifdef MLAKIT_NO_CUDA
      &absent_backend_entry<kSm90>(),
      &absent_backend_entry<kSm80>(),
#endif
      &cpu_backend_entry(),
  });
  return entries;
}

const BackendEntry* find_backend(std::string_view name) {
  for (const BackendEntry* entry : backend_registry()) {
    if (entry->name == name) return entry;
  }
  return nullptr;
}

}  // namespace mlakit
