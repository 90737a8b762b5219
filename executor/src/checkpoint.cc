#include "gp/exec/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "gp/common/util.h"
#include "gp/exec/optimizer.h"
#include "gp/graph/model_io.h"

namespace gp::exec {
namespace {

// "iter-" followed by decimal digits: the only names LATEST may hold.
bool is_iteration_dir_name(const std::string& name) {
  constexpr std::string_view kPrefix = "iter-";
  if (name.size() <= kPrefix.size() || name.size() > 32 || name.rfind(kPrefix, 0) != 0) {
    return false;
  }
  return std::all_of(name.begin() + kPrefix.size(), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// A manifest's tensor file: one path component, no "." or "..", so it stays in its directory.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name.size() < 256 && name != "." && name != ".." &&
         name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
}

namespace fs = std::filesystem;
using graphpipe::v1::CheckpointManifest;

// Format 1 files have no iteration or run; format 2 files name both, so that a file left over
// from another iteration or another run under the same manifest name is refused.
constexpr char kMagicV1[8] = {'G', 'P', 'C', 'K', 'P', 'T', '1', '\0'};
constexpr char kMagicV2[8] = {'G', 'P', 'C', 'K', 'P', 'T', '2', '\0'};
constexpr int kFormatVersion = 2;

struct FileHeaderV1 {
  char magic[8];
  int64_t op_index;
  int64_t param_floats;
  int64_t state_floats;
  uint64_t checksum;  // FNV-1a 64 of the float bytes that follow
};

struct FileHeader {
  char magic[8];
  int64_t op_index;
  int64_t param_floats;
  int64_t state_floats;
  int64_t iteration;  // the manifest's
  uint64_t run_tag;   // FNV-1a 64 of the manifest's run_id
  uint64_t checksum;  // FNV-1a 64 of the float bytes that follow
};

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string iter_dir(const std::string& dir, int64_t iteration) {
  return (fs::path(dir) / ("iter-" + std::to_string(iteration))).string();
}

std::string op_file(int op_index) { return "op-" + std::to_string(op_index) + ".bin"; }

uint64_t run_tag(const std::string& run_id) { return fnv1a(run_id.data(), run_id.size()); }

Status ensure_dir(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec)
    return Status(StatusCode::kPermissionDenied, "cannot create '" + path + "': " + ec.message());
  return ok_status();
}

}  // namespace

Status write_stage_checkpoint(const std::string& dir, int64_t iteration, const graph::Graph& graph,
                              StageRunner& runner, const std::string& run_id) {
  const std::string out = iter_dir(dir, iteration);
  GP_RETURN_IF_ERROR(ensure_dir(out));
  for (int index : runner.op_indices()) {
    const size_t param_floats = static_cast<size_t>(runner.op_param_count(index));
    if (param_floats == 0) continue;
    const size_t state_floats = static_cast<size_t>(runner.op_state_count(index));
    const size_t param_bytes = param_floats * sizeof(float);
    const size_t state_bytes = state_floats * sizeof(float);
    // The tensors are downloaded straight into the file's bytes (on the CPU: one memcpy each).
    std::string bytes(sizeof(FileHeader) + param_bytes + state_bytes, '\0');
    char* data = bytes.data() + sizeof(FileHeader);
    GP_RETURN_IF_ERROR(
        runner.download_op_params(index, {reinterpret_cast<float*>(data), param_floats}));
    GP_RETURN_IF_ERROR(runner.download_op_state(
        index, {reinterpret_cast<float*>(data + param_bytes), state_floats}));
    FileHeader h{};
    std::memcpy(h.magic, kMagicV2, sizeof(kMagicV2));
    h.op_index = index;
    h.param_floats = static_cast<int64_t>(param_floats);
    h.state_floats = static_cast<int64_t>(state_floats);
    h.iteration = iteration;
    h.run_tag = run_tag(run_id);
    h.checksum = fnv1a(data + param_bytes, state_bytes, fnv1a(data, param_bytes));
    std::memcpy(bytes.data(), &h, sizeof(h));
    GP_RETURN_IF_ERROR(graph::write_file_atomic((fs::path(out) / op_file(index)).string(), bytes)
                           .with_context("checkpoint of op '" + graph.op(index).id() + "'"));
  }
  return ok_status();
}

Status commit_checkpoint(const std::string& dir, int64_t iteration, const graph::Graph& graph,
                         const std::string& plan_hash,
                         const graphpipe::v1::TrainingConfig& training, const std::string& run_id) {
  GP_ASSIGN_OR_RETURN(Optimizer optimizer, Optimizer::create(training));
  const std::string out = iter_dir(dir, iteration);
  CheckpointManifest m;
  m.set_format_version(kFormatVersion);
  m.set_run_id(run_id);
  m.set_model_hash(graph::model_hash(graph.model()));
  m.set_plan_hash(plan_hash);
  m.set_iteration(iteration);
  m.set_optimizer(training.optimizer());
  m.set_created(utc_now_iso8601());
  for (const auto& op : graph.ops()) {
    const int64_t n = op.cost.param_count;  // elements of all its parameters
    if (n == 0) continue;
    const std::string file = op_file(op.index);
    std::error_code ec;
    if (!fs::is_regular_file(fs::path(out) / file, ec)) {
      return Status(StatusCode::kDataLoss, "checkpoint " + out + ": op '" + op.id() + "' has no " +
                                               file + " (a rank did not write it)");
    }
    auto* t = m.add_tensors();
    t->set_op_id(op.id());
    t->set_op_index(op.index);
    t->set_param_floats(n);
    t->set_state_floats(n * optimizer.state_floats());
    t->set_file(file);
  }
  GP_RETURN_IF_ERROR(graph::write_message((fs::path(out) / "MANIFEST.pbtxt").string(), m));
  GP_RETURN_IF_ERROR(graph::write_file_atomic((fs::path(dir) / "LATEST").string(),
                                              "iter-" + std::to_string(iteration) + "\n"));
  // Keep this checkpoint and the newest one before it; remove older ones.
  std::error_code ec;
  std::map<long long, fs::path> older;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("iter-")) continue;
    char* end = nullptr;
    const long long k = std::strtoll(name.c_str() + 5, &end, 10);
    if (end != nullptr && *end == '\0' && k < iteration) older.emplace(k, entry.path());
  }
  if (!older.empty()) older.erase(std::prev(older.end()));
  for (const auto& [k, path] : older) fs::remove_all(path, ec);
  return ok_status();
}

