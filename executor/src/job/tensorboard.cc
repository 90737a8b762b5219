#include "tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <utility>

namespace gp::exec::daemon {
namespace {

// Byte-at-a-time table of the reflected Castagnoli polynomial: a record is a few hundred bytes
// per logged iteration, so the simple form is fast enough and has nothing to get wrong.
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

double unix_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

uint32_t crc32c(std::string_view data, uint32_t crc) {
  crc = ~crc;
  for (const char ch : data) {
    crc = kCrc32cTable[(crc ^ static_cast<uint8_t>(ch)) & 0xff] ^ (crc >> 8);
  }
  return ~crc;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 16);
  put_le(out, payload.size(), 8);
  put_le(out, masked_crc32c(out), 4);
  out.append(payload);
  put_le(out, masked_crc32c(payload), 4);
  return out;
}

Result<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::open(const std::string& flag,
                                                                   const std::string& dir,
                                                                   int64_t first_step) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return invalid_argument(flag + " " + dir + ": cannot create it: " + ec.message());
  const std::string base = (std::filesystem::path(dir) / "events.out.tfevents.").string() +
                           std::to_string(std::time(nullptr)) + "." + host_name() + "." +
                           std::to_string(::getpid()) + ".graphpipe";
  // A run never appends to an earlier file: "x" fails on an existing name (a second run of this
  // process in the same second), which then gets a numbered name that sorts after it.
  std::string path = base;
  std::FILE* file = nullptr;
  for (int n = 2;; ++n) {
    file = std::fopen(path.c_str(), "wbx");
    if (file != nullptr || errno != EEXIST || n > 1000) break;
    path = base + "-" + std::to_string(n);
  }
  if (file == nullptr) {
    return invalid_argument(flag + " " + dir + ": cannot write " + path + ": " +
                            std::strerror(errno));
  }
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(flag, path, file));
  graphpipe::v1::TensorBoardEvent version;
  version.set_wall_time(unix_seconds_now());
  version.set_file_version(kTensorBoardFileVersion);
  GP_RETURN_IF_ERROR(writer->write_event(version));
  // Every run starts with one, as TensorFlow's writers do: TensorBoard's server takes the first
  // START of a directory as the start and each later one as a restart.
  graphpipe::v1::TensorBoardEvent start;
  start.set_wall_time(unix_seconds_now());
  start.set_step(first_step);
  start.mutable_session_log()->set_status(graphpipe::v1::TensorBoardSessionLog::START);
  GP_RETURN_IF_ERROR(writer->write_event(start));
  return writer;
}

TensorBoardWriter::~TensorBoardWriter() { std::fclose(file_); }

Status TensorBoardWriter::write_scalars(int64_t step, std::span<const TensorBoardScalar> scalars) {
  graphpipe::v1::TensorBoardEvent event;
  event.set_wall_time(unix_seconds_now());
  event.set_step(step);
  auto* summary = event.mutable_summary();
  for (const auto& s : scalars) {
    auto* v = summary->add_value();
    v->set_tag(s.tag);
    v->set_simple_value(static_cast<float>(s.value));
  }
  return write_event(event);
}

Status TensorBoardWriter::write_event(const graphpipe::v1::TensorBoardEvent& event) {
  const std::string record = tfrecord(event.SerializeAsString());
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return internal_error(flag_ + " " + path_ + ": cannot write: " + std::strerror(errno));
  }
  return ok_status();
}

}  // namespace gp::exec::daemon
