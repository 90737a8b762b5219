// torch 2.x's export metadata, and its optimiser's merged initializers split again
// (onnx/torch_metadata.h, gp/model/onnx_file.h).
#include "onnx/torch_metadata.h"

#include <google/protobuf/unknown_field_set.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "gp/model/onnx_file.h"
#include "onnx/onnx_pb.h"

namespace gp::model {
namespace {

// metadata_props field numbers since ONNX 1.16.
constexpr int kNodeMetadataProps = 9;
constexpr int kValueInfoMetadataProps = 4;
constexpr int kGraphMetadataProps = 16;
constexpr const char* kFxNode = "pkg.torch.onnx.fx_node";
constexpr const char* kFoldedFrom = "pkg.onnxscript.optimizer.folded_from";
constexpr const char* kSignature = "pkg.torch.export.ExportedProgram.graph_signature";
constexpr const char* kCopyOf = "pkg.graphpipe.copy_of";  // ours: what a split copy copies

template <typename Message>
std::string metadata_value(const Message& m, int field, const std::string& key) {
  const google::protobuf::UnknownFieldSet& unknown = m.unknown_fields();
  for (int k = 0; k < unknown.field_count(); ++k) {
    const auto& f = unknown.field(k);
    if (f.number() != field || f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
      continue;
    }
    onnx::StringStringEntryProto p;
    if (p.ParseFromString(f.length_delimited()) && p.key() == key) return p.value();
  }
  return "";
}

// A value_info's folded_from: a Python list of quoted names, "['stages.0.gamma', 'val_6']".
std::vector<std::string> folded_from_of(const onnx::ValueInfoProto& vi) {
  std::vector<std::string> out;
  const std::string list = metadata_value(vi, kValueInfoMetadataProps, kFoldedFrom);
  for (size_t b = list.find('\''); b != std::string::npos; b = list.find('\'', b + 1)) {
    const size_t e = list.find('\'', b + 1);
    if (e == std::string::npos) break;
    out.push_back(list.substr(b + 1, e - b - 1));
    b = e;
  }
  return out;
}

}  // namespace

std::vector<std::string> torch_placeholders(const onnx::NodeProto& n) {
  std::vector<std::string> out;
  const std::string fx = metadata_value(n, kNodeMetadataProps, kFxNode);
  const size_t args = fx.find(" = ");
  if (args == std::string::npos) return out;
  for (auto& token : fx_names(fx.substr(args))) {
    if (token.size() > 2 && (token.starts_with("p_") || token.starts_with("b_"))) {
      out.push_back(std::move(token));
    }
  }
  return out;
}

namespace {

// The traced values a node's call reads that are no tensor of the ONNX graph: what the optimiser
// folded ("%view_1" read where the graph has the merged "view").
std::vector<std::string> folded_arguments(const onnx::NodeProto& n,
                                          const std::set<std::string>& graph_values,
                                          const std::string& initializer) {
  std::vector<std::string> out;
  const std::string fx = metadata_value(n, kNodeMetadataProps, kFxNode);
  const size_t args = fx.find(" = ");
  if (args == std::string::npos) return out;
  for (auto& token : fx_names(fx.substr(args))) {
    if (token == initializer || !graph_values.count(token)) out.push_back(std::move(token));
  }
  return out;
}

std::string last_piece(const std::string& s, char sep) {
  const size_t k = s.rfind(sep);
  return k == std::string::npos ? s : s.substr(k + 1);
}

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

int64_t elements(const onnx::TensorProto& t) {
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 62) / d)) return 0;  // the importer refuses it
    n *= d;
  }
  return n;
}

// Copy `copy` of initializer `from` keeps what the importer must know of `from`: its
// value_info (the optimiser's folded_from), or a new one saying it was copied from `from`.
void add_metadata(onnx::ValueInfoProto* vi, const std::string& key, const std::string& value) {
  onnx::StringStringEntryProto entry;
  entry.set_key(key);
  entry.set_value(value);
  vi->mutable_unknown_fields()->AddLengthDelimited(kValueInfoMetadataProps,
                                                   entry.SerializeAsString());
}

