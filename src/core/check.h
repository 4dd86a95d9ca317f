// Status helpers shared by validation and the backends. A message names the argument, what was
// expected and what was given, built from the check itself so that the two cannot disagree.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

#include "mlakit/mlakit.h"

namespace mlakit {

template <typename... Parts>
std::string str_cat(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

// "<arg>: expected <expected>, given <given>"
template <typename Given>
Status invalid_argument(std::string_view arg, std::string_view expected, const Given& given) {
  return Status(StatusCode::kInvalidArgument,
                str_cat(arg, ": expected ", expected, ", given ", given));
}

template <typename... Parts>
Status unsupported(const Parts&... parts) {
  return Status(StatusCode::kUnsupported, str_cat(parts...));
}

}  // namespace mlakit

// Returns the Status of `expr` from the enclosing function when it is not ok.
#define MLAKIT_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::mlakit::Status mlakit_status_ = (expr);        \
    if (!mlakit_status_.ok()) return mlakit_status_; \
  } while (0)
