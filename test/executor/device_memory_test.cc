// Device memory: the CPU device's allocate/copy/fill_zero and DeviceBuffer, and the executor's
// path for devices WITHOUT host memory (the one CUDA takes), run through StagingDevice: host
// memory the host may not touch outside the device's own operations, with the CPU kernels. A
// stage trained on it must match the CPU bit for bit, checkpoints must round-trip through it, and
// the device's errors must reach the caller.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "../support/models.h"
#include "../support/staging_device.h"
#include "gp/exec/device.h"
#include "gp/exec/reference_trainer.h"
#include "gp/exec/stage_runner.h"
#include "gp/model/model_io.h"
#include "runtime/checkpoint.h"

namespace gp {
namespace {

namespace fs = std::filesystem;
using testing::StagingDevice;

graphpipe::v1::TrainingConfig config(graphpipe::v1::OptimizerKind kind) {
  return testing::training(kind);
}

std::unique_ptr<exec::StageRunner> whole_model(const model::Graph& g, int64_t max_batch, int slots,
                                               const graphpipe::v1::TrainingConfig& t,
                                               const exec::Device& device) {
  auto layout = exec::layout_stage(g, g.topo_order());
  REQUIRE(layout.ok());
  auto r = exec::StageRunner::create(
      g, *layout, {.max_batch = max_batch, .slots = slots, .training = t, .device = &device});
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  return std::move(r).value();
}

// One training step of two micro-batches of `batch` samples in two slots (forward both, then
// backward both: activations of both stay live); the per-slot loss sums in `losses`.
void step(exec::StageRunner& r, int64_t iteration, int64_t batch, std::vector<double>& losses) {
  r.zero_param_grads();
  for (int slot = 0; slot < 2; ++slot) {
    r.forward(slot, batch, iteration, slot * batch);
    losses.push_back(r.loss_sum(slot));
  }
  for (int slot = 1; slot >= 0; --slot) {
    r.begin_backward(slot);
    r.backward(slot, 1.0f / static_cast<float>(2 * batch));
  }
  r.optimizer_step(iteration + 1);
  const Status st = r.synchronize();
  INFO(st.to_string());
  REQUIRE(st.ok());
}

std::vector<float> downloaded_params(const exec::StageRunner& r) {
  std::vector<float> out(static_cast<size_t>(r.param_count()));
  const Status st = r.download_params(out);
  INFO(st.to_string());
  REQUIRE(st.ok());
  return out;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// Every op's parameters and optimizer state, downloaded (works on either device).
std::vector<float> op_tensors(const exec::StageRunner& r) {
  std::vector<float> out;
  for (int op : r.op_indices()) {
    std::vector<float> p(static_cast<size_t>(r.op_param_count(op)));
    std::vector<float> s(static_cast<size_t>(r.op_state_count(op)));
    REQUIRE(r.download_op_params(op, p).ok());
    REQUIRE(r.download_op_state(op, s).ok());
    out.insert(out.end(), p.begin(), p.end());
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

struct TempDir {
  std::string path;
  TempDir() {
    static int counter = 0;
    path = (fs::temp_directory_path() /
            ("gp_device_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++)))
               .string();
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("the CPU device allocates aligned host memory, copies, zeroes and releases it") {
  const exec::Device& cpu = exec::cpu_device();
  CHECK(cpu.host_memory());
  auto none = cpu.allocate(0);
  REQUIRE(none.ok());
  CHECK(*none == nullptr);

  std::vector<float> src(1000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.5f - 7;
  auto buffer = exec::DeviceBuffer::create(cpu, src.size() * sizeof(float));
  REQUIRE(buffer.ok());
  CHECK(buffer->bytes() == src.size() * sizeof(float));
  CHECK(reinterpret_cast<uintptr_t>(buffer->data()) % 64 == 0);
  REQUIRE(cpu.copy_from_host(buffer->data(), src.data(), buffer->bytes()).ok());
  CHECK(same_bits({buffer->f(), src.size()}, src));  // host memory: readable in place
  std::vector<float> back(src.size(), -1);
  REQUIRE(cpu.copy_to_host(back.data(), buffer->data(), buffer->bytes()).ok());
  CHECK(back == src);
  REQUIRE(cpu.fill_zero(buffer->f() + 10, 20 * sizeof(float)).ok());
  REQUIRE(cpu.synchronize().ok());
  for (size_t i = 0; i < src.size(); ++i) {
    INFO("element " << i);
    CHECK(buffer->f()[i] == (i >= 10 && i < 30 ? 0.0f : src[i]));
  }

  // Moves hand the memory over; the moved-from buffer owns nothing.
  exec::DeviceBuffer moved = std::move(*buffer);
  CHECK(buffer->data() == nullptr);
  CHECK(buffer->bytes() == 0);
  CHECK(moved.bytes() == src.size() * sizeof(float));
  exec::DeviceBuffer other;
  other = std::move(moved);
  CHECK(other.f()[0] == src[0]);
  CHECK(moved.data() == nullptr);
}

TEST_CASE("the staging device keeps its memory from the host and checks every pointer") {
  StagingDevice dev;
  CHECK_FALSE(dev.host_memory());
  auto a = exec::DeviceBuffer::create(dev, 64 * sizeof(float));
  REQUIRE(a.ok());
  REQUIRE(dev.contains(a->data()));

  // A host dereference of device memory outside the device's operations faults.
  std::fflush(nullptr);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // die of it, without the test framework's report
    volatile float x = a->f()[3];
    (void)x;
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == SIGSEGV);

  // New memory is poisoned: NaN until written.
  std::vector<float> host(64, 1.0f);
  REQUIRE(dev.copy_to_host(host.data(), a->data(), a->bytes()).ok());
  CHECK(std::isnan(host[0]));
  REQUIRE(dev.fill_zero(a->data(), a->bytes()).ok());
  REQUIRE(dev.copy_to_host(host.data(), a->data(), a->bytes()).ok());
  CHECK(host[63] == 0.0f);
  CHECK(dev.violations() == 0);

  // Copies past the end of an allocation, or with the directions swapped, are refused; the
  // first violation is also the device's error at the next synchronize().
  CHECK_FALSE(dev.copy_to_host(host.data(), a->f() + 1, a->bytes()).ok());
  CHECK_FALSE(dev.copy_from_host(a->data(), a->data(), 4).ok());
  CHECK_FALSE(dev.copy_to_host(a->data(), host.data(), 4).ok());
  CHECK(dev.violations() == 3);
  const Status sync = dev.synchronize();
  CHECK_FALSE(sync.ok());
  CHECK(sync.message().find("copy_to_host source") != std::string::npos);
  CHECK(dev.synchronize().ok());  // reported once
}

TEST_CASE("a stage trains on a device without host memory exactly as on the CPU") {
  // Ids and labels (embeddings, cross-entropy), attention, layer norm with Adam; the vision ops
  // with momentum; a plain chain with SGD.
  auto check_model = [](const char* name, const model::Graph& g,
                        graphpipe::v1::OptimizerKind optimizer) {
    INFO(name);
    StagingDevice dev;
    const auto t = config(optimizer);
    auto cpu = whole_model(g, 4, 2, t, exec::cpu_device());
    auto staged = whole_model(g, 4, 2, t, dev);
    CHECK_FALSE(staged->host_memory());
    REQUIRE(same_bits(downloaded_params(*staged), cpu->params()));  // same initialisation
    for (int64_t it = 0; it < 3; ++it) {
      INFO("iteration " << it);
      std::vector<double> cpu_losses, staged_losses;
      step(*cpu, it, 4, cpu_losses);
      step(*staged, it, 4, staged_losses);
      CHECK(staged_losses == cpu_losses);
      CHECK(same_bits(downloaded_params(*staged), cpu->params()));
      std::vector<float> grads(static_cast<size_t>(staged->param_count()));
      REQUIRE(staged->download_param_grads(grads).ok());
      CHECK(same_bits(grads, cpu->param_grads()));
    }
    for (int op : cpu->op_indices()) {
      INFO("op " << g.op(op).id());
      std::vector<float> state(static_cast<size_t>(staged->op_state_count(op)));
      REQUIRE(staged->download_op_state(op, state).ok());
      CHECK(same_bits(state, cpu->mutable_op_state(op)));
    }
    INFO(dev.first_violation());
    CHECK(dev.violations() == 0);
    CHECK(dev.kernel_calls() > 0);
    CHECK(dev.optimizer_updates() > 0);
    CHECK(dev.copies() > 0);  // graph inputs went over and losses came back as copies
  };
  check_model("tiny-mmt", testing::zoo_graph("tiny-mmt"), graphpipe::v1::OPTIMIZER_KIND_ADAM);
  check_model("small cnn", testing::small_cnn(4, 3, 0.25), graphpipe::v1::OPTIMIZER_KIND_MOMENTUM);
  check_model("chain", testing::chain_graph(3), graphpipe::v1::OPTIMIZER_KIND_SGD);
}

TEST_CASE("the reference trainer runs on a device without host memory, micro-batches included") {
  const auto g = testing::zoo_graph("tiny-dlrm");
  const auto t = config(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  StagingDevice dev;
  auto cpu = exec::ReferenceTrainer::create(g, 8, 4, t);
  auto staged = exec::ReferenceTrainer::create(g, 8, 4, t, dev);
  REQUIRE(cpu.ok());
  REQUIRE(staged.ok());
  for (int it = 0; it < 3; ++it) {
    const auto a = (*cpu)->run_iteration(it);
    const auto b = (*staged)->run_iteration(it);
    INFO(b.status().to_string());
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(b->loss == a->loss);
  }
  CHECK(same_bits(downloaded_params((*staged)->runner()), (*cpu)->runner().params()));
  INFO(dev.first_violation());
  CHECK(dev.violations() == 0);
}

TEST_CASE("checkpoints round-trip through a device without host memory") {
  const auto g = testing::zoo_graph("tiny-mmt");
  const auto t = config(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  StagingDevice dev;
  TempDir dir;
  std::vector<double> ignored;
  auto staged = whole_model(g, 4, 2, t, dev);
  auto cpu = whole_model(g, 4, 2, t, exec::cpu_device());
  for (int64_t it = 0; it < 2; ++it) {
    step(*staged, it, 4, ignored);
    step(*cpu, it, 4, ignored);
  }
  REQUIRE(exec::write_stage_checkpoint(dir.path, 1, g, *staged, "test-run").ok());
  REQUIRE(exec::commit_checkpoint(dir.path, 1, g, "plan", t, "test-run").ok());
  auto manifest = exec::latest_checkpoint(dir.path);
  REQUIRE(manifest.ok());

  // Written from the staging device, the files are the CPU's: same bytes as a CPU checkpoint.
  TempDir cpu_dir;
  REQUIRE(exec::write_stage_checkpoint(cpu_dir.path, 1, g, *cpu, "test-run").ok());
  for (int op : cpu->op_indices()) {
    if (cpu->op_param_count(op) == 0) continue;
    const std::string file = "iter-1/op-" + std::to_string(op) + ".bin";
    auto a = model::read_file((fs::path(dir.path) / file).string());
    auto b = model::read_file((fs::path(cpu_dir.path) / file).string());
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    INFO(file);
    CHECK(*a == *b);
  }

  // Loaded into a fresh runner on either device: every tensor as trained.
  auto restored = whole_model(g, 4, 2, t, dev);
  auto restored_cpu = whole_model(g, 4, 2, t, exec::cpu_device());
  REQUIRE(exec::load_stage_checkpoint(dir.path, *manifest, g, t, *restored).ok());
  REQUIRE(exec::load_stage_checkpoint(dir.path, *manifest, g, t, *restored_cpu).ok());
  const auto trained = op_tensors(*staged);
  CHECK(same_bits(op_tensors(*restored), trained));
  CHECK(same_bits(op_tensors(*restored_cpu), trained));

  // And training carries on identically from there.
  std::vector<double> a, b, c;
  step(*staged, 2, 4, a);
  step(*restored, 2, 4, b);
  step(*restored_cpu, 2, 4, c);
  CHECK(b == a);
  CHECK(c == a);
  CHECK(same_bits(downloaded_params(*restored), downloaded_params(*staged)));
  CHECK(same_bits(restored_cpu->params(), downloaded_params(*staged)));
  INFO(dev.first_violation());
  CHECK(dev.violations() == 0);
}

TEST_CASE("host copies check their sizes, and device errors reach the caller") {
  const auto g = testing::chain_graph(2);
  const auto t = config(graphpipe::v1::OPTIMIZER_KIND_SGD);
  StagingDevice dev;
  auto r = whole_model(g, 4, 1, t, dev);
  std::vector<float> wrong(static_cast<size_t>(r->param_count()) + 1);
  const Status st = r->download_params(wrong);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("download_params") != std::string::npos);
  CHECK_FALSE(r->upload_param_grads(std::span<const float>(wrong).first(3)).ok());

  // An error of the device's queued work fails the iteration it was queued in, naming it; the
  // next iteration runs.
  auto trainer = exec::ReferenceTrainer::create(g, 4, 0, t, dev);
  REQUIRE(trainer.ok());
  dev.inject_kernel_failure(1);
  const auto m = (*trainer)->run_iteration(0);
  REQUIRE_FALSE(m.ok());
  CHECK(m.status().message().find("iteration 0 on staging") != std::string::npos);
  CHECK(m.status().message().find("injected failure of fc") != std::string::npos);
  CHECK((*trainer)->run_iteration(1).ok());
  // A device error pending at set-up fails the set-up.
  float host = 0;
  CHECK_FALSE(dev.fill_zero(&host, sizeof(host)).ok());
  auto late = exec::ReferenceTrainer::create(g, 4, 0, t, dev);
  REQUIRE_FALSE(late.ok());
  CHECK(late.status().message().find("set-up on staging") != std::string::npos);

  // A device too small for the stage: ResourceExhausted naming the size.
  StagingDevice tiny(4096);
  auto layout = exec::layout_stage(g, g.topo_order());
  REQUIRE(layout.ok());
  auto small = exec::StageRunner::create(
      g, *layout, {.max_batch = 64, .slots = 2, .training = t, .device = &tiny});
  REQUIRE_FALSE(small.ok());
  CHECK(small.status().code() == StatusCode::kResourceExhausted);
}

}  // namespace gp
