// A checkpoint directory as a resuming rank reads it: the input is a manifest (text format, as
// written) and, after a line "#TENSOR", the bytes of a tensor file. Both are written into a
// fresh directory of this process in /dev/shm, as iter-<k>/MANIFEST.pbtxt (k from the manifest
// when it parses, LATEST naming it) and under each plain tensor file name the manifest lists;
// then latest_checkpoint (manifest checks, every file's size, header and checksum) and
// clean_torn_checkpoints run on it.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_guard.h"
#include "gp/model/model_io.h"
#include "graphpipe/v1/checkpoint.pb.h"

namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Names the harness itself may create (latest_checkpoint judges the others).
bool safe_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || name == "." || name == "..") return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fs::path dir = "/dev/shm/gp-fuzz-checkpoint-" + std::to_string(::getpid());
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSeparator = "\n#TENSOR\n";
  const size_t cut = input.find(kSeparator);
  const std::string_view manifest_text = input.substr(0, cut);
  const std::string_view tensor =
      cut == std::string_view::npos ? std::string_view() : input.substr(cut + kSeparator.size());

  graphpipe::v1::CheckpointManifest m;
  int64_t k = 0;
  if (gp::model::parse_message(manifest_text, gp::model::FileFormat::kText, &m).ok() &&
      m.iteration() >= 0 && m.iteration() < (int64_t{1} << 40)) {
    k = m.iteration();
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  const fs::path iter = dir / ("iter-" + std::to_string(k));
  fs::create_directories(iter, ec);
  if (ec) return 0;
  write(iter / "MANIFEST.pbtxt", manifest_text);
  write(dir / "LATEST", "iter-" + std::to_string(k) + "\n");
  int files = 0;
  for (const auto& t : m.tensors()) {
    if (files++ == 8) break;
    if (safe_name(t.file()) && t.file() != "MANIFEST.pbtxt") write(iter / t.file(), tensor);
  }
  // A manifest's recorded stream, as a resume compares it (checkpoint_guard.h).
  graphpipe::v1::CheckpointDataStream now;
  now.set_mini_batch(static_cast<int64_t>(size));
  (void)gp::exec::check_resume_stream(m, now, (size & 1) != 0, nullptr);
  (void)gp::exec::latest_checkpoint(dir.string());
  (void)gp::exec::clean_torn_checkpoints(dir.string());
  fs::remove_all(dir, ec);
  return 0;
}
