// The backend table: device names resolve through it, what a build lacks is said plainly, and a
// stage is refused an op its device's backend has no kernel for.
#include <catch2/catch.hpp>
#include <set>

#include "../support/models.h"
#include "../support/op_cases.h"
#include "device_api/backend.h"
#include "device_api/nccl.h"
#include "gp/common/version.h"
#include "gp/exec/device.h"
#include "gp/exec/device_info.h"
#include "gp/exec/reference_trainer.h"

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

TEST_CASE("every op type the CPU backend supports has a kernel factory, and opaque has none") {
  // The op cases cover every catalogue type but opaque (their graphs hold inputs and losses too).
  std::set<model::OpType> made;
  for (const auto& c : testing::grad_cases()) {
    const model::Graph g = testing::build_graph(c.model());
    for (const auto& op : g.ops()) {
      INFO(c.name << ": " << op.id() << " (" << op.type() << ")");
      REQUIRE(cpu_backend().supports(op.op_type()));
      auto kernel = make_cpu_kernel(op);
      CHECK(kernel.ok());
      CHECK(check_kernel(cpu_device(), op).ok());
      made.insert(op.op_type());
    }
  }
  for (const auto& info : model::op_catalogue()) {
    INFO(info.type);
    CHECK(cpu_backend().supports(info.id) == (info.id != model::OpType::kOpaque));
    if (cpu_backend().supports(info.id)) CHECK(made.count(info.id) == 1);
#if GP_CUDA_BUILT
    // The CUDA kernels are checked against the CPU's, type by type: the tables must agree.
    CHECK(cuda_backend().supports(info.id) == cpu_backend().supports(info.id));
#endif
  }
}

TEST_CASE("a stage with an op the backend lacks is refused, naming the op, its type and device") {
  model::GraphBuilder b("m", "");
  auto x = b.input("x", {4});
  auto y = b.opaque("odd", {x}, model::make_spec({4}), "Mul", 4.0);
  b.add_loss(b.mse_loss("loss", y, b.input("t", {4})));
  const model::Graph g = testing::build_graph(b.finish());
  const model::OpNode& odd = g.op(g.index_of("odd"));
  REQUIRE(odd.op_type() == model::OpType::kOpaque);
  const Status st = check_kernel(cpu_device(), odd);
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message() ==
        "ops[1] 'odd' (opaque): device cpu has no kernel for op type 'opaque'; ONNX operator Mul "
        "was imported as opaque (--allow-opaque) for planning only and cannot be trained or "
        "profiled");
  // Loading the stage refuses it with that error, before any kernel or buffer is made.
  auto trainer =
      ReferenceTrainer::create(g, 4, 0, testing::training(graphpipe::v1::OPTIMIZER_KIND_SGD));
  REQUIRE_FALSE(trainer.ok());
  CHECK(trainer.status().message() == st.message());
}

}  // namespace
}  // namespace gp::exec
