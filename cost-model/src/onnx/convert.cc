// One ONNX node -> catalogue operators. ONNX axes count the batch (axis 0); GraphPipe's are per
// sample, so an ONNX axis k > 0 is k - 1 and an operation on the batch axis has no mapping.
#include <algorithm>
#include <cmath>
#include <map>

#include "onnx/importer.h"

namespace gp::graph::onnx_detail {
namespace {

std::vector<float> transposed(const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::vector<float> t(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      t[static_cast<size_t>(c * rows + r)] = v[static_cast<size_t>(r * cols + c)];
  }
  return t;
}

std::string dims_string(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t d : v) p *= d;
  return p;
}

// The mapped ONNX types with the number of inputs each needs at least.
const std::map<std::string, int>& mapped_inputs() {
  static const std::map<std::string, int> kMapped = {
      {"Identity", 1},      {"Dropout", 1},
      {"Relu", 1},          {"Gelu", 1},
      {"Softmax", 1},       {"LayerNormalization", 2},
      {"Gemm", 2},          {"MatMul", 2},
      {"Add", 2},           {"Mul", 2},
      {"Div", 2},           {"Concat", 1},
      {"Slice", 3},         {"Split", 1},
      {"Gather", 2},        {"Transpose", 1},
      {"Reshape", 1},       {"Flatten", 1},
      {"Squeeze", 1},       {"Unsqueeze", 1},
      {"Conv", 2},          {"MaxPool", 1},
      {"AveragePool", 1},   {"GlobalAveragePool", 1},
      {"GlobalMaxPool", 1}, {"BatchNormalization", 3}};
  return kMapped;
}

}  // namespace

bool mapped_type(const std::string& t) { return mapped_inputs().count(t) > 0; }

void Importer::convert(int i) {
  const auto& n = g_.node(i);
  const std::string& t = n.op_type();
  if (t == "ReduceMean" && match_layer_norm(i)) return;  // emitted at the pattern's last node
  const auto fused = fused_.find(i);
  current_ = i;
  current_id_ = unique_id(fused != fused_.end() ? fused->second.name : n.name(),
                          sanitize(t) + "_" + std::to_string(i));
  const std::string& id = current_id_;
  fed_by_refused_ = false;
  for (const auto& input : n.input()) fed_by_refused_ = fed_by_refused_ || poisoned_.count(input);
  if (fused != fused_.end()) return emit_fused(i, fused->second);
  if (auto m = mapped_inputs().find(t); m != mapped_inputs().end()) {
    if (n.output_size() < 1 || n.output(0).empty()) return refuse(i, "has no output");
    if (n.input_size() < m->second) {
      return refuse(i, "has " + std::to_string(n.input_size()) + " input(s), needs at least " +
                           std::to_string(m->second));
    }
  }
  auto in = [&](int k) { return k < n.input_size() ? activation(n.input(k)) : std::nullopt; };
  auto out = [&](const TensorRef& r) { act_[n.output(0)] = r; };
  if (t == "Identity" || t == "Dropout") {
    if (auto x = in(0)) return out(*x);
    return refuse(i, "its input is not an activation");
  }
  if (t == "Relu" || t == "Gelu" || t == "Softmax" || t == "LayerNormalization") {
    auto x = in(0);
    if (!x) return refuse(i, "its input is not an activation");
    if (t == "Relu") return out(b_.relu(id, *x));
    if (t == "Gelu") return out(b_.gelu(id, *x));  // exact and tanh both train as tanh
    // Before opset 13 Softmax defaults to axis 1 and flattens from there: the last axis only
    // when that is axis 1 of a 2-D tensor.
    const int64_t axis = attr_i(n, "axis", t == "Softmax" && opset_ > 0 && opset_ < 13 ? 1 : -1);
    const auto rank = rank_of(n.input(0));
    const auto a = sample_axis(n.input(0), axis);
    if (!rank || !a || *a != *rank - 2) {
      return refuse(i, "axis = " + std::to_string(axis) +
                           " (only the last axis maps, of a tensor with per-sample dimensions)");
    }
    if (t == "Softmax") return out(b_.softmax(id, *x));
    if (!is_weight(n.input(1))) return refuse(i, "scale is not a weight");
    if (n.input_size() > 2 && !n.input(2).empty() && !is_weight(n.input(2))) {
      return refuse(i, "bias is not a weight");
    }
    out(b_.layer_norm(id, *x));
    if (const double eps = attr_f(n, "epsilon", 1e-5); std::fabs(eps - 1e-5) > 1e-9) {
      set_attr(op_by_id(id), "epsilon", eps);
    }
    if (auto v = float_values(n.input(1))) set_values(id, "gamma", *v);
    if (n.input_size() > 2 && !n.input(2).empty()) {
      if (auto v = float_values(n.input(2))) set_values(id, "beta", *v);
    }
    return;
  }
  if (t == "Gemm") return gemm(i, id);
  if (t == "MatMul") return matmul(i, id);
  if (t == "Add") {
    auto x = in(0), y = in(1);
    if (x && y) return out(b_.add(id, {*x, *y}));
    return refuse(i, "adds a constant or weight that is not a MatMul's bias");
  }
  if (t == "Mul" || t == "Div") return scale(i, id);
  if (t == "Concat") {
    std::vector<TensorRef> xs;
    for (int k = 0; k < n.input_size(); ++k) {
      auto x = in(k);
      if (!x) return refuse(i, "input " + std::to_string(k) + " is not an activation");
      xs.push_back(*x);
    }
    const auto axis = sample_axis(n.input(0), attr_i(n, "axis", 0));
    if (!axis) return refuse(i, "concatenates along the batch axis (or an axis out of range)");
    return out(b_.concat(id, xs, *axis));
  }
  if (t == "Slice") return slice(i, id);
  if (t == "Split") return split(i, id);
  if (t == "Gather") return embedding_bag(i, id);
  if (t == "Transpose") return transpose(i, id);
  if (t == "Reshape" || t == "Flatten" || t == "Squeeze" || t == "Unsqueeze") return reshape(i, id);
  if (t == "Conv") return conv(i, id);
  if (t == "MaxPool" || t == "AveragePool" || t == "GlobalAveragePool" || t == "GlobalMaxPool") {
    return pool(i, id);
  }
  if (t == "BatchNormalization") return batch_norm(i, id);
  refuse(i, "no GraphPipe operator for this type");
}

