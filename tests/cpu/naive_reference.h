// An independent float64 reference of DESIGN.md "The math", the oracle of the cpu backend tests.
//
// Written from the design document, not from the library: it shares no code with
// src/backends/cpu or src/core/numeric.h. It decodes the storage types with its own small decoders,
// gathers the tokens each query token sees (through the block table, or the sparse indices of the
// main and the extra cache) into plain float64 rows, and then does the math with straightforward
// loops in double. It is slow on purpose: only small shapes go through it.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/workload.h"

namespace mlakit_test {

// Storage decoders, exact in double. NaN patterns decode to NaN.
double decode_bf16(uint16_t bits);  // the upper 16 bits of a float32
double decode_fp16(uint16_t bits);  // IEEE binary16
double decode_e4m3(uint8_t bits);   // e4m3fn: bias 7, no infinities, 0x7f / 0xff NaN

struct NaiveResult {
  std::vector<double> out;   // [b, s_q, h_q, 512]
  std::vector<double> lse;   // [b, s_q, h_q], natural log; -inf where no token is visible
  std::vector<int> visible;  // [b, s_q] tokens each query token attends to (duplicates counted,
                             // extra cache included)
};

// Computes out and lse for the inputs `in` with the scales stored in it (softmax_scale; q_scale for
// an fp8 q; k_scale where it is not NaN, for fp8 dense and optionally for fp8 blockwise).
NaiveResult naive_attention(const mlakit::harness::HostInputs& in);

}  // namespace mlakit_test
