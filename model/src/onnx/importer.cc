// The importer's driver: graph inputs, weights (initializers or export_params=False inputs),
// constant and shape folding, losses, and opaque nodes for --allow-opaque.
#include "onnx/importer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "gp/model/graph.h"
#include "gp/model/model_io.h"
#include "gp/model/onnx_file.h"
#include "gp/model/param_layout.h"
#include "ops_internal.h"

namespace gp::model {
namespace onnx_detail {

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    out +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-') ? c : '_';
  }
  while (!out.empty() && (out.front() == '_' || out.front() == '.')) out.erase(out.begin());
  return out;
}

namespace {
template <typename T>
void append_raw(const std::string& raw, std::vector<double>* v) {
  for (size_t i = 0; i + sizeof(T) <= raw.size(); i += sizeof(T)) {
    T x;
    std::memcpy(&x, raw.data() + i, sizeof(T));
    v->push_back(static_cast<double>(x));
  }
}
}  // namespace

std::vector<double> values_of(const onnx::TensorProto& t) {
  std::vector<double> v;
  switch (t.data_type()) {
    case kOnnxFloat:
      for (float f : t.float_data()) v.push_back(f);
      append_raw<float>(t.raw_data(), &v);
      break;
    case kOnnxDouble:
      for (double d : t.double_data()) v.push_back(d);
      append_raw<double>(t.raw_data(), &v);
      break;
    case kOnnxInt64:
      for (int64_t x : t.int64_data()) v.push_back(static_cast<double>(x));
      append_raw<int64_t>(t.raw_data(), &v);
      break;
    case kOnnxInt32:
      for (int32_t x : t.int32_data()) v.push_back(x);
      append_raw<int32_t>(t.raw_data(), &v);
      break;
    default:
      break;
  }
  return v;
}

const onnx::AttributeProto* attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}
int64_t attr_i(const onnx::NodeProto& n, const std::string& name, int64_t fallback) {
  const auto* a = attr(n, name);
  return a != nullptr ? a->i() : fallback;
}
double attr_f(const onnx::NodeProto& n, const std::string& name, double fallback) {
  const auto* a = attr(n, name);
  return a != nullptr ? a->f() : fallback;
}
std::string attr_s(const onnx::NodeProto& n, const std::string& name, const std::string& fallback) {
  const auto* a = attr(n, name);
  return a != nullptr ? a->s() : fallback;
}
std::vector<int64_t> attr_ints(const onnx::NodeProto& n, const std::string& name) {
  const auto* a = attr(n, name);
  if (a == nullptr) return {};
  return {a->ints().begin(), a->ints().end()};
}

Importer::Importer(const onnx::ModelProto& model, std::string path, OnnxImportOptions options)
    : g_(model.graph()),
      path_(std::move(path)),
      options_(std::move(options)),
      b_(sanitize(g_.name().empty() ? std::filesystem::path(path_).stem().string() : g_.name()),
         "imported from ONNX (" + model.producer_name() + " " + model.producer_version() + ")") {
  from_pytorch_ = model.producer_name() == "pytorch";
  for (const auto& o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = o.version();
  }
}

namespace {
// The product of the dims; -1 for a negative dim or a product that overflows.
int64_t element_count(const onnx::TensorProto& t) {
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}
// Elements actually stored (typed fields or raw bytes).
int64_t stored_count(const onnx::TensorProto& t) {
  const int64_t raw = static_cast<int64_t>(t.raw_data().size());
  switch (t.data_type()) {
    case kOnnxFloat:
      return t.float_data_size() + raw / 4;
    case kOnnxInt32:
      return t.int32_data_size() + raw / 4;
    case kOnnxInt64:
      return t.int64_data_size() + raw / 8;
    case kOnnxDouble:
      return t.double_data_size() + raw / 8;
    case kOnnxFloat16:
    case kOnnxBfloat16:
      return t.int32_data_size() + raw / 2;  // 16-bit values: one per int32_data entry
    default:
      return -1;  // not read as numbers
  }
}

// IEEE half-precision bits to float (subnormals, infinities and NaN included).
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

float bfloat16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Weights stored as float16, bfloat16 or float64 (a half-precision or double export), widened
// or rounded to the float32 the executor trains in. nullopt for other types, or when the count
// disagrees with the dims.
std::optional<std::vector<float>> widened_to_float(const onnx::TensorProto& t) {
  std::vector<float> v;
  const std::string& raw = t.raw_data();
  switch (t.data_type()) {
    case kOnnxDouble:
      for (double d : t.double_data()) v.push_back(static_cast<float>(d));
      for (size_t i = 0; i + 8 <= raw.size(); i += 8) {
        double d;
        std::memcpy(&d, raw.data() + i, 8);
        v.push_back(static_cast<float>(d));
      }
      break;
    case kOnnxFloat16:
    case kOnnxBfloat16: {
      const bool half = t.data_type() == kOnnxFloat16;
      auto widen = [&](uint16_t bits) {
        return half ? half_to_float(bits) : bfloat16_to_float(bits);
      };
      for (int32_t x : t.int32_data()) v.push_back(widen(static_cast<uint16_t>(x)));
      for (size_t i = 0; i + 2 <= raw.size(); i += 2) {
        uint16_t bits;
        std::memcpy(&bits, raw.data() + i, 2);
        v.push_back(widen(bits));
      }
      break;
    }
    default:
      return std::nullopt;
  }
  if (static_cast<int64_t>(v.size()) != element_count(t)) return std::nullopt;
  return v;
}
}  // namespace

// Weights must be in the file and whole: their values are imported.
Status Importer::check_initializers() const {
  for (const auto& t : g_.initializer()) {
    if (element_count(t) < 0) {
      std::string dims;
      for (int64_t d : t.dims()) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      return invalid_argument(path_ + ": initializer '" + t.name() + "' has dims [" + dims +
                              "], which are negative or hold more elements than int64 counts");
    }
    const int64_t stored = stored_count(t);
    if (stored >= 0 && stored != element_count(t)) {
      return invalid_argument(path_ + ": initializer '" + t.name() + "' holds " +
                              std::to_string(stored) + " values for dims of " +
                              std::to_string(element_count(t)) + " elements");
    }
  }
  return ok_status();
}

Result<ModelGraph> Importer::run() {
  for (const auto& t : g_.initializer()) consts_[t.name()] = &t;
  GP_RETURN_IF_ERROR(check_initializers());
  GP_RETURN_IF_ERROR(find_buffers());
  for (const auto* list : {&g_.input(), &g_.value_info(), &g_.output()}) {
    for (const auto& vi : *list) {
      shapes_[vi.name()] = dims_of(vi);
      if (vi.type().has_tensor_type()) elem_types_[vi.name()] = vi.type().tensor_type().elem_type();
    }
  }
  // Every ONNX operator has an output, and a mapped one at least its inputs. A node without them
  // is refused here and kept out of the consumer lists, so that no pattern or fusion reads it.
  done_.assign(static_cast<size_t>(g_.node_size()), false);
  for (int i = 0; i < g_.node_size(); ++i) {
    const auto& n = g_.node(i);
    std::string malformed;
    if (n.output_size() == 0 || n.output(0).empty()) {
      malformed = "has no output";
    } else if (const int need = min_inputs(n.op_type()); n.input_size() < need) {
      malformed = "has " + std::to_string(n.input_size()) + " input(s), needs at least " +
                  std::to_string(need);
    }
    if (!malformed.empty()) {
      done_[static_cast<size_t>(i)] = true;
      unsupported_.push_back(where(i) + ": " + malformed);
      continue;
    }
    for (const auto& in : g_.node(i).input()) consumers_[in].push_back(i);
    // A Loop or If whose body reads a tensor consumes it too.
    for (const auto& in : subgraph_reads(g_.node(i))) {
      if (auto& c = consumers_[in]; c.empty() || c.back() != i) c.push_back(i);
    }
    for (const auto& out : g_.node(i).output()) producer_[out] = i;
  }
  // (A malformed node refused above explains its readers' missing inputs better.)
  if (unsupported_.empty()) GP_RETURN_IF_ERROR(check_defined());
  fold_constants();
  find_weight_inputs();
  find_folded_transposes();
  find_held_parameters();
  GP_RETURN_IF_ERROR(check_weight_sharing());
  find_ragged_bags();
  for (const auto& in : g_.input()) {
    if (consts_.count(in.name()) || weight_inputs_.count(in.name())) continue;
    if (ragged_by_input(in.name(), /*offsets=*/true)) continue;  // folded into the ids
    auto dims = dims_of(in);
    if (const auto* bag = ragged_by_input(in.name(), /*offsets=*/false)) {
      // Per sample: max_bag ids padded with -1; the batch is the number of offsets.
      const std::string id = unique_id(in.name(), "input");
      act_[in.name()] = b_.input(id, {options_.max_bag}, graphpipe::v1::DATA_TYPE_INT64);
      set_attr(op_by_id(id), "ragged_offsets", std::string_view(bag->offsets));
      for (const auto& other : g_.input()) {
        if (other.name() == bag->offsets) dims = dims_of(other);
      }
    } else {
      GP_RETURN_IF_ERROR(add_input(in));
    }
    // A static export traces one batch size into every data input (and into its reshapes).
    const int64_t b = dims.empty() ? 0 : dims[0];
    static_batch_ = act_.size() == 1 || b == static_batch_ ? b : -1;
  }
  if (static_batch_ < 0) static_batch_ = 0;
  infer_new_ops(0);
  find_patterns();
  for (int i = 0; i < g_.node_size(); ++i) {
    if (done_[static_cast<size_t>(i)]) continue;
    if (fold(g_.node(i))) {  // e.g. the Shape of an activation known only now
      done_[static_cast<size_t>(i)] = true;
      continue;
    }
    if (fold_weight_map(i)) {
      done_[static_cast<size_t>(i)] = true;
      continue;
    }
    if (deferred_.count(i)) {  // a scatter's indices, evaluated by the scatter (scatter.cc)
      done_[static_cast<size_t>(i)] = true;
      continue;
    }
    if (match_attention_views(i)) continue;  // claims its nodes, emitted at its last one
    const int first = b_.model().ops_size();
    convert(i);
    infer_new_ops(first);
    for (const auto& o : g_.node(i).output()) layout_of(o);  // in order: no deep derivations
  }
  if (!unsupported_.empty()) {
    std::string list;
    for (const auto& u : unsupported_) list += "\n  " + u;
    const std::string hint = options_.allow_opaque
                                 ? ""
                                 : "\n(graphpipe-plan import --allow-opaque keeps such nodes as "
                                   "opaque operators: planning only, no training)";
    return invalid_argument(path_ + ": " + std::to_string(unsupported_.size()) +
                            " ONNX node(s) have no GraphPipe operator:" + list + hint);
  }
  if (auto why = folded_parameters_refused(); !why.empty()) return invalid_argument(why);
  for (const auto& [table, row] : options_.padding_idx) {
    if (!padding_given_.count(table)) {
      return invalid_argument("--padding-idx '" + table + "=" + std::to_string(row) + "': no " +
                              "embedding lookup of " + path_ + " reads '" + table + "'");
    }
  }
  if (!padding_hints_.empty() && options_.warnings != nullptr) {
    std::string tables;
    for (const auto& h : padding_hints_) tables += (tables.empty() ? "" : ", ") + h;
    options_.warnings->push_back(
        "embedding table(s) with one all-zero row (" + tables +
        "), as torch starts nn.Embedding(padding_idx=...)'s padding row: this export does not "
        "say padding_idx (the legacy exporter keeps none), so that row trains like any other. "
        "If it is a padding row, import with --padding-idx TABLE=ROW (torch never trains it), or "
        "export with dynamo=True");
  }
  if (auto dropped = dropped_biases_warning(); !dropped.empty() && options_.warnings != nullptr) {
    options_.warnings->push_back(dropped);
  }
  if (eval_batch_norms_ > 0 && options_.warnings != nullptr) {
    options_.warnings->push_back(
        std::to_string(eval_batch_norms_) +
        " BatchNormalization node(s) (first: " + first_eval_batch_norm_ +
        ") were exported in eval mode, normalising with the running statistics; GraphPipe "
        "trains batch norm with each micro-batch's statistics, so the imported model's forward "
        "pass is the train-mode one (export with training=torch.onnx.TrainingMode.TRAINING, or "
        "dynamo=True with the module in train mode, to say so)");
  }
  GP_RETURN_IF_ERROR(check_packed_slices());
  GP_RETURN_IF_ERROR(tie_copies());
  GP_RETURN_IF_ERROR(add_losses());
  b_.set_source(path_);
  // Moved, not copied: the weights can be most of the memory there is.
  ModelGraph model = std::move(b_.model());
  fold_slices_into_transposes(&model);
  fold_into_matmuls(&model);
  drop_unread_ops(&model);
  GP_RETURN_IF_ERROR(validate_without_copying_weights(model));
  return model;
}

