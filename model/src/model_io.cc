#include "gp/model/model_io.h"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <vector>

#include "gp/common/file_read.h"

namespace gp::model {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Collects the first text-format error with its position.
class TextErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) {
      first_ = "line " + std::to_string(line + 1) + ", column " + std::to_string(column + 1) +
               ": " + message;
    }
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

}  // namespace

Result<FileFormat> format_for_path(std::string_view path) {
  if (ends_with(path, ".pbtxt") || ends_with(path, ".textproto") || ends_with(path, ".txt")) {
    return FileFormat::kText;
  }
  if (ends_with(path, ".json")) return FileFormat::kJson;
  if (ends_with(path, ".pb") || ends_with(path, ".bin")) return FileFormat::kBinary;
  return invalid_argument("'" + std::string(path) +
                          "': unknown file extension (expected .pbtxt, .textproto, .json or .pb)");
}

Status parse_message(std::string_view data, FileFormat format, google::protobuf::Message* msg) {
  switch (format) {
    case FileFormat::kText: {
      google::protobuf::TextFormat::Parser parser;
      TextErrors errors;
      parser.RecordErrorsTo(&errors);
      google::protobuf::io::ArrayInputStream input(data.data(), static_cast<int>(data.size()));
      if (!parser.Parse(&input, msg)) {
        return invalid_argument("text format: " +
                                (errors.first().empty() ? "parse error" : errors.first()));
      }
      return ok_status();
    }
    case FileFormat::kJson: {
      google::protobuf::util::JsonParseOptions options;
      options.ignore_unknown_fields = false;
      auto st = google::protobuf::util::JsonStringToMessage(
          google::protobuf::StringPiece(data.data(), data.size()), msg, options);
      if (!st.ok()) return invalid_argument("JSON: " + std::string(st.message()));
      return ok_status();
    }
    case FileFormat::kBinary:
      if (!msg->ParseFromArray(data.data(), static_cast<int>(data.size()))) {
        return invalid_argument("binary protobuf: not a valid " + msg->GetTypeName() +
                                " (truncated or a different message type)");
      }
      return ok_status();
  }
  return internal_error("unknown file format");
}

Result<std::string> serialize_message(const google::protobuf::Message& msg, FileFormat format) {
  std::string out;
  switch (format) {
    case FileFormat::kText:
      if (!google::protobuf::TextFormat::PrintToString(msg, &out)) {
        return internal_error("text format serialisation failed");
      }
      return out;
    case FileFormat::kJson: {
      google::protobuf::util::JsonPrintOptions options;
      options.add_whitespace = true;
      options.preserve_proto_field_names = true;
      auto st = google::protobuf::util::MessageToJsonString(msg, &out, options);
      if (!st.ok()) return internal_error("JSON serialisation: " + std::string(st.message()));
      return out;
    }
    case FileFormat::kBinary: {
      google::protobuf::io::StringOutputStream stream(&out);
      google::protobuf::io::CodedOutputStream coded(&stream);
      coded.SetSerializationDeterministic(true);
      if (!msg.SerializeToCodedStream(&coded)) return internal_error("binary serialisation failed");
      coded.Trim();
      return out;
    }
  }
  return internal_error("unknown file format");
}

Result<std::string> read_file(const std::string& path) { return read_regular_file(path); }

