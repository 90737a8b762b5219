// ONNX files with external data, and torch 2.x's merged parameters (gp/model/onnx_file.h).
#include "gp/model/onnx_file.h"

#include <google/protobuf/unknown_field_set.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "gp/common/file_read.h"
#include "gp/model/model_io.h"
#include "onnx/onnx_pb.h"

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

// torch.export names a parameter's placeholder p_<fqn with '.' as '_'>, a buffer's b_<...>.
// NodeProto.metadata_props is field 9 since ONNX 1.16, newer than Debian's 1.12 schema used here,
// so it is read from the unknown fields that protobuf keeps.
constexpr int kNodeMetadataProps = 9;
constexpr const char* kFxNode = "pkg.torch.onnx.fx_node";

std::vector<onnx::StringStringEntryProto> node_metadata(const onnx::NodeProto& n) {
  std::vector<onnx::StringStringEntryProto> out;
  const google::protobuf::UnknownFieldSet& unknown = n.unknown_fields();
  for (int k = 0; k < unknown.field_count(); ++k) {
    const auto& f = unknown.field(k);
    if (f.number() != kNodeMetadataProps ||
        f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
      continue;
    }
    onnx::StringStringEntryProto p;
    if (p.ParseFromString(f.length_delimited())) out.push_back(std::move(p));
  }
  return out;
}

std::vector<std::string> placeholders(const onnx::NodeProto& n) {
  std::vector<std::string> out;
  for (const auto& p : node_metadata(n)) {
    if (p.key() != kFxNode) continue;
    const size_t args = p.value().find(" = ");
    if (args == std::string::npos) continue;
    for (auto& token : fx_names(p.value().substr(args))) {
      if (token.size() > 2 && (token.starts_with("p_") || token.starts_with("b_"))) {
        out.push_back(std::move(token));
      }
    }
  }
  return out;
}

std::string flat(const std::string& name) { return fx_name("", name); }

