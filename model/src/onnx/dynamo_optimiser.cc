// What torch's ONNX optimiser (torch.onnx.export(dynamo=True) runs it unless optimize=False)
// does to parameters, which it takes for constants, undone from the nodes' fx_node metadata so
// that the model trains as torch's: a linear's transposed weight folded into an initializer of
// its own becomes a view of the weight; a linear's or convolution's bias of zeros that it
// dropped trains from zero. (Parameters of equal values that it merged are split when the file
// loads: torch_metadata.cc.) What it folds from parameters and buffers into initializers of
// its own (a layer scale's view, rotary tables) is told apart by its folded_from metadata.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gp/model/onnx_file.h"
#include "onnx/importer.h"
#include "onnx/torch_metadata.h"

namespace gp::model::onnx_detail {
namespace {

// The parameters a node's torch call reads, by torch.export's placeholder names (p_<name>).
std::set<std::string> named_parameters(const onnx::NodeProto& n) {
  std::set<std::string> named;
  for (auto& name : torch_placeholders(n)) {
    if (name.starts_with("p_")) named.insert(std::move(name));
  }
  return named;
}

// Ops whose gradient reaches the parameter unchanged, element for element: training the folded
// value is training the parameter (each element it holds once; see repeats_elements). (`add`
// only where the fold selects by ids: there it is the ids' arithmetic, `arange(T) + past`; on
// values, p + p doubles the gradient and weight decay would decay p + c.)
bool passes_gradient(const std::string& op, bool selects) {
  static const std::set<std::string> kOps = {
      "view",    "_unsafe_view", "reshape",        "unsqueeze",
      "squeeze", "permute",      "transpose",      "t",
      "expand",  "clone",        "contiguous",     "_to_copy",
      "to",      "alias",        "flatten",        "unflatten",
      "index",   "index_select", "embedding",      "select",
      "slice",   "narrow",       "getitem",        "gather",
      "repeat",  "arange",       "lift_fresh_copy"};
  return kOps.count(op) > 0 || (selects && op == "add");
}

// Ops that may hold one element of their input several times.
bool may_repeat(const std::string& op) {
  static const std::set<std::string> kOps = {"index",  "index_select", "embedding",
                                             "gather", "expand",       "repeat"};
  return kOps.count(op) > 0;
}

// The number of elements of `v` equal to an earlier one, from a radix sort of their bit patterns
// (a hash set took a minute over GPT-2's 124 M weights; +0 and -0 count as different here).
size_t repeated_values(const std::vector<float>& v) {
  std::vector<uint32_t> a(v.size()), b(v.size());
  std::memcpy(a.data(), v.data(), v.size() * sizeof(float));
  for (int shift = 0; shift < 32; shift += 8) {
    std::array<size_t, 257> start{};
    for (uint32_t x : a) ++start[((x >> shift) & 255) + 1];
    for (size_t k = 0; k < 256; ++k) start[k + 1] += start[k];
    for (uint32_t x : a) b[start[(x >> shift) & 255]++] = x;
    a.swap(b);
  }
  size_t repeated = 0;
  for (size_t k = 1; k < a.size(); ++k) repeated += a[k] == a[k - 1] ? 1 : 0;
  return repeated;
}

// Whether two fibers of `v` along an axis of `len` elements `inner` apart are equal: their
// hashes sorted, equal hashes compared element by element.
bool equal_fibers(const std::vector<float>& v, int64_t len, int64_t inner) {
  const int64_t outers = static_cast<int64_t>(v.size()) / (len * inner);
  auto at = [&](int64_t fiber, int64_t k) {
    return v[static_cast<size_t>(((fiber / inner) * len + k) * inner + fiber % inner)];
  };
  std::vector<std::pair<uint64_t, int64_t>> hashes;
  hashes.reserve(static_cast<size_t>(outers * inner));
  for (int64_t f = 0; f < outers * inner; ++f) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the bit patterns
    for (int64_t k = 0; k < len; ++k) {
      uint32_t bits;
      const float x = at(f, k);
      std::memcpy(&bits, &x, sizeof bits);
      h = (h ^ bits) * 1099511628211ull;
    }
    hashes.emplace_back(h, f);
  }
  std::sort(hashes.begin(), hashes.end());
  for (size_t k = 1; k < hashes.size(); ++k) {
    if (hashes[k].first != hashes[k - 1].first) continue;
    bool same = true;
    for (int64_t e = 0; e < len && same; ++e) {
      same = at(hashes[k].second, e) == at(hashes[k - 1].second, e);
    }
    if (same) return true;
  }
  return false;
}

// Whether `v` (dims `dims`) holds elements of its source more than once: two equal fibers along
// some axis (a gather that read one row twice), or many of its elements equal to an earlier one
// (a single-head relative bias: a Toeplitz matrix of a 1-D table repeats most of them). All-equal
// values (a table that starts as zeros) count as repeats. Random float32 values collide too, the
// more the larger the tensor: torch's uniform init draws from some 2^24 levels, and 61% of a
// 768 x 50257 nn.Linear weight's values equal an earlier one (5% of a 768 x 2304 one). Beyond
// 2^16 elements only 90% counts (a relative bias of 7 x 7 windows or more repeats over 94%).
bool repeats_elements(const std::vector<float>& v, std::vector<int64_t> dims) {
  if (v.empty() || std::find(dims.begin(), dims.end(), int64_t{0}) != dims.end()) return false;
  dims.erase(std::remove(dims.begin(), dims.end(), int64_t{1}), dims.end());
  const size_t repeated = repeated_values(v);
  const bool small = v.size() <= (size_t{1} << 16);
  // (A 1-D fold has no fibers to compare: any repeat counts, whatever its size.)
  if (repeated > 0 && (dims.size() <= 1 || (small && repeated * 100 > v.size()))) return true;
  if (!small && repeated * 10 > v.size() * 9) return true;
  for (size_t axis = 0; axis < dims.size() && dims.size() > 1; ++axis) {
    int64_t inner = 1;
    for (size_t d = axis + 1; d < dims.size(); ++d) inner *= dims[d];
    if (equal_fibers(v, dims[axis], inner)) return true;
  }
  return false;
}

}  // namespace