namespace {

// Writes `contents` to `f` (opened on `path`), flushes and closes it; `sync` also fsyncs. The
// first error's errno says why (ENOSPC, EFBIG, EIO), before later calls overwrite it.
Status write_and_close(std::FILE* f, const std::string& path, std::string_view contents,
                       bool sync) {
  int error = 0;
  const size_t written = std::fwrite(contents.data(), 1, contents.size(), f);
  if (written != contents.size()) error = errno;
  bool flushed = std::fflush(f) == 0;
  if (flushed && sync) flushed = fsync(fileno(f)) == 0;
  if (!flushed && error == 0) error = errno;
  const bool closed = std::fclose(f) == 0;
  if (!closed && error == 0) error = errno;
  if (written != contents.size()) {
    return Status(StatusCode::kDataLoss,
                  "short write to '" + path + "' (" + std::to_string(written) + " of " +
                      std::to_string(contents.size()) + " bytes): " + std::strerror(error));
  }
  if (!flushed || !closed) {
    return Status(StatusCode::kDataLoss, "cannot write '" + path + "': " + std::strerror(error));
  }
  return ok_status();
}

// Where a write to `path` lands: `path` itself, or the file its symbolic links lead to (which
// need not exist yet), so that replacing the file keeps the links.
Result<std::string> resolve_links(const std::string& path) {
  std::string target = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st;
    if (lstat(target.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return target;
    std::string link(4096, '\0');
    const ssize_t n = readlink(target.c_str(), link.data(), link.size());
    if (n < 0 || static_cast<size_t>(n) >= link.size()) {
      return Status(StatusCode::kPermissionDenied,
                    "cannot read the symbolic link '" + target + "': " + std::strerror(errno));
    }
    link.resize(static_cast<size_t>(n));
    const size_t slash = target.rfind('/');
    target = link.front() == '/' || slash == std::string::npos ? link
                                                               : target.substr(0, slash + 1) + link;
  }
  return invalid_argument("'" + path + "': too many levels of symbolic links");
}

}  // namespace

Status write_file_atomic(const std::string& path, std::string_view contents) {
  GP_ASSIGN_OR_RETURN(const std::string target, resolve_links(path));
  struct stat st;
  if (stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) return invalid_argument("'" + path + "' is a directory");
    // A device, FIFO or socket (/dev/stdout, a pipe to another program) is written through:
    // renaming a file over it would replace the device node itself.
    std::FILE* f = std::fopen(target.c_str(), "wb");
    if (f == nullptr) {
      return Status(StatusCode::kPermissionDenied,
                    "cannot write '" + path + "': " + std::strerror(errno));
    }
    return write_and_close(f, path, contents, /*sync=*/false);
  }
  const std::string tmp = target + ".tmp";
  // A fresh file at the temporary name: whatever was left there (a FIFO that would block the
  // write, a link that would send it elsewhere) is removed, not written into.
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
  std::FILE* f = fd >= 0 ? ::fdopen(fd, "wb") : nullptr;
  if (f == nullptr) {
    if (fd >= 0) ::close(fd);
    return Status(StatusCode::kPermissionDenied,
                  "cannot write '" + tmp + "': " + std::strerror(errno));
  }
  // Flushed to the disk before the rename: a crash leaves the old file or the new one, whole.
  if (Status written = write_and_close(f, tmp, contents, /*sync=*/true); !written.ok()) {
    std::remove(tmp.c_str());
    return written;
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status(StatusCode::kPermissionDenied,
                  "cannot rename '" + tmp + "' to '" + target + "': " + std::strerror(errno));
  }
  return ok_status();
}

Status check_output_path(std::string_view flag, const std::string& path) {
  if (path.empty()) return ok_status();
  const std::string where = std::string(flag) + " " + path;
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return invalid_argument(where + ": is a directory, not a file");
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return invalid_argument(where + ": the directory " + dir + " does not exist");
  }
  return ok_status();
}

Status read_message(const std::string& path, google::protobuf::Message* msg) {
  GP_ASSIGN_OR_RETURN(FileFormat format, format_for_path(path));
  GP_ASSIGN_OR_RETURN(std::string data, read_file(path));
  return parse_message(data, format, msg).with_context(path);
}

Status write_message(const std::string& path, const google::protobuf::Message& msg) {
  GP_ASSIGN_OR_RETURN(FileFormat format, format_for_path(path));
  GP_ASSIGN_OR_RETURN(std::string data, serialize_message(msg, format));
  return write_file_atomic(path, data);
}