void Importer::emit_fused(int i, const Fused& f) {
  auto x = activation(f.x);
  if (!x) return refuse(i, "the input of its pattern is not an activation");
  const std::string& id = current_id_;
  if (f.kind == Fused::Kind::kGelu) {
    act_[g_.node(i).output(0)] = b_.gelu(id, *x);
    return;
  }
  act_[g_.node(i).output(0)] = b_.layer_norm(id, *x);
  if (std::fabs(f.epsilon - 1e-5) > 1e-9) set_attr(op_by_id(id), "epsilon", f.epsilon);
  if (!f.gamma.empty()) {
    if (auto v = float_values(f.gamma)) set_values(id, "gamma", *v);
  }
  if (!f.beta.empty()) {
    if (auto v = float_values(f.beta)) set_values(id, "beta", *v);
  }
}

void Importer::gemm(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto a = activation(n.input(0));
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
  if (bias) {  // C must be a bias of the output width, not an activation (torch.addmm) or matrix
    const auto c = is_weight(n.input(2)) ? weight_dims(n.input(2)) : std::vector<int64_t>{};
    const bool row = (c.size() == 1 && c[0] == out_features) ||
                     (c.size() == 2 && c[0] == 1 && c[1] == out_features);
    if (!row) return refuse(i, "C is not a bias weight of the output width");
  }
  act_[n.output(0)] = b_.linear(id, *a, out_features, bias);
  // GraphPipe's weight is [out, in]: ONNX's B as is with transB, transposed without.
  if (auto v = float_values(n.input(1))) {
    set_values(id, "weight", trans_b ? *v : transposed(*v, w[0], w[1]));
  }
  if (bias) {
    if (auto v = float_values(n.input(2))) set_values(id, "bias", *v);
  }
}

// With a weight: a linear (plus a following Add of a bias of the output width). Of two
// activations (attention scores and context): a batched matmul over equal leading dimensions.
void Importer::matmul(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto a = activation(n.input(0));
  if (!a) return refuse(i, "its first input is not an activation");
  if (auto b = activation(n.input(1))) {
    const auto sa = sample_shape(n.input(0)), sb = sample_shape(n.input(1));
    if (sa && sb && (sa->size() != sb->size() || sa->size() < 2)) {
      return refuse(i, "a product of activations " + dims_string(*sa) + " x " + dims_string(*sb) +
                           " per sample (only equal ranks >= 2 map; no broadcasting)");
    }
    act_[n.output(0)] = b_.matmul(id, *a, *b);
    return;
  }
  if (!is_weight(n.input(1))) return refuse(i, "its second input is neither activation nor weight");
  const auto w = weight_dims(n.input(1));
  if (w.size() != 2) return refuse(i, "weight of rank " + std::to_string(w.size()));
  int add = sole_consumer(n.output(0));
  if (add >= 0 && !only_consumers_in(n.output(0), {add})) add = -1;  // also a graph output
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
}

