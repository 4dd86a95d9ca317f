// How much host memory this process can have, for the checks that refuse a problem before
// allocating (the cpu backend's scratch, the mlakit program's inputs).
#pragma once

#include <cstdint>

namespace mlakit {

// The machine's physical memory, or less under an address-space limit (RLIMIT_AS, `ulimit -v`):
// what that limit leaves above what the process maps now.
uint64_t host_memory_bytes();

}  // namespace mlakit
