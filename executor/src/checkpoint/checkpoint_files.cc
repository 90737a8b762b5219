// Reading checkpoint directories: LATEST, manifests and tensor files, each checked before a
// resuming rank trusts it (see gp/exec/checkpoint.h).
#include "checkpoint/checkpoint_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "checkpoint_format.h"
#include "gp/common/file_read.h"
#include "gp/model/model_io.h"

namespace gp::exec {
namespace checkpoint_format {

Result<size_t> check_tensor_file(const std::string& path, const std::string& bytes,
                                 const graphpipe::v1::CheckpointManifest& m,
                                 const graphpipe::v1::CheckpointTensor& t) {
  const bool v1 = m.format_version() == 1;
  const size_t header = v1 ? sizeof(FileHeaderV1) : sizeof(FileHeader);
  const size_t param_bytes = static_cast<size_t>(t.param_floats()) * sizeof(float);
  const size_t state_bytes = static_cast<size_t>(t.state_floats()) * sizeof(float);
  const size_t want = header + param_bytes + state_bytes;
  FileHeader h{};
  bool header_ok = bytes.size() == want;
  if (header_ok && v1) {
    FileHeaderV1 h1{};
    std::memcpy(&h1, bytes.data(), sizeof(h1));
    header_ok = std::memcmp(h1.magic, kMagicV1, sizeof(kMagicV1)) == 0;
    h.op_index = h1.op_index;
    h.param_floats = h1.param_floats;
    h.state_floats = h1.state_floats;
    h.iteration = m.iteration();
    h.run_tag = run_tag(m.run_id());
    h.checksum = h1.checksum;
  } else if (header_ok) {
    std::memcpy(&h, bytes.data(), sizeof(h));
    header_ok = std::memcmp(h.magic, kMagicV2, sizeof(kMagicV2)) == 0;
  }
  if (!header_ok || h.op_index != t.op_index() || h.param_floats != t.param_floats() ||
      h.state_floats != t.state_floats()) {
    return Status(StatusCode::kDataLoss, path + ": torn or foreign checkpoint file for op '" +
                                             t.op_id() + "' (" + std::to_string(bytes.size()) +
                                             " bytes, expected " + std::to_string(want) + ")");
  }
  if (h.iteration != m.iteration() || h.run_tag != run_tag(m.run_id())) {
    return Status(StatusCode::kDataLoss,
                  path + ": file of op '" + t.op_id() + "' was written for iteration " +
                      std::to_string(h.iteration) +
                      (h.run_tag != run_tag(m.run_id()) ? " of another run" : "") +
                      ", the manifest is of iteration " + std::to_string(m.iteration()) +
                      " of run " + m.run_id());
  }
  const char* data = bytes.data() + header;
  if (fnv1a(data + param_bytes, state_bytes, fnv1a(data, param_bytes)) != h.checksum) {
    return Status(StatusCode::kDataLoss,
                  path + ": checksum mismatch for op '" + t.op_id() + "' (corrupted file)");
  }
  return header;
}

}  // namespace checkpoint_format

namespace {

namespace fs = std::filesystem;
using graphpipe::v1::CheckpointManifest;
using namespace checkpoint_format;

// "iter-" followed by decimal digits: the only names LATEST may hold.
bool is_iteration_dir_name(const std::string& name) {
  constexpr std::string_view kPrefix = "iter-";
  if (name.size() <= kPrefix.size() || name.size() > 32 || name.rfind(kPrefix, 0) != 0) {
    return false;
  }
  return std::all_of(name.begin() + kPrefix.size(), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// A checkpoint directory's manifest, checked against its directory name and for file names that
// stay inside it. The directory itself must be one, not a link that could lead anywhere.
Result<CheckpointManifest> read_manifest(const std::string& dir, const std::string& name) {
  const std::string in = (fs::path(dir) / name).string();
  struct stat st {};
  if (::lstat(in.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    return Status(StatusCode::kDataLoss, "checkpoint " + in + " is " +
                                             std::string(file_kind(st.st_mode)) +
                                             ", not a directory of the checkpoint");
  }
  const std::string manifest_path = (fs::path(in) / "MANIFEST.pbtxt").string();
  CheckpointManifest m;
  auto text = read_checkpoint_file(manifest_path);
  if (!text.ok()) return text.status().with_context("checkpoint");
  GP_RETURN_IF_ERROR(model::parse_message(*text, model::FileFormat::kText, &m)
                         .with_context(manifest_path)
                         .with_context("checkpoint"));
  if (m.format_version() != 1 && m.format_version() != kFormatVersion) {
    return invalid_argument(manifest_path + ": format_version = " +
                            std::to_string(m.format_version()) + ", expected 1 or 2");
  }
  if (name != "iter-" + std::to_string(m.iteration())) {
    return Status(StatusCode::kDataLoss, manifest_path +
                                             ": iteration = " + std::to_string(m.iteration()) +
                                             " does not match its directory '" + name + "'");
  }
  for (const auto& t : m.tensors()) {
    if (!is_plain_file_name(t.file())) {
      return Status(StatusCode::kDataLoss, "checkpoint " + iter_dir(dir, m.iteration()) +
                                               ": tensor file '" + t.file().substr(0, 80) +
                                               "' of op '" + t.op_id() +
                                               "' is not a file name inside the checkpoint");
    }
    if (t.param_floats() < 0 || t.state_floats() < 0 || t.param_floats() > (int64_t{1} << 40) ||
        t.state_floats() > (int64_t{1} << 42)) {
      return Status(StatusCode::kDataLoss,
                    manifest_path + ": op '" + t.op_id() +
                        "': param_floats = " + std::to_string(t.param_floats()) +
                        ", state_floats = " + std::to_string(t.state_floats()) + " out of range");
    }
  }
  return m;
}

// Every tensor file of the checkpoint, read and checked in full.
Status verify_checkpoint(const std::string& dir, const CheckpointManifest& m) {
  const std::string in = iter_dir(dir, m.iteration());
  for (const auto& t : m.tensors()) {
    const std::string path = (fs::path(in) / t.file()).string();
    GP_ASSIGN_OR_RETURN(std::string bytes, read_checkpoint_file(path));
    GP_RETURN_IF_ERROR(check_tensor_file(path, bytes, m, t).status());
  }
  return ok_status();
}

// The iterations of D's iter-<k> directories, newest first.
std::vector<int64_t> iteration_dirs(const std::string& dir) {
  std::vector<int64_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!is_iteration_dir_name(name) || !entry.is_directory(ec)) continue;
    char* end = nullptr;
    const long long k = std::strtoll(name.c_str() + 5, &end, 10);
    if (end != nullptr && *end == '\0' && k >= 0) out.push_back(k);
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

}  // namespace

Result<std::string> read_checkpoint_file(const std::string& path) {
  FileReadOptions options;
  options.no_follow = true;
  return read_regular_file(path, options);
}

Result<CheckpointManifest> latest_checkpoint(const std::string& dir,
                                             std::vector<std::string>* warnings) {
  const std::string latest = (fs::path(dir) / "LATEST").string();
  std::error_code ec;
  std::vector<std::string> skipped;
  // LATEST names the newest checkpoint; when it is unusable, the newest valid one before it
  // (commit keeps one), or when LATEST itself is unreadable, the newest valid one at all.
  int64_t below = std::numeric_limits<int64_t>::max();
  std::vector<std::string> candidates;
  if (fs::exists(latest, ec)) {
    // A name, so a few KiB at most; a FIFO or a device is refused, not waited on.
    FileReadOptions small;
    small.max_bytes = 4096;
    auto text = read_regular_file(latest, small);
    std::string name = text.ok() ? *text : std::string();
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (!text.ok()) {
      skipped.push_back(text.status().message());
    } else if (is_iteration_dir_name(name)) {  // a directory of this one, never a path out of it
      candidates.push_back(name);
      below = std::strtoll(name.c_str() + 5, nullptr, 10);
    } else {
      skipped.push_back(latest + ": '" + name.substr(0, 80) +
                        "' is not a checkpoint of this directory (expected iter-N)");
    }
  }
  // Directories without a manifest are torn writes, never checkpoints.
  for (int64_t k : iteration_dirs(dir)) {
    if (k < below && fs::exists(fs::path(iter_dir(dir, k)) / "MANIFEST.pbtxt", ec)) {
      candidates.push_back("iter-" + std::to_string(k));
    }
  }
  if (candidates.empty() && skipped.empty()) {
    return not_found("no checkpoint in '" + dir + "' (no LATEST file and no complete iter-N)");
  }
  for (const std::string& name : candidates) {
    auto m = read_manifest(dir, name);
    Status st = m.ok() ? verify_checkpoint(dir, *m) : m.status();
    if (st.ok()) {
      if (warnings != nullptr) {
        for (const auto& s : skipped) {
          warnings->push_back("skipped a checkpoint: " + s + "; using " + name + " instead");
        }
      }
      return m;
    }
    skipped.push_back(st.message());
  }
  std::string all;
  for (const auto& s : skipped) all += (all.empty() ? "" : "; ") + s;
  return Status(StatusCode::kDataLoss, "no valid checkpoint in '" + dir + "': " + all);
}

Result<std::vector<std::string>> clean_torn_checkpoints(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return removed;
  auto remove_tmp_files = [&](const fs::path& d) {
    std::error_code e;
    for (const auto& entry : fs::directory_iterator(d, e)) {
      if (entry.path().extension() == ".tmp" && entry.is_regular_file(e)) {
        if (fs::remove(entry.path(), e)) removed.push_back(entry.path().string());
      }
    }
  };
  remove_tmp_files(dir);
  for (int64_t k : iteration_dirs(dir)) {
    const fs::path d = iter_dir(dir, k);
    if (!fs::exists(d / "MANIFEST.pbtxt", ec)) {
      fs::remove_all(d, ec);
      if (ec) {
        return Status(StatusCode::kPermissionDenied,
                      "cannot remove the torn checkpoint '" + d.string() + "': " + ec.message());
      }
      removed.push_back(d.string());
    } else {
      remove_tmp_files(d);
    }
  }
  return removed;
}

}  // namespace gp::exec