// What the optimiser folded an initializer from, by kind.
struct FoldSources {
  std::vector<std::string> params;  // parameters, by module name
  std::vector<std::string> traced;  // the traced program's values ("view", "exp")
  bool selects = false;             // by a buffer's indices, or by ops that may repeat elements
  bool detached = false;            // through detach: no gradient reaches the parameters
  bool recorded = false;            // the file says what it was folded from
};

namespace {

FoldSources fold_sources(const onnx::GraphProto& g, const std::string& name,
                         const std::map<std::string, std::string>& kind_of) {
  FoldSources f;
  // The value itself, named after its last traced op; a copy made when merged readers were
  // split records the tensor it copies (a parameter's copy is that parameter's).
  const std::string copied = copied_from(g, name);
  const std::string own = copied.empty() ? name : copied;
  if (!kind_of.count(own) && !exporter_constant_name(own)) f.traced.push_back(own);
  const auto sources = torch_folded_from(g, name);
  f.recorded = !sources.empty();
  for (const auto& source : sources) {
    const auto k = kind_of.find(source);
    if (k == kind_of.end()) {
      if (!exporter_constant_name(source) && source != own) f.traced.push_back(source);
    } else if (k->second == "PARAMETER") {
      f.params.push_back(source);
    } else {
      f.selects = true;
    }
  }
  for (const auto& v : f.traced) {
    f.selects = f.selects || may_repeat(traced_op(v));
    f.detached = f.detached || traced_op(v) == "detach";
  }
  return f;
}

// Why a fold of parameters cannot train as torch trains them; "" when it can.
std::string fold_refusal(const FoldSources& f, const std::optional<std::vector<float>>& values,
                         const std::vector<int64_t>& dims) {
  if (f.params.size() > 1) {
    return "is computed from " + std::to_string(f.params.size()) + " parameters ('" + f.params[0] +
           "', '" + f.params[1] + "'" + (f.params.size() > 2 ? ", ..." : "") + ")";
  }
  std::string selector;
  for (const auto& v : f.traced) {
    if (!passes_gradient(traced_op(v), f.selects)) {
      return "is computed from parameter '" + f.params[0] + "' by '" + v +
             "', whose gradient is not the parameter's";
    }
    if (may_repeat(traced_op(v)) && selector.empty()) selector = v;
  }
  if (f.selects && (!values || repeats_elements(*values, dims))) {
    return "holds elements of parameter '" + f.params[0] + "' more than once (read " +
           (selector.empty() ? std::string("by a buffer's indices") : "by '" + selector + "'") +
           ", as Swin's relative position bias is, or its values start equal); torch sums the "
           "repeats' gradients into one element";
  }
  return "";
}

// What nodes other than recurrent layers read: those layers' packed weights (gates reordered,
// biases concatenated) packed_params.cc maps back onto torch's parameters.
std::set<std::string> read_by_non_recurrent(const onnx::GraphProto& g) {
  std::set<std::string> read;
  for (const auto& n : g.node()) {
    const auto& op = n.op_type();
    if (op != "LSTM" && op != "GRU" && op != "RNN") read.insert(n.input().begin(), n.input().end());
  }
  return read;
}

bool scalar_float(const onnx::TensorProto& t) {
  return t.data_type() == onnx::TensorProto::FLOAT &&
         std::all_of(t.dims().begin(), t.dims().end(), [](int64_t d) { return d == 1; });
}

}  // namespace