// Graph::build validates a copy of the model; the parameters' values wait aside meanwhile and
// are checked against the parameters it inferred. Values of names that are no parameter (a
// constant's buffer) go back first, and the graph is built again with them.
Status Importer::validate_without_copying_weights(ModelGraph& model) const {
  struct Aside {
    int op;
    std::string name;
    std::string bytes;
    bool back = false;
  };
  std::vector<Aside> aside;
  for (int i = 0; i < model.ops_size(); ++i) {
    auto* values = model.mutable_ops(i)->mutable_param_values();
    for (auto& [name, bytes] : *values) aside.push_back({i, name, std::move(bytes)});
    values->clear();
  }
  const auto put_back = [&model](Aside& a) {
    (*model.mutable_ops(a.op)->mutable_param_values())[a.name] = std::move(a.bytes);
    a.back = true;
  };
  auto built = Graph::build(model);
  Status checked = built.status();
  bool buffers = false;
  for (auto& a : aside) {
    if (!checked.ok()) break;
    const Operator& op = *built->op(a.op).proto;
    const auto spec = std::find_if(op.params().begin(), op.params().end(),
                                   [&a](const auto& p) { return p.name() == a.name; });
    if (spec == op.params().end()) {
      buffers = true;
      put_back(a);
      continue;
    }
    checked = detail::check_param_value_size(a.op, op, a.name, a.bytes.size(), *spec);
  }
  if (checked.ok() && buffers) checked = Graph::build(model).status();
  for (auto& a : aside) {
    if (!a.back) put_back(a);
  }
  if (!checked.ok()) return checked.with_context(path_ + " (imported from ONNX)");
  return ok_status();
}

Status Importer::check_defined() const {
  std::set<std::string> defined;
  for (const auto& in : g_.input()) defined.insert(in.name());
  for (const auto& t : g_.initializer()) defined.insert(t.name());
  // A graph input may name an initializer (its default value); a node output is its only
  // definition. torch's exporter reuses a buffer's name for an op's result when they are alike
  // ("index"), and which of the two a reader means is then anyone's guess.
  for (int i = 0; i < g_.node_size(); ++i) {
    for (const auto& out : g_.node(i).output()) {
      if (!out.empty() && !defined.insert(out).second) {
        return invalid_argument(path_ + ": tensor '" + out + "' is defined twice, the second " +
                                "time as an output of " + where(i) +
                                ": not a valid ONNX model (a torch exporter names a buffer and an "
                                "op's result alike; rename the buffer)");
      }
    }
  }
  std::string first;
  int undefined = 0;
  for (const auto& [name, readers] : consumers_) {
    if (name.empty() || defined.count(name) || producer_.count(name)) continue;
    if (undefined++ == 0) first = "'" + name + "' (read by " + where(readers.front()) + ")";
  }
  if (undefined == 0) return ok_status();
  return invalid_argument(
      path_ + ": " + std::to_string(undefined) +
      " tensor(s) are read but defined nowhere (no graph " +
      "input, initializer or node output), first " + first +
      ": not a valid ONNX model. torch.onnx.export(dynamo=True, export_params=False) writes " +
      "such graphs, without the weights or their shapes; export with the weights, or with " +
      "dynamo=False for a graph whose weights are inputs");
}

std::vector<int64_t> Importer::dims_of(const onnx::ValueInfoProto& vi) {
  std::vector<int64_t> dims;
  if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) return dims;
  for (const auto& d : vi.type().tensor_type().shape().dim()) {
    dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
  }
  return dims;
}

bool Importer::batch_first(const onnx::ValueInfoProto& in) {
  const auto& shape = in.type().tensor_type().shape();
  return shape.dim_size() > 0 && !shape.dim(0).has_dim_value();
}

bool Importer::is_weight(const std::string& name) const {
  return consts_.count(name) || weight_inputs_.count(name) || view_dims_.count(name);
}

std::vector<int64_t> Importer::weight_dims(const std::string& name) const {
  if (auto it = consts_.find(name); it != consts_.end()) {
    return {it->second->dims().begin(), it->second->dims().end()};
  }
  if (auto it = view_dims_.find(name); it != view_dims_.end()) return it->second;
  for (const auto& in : g_.input()) {
    if (in.name() == name) return dims_of(in);
  }
  return {};
}

// Graph inputs without initializer that an operator consumes as a weight or bias
// (export_params=False); an input whose first dimension is symbolic is data.
void Importer::find_weight_inputs() {
  std::set<std::string> candidates, expanded;
  // Every node, in Loop and If bodies too (torch's EmbeddingBag gathers its table inside a Loop).
  auto read_as_weight = [&](const onnx::NodeProto& n) {
    const std::string& t = n.op_type();
    auto take = [&](int i) {
      if (i >= n.input_size() || n.input(i).empty()) return;
      // Through the Identity and Transpose views of a weight, to the graph input.
      std::string name = n.input(i);
      for (int hops = 0; hops < 8; ++hops) {
        candidates.insert(name);
        const int p = producer(name);
        if (p < 0) break;
        const auto& pn = g_.node(p);
        if ((pn.op_type() == "Identity" || pn.op_type() == "Transpose") && pn.input_size() == 1) {
          name = pn.input(0);
        } else if (std::string packed = sliced_source(name); !packed.empty()) {
          name = std::move(packed);
        } else {
          break;
        }
      }
    };
    if (t == "Gemm" || t == "Conv" || t == "ConvTranspose" || t == "LayerNormalization") {
      take(1), take(2);
    }
    if (t == "BatchNormalization") take(1), take(2), take(3), take(4);
    if (t == "MatMul") take(1);
    if (t == "Gather") take(0);
    // A recurrent layer's W, R and B: torch's exports slice its own gate order out of the
    // parameters and concatenate them in ONNX's, so every graph input under them is a weight
    // (the nodes flat_weight follows back when the layer is imported).
    if (t == "LSTM" || t == "GRU") {
      std::vector<std::string> todo;
      for (int k = 1; k <= 3 && k < n.input_size(); ++k) todo.push_back(n.input(k));
      for (size_t j = 0; j < todo.size() && j < 256; ++j) {
        candidates.insert(todo[j]);
        const int p = producer(todo[j]);
        if (p < 0) continue;
        const auto& pn = g_.node(p);
        const std::string& pt = pn.op_type();
        if (pt == "Concat") {
          for (const auto& in : pn.input()) todo.push_back(in);
        } else if (recurrent_weight_view(pt) && pn.input_size() > 0) {
          todo.push_back(pn.input(0));
        }
      }
    }
    // A learned tensor expanded over the batch (ViT's class token [1, 1, dim]).
    if (t == "Expand" && n.input_size() > 0) expanded.insert(n.input(0));
  };
  for (const auto& n : g_.node()) visit_nested(n, read_as_weight);
  for (const auto& in : g_.input()) {
    if (consts_.count(in.name()) || batch_first(in)) continue;
    const auto dims = dims_of(in);
    if (candidates.count(in.name()) ||
        (expanded.count(in.name()) && dims.size() >= 2 && dims[0] == 1)) {
      weight_inputs_.insert(in.name());
    }
  }
  // A bias (Add) or scale (Mul, decomposed layer norm) given as a 1-D input; a learned position
  // embedding (Add) broadcast over the batch: size 1 first, or of lower rank than the other side
  // (a static export's data input has the traced batch first, and the full rank).
  for (const auto& n : g_.node()) {
    if ((n.op_type() != "Add" && n.op_type() != "Mul") || n.input_size() != 2) continue;
    for (int k = 0; k < 2; ++k) {
      const std::string packed = sliced_source(n.input(k));
      for (const auto& in : g_.input()) {
        const bool read = in.name() == n.input(k) || in.name() == packed;  // or a block of it
        if (!read || consts_.count(in.name()) || batch_first(in)) continue;
        const auto dims = dims_of(in);
        const auto other = shapes_.find(n.input(1 - k));
        const bool broadcast =
            n.op_type() == "Add" && dims.size() >= 2 &&
            (dims[0] == 1 || (other != shapes_.end() && dims.size() < other->second.size()));
        if (dims.size() == 1 || broadcast) weight_inputs_.insert(in.name());
      }
    }
  }
  // In an export without weights (others are graph inputs), a scalar input (CLIP's logit_scale)
  // is one too: it carries no batch axis, so it is no data input.
  if (!weight_inputs_.empty()) {
    for (const auto& in : g_.input()) {
      if (!consts_.count(in.name()) && in.type().tensor_type().has_shape() &&
          in.type().tensor_type().shape().dim_size() == 0) {
        weight_inputs_.insert(in.name());
        // Trained like a scalar initializer of an export with weights.
        if (in.type().tensor_type().elem_type() == kOnnxFloat && !is_buffer(in.name())) {
          scalar_params_.insert(in.name());
        }
      }
    }
  }
  for (int i = 0; i < g_.node_size(); ++i) {
    if (!done_[static_cast<size_t>(i)] && fold_weight_view(g_.node(i))) {
      done_[static_cast<size_t>(i)] = true;
    }
  }
}

