// mlakit: the command-line program: info, bench, check, tune.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "commands.h"
#include "mlakit/mlakit.h"

int main(int argc, char** argv) {
  CLI::App app{"mlakit: MLA decode over a paged KV cache (DeepSeek-V3/V3.2, Kimi K2)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(mlakit::version()));
  int exit_code = 0;
  mlakit::tools::add_info_command(app, &exit_code);
  mlakit::tools::add_bench_command(app, &exit_code);
  mlakit::tools::add_check_command(app, &exit_code);
  mlakit::tools::add_tune_command(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
