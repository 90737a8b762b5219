// NpyDataset: graph inputs from .npy files, in file order or a seeded permutation per epoch, and
// a clear error naming the file for every way a data directory can be wrong.
#include "gp/exec/dataset.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "../support/models.h"
#include "../support/npy.h"
#include "gp/exec/reference_trainer.h"
#include "gp/model/builder.h"

using namespace gp;
using gp::testing::write_npy;

namespace {

namespace fs = std::filesystem;

// x [3] floats and ids [2] into an embedding of 5 rows, an MSE target of [4].
model::Graph tiny_model() {
  model::GraphBuilder b("m", "");
  auto x = b.input("x", {3});
  auto ids = b.input("ids", {2}, graphpipe::v1::DATA_TYPE_INT64);
  auto e = b.embedding_bag("bag", ids, 5, 3);
  auto h = b.linear("fc", b.add("sum", {x, e}), 4);
  b.add_loss(b.mse_loss("loss", h, b.input("t", {4})));
  return gp::testing::build_graph(b.finish());
}

struct DataDir {
  std::string path;
  explicit DataDir(const std::string& name)
      : path((fs::temp_directory_path() / ("gp_dataset_test_" + name)).string()) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~DataDir() { fs::remove_all(path); }
  std::string file(const std::string& n) const { return path + "/" + n; }
};

// Sample k of x holds k, 100 + k, 200 + k, so the row a sample came from is readable.
void write_valid(const DataDir& d, int64_t n) {
  std::vector<float> x, t;
  std::vector<int64_t> ids;
  for (int64_t k = 0; k < n; ++k) {
    for (int j = 0; j < 3; ++j) x.push_back(static_cast<float>(100 * j + k));
    for (int j = 0; j < 4; ++j) t.push_back(0.5f * static_cast<float>(j));
    ids.push_back(k % 5);
    ids.push_back((k + 1) % 5);
  }
  REQUIRE(write_npy(d.file("x.npy"), "<f4", {n, 3}, x));
  REQUIRE(write_npy(d.file("ids.npy"), "<i8", {n, 2}, ids));
  REQUIRE(write_npy(d.file("t.npy"), "<f4", {n, 4}, t));
}

std::vector<int> all_ops(const model::Graph& g) {
  std::vector<int> v;
  for (int i = 0; i < g.num_ops(); ++i) v.push_back(i);
  return v;
}

// The rows of x that samples [0, count) of the stream read, via fill().
std::vector<int64_t> rows_read(const exec::NpyDataset& d, const model::Graph& g, int64_t batch,
                               int iterations) {
  std::vector<int64_t> rows;
  std::vector<float> buf(static_cast<size_t>(batch * 3));
  for (int it = 0; it < iterations; ++it) {
    d.fill(g.op(g.index_of("x")), it, 0, batch, buf.data());
    for (int64_t s = 0; s < batch; ++s) rows.push_back(static_cast<int64_t>(buf[s * 3]));
  }
  return rows;
}

}  // namespace

TEST_CASE("without shuffling every epoch reads the files' rows in order") {
  const auto g = tiny_model();
  DataDir dir("order");
  write_valid(dir, 6);
  auto d = exec::open_stage_data(dir.path, g, all_ops(g), 4, /*shuffle=*/false, 1);
  INFO(d.status().to_string());
  REQUIRE(d.ok());
  CHECK((*d)->samples() == 6);
  CHECK(rows_read(**d, g, 4, 3) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5});
  std::vector<int64_t> ids(4);
  (*d)->fill(g.op(g.index_of("ids")), 1, 1, 2, ids.data());  // samples 5 and 6 (= row 0)
  CHECK(ids == std::vector<int64_t>{0, 1, 0, 1});
}

