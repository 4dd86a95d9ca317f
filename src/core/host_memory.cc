#include "core/host_memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace mlakit {

uint64_t host_memory_bytes() {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t bytes = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * page;
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    unsigned long long mapped_pages = 0;  // the first field of statm: the mapped size in pages
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%llu", &mapped_pages) != 1) mapped_pages = 0;
      std::fclose(f);
    }
    const uint64_t mapped = mapped_pages * page;
    bytes = std::min<uint64_t>(bytes, limit.rlim_cur > mapped ? limit.rlim_cur - mapped : 0);
  }
  return bytes;
}

}  // namespace mlakit
