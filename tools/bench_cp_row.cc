// The rows of mlakit bench --cp N (bench_cp_row.h).
#include "bench_cp_row.h"

#include <cstdio>

#include "bench.h"
#include "core/check.h"

namespace mlakit::tools {
namespace {

std::string us(double t) {
  return t > 0 ? str_cat(static_cast<int64_t>(t * 10 + 0.5) / 10.0) : "-";
}

std::string gb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", bytes / 1e9);
  return buf;
}

}  // namespace

void print_cp_header() {
  std::printf("%-12s %4s %4s %5s %7s %3s %5s %3s %5s %-9s %9s %9s %9s %9s %9s %4s %8s %8s  %s\n",
              "backend", "h_q", "s_q", "batch", "seq_len", "var", "page", "cp", "I", "merge",
              "1gpu_us", "rank_us", "comm_us", "step_us", "target_us", "met", "kv_GB", "GB/rank",
              "check");
}

void print_cp_row(const CpRow& r) {
  const Problem& p = r.cc.c.problem;
  const std::string name = r.backend.empty() ? "-" : str_cat(r.backend, ":", r.tactic);
  const double target = r.target_us();
  const std::string met =
      target > 0 && r.step.median_us > 0 ? (r.step.median_us <= target ? "yes" : "no") : "-";
  const uint64_t rank_max =
      r.rank_cache_bytes.empty()
          ? 0
          : *std::max_element(r.rank_cache_bytes.begin(), r.rank_cache_bytes.end());
  std::printf("%-12s %4d %4d %5d %7d %3d %5d %3d %5d %-9s %9s %9s %9s %9s %9s %4s %8s %8s  %s\n",
              name.c_str(), p.h_q, p.s_q, r.cc.c.batch, r.cc.c.seq_len, r.cc.c.variable ? 1 : 0,
              p.page_size, r.world, r.cc.interleave, r.cc.merge_name().c_str(),
              us(r.single.median_us).c_str(), us(r.slowest_rank_us()).c_str(),
              us(r.comm.median_us).c_str(), us(r.step.median_us).c_str(), us(target).c_str(),
              met.c_str(), gb(r.cache_bytes).c_str(), rank_max > 0 ? gb(rank_max).c_str() : "-",
              r.check.c_str());
  if (!r.note.empty()) std::printf("       %s\n", r.note.c_str());
}

nlohmann::json cp_row_json(const CpRow& r, const CacheKind& kind) {
  const Case& c = r.cc.c;
  const auto times = [](const std::vector<harness::Timing>& t) {
    nlohmann::json a = nlohmann::json::array();
    for (const harness::Timing& x : t) a.push_back(x.median_us);
    return a;
  };
  nlohmann::json j = case_json(c, kind, r.backend, r.tactic);
  j.update({{"single_backend", r.single_backend},
            {"cp", r.world},
            {"cp_interleave", r.cc.interleave},
            {"cp_merge", r.cc.merge_name()},
            {"single_us", r.single.median_us},
            {"rank_us", times(r.rank)},
            {"attention_us", r.slowest_rank_us()},
            {"comm_rank_us", times(r.comm_rank)},
            {"comm_us", r.comm.median_us},
            {"step_us", r.step.median_us},
            {"step_min_us", r.step.min_us},
            {"step_max_us", r.step.max_us},
            {"target_us", r.target_us()},
            {"copies", r.step.copies},
            {"host_partials", r.host_partials},
            {"cache_bytes", r.cache_bytes},
            {"rank_cache_bytes", r.rank_cache_bytes},
            {"check", r.check},
            {"note", r.note}});
  return j;
}

}  // namespace mlakit::tools
