// Argument checks shared by the entry points that validate raw pointers and ranges (the merge,
// the NCCL merges, the ops, Problem/RunArgs): each failure a Status naming the argument, the
// expected and the given value.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/check.h"

namespace mlakit::args {

inline Status check_range(std::string_view name, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) return invalid_argument(name, str_cat(lo, "..", hi), value);
  return Status::Ok();
}

// Non-null and `align`-byte aligned.
inline Status check_pointer(std::string_view name, const void* ptr, size_t align) {
  if (ptr == nullptr) return invalid_argument(name, "a pointer", "nullptr");
  if (reinterpret_cast<uintptr_t>(ptr) % align != 0) {
    return invalid_argument(name, str_cat("a ", align, "-byte aligned address"), ptr);
  }
  return Status::Ok();
}

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte (null or empty: no).
inline bool overlap(const void* a, uint64_t a_bytes, const void* b, uint64_t b_bytes) {
  if (a == nullptr || b == nullptr || a_bytes == 0 || b_bytes == 0) return false;
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

}  // namespace mlakit::args