bool Importer::fold_weight_view(const onnx::NodeProto& n) {
  const std::string& t = n.op_type();
  if ((t != "Identity" && t != "Transpose") || n.input_size() != 1 || n.output_size() < 1 ||
      !is_weight(n.input(0))) {
    return false;
  }
  const std::string& in = n.input(0);
  const std::string& out = n.output(0);
  std::vector<int64_t> dims = weight_dims(in);
  if (t == "Transpose") {
    std::vector<int64_t> perm = attr_ints(n, "perm");
    if (perm.empty()) perm = {1, 0};  // ONNX's default reverses the axes
    if (dims.size() != 2 || perm != std::vector<int64_t>{1, 0}) return false;
    std::swap(dims[0], dims[1]);
  } else if (auto c = consts_.find(in); c != consts_.end()) {
    consts_[out] = c->second;  // an alias with the same values
    if (auto v = folded(in)) folded_[out] = *v;
  }
  // The values stay where they are: take() reads them through the view.
  view_of_[out] = {in, t == "Transpose"};
  view_dims_[out] = dims;
  return true;
}

Importer::ViewOf Importer::resolve_view(const std::string& name) const {
  ViewOf r{name, false, name, false};
  // The source: through Transposes only. An Identity view is a parameter of its own (torch
  // de-duplicates parameters of equal values into one initializer and Identity nodes).
  for (auto it = view_of_.find(r.source); it != view_of_.end() && it->second.second;
       it = view_of_.find(r.source)) {
    r.source_transposed = !r.source_transposed;
    r.source = it->second.first;
  }
  // The values: through every view, to the first tensor that has them.
  for (auto it = view_of_.find(r.values); !consts_.count(r.values) && it != view_of_.end();
       it = view_of_.find(r.values)) {
    r.values_transposed = r.values_transposed != it->second.second;
    r.values = it->second.first;
  }
  return r;
}

std::vector<int> weight_positions(const onnx::NodeProto& n) {
  const std::string& t = n.op_type();
  if (t == "Gemm" || t == "Conv" || t == "ConvTranspose" || t == "LayerNormalization") {
    return {1, 2};
  }
  if (t == "BatchNormalization") return {1, 2};
  if (t == "MatMul") return {1};
  if (t == "Gather") return {0};
  if (t == "Add" || t == "Sub" || t == "Mul" || t == "Div" || t == "Pow" || t == "Max" ||
      t == "Min") {
    return {0, 1};
  }
  if (t == "Where") return {1, 2};
  // A function of a trained weight (trained_operand: CLIP's and Swin V2's logit scales).
  static const std::set<std::string> kOfWeight = {
      "Clip", "Exp",     "Log",  "Neg", "Sqrt",     "Abs",       "Sin",
      "Cos",  "Sigmoid", "Tanh", "Erf", "Softplus", "Reciprocal"};
  if (kOfWeight.count(t)) return {0};
  return {};
}

Status Importer::check_weight_sharing() {
  std::map<std::string, std::vector<int>> readers;
  for (int i = 0; i < g_.node_size(); ++i) {
    const auto& n = g_.node(i);
    for (int k : weight_positions(n)) {
      if (k >= n.input_size() || n.input(k).empty() || !is_weight(n.input(k))) continue;
      // A reader through a Transpose (train-mode exports) reads the weight under it.
      const std::string name = resolve_view(n.input(k)).source;
      // Scalars (shape arithmetic, constant factors) are not parameters, but for the trained
      // ones (a learned temperature read twice trains as one).
      if (product(weight_dims(name)) <= 1 && !scalar_params_.count(name)) continue;
      readers[name].push_back(i);
      // The legacy exporter's constant folding copies a weight (transposed) once per reader,
      // and its de-duplication joins equal copies by an Identity: one module used twice, or
      // modules of equal values (nn.TransformerEncoder's copied layers), which the file does
      // not tell apart. They import as parameters of their own; the user is told how to tie.
      const auto& in = n.input(k);
      const auto view = view_of_.find(in);
      if (view != view_of_.end() && !view->second.second && in.rfind("onnx::", 0) == 0 &&
          view->second.first.rfind("onnx::", 0) == 0 && options_.warnings != nullptr) {
        options_.warnings->push_back(
            where(i) + ": its weight '" + in + "' is the exporter's copy of '" +
            view->second.first +
            "' (constant folding de-duplicated by an Identity): imported as a parameter of its "
            "own, as for modules of equal values; if one module is used twice, export with "
            "do_constant_folding=False to train it as one weight");
      }
    }
  }
  for (const auto& [name, nodes] : readers) {
    if (nodes.size() < 2) continue;
    // Each reader gets its own copy; tie_copies() ties them after conversion.
    shared_weights_[name] = nodes;
    std::string who;
    for (int i : nodes) who += (who.empty() ? "" : ", ") + where(i);
    if (options_.untie_weights && options_.warnings != nullptr) {
      options_.warnings->push_back("weight '" + name + "' is tied across " + who +
                                   "; imported as independent copies (--untie-weights)");
    }
  }
  for (int i = 0; i < g_.node_size(); ++i) {
    const auto& n = g_.node(i);
    if (n.op_type() != "Conv" || n.input_size() < 2 || !is_weight(n.input(1))) continue;
    // torch names the tensors its constant folding makes "onnx::<Op>_<n>": in an eval-mode
    // export a conv weight made that way has a BatchNormalization folded into it. torch 2.x's
    // optimiser folds it under the conv's own names and says so in the node's metadata.
    const bool legacy_fold = n.input(1).rfind("onnx::", 0) == 0;
    const bool dynamo_fold =
        model::onnx_node_metadata(n, "pkg.onnxscript.rewriter.rule_name").find("FuseBatchNorm") !=
        std::string::npos;
    if ((legacy_fold || dynamo_fold) && options_.warnings != nullptr) {
      options_.warnings->push_back(
          where(i) + ": its weight '" + n.input(1) +
          (legacy_fold ? "' was made by the exporter's constant folding, which in an eval-mode "
                         "export folds a BatchNormalization into the convolution"
                       : "' holds a BatchNormalization that torch 2.x's ONNX optimiser folded "
                         "into the convolution (in train mode too)") +
          "; training trains the folded model (no batch norm). " +
          (legacy_fold ? "Export with training=torch.onnx.TrainingMode.TRAINING"
                       : "Export with dynamo=True, optimize=False") +
          " to train the original");
    }
  }
  return ok_status();
}

Status Importer::add_input(const onnx::ValueInfoProto& in) {
  const auto dims = dims_of(in);
  if (dims.empty()) {
    return invalid_argument(path_ + ": graph input '" + in.name() +
                            "' has no shape (export with input shapes)");
  }
  std::vector<int64_t> per_sample(dims.begin() + 1, dims.end());
  for (int64_t d : per_sample) {
    if (d <= 0) {
      return invalid_argument(path_ + ": graph input '" + in.name() +
                              "': only the first (batch) dimension may be symbolic");
    }
  }
  if (per_sample.empty()) per_sample.push_back(1);
  const int et = in.type().tensor_type().elem_type();
  const auto dtype = et == kOnnxInt64   ? graphpipe::v1::DATA_TYPE_INT64
                     : et == kOnnxInt32 ? graphpipe::v1::DATA_TYPE_INT32
                                        : graphpipe::v1::DATA_TYPE_FLOAT32;
  act_[in.name()] = b_.input(unique_id(in.name(), "input"), per_sample, dtype);
  return ok_status();
}

// Small constants and the shape arithmetic of dynamic-batch exports (Shape -> Gather ->
// Unsqueeze -> Concat -> Reshape) are evaluated here; the batch size stays symbolic (kBatchDim),
// and arithmetic on it gives NaN (unknown).
void Importer::fold_constants() {
  for (const auto& [name, t] : consts_) {
    const int64_t count = element_count(*t);
    if (t->dims_size() > 1 || count < 0 || count > 64) continue;  // shape math is 0-D and 1-D
    folded_[name] = values_of(*t);
    if (t->data_type() == kOnnxInt64 || t->data_type() == kOnnxInt32) folded_int_.insert(name);
  }
  for (int i = 0; i < g_.node_size(); ++i) {
    if (fold(g_.node(i))) done_[static_cast<size_t>(i)] = true;
  }
}

bool Importer::fold(const onnx::NodeProto& n) {
  if (n.output_size() < 1 || n.output(0).empty()) return false;
  if (fold_split(n)) return true;
  const bool flat = fold_flat(n);
  // A weight view stays a weight; a Shape's tensor is written by fold_flat.
  const bool view = view_of_.count(n.output(0)) || slice_of_.count(n.output(0));
  if (flat && (view || n.op_type() == "Shape")) return true;
  if (!fold_tensor(n, flat)) {
    // A float computed from a trained weight is trained, not shape math: what fold_flat made of
    // a small 1-D one is let go (w > 0 cast to float, of a w that also trains, would freeze).
    const auto why = fold_errors_.find(n.output(0));
    if (flat && why != fold_errors_.end() && why->second == kFromTrainedWeight) {
      folded_.erase(n.output(0));
      folded_int_.erase(n.output(0));
      return false;
    }
    return flat;
  }
  // A folded tensor no other node reads is let go (masks of long sequences are large).
  const int self = producer(n.output(0));
  for (const auto& in : n.input()) {
    const auto readers = consumers_.find(in);
    // (A value held per sample stays: tensor_at_batch repeats it for other batches.)
    if (!tensors_.count(in) || sample_consts_.count(in) || readers == consumers_.end()) continue;
    if (std::all_of(readers->second.begin(), readers->second.end(),
                    [&](int c) { return c == self || done_[static_cast<size_t>(c)]; }) &&
        only_consumers_in(in, {readers->second.begin(), readers->second.end()})) {
      tensors_.erase(in);
    }
  }
  return true;
}

