#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_common.h"
#include "commands.h"
#include "peaks.h"

namespace mlakit::tools {
namespace {

// `mlakit info --json`: {"mlakit_version", "device": {present, name, sm, ... or error},
// "backends": [{name, available, unavailable_reason, summary, supports, device_memory}],
// "problems": [{"problem": describe(), "backends": [{name, can_run, reason}]}] (with problem
// flags), "read_tbs" (with --measure)}. Returns the exit code.
int print_info_json(const DeviceInfo& d, const std::vector<Case>& cases, bool measure) {
  nlohmann::json doc = {{"mlakit_version", std::string(version())}};
  doc["device"] = {{"present", d.present}, {"error", d.error}};
  if (d.present) {
    doc["device"].update({{"index", d.device},
                          {"name", d.name},
                          {"sm", std::to_string(d.sm_major) + std::to_string(d.sm_minor)},
                          {"sm_count", d.sm_count},
                          {"global_mem_bytes", d.global_mem_bytes},
                          {"l2_bytes", d.l2_bytes}});
  }
  nlohmann::json backends = nlohmann::json::array();
  for (const BackendInfo& b : list_backends()) {
    backends.push_back({{"name", b.name},
                        {"available", b.available},
                        {"unavailable_reason", b.unavailable_reason},
                        {"summary", b.summary},
                        {"supports", b.supports},
                        {"device_memory", b.device_memory}});
  }
  doc["backends"] = backends;
  nlohmann::json problems = nlohmann::json::array();
  for (const Case& c : cases) {
    nlohmann::json verdicts = nlohmann::json::array();
    for (const BackendInfo& b : list_backends()) {
      const Status st = can_run(b.name, c.problem);
      verdicts.push_back({{"name", b.name}, {"can_run", st.ok()}, {"reason", st.message()}});
    }
    problems.push_back({{"problem", describe(c.problem)}, {"backends", verdicts}});
  }
  doc["problems"] = problems;
  int code = 0;
  if (measure) {
    double bw = 0;
    const Status st = d.present ? measure_read_bandwidth(&bw)
                                : Status(StatusCode::kUnsupported, "--measure needs a GPU");
    doc["read_tbs"] = st.ok() ? nlohmann::json(bw / 1e12) : nlohmann::json(nullptr);
    if (!st.ok()) {
      doc["read_error"] = st.message();
      code = d.present ? 1 : 2;
    }
  }
  std::printf("%s\n", doc.dump(2).c_str());
  return code;
}

}  // namespace

void add_info_command(CLI::App& app, const CommandContext& context) {
  auto* cmd =
      app.add_subcommand("info", "the device found (or not), the backends and what each supports");
  struct Flags {
    bool measure = false;
    bool json = false;
    SweepFlags problem;
  };
  auto flags = std::make_shared<Flags>();
  cmd->add_flag("--measure", flags->measure, "measure the read-only HBM bandwidth of the GPU");
  cmd->add_flag("--json", flags->json, "print the same as one JSON object");
  add_sweep_flags(cmd, &flags->problem);
  cmd->footer(
      "With problem flags (--heads, --page-size, --dtype, ...): whether each backend can run that "
      "problem, and why not.");
  cmd->callback([cmd, flags, context] {
    const bool measure = flags->measure;
    int* exit_code = context.exit_code;
    // count_all() counts the subcommand itself once, plus each option given.
    const bool with_problem =
        cmd->count_all() > static_cast<size_t>(1 + (measure ? 1 : 0) + (flags->json ? 1 : 0));
    std::vector<Case> cases;
    if (with_problem) {
      SweepFlags f = flags->problem;
      if (f.batch.empty()) f.batch = {1};
      if (f.seq_len.empty()) f.seq_len = {4096};
      if (const Status st = make_cases(f, &cases); !st.ok()) {
        std::fprintf(stderr, "error: %s\n", st.to_string().c_str());
        *exit_code = 2;
        return;
      }
    }
    if (!context.run) return;
    const DeviceInfo d = current_device();
    if (flags->json) {
      *exit_code = print_info_json(d, cases, measure);
      return;
    }
    std::printf("mlakit %s\n", std::string(version()).c_str());
    if (d.present) {
      std::printf("device %d: %s, sm_%d%d, %d SMs, %.1f GiB, L2 %.0f MiB\n", d.device,
                  d.name.c_str(), d.sm_major, d.sm_minor, d.sm_count,
                  d.global_mem_bytes / 1073741824.0, d.l2_bytes / 1048576.0);
    } else {
      std::printf("device: none (%s); the cpu backend runs on the host\n", d.error.c_str());
    }
    std::printf("\nbackends (in order of preference for --backend auto):\n");
    for (const BackendInfo& b : list_backends()) {
      std::printf("  %-5s %-13s %s\n", b.name.c_str(), b.available ? "available" : "unavailable",
                  b.summary.c_str());
      if (!b.available) std::printf("        why not: %s\n", b.unavailable_reason.c_str());
      std::printf("        memory: %s\n        supports: %s\n", b.device_memory ? "device" : "host",
                  b.supports.c_str());
    }
    if (with_problem) {
      for (const Case& c : cases) {
        std::printf("\n%s:\n", describe(c.problem).c_str());
        for (const BackendInfo& b : list_backends()) {
          const Status st = can_run(b.name, c.problem);
          std::printf("  %-5s %s\n", b.name.c_str(),
                      st.ok() ? "can run it" : ("cannot: " + st.message()).c_str());
        }
      }
    }
    if (measure) {
      if (!d.present) {
        std::fprintf(stderr, "error: --measure needs a GPU, none was found\n");
        *exit_code = 2;
        return;
      }
      double bw = 0;
      if (const Status st = measure_read_bandwidth(&bw); !st.ok()) {
        std::fprintf(stderr, "error: %s\n", st.to_string().c_str());
        *exit_code = 1;
        return;
      }
      std::printf("\nread-only HBM stream (4 GiB, 16-byte loads): %.2f TB/s\n", bw / 1e12);
    }
  });
}

}  // namespace mlakit::tools
