// Element-wise ONNX ops that no fused pattern or specific mapping takes (Sub, Div by a tensor,
// Pow, Max, Exp, comparisons, Where, ...), onto the catalogue's general ops. Each operand is an
// activation, a trained weight (a broadcast_param) or a constant (a constant op); ONNX aligns
// them on their trailing axes with the batch first, and the batch axis must stay the batch axis
// of every activation: only a size-1 leading axis of a constant broadcasts over it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

bool float_type(int64_t t) {
  return t == kOnnxFloat || t == kOnnxDouble || t == kOnnxFloat16 || t == kOnnxBfloat16;
}

const std::map<std::string, std::string_view>& binary_fns() {
  static const std::map<std::string, std::string_view> kFns = {
      {"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"}, {"Div", "div"},
      {"Pow", "pow"}, {"Max", "max"}, {"Min", "min"}};
  return kFns;
}

const std::map<std::string, std::string_view>& unary_fns() {
  static const std::map<std::string, std::string_view> kFns = {{"Neg", "neg"},
                                                               {"Exp", "exp"},
                                                               {"Log", "log"},
                                                               {"Sqrt", "sqrt"},
                                                               {"Reciprocal", "reciprocal"},
                                                               {"Abs", "abs"},
                                                               {"Erf", "erf"},
                                                               {"Sin", "sin"},
                                                               {"Cos", "cos"},
                                                               {"Softplus", "softplus"}};
  return kFns;
}

const std::map<std::string, std::string_view>& compare_fns() {
  static const std::map<std::string, std::string_view> kFns = {
      {"Equal", "eq"},   {"Less", "lt"},           {"LessOrEqual", "le"},
      {"Greater", "gt"}, {"GreaterOrEqual", "ge"}, {"Xor", "ne"}};
  return kFns;
}

}  // namespace

struct Importer::Operand {
  std::string name;
  std::optional<TensorRef> act;  // an activation
  bool batched = false;          // an activation with the batch axis first
  bool weight = false;           // a trained weight
  bool integer = false;          // an integer activation (computed on as float32)
  std::vector<int64_t> dims;     // as ONNX has it (the batch as -1)
  EvalTensor value;              // a constant's values
};

graphpipe::v1::DataType Importer::dtype_of(const std::string& name) const {
  const auto a = act_.find(name);
  if (a == act_.end()) return graphpipe::v1::DATA_TYPE_FLOAT32;
  const auto s = specs_.find(a->second.op());
  if (s == specs_.end() || a->second.output() >= static_cast<int>(s->second.size())) {
    return graphpipe::v1::DATA_TYPE_FLOAT32;
  }
  return s->second[static_cast<size_t>(a->second.output())].dtype();
}

std::optional<TensorRef> Importer::anchor_for(const std::string& name) const {
  if (auto c = consumers_.find(name); c != consumers_.end()) {
    for (int k : c->second) {
      for (const auto& in : g_.node(k).input()) {
        if (in == name || unbatched_.count(in)) continue;
        if (auto a = activation(in)) return a;
      }
    }
  }
  for (const auto& in : g_.input()) {
    if (auto a = activation(in.name())) return a;
  }
  return std::nullopt;
}

Result<Importer::Operand> Importer::operand(int i, int k) const {
  const std::string& name = g_.node(i).input(k);
  const std::string what = "input " + std::to_string(k) + " '" + name + "'";
  Operand o;
  o.name = name;
  if (auto a = activation(name)) {
    o.act = a;
    o.batched = !unbatched_.count(name);
    const auto dims = onnx_shape(name);
    if (!dims) return invalid_argument(what + " has an unknown shape");
    const auto batch = batch_axis(name);
    for (size_t d = 0; d < dims->size(); ++d) {
      if ((*dims)[d] <= 0 && !(batch && static_cast<int64_t>(d) == *batch)) {
        return invalid_argument(
            what + " has an unknown size on axis " + std::to_string(d) + " of " + dims_text(*dims) +
            (batch ? " (the batch on axis " + std::to_string(*batch) + ")" : " (no batch axis)"));
      }
    }
    o.integer = dtype_of(name) != graphpipe::v1::DATA_TYPE_FLOAT32;
    o.dims = *dims;
    return o;
  }
  if (param_like(name)) {
    o.weight = true;
    o.dims = weight_dims(name);
    return o;
  }
  if (auto v = const_tensor(name)) {
    if (has_nan(v->values)) return invalid_argument(what + " depends on the batch size");
    o.dims = v->dims;
    o.value = std::move(*v);
    return o;
  }
  return invalid_argument(what + " is neither an activation nor a constant");
}

