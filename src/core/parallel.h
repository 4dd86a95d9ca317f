// A minimal parallel-for over [0, n) on std::threads, for the cpu backend and the harness (the
// reference's inputs).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace mlakit {

inline int num_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(std::min(n, 64u));
}

// Calls fn(i) for every i in [0, n), items handed out dynamically to at most `max_threads`
// threads (the calling one among them). An exception thrown by fn (std::bad_alloc) stops the
// handing out and is rethrown here once every thread has joined: left on a worker thread, it
// would end the process. A thread that cannot be started (std::system_error) leaves the work to
// those that run.
template <typename Fn>
void parallel_for(int64_t n, Fn&& fn, int max_threads = num_threads()) {
  const int threads = static_cast<int>(std::min<int64_t>(max_threads, n));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::mutex mutex;
  std::exception_ptr error;
  auto worker = [&]() noexcept {
    try {
      for (int64_t i = next++; i < n; i = next++) fn(i);
    } catch (...) {
      const std::lock_guard lock(mutex);
      if (!error) error = std::current_exception();
      next = n;
    }
  };
  std::vector<std::thread> pool;
  try {
    pool.reserve(threads - 1);
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  } catch (...) {  // fewer threads (or none but this one): the same work, slower
  }
  worker();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace mlakit