TEST_CASE("shuffling reads every row once per epoch, in a seeded order that changes per epoch") {
  const auto g = tiny_model();
  DataDir dir("shuffle");
  const int64_t n = 37;  // not a power of two: the permutation walks its cycles
  write_valid(dir, n);
  auto d = exec::open_stage_data(dir.path, g, all_ops(g), 1, true, 7);
  REQUIRE(d.ok());
  std::vector<int64_t> epoch0, epoch1;
  for (int64_t k = 0; k < n; ++k) epoch0.push_back((*d)->row_of(k));
  for (int64_t k = 0; k < n; ++k) epoch1.push_back((*d)->row_of(n + k));
  CHECK(std::set<int64_t>(epoch0.begin(), epoch0.end()).size() == static_cast<size_t>(n));
  CHECK(std::set<int64_t>(epoch1.begin(), epoch1.end()).size() == static_cast<size_t>(n));
  CHECK(*std::max_element(epoch0.begin(), epoch0.end()) == n - 1);
  CHECK(epoch0 != epoch1);
  std::vector<int64_t> identity(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) identity[static_cast<size_t>(k)] = k;
  CHECK(epoch0 != identity);
  auto again = exec::open_stage_data(dir.path, g, all_ops(g), 1, true, 7);
  auto other = exec::open_stage_data(dir.path, g, all_ops(g), 1, true, 8);
  REQUIRE(again.ok());
  REQUIRE(other.ok());
  CHECK((*again)->row_of(5) == (*d)->row_of(5));
  std::vector<int64_t> other0;
  for (int64_t k = 0; k < n; ++k) other0.push_back((*other)->row_of(k));
  CHECK(other0 != epoch0);
  CHECK(rows_read(**d, g, 1, 3) == std::vector<int64_t>(epoch0.begin(), epoch0.begin() + 3));
}

TEST_CASE("a rank opens only the files of its own input ops") {
  const auto g = tiny_model();
  DataDir dir("subset");
  write_valid(dir, 4);
  fs::remove(dir.file("ids.npy"));
  auto d = exec::open_stage_data(dir.path, g, {g.index_of("x"), g.index_of("t")}, 4, false, 1);
  INFO(d.status().to_string());
  CHECK(d.ok());
}

