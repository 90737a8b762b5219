// TensorBoard event files (job/tensorboard.h): CRC32C against the standard check value and
// TensorBoard's own masked CRCs, the TFRecord framing read back by a reader that checks both
// CRCs, the file-version and resume events, refusals, and ProgressLog's events matching its
// .jsonl lines.
#include "job/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "../support/scratch_dir.h"
#include "gp/model/model_io.h"
#include "job/job_outputs.h"

namespace gp::exec::daemon {
namespace {

namespace fs = std::filesystem;
namespace pb = graphpipe::v1;

fs::path fresh_dir(const std::string& name) {
  static const testing::ScratchDir scratch("gp-tensorboard");
  const fs::path dir = scratch.path() / name;
  fs::remove_all(dir);
  return dir;
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

uint64_t load_le(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[at + i]);
  return v;
}

// A TFRecord reader as TensorBoard's: every record's length and data CRCs must verify and its
// data parse as an event; the first problem is returned instead of the events.
struct ReadResult {
  std::vector<pb::TensorBoardEvent> events;
  std::string error;
};
ReadResult read_events(const fs::path& path) {
  const std::string bytes = *model::read_file(path.string());
  ReadResult r;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) return {{}, "truncated header at " + std::to_string(at)};
    const std::string header = bytes.substr(at, 8);
    const uint64_t length = load_le(bytes, at, 8);
    if (load_le(bytes, at + 8, 4) != masked_crc32c(header)) {
      return {{}, "length CRC mismatch at " + std::to_string(at)};
    }
    if (bytes.size() - at - 12 < length + 4) return {{}, "truncated data at " + std::to_string(at)};
    const std::string data = bytes.substr(at + 12, length);
    if (load_le(bytes, at + 12 + length, 4) != masked_crc32c(data)) {
      return {{}, "data CRC mismatch at " + std::to_string(at)};
    }
    pb::TensorBoardEvent event;
    if (!event.ParseFromString(data)) return {{}, "not an event at " + std::to_string(at)};
    r.events.push_back(event);
    at += 12 + length + 4;
  }
  return r;
}