std::string Importer::check_legacy_folds() const {
  // The TorchScript exporter's constant folding names what it makes "onnx::<Op>_<n>" and records
  // nothing of where it came from; a fold that repeats values along an axis is no parameter's
  // layout (a transposed or reshaped weight repeats nothing).
  std::vector<std::string> refused;
  const std::set<std::string> read = read_by_non_recurrent(g_);
  for (const auto& t : g_.initializer()) {
    const std::string& name = t.name();
    // (Masks of -inf are constants; a tensor of one value, zeros say, is any layout's.)
    if (!name.starts_with("onnx::") || !read.count(name) || is_buffer(name) ||
        infinite_mask(name)) {
      continue;
    }
    const auto dims = weight_dims(name);
    if (std::count_if(dims.begin(), dims.end(), [](int64_t d) { return d > 1; }) < 2) continue;
    const auto values = float_values(name);
    if (!values || std::adjacent_find(values->begin(), values->end(), std::not_equal_to<>()) ==
                       values->end()) {
      continue;
    }
    if (repeats_elements(*values, dims)) refused.push_back(name);
  }
  if (refused.empty()) return "";
  std::string list;
  for (const auto& r : refused) list += (list.empty() ? "'" : "', '") + r;
  return path_ + ": " + list +
         "' were made by torch's constant folding and repeat values along an axis: a parameter "
         "read by index or expand (Swin's relative position bias; torch sums the gradients of the "
         "repeats into one element) or a constant computed from buffers (rotary tables). Export "
         "with torch.onnx.export(..., do_constant_folding=False), or import with --freeze NAME "
         "for each that is a constant.";
}

void Importer::classify_torch_initializers() {
  const auto signature = torch_graph_signature(g_);
  if (signature.empty()) {
    if (from_pytorch_ && !dynamo_metadata_) legacy_folds_refused_ = check_legacy_folds();
    return;
  }
  std::map<std::string, std::string> kind_of;  // target -> PARAMETER, BUFFER, ...
  for (const auto& [placeholder, p] : signature) kind_of[p.target] = p.kind;
  const std::set<std::string> read = read_by_non_recurrent(g_);
  for (const auto& t : g_.initializer()) {
    const std::string& name = t.name();
    if (auto k = kind_of.find(name); k != kind_of.end()) {
      if (k->second != "PARAMETER") buffers_.insert(name);
      continue;
    }
    if (is_buffer(name)) continue;  // --freeze
    const FoldSources f = fold_sources(g_, name, kind_of);
    if (!f.recorded && !exporter_constant_name(name)) {
      if (read.count(name)) warn_unknown_origin(t);
      continue;
    }
    // Computed from constants and buffers only (rotary tables, masks), or cut off from the
    // parameters' gradient by detach; the exporter's own constants.
    if (f.params.empty() || f.detached) {
      buffers_.insert(name);
      continue;
    }
    if (read.count(name)) train_or_refuse(t, f);  // (not a recurrent layer's, or nobody's)
  }
}

void Importer::train_or_refuse(const onnx::TensorProto& t, const FoldSources& f) {
  const auto values = f.selects ? float_values(t.name()) : std::nullopt;
  if (const std::string why = fold_refusal(f, values, weight_dims(t.name())); !why.empty()) {
    fold_refusals_.push_back("'" + t.name() + "' " + why);
    return;
  }
  if (scalar_float(t)) scalar_params_.insert(t.name());  // a scalar parameter's view
  fold_of_[t.name()] = f.params[0];
}

