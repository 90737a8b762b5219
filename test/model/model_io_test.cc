// Reading and writing models in text, JSON and binary; round trips and parse errors.
#include "gp/model/model_io.h"

#include <fcntl.h>
#include <google/protobuf/util/message_differencer.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "gp/model/graph.h"
#include "gp/model/zoo.h"

using namespace gp::model;
using google::protobuf::util::MessageDifferencer;

namespace {

std::filesystem::path temp_dir() {
  auto dir = std::filesystem::temp_directory_path() / "gp_model_io_test";
  std::filesystem::create_directories(dir);
  return dir;
}

ModelGraph tiny_model() {
  auto m = build_zoo_model("zoo:tiny-mmt");
  REQUIRE(m.ok());
  return *m;
}

}  // namespace

TEST_CASE("format follows the file extension, and unknown extensions are named") {
  CHECK(format_for_path("a.pbtxt").value() == FileFormat::kText);
  CHECK(format_for_path("a.textproto").value() == FileFormat::kText);
  CHECK(format_for_path("a.json").value() == FileFormat::kJson);
  CHECK(format_for_path("a.pb").value() == FileFormat::kBinary);
  auto bad = format_for_path("model.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("'model.yaml': unknown file extension"));
}

TEST_CASE("text -> JSON -> binary -> text round trips keep the model identical") {
  const ModelGraph original = tiny_model();
  ModelGraph current = original;
  for (FileFormat format : {FileFormat::kText, FileFormat::kJson, FileFormat::kBinary}) {
    auto bytes = serialize_message(current, format);
    REQUIRE(bytes.ok());
    ModelGraph parsed;
    REQUIRE(parse_message(*bytes, format, &parsed).ok());
    CHECK(MessageDifferencer::Equals(parsed, original));
    current = parsed;
  }
}

TEST_CASE("binary encode -> decode -> encode yields identical bytes") {
  const ModelGraph m = tiny_model();
  auto first = serialize_message(m, FileFormat::kBinary);
  REQUIRE(first.ok());
  ModelGraph decoded;
  REQUIRE(parse_message(*first, FileFormat::kBinary, &decoded).ok());
  auto second = serialize_message(decoded, FileFormat::kBinary);
  REQUIRE(second.ok());
  CHECK(*first == *second);
  CHECK(message_hash(m) == message_hash(decoded));
}

TEST_CASE("the hash changes when the model changes") {
  ModelGraph a = tiny_model();
  ModelGraph b = a;
  b.mutable_ops(1)->set_id("renamed");
  CHECK(message_hash(a) != message_hash(b));
  CHECK(message_hash(a).size() == 16);
}

TEST_CASE("files written in each format read back as the same model") {
  const ModelGraph m = tiny_model();
  for (const char* name : {"m.pbtxt", "m.json", "m.pb"}) {
    const std::string path = (temp_dir() / name).string();
    REQUIRE(write_message(path, m).ok());
    ModelGraph back;
    REQUIRE(read_message(path, &back).ok());
    CHECK(MessageDifferencer::Equals(back, m));
    auto loaded = load_model(path);
    REQUIRE(loaded.ok());
    CHECK(Graph::build(*loaded).ok());
  }
}

TEST_CASE("text format errors give the line and column") {
  ModelGraph m;
  auto st = parse_message("name: \"x\"\nops { id: \"a\" typo: 3 }\n", FileFormat::kText, &m);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("line 2"));
  CHECK_THAT(st.message(), Catch::Contains("typo"));
}

TEST_CASE("JSON errors are reported, unknown fields included") {
  ModelGraph m;
  auto st = parse_message(R"({"name": "x", "opz": []})", FileFormat::kJson, &m);
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("JSON"));
  CHECK_THAT(st.message(), Catch::Contains("opz"));
}

TEST_CASE("a hand-written JSON model loads and validates") {
  const char* json = R"({
    "name": "two-layer",
    "ops": [
      {"id": "x", "type": "input", "outputs": [{"shape": [8]}]},
      {"id": "fc", "type": "linear", "inputs": [{"op": "x"}],
       "attrs": {"out_features": {"i": 3}, "activation": {"s": "relu"}}},
      {"id": "t", "type": "input", "outputs": [{"shape": [3]}]},
      {"id": "loss", "type": "mse_loss", "inputs": [{"op": "fc"}, {"op": "t"}]}
    ],
    "losses": [{"op": "loss"}]
  })";
  ModelGraph m;
  REQUIRE(parse_message(json, FileFormat::kJson, &m).ok());
  auto g = Graph::build(m);
  REQUIRE(g.ok());
  CHECK(g->total_params() == 8 * 3 + 3);
}

TEST_CASE("garbage binary and missing files are clear errors") {
  ModelGraph m;
  CHECK_FALSE(parse_message(std::string("\xff\xff\xff\xff", 4), FileFormat::kBinary, &m).ok());
  auto st = read_message("/nonexistent/dir/model.pb", &m);
  REQUIRE_FALSE(st.ok());
  CHECK(st.code() == gp::StatusCode::kNotFound);
  CHECK_THAT(st.message(), Catch::Contains("/nonexistent/dir/model.pb"));
}

