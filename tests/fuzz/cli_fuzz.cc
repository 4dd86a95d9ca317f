// Fuzz target: the mlakit program's command line. The input is split at NUL bytes into
// arguments (the first naming the subcommand, from the input's first byte), parsed by the
// program's own CLI::App in its check-only mode: flags checked, cases expanded and their memory
// checked, nothing allocated for inputs or run. It must return an exit code, never crash or
// allocate without bound.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The program prints tables and errors: out of the fuzzer's way.
  if (std::freopen("/dev/null", "w", stdout) == nullptr) return 1;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* const kCommands[] = {"bench", "check", "tune", "info"};
  std::vector<std::string> args = {"mlakit", kCommands[data[0] % 4]};
  std::string arg;
  for (size_t i = 1; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(arg);
      arg.clear();
    } else {
      arg += static_cast<char>(data[i]);
    }
  }
  if (!arg.empty()) args.push_back(arg);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  mlakit::tools::run_program(static_cast<int>(argv.size()), argv.data(), /*run=*/false);
  return 0;
}
