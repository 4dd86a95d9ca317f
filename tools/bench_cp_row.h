// mlakit bench --cp N (cmd_bench_cp.cc): a case and its row of results, as printed and written to
// --json.
#pragma once

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_common.h"
#include "harness/timing.h"
#include "mlakit/cp_nccl.h"

namespace mlakit::tools {

// Issue 38's target: the sharded step within the unsharded decode / N plus this.
constexpr double kTargetOverheadUs = 15;

// How a kAllGather case exchanges: the partials apart from the workspace (two gathers in one NCCL
// group), in the ranks' slots of it (nccl_merge_partial_slot: one in-place gather), or in place in
// a workspace that is an NCCL symmetric window (ncclMemAlloc, ncclCommWindowRegister).
enum class CpExchange { kApart, kInPlace, kSymmetric };

struct CpCase {
  Case c;
  int interleave = 1;
  CpMerge merge = CpMerge::kAllGather;
  CpExchange exchange = CpExchange::kApart;
  // --cp-merge's name: allgather, heads, inplace (allgather in place), symmetric.
  std::string merge_name() const {
    return merge == CpMerge::kHeads             ? "heads"
           : exchange == CpExchange::kInPlace   ? "inplace"
           : exchange == CpExchange::kSymmetric ? "symmetric"
                                                : "allgather";
  }
};

struct CpRow {
  CpCase cc;
  int world = 0;
  std::string backend, single_backend, check = "-", note;
  int tactic = 0;
  bool ok = true;
  bool host_partials = false;              // the ranks decoded on the host: only the merge is timed
  harness::Timing single;                  // the unsharded decode on GPU 0 (median_us 0: not run)
  std::vector<harness::Timing> rank;       // each rank's decode alone
  std::vector<harness::Timing> comm_rank;  // each rank's merge with its communication
  harness::Timing comm, step;              // slowest rank per replay: merge alone, whole step
  uint64_t cache_bytes = 0;                // the unsharded cache
  std::vector<uint64_t> rank_cache_bytes;  // each rank's
  double slowest_rank_us() const {
    double t = 0;
    for (const harness::Timing& r : rank) t = std::max(t, r.median_us);
    return t;
  }
  double target_us() const {
    return single.median_us > 0 ? single.median_us / world + kTargetOverheadUs : 0;
  }
};

// The table's header and one row (stdout), and the row as --json writes it.
void print_cp_header();
void print_cp_row(const CpRow& r);
nlohmann::json cp_row_json(const CpRow& r, const CacheKind& kind);

}  // namespace mlakit::tools
