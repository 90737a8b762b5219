// ONNX -> ModelGraph. One pass over the (topologically sorted) ONNX nodes, with small pattern
// matchers for what exporters split into several nodes (MatMul + Add, erf GELU, Gather + Reduce).
#include "gp/graph/onnx_import.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "gp/graph/builder.h"
#include "gp/graph/graph.h"
#include "gp/graph/model_io.h"
#include "onnx/onnx.pb.h"

namespace gp::graph {
namespace {

constexpr int kOnnxFloat = 1, kOnnxInt32 = 6, kOnnxInt64 = 7, kOnnxDouble = 11;

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    out +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-') ? c : '_';
  }
  while (!out.empty() && (out.front() == '_' || out.front() == '.')) out.erase(out.begin());
  return out;
}

// Values of a small constant tensor (typed fields or raw little-endian bytes).
std::vector<double> values_of(const onnx::TensorProto& t) {
  std::vector<double> v;
  const std::string& raw = t.raw_data();
  switch (t.data_type()) {
    case kOnnxFloat:
      for (float f : t.float_data()) v.push_back(f);
      for (size_t i = 0; i + 4 <= raw.size(); i += 4) {
        float f;
        std::memcpy(&f, raw.data() + i, 4);
        v.push_back(f);
      }
      break;
    case kOnnxDouble:
      for (double d : t.double_data()) v.push_back(d);
      for (size_t i = 0; i + 8 <= raw.size(); i += 8) {
        double d;
        std::memcpy(&d, raw.data() + i, 8);
        v.push_back(d);
      }
      break;
    case kOnnxInt64:
      for (int64_t x : t.int64_data()) v.push_back(static_cast<double>(x));
      for (size_t i = 0; i + 8 <= raw.size(); i += 8) {
        int64_t x;
        std::memcpy(&x, raw.data() + i, 8);
        v.push_back(static_cast<double>(x));
      }
      break;
    case kOnnxInt32:
      for (int32_t x : t.int32_data()) v.push_back(x);
      for (size_t i = 0; i + 4 <= raw.size(); i += 4) {
        int32_t x;
        std::memcpy(&x, raw.data() + i, 4);
        v.push_back(x);
      }
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

class Importer {
 public:
  Importer(const onnx::ModelProto& model, std::string path, OnnxImportOptions options)
      : g_(model.graph()),
        path_(std::move(path)),
        options_(std::move(options)),
        b_(sanitize(g_.name().empty() ? std::filesystem::path(path_).stem().string() : g_.name()),
           "imported from ONNX (" + model.producer_name() + " " + model.producer_version() + ")") {}

  Result<ModelGraph> run() {
    for (const auto& t : g_.initializer()) consts_[t.name()] = &t;
    for (const auto& vi : g_.value_info()) shapes_[vi.name()] = dims_of(vi);
    for (const auto& vi : g_.output()) shapes_[vi.name()] = dims_of(vi);
    for (int i = 0; i < g_.node_size(); ++i) {
      for (const auto& in : g_.node(i).input()) consumers_[in].push_back(i);
      if (g_.node(i).op_type() == "Constant") {
        if (const auto* a = attr(g_.node(i), "value"); a != nullptr && a->has_t()) {
          consts_[g_.node(i).output(0)] = &a->t();
        }
      }
    }
    find_weight_inputs();
    for (const auto& in : g_.input()) {
      if (consts_.count(in.name()) || weight_inputs_.count(in.name())) continue;
      GP_RETURN_IF_ERROR(add_input(in));
    }
    done_.assign(static_cast<size_t>(g_.node_size()), false);
    for (int i = 0; i < g_.node_size(); ++i) {
      if (!done_[static_cast<size_t>(i)]) convert(i);
    }
    if (!unsupported_.empty()) {
      std::string list;
      for (const auto& u : unsupported_) list += "\n  " + u;
      return invalid_argument(path_ + ": " + std::to_string(unsupported_.size()) +
                              " ONNX node(s) have no GraphPipe operator:" + list);
    }
    GP_RETURN_IF_ERROR(add_losses());
    b_.set_source(path_);
    ModelGraph model = b_.finish();
    auto built = Graph::build(model);
    if (!built.ok()) return built.status().with_context(path_ + " (imported from ONNX)");
    return model;
  }

 private:
  static std::vector<int64_t> dims_of(const onnx::ValueInfoProto& vi) {
    std::vector<int64_t> dims;
    if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape()) return dims;
    for (const auto& d : vi.type().tensor_type().shape().dim()) {
      dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    }
    return dims;
  }

  // A graph input whose first dimension is symbolic carries the batch: it is data.
  static bool batch_first(const onnx::ValueInfoProto& in) {
    const auto& shape = in.type().tensor_type().shape();
    return shape.dim_size() > 0 && !shape.dim(0).has_dim_value();
  }

  bool is_weight(const std::string& name) const {
    return consts_.count(name) || weight_inputs_.count(name);
  }
  std::vector<int64_t> weight_dims(const std::string& name) const {
    if (auto it = consts_.find(name); it != consts_.end()) {
      return {it->second->dims().begin(), it->second->dims().end()};
    }
    for (const auto& in : g_.input()) {
      if (in.name() == name) return dims_of(in);
    }
    return {};
  }

  // Graph inputs without initializer that an operator consumes as a weight or bias
  // (export_params=False); an input whose first dimension is symbolic is data.
  void find_weight_inputs() {
    std::set<std::string> candidates;
    for (const auto& n : g_.node()) {
      const std::string& t = n.op_type();
      auto take = [&](int i) {
        if (i < n.input_size() && !n.input(i).empty()) candidates.insert(n.input(i));
      };
      if (t == "Gemm") take(1), take(2);
      if (t == "MatMul") take(1);
      if (t == "LayerNormalization") take(1), take(2);
      if (t == "Gather") take(0);
    }
    for (const auto& in : g_.input()) {
      if (consts_.count(in.name()) || !candidates.count(in.name())) continue;
      if (!batch_first(in)) weight_inputs_.insert(in.name());
    }
    // A MatMul's bias given as an input: Add(MatMul output, input of the output's width).
    for (const auto& n : g_.node()) {
      if (n.op_type() != "Add" || n.input_size() != 2) continue;
      for (int k = 0; k < 2; ++k) {
        for (const auto& in : g_.input()) {
          if (in.name() == n.input(k) && !consts_.count(in.name()) && !batch_first(in) &&
              dims_of(in).size() == 1) {
            weight_inputs_.insert(in.name());
          }
        }
      }
    }
  }

  Status add_input(const onnx::ValueInfoProto& in) {
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

  std::string unique_id(const std::string& wanted, const std::string& fallback) {
    std::string id = sanitize(wanted);
    if (id.empty()) id = fallback;
    std::string out = id;
    for (int k = 2; used_ids_.count(out); ++k) out = id + "_" + std::to_string(k);
    used_ids_.insert(out);
    return out;
  }

  std::string where(int i) const {
    const auto& n = g_.node(i);
    return "node " + std::to_string(i) + " '" + n.name() + "' (" + n.op_type() + ")";
  }
  void refuse(int i, const std::string& why) {
    for (const auto& o : g_.node(i).output()) poisoned_.insert(o);
    // A node that fails only because a refused node feeds it is not a cause of its own.
    if (fed_by_refused_ && why.find("not an activation") != std::string::npos) return;
    unsupported_.push_back(where(i) + ": " + why);
  }

  // The single consumer of tensor `name`, or -1.
  int sole_consumer(const std::string& name) const {
    auto it = consumers_.find(name);
    return it != consumers_.end() && it->second.size() == 1 ? it->second[0] : -1;
  }
  std::optional<double> scalar(const std::string& name) const {
    auto it = consts_.find(name);
    if (it == consts_.end()) return std::nullopt;
    const auto v = values_of(*it->second);
    if (v.size() != 1) return std::nullopt;
    return v[0];
  }
  std::optional<TensorRef> activation(const std::string& name) const {
    auto it = act_.find(name);
    if (it == act_.end()) return std::nullopt;
    return it->second;
  }
  // ONNX axis over (batch, ...) -> GraphPipe per-sample axis; nullopt for the batch axis.
  static std::optional<int64_t> sample_axis(int64_t axis) {
    if (axis == 0) return std::nullopt;
    return axis > 0 ? axis - 1 : axis;
  }

  void convert(int i) {
    const auto& n = g_.node(i);
    const std::string& t = n.op_type();
    const std::string id = unique_id(n.name(), sanitize(t) + "_" + std::to_string(i));
    auto in = [&](int k) { return k < n.input_size() ? activation(n.input(k)) : std::nullopt; };
    auto out = [&](const TensorRef& r) { act_[n.output(0)] = r; };
    if (t == "Constant") return;
    fed_by_refused_ = false;
    for (const auto& input : n.input()) fed_by_refused_ = fed_by_refused_ || poisoned_.count(input);
    if (t == "Identity" || t == "Dropout") {
      if (auto x = in(0)) return out(*x);
      return refuse(i, "its input is not an activation");
    }
    if (t == "Relu" || t == "Gelu" || t == "Softmax" || t == "LayerNormalization") {
      auto x = in(0);
      if (!x) return refuse(i, "its input is not an activation");
      if (t == "Relu") return out(b_.relu(id, *x));
      if (t == "Gelu") {
        if (const auto* a = attr(n, "approximate"); a != nullptr && a->s() != "none") {
          return refuse(i, "approximate = '" + a->s() + "' (only the exact GELU maps)");
        }
        return out(b_.gelu(id, *x));
      }
      const int64_t axis = attr_i(n, "axis", -1);
      const auto rank = rank_of(n.input(0));
      if (axis != -1 && !(rank && axis == *rank - 1)) {
        return refuse(i, "axis = " + std::to_string(axis) + " (only the last axis maps)");
      }
      if (t == "Softmax") return out(b_.softmax(id, *x));
      if (n.input_size() < 2 || !is_weight(n.input(1))) return refuse(i, "scale is not a weight");
      out(b_.layer_norm(id, *x));
      if (auto v = float_values(n.input(1))) set_values(id, "gamma", *v);
      if (n.input_size() > 2 && !n.input(2).empty()) {
        if (auto v = float_values(n.input(2))) set_values(id, "beta", *v);
      }
      return;
    }
    if (t == "Gemm") {
      auto a = in(0);
      if (!a || n.input_size() < 2 || !is_weight(n.input(1))) {
        return refuse(i, "expected an activation times a weight");
      }
      if (attr_i(n, "transA", 0) != 0 || attr_f(n, "alpha", 1) != 1 || attr_f(n, "beta", 1) != 1) {
        return refuse(i, "transA, alpha or beta other than the defaults");
      }
      const auto w = weight_dims(n.input(1));
      if (w.size() != 2) return refuse(i, "weight of rank " + std::to_string(w.size()));
      const bool trans_b = attr_i(n, "transB", 0) != 0;
      const int64_t out_features = trans_b ? w[0] : w[1];
      const bool bias = n.input_size() > 2 && !n.input(2).empty();
      out(b_.linear(id, *a, out_features, bias));
      // GraphPipe's weight is [out, in]: ONNX's B as is with transB, transposed without.
      if (auto v = float_values(n.input(1))) {
        set_values(id, "weight", trans_b ? *v : transposed(*v, w[0], w[1]));
      }
      if (bias) {
        if (auto v = float_values(n.input(2))) set_values(id, "bias", *v);
      }
      return;
    }
    if (t == "MatMul") {
      auto a = in(0);
      if (!a) return refuse(i, "its first input is not an activation");
      if (!is_weight(n.input(1))) {
        return refuse(i, "a product of two activations (an attention subgraph?) has no operator");
      }
      const auto w = weight_dims(n.input(1));
      if (w.size() != 2) return refuse(i, "weight of rank " + std::to_string(w.size()));
      // MatMul + Add(bias of the output width) is one linear.
      const int add = sole_consumer(n.output(0));
      bool bias = false;
      std::string bias_name;
      std::string result = n.output(0);
      if (add >= 0 && g_.node(add).op_type() == "Add" && g_.node(add).input_size() == 2) {
        const auto& an = g_.node(add);
        const std::string& other = an.input(0) == n.output(0) ? an.input(1) : an.input(0);
        const auto bd = is_weight(other) ? weight_dims(other) : std::vector<int64_t>{};
        if (bd.size() == 1 && bd[0] == w[1]) {
          bias = true;
          bias_name = other;
          result = an.output(0);
          done_[static_cast<size_t>(add)] = true;
        }
      }
      act_[result] = b_.linear(id, *a, w[1], bias);
      if (auto v = float_values(n.input(1))) set_values(id, "weight", transposed(*v, w[0], w[1]));
      if (bias) {
        if (auto v = float_values(bias_name)) set_values(id, "bias", *v);
      }
      return;
    }
    if (t == "Add") {
      auto x = in(0), y = in(1);
      if (x && y) return out(b_.add(id, {*x, *y}));
      return refuse(i, "adds a weight that is not a MatMul's bias");
    }
    if (t == "Div") return erf_gelu(i, id);
    if (t == "Concat") {
      std::vector<TensorRef> xs;
      for (int k = 0; k < n.input_size(); ++k) {
        auto x = in(k);
        if (!x) return refuse(i, "input " + std::to_string(k) + " is not an activation");
        xs.push_back(*x);
      }
      const auto axis = sample_axis(attr_i(n, "axis", 0));
      if (!axis) return refuse(i, "concatenates along the batch axis");
      return out(b_.concat(id, xs, *axis));
    }
    if (t == "Slice") return slice(i, id);
    if (t == "Gather") return embedding_bag(i, id);
    if (t == "Flatten") {
      auto x = in(0);
      const auto rank = rank_of(n.input(0));
      if (x && attr_i(n, "axis", 1) == 1 && rank && *rank == 2) return out(*x);
      return refuse(i, "flattens a tensor of more than one per-sample dimension (no reshape op)");
    }
    refuse(i, "no GraphPipe operator for this type");
  }

  // float32 values of an initializer; nullopt for weights that came as graph inputs
  // (export_params=False) or of another type.
  std::optional<std::vector<float>> float_values(const std::string& name) const {
    auto it = consts_.find(name);
    if (it == consts_.end() || it->second->data_type() != kOnnxFloat) return std::nullopt;
    const auto v = values_of(*it->second);
    return std::vector<float>(v.begin(), v.end());
  }
  static std::vector<float> transposed(const std::vector<float>& v, int64_t rows, int64_t cols) {
    std::vector<float> t(v.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c)
        t[static_cast<size_t>(c * rows + r)] = v[static_cast<size_t>(r * cols + c)];
    }
    return t;
  }
  // Imports a parameter's values into op `id` (float32 little-endian, its shape row-major).
  void set_values(const std::string& id, const std::string& param, const std::vector<float>& v) {
    for (auto& op : *b_.model().mutable_ops()) {
      if (op.id() != id) continue;
      (*op.mutable_param_values())[param] =
          std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    }
  }

  std::optional<int64_t> rank_of(const std::string& name) const {
    if (auto it = shapes_.find(name); it != shapes_.end() && !it->second.empty()) {
      return static_cast<int64_t>(it->second.size());
    }
    for (const auto& in : g_.input()) {
      if (in.name() == name) return static_cast<int64_t>(dims_of(in).size());
    }
    return std::nullopt;
  }

  // x / sqrt(2) -> Erf -> + 1 -> * x -> * 0.5, as PyTorch exports the exact GELU before opset 20.
  void erf_gelu(int i, const std::string& id) {
    const auto& div = g_.node(i);
    auto x = activation(div.input(0));
    const auto c = scalar(div.input(1));
    if (!x || !c || std::fabs(*c - std::sqrt(2.0)) > 1e-3) {
      return refuse(i, "a division that does not start an erf GELU");
    }
    std::vector<int> chain;
    std::string cur = div.output(0);
    const std::vector<std::string> steps = {"Erf", "Add", "Mul", "Mul"};
    for (const auto& step : steps) {
      const int k = sole_consumer(cur);
      if (k < 0 || g_.node(k).op_type() != step) return refuse(i, "not an erf GELU");
      const auto& nk = g_.node(k);
      if (step == "Add") {
        const std::string& other = nk.input(0) == cur ? nk.input(1) : nk.input(0);
        if (scalar(other) != 1.0) return refuse(i, "not an erf GELU (adds other than 1)");
      }
      if (step == "Mul" && chain.size() == 2) {  // * x
        const std::string& other = nk.input(0) == cur ? nk.input(1) : nk.input(0);
        if (other != div.input(0))
          return refuse(i, "not an erf GELU (multiplies by another tensor)");
      }
      if (step == "Mul" && chain.size() == 3) {  // * 0.5
        const std::string& other = nk.input(0) == cur ? nk.input(1) : nk.input(0);
        if (scalar(other) != 0.5) return refuse(i, "not an erf GELU (scales by other than 0.5)");
      }
      chain.push_back(k);
      cur = nk.output(0);
    }
    for (int k : chain) done_[static_cast<size_t>(k)] = true;
    act_[cur] = b_.gelu(id, *x);
  }

  void slice(int i, const std::string& id) {
    const auto& n = g_.node(i);
    auto x = activation(n.input(0));
    if (!x || n.input_size() < 3) return refuse(i, "expected data, starts and ends");
    auto one = [&](int k, double fallback) -> std::optional<double> {
      if (k >= n.input_size() || n.input(k).empty()) return fallback;
      return scalar(n.input(k));
    };
    const auto start = one(1, 0), end = one(2, 0), axis = one(3, 0), step = one(4, 1);
    if (!start || !end || !axis || !step || *step != 1) {
      return refuse(i, "only one constant axis with step 1 maps");
    }
    const auto a = sample_axis(static_cast<int64_t>(*axis));
    if (!a) return refuse(i, "slices the batch axis");
    int64_t e = *end > 1e12 ? int64_t{1} << 41 : static_cast<int64_t>(*end);
    if (e > (int64_t{1} << 40)) {  // "to the end": the dimension's size
      const auto in_shape = shapes_.find(n.input(0));
      if (in_shape == shapes_.end())
        return refuse(i, "an open-ended slice of a tensor of unknown shape");
      const int64_t full =
          static_cast<int64_t>(*axis) >= 0
              ? static_cast<int64_t>(*axis)
              : static_cast<int64_t>(in_shape->second.size()) + static_cast<int64_t>(*axis);
      e = in_shape->second[static_cast<size_t>(full)];
    }
    act_[n.output(0)] = b_.slice(id, *x, *a, static_cast<int64_t>(*start), e);
  }

  // Gather(table, ids) then ReduceSum/ReduceMean over the bag: an embedding bag.
  void embedding_bag(int i, const std::string& id) {
    const auto& n = g_.node(i);
    auto ids = activation(n.input(1));
    if (!is_weight(n.input(0)) || !ids || attr_i(n, "axis", 0) != 0) {
      return refuse(i, "only a lookup in a weight table maps");
    }
    const auto table = weight_dims(n.input(0));
    const int r = sole_consumer(n.output(0));
    if (table.size() != 2 || r < 0) return refuse(i, "a lookup not reduced over its bag");
    const auto& red = g_.node(r);
    if (red.op_type() != "ReduceSum" && red.op_type() != "ReduceMean") {
      return refuse(i, "a lookup not reduced over its bag (no embedding op without a bag)");
    }
    std::vector<double> axes;
    if (const auto* a = attr(red, "axes")) {
      for (int64_t v : a->ints()) axes.push_back(static_cast<double>(v));
    } else if (red.input_size() > 1 && consts_.count(red.input(1))) {
      axes = values_of(*consts_.at(red.input(1)));
    }
    if (axes.size() != 1 || axes[0] != 1 || attr_i(red, "keepdims", 1) != 0) {
      return refuse(r, "reduces other than the bag axis 1 without keepdims");
    }
    done_[static_cast<size_t>(r)] = true;
    TensorRef out = b_.embedding_bag(id, *ids, table[0], table[1]);
    if (auto v = float_values(n.input(0))) set_values(id, "weight", *v);
    if (red.op_type() == "ReduceMean") {
      for (auto& op : *b_.model().mutable_ops()) {
        if (op.id() == id) set_attr(op, "mode", std::string_view("mean"));
      }
    }
    act_[red.output(0)] = out;
  }

  Status add_losses() {
    if (options_.loss != "mse" && options_.loss != "cross_entropy") {
      return invalid_argument("--loss = '" + options_.loss + "', expected mse or cross_entropy");
    }
    if (g_.output_size() == 0) return invalid_argument(path_ + ": the graph has no outputs");
    for (const auto& o : g_.output()) {
      auto y = activation(o.name());
      if (!y)
        return invalid_argument(path_ + ": graph output '" + o.name() +
                                "' is not computed by a mapped operator");
      const auto dims = dims_of(o);
      if (dims.empty()) {
        return invalid_argument(path_ + ": graph output '" + o.name() +
                                "' needs a shape (export with output shapes)");
      }
      // Per sample, as for inputs: the dimensions after the batch, [1] for a [batch] output.
      std::vector<int64_t> per_sample(dims.begin() + 1, dims.end());
      if (per_sample.empty()) per_sample.push_back(1);
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

  const onnx::GraphProto& g_;
  std::string path_;
  OnnxImportOptions options_;
  GraphBuilder b_;
  std::map<std::string, const onnx::TensorProto*> consts_;
  std::map<std::string, std::vector<int64_t>> shapes_;
  std::set<std::string> weight_inputs_;
  std::map<std::string, std::vector<int>> consumers_;
  std::map<std::string, TensorRef> act_;
  std::set<std::string> used_ids_;
  std::vector<bool> done_;
  std::vector<std::string> unsupported_;
  std::set<std::string> poisoned_;  // outputs of refused nodes and of nodes fed by them
  bool fed_by_refused_ = false;
};

}  // namespace

Result<ModelGraph> import_onnx(const std::string& path, const OnnxImportOptions& options) {
  GP_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) {
    return invalid_argument(path + ": not an ONNX model (protobuf ModelProto did not parse)");
  }
  if (!model.has_graph()) return invalid_argument(path + ": ONNX model without a graph");
  return Importer(model, path, options).run();
}

}  // namespace gp::graph
