// Shared by the sparse decode GPU tests (sparse_sm90_test.cc, sparse_sm80_test.cc): the cases,
// their inputs (indices, lengths, caches of each layout) and the checks of every tactic against the
// cpu reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/sm90/launch.h"
#include "sm80_test_util.h"

namespace mlakit::testing {

// The backend the checks use unless told.
inline constexpr const char* kSparseBackend = "sm90";

struct SparseCase {
  DType q = DType::kBF16;
  bool blockwise = false;  // the V3.2 layout; else a cache of q's type (or e4m3: fp8)
  int page_size = 64;
  int h_q = 16;
  int s_q = 1;
  int topk = 128;
  int batch = 3;
  int len = 1000;  // cached tokens per request (variable: uniform in [len/8, 2 len))
  bool variable = true;
  bool topk_lens = false;
  bool sinks = false;
  bool lse = true;
  bool fp8 = false;  // the dense e4m3 cache with one scale
  bool v4 = false;   // the V4 layout (d_qk 512)
  int extra_topk = 0;
  int extra_page_size = 0;  // 0: page_size
  bool odd_scales = false;  // V3.2: every scale times 1.3 (no longer a power of two)
  bool tails = false;       // indices as a top-k op emits them: -1 tails past short requests
  float k_scale = NAN;      // V3.2 / V4: the cache's extra scale (none by default)
  float q_times = 1.0f;     // every q value times it (a power of two keeps a bf16 q exact)
  float kv_times = 1.0f;    // V3.2: every dequantized cached value times it (its scales and RoPE)
  // V3.2: cached token i's dequantized values (scales and RoPE) times 2^(i % 12): the scores of
  // a row's indices (in random order) jump by powers of two from block to block, so the running
  // max moves late in a chunk too, by more than sm90's lazy-max threshold.
  bool jumps = false;
};

std::string name(const SparseCase& c, int tactic);

// V3.2 cases with q and the cache far from their usual magnitudes: q past fp16's range with the
// cache scaled to match (S as usual, O tiny: the LSE tells), the other way round (P times a scale
// past fp16's range), tiny scales undone by k_scale (P times a scale below it), and tokens of
// magnitudes 2^0 .. 2^11 (`jumps`: the running max moves by far in any block). sm90's sparse mma
// kernel scales q and P by powers of two for its fp16 products and keeps P against the running
// max until a block passes it by 2^8.
std::vector<SparseCase> magnitude_cases();

Problem problem_of(const SparseCase& c);

harness::HostInputs inputs_of(const SparseCase& c, uint64_t seed);

// Indices no reference can take: every -1 slot (and every slot past a request's top-k length)
// replaced by a value out of range or, past the length, a valid slot that must be ignored; the
// extra cache's alike.
harness::HostInputs corrupted(const harness::HostInputs& in);

// One case against the cpu reference. forced: sm90's cluster schedule with that shape of C
// clusters of S CTAs (its setup run directly), instead of a Decoder of `backend`.
void check(const SparseCase& c, uint64_t seed, int tactic, bool corrupt = false,
           const char* backend = kSparseBackend, const sm90::ClusterShape* forced = nullptr);

void check_each_tactic(const SparseCase& c, uint64_t* seed, bool corrupt = false,
                       const char* backend = kSparseBackend);

// Every tactic against the reference on inputs whose first `empty` requests attend nothing: their
// rows give out 0 and lse -inf.
void check_empty_rows(const harness::HostInputs& in, int empty,
                      const char* backend = kSparseBackend);

// PDL changes nothing: every tactic, bitwise equal with and without.
void check_sparse_pdl_bitwise(const SparseCase& c, uint64_t seed,
                              const char* backend = kSparseBackend);

// Empty rows: every slot -1 or a top-k length of 0 give out 0 and lse -inf.
void check_blockwise_empty_rows(const char* backend);

// The V4 layout (d_qk 512, UE8M0 scales after each page's data rows) with and without an extra
// cache: each tile (narrow 16 and 32 rows, wide, several tiles), page sizes that are not powers
// of two (FlashMLA's tests use 2, 53, 61, 64, 69, 256, 576) for either cache, top-k around a block,
// per-request lengths of both lists, sinks, MTP rows, an fp16 q.
// V4: head counts of each tile, s_q 1-3, page sizes (1, odd, a power of two, 576), top-k sizes
// around a block, per-request lengths, sinks, the extra cache on and off with its own page size;
// then out-of-range indices in either list (and past either length), which are skipped.
void check_v4_every_tactic(const char* backend, uint64_t seed);

// V4 rows with nothing to attend in either list (all -1, or both lengths 0) give out 0 and lse
// -inf; a row whose main list is empty attends its extra list alone.
void check_v4_empty_rows(const char* backend);

// V4 with an extra cache: PDL changes nothing, every tactic.
void check_v4_pdl_bitwise(const char* backend);

// A V4 case with an extra cache of another page size, for the sanitizers (both backends).
inline constexpr SparseCase kV4SanitizeCase{.page_size = 61,
                                            .h_q = 16,
                                            .topk = 100,
                                            .batch = 2,
                                            .len = 300,
                                            .topk_lens = true,
                                            .v4 = true,
                                            .extra_topk = 70,
                                            .extra_page_size = 2};

}  // namespace mlakit::testing