std::optional<std::vector<TensorRef>> Importer::general_inputs(int i, const std::string& id,
                                                               std::vector<int> inputs) {
  std::vector<Operand> ops;
  for (int k : inputs) {
    auto o = operand(i, k);
    if (!o.ok()) {
      refuse(i, o.status().message());
      return std::nullopt;
    }
    ops.push_back(std::move(*o));
  }
  // ONNX's element-wise ops take one element type: integer ids beside float numbers is a
  // malformed file, not arithmetic to guess at.
  for (size_t a = 0; a < ops.size(); ++a) {
    for (size_t b = 0; b < ops.size(); ++b) {
      if (ops[a].integer && ops[b].act && !ops[b].integer && !masks_.count(ops[b].name) &&
          !int_valued_.count(ops[b].name)) {
        refuse(i, "input " + std::to_string(inputs[a]) + " '" + ops[a].name +
                      "' is an integer tensor and input " + std::to_string(inputs[b]) + " '" +
                      ops[b].name + "' a float one (ONNX computes on one element type)");
        return std::nullopt;
      }
    }
  }
  // ONNX aligns the operands on their last axes: the batched activations' batch must be the same
  // axis counted from the end (`from_end`), folded alike (layout_refusal checked it).
  int64_t from_end = -1, out_rank = 0;
  BatchLayout layout;
  std::optional<TensorRef> anchor;
  for (const auto& o : ops) {
    out_rank = std::max(out_rank, static_cast<int64_t>(o.dims.size()));
    if (!o.act) continue;
    if (!anchor || (o.batched && from_end < 0)) anchor = o.act;
    if (!o.batched) continue;
    const BatchLayout l = layout_of(o.name);
    const auto r = static_cast<int64_t>(o.dims.size());
    if (from_end >= 0 && r - l.pos != from_end) {
      refuse(i, "broadcasts the batch axis against a per-sample axis: its activations have " +
                    std::to_string(std::min(from_end, r - l.pos)) + " and " +
                    std::to_string(std::max(from_end, r - l.pos)) + " axes from the batch axis on");
      return std::nullopt;
    }
    from_end = r - l.pos;
    layout = l;
  }
  if (!anchor && dynamo_metadata_ &&
      std::any_of(ops.begin(), ops.end(), [](const Operand& o) { return o.weight; })) {
    // A function of trained weights and constants alone (Gemma's RMSNorm scale `1 + weight`):
    // the weights are the same for every sample, and so is the result; gradients reach them.
    // Only where torch marked the buffers (dynamo): a legacy export's initializer may be a
    // buffer (rotary inv_freq), which must not train; there it stays refused (--freeze NAME).
    anchor = anchor_for(g_.node(i).output(0));
    if (anchor) unbatched_.insert(g_.node(i).output(0));
  }
  if (!anchor) {
    refuse(i, "none of its inputs is an activation (constants that were not folded)");
    return std::nullopt;
  }
  // Each operand's per-sample shape, aligned on the last axes: an operand that reaches the
  // batch axis has 1 there, which becomes the fold's dims (none when the batch is not folded).
  std::vector<std::vector<int64_t>> pers;
  for (size_t k = 0; k < ops.size(); ++k) {
    const Operand& o = ops[k];
    const std::string what =
        "input " + std::to_string(inputs[k]) + " '" + o.name + "' " + dims_text(o.dims);
    std::vector<int64_t> per = o.dims;
    const auto c = static_cast<int64_t>(o.dims.size());
    if (o.batched) {
      per = *sample_shape(o.name);
    } else if (from_end >= 0 && c >= from_end) {
      const int64_t at = c - from_end;
      if (o.dims[static_cast<size_t>(at)] != 1) {
        const int64_t size = o.dims[static_cast<size_t>(at)];
        refuse(i, what + " has " + std::to_string(size) +
                      " on the batch axis (only 1 broadcasts over the batch)" +
                      (size == static_batch_ ? "; the export traced its batch size into it: "
                                               "export with a dynamic batch"
                                             : ""));
        return std::nullopt;
      }
      per.erase(per.begin() + at);
      per.insert(per.begin() + at, static_cast<size_t>(layout.folded()), 1);
    }
    if (per.empty()) per.push_back(1);
    pers.push_back(std::move(per));
  }
  std::vector<int64_t> out;
  for (const auto& per : pers) {
    if (per.size() > out.size()) out.insert(out.begin(), per.size() - out.size(), 1);
    for (size_t d = 0; d < per.size(); ++d) {
      int64_t& o = out[out.size() - per.size() + d];
      if (per[d] == o || per[d] == 1) continue;
      if (o != 1) {
        std::string shapes;
        for (const auto& p : pers) shapes += (shapes.empty() ? "" : " and ") + dims_text(p);
        refuse(i, "per-sample shapes " + shapes + " do not broadcast");
        return std::nullopt;
      }
      o = per[d];
    }
  }
  // An operand of more axes than the activations puts axes before the batch.
  if (from_end >= 0) {
    layouts_[g_.node(i).output(0)] = BatchLayout{out_rank - from_end, layout.outer, layout.inner};
  }
  std::vector<TensorRef> refs;
  for (size_t k = 0; k < ops.size(); ++k) {
    const Operand& o = ops[k];
    const std::vector<int64_t>& per = pers[k];
    const std::string part = unique_id(id + "." + std::to_string(inputs[k]), id);
    if (o.act) {
      const TensorRef x = o.integer ? as_float(o.name, *o.act, part) : *o.act;
      const bool reshaped = !o.batched && per != o.dims;
      refs.push_back(reshaped ? b_.reshape(part, x, per) : x);
    } else if (o.weight) {
      refs.push_back(b_.broadcast_param(part, *anchor, per));
      take(part, "value", o.name);
    } else {
      std::vector<float> values(o.value.values.begin(), o.value.values.end());
      refs.push_back(b_.constant(part, *anchor, per, values));
    }
  }
  return refs;
}

