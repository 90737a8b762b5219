// Helpers shared by the CLIs' main functions: exit codes and error reporting.
#pragma once

#include <cstdio>
#include <string>

#include "gp/common/status.h"

namespace gp::cli {

constexpr int kExitOk = 0;
constexpr int kExitInternal = 1;
constexpr int kExitBadInput = 2;

// Prints "<program>: error: <message>" to stderr and returns the exit code for `status`.
inline int report(const char* program, const Status& status) {
  if (status.ok()) return kExitOk;
  std::fprintf(stderr, "%s: error: %s\n", program, status.message().c_str());
  return exit_code_for(status);
}

}  // namespace gp::cli