// Mul or Div of an activation by a scalar constant (attention's 1/sqrt(d), for one).
void Importer::scale(int i, const std::string& id) {
  const auto& n = g_.node(i);
  if (n.input_size() != 2) return refuse(i, "expected two inputs");
  const bool div = n.op_type() == "Div";
  auto x = activation(n.input(0));
  auto c = scalar(n.input(1));
  if (!div && !(x && c)) {
    x = activation(n.input(1));
    c = scalar(n.input(0));
  }
  if (!x) return refuse(i, "its input is not an activation");
  if (!c) {
    return refuse(i, std::string(div ? "divides" : "multiplies") +
                         " by a tensor, not a scalar constant (no element-wise product op)");
  }
  if (div && *c == 0) return refuse(i, "divides by zero");
  act_[n.output(0)] = b_.scale(id, *x, div ? 1.0 / *c : *c);
}

void Importer::slice(int i, const std::string& id) {
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
  const auto a = sample_axis(n.input(0), static_cast<int64_t>(*axis));
  if (!a) return refuse(i, "slices the batch axis (or an axis out of range)");
  const auto shape = sample_shape(n.input(0));
  const int64_t size =
      shape && *a < static_cast<int64_t>(shape->size()) ? (*shape)[static_cast<size_t>(*a)] : -1;
  if (size <= 0) return refuse(i, "a slice of a tensor of unknown shape");
  // As ONNX: negative positions count from the end, then both are clamped to [0, size].
  int64_t s = static_cast<int64_t>(std::max(-1e15, *start));
  int64_t e = static_cast<int64_t>(std::min(1e15, *end));
  if (s < 0) s += size;
  if (e < 0) e += size;
  s = std::clamp<int64_t>(s, 0, size);
  e = std::clamp<int64_t>(e, 0, size);
  act_[n.output(0)] = b_.slice(id, *x, *a, s, e);
}

// Split -> one slice per used output.
void Importer::split(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  const int64_t onnx_axis = attr_i(n, "axis", 0);
  const auto a = sample_axis(n.input(0), onnx_axis);
  if (!a) return refuse(i, "splits the batch axis (or an axis out of range)");
  const auto shape = sample_shape(n.input(0));
  std::vector<int64_t> sizes = attr_ints(n, "split");
  if (sizes.empty() && n.input_size() > 1 && !n.input(1).empty()) {
    auto v = folded(n.input(1));
    if (!v) return refuse(i, "split sizes are not constant");
    for (double s : *v) sizes.push_back(static_cast<int64_t>(s));
  }
  if (sizes.empty()) {
    const int64_t dim =
        shape && *a < static_cast<int64_t>(shape->size()) ? (*shape)[static_cast<size_t>(*a)] : 0;
    if (dim <= 0 || dim % n.output_size() != 0) {
      return refuse(i, "an equal split of an axis of unknown or indivisible size");
    }
    sizes.assign(static_cast<size_t>(n.output_size()), dim / n.output_size());
  }
  if (static_cast<int>(sizes.size()) != n.output_size()) {
    return refuse(i, std::to_string(sizes.size()) + " split sizes for " +
                         std::to_string(n.output_size()) + " outputs");
  }
  int64_t begin = 0;
  for (int k = 0; k < n.output_size(); ++k) {
    const int64_t end = begin + sizes[static_cast<size_t>(k)];
    if (!n.output(k).empty() && !only_consumers_in(n.output(k), {})) {
      act_[n.output(k)] =
          b_.slice(k == 0 ? id : unique_id(id + "." + std::to_string(k), id), *x, *a, begin, end);
    }
    begin = end;
  }
}

