// Checkpoints per operator: written by one partition of the model, loaded by another; torn,
// corrupted and foreign checkpoints refused with errors naming the file.
#include "runtime/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "../support/models.h"
#include "gp/model/model_io.h"

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

std::unique_ptr<exec::StageRunner> runner_for(const model::Graph& g, std::vector<int> ops,
                                              const graphpipe::v1::TrainingConfig& t) {
  auto layout = exec::layout_stage(g, std::move(ops));
  REQUIRE(layout.ok());
  auto r = exec::StageRunner::create(g, *layout, {.max_batch = 4, .slots = 1, .training = t});
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  return std::move(r).value();
}

std::vector<int> all_ops(const model::Graph& g) { return g.topo_order(); }

// Two optimizer steps on the whole model, so parameters and Adam moments are non-trivial.
std::unique_ptr<exec::StageRunner> trained(const model::Graph& g) {
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

// Every parameter and optimizer state (Adam: two moments per parameter) of `ops` in `got` equals
// `want`'s, op by op; at least one of the ops has parameters.
void check_same_tensors(exec::StageRunner& want, exec::StageRunner& got,
                        const std::vector<int>& ops) {
  int compared = 0;
  for (int op : ops) {
    INFO("op " << op);
    const auto want_params = want.op_params(op);
    const auto got_params = got.op_params(op);
    REQUIRE(want_params.size() == got_params.size());
    if (want_params.empty()) continue;
    CHECK(std::equal(want_params.begin(), want_params.end(), got_params.begin()));
    const auto want_state = want.mutable_op_state(op);
    const auto got_state = got.mutable_op_state(op);
    REQUIRE(want_state.size() == 2 * want_params.size());
    REQUIRE(got_state.size() == want_state.size());
    CHECK(std::equal(want_state.begin(), want_state.end(), got_state.begin()));
    ++compared;
  }
  CHECK(compared > 0);
}

TEST_CASE("a checkpoint written by one partition loads into another, tensor for tensor") {
  const auto g = testing::zoo_graph("tiny-mmt");
  TempDir dir;
  auto whole = trained(g);
  REQUIRE(exec::write_stage_checkpoint(dir.path, 7, g, *whole, "test-run").ok());
  REQUIRE(exec::commit_checkpoint(dir.path, 7, g, "plan-a", adam(), "test-run").ok());
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
    check_same_tensors(*whole, *fresh, part);
  }
}

TEST_CASE("a corrupted or truncated checkpoint file is refused, naming the file") {
  const auto g = testing::zoo_graph("tiny-mmt");
  TempDir dir;
  auto whole = trained(g);
  REQUIRE(exec::write_stage_checkpoint(dir.path, 3, g, *whole, "test-run").ok());
  REQUIRE(exec::commit_checkpoint(dir.path, 3, g, "p", adam(), "test-run").ok());
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
  REQUIRE(exec::write_stage_checkpoint(dir.path, 1, g, *part, "test-run").ok());
  const Status st = exec::commit_checkpoint(dir.path, 1, g, "p", adam(), "test-run");
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
    REQUIRE(exec::write_stage_checkpoint(dir.path, it, g, *whole, "test-run").ok());
    REQUIRE(exec::commit_checkpoint(dir.path, it, g, "p", adam(), "test-run").ok());
  }
  CHECK(exec::latest_checkpoint(dir.path)->iteration() == 5);
  CHECK(fs::exists(latest_dir(dir, 5)));
  CHECK(fs::exists(latest_dir(dir, 3)));
  CHECK_FALSE(fs::exists(latest_dir(dir, 1)));
}

void flip_byte(const std::string& file, std::streamoff at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  char c = 0;
  f.seekg(at);
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(at);
  f.write(&c, 1);
}

