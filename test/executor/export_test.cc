// Weights out as files other tools read: the safetensors and .npz writers (byte for byte against
// the `safetensors` package, zip64), and export_trained's names for models without ONNX sources.
#include "runtime/export.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "../support/models.h"
#include "../support/weights_files.h"
#include "gp/exec/reference_trainer.h"
#include "runtime/checkpoint.h"
#include "runtime/weights_out.h"

namespace gp {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("gp_export_test_" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// The tensors of test/data/export/make_golden_safetensors.py, in another order than the file's.
struct GoldenTensors {
  std::vector<float> weight, bias, emb;
  std::vector<exec::NamedTensor> tensors;
  GoldenTensors() {
    for (int k = 0; k < 6; ++k) weight.push_back(static_cast<float>(k) * 0.25f - 0.5f);
    bias = {0.5f, -1.0f, 2.0f};
    for (int k = 0; k < 8; ++k) emb.push_back(static_cast<float>(k) * 0.5f - 2.0f);
    tensors = {{"layer.0.weight", {2, 3}, weight},
               {"layer.0.bias", {3}, bias},
               {"emb.weight", {4, 2}, emb}};
  }
};

TEST_CASE("the safetensors writer writes the bytes the safetensors package writes") {
  const GoldenTensors g;
  TempDir dir;
  const std::string out = (dir.path / "w.safetensors").string();
  const Status written = exec::write_safetensors(out, g.tensors, {{"format", "pt"}});
  INFO(written.to_string());
  REQUIRE(written.ok());
  const std::string golden =
      testing::read_bytes(std::string(GP_TEST_DATA_DIR) + "/export/golden.safetensors");
  REQUIRE(golden.size() > 8);
  CHECK(testing::read_bytes(out) == golden);
  CHECK_FALSE(fs::exists(out + ".tmp"));
  const auto read = testing::read_safetensors(out);
  REQUIRE(read.error.empty());
  CHECK(read.order == std::vector<std::string>{"emb.weight", "layer.0.bias", "layer.0.weight"});
  CHECK(read.tensors.at("layer.0.weight").shape == std::vector<int64_t>{2, 3});
  CHECK(read.tensors.at("layer.0.weight").values == g.weight);
  CHECK(read.header.starts_with(R"({"__metadata__":{"format":"pt"},"emb.weight":)"));
}

TEST_CASE("the safetensors header refuses a name twice, the reserved name, and a short tensor") {
  const std::vector<float> v(6, 1.0f);
  auto twice = exec::safetensors_header({{"a", {6}, v}, {"a", {2, 3}, v}}, {});
  CHECK_THAT(twice.status().message(), Catch::Contains("'a' is given twice"));
  auto reserved = exec::safetensors_header({{"__metadata__", {6}, v}}, {});
  CHECK_THAT(reserved.status().message(), Catch::Contains("'__metadata__' is reserved"));
  auto short_values = exec::safetensors_header({{"b", {7}, v}}, {});
  CHECK_THAT(short_values.status().message(), Catch::Contains("'b': 6 values for 7 elements"));
  auto escaped = exec::safetensors_header({{"q\"k", {6}, v}}, {});
  REQUIRE(escaped.ok());
  CHECK(escaped->find(R"("q\"k":{"dtype":"F32","shape":[6],"data_offsets":[0,24]})") !=
        std::string::npos);
  CHECK((escaped->size() - 8) % 8 == 0);
}

TEST_CASE("the npz writer writes every tensor as a float32 .npy entry, zip64 when forced") {
  const GoldenTensors g;
  TempDir dir;
  for (const bool zip64 : {false, true}) {
    INFO("zip64 " << zip64);
    const std::string out = (dir.path / (zip64 ? "w64.npz" : "w.npz")).string();
    const Status written = exec::write_npz(out, g.tensors, zip64);
    INFO(written.to_string());
    REQUIRE(written.ok());
    const auto read = testing::read_npz(out);
    INFO(read.error);
    REQUIRE(read.error.empty());
    // In the given order, each under its name, with its shape and values.
    CHECK(read.order == std::vector<std::string>{"layer.0.weight", "layer.0.bias", "emb.weight"});
    CHECK(read.tensors.at("layer.0.bias").shape == std::vector<int64_t>{3});
    CHECK(read.tensors.at("layer.0.bias").values == g.bias);
    CHECK(read.tensors.at("emb.weight").shape == std::vector<int64_t>{4, 2});
    CHECK(read.tensors.at("emb.weight").values == g.emb);
    // zip64 records: what an entry or archive over 4 GiB gets (version needed 4.5).
    CHECK(read.zip64 == zip64);
    CHECK(testing::little_endian(testing::read_bytes(out), 4, 2) == (zip64 ? 45u : 10u));
  }
  const std::vector<float> v(6, 1.0f);
  CHECK_THAT(
      exec::write_npz((dir.path / "x.npz").string(), {{"a", {6}, v}, {"a", {6}, v}}).message(),
      Catch::Contains("'a' is given twice"));
  CHECK_FALSE(fs::exists(dir.path / "x.npz"));
}

// A trained checkpoint of `model` in `dir`, and the trainer whose parameters it holds.
std::unique_ptr<exec::ReferenceTrainer> checkpointed(const model::Graph& g, const fs::path& dir) {
  auto training = testing::training(graphpipe::v1::OPTIMIZER_KIND_SGD);
  auto trainer = exec::ReferenceTrainer::create(g, 4, 0, training);
  REQUIRE(trainer.ok());
  for (int it = 0; it < 2; ++it) REQUIRE((*trainer)->run_iteration(it).ok());
  REQUIRE(exec::write_stage_checkpoint(dir.string(), 1, g, (*trainer)->mutable_runner(), "r").ok());
  REQUIRE(exec::commit_checkpoint(dir.string(), 1, g, "test", training, "r").ok());
  return std::move(trainer).value();
}

TEST_CASE("export of a model without ONNX sources names tensors op.param, tied copies once") {
  const auto m = testing::tied_lm_model();
  const auto g = testing::build_graph(m);
  TempDir dir;
  const auto trainer = checkpointed(g, dir.path / "ck");
  const auto head = (*trainer).runner().op_params(g.index_of("mid"));
  for (const std::string names : {"source", "ops"}) {
    for (const std::string ext : {".safetensors", ".npz"}) {
      INFO(names << " " << ext);
      exec::ExportOptions options;
      options.checkpoint = (dir.path / "ck").string();
      options.out = (dir.path / ("w" + ext)).string();
      options.names = names;
      const Status exported = exec::export_trained(m, options);
      INFO(exported.to_string());
      REQUIRE(exported.ok());
      const auto read =
          ext == ".npz" ? testing::read_npz(options.out) : testing::read_safetensors(options.out);
      INFO(read.error);
      REQUIRE(read.error.empty());
      // head.weight is emb.weight (tied): written once, under the first member's name.
      std::vector<std::string> keys;
      for (const auto& [k, t] : read.tensors) keys.push_back(k);
      CHECK(keys == std::vector<std::string>{"emb.weight", "mid.bias", "mid.weight"});
      const auto& w = read.tensors.at("mid.weight");
      CHECK(w.shape == std::vector<int64_t>{6, 6});
      REQUIRE(w.values.size() == 36);
      CHECK(std::equal(w.values.begin(), w.values.end(), head.begin()));
    }
  }
  exec::ExportOptions options;
  options.checkpoint = (dir.path / "ck").string();
  options.out = (dir.path / "w.npz").string();
  options.names = "torch";
  CHECK_THAT(exec::export_trained(m, options).message(),
             Catch::Contains("--names torch: expected source or ops"));
}

}  // namespace
}  // namespace gp
