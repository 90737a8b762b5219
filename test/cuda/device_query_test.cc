// GPU tests. Without a usable CUDA device the binary exits 77 so CTest marks it skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>

#include "gp/exec/device_info.h"

TEST_CASE("CUDA devices report a name, memory and a supported compute capability") {
  const auto info = gp::exec::query_cuda();
  REQUIRE(info.built);
  REQUIRE_FALSE(info.devices.empty());
  for (const auto& d : info.devices) {
    CHECK_FALSE(d.name.empty());
    CHECK(d.memory_bytes > (int64_t{1} << 30));
    CHECK(d.compute_major >= 7);
    CHECK(d.multiprocessors > 0);
  }
  CHECK(info.runtime_version >= 12000);
  CHECK(info.nccl_version > 0);
}

int main(int argc, char** argv) {
  const auto info = gp::exec::query_cuda();
  if (info.devices.empty()) {
    std::printf("skipping GPU tests: %s\n", info.unavailable_reason.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