TEST_CASE("a damaged newest checkpoint falls back to the previous one, with a warning") {
  const auto g = testing::zoo_graph("tiny-mmt");
  TempDir dir;
  auto whole = trained(g);
  for (int64_t it : {3, 5}) {
    REQUIRE(exec::write_stage_checkpoint(dir.path, it, g, *whole, "run-a").ok());
    REQUIRE(exec::commit_checkpoint(dir.path, it, g, "p", adam(), "run-a").ok());
  }
  auto newest = exec::latest_checkpoint(dir.path);
  REQUIRE(newest.ok());
  REQUIRE(newest->iteration() == 5);
  const std::string file = (fs::path(latest_dir(dir, 5)) / newest->tensors(1).file()).string();

  SECTION("a flipped byte in one operator's file") { flip_byte(file, 200); }
  SECTION("a missing file") { fs::remove(file); }
  SECTION("a garbled manifest") {
    std::ofstream(fs::path(latest_dir(dir, 5)) / "MANIFEST.pbtxt", std::ios::trunc) << "tensors {";
  }
  SECTION("a file left from another run's checkpoint of the same iteration") {
    // run-b writes iteration 5 again but dies before its commit; run-a's manifest remains.
    auto other = trained(g);
    REQUIRE(exec::write_stage_checkpoint(dir.path, 5, g, *other, "run-b").ok());
  }
  std::vector<std::string> warnings;
  const auto used = exec::latest_checkpoint(dir.path, &warnings);
  REQUIRE(used.ok());
  CHECK(used->iteration() == 3);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("iter-5"));
  CHECK_THAT(warnings[0], Catch::Contains("using iter-3 instead"));
  // And it loads, tensor for tensor (iter-3 was written from the same state).
  auto fresh = runner_for(g, all_ops(g), adam());
  REQUIRE(exec::load_stage_checkpoint(dir.path, *used, g, adam(), *fresh).ok());
  check_same_tensors(*whole, *fresh, all_ops(g));
}

TEST_CASE("an operator's file of another iteration or run is refused under a manifest") {
  const auto g = testing::zoo_graph("tiny-mmt");
  TempDir dir;
  auto whole = trained(g);
  REQUIRE(exec::write_stage_checkpoint(dir.path, 2, g, *whole, "run-a").ok());
  REQUIRE(exec::commit_checkpoint(dir.path, 2, g, "p", adam(), "run-a").ok());
  REQUIRE(exec::write_stage_checkpoint(dir.path, 4, g, *whole, "run-a").ok());
  REQUIRE(exec::commit_checkpoint(dir.path, 4, g, "p", adam(), "run-a").ok());
  auto manifest = exec::latest_checkpoint(dir.path);
  REQUIRE(manifest.ok());
  const std::string name = manifest->tensors(0).file();
  SECTION("a file copied from the older checkpoint") {
    fs::copy_file(fs::path(latest_dir(dir, 2)) / name, fs::path(latest_dir(dir, 4)) / name,
                  fs::copy_options::overwrite_existing);
    auto fresh = runner_for(g, all_ops(g), adam());
    const Status st = exec::load_stage_checkpoint(dir.path, *manifest, g, adam(), *fresh);
    REQUIRE_FALSE(st.ok());
    CHECK(st.code() == StatusCode::kDataLoss);
    CHECK_THAT(st.message(), Catch::Contains("written for iteration 2"));
    CHECK_THAT(st.message(), Catch::Contains(name));
  }
  SECTION("a file of another run") {
    REQUIRE(exec::write_stage_checkpoint(dir.path, 4, g, *whole, "run-b").ok());
    auto fresh = runner_for(g, all_ops(g), adam());
    const Status st = exec::load_stage_checkpoint(dir.path, *manifest, g, adam(), *fresh);
    REQUIRE_FALSE(st.ok());
    CHECK_THAT(st.message(), Catch::Contains("of another run"));
  }
}

TEST_CASE("a format 1 checkpoint (no iteration or run in its headers) still loads") {
  const auto g = testing::zoo_graph("tiny-mmt");
  TempDir dir;
  auto whole = trained(g);
  REQUIRE(exec::write_stage_checkpoint(dir.path, 3, g, *whole, "r").ok());
  REQUIRE(exec::commit_checkpoint(dir.path, 3, g, "p", adam(), "r").ok());
  auto manifest = exec::latest_checkpoint(dir.path);
  REQUIRE(manifest.ok());
  // Rewrite it as format 1 wrote it: the 40-byte header without iteration and run tag.
  for (const auto& t : manifest->tensors()) {
    const auto path = fs::path(latest_dir(dir, 3)) / t.file();
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(bytes.size() > 56);
    std::string v1 = bytes.substr(0, 32) + bytes.substr(48, 8) + bytes.substr(56);
    v1[6] = '1';  // "GPCKPT1"
    std::ofstream(path, std::ios::binary | std::ios::trunc) << v1;
  }
  auto old = *manifest;
  old.set_format_version(1);
  old.clear_run_id();
  REQUIRE(
      model::write_message((fs::path(latest_dir(dir, 3)) / "MANIFEST.pbtxt").string(), old).ok());
  std::vector<std::string> warnings;
  auto read = exec::latest_checkpoint(dir.path, &warnings);
  REQUIRE(read.ok());
  CHECK(warnings.empty());
  CHECK(read->format_version() == 1);
  auto fresh = runner_for(g, all_ops(g), adam());
  REQUIRE(exec::load_stage_checkpoint(dir.path, *read, g, adam(), *fresh).ok());
  check_same_tensors(*whole, *fresh, all_ops(g));
}