void Importer::general(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const std::string& t = n.op_type();
  if ((t == "Max" || t == "Min") && n.input_size() != 2) {
    if (n.input_size() == 1 && activation(n.input(0))) {
      act_[n.output(0)] = *activation(n.input(0));
      return;
    }
    return refuse(i, std::to_string(n.input_size()) + " inputs (only two map)");
  }
  if (auto f = binary_fns().find(t); f != binary_fns().end())
    return general_binary(i, id, f->second);
  if (auto f = unary_fns().find(t); f != unary_fns().end()) return general_unary(i, id, f->second);
  if (auto f = compare_fns().find(t); f != compare_fns().end()) {
    return general_compare(i, id, f->second);
  }
  if (t == "And" || t == "Or") {  // of 0/1 masks: the product and the maximum
    general_binary(i, id, t == "And" ? "mul" : "max");
    if (act_.count(n.output(0))) masks_.insert(n.output(0));
    return;
  }
  if (t == "Not") return logical_not(i, id);
  if (t == "IsNaN") return is_nan(i, id);
  if (t == "HardSigmoid" || t == "HardSwish") return hard_sigmoid(i, id);
  if (t == "Where") return general_where(i, id);
  if (t == "Cast" || t == "CastLike") return cast(i, id);
  if (t == "ReduceSum" || t == "ReduceMean" || t == "ReduceMax" || t == "ReduceL2") {
    return general_reduce(i, id);
  }
  refuse(i, "no GraphPipe operator for this type");
}

void Importer::general_binary(int i, const std::string& id, std::string_view fn) {
  const auto& n = g_.node(i);
  if (fn == "div" && integer_arithmetic(n) && integer_valued(n.input(0)) &&
      integer_valued(n.input(1))) {
    return refuse(i, "divides integers (ONNX's integer Div truncates; float division would not)");
  }
  const auto refs = general_inputs(i, id, {0, 1});
  if (!refs) return;
  act_[n.output(0)] = b_.binary(id, (*refs)[0], (*refs)[1], fn);
  // Integers stay integers under +, -, *, max and min (ONNX's integer Div truncates: not so).
  if (fn != "div" && fn != "pow" && integer_valued(n.input(0)) && integer_valued(n.input(1))) {
    int_valued_.insert(n.output(0));
  }
}

