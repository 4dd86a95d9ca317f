// CUDA graphs and PDL with a GPU backend (shared by the sm80 and sm90 tests).
#pragma once

#include "sm80_test_util.h"

namespace mlakit::testing {

// The dtypes of the problems a check runs (q, cache, out).
struct DTypes {
  DType q = DType::kBF16;
  DType kv = DType::kBF16;
  DType out = DType::kBF16;
};

// A run captured once and replayed with new seq_lens, block tables and inputs (same pointers,
// new contents), and with fewer live requests (the rest seq_len 0), gives bitwise the results of
// uncaptured runs, and those match the cpu reference. h_q 16 and 64, s_q 2, every tactic, PDL on.
// fp8 inputs: their scales are device pointers, and each replay writes new scale values there.
void check_graph_replay(const char* backend, int page_size, DTypes dtypes = {});

// Runs with enable_pdl are bitwise equal to runs without, also back to back on one workspace with
// different lengths (the next call's plan must not overwrite what this call still reads). h_q 16
// s_q 1 and h_q 128 s_q 2, every tactic.
void check_pdl_bitwise(const char* backend, int page_size, DTypes dtypes = {});

// With PDL, a kernel just before the run that lets it launch at once and writes its seq_lens and
// block table only later: results follow what that kernel wrote, bitwise equal to a run after
// it. Before the write the buffers hold other lengths (then the same lengths) and the table
// reversed: what a decode kernel would see if it read them before griddepcontrol.wait. h_q 16
// and 128, every tactic.
void check_inputs_written_late(const char* backend, int page_size);

}  // namespace mlakit::testing
