// What the CUDA runtime reports about the GPUs.
#include <catch2/catch.hpp>

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