bool Importer::integer_valued(const std::string& name) const {
  if (masks_.count(name) || int_valued_.count(name)) return true;
  if (act_.count(name)) return dtype_of(name) != graphpipe::v1::DATA_TYPE_FLOAT32;
  if (folded_int_.count(name)) return true;
  if (const auto t = tensors_.find(name); t != tensors_.end()) return t->second.ints;
  const auto c = consts_.find(name);
  return c != consts_.end() && !float_type(c->second->data_type());
}

TensorRef Importer::as_float(const std::string& name, const TensorRef& x, const std::string& id) {
  const auto it = as_float_.find(name);
  if (it != as_float_.end()) return it->second;
  const TensorRef f = b_.cast(unique_id(id + ".float", id), x);
  as_float_.emplace(name, f);
  return f;
}

void Importer::gather_elements(int i, const std::string& id) {
  const auto& n = g_.node(i);
  if (n.input_size() != 2 || !activation(n.input(1))) {
    return refuse(i, "only constant values gathered at per-sample indices map");
  }
  // The values: a constant, or a constant op's (a buffer expanded over the batch).
  std::vector<double> values;
  bool ints = false;
  if (const auto x = activation(n.input(0))) {
    const Operator& op = op_by_id(x->op());
    const auto v = op.param_values().find("value");
    if (op.type() != "constant" || v == op.param_values().end())
      return gather_elements_picked(i, id);
    for (size_t k = 0; k + 4 <= v->second.size(); k += 4) {
      float f;
      std::memcpy(&f, v->second.data() + k, 4);
      values.push_back(f);
    }
    ints = dtype_of(n.input(0)) != graphpipe::v1::DATA_TYPE_FLOAT32;
  } else if (auto data = param_like(n.input(0)) ? std::nullopt : const_tensor(n.input(0))) {
    values = std::move(data->values);
    ints = data->ints;
  }
  if (values.empty()) {
    return refuse(i, "gathers from '" + n.input(0) + "', which is not a constant");
  }
  const double v = values[0];
  if (!std::isfinite(v) ||
      std::any_of(values.begin(), values.end(), [v](double x) { return x != v; })) {
    return refuse(i, "gathers from '" + n.input(0) +
                         "', whose values differ (only a constant of one repeated value, such "
                         "as a zero buffer, maps)");
  }
  const auto per = sample_shape(n.input(1));
  if (!per || !layout_of(n.input(1)).batch_first()) {
    return refuse(i, "its indices are not batch first (or of unknown shape)");
  }
  // Every element reads the one value: held as a batched constant, a row per sample.
  EvalTensor out{{1}, {}, ints};
  int64_t count = 1;
  for (int64_t d : *per) {
    out.dims.push_back(d);
    count *= d;
  }
  out.values.assign(static_cast<size_t>(count), v);
  tensors_[n.output(0)] = std::move(out);
  sample_consts_.insert(n.output(0));
}

void Importer::cumsum(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  const auto axis = n.input_size() > 1 ? scalar(n.input(1)) : std::nullopt;
  if (!axis) return refuse(i, "its axis is not a constant");
  const auto a = sample_axis(n.input(0), to_index(*axis));
  if (!a) return refuse(i, "sums along the batch axis (or an axis out of range)");
  const bool integer = integer_valued(n.input(0));
  const TensorRef in =
      dtype_of(n.input(0)) == graphpipe::v1::DATA_TYPE_FLOAT32 ? *x : as_float(n.input(0), *x, id);
  act_[n.output(0)] =
      b_.cumsum(id, in, *a, attr_i(n, "exclusive", 0) != 0, attr_i(n, "reverse", 0) != 0);
  if (integer) int_valued_.insert(n.output(0));
}

