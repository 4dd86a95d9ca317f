// CUDA graphs and PDL with the sm80 backend; what each test checks is in graph_pdl_util.h.
#include <gtest/gtest.h>

#include "graph_pdl_util.h"

namespace mlakit::testing {
namespace {

TEST(Sm80Graph, ReplayFollowsNewLengthsTablesAndFewerRequests) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_graph_replay("sm80", 16);
}

TEST(Sm80Pdl, BitwiseEqualWithAndWithout) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_pdl_bitwise("sm80", 64);
}

TEST(Sm80Pdl, InputsWrittenLateByThePreviousKernel) {
  MLAKIT_SKIP_WITHOUT_GPU();
  check_inputs_written_late("sm80", 64);
  check_inputs_written_late("sm80", 16);
}

}  // namespace
}  // namespace mlakit::testing