std::string bytes_hash(std::string_view bytes) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string message_hash(const google::protobuf::Message& msg) {
  return bytes_hash(serialize_message(msg, FileFormat::kBinary).value());
}

namespace {

// An op's parameter-value names in the order the weights file holds them.
std::vector<std::string> sorted_value_names(const graphpipe::v1::Operator& op) {
  std::vector<std::string> names;
  for (const auto& [name, v] : op.param_values()) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

// Puts `file`'s values back into the ops they came from (externalize_weights failed), walking
// the ops and their sorted names as externalize_weights took them: ops of one id (the model is
// not validated yet) each get their own.
void restore_param_values(graphpipe::v1::ModelGraph& model, graphpipe::v1::WeightsFile& file) {
  int next = 0;
  for (auto& op : *model.mutable_ops()) {
    for (const auto& name : sorted_value_names(op)) {
      if (next >= file.values_size()) return;
      (*op.mutable_param_values())[name] =
          std::move(*file.mutable_values(next++)->mutable_values());
    }
  }
}

}  // namespace

Status externalize_weights(graphpipe::v1::ModelGraph& model, const std::string& path,
                           const std::string& recorded) {
  graphpipe::v1::WeightsFile file;
  for (auto& op : *model.mutable_ops()) {
    // Sorted by name, not in the map's order: the file (and its hash) is deterministic.
    for (const auto& name : sorted_value_names(op)) {
      auto* v = file.add_values();
      v->set_op(op.id());
      v->set_param(name);
      // Moved, not copied: a model's weights can be most of the memory there is.
      *v->mutable_values() = std::move((*op.mutable_param_values())[name]);
    }
  }
  if (file.values_size() == 0) return ok_status();
  std::string bytes;
  if (!file.SerializeToString(&bytes)) {
    restore_param_values(model, file);
    return internal_error("serialising the weights failed");
  }
  if (Status written = write_file_atomic(path, bytes); !written.ok()) {
    restore_param_values(model, file);  // the caller keeps a whole model
    return written;
  }
  for (auto& op : *model.mutable_ops()) op.clear_param_values();
  model.set_weights_file(recorded);
  model.set_weights_hash(bytes_hash(bytes));
  return ok_status();
}

Status resolve_weights(graphpipe::v1::ModelGraph& model) {
  if (model.weights_file().empty()) return ok_status();
  const std::string& path = model.weights_file();
  auto bytes = read_file(path);
  if (!bytes.ok()) {
    return invalid_argument("model.weights_file '" + path + "': " + bytes.status().message() +
                            " (the weights written next to the model by graphpipe-plan import)");
  }
  const std::string hash = bytes_hash(*bytes);
  if (hash != model.weights_hash()) {
    return invalid_argument("model.weights_file '" + path + "' has hash " + hash +
                            ", the model was written with " + model.weights_hash() +
                            " (another or a changed file)");
  }
  graphpipe::v1::WeightsFile file;
  if (!file.ParseFromString(*bytes)) {
    return invalid_argument("model.weights_file '" + path + "': not a weights file");
  }
  std::map<std::string, graphpipe::v1::Operator*> ops;
  for (auto& op : *model.mutable_ops()) ops[op.id()] = &op;
  for (const auto& v : file.values()) {
    auto it = ops.find(v.op());
    if (it == ops.end()) {
      return invalid_argument("model.weights_file '" + path + "': op '" + v.op() +
                              "' is not in the model");
    }
    (*it->second->mutable_param_values())[v.param()] = v.values();
  }
  return ok_status();  // Graph::build checks each value fits its parameter
}

std::string model_hash(const graphpipe::v1::ModelGraph& model) {
  if (model.weights_file().empty()) return message_hash(model);
  graphpipe::v1::ModelGraph m = model;
  for (auto& op : *m.mutable_ops()) op.clear_param_values();
  m.clear_weights_file();  // where the file lies does not change the model; its hash does
  return message_hash(m);
}

}  // namespace gp::model