TEST_CASE("a bad data directory is refused naming the file and what is wrong") {
  const auto g = tiny_model();
  auto error = [&](const DataDir& dir, int64_t batch = 4) {
    auto d = exec::open_stage_data(dir.path, g, all_ops(g), batch, false, 1);
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().code() == StatusCode::kInvalidArgument);
    return d.status().message();
  };
  SECTION("not a directory") {
    auto d = exec::open_stage_data("/nonexistent/gp-data", g, all_ops(g), 4, false, 1);
    REQUIRE_FALSE(d.ok());
    CHECK_THAT(d.status().message(), Catch::Contains("not a directory"));
  }
  SECTION("a missing input") {
    DataDir dir("missing");
    write_valid(dir, 4);
    fs::remove(dir.file("t.npy"));
    const auto msg = error(dir);
    CHECK_THAT(msg, Catch::Contains("t.npy") && Catch::Contains("'t'"));
  }
  SECTION("an input that is a FIFO, refused at once, also when another stage's file") {
    alarm(20);  // a reader blocked opening the FIFO fails the test instead of hanging it
    DataDir dir("fifo");
    write_valid(dir, 4);
    fs::remove(dir.file("t.npy"));
    REQUIRE(mkfifo(dir.file("t.npy").c_str(), 0600) == 0);
    CHECK_THAT(error(dir), Catch::Contains("t.npy' is a FIFO, not a regular file"));
    // A stage without 't' only peeks at its header, and leaves the FIFO to the stage that loads it.
    CHECK(
        exec::open_stage_data(dir.path, g, {g.index_of("x"), g.index_of("fc")}, 4, false, 1).ok());
    alarm(0);
  }
  SECTION("a wrong dtype") {
    DataDir dir("dtype");
    write_valid(dir, 4);
    REQUIRE(write_npy(dir.file("x.npy"), "<f8", {4, 3}, std::vector<double>(12, 0.0)));
    CHECK_THAT(error(dir),
               Catch::Contains("x.npy") && Catch::Contains("'<f8'") && Catch::Contains("float32"));
  }
  SECTION("a wrong per-sample shape") {
    DataDir dir("shape");
    write_valid(dir, 4);
    REQUIRE(write_npy(dir.file("x.npy"), "<f4", {4, 2}, std::vector<float>(8, 0.0f)));
    CHECK_THAT(error(dir), Catch::Contains("x.npy: shape (4, 2)") && Catch::Contains("(N, 3)"));
  }
  SECTION("differing sample counts") {
    DataDir dir("counts");
    write_valid(dir, 4);
    REQUIRE(write_npy(dir.file("t.npy"), "<f4", {5, 4}, std::vector<float>(20, 0.0f)));
    CHECK_THAT(error(dir), Catch::Contains("5 samples") && Catch::Contains("same samples"));
  }
  SECTION("differing sample counts between stages, seen from a stage that reads one file") {
    DataDir dir("stage-counts");
    write_valid(dir, 4);
    REQUIRE(write_npy(dir.file("t.npy"), "<f4", {5, 4}, std::vector<float>(20, 0.0f)));
    auto d = exec::open_stage_data(dir.path, g, {g.index_of("x"), g.index_of("fc")}, 4, false, 1);
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(d.status().message(), Catch::Contains("'t' (another stage's input) has 5 samples") &&
                                         Catch::Contains("x.npy has 4"));
  }
  SECTION("fewer samples than the mini-batch") {
    DataDir dir("few");
    write_valid(dir, 3);
    CHECK_THAT(error(dir), Catch::Contains("3 samples, fewer than the mini-batch of 4"));
  }
  SECTION("an id its embedding does not have") {
    DataDir dir("ids");
    write_valid(dir, 4);
    REQUIRE(write_npy(dir.file("ids.npy"), "<i8", {4, 2},
                      std::vector<int64_t>{0, 1, 2, 3, 4, 5, 1, 1}));
    CHECK_THAT(error(dir), Catch::Contains("ids.npy: element 5 (sample 2) is 5, outside [0, 5)"));
  }
  SECTION("fortran order") {
    DataDir dir("fortran");
    write_valid(dir, 4);
    std::vector<float> v(12, 0.0f);
    REQUIRE(write_npy(dir.file("x.npy"), "<f4", {4, 3}, v.data(), v.size() * 4, true));
    CHECK_THAT(error(dir), Catch::Contains("fortran_order"));
  }
  SECTION("a truncated file") {
    DataDir dir("truncated");
    write_valid(dir, 4);
    std::vector<float> v(11, 0.0f);  // the header says 12
    REQUIRE(write_npy(dir.file("x.npy"), "<f4", {4, 3}, v.data(), v.size() * 4));
    CHECK_THAT(error(dir), Catch::Contains("x.npy") && Catch::Contains("needs"));
  }
  SECTION("not a .npy file") {
    DataDir dir("magic");
    write_valid(dir, 4);
    std::FILE* f = std::fopen(dir.file("x.npy").c_str(), "wb");
    std::fputs("x,y,z\n1,2,3\n", f);
    std::fclose(f);
    CHECK_THAT(error(dir), Catch::Contains("x.npy") && Catch::Contains("not a .npy file"));
  }
}

TEST_CASE("the reference trains on the files' samples: the loss is the data's") {
  // y = fc(x + bag(ids)) against t; with the files' data the first loss differs from synthetic
  // data's and repeats exactly when the same rows come back.
  const auto g = tiny_model();
  DataDir dir("train");
  write_valid(dir, 4);
  graphpipe::v1::TrainingConfig t;
  t.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_SGD);
  t.set_learning_rate(1e-12);  // updates too small to matter: every epoch sees one model
  t.set_seed(3);
  auto synthetic_trainer = exec::ReferenceTrainer::create(g, 2, 0, t);
  REQUIRE(synthetic_trainer.ok());
  auto synthetic = (*synthetic_trainer)->run_iteration(0);
  REQUIRE(synthetic.ok());
  auto d = exec::open_stage_data(dir.path, g, g.topo_order(), 2, false, 3);
  REQUIRE(d.ok());
  auto trainer = exec::ReferenceTrainer::create(g, 2, 0, t, exec::cpu_device(), d->get());
  REQUIRE(trainer.ok());
  std::vector<double> losses;
  for (int it = 0; it < 4; ++it) {
    auto m = (*trainer)->run_iteration(it);
    REQUIRE(m.ok());
    losses.push_back(m->loss);
  }
  CHECK(losses[0] != Approx(synthetic->loss));
  CHECK(losses[0] != Approx(losses[1]));  // rows 0-1, then 2-3
  // Epoch 2 reads rows 0-1 again: equal up to the float loss's last bit (the tiny updates may
  // cross a rounding boundary of the exactly accumulated loss).
  CHECK(losses[2] == Approx(losses[0]).epsilon(3e-7));
  CHECK(losses[3] == Approx(losses[1]).epsilon(3e-7));
}

