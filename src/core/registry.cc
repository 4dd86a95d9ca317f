// The backend registry: one line per backend, in order of preference for `auto`.
#include <array>

#include "core/backend.h"

namespace mlakit {

const BackendEntry& cpu_backend_entry();
#ifdef MLAKIT_WITH_SM90
const BackendEntry& sm90_backend_entry();
#endif
#ifdef MLAKIT_WITH_SM80
const BackendEntry& sm80_backend_entry();
#endif

std::span<const BackendEntry* const> backend_registry() {
  static const auto entries = std::to_array<const BackendEntry*>({
#ifdef MLAKIT_WITH_SM90
      &sm90_backend_entry(),
#endif
#ifdef MLAKIT_WITH_SM80
      &sm80_backend_entry(),
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