TEST_CASE("torn checkpoint directories and temporary files are cleaned up") {
  const auto g = testing::zoo_graph("tiny-mmt");
  TempDir dir;
  auto whole = trained(g);
  REQUIRE(exec::write_stage_checkpoint(dir.path, 2, g, *whole, "r").ok());
  REQUIRE(exec::commit_checkpoint(dir.path, 2, g, "p", adam(), "r").ok());
  // A checkpoint of iteration 4 interrupted before its manifest, and stray temporaries.
  REQUIRE(exec::write_stage_checkpoint(dir.path, 4, g, *whole, "r").ok());
  std::ofstream(fs::path(latest_dir(dir, 4)) / "op-1.bin.tmp") << "x";
  std::ofstream(fs::path(latest_dir(dir, 2)) / "op-1.bin.tmp") << "x";
  std::ofstream(fs::path(dir.path) / "LATEST.tmp") << "iter-4";
  auto removed = exec::clean_torn_checkpoints(dir.path);
  REQUIRE(removed.ok());
  CHECK(removed->size() == 3);  // LATEST.tmp, iter-2's temporary, iter-4 whole
  CHECK_FALSE(fs::exists(latest_dir(dir, 4)));
  CHECK_FALSE(fs::exists(fs::path(dir.path) / "LATEST.tmp"));
  CHECK_FALSE(fs::exists(fs::path(latest_dir(dir, 2)) / "op-1.bin.tmp"));
  // The complete checkpoint stays, loadable.
  auto manifest = exec::latest_checkpoint(dir.path);
  REQUIRE(manifest.ok());
  CHECK(manifest->iteration() == 2);
  auto fresh = runner_for(g, all_ops(g), adam());
  REQUIRE(exec::load_stage_checkpoint(dir.path, *manifest, g, adam(), *fresh).ok());
  check_same_tensors(*whole, *fresh, all_ops(g));
  // Nothing left to clean the second time.
  CHECK(exec::clean_torn_checkpoints(dir.path)->empty());
}