void Importer::warn_unknown_origin(const onnx::TensorProto& t) const {
  // Of no known origin (a rewrite rule's): as before, a float tensor trains; say so.
  if (t.data_type() != onnx::TensorProto::FLOAT || scalar_float(t) ||
      options_.warnings == nullptr) {
    return;
  }
  options_.warnings->push_back(
      "initializer '" + t.name() +
      "' is no parameter or buffer of torch's graph signature, and the optimiser recorded no "
      "origin for it: it trains as a weight (--freeze " +
      t.name() + " keeps it a constant)");
}

std::string Importer::folded_parameters_refused() const {
  if (!legacy_folds_refused_.empty()) return legacy_folds_refused_;
  std::vector<std::string> refused = fold_refusals_;
  // A parameter that trains as one tensor only where the file holds it once: itself, or one
  // fold of it (views of either, as a folded transpose of a tied head, share its values).
  std::map<std::string, std::vector<std::string>> forms;
  for (const auto& [fold, param] : fold_of_) {
    // (A copy made when merged readers were split stands for another parameter.)
    if (!view_of_.count(fold) && copied_from(g_, fold).empty()) forms[param].push_back(fold);
  }
  for (auto& [param, list] : forms) {
    if (consts_.count(param)) list.insert(list.begin(), param);
    if (list.size() < 2) continue;
    refused.push_back("parameter '" + param + "' is held as " + std::to_string(list.size()) +
                      " tensors ('" + list[0] + "', '" + list[1] + "'), which would train apart");
  }
  if (refused.empty()) return "";
  std::string list;
  for (const auto& r : refused) list += (list.empty() ? "" : "; ") + r;
  return path_ +
         ": torch's ONNX optimiser folded parameters into initializers that cannot train as "
         "torch trains the parameters: " +
         list + ". Export with torch.onnx.export(..., dynamo=True, optimize=False).";
}

void Importer::find_folded_transposes() {
  // torch names a parameter FQN "lm_head.weight" in fx_node as "%p_lm_head_weight".
  std::map<std::string, std::string> by_fx_name;
  for (const auto& t : g_.initializer()) by_fx_name[fx_name("p_", t.name())] = t.name();
  auto transposes = [this](const std::string& folded, const std::string& param) {
    const auto fd = weight_dims(folded), pd = weight_dims(param);
    if (fd.size() != 2 || pd.size() != 2 || fd[0] != pd[1] || fd[1] != pd[0]) return false;
    const auto f = float_values(folded), p = float_values(param);
    if (!f || !p || f->size() != p->size()) return false;
    for (int64_t r = 0; r < fd[0]; ++r) {
      for (int64_t c = 0; c < fd[1]; ++c) {
        if ((*f)[static_cast<size_t>(r * fd[1] + c)] != (*p)[static_cast<size_t>(c * fd[0] + r)]) {
          return false;
        }
      }
    }
    // A constant matrix (zeros, ones) is the transpose of any other of its size: not evidence.
    return std::adjacent_find(f->begin(), f->end(), std::not_equal_to<>()) != f->end();
  };
  auto view = [this](const std::string& folded, const std::string& param) {
    view_of_[folded] = {param, true};
    folded_transposes_.insert(folded);
  };
  for (const auto& n : g_.node()) {
    const std::set<std::string> named = named_parameters(n);
    for (int k : weight_positions(n)) {
      if (k >= n.input_size() || !consts_.count(n.input(k)) || view_of_.count(n.input(k))) continue;
      const std::string& folded = n.input(k);
      if (named.count(fx_name("p_", folded))) continue;  // a named parameter itself
      for (const auto& fx : named) {
        const auto param = by_fx_name.find(fx);
        if (param != by_fx_name.end() && param->second != folded &&
            transposes(folded, param->second)) {
          view(folded, param->second);
          break;
        }
      }
      // The TorchScript exporter's constant folding names what it makes "onnx::<Op>_<n>" and
      // records no parameter: the one parameter whose exact transpose it is.
      if (!named.empty() || folded.rfind("onnx::", 0) != 0) continue;
      std::vector<std::string> matches;
      for (const auto& t : g_.initializer()) {
        if (t.name().rfind("onnx::", 0) != 0 && transposes(folded, t.name())) {
          matches.push_back(t.name());
        }
      }
      if (matches.size() == 1) view(folded, matches[0]);
    }
  }
}

