#pragma once

#include <CLI/CLI.hpp>

namespace mlakit::tools {

// What a subcommand's callback has: where to store the program's exit code, and whether to run.
struct CommandContext {
  int* exit_code = nullptr;
  // false: check the flags, expand the cases and check the memory they need, then stop; nothing
  // is allocated for inputs, measured or run (the mode of the CLI fuzz target).
  bool run = true;
};

// Each adds its subcommand to `app`; its flags live as long as `app`.
void add_info_command(CLI::App& app, const CommandContext& context);
void add_bench_command(CLI::App& app, const CommandContext& context);
void add_check_command(CLI::App& app, const CommandContext& context);
void add_tune_command(CLI::App& app, const CommandContext& context);
void add_bench_op_command(CLI::App& app, const CommandContext& context);

// The mlakit program: every subcommand on one CLI::App, parsed from argv; the exit code.
int run_program(int argc, const char* const* argv, bool run = true);

}  // namespace mlakit::tools