TEST_CASE("a checkpoint of another model or optimizer is refused") {
  const auto g = testing::zoo_graph("tiny-mmt");
  TempDir dir;
  auto whole = trained(g);
  REQUIRE(exec::write_stage_checkpoint(dir.path, 2, g, *whole, "test-run").ok());
  REQUIRE(exec::commit_checkpoint(dir.path, 2, g, "p", adam(), "test-run").ok());
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
  REQUIRE(exec::write_stage_checkpoint(dir.path, 3, g, *whole, "test-run").ok());
  REQUIRE(exec::commit_checkpoint(dir.path, 3, g, "p", adam(), "test-run").ok());

  SECTION("LATEST naming a path out of the directory is never followed") {
    for (const std::string target : {"../iter-3", "/etc", "iter-3/../../x", "iter-"}) {
      INFO(target);
      std::ofstream((fs::path(dir.path) / "LATEST").string(), std::ios::trunc) << target << "\n";
      // The checkpoint inside the directory is used instead, with a warning.
      std::vector<std::string> warnings;
      const auto r = exec::latest_checkpoint(dir.path, &warnings);
      REQUIRE(r.ok());
      CHECK(r->iteration() == 3);
      REQUIRE(warnings.size() == 1);
      CHECK_THAT(warnings[0], Catch::Contains("is not a checkpoint of this directory"));
      // Without it, nothing is loaded.
      fs::remove_all(latest_dir(dir, 3));
      const auto none = exec::latest_checkpoint(dir.path);
      REQUIRE_FALSE(none.ok());
      CHECK(none.status().code() == StatusCode::kDataLoss);
      CHECK_THAT(none.status().message(), Catch::Contains("is not a checkpoint of this directory"));
      REQUIRE(exec::write_stage_checkpoint(dir.path, 3, g, *whole, "test-run").ok());
      REQUIRE(exec::commit_checkpoint(dir.path, 3, g, "p", adam(), "test-run").ok());
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

TEST_CASE("a FIFO as LATEST, a manifest or an operator's file is refused at once, naming it") {
  alarm(30);  // a reader blocked opening a FIFO fails the test instead of hanging it
  const auto g = testing::zoo_graph("tiny-mmt");
  TempDir dir;
  auto whole = trained(g);
  REQUIRE(exec::write_stage_checkpoint(dir.path, 3, g, *whole, "test-run").ok());
  REQUIRE(exec::commit_checkpoint(dir.path, 3, g, "p", adam(), "test-run").ok());
  auto manifest = exec::latest_checkpoint(dir.path);
  REQUIRE(manifest.ok());
  const auto make_fifo = [](const fs::path& p) {
    fs::remove(p);
    REQUIRE(mkfifo(p.c_str(), 0600) == 0);
  };

  SECTION("LATEST: the checkpoint is found without it, and without one resuming is refused") {
    const fs::path latest = fs::path(dir.path) / "LATEST";
    make_fifo(latest);
    const std::string named = "'" + latest.string() + "' is a FIFO, not a regular file";
    std::vector<std::string> warnings;
    const auto r = exec::latest_checkpoint(dir.path, &warnings);
    REQUIRE(r.ok());
    CHECK(r->iteration() == 3);
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0], Catch::Contains(named));
    fs::remove_all(latest_dir(dir, 3));
    const auto none = exec::latest_checkpoint(dir.path);
    CHECK(none.status().code() == StatusCode::kDataLoss);
    CHECK_THAT(none.status().message(), Catch::Contains(named));
  }
  SECTION("the manifest") {
    const fs::path file = fs::path(latest_dir(dir, 3)) / "MANIFEST.pbtxt";
    make_fifo(file);
    const auto none = exec::latest_checkpoint(dir.path);
    CHECK(none.status().code() == StatusCode::kDataLoss);
    CHECK_THAT(none.status().message(),
               Catch::Contains("'" + file.string() + "' is a FIFO, not a regular file"));
  }
  SECTION("an operator's file, on the check and on the load") {
    const fs::path file = fs::path(latest_dir(dir, 3)) / manifest->tensors(0).file();
    make_fifo(file);
    const std::string named = "'" + file.string() + "' is a FIFO, not a regular file";
    CHECK_THAT(exec::latest_checkpoint(dir.path).status().message(), Catch::Contains(named));
    auto fresh = runner_for(g, all_ops(g), adam());
    const Status st = exec::load_stage_checkpoint(dir.path, *manifest, g, adam(), *fresh);
    CHECK_THAT(st.message(), Catch::Contains(named));
  }
  alarm(0);
}

TEST_CASE("a linked iteration directory or operator's file is refused on resume, naming it") {
  const auto g = testing::zoo_graph("tiny-mmt");
  TempDir dir;
  TempDir elsewhere;
  auto whole = trained(g);
  REQUIRE(exec::write_stage_checkpoint(dir.path, 3, g, *whole, "test-run").ok());
  REQUIRE(exec::commit_checkpoint(dir.path, 3, g, "p", adam(), "test-run").ok());
  auto manifest = exec::latest_checkpoint(dir.path);
  REQUIRE(manifest.ok());

  SECTION("iter-3 a link to a checkpoint outside the directory") {
    const fs::path outside = fs::path(elsewhere.path) / "iter-3";
    fs::rename(latest_dir(dir, 3), outside);
    fs::create_directory_symlink(outside, latest_dir(dir, 3));
    const auto r = exec::latest_checkpoint(dir.path);
    CHECK(r.status().code() == StatusCode::kDataLoss);
    CHECK_THAT(r.status().message(),
               Catch::Contains("checkpoint " + latest_dir(dir, 3) + " is a symbolic link"));
  }
  SECTION("an operator's file a link to a copy outside") {
    const fs::path file = fs::path(latest_dir(dir, 3)) / manifest->tensors(0).file();
    const fs::path outside = fs::path(elsewhere.path) / "op.bin";
    fs::copy_file(file, outside);
    fs::remove(file);
    fs::create_symlink(outside, file);
    const std::string named = "'" + file.string() + "' is a symbolic link, not a regular file";
    CHECK_THAT(exec::latest_checkpoint(dir.path).status().message(), Catch::Contains(named));
    auto fresh = runner_for(g, all_ops(g), adam());
    const Status st = exec::load_stage_checkpoint(dir.path, *manifest, g, adam(), *fresh);
    CHECK_THAT(st.message(), Catch::Contains(named));
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