void Importer::find_held_parameters() {
  // Initializers, and graph inputs of a graph-only export (merged ones were split on loading).
  for (const auto& t : g_.initializer()) held_params_.insert(fx_name("p_", t.name()));
  for (const auto& in : g_.input()) held_params_.insert(fx_name("p_", in.name()));
}

bool Importer::dropped_bias(int i) const {
  const auto& n = g_.node(i);
  const std::string fx = model::onnx_node_metadata(n, "pkg.torch.onnx.fx_node");
  static const char* const kCalls[] = {"aten.linear", "aten.addmm", "aten.conv", "aten._conv"};
  if (std::none_of(std::begin(kCalls), std::end(kCalls),
                   [&](const char* c) { return fx.find(c) != std::string::npos; })) {
    return false;
  }
  const auto named = named_parameters(n);
  return std::any_of(named.begin(), named.end(), [this](const std::string& p) {
    return p.ends_with("_bias") && !held_params_.count(p);
  });
}

void Importer::train_dropped_bias(const std::string& where, const std::string& id,
                                  const std::string& param, int64_t width) {
  set_values(id, param, std::vector<float>(static_cast<size_t>(width), 0.0f));
  dropped_biases_.push_back(where);
}

void Importer::set_padding_idx(int i, const std::string& id) {
  const std::string& table = g_.node(i).input(0);
  std::optional<int64_t> padding;
  if (const int64_t traced = torch_embedding_padding_idx(g_.node(i)); traced >= 0) {
    padding = traced;
  }
  if (const auto given = options_.padding_idx.find(table); given != options_.padding_idx.end()) {
    padding = given->second;
    padding_given_.insert(table);
  }
  if (padding) {
    set_attr(op_by_id(id), "padding_idx", *padding);
    return;
  }
  if (dynamo_metadata_ || !warned_tables_.insert(table).second) return;
  // A legacy export keeps no trace of padding_idx; torch starts the padding row at zeros.
  if (const auto row = sole_zero_row(table)) {
    padding_hints_.push_back("'" + table + "' row " + std::to_string(*row));
  }
}

std::optional<int64_t> Importer::sole_zero_row(const std::string& table) const {
  const auto c = consts_.find(table);
  if (c == consts_.end() || c->second->data_type() != kOnnxFloat || c->second->dims_size() != 2) {
    return std::nullopt;
  }
  const onnx::TensorProto& t = *c->second;
  const int64_t rows = t.dims(0), width = t.dims(1);
  const bool raw = t.has_raw_data();
  if (rows < 2 || width < 1 ||
      (raw ? t.raw_data().size() : static_cast<size_t>(t.float_data_size()) * 4) !=
          static_cast<size_t>(rows * width) * 4) {
    return std::nullopt;  // (external data: not read here)
  }
  auto at = [&](int64_t k) {
    if (!raw) return t.float_data(static_cast<int>(k));
    float v;
    std::memcpy(&v, t.raw_data().data() + k * 4, 4);
    return v;
  };
  std::optional<int64_t> found;
  for (int64_t r = 0; r < rows; ++r) {
    bool zero = true;
    for (int64_t k = 0; k < width && zero; ++k) zero = at(r * width + k) == 0.0f;
    if (!zero) continue;
    if (found) return std::nullopt;  // several: not the mark of one padding row
    found = r;
  }
  return found;
}

std::string Importer::dropped_biases_warning() const {
  if (dropped_biases_.empty()) return "";
  constexpr size_t kNamed = 3;  // a 12-layer GPT-2 has 48: the count says the rest
  std::string named;
  for (size_t k = 0; k < std::min(kNamed, dropped_biases_.size()); ++k) {
    named += (k > 0 ? ", " : "") + dropped_biases_[k];
  }
  if (dropped_biases_.size() > kNamed) {
    named += " and " + std::to_string(dropped_biases_.size() - kNamed) + " more";
  }
  return std::to_string(dropped_biases_.size()) +
         " linear/convolution bias(es) have no tensor in the ONNX model (" + named +
         "): torch's ONNX optimiser drops all-zero ones. Each trains from zero, as in torch, and "
         "`export` writes it back as its node's bias input. Export from torch with "
         "optimize=False to keep them in the file.";
}

}  // namespace gp::model::onnx_detail