// ArgMax and ArgMin along a per-sample axis (CLIP's end-of-text position, the argmax of its
// ids) from the catalogue's ops: the positions holding the maximum (of -x for ArgMin), the first
// of them (the last with select_last_index) where the running count of maxima is 1, and the sum
// of its position (NaN counts as the maximum, as in torch). An integer held as float32, exact
// below 2^24 positions; no gradient reaches x (comparisons pass none).
void Importer::argmax(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  const int64_t axis = attr_i(n, "axis", 0);
  const auto a = sample_axis(n.input(0), axis);
  const auto shape = sample_shape(n.input(0));
  if (!a || !shape) {
    return refuse(i, "along the batch axis, or an input of unknown shape (axis " +
                         std::to_string(axis) + ")");
  }
  const auto size = static_cast<size_t>((*shape)[static_cast<size_t>(*a)]);
  if (size > (size_t{1} << 24)) {
    return refuse(i, "over " + std::to_string(size) + " positions (float32 holds 2^24 exactly)");
  }
  auto part = [&](const std::string& what) { return unique_id(id + "." + what, id); };
  TensorRef in =
      dtype_of(n.input(0)) == graphpipe::v1::DATA_TYPE_FLOAT32 ? *x : as_float(n.input(0), *x, id);
  if (n.op_type() == "ArgMin") in = b_.unary(part("neg"), in, "neg");
  const TensorRef most = b_.reduce_axes(part("max"), in, {*a}, "max", true);
  // NaN is the maximum, as in torch (the max is NaN then, equal to nothing).
  const TensorRef at_most = b_.binary(part("is_max"), b_.compare(part("equal_max"), in, most, "eq"),
                                      b_.compare(part("nan"), in, in, "ne"), "add");
  const bool last = attr_i(n, "select_last_index", 0) != 0;
  const TensorRef count = b_.cumsum(part("count"), at_most, *a, false, last);
  const TensorRef one = b_.constant(part("one"), in, {1}, {1.0f});
  const TensorRef chosen =
      b_.binary(part("chosen"), at_most, b_.compare(part("first"), count, one, "eq"), "mul");
  // The positions along the axis, broadcast over the axes after it.
  std::vector<int64_t> positions_shape(shape->size() - static_cast<size_t>(*a), 1);
  positions_shape[0] = static_cast<int64_t>(size);
  std::vector<float> positions(size);
  for (size_t p = 0; p < size; ++p) positions[p] = static_cast<float>(p);
  const TensorRef at = b_.binary(
      part("at"), chosen, b_.constant(part("positions"), in, positions_shape, positions), "mul");
  act_[n.output(0)] = b_.reduce_axes(id, at, {*a}, "sum", attr_i(n, "keepdims", 1) != 0);
  int_valued_.insert(n.output(0));
}

void Importer::general_compare(int i, const std::string& id, std::string_view fn) {
  const auto refs = general_inputs(i, id, {0, 1});
  if (!refs) return;
  const std::string& out = g_.node(i).output(0);
  act_[out] = b_.compare(id, (*refs)[0], (*refs)[1], fn);
  masks_.insert(out);
}

void Importer::general_where(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const auto refs = general_inputs(i, id, {0, 1, 2});
  if (!refs) return;
  act_[n.output(0)] = b_.where(id, (*refs)[0], (*refs)[1], (*refs)[2]);
  if (integer_valued(n.input(1)) && integer_valued(n.input(2)) && integer_arithmetic(n)) {
    int_valued_.insert(n.output(0));
  }
}

void Importer::general_unary(int i, const std::string& id, std::string_view fn) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x && param_like(n.input(0))) {
    x = trained_operand(i, id);
    if (!x) return;
  }
  if (!x) return refuse(i, "its input is not an activation");
  const bool integer = integer_valued(n.input(0)) && !masks_.count(n.input(0));
  if (dtype_of(n.input(0)) != graphpipe::v1::DATA_TYPE_FLOAT32) {
    if (fn != "neg" && fn != "abs") {
      return refuse(i, "its input '" + n.input(0) + "' is an integer tensor (only Neg and Abs " +
                           "of integers map)");
    }
    x = as_float(n.input(0), *x, id);
  }
  act_[n.output(0)] = b_.unary(id, *x, fn);
  if (integer && (fn == "neg" || fn == "abs")) int_valued_.insert(n.output(0));
}

// A function of a trained weight (CLIP's logit_scale.exp(), Swin V2's per-head
// clamp(logit_scale, max=log(100)).exp()): the parameter, the same for every sample, then the
// function of it. The result has the weight's ONNX shape, no batch axis (unbatched_), so that
// ONNX's broadcasting against activations of any rank holds per sample (a scalar's [1] against
// [B, T, C] aligns with C, not with T).
std::optional<TensorRef> Importer::trained_operand(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const auto anchor = anchor_for(n.output(0));
  if (!anchor) {
    refuse(i, "no activation to take the batch from");
    return std::nullopt;
  }
  // (Leading 1s dropped, as bias_add and the element-wise ops' weight operands drop them, so
  // that copies of one weight tie in one shape.)
  std::vector<int64_t> per = weight_dims(n.input(0));
  while (per.size() > 1 && per.front() == 1) per.erase(per.begin());
  unbatched_.insert(n.output(0));
  if (per.empty()) per.push_back(1);
  const std::string param = unique_id(id + ".0", id);
  const TensorRef x = b_.broadcast_param(param, *anchor, per);
  take(param, "value", n.input(0));
  return x;
}

