// Exceptions stop at the API boundary. The standard library reports a host allocation that
// fails (std::bad_alloc), a thread that cannot be started (std::system_error) and the like by
// throwing; the entry points turn them into a Status, so that the library never terminates its
// caller (the C API and Python cannot catch a C++ exception, and one thrown on a worker thread
// ends the process).
#pragma once

#include <string_view>

#include "mlakit/mlakit.h"

namespace mlakit {

// The Status of the exception being handled, `where` naming the entry point: kInternal with
// "<where>: out of host memory (std::bad_alloc)" and the like. Never throws: if even the message
// cannot be allocated, it is left empty.
Status status_of_current_exception(std::string_view where) noexcept;

// fn() (a Status), or the Status of what it threw.
template <typename Fn>
Status guarded(std::string_view where, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (...) {
    return status_of_current_exception(where);
  }
}

}  // namespace mlakit
