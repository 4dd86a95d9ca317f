// A minimal parallel-for over [0, n) on std::threads, for the cpu backend.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace mlakit::cpu {

inline int num_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(std::min(n, 64u));
}

// Calls fn(i) for every i in [0, n), items handed out dynamically to the threads.
template <typename Fn>
void parallel_for(int64_t n, Fn&& fn) {
  const int threads = static_cast<int>(std::min<int64_t>(num_threads(), n));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

}  // namespace mlakit::cpu