// Copy `copy` of initializer `from` keeps what the importer must know of `from`: its
// value_info (the optimiser's folded_from), or a new one saying it was folded from `from`; and
// which tensor it copies.
void record_copy(onnx::GraphProto& g, const std::string& from, const onnx::TensorProto& tensor,
                 const std::string& copy) {
  for (const auto& vi : g.value_info()) {
    if (vi.name() != from) continue;
    onnx::ValueInfoProto kept = vi;
    kept.set_name(copy);
    add_metadata(&kept, kCopyOf, from);
    *g.add_value_info() = std::move(kept);
    return;
  }
  auto* vi = g.add_value_info();
  vi->set_name(copy);
  auto* type = vi->mutable_type()->mutable_tensor_type();
  type->set_elem_type(tensor.data_type());
  for (int64_t d : tensor.dims()) type->mutable_shape()->add_dim()->set_dim_value(d);
  add_metadata(vi, kFoldedFrom, "['" + from + "']");
  add_metadata(vi, kCopyOf, from);
}

class MergedSplitter {
 public:
  explicit MergedSplitter(onnx::GraphProto& g) : g_(g), signature_(torch_graph_signature(g)) {
    for (int k = 0; k < g.initializer_size(); ++k) {
      index_[g.initializer(k).name()] = k;
      names_.insert(g.initializer(k).name());
      known_.insert(fx_name("", g.initializer(k).name()));
    }
    graph_values_ = names_;
    for (const auto& n : g.node()) graph_values_.insert(n.output().begin(), n.output().end());
    for (const auto& in : g.input()) graph_values_.insert(in.name());
    // Parameters of the signature that no tensor holds, no fold names and no node reads.
    std::set<std::string> accounted = names_;
    for (const auto& vi : g.value_info()) {
      for (auto& source : folded_from_of(vi)) accounted.insert(std::move(source));
    }
    std::set<std::string> read;
    for (const auto& n : g.node()) {
      for (auto& p : torch_placeholders(n)) read.insert(std::move(p));
    }
    for (const auto& [placeholder, p] : signature_) {
      parameters_unaccounted_ =
          parameters_unaccounted_ ||
          (p.kind == "PARAMETER" && !accounted.count(p.target) && !read.count(placeholder));
    }
  }

  int run() {
    std::map<std::string, std::vector<std::pair<int, int>>> readers;  // (node, input position)
    for (int i = 0; i < g_.node_size(); ++i) {
      for (int k = 0; k < g_.node(i).input_size(); ++k) {
        auto it = index_.find(g_.node(i).input(k));
        // Bad dims (negative, overflowing) are the importer's to refuse, by name.
        if (it != index_.end() && elements(g_.initializer(it->second)) > 1) {
          readers[g_.node(i).input(k)].push_back({i, k});
        }
      }
    }
    int added = 0;
    for (const auto& [name, list] : readers) {
      if (list.size() < 2) continue;
      bool is_parameter = false;
      for (const auto& [node, pos] : list) is_parameter = is_parameter || names_self(node, name);
      added += is_parameter ? split_parameter(name, list) : split_constant(name, list);
    }
    return added;
  }

 private:
  bool names_self(int node, const std::string& name) const {
    const auto ph = torch_placeholders(g_.node(node));
    return std::find(ph.begin(), ph.end(), fx_name("p_", name)) != ph.end();
  }

  std::string unused(const std::string& wanted) {
    std::string name = wanted;
    for (int k = 2; names_.count(name) || graph_values_.count(name); ++k) {
      name = wanted + "." + std::to_string(k);
    }
    names_.insert(name);
    return name;
  }

  std::string add_copy(const std::string& of, const std::string& wanted) {
    const std::string copy_name = unused(wanted);
    onnx::TensorProto copy = g_.initializer(index_.at(of));
    copy.set_name(copy_name);
    record_copy(g_, of, copy, copy_name);
    *g_.add_initializer() = std::move(copy);
    return copy_name;
  }