namespace {

// A checkpoint directory's manifest, checked against its directory name and for file names that
// stay inside it.
Result<CheckpointManifest> read_manifest(const std::string& dir, const std::string& name) {
  const std::string manifest_path = (fs::path(dir) / name / "MANIFEST.pbtxt").string();
  CheckpointManifest m;
  GP_RETURN_IF_ERROR(graph::read_message(manifest_path, &m).with_context("checkpoint"));
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

// Checks one tensor file's bytes against its manifest entry: size, header (operator, counts,
// and in format 2 the iteration and run), checksum. Returns where its floats start.
Result<size_t> check_tensor_file(const std::string& path, const std::string& bytes,
                                 const CheckpointManifest& m,
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

// Every tensor file of the checkpoint, read and checked in full.
Status verify_checkpoint(const std::string& dir, const CheckpointManifest& m) {
  const std::string in = iter_dir(dir, m.iteration());
  for (const auto& t : m.tensors()) {
    const std::string path = (fs::path(in) / t.file()).string();
    GP_ASSIGN_OR_RETURN(std::string bytes, graph::read_file(path));
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
    auto text = graph::read_file(latest);
    std::string name = text.ok() ? *text : std::string();
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    // LATEST names a directory of this checkpoint directory, never a path out of it.
    if (is_iteration_dir_name(name)) {
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

Status load_stage_checkpoint(const std::string& dir, const CheckpointManifest& manifest,
                             const graph::Graph& graph,
                             const graphpipe::v1::TrainingConfig& training, StageRunner& runner) {
  const std::string in = iter_dir(dir, manifest.iteration());
  const std::string model_hash = graph::model_hash(graph.model());
  if (manifest.model_hash() != model_hash) {
    return failed_precondition("checkpoint " + in + " is of model " + manifest.model_hash() +
                               ", this plan trains model " + model_hash);
  }
  if (manifest.optimizer() != training.optimizer()) {
    return failed_precondition("checkpoint " + in + " holds the state of optimizer " +
                               graphpipe::v1::OptimizerKind_Name(manifest.optimizer()) +
                               ", this plan uses " +
                               graphpipe::v1::OptimizerKind_Name(training.optimizer()));
  }
  std::map<int, const graphpipe::v1::CheckpointTensor*> by_index;
  for (const auto& t : manifest.tensors()) by_index[t.op_index()] = &t;
  for (int index : runner.op_indices()) {
    const size_t param_floats = static_cast<size_t>(runner.op_param_count(index));
    if (param_floats == 0) continue;
    const size_t state_floats = static_cast<size_t>(runner.op_state_count(index));
    const size_t param_bytes = param_floats * sizeof(float);
    const auto& op = graph.op(index);
    auto it = by_index.find(index);
    if (it == by_index.end() || it->second->op_id() != op.id()) {
      return Status(StatusCode::kDataLoss,
                    "checkpoint " + in + ": no tensors for op '" + op.id() + "'");
    }
    const auto& t = *it->second;
    if (t.param_floats() != static_cast<int64_t>(param_floats) ||
        t.state_floats() != static_cast<int64_t>(state_floats)) {
      return Status(StatusCode::kDataLoss,
                    "checkpoint " + in + ": op '" + op.id() + "' has " +
                        std::to_string(t.param_floats()) + " + " +
                        std::to_string(t.state_floats()) + " floats, this plan needs " +
                        std::to_string(param_floats) + " + " + std::to_string(state_floats));
    }
    if (!is_plain_file_name(t.file())) {
      return Status(StatusCode::kDataLoss, "checkpoint " + in + ": tensor file '" +
                                               t.file().substr(0, 80) + "' of op '" + op.id() +
                                               "' is not a file name inside the checkpoint");
    }
    const std::string path = (fs::path(in) / t.file()).string();
    GP_ASSIGN_OR_RETURN(std::string bytes, graph::read_file(path));
    GP_ASSIGN_OR_RETURN(const size_t header, check_tensor_file(path, bytes, manifest, t));
    const char* data = bytes.data() + header;
    // Straight from the file's bytes (the header keeps them 8-byte aligned).
    GP_RETURN_IF_ERROR(
        runner.upload_op_params(index, {reinterpret_cast<const float*>(data), param_floats}));
    GP_RETURN_IF_ERROR(runner.upload_op_state(
        index, {reinterpret_cast<const float*>(data + param_bytes), state_floats}));
  }
  // Uploads may still be in flight on the device: the loaded tensors are complete only after it.
  GP_RETURN_IF_ERROR(runner.synchronize());
  return ok_status();
}

}  // namespace gp::exec