// Not of a 0/1 mask: 1 - m.
void Importer::logical_not(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  if (dtype_of(n.input(0)) != graphpipe::v1::DATA_TYPE_FLOAT32) {
    return refuse(i, "its input '" + n.input(0) + "' is an integer tensor, not a mask");
  }
  const TensorRef one = b_.constant(unique_id(id + ".one", id), *x, {1}, {1.0f});
  act_[n.output(0)] = b_.binary(id, one, *x, "sub");
  masks_.insert(n.output(0));
}

// NaN is the one value unequal to itself (dynamo's attention zeroes the rows a mask emptied).
void Importer::is_nan(int i, const std::string& id) {
  const auto refs = general_inputs(i, id, {0, 0});
  if (!refs) return;
  act_[g_.node(i).output(0)] = b_.compare(id, (*refs)[0], (*refs)[1], "ne");
  masks_.insert(g_.node(i).output(0));
}

// HardSigmoid clip(alpha x + beta, 0, 1), and HardSwish x * HardSigmoid(x) with torch's alpha
// 1/6 and beta 1/2 (MobileNetV3), from element-wise ops.
void Importer::hard_sigmoid(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const auto refs = general_inputs(i, id, {0});
  if (!refs) return;
  const bool swish = n.op_type() == "HardSwish";
  const double alpha = swish ? 1.0 / 6 : attr_f(n, "alpha", 0.2);
  const double beta = swish ? 0.5 : attr_f(n, "beta", 0.5);
  const TensorRef& x = (*refs)[0];
  const TensorRef scaled = b_.scale(unique_id(id + ".scale", id), x, alpha);
  const TensorRef offset =
      b_.constant(unique_id(id + ".beta", id), x, {1}, {static_cast<float>(beta)});
  const TensorRef shifted = b_.binary(unique_id(id + ".shift", id), scaled, offset, "add");
  const TensorRef gate = b_.clip(swish ? unique_id(id + ".gate", id) : id, shifted, 0, 1);
  act_[n.output(0)] = swish ? b_.binary(id, x, gate, "mul") : gate;
}

// Between float types, or of a mask: the same values (GraphPipe computes in float32 and keeps
// booleans as 0/1 floats). A float to bool is a comparison with 0.
void Importer::cast(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const std::string& in = n.input(0);
  auto x = activation(in);
  if (!x && param_like(in)) {
    // (BART's logits + final_logits_bias.to(device): a registered buffer the legacy exporter
    // cannot mark, cast before it is added.)
    return refuse(
        i, "casts the trained weight '" + in + "' (no GraphPipe operator casts a weight)" +
               (dynamo_metadata_ ? std::string()
                                 : "; if it is a registered buffer, import with --freeze " + in));
  }
  if (!x) return refuse(i, "its input is not an activation");
  // CastLike takes its input 1's type (dynamo casts a weight like the activation it scales).
  int64_t to = attr_i(n, "to", kOnnxFloat);
  if (n.op_type() == "CastLike") {
    const std::string& like = n.input(1);
    const auto type = elem_types_.find(like);
    const auto init = consts_.find(like);
    // The file's own type first: a mask may be a bool or (torch's .int()) an int32 tensor.
    if (type != elem_types_.end()) {
      to = type->second;
    } else if (masks_.count(like)) {
      to = 9;  // bool
    } else if (int_valued_.count(like)) {
      to = kOnnxInt64;
    } else if (activation(like)) {
      to = dtype_of(like) == graphpipe::v1::DATA_TYPE_FLOAT32 ? kOnnxFloat : kOnnxInt64;
    } else if (init != consts_.end()) {
      to = init->second->data_type();
    } else {
      return refuse(i, "the type of '" + like + "' (its input 1) is not known");
    }
  }
  const bool is_float = dtype_of(in) == graphpipe::v1::DATA_TYPE_FLOAT32;
  const bool mask = masks_.count(in) > 0;
  auto pass = [&] {
    act_[n.output(0)] = *x;
    if (mask) masks_.insert(n.output(0));
  };
  if (float_type(to)) {
    if (is_float) return pass();
    // An integer tensor read as numbers (HF's attention_mask, cast to scores' type).
    act_[n.output(0)] = b_.cast(id, *x);
    return;
  }
  if (mask || (!is_float && to != 9)) return pass();   // a mask, or integers to integers
  if (is_float && to != 9 && int_valued_.count(in)) {  // integers held as float32 stay so
    act_[n.output(0)] = *x;
    int_valued_.insert(n.output(0));
    return;
  }
  if (is_float && (to == kOnnxInt64 || to == kOnnxInt32)) {  // .long(): truncated toward zero
    act_[n.output(0)] = b_.cast(id, *x, "int64");
    return;
  }
  if (to == 9 && is_float) {
    const TensorRef zero = b_.constant(unique_id(id + ".zero", id), *x, {1}, {0.0f});
    act_[n.output(0)] = b_.compare(id, *x, zero, "ne");
    masks_.insert(n.output(0));
    return;
  }
  refuse(i, std::string(is_float ? "casts the float tensor '" : "casts the integer tensor '") + in +
                "' to type " + std::to_string(to) +
                (is_float ? " (rounding has no GraphPipe operator)"
                          : " (only masks become booleans)"));
}

