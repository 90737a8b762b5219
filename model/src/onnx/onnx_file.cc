// ONNX files with external data, and torch 2.x's merged parameters (gp/model/onnx_file.h).
#include "gp/model/onnx_file.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <vector>

#include "gp/common/file_read.h"
#include "gp/model/model_io.h"
#include "onnx/onnx_pb.h"
#include "onnx/torch_metadata.h"

namespace gp::model {
namespace {

namespace fs = std::filesystem;

// Bytes per element of the ONNX data types a numeric initializer may have; 0 for the others
// (strings, and types without a fixed element size here).
int64_t element_bytes(int32_t data_type) {
  switch (data_type) {
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::BOOL:
      return 1;
    case onnx::TensorProto::UINT16:
    case onnx::TensorProto::INT16:
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16:
      return 2;
    case onnx::TensorProto::FLOAT:
    case onnx::TensorProto::INT32:
    case onnx::TensorProto::UINT32:
      return 4;
    case onnx::TensorProto::INT64:
    case onnx::TensorProto::UINT64:
    case onnx::TensorProto::DOUBLE:
    case onnx::TensorProto::COMPLEX64:
      return 8;
    case onnx::TensorProto::COMPLEX128:
      return 16;
    default:
      return 0;
  }
}

// The product of a tensor's dims; nullopt when one is negative or the product overflows.
std::optional<int64_t> element_count(const onnx::TensorProto& t) {
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

std::optional<uint64_t> parse_count(const std::string& s) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// Whether `inner` is `dir` or lies below it (both canonical).
bool inside(const fs::path& dir, const fs::path& inner) {
  auto d = dir.begin();
  auto i = inner.begin();
  for (; d != dir.end(); ++d, ++i) {
    if (i == inner.end() || *d != *i) return false;
  }
  return true;
}

class ExternalReader {
 public:
  ExternalReader(std::string model_path) : model_path_(std::move(model_path)) {
    std::error_code ec;
    const fs::path parent = fs::path(model_path_).parent_path();
    dir_ = fs::canonical(parent.empty() ? fs::path(".") : parent, ec);
  }

  Status load(onnx::TensorProto& t) {
    const std::string what = model_path_ + ": initializer '" + t.name() + "'";
    std::string location;
    std::optional<uint64_t> offset = 0, length;
    bool has_length = false;
    for (const auto& e : t.external_data()) {
      if (e.key() == "location") {
        location = e.value();
      } else if (e.key() == "offset") {
        offset = parse_count(e.value());
        if (!offset) return bad(what, "external_data offset '" + e.value() + "' is not a count");
      } else if (e.key() == "length") {
        has_length = true;
        length = parse_count(e.value());
        if (!length) return bad(what, "external_data length '" + e.value() + "' is not a count");
      }
    }
    if (location.empty()) return bad(what, "is stored externally but names no location");
    const fs::path rel(location);
    bool climbs = false;
    for (const auto& part : rel) climbs = climbs || part == "..";
    if (rel.is_absolute() || climbs || location.find('\0') != std::string::npos) {
      return bad(what, "external data location '" + location +
                           "' must be a path inside the model's directory (no absolute path, "
                           "no '..')");
    }
    if (dir_.empty()) return bad(what, "the model's directory cannot be resolved");
    std::error_code ec;
    const fs::path file = fs::canonical(dir_ / rel, ec);
    if (ec) {
      return bad(what, "external data file '" + (dir_ / rel).string() + "' cannot be opened (" +
                           ec.message() + ")");
    }
    if (!inside(dir_, file)) {
      return bad(what, "external data file '" + location + "' leads outside the model's directory");
    }
    // Opened without blocking (a FIFO waits for a writer) and only when it is a regular file.
    auto opened = RegularFile::open(file.string());
    if (!opened.ok()) return bad(what, "external data " + opened.status().message());
    const uint64_t size = opened->size();
    if (budget_files_.insert(file.string()).second) budget_bytes_ += size;

    const int64_t per = element_bytes(t.data_type());
    if (per == 0) {
      return bad(what, "has data type " + std::to_string(t.data_type()) +
                           ", which cannot be read from external data");
    }
    const auto elements = element_count(t);
    uint64_t want = 0;
    if (!elements || __builtin_mul_overflow(static_cast<uint64_t>(*elements),
                                            static_cast<uint64_t>(per), &want)) {
      return bad(what, "has dims that are negative or too large");
    }
    if (!has_length) length = *offset <= size ? size - *offset : 0;
    if (*offset > size || *length > size - *offset) {
      return bad(what, "reads " + std::to_string(*length) + " bytes at offset " +
                           std::to_string(*offset) + " of '" + file.string() + "', which holds " +
                           std::to_string(size));
    }
    if (*length != want) {
      return bad(what, "has " + std::to_string(*length) + " bytes of external data for " +
                           std::to_string(want / per) + " elements of " + std::to_string(per) +
                           " bytes");
    }
    // Every file is read at most once over: overlapping ranges cannot inflate a small file.
    loaded_bytes_ += *length;
    if (loaded_bytes_ > budget_bytes_) {
      return bad(what,
                 "reads more external bytes in total than its data files hold "
                 "(overlapping ranges)");
    }
    auto bytes = opened->read_at(*offset, static_cast<size_t>(*length));
    if (!bytes.ok() || bytes->size() != *length) {
      return bad(what, "reading '" + file.string() + "' failed");
    }
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    t.set_raw_data(std::move(*bytes));
    return ok_status();
  }

 private:
  static Status bad(const std::string& what, const std::string& why) {
    return invalid_argument(what + " " + why);
  }

  std::string model_path_;
  fs::path dir_;
  std::set<std::string> budget_files_;
  uint64_t budget_bytes_ = 0;
  uint64_t loaded_bytes_ = 0;
};

}  // namespace

Status read_onnx_file(const std::string& path, onnx::ModelProto* model, OnnxFileInfo* info) {
  GP_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  if (!model->ParseFromString(bytes)) {
    return invalid_argument(path + ": not an ONNX model (protobuf ModelProto did not parse)");
  }
  OnnxFileInfo local;
  OnnxFileInfo& out = info != nullptr ? *info : local;
  out = {};
  if (!model->has_graph()) return ok_status();
  ExternalReader reader(path);
  for (auto& t : *model->mutable_graph()->mutable_initializer()) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL) continue;
    GP_RETURN_IF_ERROR(reader.load(t));
    out.external_data = true;
  }
  out.separated_parameters = separate_merged_parameters(*model->mutable_graph());
  return ok_status();
}

Status write_onnx_file(const std::string& path, onnx::ModelProto& model, bool external_data) {
  std::string data;
  if (external_data) {
    const std::string data_path = path + ".data";
    const std::string location = fs::path(data_path).filename().string();
    for (auto& t : *model.mutable_graph()->mutable_initializer()) {
      if (t.data_type() != onnx::TensorProto::FLOAT || t.raw_data().size() < 1024) continue;
      auto* loc = t.add_external_data();
      loc->set_key("location");
      loc->set_value(location);
      auto* off = t.add_external_data();
      off->set_key("offset");
      off->set_value(std::to_string(data.size()));
      auto* len = t.add_external_data();
      len->set_key("length");
      len->set_value(std::to_string(t.raw_data().size()));
      data += t.raw_data();
      t.clear_raw_data();
      t.set_data_location(onnx::TensorProto::EXTERNAL);
    }
    GP_RETURN_IF_ERROR(write_file_atomic(data_path, data));
  }
  std::string out;
  if (!model.SerializeToString(&out)) {
    return internal_error(path + ": ONNX serialisation failed (over 2 GiB inline?)");
  }
  return write_file_atomic(path, out);
}

}  // namespace gp::model
