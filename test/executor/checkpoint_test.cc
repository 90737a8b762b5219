// Checkpoints per operator: written by one partition of the model, loaded by another; torn,
// corrupted and foreign checkpoints refused with errors naming the file.
#include "gp/exec/checkpoint.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "../support/models.h"

namespace gp {
namespace {

namespace fs = std::filesystem;

graphpipe::v1::TrainingConfig adam() {
  graphpipe::v1::TrainingConfig t;
  t.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  t.set_learning_rate(0.01);
  t.set_adam_beta1(0.9);
  t.set_adam_beta2(0.999);
  t.set_adam_epsilon(1e-8);
  t.set_seed(3);
  return t;
}

struct TempDir {
  std::string path;
  TempDir() {
    path = (fs::temp_directory_path() /
            ("gp_ckpt_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++)))
               .string();
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

std::unique_ptr<exec::StageRunner> runner_for(const graph::Graph& g, std::vector<int> ops,
                                              const graphpipe::v1::TrainingConfig& t) {
  auto r = exec::StageRunner::create(g, std::move(ops), {}, 4, 1, t);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  return std::move(r).value();
}

std::vector<int> all_ops(const graph::Graph& g) { return g.topo_order(); }

// Two optimizer steps on the whole model, so parameters and Adam moments are non-trivial.
std::unique_ptr<exec::StageRunner> trained(const graph::Graph& g) {
  auto r = runner_for(g, all_ops(g), adam());
  for (int step = 1; step <= 2; ++step) {
    r->zero_param_grads();
    r->forward(0, 4, step, 0);
    r->begin_backward(0);
    r->backward(0, 0.25f);
    r->optimizer_step(step);
  }
  return r;
}

std::string latest_dir(const TempDir& d, int64_t iteration) {
  return (fs::path(d.path) / ("iter-" + std::to_string(iteration))).string();
}

TEST_CASE("a checkpoint written by one partition loads into another, tensor for tensor") {
  const auto g = testing::zoo_graph("tiny-mmt");
  TempDir dir;
  auto whole = trained(g);
  REQUIRE(exec::write_stage_checkpoint(dir.path, 7, g, *whole).ok());
  REQUIRE(exec::commit_checkpoint(dir.path, 7, g, "plan-a", adam()).ok());
  auto manifest = exec::latest_checkpoint(dir.path);
  INFO(manifest.status().to_string());
  REQUIRE(manifest.ok());
  CHECK(manifest->iteration() == 7);
  CHECK(manifest->optimizer() == graphpipe::v1::OPTIMIZER_KIND_ADAM);

  // Another plan: the ops split into two stages at a different place.
  const auto& order = g.topo_order();
  const size_t cut = order.size() / 3;
  std::vector<int> first(order.begin(), order.begin() + static_cast<long>(cut));
  std::vector<int> second(order.begin() + static_cast<long>(cut), order.end());
  for (const auto& part : {first, second}) {
    auto fresh = runner_for(g, part, adam());
    REQUIRE(exec::load_stage_checkpoint(dir.path, *manifest, g, adam(), *fresh).ok());
    int compared = 0;
    for (int op : part) {
      const auto want = whole->op_params(op);
      const auto got = fresh->op_params(op);
      REQUIRE(want.size() == got.size());
      if (want.empty()) continue;
      CHECK(std::equal(want.begin(), want.end(), got.begin()));
      const auto want_state = whole->mutable_op_state(op);
      const auto got_state = fresh->mutable_op_state(op);
      REQUIRE(want_state.size() == 2 * want.size());
      CHECK(std::equal(want_state.begin(), want_state.end(), got_state.begin()));
      ++compared;
    }
    CHECK(compared > 0);
  }
}

TEST_CASE("a corrupted or truncated checkpoint file is refused, naming the file") {
  const auto g = testing::zoo_graph("tiny-mmt");
  TempDir dir;
  auto whole = trained(g);
  REQUIRE(exec::write_stage_checkpoint(dir.path, 3, g, *whole).ok());
  REQUIRE(exec::commit_checkpoint(dir.path, 3, g, "p", adam()).ok());
  auto manifest = exec::latest_checkpoint(dir.path);
  REQUIRE(manifest.ok());
  const std::string file = (fs::path(latest_dir(dir, 3)) / manifest->tensors(0).file()).string();

  SECTION("a flipped byte") {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    char c = 0;
    f.seekg(100);
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(100);
    f.write(&c, 1);
  }
  SECTION("a truncated file") { fs::resize_file(file, fs::file_size(file) - 4); }

  auto fresh = runner_for(g, all_ops(g), adam());
  const Status st = exec::load_stage_checkpoint(dir.path, *manifest, g, adam(), *fresh);
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == StatusCode::kDataLoss);
  CHECK_THAT(st.message(), Catch::Contains(manifest->tensors(0).file()));
  CHECK_THAT(st.message(), Catch::Contains(manifest->tensors(0).op_id()));
}

TEST_CASE("a checkpoint is only committed when every operator's file is there") {
  const auto g = testing::zoo_graph("tiny-mmt");
  TempDir dir;
  const auto& order = g.topo_order();
  std::vector<int> half(order.begin(), order.begin() + static_cast<long>(order.size() / 2));
  auto part = runner_for(g, half, adam());
  REQUIRE(exec::write_stage_checkpoint(dir.path, 1, g, *part).ok());
  const Status st = exec::commit_checkpoint(dir.path, 1, g, "p", adam());
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("did not write it"));
  // Nothing to resume from: the partial checkpoint is never pointed at.
  CHECK(exec::latest_checkpoint(dir.path).status().code() == StatusCode::kNotFound);
}

TEST_CASE("a newer checkpoint replaces older ones, keeping the one before it") {
  const auto g = testing::zoo_graph("tiny-mmt");
  TempDir dir;
  auto whole = trained(g);
  for (int64_t it : {1, 3, 5}) {
    REQUIRE(exec::write_stage_checkpoint(dir.path, it, g, *whole).ok());
    REQUIRE(exec::commit_checkpoint(dir.path, it, g, "p", adam()).ok());
  }
  CHECK(exec::latest_checkpoint(dir.path)->iteration() == 5);
  CHECK(fs::exists(latest_dir(dir, 5)));
  CHECK(fs::exists(latest_dir(dir, 3)));
  CHECK_FALSE(fs::exists(latest_dir(dir, 1)));
}

TEST_CASE("a checkpoint of another model or optimizer is refused") {
  const auto g = testing::zoo_graph("tiny-mmt");
  TempDir dir;
  auto whole = trained(g);
  REQUIRE(exec::write_stage_checkpoint(dir.path, 2, g, *whole).ok());
  REQUIRE(exec::commit_checkpoint(dir.path, 2, g, "p", adam()).ok());
  auto manifest = exec::latest_checkpoint(dir.path);
  REQUIRE(manifest.ok());

  const auto other = testing::zoo_graph("tiny-mmt?layers=3");
  auto runner = runner_for(other, other.topo_order(), adam());
  Status st = exec::load_stage_checkpoint(dir.path, *manifest, other, adam(), *runner);
  CHECK(st.code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(st.message(), Catch::Contains("is of model"));

  auto sgd = adam();
  sgd.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_SGD);
  auto sgd_runner = runner_for(g, all_ops(g), sgd);
  st = exec::load_stage_checkpoint(dir.path, *manifest, g, sgd, *sgd_runner);
  CHECK(st.code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(st.message(), Catch::Contains("OPTIMIZER_KIND_ADAM"));
}

TEST_CASE("a checkpoint never reads outside its directory") {
  const auto g = testing::zoo_graph("tiny-mmt");
  TempDir dir;
  auto whole = trained(g);
  REQUIRE(exec::write_stage_checkpoint(dir.path, 3, g, *whole).ok());
  REQUIRE(exec::commit_checkpoint(dir.path, 3, g, "p", adam()).ok());

  SECTION("LATEST naming a path out of the directory is refused") {
    for (const std::string target : {"../iter-3", "/etc", "iter-3/../../x", "iter-"}) {
      INFO(target);
      std::ofstream((fs::path(dir.path) / "LATEST").string(), std::ios::trunc) << target << "\n";
      const auto r = exec::latest_checkpoint(dir.path);
      REQUIRE_FALSE(r.ok());
      CHECK(r.status().code() == StatusCode::kDataLoss);
      CHECK_THAT(r.status().message(), Catch::Contains("is not a checkpoint of this directory"));
    }
  }
  SECTION("a manifest tensor file with a path is refused before it is opened") {
    auto manifest = exec::latest_checkpoint(dir.path);
    REQUIRE(manifest.ok());
    auto bad = *manifest;
    for (auto& t : *bad.mutable_tensors()) t.set_file("../../../../etc/passwd");
    auto fresh = runner_for(g, all_ops(g), adam());
    const Status st = exec::load_stage_checkpoint(dir.path, bad, g, adam(), *fresh);
    REQUIRE_FALSE(st.ok());
    CHECK(st.code() == StatusCode::kDataLoss);
    CHECK_THAT(st.message(), Catch::Contains("is not a file name inside the checkpoint"));
  }
}

TEST_CASE("a directory without checkpoints says so") {
  TempDir dir;
  const auto r = exec::latest_checkpoint(dir.path);
  CHECK(r.status().code() == StatusCode::kNotFound);
  CHECK_THAT(r.status().message(), Catch::Contains(dir.path));
}

}  // namespace
}  // namespace gp
