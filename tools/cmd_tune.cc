// mlakit tune: measures every (backend, tactic) on a list of shapes and writes the winners to the
// tune cache that `--backend auto` reads.
#include <cstdio>
#include <memory>
#include <set>

#include "cli_common.h"
#include "commands.h"
#include "core/check.h"
#include "tune/bucket.h"
#include "tune/tuner.h"

namespace mlakit::tools {
namespace {

struct TuneFlags {
  SweepFlags sweep;
  std::string cache;
  int replays = 10;
  double settle_ms = tune::TuneOptions{}.settle_ms;
  bool force = false;
  bool uniform_only = false;
};

int run_tune(TuneFlags& f, bool run) {
  // The flags first, then the device: a bad flag is reported on any machine.
  const std::string path = tune::cache_path(f.cache);
  if (path.empty()) {
    std::fprintf(stderr,
                 "error: --cache: expected a file path (or MLAKIT_TUNE_CACHE), given none\n");
    return 2;
  }
  if (f.sweep.batch.empty() && f.sweep.seq_len.empty()) f.sweep.grid = "standard";
  std::vector<Case> cases;
  if (Status st = make_cases(f.sweep, &cases); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.to_string().c_str());
    return 2;
  }
  if (!run) return 0;
  const DeviceInfo device = current_device();
  if (!device.present) {
    std::fprintf(stderr, "error: tune measures GPU backends and no GPU was found (%s)\n",
                 device.error.c_str());
    return 2;
  }
  std::string warning;
  tune::Cache cache = tune::Cache::load(path, tune::current_metadata(device), &warning);
  if (!warning.empty()) std::fprintf(stderr, "warning: %s\n", warning.c_str());

  std::printf("tuning %zu shapes on %s into %s\n", cases.size(), device.name.c_str(), path.c_str());
  // us: every request at the bucket's length; ragged: lengths spread over [L/16, L] (tune::rank).
  std::printf("%-58s %-12s %9s %9s %-12s %9s %9s\n", "bucket", "winner", "us", "ragged",
              "runner-up", "us", "ragged");
  std::set<std::string> seen;
  int failures = 0;
  size_t done = 0;
  for (const Case& c : cases) {
    const int b = tune::batch_bucket(c.batch), l = tune::len_bucket(c.problem.max_seq_len);
    const std::string key = tune::bucket_key(c.problem, b, l);
    progress(done++, cases.size());
    if (!seen.insert(key).second) continue;
    const tune::Entry* existing = cache.find(key);
    tune::Entry entry;
    std::string note;
    if (existing != nullptr && !f.force) {
      entry = *existing;
      note = " (cached)";
    } else {
      std::vector<tune::Measurement> measured;
      const Status st = tune::tune_bucket(c.problem, b, l,
                                          {.ragged = !f.uniform_only,
                                           .replays = f.replays,
                                           .settle_ms = f.settle_ms,
                                           .seed = f.sweep.seed},
                                          &measured, &entry);
      for (const tune::Measurement& m : measured) {
        if (!m.status.ok()) {
          std::fprintf(stderr, "\n  %s skipped: %s\n", m.candidate.label.c_str(),
                       m.status.to_string().c_str());
        }
      }
      if (!st.ok()) {
        std::printf("%-58s %s\n", key.c_str(), st.to_string().c_str());
        ++failures;
        continue;
      }
      cache.put(key, entry);
      if (Status saved = cache.save(path); !saved.ok()) {  // save as we go: a long run may stop
        std::fprintf(stderr, "error: %s\n", saved.to_string().c_str());
        return 1;
      }
    }
    const std::string winner = str_cat(entry.backend, ":", entry.tactic);
    const std::string runner = entry.runner_up.empty()
                                   ? std::string("-")
                                   : str_cat(entry.runner_up, ":", entry.runner_up_tactic);
    auto us = [](double t) {
      char buf[32] = "-";
      if (t > 0) std::snprintf(buf, sizeof(buf), "%.1f", t);
      return std::string(buf);
    };
    std::printf("%-58s %-12s %9.1f %9s %-12s %9.1f %9s%s\n", key.c_str(), winner.c_str(),
                entry.time_us, us(entry.ragged_us).c_str(), runner.c_str(), entry.runner_up_us,
                us(entry.runner_up_ragged_us).c_str(), note.c_str());
  }
  progress(cases.size(), cases.size());
  std::printf("%zu buckets in %s, %d failure(s)\n", cache.entries().size(), path.c_str(), failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace

void add_tune_command(CLI::App& app, const CommandContext& context) {
  auto* cmd = app.add_subcommand(
      "tune",
      "measure every backend and tactic per bucket (batch rounded to a power of two, length to "
      "a power of two) and write the winners to the tune cache; default shapes: the standard grid "
      "for the given --heads and --s-q");
  auto f = std::make_shared<TuneFlags>();
  add_sweep_flags(cmd, &f->sweep);
  cmd->add_option("--cache", f->cache, "the tune cache file (default: $MLAKIT_TUNE_CACHE)");
  cmd->add_option("--replays", f->replays, "timed graph replays per candidate")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--settle-ms", f->settle_ms,
                  "untimed replays of each candidate before its timing, so that every candidate is "
                  "timed at the clock its power draw settles at")
      ->check(CLI::Range(0.0, 10000.0));
  cmd->add_flag("--force", f->force,
                "measure buckets already in the cache again (an entry is kept whichever of the "
                "two modes below made it)");
  cmd->add_flag("--uniform-only", f->uniform_only,
                "choose on the uniform batch alone (default: also time a ragged batch, lengths "
                "spread over [L/16, L], and choose by the geometric mean of both ratios to the "
                "fastest; ragged: - where not measured, at batch 1 and for top-k problems)");
  cmd->callback([f, context] { *context.exit_code = run_tune(*f, context.run); });
}

}  // namespace mlakit::tools