  // The parameter a reader of merged parameter `name` stands for: its placeholder that is no
  // tensor of the file yet and ends like `name` ("..._bias" for a bias), by the signature's
  // target where the file has one; "" when not exactly one.
  std::string own_parameter(int node, const std::string& name) const {
    std::set<std::string> candidates;
    for (const auto& p : torch_placeholders(g_.node(node))) {
      if (auto s = signature_.find(p); s != signature_.end()) {
        if (s->second.kind == "PARAMETER" && !index_.count(s->second.target) &&
            last_piece(s->second.target, '.') == last_piece(name, '.')) {
          candidates.insert(s->second.target);
        }
      } else if (signature_.empty()) {
        const std::string body = p.substr(2);
        if (!known_.count(body) && last_piece(body, '_') == last_piece(name, '.')) {
          candidates.insert(dotted_like(body, name));
        }
      }
    }
    return candidates.size() == 1 ? *candidates.begin() : "";
  }

  // Readers that name their own parameter get a copy named after it; readers naming the same
  // one (a layer applied twice, as ALBERT does) share it.
  int split_parameter(const std::string& name, const std::vector<std::pair<int, int>>& list) {
    std::map<std::string, std::string> copy_of;  // parameter -> its copy
    int added = 0;
    for (const auto& [node, pos] : list) {
      if (torch_placeholders(g_.node(node)).empty() || names_self(node, name)) continue;
      const std::string own = own_parameter(node, name);
      auto it = own.empty() ? copy_of.end() : copy_of.find(own);
      if (it == copy_of.end()) {
        const std::string copy =
            add_copy(name, own.empty() ? name + "." + g_.node(node).name() : own);
        ++added;
        if (own.empty()) {
          g_.mutable_node(node)->set_input(pos, copy);
          continue;
        }
        it = copy_of.emplace(own, copy).first;
      }
      g_.mutable_node(node)->set_input(pos, it->second);
    }
    return added;
  }

  // A constant the exporter made from parameters (a folded transpose of a linear's weight, a
  // layer scale's view) and merged with equal-valued others: nn.TransformerEncoder clones its
  // first layer, so every layer's transposed weights start equal. Readers whose traced calls
  // name no parameter nor folded value in common cannot be reading one tensor; each such group
  // gets its own copy. Readers that share one (tied weights) stay in one group, and without
  // metadata nothing is separated.
  // What a reader of merged constant `name` names: its placeholders; without one, the traced
  // value it reads that the graph no longer has, but only where some parameter of the signature
  // is nowhere else (ConvNeXt's second gamma), so that one module called twice (its view folded
  // twice, merged) stays one tensor.
  std::set<std::string> reader_names(int node, const std::string& name) const {
    std::set<std::string> mine;
    for (auto& p : torch_placeholders(g_.node(node))) mine.insert(std::move(p));
    if (mine.empty() && parameters_unaccounted_) {
      for (auto& v : folded_arguments(g_.node(node), graph_values_, name)) mine.insert(v);
    }
    return mine;
  }

  int split_constant(const std::string& name, const std::vector<std::pair<int, int>>& list) {
    if (g_.initializer(index_.at(name)).data_type() != onnx::TensorProto::FLOAT) return 0;
    std::vector<std::set<std::string>> groups;  // what each group of readers names
    std::vector<int> group_of;
    for (const auto& [node, pos] : list) {
      const std::set<std::string> mine = reader_names(node, name);
      if (mine.empty()) return 0;
      int joined = -1;
      for (int k = 0; k < static_cast<int>(groups.size()); ++k) {
        const auto& theirs = groups[static_cast<size_t>(k)];
        if (std::none_of(mine.begin(), mine.end(),
                         [&](const std::string& p) { return theirs.count(p) > 0; })) {
          continue;
        }
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
        it = copy_of.emplace(group, add_copy(name, name + "." + g_.node(node).name())).first;
        ++added;
      }
      g_.mutable_node(node)->set_input(pos, it->second);
    }
    return added;
  }

  onnx::GraphProto& g_;
  const std::map<std::string, TorchPlaceholder> signature_;
  std::map<std::string, int> index_;    // initializer name -> position (originals only)
  std::set<std::string> names_;         // every initializer name, copies included
  std::set<std::string> known_;         // placeholder bodies of the file's tensors
  std::set<std::string> graph_values_;  // every tensor the graph has
  bool parameters_unaccounted_ = false;
};