bool Importer::fold_flat(const onnx::NodeProto& n) {
  const std::string& t = n.op_type();
  std::vector<double> out;
  if (t == "Constant") {
    const auto* a = n.attribute_size() > 0 ? &n.attribute(0) : nullptr;
    if (a == nullptr) return false;
    if (a->has_t()) {
      consts_[n.output(0)] = &a->t();
      if (a->t().dims_size() > 1) return true;  // a weight, not shape math
      out = values_of(a->t());
      if (a->t().data_type() == kOnnxInt64 || a->t().data_type() == kOnnxInt32) {
        folded_int_.insert(n.output(0));
      }
    } else if (auto v = constant_attr_value(n)) {
      out = std::move(v->values);
      if (v->ints) folded_int_.insert(n.output(0));
    } else {
      return false;
    }
    folded_[n.output(0)] = std::move(out);
    return true;
  }
  if (t == "Shape") {
    if (n.input_size() < 1) return false;
    // A weight's dims are all known (torch 2.x's unoptimised exports read a conv's channel
    // count this way); an activation's first dim is the batch.
    // A folded list (shape arithmetic reading its own length) has all its dims known too.
    // So has a folded tensor (an index buffer reshaped, the shape of which torch reads).
    // So has a weight with its elements moved (BEiT sizes its table's interpolation so).
    const auto known = folded_dims(n.input(0));
    const auto map = weight_maps_.find(n.input(0));
    const bool weight = map != weight_maps_.end() || is_weight(n.input(0)) || folded(n.input(0)) ||
                        tensors_.count(n.input(0)) > 0;
    auto dims = map != weight_maps_.end() ? std::optional(map->second.index.dims)
                : known                   ? known
                : is_weight(n.input(0))   ? std::optional(weight_dims(n.input(0)))
                                          : onnx_shape(n.input(0));
    // A value computed from the batch size that is no activation (a scatter's indices,
    // scatter.cc; the batch's arange): its dims for each batch, the batch where it is.
    // (Else, or where it cannot be evaluated, as any other value: a mark made before the value
    // was known does not stop that.)
    std::optional<std::vector<double>> probed;
    if (deferred_.count(producer(n.input(0))) ||
        (batch_dependent_.count(n.input(0)) &&
         (!act_.count(n.input(0)) || laid_constants_.count(n.input(0))))) {
      probed = index_value_dims(n.input(0));
    }
    if (probed) {
      out = std::move(*probed);
    } else {
      if (!dims || dims->empty()) return false;
      // An activation's batch is where its layout has it (unknown where per-sample dims are
      // folded into it); a tensor not converted yet waits for its conversion (its batch may
      // have moved), unless it is a graph input.
      std::optional<int64_t> batch;
      double batch_value = kBatchDim;
      if (!weight && act_.count(n.input(0))) {
        batch = batch_axis(n.input(0));
        if (layout_of(n.input(0)).folded() > 0) batch_value = NAN;
      } else if (sample_consts_.count(n.input(0)) || (!weight && is_data_input(n.input(0)))) {
        batch = 0;
      } else if (!weight) {
        return false;
      }
      for (size_t d = 0; d < dims->size(); ++d) {
        const int64_t v = (*dims)[d];
        out.push_back(batch && static_cast<int64_t>(d) == *batch ? batch_value
                      : v > 0                                    ? static_cast<double>(v)
                                                                 : NAN);
      }
    }
    folded_[n.output(0)] = shape_range(n, out);
    folded_int_.insert(n.output(0));
    // As a tensor: the batch size is NaN there (arithmetic on it stays unknown).
    EvalTensor dims_tensor{{0}, folded_[n.output(0)], true};
    for (double& v : dims_tensor.values) v = v == kBatchDim ? NAN : v;
    dims_tensor.dims[0] = static_cast<int64_t>(dims_tensor.values.size());
    tensors_[n.output(0)] = std::move(dims_tensor);
    return true;
  }
  if (fold_weight_view(n) || fold_weight_slice(n)) return true;
  if (t == "CastLike" && n.input_size() == 2) {  // a constant cast to an activation's type
    auto v = folded(n.input(0));
    if (!v) return false;
    folded_[n.output(0)] = *v;
    if (folded_int_.count(n.input(0))) folded_int_.insert(n.output(0));
    return true;
  }
  auto value = fold_node(n, [this](const std::string& name) -> std::optional<FoldedValue> {
    auto v = folded(name);
    if (!v) return std::nullopt;
    return FoldedValue{*v, folded_int_.count(name) > 0};
  });
  if (!value) return false;
  folded_[n.output(0)] = std::move(value->values);
  if (value->ints) folded_int_.insert(n.output(0));
  return true;
}

namespace {

bool float_type(int t) {
  return t == kOnnxFloat || t == kOnnxDouble || t == kOnnxFloat16 || t == kOnnxBfloat16;
}

bool compare_type(const std::string& t) {
  return t == "Equal" || t == "Less" || t == "LessOrEqual" || t == "Greater" ||
         t == "GreaterOrEqual";
}

// Casts to an integer or boolean type (ONNX's element types 2 to 7, 9, 12 and 13).
bool integer_cast(const onnx::NodeProto& n) {
  const int64_t to = attr_i(n, "to", kOnnxFloat);
  return n.op_type() == "Cast" && ((to >= 2 && to <= 7) || to == 9 || to == 12 || to == 13);
}

// The element-wise types fold_tensor evaluates: values pass through them position by position.
const std::set<std::string>& elementwise_folds() {
  static const std::set<std::string> kTypes = {
      "Identity", "Cast",  "CastLike",   "Neg",     "Not",         "Add",
      "Sub",      "Mul",   "Div",        "Pow",     "Max",         "Min",
      "Mod",      "Equal", "Less",       "Greater", "LessOrEqual", "GreaterOrEqual",
      "And",      "Or",    "Xor",        "Where",   "Sqrt",        "Exp",
      "Log",      "Abs",   "Reciprocal", "Floor",   "Ceil",        "Sin",
      "Cos",      "Erf",   "Relu",       "Sigmoid", "Tanh",        "Softplus",
      "Concat",   "Size"};
  return kTypes;
}

// Every type fold_tensor evaluates (graph_eval.cc's tensor ops).
bool foldable(const std::string& t) {
  static const std::set<std::string> kOthers = {
      "Constant",  "Range",      "Reshape",   "Squeeze",    "Unsqueeze",
      "Expand",    "Gather",     "Slice",     "Trilu",      "ConstantOfShape",
      "Transpose", "Flatten",    "ReduceSum", "ReduceMean", "ReduceMax",
      "ReduceMin", "ReduceProd", "Einsum",    "GatherND",   "GatherElements",
      "ScatterND", "Tile",       "CumSum"};
  return elementwise_folds().count(t) > 0 || kOthers.count(t) > 0;
}

// Whether input k of an op of type t is a size, an index or axes (a NaN there, the unknown batch
// size, folds nothing) rather than values that pass through element by element.
bool size_input(const std::string& t, int k) {
  if (t == "Range" || t == "ConstantOfShape") return true;
  return !elementwise_folds().count(t) && k >= 1;
}

}  // namespace

std::optional<EvalTensor> Importer::const_tensor(const std::string& name) const {
  if (auto it = tensors_.find(name); it != tensors_.end()) return it->second;
  if (act_.count(name)) return std::nullopt;
  if (auto it = consts_.find(name); it != consts_.end()) {
    // Read when needed, not kept: weights can be large.
    auto v = eval_tensor_of(*it->second, kMaxFoldElements);
    if (!v.ok()) return std::nullopt;
    return std::move(*v);
  }
  if (auto it = folded_.find(name); it != folded_.end()) {
    // Shape math folded flat (its tensor was not computed): a scalar when it holds one value.
    EvalTensor t{{}, it->second, folded_int_.count(name) > 0};
    if (t.values.size() != 1) t.dims = {static_cast<int64_t>(t.values.size())};
    for (double& v : t.values) v = v == kBatchDim ? NAN : v;
    return t;
  }
  return std::nullopt;
}

Status Importer::find_buffers() {
  for (const auto& [name, row] : options_.padding_idx) {
    const auto c = consts_.find(name);
    const std::string what = "--padding-idx '" + name + "=" + std::to_string(row) + "': ";
    if (c == consts_.end() && !weight_inputs_.count(name)) {
      return invalid_argument(what + path_ + " has no initializer of that name");
    }
    const auto dims = weight_dims(name);
    if (dims.size() != 2) {
      return invalid_argument(what + "'" + name + "' is not a 2-D embedding table (" +
                              std::to_string(dims.size()) + " dimensions)");
    }
    if (row < -dims[0] || row >= dims[0]) {
      return invalid_argument(what + "row " + std::to_string(row) + " is out of range for " +
                              std::to_string(dims[0]) + " rows");
    }
  }
  for (const auto& name : options_.freeze) {
    if (!consts_.count(name)) {
      return invalid_argument("--freeze '" + name + "': " + path_ +
                              " has no initializer of that name");
    }
    buffers_.insert(name);
  }
  // torch.export names a buffer's placeholder b_<fully qualified name, dots as underscores>, a
  // parameter's p_<name>.
  std::set<std::string> placeholders;
  for (const auto& n : g_.node()) {
    const std::string fx = model::onnx_node_metadata(n, "pkg.torch.onnx.fx_node");
    if (!fx.empty()) dynamo_metadata_ = true;
    for (auto& name : fx_names(fx)) placeholders.insert(std::move(name));
  }
  classify_torch_initializers();
  for (const auto& [name, t] : consts_) {
    if (placeholders.count(fx_name("b_", name))) buffers_.insert(name);
    if (infinite_mask(name)) buffers_.insert(name);
    // A scalar parameter (CLIP's logit_scale) is trained like any other: torch 2.x marks it; in
    // torch's legacy export every initializer is the module's state (a parameter or a buffer)
    // but the exporter's own constants, named onnx::*. Other files' scalars are constants.
    const bool marked = dynamo_metadata_ ? placeholders.count(fx_name("p_", name)) > 0
                                         : from_pytorch_ && name.find("::") == std::string::npos;
    if (element_count(*t) == 1 && float_type(t->data_type()) && marked && !is_buffer(name)) {
      scalar_params_.insert(name);
      if (!dynamo_metadata_ && options_.warnings != nullptr) {
        options_.warnings->push_back("scalar initializer '" + name +
                                     "' is trained as a parameter (a torch export's initializers "
                                     "are the module's state); if it is a registered buffer, "
                                     "import with --freeze " +
                                     name);
      }
    }
  }
  return ok_status();
}

