// The tune tests' cache files (tune_test.cc, tune_cache_test.cc): a fresh temporary path, the
// metadata and entries they hold, and a cache document written by hand.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tune/cache.h"

namespace mlakit::tune {

inline std::string temp_path(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("mlakit_tune_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::filesystem::remove(path);
  return path.string();
}

inline Metadata test_metadata() {
  return {.gpu = "Test GPU",
          .sm_count = 132,
          .driver_version = 13000,
          .runtime_version = 13000,
          .library_version = "0.1.0"};
}

inline Entry entry(const std::string& backend, int tactic, double us) {
  return {.backend = backend,
          .tactic = tactic,
          .time_us = us,
          .ragged_us = us * 0.75,
          .runner_up = "other",
          .runner_up_tactic = 1,
          .runner_up_us = us * 1.5,
          .runner_up_ragged_us = us * 0.5};
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A cache document of test_metadata() with `entries` (a JSON object's text) spliced in.
inline std::string document(const std::string& entries, const std::string& format = "2") {
  return R"({"format": )" + format +
         R"(, "metadata": {"gpu": "Test GPU", "sm_count": 132, "driver_version": 13000,
      "runtime_version": 13000, "library_version": "0.1.0"}, "entries": )" +
         entries + "}";
}

}  // namespace mlakit::tune
