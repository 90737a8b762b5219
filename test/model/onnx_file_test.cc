// ONNX files as torch 2.x writes them (test/data/onnx/torch2, make_torch2_models.py): weights in
// an external data file, read only from inside the model's directory and only as far as the
// file holds them; equal-valued parameters the exporter merged become separate again, while a
// weight the program itself shares stays shared.
#include "gp/model/onnx_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "gp/model/model_io.h"
#include "gp/model/onnx_import.h"
#include "onnx/onnx_pb.h"

namespace gp::model {
namespace {

namespace fs = std::filesystem;

const std::string kDir = std::string(GP_TEST_DATA_DIR) + "/onnx/torch2/";

std::map<std::string, std::string> initializers(const onnx::ModelProto& m) {
  std::map<std::string, std::string> out;
  for (const auto& t : m.graph().initializer()) out[t.name()] = t.raw_data();
  return out;
}

// A scratch directory holding a copy of two_norms_dynamo.onnx and its data file.
struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("gp_onnx_file_" + std::to_string(getpid()));
  Scratch() {
    fs::remove_all(dir);
    fs::create_directories(dir / "model");
    fs::copy_file(kDir + "two_norms_dynamo.onnx", dir / "model" / "m.onnx");
    fs::copy_file(kDir + "two_norms_dynamo.onnx.data",
                  dir / "model" / "two_norms_dynamo.onnx.data");
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string model() const { return (dir / "model" / "m.onnx").string(); }

  // Rewrites external_data entry `key` of initializer `name` and saves the model.
  void set_external(const std::string& name, const std::string& key, const std::string& value) {
    onnx::ModelProto m;
    REQUIRE(m.ParseFromString(*read_file(model())));
    for (auto& t : *m.mutable_graph()->mutable_initializer()) {
      if (t.name() != name) continue;
      bool found = false;
      for (auto& e : *t.mutable_external_data()) {
        if (e.key() == key) {
          e.set_value(value);
          found = true;
        }
      }
      if (!found) {
        auto* e = t.add_external_data();
        e->set_key(key);
        e->set_value(value);
      }
    }
    std::string bytes;
    REQUIRE(m.SerializeToString(&bytes));
    REQUIRE(write_file_atomic(model(), bytes).ok());
  }
};

TEST_CASE("a torch 2.x export's external data is read into its initializers") {
  onnx::ModelProto m;
  OnnxFileInfo info;
  auto s = read_onnx_file(kDir + "two_norms_dynamo.onnx", &m, &info);
  INFO(s.to_string());
  REQUIRE(s.ok());
  CHECK(info.external_data);
  for (const auto& t : m.graph().initializer()) {
    INFO(t.name());
    CHECK(t.data_location() != onnx::TensorProto::EXTERNAL);
    int64_t n = 1;
    for (int64_t d : t.dims()) n *= d;
    if (t.data_type() == onnx::TensorProto::FLOAT)
      CHECK(static_cast<int64_t>(t.raw_data().size()) == 4 * n);
  }
  CHECK(initializers(m).at("fc1.weight").size() == 32 * 32 * 4);
}

TEST_CASE("parameters the exporter merged by value become separate, named after their own") {
  onnx::ModelProto m;
  OnnxFileInfo info;
  REQUIRE(read_onnx_file(kDir + "two_norms_dynamo.onnx", &m, &info).ok());
  CHECK(info.separated_parameters == 2);
  std::vector<std::vector<std::string>> norms;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == "LayerNormalization") norms.push_back({n.input().begin(), n.input().end()});
  }
  REQUIRE(norms.size() == 2);
  CHECK(norms[0][1] == "norm1.weight");
  CHECK(norms[0][2] == "norm1.bias");
  CHECK(norms[1][1] == "norm2.weight");
  CHECK(norms[1][2] == "norm2.bias");
  const auto init = initializers(m);
  CHECK(init.at("norm2.weight") == init.at("norm1.weight"));  // the same values, two tensors
  // Imported, each norm has its own parameters, sourced from its own tensor.
  auto model = import_onnx(kDir + "two_norms_dynamo.onnx");
  INFO(model.status().to_string());
  REQUIRE(model.ok());
  std::set<std::string> sources;
  for (const auto& src : model->param_sources()) sources.insert(src.initializer());
  CHECK(sources.count("norm1.weight") == 1);
  CHECK(sources.count("norm2.weight") == 1);
  CHECK(sources.count("norm2.bias") == 1);
}

