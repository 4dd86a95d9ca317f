// A gtest matcher for a Status: its code, and a message that names the argument first.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "mlakit/mlakit.h"

namespace mlakit_test {

// `status` has `code` and a message that starts with `arg` and contains every one of `parts`.
inline ::testing::AssertionResult is_error(const mlakit::Status& status, mlakit::StatusCode code,
                                           const std::string& arg,
                                           std::initializer_list<std::string> parts = {}) {
  if (status.code() != code) {
    return ::testing::AssertionFailure()
           << "expected " << mlakit::to_string(code) << ", got " << status.to_string();
  }
  if (status.message().rfind(arg, 0) != 0) {
    return ::testing::AssertionFailure()
           << "message \"" << status.message() << "\" should start with \"" << arg << "\"";
  }
  for (const std::string& part : parts) {
    if (status.message().find(part) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message \"" << status.message() << "\" should contain \"" << part << "\"";
    }
  }
  return ::testing::AssertionSuccess() << status.message();
}

}  // namespace mlakit_test