// ReduceSum/Mean/Max/L2 over a set of per-sample axes.
void Importer::general_reduce(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  if (dtype_of(n.input(0)) != graphpipe::v1::DATA_TYPE_FLOAT32) {
    return refuse(i, "its input '" + n.input(0) + "' is an integer tensor");
  }
  const auto axes = axes_of(n);
  if (!axes) return refuse(i, "its axes are not constant");
  if (axes->empty()) {
    if (attr_i(n, "noop_with_empty_axes", 0) != 0) {
      act_[n.output(0)] = *x;
      return;
    }
    return refuse(i, "reduces over every axis, the batch axis included");
  }
  const auto rank = rank_of(n.input(0));
  std::vector<int64_t> sample;
  for (int64_t a : *axes) {
    const auto s = sample_axis(n.input(0), a);
    if (!s) {
      if (!rank) return refuse(i, "axis " + std::to_string(a) + " of a tensor of unknown rank");
      const auto at = batch_axis(n.input(0));
      const bool batch = at && (a == *at || a == *at - *rank);
      return refuse(i, "axes " + dims_text(*axes) +
                           (batch ? " include the batch axis"
                                  : " are out of range for rank " + std::to_string(*rank)));
    }
    if (std::find(sample.begin(), sample.end(), *s) == sample.end()) sample.push_back(*s);
  }
  std::sort(sample.begin(), sample.end());
  const std::string& t = n.op_type();
  const std::string_view mode = t == "ReduceSum"    ? "sum"
                                : t == "ReduceMean" ? "mean"
                                : t == "ReduceMax"  ? "max"
                                                    : "l2";
  act_[n.output(0)] = b_.reduce_axes(id, *x, sample, mode, attr_i(n, "keepdims", 1) != 0);
}

// Gather(table, constant ids): position embeddings read at arange(T). The ids become an int64
// constant and the lookup an embedding; its output has no batch axis in ONNX ([T, dim]), so it
// is marked unbatched for the element-wise op that adds it to the activations.
void Importer::constant_lookup(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const auto table = weight_dims(n.input(0));
  if (table.size() != 2) return refuse(i, "a table of rank " + std::to_string(table.size()));
  const auto ids = const_tensor(n.input(1));
  if (!ids) return refuse(i, "its ids are not constant");
  if (has_nan(ids->values)) return refuse(i, "its ids depend on the batch size");
  std::vector<float> values;
  for (double v : ids->values) {
    int64_t k = to_index(v);
    if (k < 0) k += table[0];
    if (k < 0 || k >= table[0]) {
      return refuse(i, "id " + std::to_string(to_index(v)) + " is out of range for a table of " +
                           std::to_string(table[0]) + " rows");
    }
    values.push_back(static_cast<float>(k));
  }
  const auto anchor = anchor_for(n.output(0));
  if (!anchor) return refuse(i, "no activation to take the batch from");
  // Ids the same for every sample, held with a batch of 1 (OPT's position ids from a cumulative
  // sum of ones(B, T)), give a batched embedding; other constant ids one without the batch axis.
  const bool per_sample = sample_consts_.count(n.input(1)) > 0;
  std::vector<int64_t> shape(ids->dims.begin() + (per_sample ? 1 : 0), ids->dims.end());
  const bool scalar_ids = shape.empty();
  if (scalar_ids) shape.push_back(1);
  const TensorRef c = b_.constant(unique_id(id + ".ids", id), *anchor, shape, values, true);
  TensorRef out = b_.embedding(id, c, table[0], table[1]);
  take(id, "weight", n.input(0));
  set_padding_idx(i, id);
  // A 0-D id: [dim], not [1, dim].
  if (scalar_ids) out = b_.reshape(unique_id(id + ".reshape", id), out, {table[1]});
  act_[n.output(0)] = out;
  if (!per_sample) unbatched_.insert(n.output(0));
}

