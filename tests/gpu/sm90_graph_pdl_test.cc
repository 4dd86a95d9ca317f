// CUDA graphs and PDL with the sm90 backend; what each test checks is in graph_pdl_util.h.
#include <gtest/gtest.h>

#include "graph_pdl_util.h"

namespace mlakit::testing {
namespace {

// Page 32: the smallest page sm90 runs, so the most block-table entries per request.
TEST(Sm90Graph, ReplayFollowsNewLengthsTablesAndFewerRequests) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_graph_replay("sm90", 32);
}

TEST(Sm90Pdl, BitwiseEqualWithAndWithout) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_pdl_bitwise("sm90", 64);
}

TEST(Sm90Pdl, InputsWrittenLateByThePreviousKernel) {
  MLAKIT_SKIP_WITHOUT_SM90();
  check_inputs_written_late("sm90", 64);
}

}  // namespace
}  // namespace mlakit::testing