TEST_CASE("writes keep symbolic links, pass through FIFOs and refuse directories") {
  namespace fs = std::filesystem;
  const fs::path dir = temp_dir() / "targets";
  fs::remove_all(dir);
  fs::create_directories(dir);

  // A link (here a chain of two, the last one dangling) keeps being a link; its target gets the
  // contents, written whole.
  fs::create_symlink("real.json", dir / "middle");
  fs::create_symlink(dir / "middle", dir / "out.json");
  REQUIRE(write_file_atomic((dir / "out.json").string(), "first").ok());
  CHECK(fs::is_symlink(dir / "out.json"));
  CHECK(fs::is_symlink(dir / "middle"));
  CHECK(*read_file((dir / "real.json").string()) == "first");
  REQUIRE(write_file_atomic((dir / "out.json").string(), "second").ok());
  CHECK(*read_file((dir / "real.json").string()) == "second");
  CHECK_FALSE(fs::exists(dir / "real.json.tmp"));

  // A FIFO is written through, not replaced by a regular file (as /dev/stdout must be).
  const fs::path fifo = dir / "pipe";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  // The reading end opens first, without blocking, so a writer that replaced the FIFO instead
  // leaves it empty rather than hanging the test.
  const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(reader >= 0);
  CHECK(write_file_atomic(fifo.string(), "through the pipe").ok());
  char received[64] = {};
  const ssize_t n = read(reader, received, sizeof(received) - 1);
  close(reader);
  CHECK(std::string(received, n > 0 ? static_cast<size_t>(n) : 0) == "through the pipe");
  CHECK(fs::is_fifo(fifo));

  const gp::Status refused = write_file_atomic(dir.string(), "x");
  CHECK_FALSE(refused.ok());
  CHECK_THAT(refused.message(), Catch::Contains("is a directory"));
  fs::remove_all(dir);
}

TEST_CASE("a FIFO or a link left at a write's temporary name is replaced, never written into") {
  namespace fs = std::filesystem;
  const fs::path dir = temp_dir() / "leftovers";
  fs::remove_all(dir);
  fs::create_directories(dir);
  alarm(20);  // a write blocked on the FIFO fails the test instead of hanging it
  REQUIRE(mkfifo((dir / "plain.json.tmp").c_str(), 0600) == 0);
  fs::create_symlink(dir / "elsewhere", dir / "other.json.tmp");
  CHECK(write_file_atomic((dir / "plain.json").string(), "plain").ok());
  CHECK(write_file_atomic((dir / "other.json").string(), "other").ok());
  alarm(0);
  CHECK(*read_file((dir / "plain.json").string()) == "plain");
  CHECK(*read_file((dir / "other.json").string()) == "other");
  CHECK_FALSE(fs::exists(dir / "elsewhere"));
  CHECK_FALSE(fs::exists(dir / "plain.json.tmp"));
  fs::remove_all(dir);
}

TEST_CASE("reading refuses a directory, a device and a FIFO at once, naming each") {
  alarm(20);  // a reader blocked in open() of the FIFO fails the test instead of hanging it
  const auto dir = read_file(temp_dir().string());
  REQUIRE_FALSE(dir.ok());
  CHECK_THAT(dir.status().message(), Catch::Contains("is a directory"));
  const auto endless = read_file("/dev/zero");
  REQUIRE_FALSE(endless.ok());
  CHECK(endless.status().message() == "'/dev/zero' is a character device, not a regular file");
  const std::filesystem::path fifo = temp_dir() / "model-fifo.pbtxt";
  std::filesystem::remove(fifo);
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  ModelGraph m;
  const gp::Status st = read_message(fifo.string(), &m);
  CHECK(st.code() == gp::StatusCode::kInvalidArgument);
  CHECK_THAT(st.message(),
             Catch::Contains("'" + fifo.string() + "' is a FIFO, not a regular file"));
  std::filesystem::remove(fifo);
  alarm(0);
}

namespace {

// tiny-mmt with values for every parameter of its first linear, each of its size.
ModelGraph with_values() {
  ModelGraph m = tiny_model();
  auto built = Graph::build(m);  // shape inference fills in the params
  REQUIRE(built.ok());
  m = built->model();
  for (auto& op : *m.mutable_ops()) {
    if (op.type() != "linear") continue;
    char fill = 'a';
    for (const auto& p : op.params()) {
      int64_t n = 1;
      for (int64_t d : p.shape()) n *= d;
      (*op.mutable_param_values())[p.name()] = std::string(static_cast<size_t>(4 * n), fill++);
    }
    break;
  }
  return m;
}

}  // namespace

TEST_CASE("externalized weights leave the model and read back as they were") {
  ModelGraph m = with_values();
  const ModelGraph before = m;
  const auto path = (temp_dir() / "externalized.weights").string();
  REQUIRE(externalize_weights(m, path, path).ok());
  CHECK(m.weights_file() == path);
  for (const auto& op : m.ops()) CHECK(op.param_values().empty());
  REQUIRE(resolve_weights(m).ok());
  m.clear_weights_file();
  m.clear_weights_hash();
  CHECK(MessageDifferencer::Equals(m, before));
}

TEST_CASE("weights that cannot be written stay in the model, with the error") {
  ModelGraph m = with_values();
  const ModelGraph before = m;
  const auto path = (temp_dir() / "no-such-dir" / "w.weights").string();
  const gp::Status s = externalize_weights(m, path, path);
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.message(), Catch::Contains("no-such-dir"));
  CHECK(MessageDifferencer::Equals(m, before));
}
