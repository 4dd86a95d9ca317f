// CUDA graphs and PDL with a GPU backend (shared by the sm80 and sm90 tests).
#pragma once

#include "sm80_test_util.h"

namespace mlakit::testing {

// A run captured once and replayed with new seq_lens, block tables and inputs (same pointers,
// new contents), and with fewer live requests (the rest seq_len 0), gives bitwise the results of
// uncaptured runs, and those match the cpu reference. h_q 16 and 64, s_q 2, both tactics, PDL on.
void check_graph_replay(const char* backend, int page_size);

// Runs with enable_pdl are bitwise equal to runs without, also back to back on one workspace with
// different lengths (the next call's plan must not overwrite what this call still reads). h_q 16
// s_q 1 and h_q 128 s_q 2, both tactics.
void check_pdl_bitwise(const char* backend, int page_size);

}  // namespace mlakit::testing