// Gather(table, ids) then ReduceSum/ReduceMean over the bag: an embedding bag.
void Importer::embedding_bag(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto ids = activation(n.input(1));
  if (!is_weight(n.input(0)) || !ids || attr_i(n, "axis", 0) != 0) {
    return refuse(i, "only a lookup in a weight table maps");
  }
  const auto table = weight_dims(n.input(0));
  const int r = sole_consumer(n.output(0));
  if (table.size() != 2 || r < 0) return refuse(i, "a lookup not reduced over its bag");
  if (rank_of(n.input(1)) != 2) return refuse(i, "ids are not [batch, bag]");
  const auto& red = g_.node(r);
  if (red.op_type() != "ReduceSum" && red.op_type() != "ReduceMean") {
    return refuse(i, "a lookup not reduced over its bag (no embedding op without a bag)");
  }
  std::vector<double> axes;
  for (int64_t v : attr_ints(red, "axes")) axes.push_back(static_cast<double>(v));
  if (axes.empty() && red.input_size() > 1) axes = folded(red.input(1)).value_or(axes);
  if (axes.size() != 1 || (axes[0] != 1 && axes[0] != -2) || attr_i(red, "keepdims", 1) != 0) {
    done_[static_cast<size_t>(r)] = true;  // refused with the lookup, not on its own
    for (const auto& o : red.output()) poisoned_.insert(o);
    return refuse(i, "its " + red.op_type() + " (node " + std::to_string(r) +
                         ") reduces other than the bag axis 1, or keeps dimensions");
  }
  done_[static_cast<size_t>(r)] = true;
  TensorRef out = b_.embedding_bag(id, *ids, table[0], table[1]);
  if (auto v = float_values(n.input(0))) set_values(id, "weight", *v);
  if (red.op_type() == "ReduceMean") set_attr(op_by_id(id), "mode", std::string_view("mean"));
  act_[red.output(0)] = out;
}

void Importer::transpose(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  const auto perm = attr_ints(n, "perm");
  if (perm.empty() || perm[0] != 0) {
    return refuse(i, "perm " + dims_string(perm) + " moves the batch axis");
  }
  std::vector<int64_t> sample_perm;
  for (size_t k = 1; k < perm.size(); ++k) sample_perm.push_back(perm[k] - 1);
  act_[n.output(0)] = b_.transpose(id, *x, sample_perm);
}

// Reshape, Flatten, Squeeze and Unsqueeze: a copy into a new per-sample shape, taken from the
// constant (or folded) target shape, else from the output's shape information.
void Importer::reshape(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const std::string& t = n.op_type();
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  const auto in_shape = sample_shape(n.input(0));
  std::optional<std::vector<int64_t>> shape;
  if (t == "Flatten") {
    if (attr_i(n, "axis", 1) != 1) return refuse(i, "flattens the batch into other dimensions");
    if (in_shape) shape = std::vector<int64_t>{product(*in_shape)};
  } else if (t == "Reshape" && n.input_size() > 1) {
    if (auto target = folded(n.input(1))) {
      if (target->empty()) return refuse(i, "reshapes to a scalar");
      if (attr_i(n, "allowzero", 0) != 0 &&
          std::find(target->begin(), target->end(), 0.0) != target->end()) {
        return refuse(i, "allowzero = 1 with a zero-size dimension");
      }
      const double first = (*target)[0];
      if (!(first == kBatchDim || first == 0 || first == -1)) {
        return refuse(i, "target shape does not keep the batch as its first dimension");
      }
      std::vector<int64_t> s;
      int infer = -1;
      for (size_t k = 1; k < target->size(); ++k) {
        const double v = (*target)[k];
        if (v == 0 && in_shape && k - 1 < in_shape->size()) {
          s.push_back((*in_shape)[k - 1]);
        } else if (v == -1 && infer < 0 && first != -1) {
          infer = static_cast<int>(s.size());
          s.push_back(1);
        } else if (v >= 1 && v == std::floor(v)) {
          s.push_back(static_cast<int64_t>(v));
        } else {
          return refuse(i,
                        "target shape element " + std::to_string(k) +
                            " is not a per-sample size (it depends on the batch or is -1 twice)");
        }
      }
      if (infer >= 0) {
        if (!in_shape) return refuse(i, "infers a dimension of an input of unknown shape");
        s[static_cast<size_t>(infer)] = product(*in_shape) / product(s);
      }
      if (s.empty()) s.push_back(1);
      shape = s;
    }
  }
  if (!shape) shape = sample_shape(n.output(0));
  if (!shape) return refuse(i, "its output shape is unknown (run ONNX shape inference)");
  if (in_shape && *in_shape == *shape) return void(act_[n.output(0)] = *x);
  act_[n.output(0)] = b_.reshape(id, *x, *shape);
}

