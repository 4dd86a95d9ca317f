// Fuzz target: the tune cache's reader. The input is the cache file (in a memfd, read through
// /proc/self/fd like any path). Loading must never crash, must give entries or a warning, never
// both, and keep warnings short; Cache::nearest must agree with a scan of every entry, for the
// problem whose entries the seed files hold, at every batch and length bucket the input asks.
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_input.h"
#include "tune/bucket.h"
#include "tune/cache.h"

namespace {

using namespace mlakit::tune;

// The nearest entry by a scan of all (the specification of Cache::nearest).
const Entry* scan(const Cache& cache, const std::string& prefix, int b, int l, std::string* key) {
  const Entry* best = nullptr;
  double best_distance = 0;
  int best_b = 0, best_l = 0;
  for (const auto& [k, e] : cache.entries()) {
    int kb = 0, kl = 0;
    if (k.compare(0, prefix.size(), prefix) != 0 ||
        std::sscanf(k.c_str() + prefix.size(), "|b%d|L%d", &kb, &kl) != 2) {
      continue;
    }
    const double d =
        std::fabs(std::log2(kb) - std::log2(b)) + std::fabs(std::log2(kl) - std::log2(l));
    if (best == nullptr || d < best_distance ||
        (d == best_distance && std::pair(kb, kl) < std::pair(best_b, best_l))) {
      best = &e, best_distance = d, best_b = kb, best_l = kl, *key = k;
    }
  }
  return best;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("tune-cache", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) {
    std::abort();
  }
  const Metadata metadata{.gpu = "Fuzz GPU",
                          .sm_count = 132,
                          .driver_version = 13000,
                          .runtime_version = 13000,
                          .library_version = "0.1.0"};
  std::string warning;
  const Cache cache = Cache::load(path, metadata, &warning);
  if (!cache.entries().empty() && !warning.empty()) std::abort();
  if (warning.size() > 1024) std::abort();  // file text is shortened in warnings

  // Buckets to ask, from the input's last bytes.
  const mlakit::Problem problem;
  const std::string prefix = problem_key(problem);
  mlakit_fuzz::Input in(data + size - std::min<size_t>(size, 16), std::min<size_t>(size, 16));
  for (int k = 0; k < 4; ++k) {
    const int b = batch_bucket_at(static_cast<int>(in.in(0, 40)));
    const int l = 1 << in.in(0, 24);
    std::string got_key, want_key;
    const Entry* got = cache.nearest(problem, b, l, &got_key);
    const Entry* want = scan(cache, prefix, b, l, &want_key);
    if (got != want || got_key != want_key) std::abort();
  }
  return 0;
}