bool Importer::param_like(const std::string& name) const {
  if (is_buffer(name)) return false;
  if (scalar_params_.count(name)) return true;
  if (const int p = producer(name); p >= 0 && g_.node(p).op_type() == "Constant") return false;
  if (auto v = view_of_.find(name); v != view_of_.end()) return param_like(v->second.first);
  if (slice_of_.count(name)) return true;  // a slice of a trained weight
  if (weight_inputs_.count(name)) {
    int64_t elements = 1;
    for (int64_t d : weight_dims(name)) elements *= d;
    return elements != 1;
  }
  const auto it = consts_.find(name);
  return it != consts_.end() && float_type(it->second->data_type()) &&
         element_count(*it->second) > 1;
}

namespace {

// Visits `start` and the tensors `step` adds, each once (paths rejoin: Swin's mask is a chain
// of slice assignments, and following every path would take exponential time); false as soon
// as `step` is, and beyond 4096 tensors.
bool visit_tensors(
    const std::string& start,
    const std::function<bool(const std::string&, std::vector<std::string>* next)>& step) {
  constexpr size_t kMaxTensors = 4096;
  std::set<std::string> seen;
  std::vector<std::string> todo = {start};
  while (!todo.empty()) {
    const std::string tensor = std::move(todo.back());
    todo.pop_back();
    if (!seen.insert(tensor).second) continue;
    if (seen.size() > kMaxTensors || !step(tensor, &todo)) return false;
  }
  return true;
}

}  // namespace

bool Importer::readers_only(const std::string& name, const NodeTest& end,
                            const NodeTest& through) const {
  return visit_tensors(name, [&](const std::string& tensor, std::vector<std::string>* next) {
    const auto it = consumers_.find(tensor);
    if (it == consumers_.end() ||
        !only_consumers_in(tensor, std::set<int>(it->second.begin(), it->second.end()))) {
      return false;  // (also a graph output)
    }
    for (int c : it->second) {
      const auto& n = g_.node(c);
      if (end(n, tensor)) continue;
      if (!through(n, tensor) || n.output_size() < 1 || n.output(0).empty()) return false;
      next->push_back(n.output(0));
    }
    return true;
  });
}

bool Importer::only_compared_weights(const std::string& name) const {
  return visit_tensors(name, [&](const std::string& tensor, std::vector<std::string>* next) {
    const int p = producer(tensor);
    if (p < 0) return !param_like(tensor) || feeds_only_masks(tensor);
    for (const auto& in : g_.node(p).input()) {
      if (!in.empty() && (param_dep_.count(in) || param_like(in))) next->push_back(in);
    }
    return true;
  });
}

bool Importer::feeds_only_masks(const std::string& name) const {
  static const std::set<std::string> kViews = {"Identity",  "Slice",   "Reshape",
                                               "Unsqueeze", "Squeeze", "Transpose",
                                               "Expand",    "Flatten", "Gather"};
  return readers_only(
      name,
      [](const onnx::NodeProto& n, const std::string&) {
        const std::string& t = n.op_type();
        return compare_type(t) || integer_cast(n) || t == "Shape" || t == "Size";
      },
      [](const onnx::NodeProto& n, const std::string& in) {
        // (ScatterND writes its updates in: Swin's mask, slice assignments of constants.)
        return (kViews.count(n.op_type()) > 0 && n.input(0) == in) || n.op_type() == "ScatterND";
      });
}

Result<std::map<std::string, EvalValue>> Importer::evaluate_outputs(
    const onnx::NodeProto& n, const std::map<std::string, EvalValue>& inputs) const {
  const onnx::NodeProto* node = &n;
  return evaluate_nodes(
      std::span<const onnx::NodeProto* const>(&node, 1), opset_,
      [&inputs](const std::string& name) -> std::optional<EvalValue> {
        auto it = inputs.find(name);
        if (it == inputs.end()) return std::nullopt;
        return it->second;
      },
      kMaxFoldElements);
}

Result<std::optional<EvalTensor>> Importer::evaluate_node(
    const onnx::NodeProto& n, const std::map<std::string, EvalValue>& inputs) const {
  GP_ASSIGN_OR_RETURN(auto values, evaluate_outputs(n, inputs));
  auto v = values.find(n.output(0));
  if (v == values.end() || v->second.sequence) return std::optional<EvalTensor>();
  return std::optional<EvalTensor>(std::move(v->second.tensor));
}

bool Importer::fold_tensor(const onnx::NodeProto& n, bool flat) {
  const std::string& t = n.op_type();
  const std::string& out = n.output(0);
  if (n.output_size() != 1 || (t == "Constant" && consts_.count(out))) {
    return false;  // (a Constant's tensor attribute is read from consts_)
  }
  // First whether every input is a constant, and whether a trained weight flows in, before any
  // value is read (a weight table can be large).
  bool from_weights = false;
  // An input computed from the batch size that did not fold (the batch's arange) may still
  // feed a value that does, per sample (an all-ones padding mask picked at arange * T + t).
  bool from_batch = false;
  for (int k = 0; k < n.input_size(); ++k) {
    const std::string& name = n.input(k);
    if (name.empty() || (t == "CastLike" && k == 1)) continue;  // only the type is read there
    if (act_.count(name) && !laid_constants_.count(name)) return false;
    if (!tensors_.count(name) && !consts_.count(name) && !folded_.count(name)) {
      if (!batch_dependent_.count(name)) return false;
      from_batch = true;
    }
    from_weights = from_weights || param_dep_.count(name) || param_like(name);
  }
  if (!foldable(t) || (!n.domain().empty() && n.domain() != "ai.onnx")) {
    fold_errors_.emplace(out, "no constant folding for " + t);  // (fold_split's reason stays)
    return false;
  }
  // A float computed from weights is a weight, trained: only a mask made from one folds.
  if (from_weights && !compare_type(t) && !integer_cast(n) && t != "Size" &&
      !feeds_only_masks(out)) {
    fold_errors_[out] = kFromTrainedWeight;
    return false;
  }
  const auto per_sample = [&] {
    if (!from_weights && fold_per_sample(n)) return true;
    batch_dependent_.insert(out);
    return false;
  };
  if (from_batch) {
    fold_errors_[out] = "an input depends on the batch size";
    return per_sample();
  }
  if (std::any_of(n.input().begin(), n.input().end(),
                  [this](const std::string& in) { return sample_consts_.count(in) > 0; })) {
    return per_sample();
  }
  std::map<std::string, EvalValue> inputs;
  if (t == "CastLike") {  // the type of input 1, perhaps an activation: fold_flat knows it
    auto v = const_tensor(n.input(0));
    if (!v || !flat) return false;
    v->ints = folded_int_.count(out) > 0;
    tensors_[out] = std::move(*v);
    return true;
  }
  for (int k = 0; k < n.input_size(); ++k) {
    const std::string& name = n.input(k);
    if (name.empty() || inputs.count(name)) continue;
    auto v = const_tensor(name);
    if (!v) {
      fold_errors_[out] = "input '" + name + "' holds more than " +
                          std::to_string(kMaxFoldElements) + " elements or values of an " +
                          "unsupported type";
      return false;
    }
    if (size_input(t, k) && has_nan(v->values)) {
      fold_errors_[out] = "input '" + name + "' depends on the batch size";
      return per_sample();
    }
    EvalValue ev;
    ev.tensor = std::move(*v);
    inputs[name] = std::move(ev);
  }
  auto r = evaluate_node(n, inputs);
  if (!r.ok()) {
    fold_errors_[out] = "not folded: " + r.status().message();
    return false;
  }
  if (!r->has_value()) return false;
  EvalTensor& value = **r;
  // A comparison or an integer cast of weights that are only ever compared is a constant for
  // good; of a weight trained through another path (a straight-through gate), it would change.
  const bool ends = (compare_type(t) || integer_cast(n)) &&
                    std::all_of(n.input().begin(), n.input().end(), [&](const std::string& in) {
                      return in.empty() || only_compared_weights(in);
                    });
  if (from_weights && !ends) param_dep_.insert(out);
  keep(out, std::move(value), /*shape_math=*/!flat);  // (fold_flat wrote the flat value)
  return true;
}

std::optional<FoldedValue> constant_attr_value(const onnx::NodeProto& n) {
  const auto* a = n.attribute_size() > 0 ? &n.attribute(0) : nullptr;
  if (a == nullptr) return std::nullopt;
  if (a->name() == "value_float") return FoldedValue{{a->f()}, false};
  if (a->name() == "value_int") return FoldedValue{{static_cast<double>(a->i())}, true};
  if (a->name() == "value_floats")
    return FoldedValue{{a->floats().begin(), a->floats().end()}, false};
  if (a->name() == "value_ints") {
    FoldedValue v{{}, true};
    for (int64_t x : a->ints()) v.values.push_back(static_cast<double>(x));
    return v;
  }
  return std::nullopt;
}

