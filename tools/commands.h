#pragma once

#include <CLI/CLI.hpp>

namespace mlakit::tools {

// Each subcommand's callback stores the program's exit code in *exit_code.
void add_info_command(CLI::App& app, int* exit_code);
void add_bench_command(CLI::App& app, int* exit_code);
void add_check_command(CLI::App& app, int* exit_code);
void add_tune_command(CLI::App& app, int* exit_code);

}  // namespace mlakit::tools
