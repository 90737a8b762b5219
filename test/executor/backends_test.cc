// The backend table: device names resolve through it, and what a build lacks is said plainly.
#include <catch2/catch.hpp>

#include "gp/common/version.h"
#include "gp/exec/device.h"
#include "gp/exec/device_info.h"
#include "gp/exec/nccl.h"

namespace gp::exec {
namespace {

TEST_CASE("find_device gives the CPU device for cpu and refuses other names naming the flag") {
  auto cpu = find_device("cpu", MatmulPrecision::kBf16);
  REQUIRE(cpu.ok());
  CHECK(*cpu == &cpu_device());
  CHECK((*cpu)->host_memory());
  for (const char* bad : {"gpu", "cpu:0", "", "tpu:1"}) {
    auto d = find_device(bad);
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(d.status().message(), Catch::Contains("--device"));
  }
  auto index = find_device("cuda:-1");
  REQUIRE_FALSE(index.ok());
  CHECK(index.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(index.status().message(), Catch::Contains("e.g. cuda:0"));
}

TEST_CASE("a build without the CUDA backend says so for CUDA devices and the NCCL data plane") {
  const CudaRuntimeInfo info = query_cuda();
  CHECK(info.built == (GP_CUDA_BUILT == 1));
  if (GP_CUDA_BUILT) {
    // Built with CUDA: the table has it, so NCCL reports a version (no GPU is needed for that).
    CHECK(nccl_version().ok());
    return;
  }
  CHECK_THAT(info.unavailable_reason, Catch::Contains("built without CUDA"));
  auto d = find_device("cuda:0");
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().code() == StatusCode::kUnimplemented);
  CHECK_THAT(d.status().message(), Catch::Contains("no CUDA backend"));
  auto v = nccl_version();
  REQUIRE_FALSE(v.ok());
  CHECK(v.status().code() == StatusCode::kUnimplemented);
  CHECK_THAT(v.status().message(), Catch::Contains("-DGP_CUDA=ON"));
}

TEST_CASE("the CPU device copies and accumulates floats in host memory") {
  const Device& d = cpu_device();
  float a[3] = {1, 2, 3};
  const float b[3] = {10, 20, 30};
  REQUIRE(d.accumulate(a, b, 3).ok());
  CHECK(a[0] == 11);
  CHECK(a[2] == 33);
  REQUIRE(d.copy_on_device(a, b, sizeof(b)).ok());
  CHECK(a[1] == 20);
}

}  // namespace
}  // namespace gp::exec