std::vector<double> shape_range(const onnx::NodeProto& n, const std::vector<double>& dims) {
  const auto rank = static_cast<int64_t>(dims.size());
  int64_t start = attr_i(n, "start", 0), end = attr_i(n, "end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  return {dims.begin() + start, dims.begin() + end};
}

std::optional<FoldedValue> fold_node(
    const onnx::NodeProto& n,
    const std::function<std::optional<FoldedValue>(const std::string&)>& lookup) {
  std::vector<FoldedValue> in;
  for (const auto& name : n.input()) {
    if (name.empty()) {
      in.push_back({{}, true});
      continue;
    }
    auto v = lookup(name);
    if (!v) return std::nullopt;
    in.push_back(std::move(*v));
  }
  return fold_values(n, in);
}

namespace {

// The inputs of a shape-math node being folded.
struct FoldArgs {
  const std::vector<FoldedValue>& in;
  bool ints;  // every input is an integer
  const std::vector<double>& v(size_t k) const { return in[k].values; }
};

using Folder = std::optional<FoldedValue> (*)(const onnx::NodeProto& n, const FoldArgs& a);

std::optional<FoldedValue> fold_cast(const onnx::NodeProto& n, const FoldArgs& a) {
  const int64_t to = attr_i(n, "to", kOnnxFloat);
  FoldedValue out{{}, to == kOnnxInt64 || to == kOnnxInt32};
  for (double v : a.v(0)) out.values.push_back(out.ints && v != kBatchDim ? std::trunc(v) : v);
  return out;
}

// Identity, Unsqueeze, Squeeze, Flatten and Reshape.
std::optional<FoldedValue> fold_view(const onnx::NodeProto& n, const FoldArgs& a) {
  const std::string& t = n.op_type();
  if (t != "Identity" && a.v(0).size() > 1 &&
      !(t == "Reshape" && a.in.size() > 1 && a.v(1).size() == 1)) {
    // Would make a 2-D value: shape math only reshapes scalars, or a list into a list (torch
    // 2.x's unoptimised exports reshape the axes of a ReduceMean to [-1]).
    return std::nullopt;
  }
  return FoldedValue{a.v(0), a.in[0].ints};
}

std::optional<FoldedValue> fold_concat(const onnx::NodeProto&, const FoldArgs& a) {
  FoldedValue out{{}, a.ints};
  for (const auto& v : a.in) out.values.insert(out.values.end(), v.values.begin(), v.values.end());
  return out;
}

// A scalar broadcast to a 1-D shape (a computed bias); bounded like any parameter.
std::optional<FoldedValue> fold_expand(const onnx::NodeProto&, const FoldArgs& a) {
  if (a.in.size() < 2 || a.v(0).size() != 1 || a.v(1).size() != 1 || !(a.v(1)[0] >= 1) ||
      a.v(1)[0] > 1 << 24) {
    return std::nullopt;
  }
  return FoldedValue{std::vector<double>(static_cast<size_t>(a.v(1)[0]), a.v(0)[0]), a.in[0].ints};
}

std::optional<FoldedValue> fold_gather(const onnx::NodeProto& n, const FoldArgs& a) {
  if (attr_i(n, "axis", 0) != 0 || a.in.size() < 2) return std::nullopt;
  const auto& data = a.v(0);
  FoldedValue out{{}, a.in[0].ints};
  for (double idx : a.v(1)) {
    int64_t k = to_index(idx);
    if (k < 0) k += static_cast<int64_t>(data.size());
    if (k < 0 || k >= static_cast<int64_t>(data.size())) return std::nullopt;
    out.values.push_back(data[static_cast<size_t>(k)]);
  }
  return out;
}

std::optional<FoldedValue> fold_slice(const onnx::NodeProto&, const FoldArgs& a) {
  if (a.in.size() < 3 || a.v(1).size() != 1 || a.v(2).size() != 1) return std::nullopt;
  if (a.in.size() > 3 && !(a.v(3).empty() || (a.v(3).size() == 1 && a.v(3)[0] == 0)))
    return std::nullopt;
  if (a.in.size() > 4 && !(a.v(4).empty() || (a.v(4).size() == 1 && a.v(4)[0] == 1)))
    return std::nullopt;
  const auto& data = a.v(0);
  auto [s, e] = slice_bounds(a.v(1)[0], a.v(2)[0], static_cast<int64_t>(data.size()));
  e = std::max(e, s);
  return FoldedValue{std::vector<double>(data.begin() + s, data.begin() + e), a.in[0].ints};
}

// Sqrt, Neg, Reciprocal, Floor and Ceil.
std::optional<FoldedValue> fold_unary(const onnx::NodeProto& n, const FoldArgs& a) {
  const std::string& t = n.op_type();
  FoldedValue out{{}, a.ints && (t == "Neg" || t == "Floor" || t == "Ceil")};
  for (double x : a.v(0)) {
    if (x == kBatchDim) {
      out.values.push_back(NAN);
      continue;
    }
    out.values.push_back(t == "Sqrt"         ? std::sqrt(x)
                         : t == "Neg"        ? -x
                         : t == "Reciprocal" ? 1 / x
                         : t == "Floor"      ? std::floor(x)
                                             : std::ceil(x));
  }
  return out;
}

// (torch's legacy exporter turns expand(-1) into ones where the target says -1.)
std::optional<FoldedValue> fold_constant_of_shape(const onnx::NodeProto& n, const FoldArgs& a) {
  if (a.v(0).size() > 8) return std::nullopt;
  double count = 1;
  for (double d : a.v(0)) count = d >= 0 && d <= 64 ? count * d : 1e9;
  if (count > 64) return std::nullopt;
  const auto* value = attr(n, "value");
  std::vector<double> v =
      value != nullptr && value->has_t() ? values_of(value->t()) : std::vector<double>{0.0};
  if (v.size() != 1) return std::nullopt;
  return FoldedValue{
      std::vector<double>(static_cast<size_t>(count), v[0]),
      value != nullptr && value->has_t() &&
          (value->t().data_type() == kOnnxInt64 || value->t().data_type() == kOnnxInt32)};
}

std::optional<FoldedValue> fold_equal(const onnx::NodeProto&, const FoldArgs& a) {
  if (a.in.size() != 2) return std::nullopt;
  const auto& x = a.v(0);
  const auto& y = a.v(1);
  if (x.empty() || y.empty() || (x.size() != y.size() && x.size() != 1 && y.size() != 1)) {
    return std::nullopt;
  }
  FoldedValue out{{}, true};
  for (size_t k = 0; k < std::max(x.size(), y.size()); ++k) {
    out.values.push_back(x[x.size() == 1 ? 0 : k] == y[y.size() == 1 ? 0 : k] ? 1 : 0);
  }
  return out;
}

std::optional<FoldedValue> fold_where(const onnx::NodeProto&, const FoldArgs& a) {
  if (a.in.size() != 3) return std::nullopt;
  size_t size = 1;
  for (const auto& v : a.in) {
    if (v.values.empty() || (v.values.size() != 1 && size != 1 && v.values.size() != size)) {
      return std::nullopt;
    }
    size = std::max(size, v.values.size());
  }
  auto at = [](const std::vector<double>& v, size_t k) { return v[v.size() == 1 ? 0 : k]; };
  FoldedValue out{{}, a.in[1].ints && a.in[2].ints};
  for (size_t k = 0; k < size; ++k) {
    out.values.push_back(at(a.v(0), k) != 0 ? at(a.v(1), k) : at(a.v(2), k));
  }
  return out;
}

// Binary arithmetic `op` (Add, Sub, Mul, Div, Mod or Pow); NaN (unknown) on the batch size.
double arith(const std::string& op, double a, double b, bool ints) {
  if (a == kBatchDim || b == kBatchDim) return static_cast<double>(NAN);
  if (op == "Add") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  if (op == "Div") return ints ? std::trunc(a / b) : a / b;
  if (op == "Mod") {  // fmod = 0: the sign of the divisor, as Python's %
    const double r = std::fmod(a, b);
    return r != 0 && (r < 0) != (b < 0) ? r + b : r;
  }
  return std::pow(a, b);
}

std::optional<FoldedValue> fold_arith(const onnx::NodeProto& n, const FoldArgs& a) {
  if (a.in.size() != 2) return std::nullopt;
  const auto& x = a.v(0);
  const auto& y = a.v(1);
  // (An empty operand broadcasts to nothing; numpy would too, but shape math never means it.)
  if (x.empty() || y.empty() || (x.size() != y.size() && x.size() != 1 && y.size() != 1)) {
    return std::nullopt;
  }
  FoldedValue out{{}, a.ints};
  const size_t size = std::max(x.size(), y.size());
  for (size_t k = 0; k < size; ++k) {
    out.values.push_back(
        arith(n.op_type(), x[x.size() == 1 ? 0 : k], y[y.size() == 1 ? 0 : k], a.ints));
  }
  return out;
}

// Each folded op type's folding, a function each.
const std::map<std::string, Folder>& folders() {
  static const std::map<std::string, Folder> kFolders = {
      {"Cast", fold_cast},        {"Identity", fold_view},
      {"Unsqueeze", fold_view},   {"Squeeze", fold_view},
      {"Flatten", fold_view},     {"Reshape", fold_view},
      {"Concat", fold_concat},    {"Expand", fold_expand},
      {"Gather", fold_gather},    {"Slice", fold_slice},
      {"Sqrt", fold_unary},       {"Neg", fold_unary},
      {"Reciprocal", fold_unary}, {"Floor", fold_unary},
      {"Ceil", fold_unary},       {"ConstantOfShape", fold_constant_of_shape},
      {"Equal", fold_equal},      {"Where", fold_where},
      {"Add", fold_arith},        {"Sub", fold_arith},
      {"Mul", fold_arith},        {"Div", fold_arith},
      {"Mod", fold_arith},        {"Pow", fold_arith},
  };
  return kFolders;
}

}  // namespace

std::optional<FoldedValue> fold_values(const onnx::NodeProto& n,
                                       const std::vector<FoldedValue>& in) {
  if (in.empty()) return std::nullopt;
  const auto folder = folders().find(n.op_type());
  if (folder == folders().end()) return std::nullopt;
  const bool ints = std::all_of(in.begin(), in.end(), [](const FoldedValue& v) { return v.ints; });
  return folder->second(n, FoldArgs{in, ints});
}

std::optional<std::vector<float>> Importer::float_values(const std::string& name) const {
  if (auto s = slice_of_.find(name); s != slice_of_.end()) return slice_values(s->second);
  auto it = consts_.find(name);
  if (it == consts_.end()) return std::nullopt;
  const onnx::TensorProto& t = *it->second;
  if (t.data_type() != kOnnxFloat) return widened_to_float(t);
  // Straight to float: weights can be large, a detour through values_of() would copy them twice.
  std::vector<float> v(t.float_data().begin(), t.float_data().end());
  const std::string& raw = t.raw_data();
  const size_t typed = v.size();
  v.resize(typed + raw.size() / sizeof(float));
  std::memcpy(v.data() + typed, raw.data(), raw.size() / sizeof(float) * sizeof(float));
  if (static_cast<int64_t>(v.size()) != element_count(t)) return std::nullopt;
  return v;
}

void Importer::infer_new_ops(int first) {
  for (int k = first; k < b_.model().ops_size(); ++k) {
    const Operator& op = b_.model().ops(k);
    const OpTypeInfo* info = find_op_type(op.type());
    if (info == nullptr || op.inputs_size() < info->min_inputs ||
        (info->max_inputs >= 0 && op.inputs_size() > info->max_inputs)) {
      continue;  // Graph::build reports it
    }
    std::vector<TensorSpec> inputs;
    for (const auto& ref : op.inputs()) {
      auto it = specs_.find(ref.op());
      if (it == specs_.end() || ref.output() >= static_cast<int>(it->second.size())) break;
      inputs.push_back(it->second[static_cast<size_t>(ref.output())]);
    }
    if (static_cast<int>(inputs.size()) != op.inputs_size()) continue;
    InferredOp out;
    if (info->infer(op, inputs, &out).ok()) specs_[op.id()] = std::move(out.outputs);
  }
}

std::optional<std::vector<int64_t>> Importer::folded_dims(const std::string& name) const {
  // A tensor's dims first: a folded list may hold a tensor's values flat.
  if (auto t = tensors_.find(name); t != tensors_.end() && !t->second.dims.empty()) {
    return t->second.dims;
  }
  if (auto list = folded(name)) return std::vector<int64_t>{static_cast<int64_t>(list->size())};
  return std::nullopt;
}

std::optional<std::vector<double>> Importer::folded(const std::string& name) const {
  auto it = folded_.find(name);
  if (it == folded_.end()) return std::nullopt;
  return it->second;
}

std::optional<double> Importer::scalar(const std::string& name) const {
  // A trained scalar (a learned temperature), or an Identity of one (a legacy export's
  // de-duplicated equal parameters), is no constant factor: it would never train.
  if (param_like(name)) return std::nullopt;
  auto v = folded(name);
  if (!v || v->size() != 1 || !std::isfinite((*v)[0]) || (*v)[0] == kBatchDim) return std::nullopt;
  return (*v)[0];
}

std::optional<TensorRef> Importer::activation(const std::string& name) const {
  auto it = act_.find(name);
  if (it == act_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::vector<int64_t>> Importer::onnx_shape(const std::string& name) const {
  // An activation's shape as inferred for its operator: the batch, then the per-sample dims.
  if (auto a = act_.find(name); a != act_.end()) {
    if (auto s = specs_.find(a->second.op());
        s != specs_.end() && a->second.output() < static_cast<int>(s->second.size())) {
      const TensorSpec& spec = s->second[static_cast<size_t>(a->second.output())];
      if (unbatched_.count(name))
        return std::vector<int64_t>(spec.shape().begin(), spec.shape().end());
      // The batch where its layout has it, in place of the fold's per-sample dims.
      if (const BatchLayout l = layout_of(name); !l.batch_first()) {
        std::vector<int64_t> dims(spec.shape().begin(), spec.shape().end());
        dims.erase(dims.begin() + l.pos, dims.begin() + l.pos + l.folded());
        dims.insert(dims.begin() + l.pos, -1);
        return dims;
      }
      std::vector<int64_t> dims = {-1};
      dims.insert(dims.end(), spec.shape().begin(), spec.shape().end());
      // A [batch] tensor is per-sample [1] here, as add_input and add_losses read it.
      if (auto v = shapes_.find(name); v != shapes_.end() && v->second.size() == 1) dims = {-1};
      return dims;
    }
  }
  auto it = shapes_.find(name);
  if (it == shapes_.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

std::optional<std::vector<int64_t>> Importer::sample_shape(const std::string& name) const {
  // An activation's is its GraphPipe tensor's, whatever its batch layout.
  if (auto a = act_.find(name); a != act_.end()) {
    if (auto s = specs_.find(a->second.op());
        s != specs_.end() && a->second.output() < static_cast<int>(s->second.size())) {
      const auto& shape = s->second[static_cast<size_t>(a->second.output())].shape();
      std::vector<int64_t> per_sample(shape.begin(), shape.end());
      if (per_sample.empty()) per_sample.push_back(1);
      return per_sample;
    }
  }
  auto dims = onnx_shape(name);
  if (!dims) return std::nullopt;
  // (A tensor without the batch axis is all per sample.)
  std::vector<int64_t> per_sample(dims->begin() + (unbatched_.count(name) ? 0 : 1), dims->end());
  for (int64_t d : per_sample) {
    if (d <= 0) return std::nullopt;
  }
  if (per_sample.empty()) per_sample.push_back(1);
  return per_sample;
}

std::optional<int64_t> Importer::rank_of(const std::string& name) const {
  auto dims = onnx_shape(name);
  if (!dims) return std::nullopt;
  return static_cast<int64_t>(dims->size());
}

std::optional<int64_t> Importer::sample_axis(const std::string& name, int64_t axis) const {
  const auto rank = rank_of(name);
  if (axis < 0) {
    if (!rank) return std::nullopt;
    axis += *rank;
  }
  // A tensor without the batch axis is all per sample: its axes are ONNX's.
  if (unbatched_.count(name)) {
    if (axis < 0 || (rank && axis >= *rank)) return std::nullopt;
    return axis;
  }
  // Axes before the batch keep their place; those after it follow the fold's dims.
  const BatchLayout l = layout_of(name);
  if (axis < 0 || axis == l.pos || (rank && axis >= *rank)) return std::nullopt;
  return axis < l.pos ? axis : axis - 1 + l.folded();
}

int Importer::sole_consumer(const std::string& name) const {
  auto it = consumers_.find(name);
  return it != consumers_.end() && it->second.size() == 1 ? it->second[0] : -1;
}

int Importer::producer(const std::string& name) const {
  auto it = producer_.find(name);
  return it == producer_.end() ? -1 : it->second;
}

bool Importer::only_consumers_in(const std::string& name, const std::set<int>& nodes) const {
  for (const auto& o : g_.output()) {
    if (o.name() == name) return false;
  }
  auto it = consumers_.find(name);
  if (it == consumers_.end()) return true;
  for (int c : it->second) {
    if (!nodes.count(c)) return false;
  }
  return true;
}

std::string Importer::unique_id(const std::string& wanted, const std::string& fallback) {
  std::string id = sanitize(wanted);
  if (id.empty()) id = fallback;
  std::string out = id;
  for (int k = 2; used_ids_.count(out); ++k) out = id + "_" + std::to_string(k);
  used_ids_.insert(out);
  return out;
}

std::string Importer::where(int i) const {
  const auto& n = g_.node(i);
  return "node " + std::to_string(i) + " '" + n.name() + "' (" + n.op_type() + ")";
}

void Importer::refuse(int i, const std::string& why) {
  if (try_opaque(i)) return;
  const auto& n = g_.node(i);
  const bool shape = shape_only(i);
  if (shape && !fed_by_refused_) {
    // Listed by the node that needs its value, after its own reason (the root cause, where
    // this node only passes on a value that is missing already).
    std::string root;
    for (const auto& in : n.input()) {
      if (root.empty() && !in.empty()) root = missing_value(in);
    }
    if (root.empty()) {
      root = where(i) + ": " + why;
      if (n.output_size() > 0) {
        if (auto e = fold_errors_.find(n.output(0)); e != fold_errors_.end()) {
          root += " (" + e->second + ")";
        }
      }
    }
    for (const auto& o : n.output()) unvalued_[o] = root;
    return;
  }
  for (const auto& o : n.output()) {
    poisoned_.insert(o);
    if (shape) poisoned_shapes_.insert(o);
  }
  // A node of a mapped type fed by a refused node lacks its inputs: not a cause of its own.
  if (fed_by_refused_ && (mapped_type(n.op_type()) || shape)) return;
  std::string missing;
  for (const auto& in : n.input()) {
    if (missing.empty() && !in.empty()) missing = missing_value(in);
  }
  unsupported_.push_back(where(i) + ": " + why + (missing.empty() ? "" : "; needs " + missing) +
                         (opaque_why_.empty() ? "" : "; cannot be opaque: " + opaque_why_));
}

bool Importer::shape_only(int i) const {
  const auto& n = g_.node(i);
  if (n.op_type() == "Shape" || n.op_type() == "Size") return true;
  // Control flow (a Loop over bags reads the ids inside its body) is a cause of its own.
  if (!subgraph_reads(n).empty()) return false;
  return std::none_of(n.input().begin(), n.input().end(), [this](const std::string& in) {
    return act_.count(in) > 0 || (poisoned_.count(in) > 0 && !poisoned_shapes_.count(in));
  });
}

std::string Importer::missing_value(const std::string& name) const {
  const auto it = unvalued_.find(name);
  return it == unvalued_.end() ? "" : it->second;
}

// An ONNX node GraphPipe cannot compute, kept for planning: its output shape comes from the
// model's shape information, its weights count as parameters, its cost is a FLOP estimate.
bool Importer::try_opaque(int i) {
  opaque_why_.clear();
  if (!options_.allow_opaque) return false;
  const auto& n = g_.node(i);
  auto cannot = [this](std::string why) {
    opaque_why_ = std::move(why);
    return false;
  };
  if (n.output_size() == 0) return cannot("it has no output");
  for (int k = 1; k < n.output_size(); ++k) {
    if (!n.output(k).empty() && !only_consumers_in(n.output(k), {})) {
      return cannot("its output " + std::to_string(k) + " '" + n.output(k) +
                    "' is read (an opaque operator has one output)");
    }
  }
  const auto shape = sample_shape(n.output(0));
  if (!shape) {
    return cannot(
        "its output's per-sample shape is unknown (the file gives none and ONNX shape "
        "inference found none)");
  }
  std::vector<TensorRef> inputs;
  int64_t params = 0;
  for (const auto& name : n.input()) {
    if (name.empty() || folded(name)) continue;
    if (auto a = activation(name)) {
      inputs.push_back(*a);
    } else if (is_weight(name)) {
      int64_t e = 1;
      for (int64_t d : weight_dims(name)) {
        if (d < 0 || __builtin_mul_overflow(e, d, &e)) {
          return cannot("weight '" + name + "' has an unknown or overflowing size");
        }
      }
      if (__builtin_add_overflow(params, e, &params)) return cannot("its weights overflow a count");
    } else {
      return cannot("input '" + name + "' is neither an activation nor a weight");
    }
  }
  if (inputs.empty()) return cannot("it reads no activation (nothing gives it a batch)");
  // Shapes come from the file or ONNX's shape inference: a size no tensor can have is refused.
  constexpr int64_t kMaxOpaqueElements = int64_t{1} << 40;
  TensorSpec out;
  int64_t elements = 1;
  for (int64_t d : *shape) {
    if (d <= 0 || __builtin_mul_overflow(elements, d, &elements) || elements > kMaxOpaqueElements) {
      return cannot("its output's per-sample dim " + std::to_string(d) +
                    " is not positive, or the shape holds 2^40 elements or more");
    }
    out.add_shape(d);
  }
  auto et = elem_types_.find(n.output(0));
  const int type = et == elem_types_.end() ? kOnnxFloat : et->second;
  out.set_dtype(type == kOnnxInt64   ? graphpipe::v1::DATA_TYPE_INT64
                : type == kOnnxInt32 ? graphpipe::v1::DATA_TYPE_INT32
                                     : graphpipe::v1::DATA_TYPE_FLOAT32);
  const std::string id = i == current_
                             ? current_id_
                             : unique_id(n.name(), sanitize(n.op_type()) + "_" + std::to_string(i));
  // One flop per output element, plus a dense layer's two per weight: a rough figure.
  const double flops = static_cast<double>(elements) + 2.0 * static_cast<double>(params);
  act_[n.output(0)] = b_.opaque(id, inputs, out, n.op_type(), flops, params);
  return true;
}

// From the back: the op looked up is almost always the one just added.
Operator& Importer::op_by_id(const std::string& id) {
  auto& ops = *b_.model().mutable_ops();
  for (int k = ops.size() - 1; k >= 0; --k) {
    if (ops[k].id() == id) return ops[k];
  }
  return ops[ops.size() - 1];
}

void Importer::take(const std::string& id, const std::string& param, const std::string& name,
                    Layout layout, int64_t offset, int64_t count) {
  const ViewOf view = resolve_view(name);
  const auto view_dims = weight_dims(name);
  // The placement relative to a tensor under an odd number of Transposes.
  auto under = [&](bool transposed) -> std::optional<PlacedLayout> {
    const PlacedLayout at{layout, offset};
    return transposed ? through_transpose(at, view_dims) : std::optional<PlacedLayout>(at);
  };
  if (auto v = float_values(view.values); v && under(view.values_transposed)) {
    auto p = gather_param(*v, weight_dims(view.values), *under(view.values_transposed), count);
    if (p.ok()) set_values(id, param, *p);
  }
  auto at = under(view.source_transposed);
  int64_t elements = 1;
  for (int64_t d : weight_dims(view.source)) elements *= d;
  const std::string packed = slice_source(view.source, name, id, param, &at);
  taken_.push_back({id, param, view.source, at, count > 0 ? count : elements, current_});
  if (!at) return;  // no layout expresses it: the parameter has no source to export into
  add_param_source(id, param, packed, *at);
  // A transposed copy that torch's optimiser folded (find_folded_transposes) is written too.
  bool transposed = false;
  for (std::string tensor = name;;) {
    if (folded_transposes_.count(tensor)) {
      if (const auto folded_at = under(transposed)) {
        add_param_source(id, param, tensor, *folded_at);
      }
      break;
    }
    const auto v = view_of_.find(tensor);
    if (v == view_of_.end() || !v->second.second) break;
    transposed = !transposed;
    tensor = v->second.first;
  }
}

void Importer::add_param_source(const std::string& id, const std::string& param,
                                const std::string& tensor, const PlacedLayout& at) {
  auto* src = b_.model().add_param_sources();
  src->set_op(id);
  src->set_param(param);
  src->set_initializer(tensor);
  src->set_layout(at.layout);
  src->set_offset(at.offset);
}

namespace {
// Where a tied copy sits in its weight, for a refusal.
std::string placement(const std::optional<PlacedLayout>& at, int64_t count) {
  if (!at) return "a view no layout expresses";
  const std::string range =
      "[" + std::to_string(at->offset) + ", " + std::to_string(at->offset + count) + ")";
  switch (at->layout) {
    case graphpipe::v1::ParamSource::LAYOUT_COPY:
      return "as is";
    case graphpipe::v1::ParamSource::LAYOUT_TRANSPOSE:
      return "transposed";
    case graphpipe::v1::ParamSource::LAYOUT_COLUMNS_TRANSPOSED:
      return "columns from " + std::to_string(at->offset) + ", transposed";
    default:
      return "elements " + range;
  }
}
}  // namespace

Status Importer::tie_copies() {
  if (options_.untie_weights) return ok_status();
  for (const auto& [name, readers] : shared_weights_) {
    std::vector<const Taken*> copies;
    std::set<std::string> ops;
    for (const auto& t : taken_) {
      if (t.source != name) continue;
      copies.push_back(&t);
      ops.insert(t.op);
    }
    if (ops.size() < 2) continue;  // one operator holds it (the others fold it)
    // Copies in one place of the weight are one tensor; an operator may hold several blocks of
    // it (the packed q, k, v of attention), each tied with the same block of the others.
    std::map<std::tuple<int, int64_t, int64_t>, std::vector<const Taken*>> same;
    bool unplaced = false;
    for (const Taken* c : copies) {
      if (!c->at) {
        unplaced = true;
        continue;
      }
      same[{static_cast<int>(c->at->layout), c->at->offset, c->count}].push_back(c);
    }
    bool alone = unplaced;
    for (const auto& [key, members] : same) alone = alone || members.size() < 2;
    if (alone) {
      std::string who, how;
      for (int i : readers) who += (who.empty() ? "" : ", ") + where(i);
      for (const Taken* c : copies) {
        how +=
            (how.empty() ? "" : ", ") + c->op + "." + c->param + " " + placement(c->at, c->count);
      }
      return invalid_argument(
          path_ + ": weight '" + name + "' is read by " + std::to_string(readers.size()) +
          " operators (" + who + ") in different layouts (" + how +
          "): tied copies must each be the weight element for element; import with "
          "--untie-weights to give each its own copy (the same forward pass, but training "
          "updates the copies separately)");
    }
    for (const auto& [key, members] : same) {
      auto* tie = b_.model().add_param_ties();
      for (const Taken* c : members) {
        auto* m = tie->add_members();
        m->set_op(c->op);
        m->set_param(c->param);
      }
    }
  }
  return ok_status();
}

void Importer::set_values(const std::string& id, const std::string& param,
                          const std::vector<float>& v) {
  (*op_by_id(id).mutable_param_values())[param] =
      std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

Status Importer::add_losses() {
  if (options_.loss != "mse" && options_.loss != "cross_entropy") {
    return invalid_argument("--loss = '" + options_.loss + "', expected mse or cross_entropy");
  }
  if (g_.output_size() == 0) return invalid_argument(path_ + ": the graph has no outputs");
  for (const auto& o : g_.output()) {
    auto y = activation(o.name());
    if (!y) {
      const std::string missing = missing_value(o.name());
      return invalid_argument(path_ + ": graph output '" + o.name() +
                              "' is not computed by a mapped operator" +
                              (missing.empty() ? "" : " (" + missing + ")"));
    }
    if (unbatched_.count(o.name())) {
      return invalid_argument(path_ + ": graph output '" + o.name() +
                              "' has no batch axis (it is computed from weights and constants)");
    }
    const auto dims = dims_of(o);
    if (dims.empty()) {
      return invalid_argument(path_ + ": graph output '" + o.name() +
                              "' needs a shape (export with output shapes)");
    }
    // Per sample, as for inputs: the dimensions after the batch, [1] for a [batch] output.
    std::vector<int64_t> per_sample(dims.begin() + 1, dims.end());
    if (per_sample.empty()) per_sample.push_back(1);
    // A symbolic per-sample dim (the legacy exporter names the sequence of a traced size) is
    // the one shape inference gave the output's operator.
    auto unknown = [&per_sample] {
      return std::any_of(per_sample.begin(), per_sample.end(), [](int64_t d) { return d <= 0; });
    };
    // (Ops made out of order, e.g. a pattern emitted at its last node, may not be inferred yet.)
    if (unknown() && !specs_.count(y->op())) infer_new_ops(0);
    const auto spec = specs_.find(y->op());
    if (unknown() && spec != specs_.end() && y->output() < static_cast<int>(spec->second.size())) {
      const auto& shape = spec->second[static_cast<size_t>(y->output())].shape();
      per_sample.assign(shape.begin(), shape.end());
    }
    // A batch elsewhere: the per-sample tensor is the output with its batch moved first.
    if (!layout_of(o.name()).batch_first()) {
      GP_RETURN_IF_ERROR(check_output_layout(o.name()));
      per_sample = sample_shape(o.name()).value_or(per_sample);
    }
    if (unknown()) {
      std::string shown;
      for (int64_t d : per_sample) shown += (shown.empty() ? "" : ", ") + std::to_string(d);
      return invalid_argument(path_ + ": graph output '" + o.name() + "': per-sample shape [" +
                              shown + "] has unknown dims that shape inference could not fill");
    }
    const std::string base = sanitize(o.name());
    if (options_.loss == "mse") {
      auto target = b_.input(unique_id(base + ".target", "target"), per_sample);
      b_.add_loss(b_.mse_loss(unique_id(base + ".loss", "loss"), *y, target));
    } else {
      std::vector<int64_t> label_shape = per_sample;
      label_shape.pop_back();  // labels: the logits' shape without the classes
      if (label_shape.empty()) label_shape.push_back(1);
      auto labels = b_.input(unique_id(base + ".labels", "labels"), label_shape,
                             graphpipe::v1::DATA_TYPE_INT64);
      b_.add_loss(b_.softmax_cross_entropy(unique_id(base + ".loss", "loss"), *y, labels));
    }
  }
  return ok_status();
}

}  // namespace onnx_detail

Result<ModelGraph> import_onnx(const std::string& path, const OnnxImportOptions& options) {
  onnx::ModelProto model;
  GP_RETURN_IF_ERROR(read_onnx_file(path, &model, nullptr));
  if (!model.has_graph()) return invalid_argument(path + ": ONNX model without a graph");
  // GraphPipe's own shape inference covers every operator it maps; the opaque ones need ONNX's.
  if (options.allow_opaque) onnx_detail::infer_onnx_shapes(&model, path, options.warnings);
  return onnx_detail::Importer(model, path, options).run();
}

}  // namespace gp::model