std::map<std::string, float> scalars_of(const pb::TensorBoardEvent& e) {
  std::map<std::string, float> out;
  for (const auto& v : e.summary().value()) out[v.tag()] = v.simple_value();
  return out;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST_CASE("crc32c of 123456789 is the standard check value E3069283") {
  CHECK(crc32c("123456789") == 0xE3069283u);
  CHECK(crc32c("") == 0u);
  // Continuing from the CRC of a prefix gives the CRC of the whole.
  CHECK(crc32c("56789", crc32c("1234")) == 0xE3069283u);
  CHECK(crc32c("123456780") != 0xE3069283u);
}

TEST_CASE("masked crc32c equals TensorBoard's for the check string and a record length") {
  // Values from tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c (2.21.0).
  CHECK(masked_crc32c("123456789") == 0xC78AB0E5u);
  CHECK(masked_crc32c("") == 0xA282EAD8u);
  const std::string length_13("\x0d\0\0\0\0\0\0\0", 8);
  CHECK(masked_crc32c(length_13) == 0x34B8373Cu);
}

TEST_CASE("a tfrecord is the length, its masked CRC, the payload and the payload's masked CRC") {
  const std::string record = tfrecord("hello, board!");
  REQUIRE(record.size() == 13 + 16);
  CHECK(load_le(record, 0, 8) == 13);
  CHECK(load_le(record, 8, 4) == 0x34B8373Cu);
  CHECK(record.substr(12, 13) == "hello, board!");
  CHECK(load_le(record, 25, 4) == masked_crc32c("hello, board!"));
}

TEST_CASE("an event file starts with brain.Event:2 and a START, then each scalar event") {
  const fs::path dir = fresh_dir("plain") / "made" / "here";  // parents are created
  const double before = now_s();
  auto writer = TensorBoardWriter::open("--tensorboard", dir.string(), 0);
  REQUIRE(writer.ok());
  const std::vector<TensorBoardScalar> first = {{"train/loss", 1.25}, {"train/lr", 0.01}};
  REQUIRE((*writer)->write_scalars(7, first).ok());
  const std::vector<TensorBoardScalar> second = {{"train/loss", 0.5}};
  REQUIRE((*writer)->write_scalars(9, second).ok());

  // Flushed after each record: readable while the writer is still open.
  const auto files = event_files(dir);
  REQUIRE(files.size() == 1);
  CHECK(files[0].string() == (*writer)->path());
  CHECK(std::regex_match(files[0].filename().string(),
                         std::regex(R"(events\.out\.tfevents\.[0-9]+\.[^/]+\.[0-9]+\.graphpipe)")));
  const ReadResult r = read_events(files[0]);
  REQUIRE(r.error.empty());
  REQUIRE(r.events.size() == 4);
  CHECK(r.events[0].file_version() == "brain.Event:2");
  CHECK(r.events[0].wall_time() >= std::floor(before));
  CHECK(r.events[0].wall_time() <= now_s() + 1);
  REQUIRE(r.events[1].has_session_log());
  CHECK(r.events[1].session_log().status() == pb::TensorBoardSessionLog::START);
  CHECK(r.events[1].step() == 0);
  CHECK(r.events[2].step() == 7);
  CHECK(r.events[2].wall_time() >= r.events[0].wall_time());
  CHECK(scalars_of(r.events[2]) ==
        std::map<std::string, float>{{"train/loss", 1.25f}, {"train/lr", 0.01f}});
  CHECK(r.events[3].step() == 9);
  CHECK(scalars_of(r.events[3]) == std::map<std::string, float>{{"train/loss", 0.5f}});

  // The reader does check: one flipped byte in the last event's data is caught.
  std::string bytes = *model::read_file(files[0].string());
  bytes[bytes.size() - 6] ^= 0x01;
  const fs::path bad = dir.parent_path() / "flipped";
  std::ofstream(bad, std::ios::binary) << bytes;
  CHECK(read_events(bad).error.find("data CRC mismatch") == 0);
}

TEST_CASE("a resumed writer adds a new file whose SessionLog START is at its first step") {
  const fs::path dir = fresh_dir("resume");
  auto first = TensorBoardWriter::open("--tensorboard", dir.string(), 0);
  REQUIRE(first.ok());
  const std::vector<TensorBoardScalar> loss = {{"train/loss", 2.0}};
  REQUIRE((*first)->write_scalars(5, loss).ok());
  // The same process in the same second: a new name all the same, sorting after the first.
  auto second = TensorBoardWriter::open("--tensorboard", dir.string(), 4);
  REQUIRE(second.ok());
  REQUIRE((*second)->write_scalars(5, loss).ok());
  const auto files = event_files(dir);
  REQUIRE(files.size() == 2);
  CHECK(files[0].string() == (*first)->path());
  CHECK(files[1].string() == (*second)->path());

  const ReadResult old_run = read_events(files[0]);
  REQUIRE(old_run.error.empty());
  REQUIRE(old_run.events.size() == 3);
  CHECK(old_run.events[1].step() == 0);
  CHECK(old_run.events[2].step() == 5);
  const ReadResult r = read_events(files[1]);
  REQUIRE(r.error.empty());
  REQUIRE(r.events.size() == 3);
  CHECK(r.events[0].file_version() == "brain.Event:2");
  REQUIRE(r.events[1].has_session_log());
  CHECK(r.events[1].session_log().status() == pb::TensorBoardSessionLog::START);
  CHECK(r.events[1].step() == 4);
  CHECK(r.events[2].step() == 5);
}

TEST_CASE("a tensorboard directory that cannot be created is refused naming the flag and path") {
  const fs::path root = fresh_dir("refused");
  fs::create_directories(root);
  const fs::path file = root / "a-file";
  std::ofstream(file) << "not a directory\n";
  const std::string dir = (file / "board").string();
  auto writer = TensorBoardWriter::open("--tensorboard", dir, 0);
  REQUIRE(!writer.ok());
  CHECK(writer.status().code() == StatusCode::kInvalidArgument);
  CHECK(writer.status().message().find("--tensorboard " + dir + ": cannot create it") == 0);

  // Through ProgressLog::open, before any iteration.
  ProgressOptions o;
  o.mini_batch = 16;
  o.loss_ranks = 1;
  o.iterations = 4;
  o.tensorboard = dir;
  ProgressLog log(o);
  const Status st = log.open(0);
  REQUIRE(!st.ok());
  CHECK(st.message().find("--tensorboard " + dir) == 0);
}

TEST_CASE("ProgressLog writes one event per logged window with the numbers of its .jsonl line") {
  const fs::path dir = fresh_dir("progress");
  fs::create_directories(dir);
  const std::string jsonl = (dir / "m.jsonl").string();
  ProgressOptions o;
  o.mini_batch = 16;
  o.loss_ranks = 1;
  o.iterations = 6;
  o.log_every = 2;
  o.training.set_optimizer(pb::OPTIMIZER_KIND_SGD);
  o.training.set_learning_rate(0.05);
  o.metrics_out = jsonl;
  o.tensorboard = (dir / "tb").string();
  ProgressLog log(o);
  REQUIRE(log.open(0).ok());
  log.start();
  for (int k = 0; k < 6; ++k) {
    pb::ReportMetricsRequest r;
    r.set_rank(0);
    auto* m = r.add_iterations();
    m->set_iteration(k);
    m->set_loss(16.0 / (k + 1));  // a mean loss of 1 / (k + 1)
    m->set_time_s(0.001);
    if (k != 3) m->set_grad_norm(0.5 * k);  // iteration 3 logs none
    log.add(r);
  }
  log.finish();

  auto lines = read_metrics_file(jsonl);
  REQUIRE(lines.ok());
  REQUIRE(lines->size() == 3);
  const auto files = event_files(dir / "tb");
  REQUIRE(files.size() == 1);
  const ReadResult r = read_events(files[0]);
  REQUIRE(r.error.empty());
  REQUIRE(r.events.size() == 2 + lines->size());  // the file version, the START, the lines
  for (size_t i = 0; i < lines->size(); ++i) {
    const JobMetrics& m = (*lines)[i];
    const pb::TensorBoardEvent& e = r.events[i + 2];
    CHECK(e.step() == m.iteration);
    std::map<std::string, float> want = {
        {"train/loss", static_cast<float>(m.loss)},
        {"train/lr", static_cast<float>(*m.lr)},
        {"train/samples_per_s", static_cast<float>(m.samples_per_s)},
        {"train/ms_per_iteration", static_cast<float>(m.ms_per_iteration)}};
    if (m.grad_norm) want["train/grad_norm"] = static_cast<float>(*m.grad_norm);
    CHECK(scalars_of(e) == want);
  }
  CHECK((*lines)[0].iteration == 1);
  CHECK(scalars_of(r.events[2]).at("train/loss") == 0.5f);
  CHECK(scalars_of(r.events[3]).count("train/grad_norm") == 0);  // iteration 3 had none
}

}  // namespace
}  // namespace gp::exec::daemon
