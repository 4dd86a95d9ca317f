// The seeded random source of the ops tests (ops_append_test.cc, ops_indexer_test.cc).
#pragma once

#include <cstdint>
#include <random>

namespace mlakit_test {

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  float normal() { return std::normal_distribution<float>(0.0f, 1.0f)(gen); }
  int64_t below(int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(gen); }
};

}  // namespace mlakit_test