// The dotted name of placeholder body `flat_name` shaped like `like` ("layer_norm2_bias" like
// "layer.norm1.bias" -> "layer.norm2.bias"); the flat name when the pieces do not line up.
std::string dotted_like(const std::string& flat_name, const std::string& like) {
  std::vector<std::string> pieces;
  for (size_t b = 0;;) {
    const size_t e = flat_name.find('_', b);
    pieces.push_back(flat_name.substr(b, e == std::string::npos ? e : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  std::string out;
  size_t used = 0;
  for (size_t b = 0;;) {
    const size_t e = like.find('.', b);
    const std::string segment = like.substr(b, e == std::string::npos ? e : e - b);
    const size_t count = static_cast<size_t>(std::count(segment.begin(), segment.end(), '_')) + 1;
    if (used + count > pieces.size()) return flat_name;
    if (!out.empty()) out += '.';
    for (size_t k = 0; k < count; ++k) out += (k ? "_" : "") + pieces[used + k];
    used += count;
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return used == pieces.size() ? out : flat_name;
}

std::string last_piece(const std::string& s, char sep) {
  const size_t k = s.rfind(sep);
  return k == std::string::npos ? s : s.substr(k + 1);
}

// A float constant the exporter made from parameters (a folded transpose of a linear's weight)
// and then merged with equal-valued others: nn.TransformerEncoder clones its first layer, so
// every layer's transposed weights start equal. Readers whose traced nodes name no parameter in
// common cannot be reading one parameter; each such group gets its own copy. Readers that share
// a parameter (tied weights) stay in one group, and without metadata nothing is separated.
int separate_merged_constant(onnx::GraphProto& g, const std::string& name,
                             const std::vector<std::pair<int, int>>& list,
                             std::set<std::string>* names) {
  const auto& tensor = *std::find_if(g.initializer().begin(), g.initializer().end(),
                                     [&](const onnx::TensorProto& t) { return t.name() == name; });
  if (tensor.data_type() != onnx::TensorProto::FLOAT) return 0;  // shape arithmetic, ids
  std::vector<std::set<std::string>> groups;  // the parameters each group of readers names
  std::vector<int> group_of;
  for (const auto& [node, pos] : list) {
    const auto ph = placeholders(g.node(node));
    if (ph.empty()) return 0;
    std::set<std::string> mine(ph.begin(), ph.end());
    int joined = -1;
    for (int k = 0; k < static_cast<int>(groups.size()); ++k) {
      const auto& theirs = groups[static_cast<size_t>(k)];
      const bool common = std::any_of(mine.begin(), mine.end(),
                                      [&](const std::string& p) { return theirs.count(p) > 0; });
      if (!common) continue;
      if (joined < 0) {
        joined = k;
      } else {  // this reader links two groups: merge k into the one it joined
        groups[static_cast<size_t>(joined)].insert(theirs.begin(), theirs.end());
        groups[static_cast<size_t>(k)].clear();
        for (int& gk : group_of) gk = gk == k ? joined : gk;
      }
    }
    if (joined < 0) {
      joined = static_cast<int>(groups.size());
      groups.emplace_back();
    }
    groups[static_cast<size_t>(joined)].insert(mine.begin(), mine.end());
    group_of.push_back(joined);
  }
  // The first group keeps the tensor; every other gets a copy named after its first reader.
  std::map<int, std::string> copy_of;
  int added = 0;
  for (size_t r = 0; r < list.size(); ++r) {
    const int group = group_of[r];
    if (group == group_of[0]) continue;
    const auto [node, pos] = list[r];
    auto it = copy_of.find(group);
    if (it == copy_of.end()) {
      std::string copy_name = name + "." + g.node(node).name();
      for (int k = 2; names->count(copy_name); ++k) {
        copy_name = name + "." + g.node(node).name() + "." + std::to_string(k);
      }
      names->insert(copy_name);
      onnx::TensorProto copy = tensor;
      copy.set_name(copy_name);
      *g.add_initializer() = std::move(copy);
      it = copy_of.emplace(group, copy_name).first;
      ++added;
    }
    g.mutable_node(node)->set_input(pos, it->second);
  }
  return added;
}

// Gives each reader that took an initializer through the exporter's value de-duplication its
// own copy (see onnx_file.h). Returns how many copies were added.
int separate_merged_parameters(onnx::GraphProto& g) {
  std::map<std::string, int> init_index;
  std::set<std::string> known;  // flat names of every tensor that is a parameter already
  for (int k = 0; k < g.initializer_size(); ++k) {
    init_index[g.initializer(k).name()] = k;
    known.insert(flat(g.initializer(k).name()));
  }
  std::map<std::string, std::vector<std::pair<int, int>>> readers;  // (node, input position)
  for (int i = 0; i < g.node_size(); ++i) {
    for (int k = 0; k < g.node(i).input_size(); ++k) {
      auto it = init_index.find(g.node(i).input(k));
      if (it == init_index.end()) continue;
      // Bad dims (negative, overflowing) are the importer's to refuse, by name; not a parameter.
      if (element_count(g.initializer(it->second)).value_or(0) > 1) {
        readers[g.node(i).input(k)].push_back({i, k});
      }
    }
  }
  std::set<std::string> names;
  for (const auto& t : g.initializer()) names.insert(t.name());
  int added = 0;
  for (const auto& [name, list] : readers) {
    if (list.size() < 2) continue;
    const std::string self = flat(name);
    auto names_self = [&](const std::vector<std::string>& ph) {
      for (const auto& p : ph) {
        if (p.substr(2) == self) return true;
      }
      return false;
    };
    bool is_parameter = false;
    for (const auto& [node, pos] : list)
      is_parameter = is_parameter || names_self(placeholders(g.node(node)));
    if (!is_parameter) {
      added += separate_merged_constant(g, name, list, &names);
      continue;
    }
    for (const auto& [node, pos] : list) {
      const auto ph = placeholders(g.node(node));
      if (ph.empty() || names_self(ph)) continue;  // the program itself reads this parameter
      // Its own parameter: the placeholder of the reader that is no tensor of the file yet and
      // ends like this one ("..._bias" for a bias).
      std::vector<std::string> candidates;
      for (const auto& p : ph) {
        const std::string body = p.substr(2);
        if (!known.count(body) && last_piece(body, '_') == last_piece(name, '.')) {
          candidates.push_back(body);
        }
      }
      std::sort(candidates.begin(), candidates.end());
      candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
      std::string wanted = candidates.size() == 1 ? dotted_like(candidates[0], name)
                                                  : name + "." + g.node(node).name();
      std::string copy_name = wanted;
      for (int k = 2; names.count(copy_name); ++k) copy_name = wanted + "." + std::to_string(k);
      names.insert(copy_name);
      if (candidates.size() == 1) known.insert(candidates[0]);
      onnx::TensorProto copy = g.initializer(init_index.at(name));
      copy.set_name(copy_name);
      *g.add_initializer() = std::move(copy);
      g.mutable_node(node)->set_input(pos, copy_name);
      ++added;
    }
  }
  return added;
}

}  // namespace

std::vector<std::string> fx_names(const std::string& fx) {
  std::vector<std::string> names;
  for (size_t at = fx.find('%'); at != std::string::npos; at = fx.find('%', at + 1)) {
    size_t end = at + 1;
    while (end < fx.size() &&
           (std::isalnum(static_cast<unsigned char>(fx[end])) || fx[end] == '_')) {
      ++end;
    }
    names.push_back(fx.substr(at + 1, end - at - 1));
  }
  return names;
}

std::string fx_name(const std::string& prefix, const std::string& name) {
  std::string key = prefix + name;
  std::replace(key.begin(), key.end(), '.', '_');
  return key;
}

std::string onnx_node_metadata(const onnx::NodeProto& node, const std::string& key) {
  for (const auto& p : node_metadata(node)) {
    if (p.key() == key) return p.value();
  }
  return "";
}

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