TEST_CASE("a weight the traced program shares stays shared and imports as tied copies") {
  onnx::ModelProto m;
  OnnxFileInfo info;
  REQUIRE(read_onnx_file(kDir + "shared_weight_dynamo.onnx", &m, &info).ok());
  CHECK(info.separated_parameters == 0);
  auto model = import_onnx(kDir + "shared_weight_dynamo.onnx");
  INFO(model.status().to_string());
  REQUIRE(model.ok());
  // fc1 and fc2 each hold a copy, sourced from the one tensor, and the copies are tied.
  REQUIRE(model->param_ties_size() == 1);
  const auto& tie = model->param_ties(0);
  REQUIRE(tie.members_size() == 2);
  std::set<std::string> sources;
  for (const auto& src : model->param_sources()) {
    for (const auto& member : tie.members()) {
      if (src.op() == member.op() && src.param() == member.param()) {
        sources.insert(src.initializer());
      }
    }
  }
  CHECK(sources.size() == 1);
  CHECK(tie.members(0).op() != tie.members(1).op());
}

TEST_CASE("external data outside the model's directory or beyond its file is refused by name") {
  const std::string good = "two_norms_dynamo.onnx.data";
  REQUIRE(import_onnx(Scratch().model()).ok());
  struct Case {
    std::string key, value, words;
  };
  const std::vector<Case> cases = {
      {"location", "../outside.data", "no '..'"},
      {"location", "ABSOLUTE", "no absolute path"},
      {"location", "link.data", "leads outside the model's directory"},
      {"location", "missing.data", "cannot be opened"},
      {"location", "sub", "is a directory, not a regular file"},
      {"location", "pipe", "is a FIFO, not a regular file"},  // refused, not waited on
      {"location", "", "names no location"},
      {"offset", "999999", "which holds"},
      {"offset", "-4", "is not a count"},
      {"length", "12", "bytes of external data for 1024 elements"},
      {"length", "18446744073709551615", "which holds"},
  };
  for (const auto& c : cases) {
    Scratch s;
    fs::create_directories(s.dir / "model" / "sub");
    fs::copy_file(s.dir / "model" / good, s.dir / "outside.data");
    fs::create_symlink(s.dir / "outside.data", s.dir / "model" / "link.data");
    REQUIRE(mkfifo((s.dir / "model" / "pipe").c_str(), 0600) == 0);
    alarm(20);  // a reader blocked opening the FIFO fails the test instead of hanging it
    const std::string value = c.value == "ABSOLUTE" ? (s.dir / "outside.data").string() : c.value;
    s.set_external("fc1.weight", c.key, value);
    auto model = import_onnx(s.model());
    INFO(c.key << " = " << value);
    REQUIRE_FALSE(model.ok());
    CHECK(model.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(model.status().message(),
               Catch::Contains("'fc1.weight'") && Catch::Contains(c.words));
    alarm(0);
  }
}

TEST_CASE("overlapping external ranges cannot read a data file more than once over") {
  Scratch s;
  onnx::ModelProto m;
  REQUIRE(m.ParseFromString(*read_file(s.model())));
  // Every copy of fc1.weight points at the same bytes.
  const onnx::TensorProto original = m.graph().initializer(0);
  REQUIRE(original.data_location() == onnx::TensorProto::EXTERNAL);
  for (int k = 0; k < 200; ++k) {
    auto* t = m.mutable_graph()->add_initializer();
    *t = original;
    t->set_name("copy" + std::to_string(k));
  }
  std::string bytes;
  REQUIRE(m.SerializeToString(&bytes));
  REQUIRE(write_file_atomic(s.model(), bytes).ok());
  onnx::ModelProto back;
  auto status = read_onnx_file(s.model(), &back, nullptr);
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.message(), Catch::Contains("overlapping ranges"));
}

TEST_CASE("written with external data, a model reads back with the same tensors") {
  Scratch s;
  onnx::ModelProto m;
  REQUIRE(read_onnx_file(s.model(), &m, nullptr).ok());
  const auto before = initializers(m);
  const std::string out = (s.dir / "model" / "out.onnx").string();
  REQUIRE(write_onnx_file(out, m, /*external_data=*/true).ok());
  CHECK(fs::exists(out + ".data"));
  CHECK(fs::file_size(out) < fs::file_size(out + ".data"));  // the weights are beside it
  onnx::ModelProto back;
  OnnxFileInfo info;
  REQUIRE(read_onnx_file(out, &back, &info).ok());
  CHECK(info.external_data);
  CHECK(initializers(back) == before);
}

}  // namespace
}  // namespace gp::model
