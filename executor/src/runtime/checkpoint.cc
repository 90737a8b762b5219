#include "runtime/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include "checkpoint/checkpoint_format.h"
#include "gp/common/util.h"
#include "gp/exec/optimizer.h"
#include "gp/model/model_io.h"

namespace gp::exec {
namespace {

namespace fs = std::filesystem;
using graphpipe::v1::CheckpointManifest;
using namespace checkpoint_format;

Status ensure_dir(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec)
    return Status(StatusCode::kPermissionDenied, "cannot create '" + path + "': " + ec.message());
  return ok_status();
}

}  // namespace

Status write_stage_checkpoint(const std::string& dir, int64_t iteration, const model::Graph& graph,
                              StageRunner& runner, const std::string& run_id,
                              const std::vector<float>* state) {
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
    if (state != nullptr) {
      const size_t first = static_cast<size_t>(runner.op_param_offset(index)) *
                           (param_floats == 0 ? 0 : state_floats / param_floats);
      if (first + state_floats > state->size()) {
        return invalid_argument("checkpoint of op '" + graph.op(index).id() + "': a state of " +
                                std::to_string(state->size()) + " floats, it needs " +
                                std::to_string(first + state_floats));
      }
      std::memcpy(data + param_bytes, state->data() + first, state_bytes);
    } else {
      GP_RETURN_IF_ERROR(runner.download_op_state(
          index, {reinterpret_cast<float*>(data + param_bytes), state_floats}));
    }
    FileHeader h{};
    std::memcpy(h.magic, kMagicV2, sizeof(kMagicV2));
    h.op_index = index;
    h.param_floats = static_cast<int64_t>(param_floats);
    h.state_floats = static_cast<int64_t>(state_floats);
    h.iteration = iteration;
    h.run_tag = run_tag(run_id);
    h.checksum = fnv1a(data + param_bytes, state_bytes, fnv1a(data, param_bytes));
    std::memcpy(bytes.data(), &h, sizeof(h));
    GP_RETURN_IF_ERROR(model::write_file_atomic((fs::path(out) / op_file(index)).string(), bytes)
                           .with_context("checkpoint of op '" + graph.op(index).id() + "'"));
  }
  return ok_status();
}

Status commit_checkpoint(const std::string& dir, int64_t iteration, const model::Graph& graph,
                         const std::string& plan_hash,
                         const graphpipe::v1::TrainingConfig& training, const std::string& run_id,
                         const graphpipe::v1::CheckpointDataStream* stream) {
  GP_ASSIGN_OR_RETURN(Optimizer optimizer, Optimizer::create(training));
  const std::string out = iter_dir(dir, iteration);
  CheckpointManifest m;
  m.set_format_version(kFormatVersion);
  m.set_run_id(run_id);
  m.set_model_hash(model::model_hash(graph.model()));
  m.set_plan_hash(plan_hash);
  m.set_iteration(iteration);
  m.set_optimizer(training.optimizer());
  m.set_created(utc_now_iso8601());
  if (stream != nullptr) {
    *m.mutable_stream() = *stream;
    m.mutable_stream()->set_samples_consumed((iteration + 1) * stream->mini_batch());
  }
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
  GP_RETURN_IF_ERROR(model::write_message((fs::path(out) / "MANIFEST.pbtxt").string(), m));
  GP_RETURN_IF_ERROR(model::write_file_atomic((fs::path(dir) / "LATEST").string(),
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

Status load_stage_checkpoint(const std::string& dir, const CheckpointManifest& manifest,
                             const model::Graph& graph,
                             const graphpipe::v1::TrainingConfig& training, StageRunner& runner) {
  const std::string in = iter_dir(dir, manifest.iteration());
  const std::string model_hash = model::model_hash(graph.model());
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
    GP_ASSIGN_OR_RETURN(std::string bytes, read_checkpoint_file(path));
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
