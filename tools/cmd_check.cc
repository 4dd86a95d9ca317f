// mlakit check: runs backends against the cpu reference on a sweep of shapes and prints the max
// and relative errors. Exit code 1 if any case fails. With --corrupt N, each dense case gets up to
// N out-of-range page ids in used block-table slots (harness/corrupt.h): a GPU backend must name
// the first through Decoder::check_data and give the result without those pages (they are masked);
// the cpu backend must refuse the run, naming it.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_common.h"
#include "commands.h"
#include "core/check.h"
#include "harness/corrupt.h"

namespace mlakit::tools {
namespace {

struct CheckFlags {
  SweepFlags sweep;
  std::string backend = "all";
  bool json = false;  // one JSON document on stdout instead of the table
  int corrupt = 0;    // bad page ids planted per case
};

// With bad pages planted: whether `st` (a run's or check_data's) names the first of them.
bool names_first_bad(const Status& st, const std::vector<harness::BadSlot>& planted) {
  return st.code() == StatusCode::kInvalidArgument &&
         st.message().find(str_cat("block_table[", planted[0].request, ", ", planted[0].slot,
                                   "]")) != std::string::npos;
}

int run_check(CheckFlags& f, bool run) {
  const DeviceInfo device = current_device();
  // Default sweep: the edges (length 0 and 1, partial pages, one long request) at small sizes.
  if (f.sweep.batch.empty()) f.sweep.batch = {1, 5};
  if (f.sweep.seq_len.empty()) f.sweep.seq_len = {1, 65, 1000};
  std::vector<Case> cases;
  const std::vector<std::string> backends = expand_backends(f.backend, device.present);
  Status st = make_cases(f.sweep, &cases);
  if (st.ok()) st = check_memory(cases, uses_device(backends, device));
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.to_string().c_str());
    return 2;
  }
  if (!run) return 0;
  if (!f.json) {
    std::printf("checking %s against the cpu reference (%zu cases) on %s\n", f.backend.c_str(),
                cases.size(), device.present ? device.name.c_str() : "the host");
    std::printf("%-6s %4s %4s %5s %7s %3s %5s %10s %10s %10s  %s\n", "backend", "h_q", "s_q",
                "batch", "seq_len", "var", "page", "max_err", "max_ref", "rel_l2", "result");
  }
  nlohmann::json results = nlohmann::json::array();
  int failures = 0, done = 0;
  for (const Case& c : cases) {
    harness::WorkloadOptions wopt;
    wopt.seed = f.sweep.seed + done;
    wopt.sparse_tails = f.sweep.sparse_tails;
    if (f.sweep.var_q == 2) wopt.q_lens.assign(c.batch, c.problem.s_q);
    harness::HostInputs in = harness::make_inputs(c.problem, c.lens, wopt);
    std::vector<harness::BadSlot> planted;
    Status plant = Status::Ok();
    if (f.corrupt > 0) {
      const int64_t room = harness::bad_page_room(in);
      plant = room == 0 ? unsupported("--corrupt: no full page to corrupt in this case")
                        : harness::plant_bad_pages(
                              &in, static_cast<int>(std::min<int64_t>(f.corrupt, room)), wopt.seed,
                              &planted);
    }
    Reference ref;
    for (const std::string& name : backends) {
      std::unique_ptr<Decoder> decoder;
      Status st = plant;
      if (st.ok()) st = Decoder::create(c.problem, {.backend = name}, &decoder);
      std::string result;
      Verdict v;
      if (st.ok() && ref.k == 0) {
        st = reference_for(planted.empty() ? in : harness::without_slots(in, planted), c.batch,
                           &ref);
      }
      if (st.ok()) {
        if (decoder->device_memory()) {
          harness::DeviceInputs dev;
          st = harness::DeviceInputs::upload(in, &dev);
          // The bad pages are masked: check_data must say where they are.
          if (st.ok() && !planted.empty()) {
            const Status found = decoder->check_data(dev.args, nullptr);
            if (!names_first_bad(found, planted)) {
              st = Status(StatusCode::kInternal,
                          "check_data did not name the first bad page id: " + found.to_string());
            }
          }
          if (st.ok()) st = verify_device(*decoder, in, dev, ref, &v);
        } else {
          st = verify_host(*decoder, in, ref, &v);
          // The cpu backend checks host data: it must refuse, naming the first bad entry.
          if (!planted.empty()) {
            v.ok = names_first_bad(st, planted);
            v.cmp = {};
            st = v.ok ? Status::Ok()
                      : Status(StatusCode::kInternal,
                               "the run did not refuse the bad page ids: " + st.to_string());
          }
        }
      }
      std::string verdict;  // for --json: ok, fail, skipped, error
      if (!st.ok()) {
        result = st.code() == StatusCode::kUnsupported ? "skipped: " + st.message()
                                                       : "ERROR: " + st.to_string();
        verdict = st.code() == StatusCode::kUnsupported ? "skipped" : "error";
        failures += st.code() != StatusCode::kUnsupported;
      } else {
        result = v.ok ? "ok" : "FAIL " + verdict_summary(v);
        verdict = v.ok ? "ok" : "fail";
        failures += !v.ok;
      }
      if (f.json) {
        results.push_back({{"backend", name},
                           {"problem", describe(c.problem)},
                           {"h_q", c.problem.h_q},
                           {"s_q", c.problem.s_q},
                           {"batch", c.batch},
                           {"seq_len", c.seq_len},
                           {"variable", c.variable},
                           {"page_size", c.problem.page_size},
                           {"result", verdict},
                           {"message", st.ok() ? (v.ok ? "" : verdict_summary(v)) : st.message()},
                           {"max_abs_err", v.cmp.max_abs_err},
                           {"max_abs_ref", v.cmp.max_abs_ref},
                           {"rel_l2_err", v.cmp.rel_l2_err}});
        continue;
      }
      std::printf("%-6s %4d %4d %5d %7d %3d %5d %10.2e %10.2e %10.2e  %s\n", name.c_str(),
                  c.problem.h_q, c.problem.s_q, c.batch, c.seq_len, c.variable ? 1 : 0,
                  c.problem.page_size, v.cmp.max_abs_err, v.cmp.max_abs_ref, v.cmp.rel_l2_err,
                  result.c_str());
    }
    progress(++done, cases.size());
  }
  if (f.json) {
    const nlohmann::json doc = {{"mlakit_version", std::string(version())},
                                {"device", device.present ? device.name : std::string("host")},
                                {"backend", f.backend},
                                {"failures", failures},
                                {"results", results}};
    std::printf("%s\n", doc.dump(2).c_str());
  } else {
    std::printf("%d failure(s)\n", failures);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

void add_check_command(CLI::App& app, const CommandContext& context) {
  auto* cmd = app.add_subcommand(
      "check", "run backends against the cpu reference on a sweep; print max and relative errors");
  auto f = std::make_shared<CheckFlags>();
  f->sweep.heads = {16, 128};
  f->sweep.s_q = {1, 2};
  f->sweep.page_size = {1, 64};
  f->sweep.var = {0, 1};
  add_sweep_flags(cmd, &f->sweep);
  cmd->add_option("--backend", f->backend,
                  "all (every available backend for this machine's memory) or a comma list");
  cmd->add_option("--corrupt", f->corrupt,
                  "plant up to N out-of-range page ids in used block-table slots of each dense "
                  "case: GPU backends must report them (check_data) and mask them, the cpu "
                  "backend must refuse them")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--json", f->json,
                "print the results as one JSON object ({failures, results: [{backend, problem, "
                "result, max_abs_err, rel_l2_err, ...}]}) instead of the table");
  cmd->callback([f, context] { *context.exit_code = run_check(*f, context.run); });
}

}  // namespace mlakit::tools