// The parameter initializer `t` is a fold of by one op (its other sources are the exporter's
// constants); "" for anything else.
std::string one_parameter_fold(const onnx::GraphProto& g, const onnx::TensorProto& t,
                               const std::set<std::string>& parameters) {
  std::string param;
  for (const auto& source : torch_folded_from(g, t.name())) {
    if (exporter_constant_name(source)) continue;
    if (!param.empty() || !parameters.count(source)) return "";
    param = source;
  }
  return param;
}

// A float tensor's values as bytes, wherever the file keeps them.
std::string float_bytes(const onnx::TensorProto& t) {
  std::string bytes = t.raw_data();
  for (float v : t.float_data()) bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
  return bytes;
}

// Folds of one parameter by one op that hold the same values become the first of them: its
// readers read it, the others go.
void join_refolds(onnx::GraphProto& g) {
  std::set<std::string> parameters;
  for (const auto& [placeholder, p] : torch_graph_signature(g)) {
    if (p.kind == "PARAMETER") parameters.insert(p.target);
  }
  if (parameters.empty()) return;
  // parameter, the ops it went through, dims, a hash of the values -> the folds so far
  std::map<std::string, std::vector<const onnx::TensorProto*>> first;
  std::map<std::string, std::string> joined;  // later fold -> first
  for (const auto& t : g.initializer()) {
    const std::string param = one_parameter_fold(g, t, parameters);
    if (param.empty() || t.data_type() != onnx::TensorProto::FLOAT) continue;
    // (The op a fold is named after: "view_3" and "permute" of one parameter stay apart.)
    std::string key = param + '\0' + traced_op(t.name());
    key += "\0" + std::to_string(std::hash<std::string>()(float_bytes(t)));
    for (int64_t d : t.dims()) key += ',' + std::to_string(d);
    auto& seen = first[key];
    const auto same = std::find_if(seen.begin(), seen.end(), [&](const onnx::TensorProto* o) {
      return float_bytes(*o) == float_bytes(t) &&
             std::equal(o->dims().begin(), o->dims().end(), t.dims().begin(), t.dims().end());
    });
    if (same != seen.end()) {
      joined[t.name()] = (*same)->name();
    } else {
      seen.push_back(&t);
    }
  }
  if (joined.empty()) return;
  for (auto& n : *g.mutable_node()) {
    for (auto& in : *n.mutable_input()) {
      if (auto j = joined.find(in); j != joined.end()) in = j->second;
    }
  }
  auto* inits = g.mutable_initializer();
  inits->erase(std::remove_if(inits->begin(), inits->end(),
                              [&](const onnx::TensorProto& t) { return joined.count(t.name()); }),
               inits->end());
}

}  // namespace

std::string copied_from(const onnx::GraphProto& g, const std::string& value) {
  for (const auto& vi : g.value_info()) {
    if (vi.name() == value) return metadata_value(vi, kValueInfoMetadataProps, kCopyOf);
  }
  return "";
}

std::string traced_op(const std::string& value) {
  static const std::regex kNumbered("(.*)_[0-9]+");
  std::smatch m;
  return std::regex_match(value, m, kNumbered) ? m[1].str() : value;
}

bool exporter_constant_name(const std::string& name) {
  static const std::regex kVal("_?val_[0-9]+");
  return std::regex_match(name, kVal);
}