void Importer::conv(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x || n.input_size() < 2 || !is_weight(n.input(1))) {
    return refuse(i, "expected an activation convolved with a weight");
  }
  const auto w = weight_dims(n.input(1));
  if (w.size() != 4)
    return refuse(i, "a weight of rank " + std::to_string(w.size()) + " (only 2-D)");
  if (attr_i(n, "group", 1) != 1) return refuse(i, "grouped convolution (group > 1)");
  for (int64_t d : attr_ints(n, "dilations")) {
    if (d != 1) return refuse(i, "dilations other than 1");
  }
  const std::string auto_pad = attr_s(n, "auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") return refuse(i, "auto_pad = " + auto_pad);
  std::vector<int64_t> pads = attr_ints(n, "pads");
  if (pads.empty()) pads = {0, 0, 0, 0};
  if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3]) {
    return refuse(i, "pads " + dims_string(pads) + " (only symmetric 2-D padding)");
  }
  std::vector<int64_t> strides = attr_ints(n, "strides");
  if (strides.empty()) strides = {1, 1};
  const bool bias = n.input_size() > 2 && !n.input(2).empty();
  if (bias && weight_dims(n.input(2)) != std::vector<int64_t>{w[0]}) {
    return refuse(i, "bias B is not a weight of the output channels");
  }
  act_[n.output(0)] = b_.conv2d(id, *x, w[0], {w[2], w[3]}, strides, {pads[0], pads[1]}, bias);
  if (auto v = float_values(n.input(1))) set_values(id, "weight", *v);  // [out, C, kh, kw] both
  if (bias) {
    if (auto v = float_values(n.input(2))) set_values(id, "bias", *v);
  }
}

void Importer::pool(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const std::string& t = n.op_type();
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  for (int k = 1; k < n.output_size(); ++k) {
    if (!n.output(k).empty() && !only_consumers_in(n.output(k), {})) {
      return refuse(i, "its indices output is used");
    }
  }
  const bool max = t == "MaxPool" || t == "GlobalMaxPool";
  std::vector<int64_t> kernel, strides, pads;
  if (t == "GlobalAveragePool" || t == "GlobalMaxPool") {
    const auto s = sample_shape(n.input(0));
    if (!s || s->size() != 3) return refuse(i, "a global pool of an input that is not [C, H, W]");
    kernel = {(*s)[1], (*s)[2]};
    strides = kernel;
    pads = {0, 0, 0, 0};
  } else {
    kernel = attr_ints(n, "kernel_shape");
    strides = attr_ints(n, "strides");
    pads = attr_ints(n, "pads");
    if (strides.empty()) strides = {1, 1};  // ONNX's default, unlike PyTorch's
    if (pads.empty()) pads = {0, 0, 0, 0};
    if (kernel.size() != 2) return refuse(i, "kernel_shape " + dims_string(kernel) + " (only 2-D)");
    if (attr_i(n, "ceil_mode", 0) != 0) return refuse(i, "ceil_mode = 1");
    for (int64_t d : attr_ints(n, "dilations")) {
      if (d != 1) return refuse(i, "dilations other than 1");
    }
    const std::string auto_pad = attr_s(n, "auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID") return refuse(i, "auto_pad = " + auto_pad);
    if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3]) {
      return refuse(i, "pads " + dims_string(pads) + " (only symmetric 2-D padding)");
    }
  }
  const std::vector<int64_t> padding = {pads[0], pads[1]};
  act_[n.output(0)] =
      max ? b_.max_pool2d(id, *x, kernel, strides, padding)
          : b_.avg_pool2d(id, *x, kernel, strides, padding, attr_i(n, "count_include_pad", 0) != 0);
}

// Trains with batch statistics (the running mean and variance of an eval-mode export are not
// used); scale and bias become gamma and beta.
void Importer::batch_norm(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x || n.input_size() < 3 || !is_weight(n.input(1)) || !is_weight(n.input(2))) {
    return refuse(i, "expected an activation with scale and bias weights");
  }
  for (int k = 1; k < n.output_size(); ++k) {
    if (!n.output(k).empty() && !only_consumers_in(n.output(k), {})) {
      return refuse(i, "its running statistics outputs are used");
    }
  }
  act_[n.output(0)] = b_.batch_norm(id, *x, attr_f(n, "epsilon", 1e-5));
  if (auto v = float_values(n.input(1))) set_values(id, "gamma", *v);
  if (auto v = float_values(n.input(2))) set_values(id, "beta", *v);
}

}  // namespace gp::graph::onnx_detail
