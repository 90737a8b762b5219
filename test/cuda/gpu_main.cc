// Entry point of the GPU test binary: without a usable CUDA device it exits 77, which CTest
// reports as skipped (never as passed).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>

#include "../support/case_ledger.h"
#include "gp/exec/device_info.h"

int main(int argc, char** argv) {
  setenv("NCCL_RUNTIME_CONNECT", "0", 0);  // as graphpipe-executor runs NCCL
  const auto info = gp::exec::query_cuda();
  if (info.devices.empty()) {
    std::printf("skipping GPU tests: %s\n", info.unavailable_reason.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
