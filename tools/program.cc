#include <CLI/CLI.hpp>

#include "commands.h"
#include "mlakit/mlakit.h"

namespace mlakit::tools {

int run_program(int argc, const char* const* argv, bool run) {
  CLI::App app{"mlakit: MLA decode over a paged KV cache (DeepSeek-V3/V3.2, Kimi K2)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(version()));
  int exit_code = 0;
  const CommandContext context{.exit_code = &exit_code, .run = run};
  add_info_command(app, context);
  add_bench_command(app, context);
  add_check_command(app, context);
  add_tune_command(app, context);
  add_bench_op_command(app, context);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}

}  // namespace mlakit::tools