namespace {

// ids of up to 3 per sample, padded with -1, from flat ids and offsets (an imported
// nn.EmbeddingBag with offsets), into a table of 5 rows; an MSE target of [2].
model::Graph ragged_model() {
  model::GraphBuilder b("m", "");
  auto ids = b.input("ids", {3}, graphpipe::v1::DATA_TYPE_INT64);
  auto e = b.embedding_bag("bag", ids, 5, 2);
  for (auto& op : *b.model().mutable_ops()) {
    if (op.id() == "ids") model::set_attr(op, "ragged_offsets", std::string_view("offsets"));
    if (op.id() == "bag") model::set_attr(op, "padding_idx", int64_t{-1});
  }
  b.add_loss(b.mse_loss("loss", e, b.input("t", {2})));
  return gp::testing::build_graph(b.finish());
}

}  // namespace

TEST_CASE("ragged ids are read from flat ids and offsets and padded with -1 per sample") {
  DataDir d("ragged");
  const model::Graph g = ragged_model();
  REQUIRE(write_npy(d.file("ids.npy"), "<i8", {6}, std::vector<int64_t>{4, 0, 1, 2, 3, 3}));
  REQUIRE(write_npy(d.file("offsets.npy"), "<i8", {4}, std::vector<int64_t>{0, 1, 1, 4}));
  REQUIRE(write_npy(d.file("t.npy"), "<f4", {4, 2}, std::vector<float>(8, 0.0f)));
  auto data = exec::NpyDataset::open(d.path, g, all_ops(g), 4, false, 1);
  INFO(data.status().to_string());
  REQUIRE(data.ok());
  CHECK((*data)->samples() == 4);
  std::vector<int64_t> ids(12);
  (*data)->fill(g.op(g.index_of("ids")), 0, 0, 4, ids.data());
  // Bags [4], [], [0 1 2]... in file order: sample 3 runs to the end of the ids.
  CHECK(ids == std::vector<int64_t>{4, -1, -1, -1, -1, -1, 0, 1, 2, 3, 3, -1});
}

TEST_CASE("ragged ids with bad offsets, a missing offsets file or an id out of range are refused") {
  const model::Graph g = ragged_model();
  auto refusal = [&](const std::vector<int64_t>& ids, const std::vector<int64_t>& offsets,
                     bool write_offsets = true) {
    DataDir d("ragged_bad");
    REQUIRE(write_npy(d.file("ids.npy"), "<i8", {static_cast<int64_t>(ids.size())}, ids));
    if (write_offsets) {
      REQUIRE(
          write_npy(d.file("offsets.npy"), "<i8", {static_cast<int64_t>(offsets.size())}, offsets));
    }
    const auto n = static_cast<int64_t>(offsets.size());
    REQUIRE(write_npy(d.file("t.npy"), "<f4", {n, 2},
                      std::vector<float>(static_cast<size_t>(2 * n), 0.0f)));
    auto data = exec::NpyDataset::open(d.path, g, all_ops(g), 1, false, 1);
    REQUIRE_FALSE(data.ok());
    return data.status().message();
  };
  CHECK_THAT(refusal({1, 2, 3}, {1, 2}), Catch::Contains("offsets.npy: offset 0 is 1"));
  CHECK_THAT(refusal({1, 2, 3}, {0, 2, 1}), Catch::Contains("offset 1 is 2, the next 1"));
  CHECK_THAT(refusal({1, 2, 3}, {0, 5}),
             Catch::Contains("the next 5; offsets start at 0 and rise to at most the 3 ids"));
  CHECK_THAT(refusal({1, 2, 3, 4}, {0}),
             Catch::Contains("the bag of sample 0 has 4 ids, more than the 3 per sample 'ids'"));
  CHECK_THAT(refusal({1, 7}, {0, 1}), Catch::Contains("element 1 (sample 1) is 7, outside [0, 5)"));
  CHECK_THAT(refusal({1, 2}, {0, 1}, /*write_offsets=*/false),
             Catch::Contains("offsets.npy: cannot read") &&
                 Catch::Contains("the offsets of the bags of 'ids'"));
}