// Whether an Expand's integer constant is only read as table lookup ids (position ids expanded
// over the batch feed an embedding): then it stays int64; other readers (comparisons into masks)
// take floats, as before.
bool Importer::expands_lookup_ids(const onnx::NodeProto& n) const {
  auto integer_type = [](int t) { return t == kOnnxInt32 || t == kOnnxInt64; };
  const auto type = elem_types_.find(n.output(0));
  const auto init = consts_.find(n.input(0));
  const auto readers = consumers_.find(n.output(0));
  if (readers == consumers_.end() || readers->second.empty()) return false;
  for (int k : readers->second) {
    const auto& reader = g_.node(k);
    if (reader.op_type() != "Gather" || reader.input_size() < 2 || reader.input(1) != n.output(0)) {
      return false;
    }
  }
  const auto tensor = tensors_.find(n.input(0));
  return folded_int_.count(n.input(0)) > 0 || (tensor != tensors_.end() && tensor->second.ints) ||
         (type != elem_types_.end() && integer_type(type->second)) ||
         (init != consts_.end() && integer_type(init->second->data_type()));
}

// Expand of a constant over the batch (a causal mask expanded to [batch, 1, T, T]): a constant
// op of the expanded per-sample values (a constant to a static shape was folded before).
void Importer::expand_constant(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const auto target = folded(n.input(1));
  if (!target || target->empty()) return refuse(i, "the target shape is not constant");
  const double first = (*target)[0];
  if (!(first == kBatchDim || (static_batch_ > 0 && first == static_cast<double>(static_batch_)))) {
    return laid_constant(i, id);  // (batch x windows, a product the folding leaves unknown)
  }
  // The values expanded to the target with 1 for the batch, by the folder's Expand.
  EvalValue value, shape;
  value.tensor = *const_tensor(n.input(0));
  if (has_nan(value.tensor.values)) return refuse(i, "its input depends on the batch size");
  if (value.tensor.dims.size() > target->size()) {
    return refuse(i, "the target has fewer dims than its input");
  }
  shape.tensor = EvalTensor{{static_cast<int64_t>(target->size())}, *target, true};
  shape.tensor.values[0] = 1;
  if (has_nan(shape.tensor.values)) return refuse(i, "the target depends on the batch size");
  onnx::NodeProto e;
  e.set_op_type("Expand");
  e.add_input("value");
  e.add_input("shape");
  e.add_output("out");
  const onnx::NodeProto* node = &e;
  auto r = evaluate_nodes(
      std::span<const onnx::NodeProto* const>(&node, 1), opset_,
      [&](const std::string& name) -> std::optional<EvalValue> {
        return name == "value" ? value : shape;
      },
      kMaxFoldElements);
  if (!r.ok()) return refuse(i, "not folded: " + r.status().message());
  const EvalTensor& out = r->at("out").tensor;
  if (out.dims.empty() || out.dims[0] != 1) {
    return refuse(i, "its input has a size other than 1 on the batch axis");
  }
  const auto anchor = anchor_for(n.output(0));
  if (!anchor) return refuse(i, "no activation to take the batch from");
  std::vector<int64_t> sample(out.dims.begin() + 1, out.dims.end());
  if (sample.empty()) sample.push_back(1);
  const bool integer = expands_lookup_ids(n);
  act_[n.output(0)] = b_.constant(
      id, *anchor, sample, std::vector<float>(out.values.begin(), out.values.end()), integer);
}

}  // namespace gp::model::onnx_detail