std::vector<std::string> fx_names(const std::string& fx) {
  std::vector<std::string> names;
  for (size_t at = fx.find('%'); at != std::string::npos; at = fx.find('%', at + 1)) {
    size_t end = at + 1;
    while (end < fx.size() &&
           (std::isalnum(static_cast<unsigned char>(fx[end])) || fx[end] == '_')) {
      ++end;
    }
    std::string name = fx.substr(at + 1, end - at - 1);
    // Placeholders as fx_name writes them (torch.export lower-cases them; other tools may not).
    if (name.starts_with("p_") || name.starts_with("b_")) {
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    names.push_back(std::move(name));
  }
  return names;
}

std::string fx_name(const std::string& prefix, const std::string& name) {
  // torch.export's placeholder naming: lower case, anything but letters and digits as '_'.
  std::string key = name;
  for (char& c : key) {
    const auto u = static_cast<unsigned char>(c);
    c = std::isalnum(u) ? static_cast<char>(std::tolower(u)) : '_';
  }
  return prefix + key;
}

std::string onnx_node_metadata(const onnx::NodeProto& node, const std::string& key) {
  return metadata_value(node, kNodeMetadataProps, key);
}

std::vector<std::string> torch_call_arguments(const onnx::NodeProto& n, std::string_view target) {
  // "... target=torch.ops.aten.layer_norm.default](args = (%x, [8, 4], %p_w, None, 1e-05), ..."
  const std::string fx = onnx_node_metadata(n, "pkg.torch.onnx.fx_node");
  const std::string call = "target=torch.ops." + std::string(target) + "](args = (";
  const size_t at = fx.find(call);
  if (at == std::string::npos) return {};
  std::vector<std::string> args;
  std::string arg;
  int depth = 0;  // inside [...] or (...) of one argument
  for (size_t k = at + call.size(); k < fx.size(); ++k) {
    const char c = fx[k];
    if (depth == 0 && (c == ',' || c == ')')) {
      arg.erase(0, arg.find_first_not_of(' '));
      if (!arg.empty() || c == ',') args.push_back(arg);
      arg.clear();
      if (c == ')') return args;
      continue;
    }
    if (c == '[' || c == '(') ++depth;
    if ((c == ']' || c == ')') && --depth < 0) return {};
    arg += c;
  }
  return {};  // unterminated: not a call this reads
}

int64_t torch_embedding_padding_idx(const onnx::NodeProto& n) {
  const auto args = torch_call_arguments(n, "aten.embedding.default");
  if (args.size() < 3 || args[2].empty()) return -1;
  int64_t padding = -1;
  const auto [ptr, ec] = std::from_chars(args[2].data(), args[2].data() + args[2].size(), padding);
  return ec == std::errc() && ptr == args[2].data() + args[2].size() ? padding : -1;
}

std::map<std::string, TorchPlaceholder> torch_graph_signature(const onnx::GraphProto& g) {
  std::map<std::string, TorchPlaceholder> out;
  const std::string text = metadata_value(g, kGraphMetadataProps, kSignature);
  // "\n# inputs\np_fc_weight: PARAMETER target='fc.weight'\n...\n# outputs\n..."
  for (size_t b = 0; b < text.size();) {
    size_t e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    const std::string line = text.substr(b, e - b);
    b = e + 1;
    if (line.starts_with("# outputs")) break;
    const size_t colon = line.find(": ");
    const size_t target = line.find("target='");
    if (colon == std::string::npos || target == std::string::npos) continue;
    const size_t kind_end = line.find(' ', colon + 2);
    const size_t target_end = line.find('\'', target + 8);
    if (target_end == std::string::npos) continue;
    out[line.substr(0, colon)] = {line.substr(colon + 2, kind_end - colon - 2),
                                  line.substr(target + 8, target_end - target - 8)};
  }
  return out;
}

std::vector<std::string> torch_folded_from(const onnx::GraphProto& g, const std::string& value) {
  for (const auto& vi : g.value_info()) {
    if (vi.name() == value) return folded_from_of(vi);
  }
  return {};
}

int separate_merged_parameters(onnx::GraphProto& g) {
  join_refolds(g);
  return MergedSplitter(g).run();
}

std::string dropped_bias_target(const onnx::GraphProto& g, const onnx::NodeProto& n) {
  const auto signature = torch_graph_signature(g);
  std::set<std::string> held;
  for (const auto& t : g.initializer()) held.insert(t.name());
  std::string found;
  for (const auto& p : torch_placeholders(n)) {
    const auto s = signature.find(p);
    if (s == signature.end() || s->second.kind != "PARAMETER" || held.count(s->second.target) ||
        !s->second.target.ends_with("bias")) {
      continue;
    }
    if (!found.empty() && found != s->second.target) return "";  // which one is unclear
    found = s->second.target;
  }
  return found;
}

}  // namespace gp::model
