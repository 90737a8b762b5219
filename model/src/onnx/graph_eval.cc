#include "onnx/graph_eval.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

using Dims = std::vector<int64_t>;

constexpr int kBool = 9;

Result<int64_t> checked_count(const Dims& dims, int64_t limit = kMaxEvalElements) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return invalid_argument("a negative dimension (" + std::to_string(d) + ")");
    if (d != 0 && n > limit / d) {
      return resource_exhausted("a tensor of more than " + std::to_string(limit) + " elements");
    }
    n *= d;
  }
  return n;
}

Dims strides_of(const Dims& dims) {
  Dims s(dims.size(), 1);
  for (size_t k = dims.size(); k-- > 1;) s[k - 1] = s[k] * dims[k];
  return s;
}

// Advances a row-major multi-index over `dims`; false after the last one.
bool next_index(Dims* idx, const Dims& dims) {
  for (size_t k = dims.size(); k-- > 0;) {
    if (++(*idx)[k] < dims[k]) return true;
    (*idx)[k] = 0;
  }
  return false;
}

// numpy broadcasting of two shapes.
Result<Dims> broadcast(const Dims& a, const Dims& b) {
  Dims out(std::max(a.size(), b.size()), 1);
  for (size_t k = 0; k < out.size(); ++k) {
    const int64_t x = k < out.size() - a.size() ? 1 : a[k - (out.size() - a.size())];
    const int64_t y = k < out.size() - b.size() ? 1 : b[k - (out.size() - b.size())];
    if (x != y && x != 1 && y != 1) {
      return invalid_argument("shapes do not broadcast (" + std::to_string(x) + " vs " +
                              std::to_string(y) + ")");
    }
    out[k] = x == 1 ? y : x;
  }
  return out;
}

// The value of `t` at multi-index `idx` of a shape that `t` broadcasts to.
double at_broadcast(const EvalTensor& t, const Dims& strides, const Dims& idx) {
  const size_t shift = idx.size() - t.dims.size();
  int64_t off = 0;
  for (size_t k = 0; k < t.dims.size(); ++k) {
    if (t.dims[k] != 1) off += idx[k + shift] * strides[k];
  }
  return t.values[static_cast<size_t>(off)];
}

int64_t normalize_axis(int64_t axis, int64_t rank, bool* ok) {
  if (axis < -rank || axis >= rank) *ok = false;
  return axis < 0 ? axis + rank : axis;
}

EvalTensor scalar(double v, bool ints) { return {{}, {v}, ints}; }

EvalValue of(EvalTensor t) {
  EvalValue v;
  v.tensor = std::move(t);
  return v;
}

std::vector<EvalValue> one(EvalTensor t) { return {of(std::move(t))}; }

class Evaluator {
 public:
  Evaluator(int64_t opset, const EvalLookup& outer, int64_t max_elements)
      : opset_(opset),
        outer_(outer),
        max_elements_(max_elements),
        max_work_(std::max(kMaxEvalWork, 8 * max_elements)) {}

  struct Scope {
    std::map<std::string, EvalValue> values;
    const Scope* parent = nullptr;
  };

  Status run(std::span<const onnx::NodeProto* const> nodes, Scope* scope, int depth) {
    for (const onnx::NodeProto* n : nodes) {
      if (++executed_ > kMaxEvalNodes) {
        return resource_exhausted("more than " + std::to_string(kMaxEvalNodes) +
                                  " node executions");
      }
      auto outputs = node(*n, *scope, depth);
      if (work_ > max_work_) {
        return resource_exhausted("reading more than " + std::to_string(max_work_) + " elements");
      }
      if (!outputs.ok()) {
        return outputs.status().with_context(n->op_type() + " node '" + n->name() + "'");
      }
      if (static_cast<int>(outputs->size()) < n->output_size()) {
        return invalid_argument(n->op_type() + " node '" + n->name() + "': has " +
                                std::to_string(n->output_size()) + " outputs, computes " +
                                std::to_string(outputs->size()));
      }
      for (int k = 0; k < n->output_size(); ++k) {
        if (!n->output(k).empty()) scope->values[n->output(k)] = std::move((*outputs)[k]);
      }
    }
    return ok_status();
  }

 private:
  // Every read is counted, so that the work of one evaluation is bounded too.
  std::optional<EvalValue> get(const Scope& s, const std::string& name) const {
    std::optional<EvalValue> v;
    for (const Scope* p = &s; p != nullptr && !v; p = p->parent) {
      if (auto it = p->values.find(name); it != p->values.end()) v = it->second;
    }
    if (!v) v = outer_(name);
    if (v) {
      work_ += static_cast<int64_t>(v->tensor.values.size()) + 1;
      for (const auto& item : v->items) work_ += static_cast<int64_t>(item.values.size());
    }
    return v;
  }

  bool has(const onnx::NodeProto& n, int k) const {
    return k < n.input_size() && !n.input(k).empty();
  }

  Result<EvalTensor> tensor(const onnx::NodeProto& n, const Scope& s, int k) const {
    if (!has(n, k)) return invalid_argument("input " + std::to_string(k) + " is missing");
    auto v = get(s, n.input(k));
    if (!v) return invalid_argument("input '" + n.input(k) + "' has no value");
    if (v->sequence) return invalid_argument("input '" + n.input(k) + "' is a sequence");
    return v->tensor;
  }

  // Axes from the attribute, or from input `k` from opset `input_from`.
  Result<Dims> axes(const onnx::NodeProto& n, const Scope& s, int k, int64_t input_from) const {
    if (opset_ < input_from || !has(n, k)) return attr_ints(n, "axes");
    GP_ASSIGN_OR_RETURN(EvalTensor t, tensor(n, s, k));
    Dims out;
    for (double v : t.values) out.push_back(to_index(v));
    return out;
  }

  Result<std::vector<EvalValue>> subgraph(const onnx::GraphProto& g, const Scope& parent,
                                          std::vector<EvalValue> inputs, int depth) {
    if (depth >= kMaxEvalDepth) return resource_exhausted("subgraphs nested too deeply");
    if (static_cast<int>(inputs.size()) != g.input_size()) {
      return invalid_argument("a subgraph takes " + std::to_string(g.input_size()) +
                              " inputs, is given " + std::to_string(inputs.size()));
    }
    Scope scope{{}, &parent};
    for (const auto& t : g.initializer()) {  // e.g. the zeros an If branch returns
      GP_ASSIGN_OR_RETURN(EvalTensor v, eval_tensor_of(t));
      scope.values[t.name()] = of(std::move(v));
    }
    for (int k = 0; k < g.input_size(); ++k) scope.values[g.input(k).name()] = inputs[k];
    std::vector<const onnx::NodeProto*> nodes;
    for (const auto& n : g.node()) nodes.push_back(&n);
    GP_RETURN_IF_ERROR(run(nodes, &scope, depth + 1));
    std::vector<EvalValue> out;
    for (const auto& o : g.output()) {
      auto v = get(scope, o.name());
      if (!v) return invalid_argument("subgraph output '" + o.name() + "' has no value");
      out.push_back(std::move(*v));
    }
    return out;
  }

  // One node's outputs, by the evaluation of its op type.
  Result<std::vector<EvalValue>> node(const onnx::NodeProto& n, const Scope& s, int depth);

  // Ops that read their inputs themselves (constants, sequences, control flow).
  using StructuralOp = Result<std::vector<EvalValue>> (Evaluator::*)(const onnx::NodeProto& n,
                                                                     const Scope& s, int depth);
  static const std::map<std::string, StructuralOp>& structural_ops();
  Result<std::vector<EvalValue>> constant(const onnx::NodeProto& n, const Scope& s, int depth);
  Result<std::vector<EvalValue>> identity(const onnx::NodeProto& n, const Scope& s, int depth);
  Result<std::vector<EvalValue>> sequence_empty(const onnx::NodeProto& n, const Scope& s,
                                                int depth);
  Result<std::vector<EvalValue>> sequence_insert(const onnx::NodeProto& n, const Scope& s,
                                                 int depth);
  Result<std::vector<EvalValue>> concat_from_sequence(const onnx::NodeProto& n, const Scope& s,
                                                      int depth);
  Result<std::vector<EvalValue>> split(const onnx::NodeProto& n, const Scope& s, int depth);
  Result<std::vector<EvalValue>> split_to_sequence(const onnx::NodeProto& n, const Scope& s,
                                                   int depth);
  Result<std::vector<EvalValue>> sequence_at(const onnx::NodeProto& n, const Scope& s, int depth);
  // `x` cut along `axis` into pieces of `sizes` (which must add up to the axis).
  Result<std::vector<EvalTensor>> pieces_of(const EvalTensor& x, int64_t axis,
                                            const Dims& sizes) const;
  Result<std::vector<EvalValue>> if_op(const onnx::NodeProto& n, const Scope& s, int depth);
  Result<std::vector<EvalValue>> loop(const onnx::NodeProto& n, const Scope& s, int depth);

  // Ops of one tensor result, given input 0 (`x`). elementwise, slice and reduce read it again
  // themselves: every read counts toward kMaxEvalWork.
  using TensorOp = Result<EvalTensor> (Evaluator::*)(const onnx::NodeProto& n, const Scope& s,
                                                     EvalTensor x);
  static const std::map<std::string, TensorOp>& tensor_ops();
  Result<EvalTensor> shape_op(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> size_op(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> cast(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> negate(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> elementwise(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> where(const onnx::NodeProto& n, const Scope& s, EvalTensor c);
  Result<EvalTensor> unary_math(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> trilu(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> constant_of_shape(const onnx::NodeProto& n, const Scope& s, EvalTensor shape);
  Result<EvalTensor> transpose(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> flatten(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> range(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> reshape(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> squeeze(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> unsqueeze(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> concat(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> expand(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> tile(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> cum_sum(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> gather(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> gather_nd(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> gather_elements(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> scatter_nd(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> slice(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> reduce(const onnx::NodeProto& n, const Scope& s, EvalTensor x);
  Result<EvalTensor> einsum(const onnx::NodeProto& n, const Scope& s, EvalTensor x);

  Result<int64_t> count_of(const Dims& dims) const { return checked_count(dims, max_elements_); }

  int64_t opset_;
  const EvalLookup& outer_;
  const int64_t max_elements_;  // per tensor
  const int64_t max_work_;      // elements read, in all
  int64_t executed_ = 0;
  mutable int64_t work_ = 0;
};

namespace {

// One binary element-wise op of ONNX type `t` on two elements; `ints` for integer operands.
Result<double> binary_op(const std::string& t, double x, double y, bool ints) {
  // NaN stands for a value not known (the importer's batch size): so is anything made from it.
  if (std::isnan(x) || std::isnan(y)) return static_cast<double>(NAN);
  if (t == "Add") return x + y;
  if (t == "Sub") return x - y;
  if (t == "Mul") return x * y;
  if (t == "Div") {
    if (ints && y == 0) return invalid_argument("integer division by zero");
    return ints ? std::trunc(x / y) : x / y;
  }
  if (t == "Pow") return ints ? std::trunc(std::pow(x, y)) : std::pow(x, y);
  if (t == "Max") return std::max(x, y);
  if (t == "Min") return std::min(x, y);
  if (t == "Mod") {
    if (ints && y == 0) return invalid_argument("integer modulo by zero");
    return std::fmod(x, y);  // fmod = 1; the caller moves the sign for fmod = 0
  }
  if (t == "Equal") return x == y;
  if (t == "Less") return x < y;
  if (t == "Greater") return x > y;
  if (t == "LessOrEqual") return x <= y;
  if (t == "GreaterOrEqual") return x >= y;
  if (t == "And") return x != 0 && y != 0;
  if (t == "Xor") return (x != 0) != (y != 0);
  return x != 0 || y != 0;  // Or
}

}  // namespace

// Binary ops, and Max/Min/Sum/Mean of any number of inputs (folded left to right).
Result<EvalTensor> Evaluator::elementwise(const onnx::NodeProto& n, const Scope& s, EvalTensor) {
  const std::string& t = n.op_type();
  const bool compare = t == "Equal" || t == "Less" || t == "Greater" || t == "LessOrEqual" ||
                       t == "GreaterOrEqual" || t == "And" || t == "Or" || t == "Xor";
  const bool variadic = t == "Max" || t == "Min";
  GP_ASSIGN_OR_RETURN(EvalTensor acc, tensor(n, s, 0));
  const int last = variadic ? n.input_size() : 2;
  if (!variadic && n.input_size() < 2) return invalid_argument("input 1 is missing");
  const bool python_mod = t == "Mod" && attr_i(n, "fmod", 0) == 0;
  for (int k = 1; k < last; ++k) {
    const EvalTensor a = std::move(acc);
    GP_ASSIGN_OR_RETURN(EvalTensor b, tensor(n, s, k));
    GP_ASSIGN_OR_RETURN(Dims dims, broadcast(a.dims, b.dims));
    GP_ASSIGN_OR_RETURN(int64_t count, count_of(dims));
    const bool ints = a.ints && b.ints;
    acc = EvalTensor{dims, {}, compare || ints};
    acc.values.reserve(static_cast<size_t>(count));
    const Dims sa = strides_of(a.dims), sb = strides_of(b.dims);
    Dims idx(dims.size(), 0);
    for (int64_t e = 0; e < count; ++e, next_index(&idx, dims)) {
      const double x = at_broadcast(a, sa, idx), y = at_broadcast(b, sb, idx);
      GP_ASSIGN_OR_RETURN(double r, binary_op(t, x, y, ints));
      if (python_mod && r != 0 && (r < 0) != (y < 0)) r += y;  // the divisor's sign
      acc.values.push_back(r);
    }
    work_ += count;
  }
  return acc;
}

// Where(condition, a, b), broadcast over all three.
Result<EvalTensor> Evaluator::where(const onnx::NodeProto& n, const Scope& s, EvalTensor c) {
  GP_ASSIGN_OR_RETURN(EvalTensor a, tensor(n, s, 1));
  GP_ASSIGN_OR_RETURN(EvalTensor b, tensor(n, s, 2));
  GP_ASSIGN_OR_RETURN(Dims ab, broadcast(a.dims, b.dims));
  GP_ASSIGN_OR_RETURN(Dims dims, broadcast(c.dims, ab));
  GP_ASSIGN_OR_RETURN(int64_t count, count_of(dims));
  EvalTensor out{dims, {}, a.ints && b.ints};
  out.values.reserve(static_cast<size_t>(count));
  const Dims sc = strides_of(c.dims), sa = strides_of(a.dims), sb = strides_of(b.dims);
  Dims idx(dims.size(), 0);
  for (int64_t e = 0; e < count; ++e, next_index(&idx, dims)) {
    const double cond = at_broadcast(c, sc, idx);
    out.values.push_back(std::isnan(cond) ? cond
                         : cond != 0      ? at_broadcast(a, sa, idx)
                                          : at_broadcast(b, sb, idx));
  }
  return out;
}

// Element-wise functions of one input (Neg and Not are negate's).
Result<EvalTensor> Evaluator::unary_math(const onnx::NodeProto& n, const Scope&, EvalTensor x) {
  const std::string& t = n.op_type();
  static const std::map<std::string, double (*)(double)> kFns = {
      {"Sqrt", [](double v) { return std::sqrt(v); }},
      {"Exp", [](double v) { return std::exp(v); }},
      {"Log", [](double v) { return std::log(v); }},
      {"Abs", [](double v) { return std::fabs(v); }},
      {"Reciprocal", [](double v) { return 1 / v; }},
      {"Floor", [](double v) { return std::floor(v); }},
      {"Ceil", [](double v) { return std::ceil(v); }},
      {"Sin", [](double v) { return std::sin(v); }},
      {"Cos", [](double v) { return std::cos(v); }},
      {"Erf", [](double v) { return std::erf(v); }},
      {"Relu", [](double v) { return v > 0 ? v : 0.0; }},
      {"Sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); }},
      {"Tanh", [](double v) { return std::tanh(v); }},
      {"Softplus", [](double v) { return v > 20 ? v : std::log1p(std::exp(v)); }},
  };
  const auto fn = kFns.find(t);
  if (fn == kFns.end()) return unimplemented("op type " + t + " is not evaluated");
  for (double& v : x.values) v = std::isnan(v) ? v : fn->second(v);
  x.ints = x.ints && (t == "Abs" || t == "Floor" || t == "Ceil" || t == "Relu");
  return x;
}

// The upper (upper = 1) or lower triangle of the last two axes from diagonal k; zeros elsewhere.
Result<EvalTensor> Evaluator::trilu(const onnx::NodeProto& n, const Scope& s, EvalTensor x) {
  if (x.dims.size() < 2) return invalid_argument("a Trilu input of rank < 2");
  int64_t k = 0;
  if (has(n, 1)) {
    GP_ASSIGN_OR_RETURN(EvalTensor kt, tensor(n, s, 1));
    if (kt.values.size() != 1) return invalid_argument("k is not a scalar");
    k = to_index(kt.values[0]);
  }
  const bool upper = attr_i(n, "upper", 1) != 0;
  const int64_t rows = x.dims[x.dims.size() - 2], cols = x.dims.back();
  for (size_t e = 0; e < x.values.size(); ++e) {
    const int64_t j = static_cast<int64_t>(e) % cols;
    const int64_t i = (static_cast<int64_t>(e) / cols) % rows;
    if (upper ? j - i < k : j - i > k) x.values[e] = 0;
  }
  return x;
}

// A tensor of the given shape filled with `value` (float 0 when absent).
Result<EvalTensor> Evaluator::constant_of_shape(const onnx::NodeProto& n, const Scope&,
                                                EvalTensor shape) {
  Dims dims;
  for (double v : shape.values) dims.push_back(to_index(v));
  GP_ASSIGN_OR_RETURN(int64_t count, count_of(dims));
  EvalTensor fill{{}, {0.0}, false};
  if (const auto* a = attr(n, "value"); a != nullptr && a->has_t()) {
    GP_ASSIGN_OR_RETURN(fill, eval_tensor_of(a->t()));
    if (fill.values.size() != 1) return invalid_argument("value holds more than one element");
  }
  work_ += count;
  return EvalTensor{dims, std::vector<double>(static_cast<size_t>(count), fill.values[0]),
                    fill.ints};
}

Result<EvalTensor> Evaluator::transpose(const onnx::NodeProto& n, const Scope&, EvalTensor x) {
  const auto rank = static_cast<int64_t>(x.dims.size());
  Dims perm = attr_ints(n, "perm");
  if (perm.empty()) {
    for (int64_t k = rank - 1; k >= 0; --k) perm.push_back(k);
  }
  Dims sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t k = 0; k < rank; ++k) {
    if (static_cast<int64_t>(sorted.size()) != rank || sorted[static_cast<size_t>(k)] != k) {
      return invalid_argument("perm is not a permutation of the axes");
    }
  }
  Dims dims;
  for (int64_t p : perm) dims.push_back(x.dims[static_cast<size_t>(p)]);
  const Dims sx = strides_of(x.dims);
  EvalTensor out{dims, {}, x.ints};
  out.values.reserve(x.values.size());
  Dims idx(dims.size(), 0);
  for (size_t e = 0; e < x.values.size(); ++e, next_index(&idx, dims)) {
    int64_t off = 0;
    for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * sx[static_cast<size_t>(perm[k])];
    out.values.push_back(x.values[static_cast<size_t>(off)]);
  }
  return out;
}

Result<EvalTensor> Evaluator::flatten(const onnx::NodeProto& n, const Scope&, EvalTensor x) {
  const auto rank = static_cast<int64_t>(x.dims.size());
  bool ok = true;
  const int64_t axis =
      attr_i(n, "axis", 1) == rank ? rank : normalize_axis(attr_i(n, "axis", 1), rank, &ok);
  if (!ok) return invalid_argument("axis out of range");
  int64_t outer = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= x.dims[static_cast<size_t>(k)];
  x.dims = {outer, outer == 0 ? 0 : static_cast<int64_t>(x.values.size()) / outer};
  return x;
}

Result<EvalTensor> Evaluator::slice(const onnx::NodeProto& n, const Scope& s, EvalTensor) {
  GP_ASSIGN_OR_RETURN(EvalTensor x, tensor(n, s, 0));
  const auto rank = static_cast<int64_t>(x.dims.size());
  Dims starts, ends, axes, steps;
  auto ints_of = [&](int k, Dims* out) -> Status {
    if (!has(n, k)) return ok_status();
    GP_ASSIGN_OR_RETURN(EvalTensor t, tensor(n, s, k));
    for (double v : t.values) out->push_back(to_index(v));
    return ok_status();
  };
  if (opset_ < 10) {
    starts = attr_ints(n, "starts"), ends = attr_ints(n, "ends"), axes = attr_ints(n, "axes");
  } else {
    GP_RETURN_IF_ERROR(ints_of(1, &starts));
    GP_RETURN_IF_ERROR(ints_of(2, &ends));
    GP_RETURN_IF_ERROR(ints_of(3, &axes));
    GP_RETURN_IF_ERROR(ints_of(4, &steps));
  }
  if (axes.empty()) {
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    return invalid_argument("starts, ends, axes and steps differ in length");
  }
  Dims first(x.dims.size(), 0), step(x.dims.size(), 1), dims = x.dims;
  for (size_t k = 0; k < starts.size(); ++k) {
    bool ok = true;
    const int64_t a = normalize_axis(axes[k], rank, &ok);
    if (!ok || steps[k] == 0) return invalid_argument("an axis out of range or a zero step");
    const int64_t size = x.dims[static_cast<size_t>(a)];
    auto clamp = [&](int64_t v, int64_t lo, int64_t hi) {
      if (v < 0) v += size;
      return std::clamp(v, lo, hi);
    };
    int64_t b = 0, e = 0;
    if (steps[k] > 0) {
      b = clamp(starts[k], 0, size), e = clamp(ends[k], 0, size);
      dims[static_cast<size_t>(a)] = e > b ? (e - b + steps[k] - 1) / steps[k] : 0;
    } else {
      b = clamp(starts[k], 0, size - 1), e = clamp(ends[k], -1, size - 1);
      dims[static_cast<size_t>(a)] = b > e ? (b - e - steps[k] - 1) / -steps[k] : 0;
    }
    first[static_cast<size_t>(a)] = b;
    step[static_cast<size_t>(a)] = steps[k];
  }
  GP_ASSIGN_OR_RETURN(int64_t count, count_of(dims));
  EvalTensor out{dims, {}, x.ints};
  const Dims sx = strides_of(x.dims);
  Dims idx(dims.size(), 0);
  for (int64_t e = 0; e < count; ++e, next_index(&idx, dims)) {
    int64_t off = 0;
    for (size_t k = 0; k < idx.size(); ++k) off += (first[k] + idx[k] * step[k]) * sx[k];
    out.values.push_back(x.values[static_cast<size_t>(off)]);
  }
  return out;
}

Result<EvalTensor> Evaluator::reduce(const onnx::NodeProto& n, const Scope& s, EvalTensor) {
  const std::string& t = n.op_type();
  GP_ASSIGN_OR_RETURN(EvalTensor x, tensor(n, s, 0));
  GP_ASSIGN_OR_RETURN(Dims axes, axes(n, s, 1, t == "ReduceSum" ? 13 : 18));
  const auto rank = static_cast<int64_t>(x.dims.size());
  std::vector<bool> reduced(x.dims.size(), false);
  if (axes.empty() && attr_i(n, "noop_with_empty_axes", 0) != 0) return x;
  if (axes.empty()) reduced.assign(x.dims.size(), true);
  for (int64_t a : axes) {
    bool ok = true;
    const int64_t k = normalize_axis(a, rank, &ok);
    if (!ok) return invalid_argument("axis " + std::to_string(a) + " out of range");
    reduced[static_cast<size_t>(k)] = true;
  }
  const bool keep = attr_i(n, "keepdims", 1) != 0;
  Dims kept = x.dims, out_dims;
  for (size_t k = 0; k < x.dims.size(); ++k) {
    if (reduced[k]) kept[k] = 1;
    if (!reduced[k] || keep) out_dims.push_back(kept[k]);
  }
  GP_ASSIGN_OR_RETURN(int64_t count, count_of(kept));
  const double init = t == "ReduceMax"    ? -INFINITY
                      : t == "ReduceMin"  ? INFINITY
                      : t == "ReduceProd" ? 1.0
                                          : 0.0;
  std::vector<double> acc(static_cast<size_t>(count), init);
  const Dims sk = strides_of(kept);
  Dims idx(x.dims.size(), 0);
  int64_t per_output = 0;
  for (double v : x.values) {
    int64_t off = 0;
    for (size_t k = 0; k < idx.size(); ++k) off += (reduced[k] ? 0 : idx[k]) * sk[k];
    double& a = acc[static_cast<size_t>(off)];
    if (std::isnan(v))
      a = v;  // unknown stays unknown
    else if (t == "ReduceMax")
      a = std::max(a, v);
    else if (t == "ReduceMin")
      a = std::min(a, v);
    else if (t == "ReduceProd")
      a *= v;
    else
      a += v;
    if (off == 0) ++per_output;
    next_index(&idx, x.dims);
  }
  if (t == "ReduceMean") {
    for (double& a : acc) a = per_output > 0 ? a / static_cast<double>(per_output) : NAN;
  }
  return EvalTensor{out_dims, std::move(acc), x.ints && t != "ReduceMean"};
}

Result<std::vector<EvalValue>> Evaluator::loop(const onnx::NodeProto& n, const Scope& s,
                                               int depth) {
  const auto* body = attr(n, "body");
  if (body == nullptr || !body->has_g()) return invalid_argument("has no body");
  int64_t trips = kMaxEvalTrips + 1;
  if (has(n, 0)) {
    GP_ASSIGN_OR_RETURN(EvalTensor m, tensor(n, s, 0));
    if (m.values.size() != 1) return invalid_argument("its trip count is not a scalar");
    trips = to_index(m.values[0]);
  }
  bool cond = true;
  if (has(n, 1)) {
    GP_ASSIGN_OR_RETURN(EvalTensor c, tensor(n, s, 1));
    if (c.values.size() != 1) return invalid_argument("its condition is not a scalar");
    cond = c.values[0] != 0;
  }
  std::vector<EvalValue> carried;
  for (int k = 2; k < n.input_size(); ++k) {
    auto v = get(s, n.input(k));
    if (!v) return invalid_argument("input '" + n.input(k) + "' has no value");
    carried.push_back(std::move(*v));
  }
  const size_t num_carried = carried.size();
  const auto& g = body->g();
  if (g.output_size() < static_cast<int>(1 + num_carried)) {
    return invalid_argument("its body has too few outputs");
  }
  std::vector<std::vector<EvalTensor>> scans(g.output_size() - 1 - num_carried);
  int64_t scanned = 0;  // elements held by the scan outputs
  int64_t i = 0;
  for (; i < trips && cond; ++i) {
    if (i >= kMaxEvalTrips) {
      return resource_exhausted("more than " + std::to_string(kMaxEvalTrips) + " trips");
    }
    std::vector<EvalValue> in = {of(scalar(static_cast<double>(i), true)),
                                 of(EvalTensor{{}, {1.0}, true})};
    in.insert(in.end(), carried.begin(), carried.end());
    GP_ASSIGN_OR_RETURN(auto out, subgraph(g, s, std::move(in), depth));
    if (out[0].sequence || out[0].tensor.values.size() != 1) {
      return invalid_argument("its body's condition is not a scalar");
    }
    cond = out[0].tensor.values[0] != 0;
    for (size_t k = 0; k < num_carried; ++k) carried[k] = std::move(out[1 + k]);
    for (size_t k = 0; k < scans.size(); ++k) {
      const EvalValue& v = out[1 + num_carried + k];
      if (v.sequence) return invalid_argument("a scan output is a sequence");
      if (!scans[k].empty() && scans[k][0].dims != v.tensor.dims) {
        return invalid_argument("a scan output changes shape between trips");
      }
      scanned += static_cast<int64_t>(v.tensor.values.size());
      if (scanned > kMaxEvalElements) {
        return resource_exhausted("scan outputs of more than " + std::to_string(kMaxEvalElements) +
                                  " elements");
      }
      scans[k].push_back(v.tensor);
    }
  }
  std::vector<EvalValue> result = std::move(carried);
  for (auto& items : scans) {
    EvalTensor stacked{{static_cast<int64_t>(items.size())}, {}, false};
    if (!items.empty()) {
      stacked.dims.insert(stacked.dims.end(), items[0].dims.begin(), items[0].dims.end());
      stacked.ints = items[0].ints;
    }
    GP_RETURN_IF_ERROR(count_of(stacked.dims).status());
    for (const auto& t : items) {
      stacked.values.insert(stacked.values.end(), t.values.begin(), t.values.end());
    }
    result.push_back(of(std::move(stacked)));
  }
  return result;
}

Result<std::vector<EvalTensor>> Evaluator::pieces_of(const EvalTensor& x, int64_t axis,
                                                     const Dims& sizes) const {
  const int64_t dim = x.dims[static_cast<size_t>(axis)];
  int64_t total = 0;
  for (int64_t size : sizes) {
    if (size < 0) return invalid_argument("a negative split size");
    if (size > dim) {  // (and no sum of sizes can overflow)
      return invalid_argument("a split size of " + std::to_string(size) + " for an axis of " +
                              std::to_string(dim));
    }
    total += size;
  }
  if (total != dim) {
    return invalid_argument("split sizes add up to " + std::to_string(total) + ", not the axis' " +
                            std::to_string(dim));
  }
  if (static_cast<int64_t>(sizes.size()) > kMaxEvalTrips) {
    return resource_exhausted("more than " + std::to_string(kMaxEvalTrips) + " pieces");
  }
  // Row-major: `outer` blocks, each `dim` rows of `inner` values along the axis.
  int64_t outer = 1, inner = 1;
  for (size_t k = 0; k < x.dims.size(); ++k) {
    if (static_cast<int64_t>(k) < axis) outer *= x.dims[k];
    if (static_cast<int64_t>(k) > axis) inner *= x.dims[k];
  }
  work_ += static_cast<int64_t>(x.values.size());
  std::vector<EvalTensor> out;
  int64_t begin = 0;
  for (int64_t size : sizes) {
    EvalTensor piece{x.dims, {}, x.ints};
    piece.dims[static_cast<size_t>(axis)] = size;
    piece.values.reserve(static_cast<size_t>(outer * size * inner));
    for (int64_t o = 0; o < outer; ++o) {
      const auto first = x.values.begin() + (o * dim + begin) * inner;
      piece.values.insert(piece.values.end(), first, first + size * inner);
    }
    out.push_back(std::move(piece));
    begin += size;
  }
  return out;
}

// Split: sizes from input 1 (opset 13 on) or the `split` attribute, else equal parts, one per
// output (the last smaller where the axis does not divide: opset 18's num_outputs).
Result<std::vector<EvalValue>> Evaluator::split(const onnx::NodeProto& n, const Scope& s, int) {
  GP_ASSIGN_OR_RETURN(EvalTensor x, tensor(n, s, 0));
  bool ok = true;
  const int64_t axis =
      normalize_axis(attr_i(n, "axis", 0), static_cast<int64_t>(x.dims.size()), &ok);
  if (!ok) return invalid_argument("axis out of range");
  Dims sizes;
  if (opset_ >= 13 && has(n, 1)) {
    GP_ASSIGN_OR_RETURN(EvalTensor t, tensor(n, s, 1));
    for (double v : t.values) sizes.push_back(to_index(v));
  } else if (opset_ < 13) {
    sizes = attr_ints(n, "split");
  }
  if (sizes.empty()) {
    const int64_t dim = x.dims[static_cast<size_t>(axis)], parts = n.output_size();
    if (parts < 1) return invalid_argument("no outputs");
    if (opset_ < 18 && dim % parts != 0) {  // (opset 18 lets the last piece be smaller)
      return invalid_argument("an axis of " + std::to_string(dim) + " does not split into " +
                              std::to_string(parts) + " equal parts");
    }
    const int64_t piece = (dim + parts - 1) / parts;
    for (int64_t k = 0; k < parts; ++k)
      sizes.push_back(std::clamp(dim - k * piece, int64_t{0}, piece));
  }
  if (static_cast<int>(sizes.size()) != n.output_size()) {
    return invalid_argument(std::to_string(sizes.size()) + " split sizes for " +
                            std::to_string(n.output_size()) + " outputs");
  }
  GP_ASSIGN_OR_RETURN(auto pieces, pieces_of(x, axis, sizes));
  std::vector<EvalValue> out;
  for (auto& piece : pieces) out.push_back(of(std::move(piece)));
  return out;
}

// SplitToSequence: a scalar split is the size of every piece (the last one shorter), a list the
// sizes; without one, pieces of one, the axis dropped unless keepdims.
Result<std::vector<EvalValue>> Evaluator::split_to_sequence(const onnx::NodeProto& n,
                                                            const Scope& s, int) {
  GP_ASSIGN_OR_RETURN(EvalTensor x, tensor(n, s, 0));
  bool ok = true;
  const int64_t axis =
      normalize_axis(attr_i(n, "axis", 0), static_cast<int64_t>(x.dims.size()), &ok);
  if (!ok) return invalid_argument("axis out of range");
  const int64_t dim = x.dims[static_cast<size_t>(axis)];
  Dims sizes;
  bool squeeze = false;
  if (has(n, 1)) {
    GP_ASSIGN_OR_RETURN(EvalTensor t, tensor(n, s, 1));
    if (t.dims.empty()) {
      const int64_t piece = t.values.empty() ? 0 : to_index(t.values[0]);
      if (piece <= 0) return invalid_argument("a split size of " + std::to_string(piece));
      if (dim / piece >= kMaxEvalTrips) {
        return resource_exhausted("more than " + std::to_string(kMaxEvalTrips) + " pieces");
      }
      for (int64_t at = 0; at < dim; at += piece) sizes.push_back(std::min(piece, dim - at));
    } else {
      for (double v : t.values) sizes.push_back(to_index(v));
    }
  } else {
    if (dim > kMaxEvalTrips) {
      return resource_exhausted("more than " + std::to_string(kMaxEvalTrips) + " pieces");
    }
    sizes.assign(static_cast<size_t>(dim), 1);
    squeeze = attr_i(n, "keepdims", 1) == 0;
  }
  GP_ASSIGN_OR_RETURN(auto pieces, pieces_of(x, axis, sizes));
  EvalValue seq;
  seq.sequence = true;
  for (auto& piece : pieces) {
    if (squeeze) piece.dims.erase(piece.dims.begin() + axis);
    seq.items.push_back(std::move(piece));
  }
  return std::vector<EvalValue>{std::move(seq)};
}

Result<std::vector<EvalValue>> Evaluator::sequence_at(const onnx::NodeProto& n, const Scope& s,
                                                      int) {
  auto seq = get(s, n.input_size() > 0 ? n.input(0) : "");
  if (!seq || !seq->sequence) return invalid_argument("input 0 is not a sequence");
  GP_ASSIGN_OR_RETURN(EvalTensor p, tensor(n, s, 1));
  if (p.values.size() != 1) return invalid_argument("its position is not a scalar");
  const auto count = static_cast<int64_t>(seq->items.size());
  int64_t pos = to_index(p.values[0]);
  if (pos < 0) pos += count;
  if (pos < 0 || pos >= count) return invalid_argument("position out of range");
  return one(std::move(seq->items[static_cast<size_t>(pos)]));
}

// Each op type's evaluation, a function each. Structural ops (constants, sequences, control
// flow) read their inputs themselves; every other op is given input 0, read before the type is
// looked up, so that a missing input 0 is reported before an unknown type.
const std::map<std::string, Evaluator::StructuralOp>& Evaluator::structural_ops() {
  static const std::map<std::string, StructuralOp> kOps = {
      {"Constant", &Evaluator::constant},
      {"Identity", &Evaluator::identity},
      {"SequenceEmpty", &Evaluator::sequence_empty},
      {"SequenceInsert", &Evaluator::sequence_insert},
      {"ConcatFromSequence", &Evaluator::concat_from_sequence},
      {"Split", &Evaluator::split},
      {"SplitToSequence", &Evaluator::split_to_sequence},
      {"SequenceAt", &Evaluator::sequence_at},
      {"If", &Evaluator::if_op},
      {"Loop", &Evaluator::loop},
  };
  return kOps;
}

const std::map<std::string, Evaluator::TensorOp>& Evaluator::tensor_ops() {
  static const std::map<std::string, TensorOp> kOps = {
      {"Shape", &Evaluator::shape_op},
      {"Size", &Evaluator::size_op},
      {"Cast", &Evaluator::cast},
      {"CastLike", &Evaluator::cast},
      {"Neg", &Evaluator::negate},
      {"Not", &Evaluator::negate},
      {"Add", &Evaluator::elementwise},
      {"Sub", &Evaluator::elementwise},
      {"Mul", &Evaluator::elementwise},
      {"Div", &Evaluator::elementwise},
      {"Equal", &Evaluator::elementwise},
      {"Less", &Evaluator::elementwise},
      {"Greater", &Evaluator::elementwise},
      {"LessOrEqual", &Evaluator::elementwise},
      {"GreaterOrEqual", &Evaluator::elementwise},
      {"And", &Evaluator::elementwise},
      {"Or", &Evaluator::elementwise},
      {"Xor", &Evaluator::elementwise},
      {"Pow", &Evaluator::elementwise},
      {"Max", &Evaluator::elementwise},
      {"Min", &Evaluator::elementwise},
      {"Mod", &Evaluator::elementwise},
      {"Where", &Evaluator::where},
      {"Sqrt", &Evaluator::unary_math},
      {"Exp", &Evaluator::unary_math},
      {"Log", &Evaluator::unary_math},
      {"Abs", &Evaluator::unary_math},
      {"Reciprocal", &Evaluator::unary_math},
      {"Floor", &Evaluator::unary_math},
      {"Ceil", &Evaluator::unary_math},
      {"Sin", &Evaluator::unary_math},
      {"Cos", &Evaluator::unary_math},
      {"Erf", &Evaluator::unary_math},
      {"Relu", &Evaluator::unary_math},
      {"Sigmoid", &Evaluator::unary_math},
      {"Tanh", &Evaluator::unary_math},
      {"Softplus", &Evaluator::unary_math},
      {"Trilu", &Evaluator::trilu},
      {"ConstantOfShape", &Evaluator::constant_of_shape},
      {"Transpose", &Evaluator::transpose},
      {"Flatten", &Evaluator::flatten},
      {"Range", &Evaluator::range},
      {"Reshape", &Evaluator::reshape},
      {"Squeeze", &Evaluator::squeeze},
      {"Unsqueeze", &Evaluator::unsqueeze},
      {"Concat", &Evaluator::concat},
      {"Expand", &Evaluator::expand},
      {"Tile", &Evaluator::tile},
      {"CumSum", &Evaluator::cum_sum},
      {"Gather", &Evaluator::gather},
      {"GatherND", &Evaluator::gather_nd},
      {"GatherElements", &Evaluator::gather_elements},
      {"ScatterND", &Evaluator::scatter_nd},
      {"Slice", &Evaluator::slice},
      {"ReduceSum", &Evaluator::reduce},
      {"ReduceMean", &Evaluator::reduce},
      {"ReduceMax", &Evaluator::reduce},
      {"ReduceMin", &Evaluator::reduce},
      {"ReduceProd", &Evaluator::reduce},
      {"Einsum", &Evaluator::einsum},
  };
  return kOps;
}

// Einsum of one or two operands without ellipsis ("i,j->ij" of torch.outer, "bij,bjk->bik"),
// summing the labels the output does not keep; an implicit output keeps the labels that appear
// once, in alphabetical order (ONNX's rule).
Result<EvalTensor> Evaluator::einsum(const onnx::NodeProto& n, const Scope& s, EvalTensor x) {
  std::string eq;
  for (char c : attr_s(n, "equation", "")) {
    if (c != ' ') eq += c;
  }
  if (eq.empty()) return invalid_argument("the equation attribute is missing");
  if (eq.find("...") != std::string::npos) return unimplemented("an ellipsis is not evaluated");
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms(1);
  for (char c : lhs) {
    if (c == ',') {
      terms.emplace_back();
    } else {
      terms.back() += c;
    }
  }
  if (terms.size() != static_cast<size_t>(n.input_size()) || terms.size() > 2) {
    return unimplemented("equation '" + eq +
                         "': one or two operands are evaluated, matching the "
                         "inputs");
  }
  std::vector<EvalTensor> in = {std::move(x)};
  if (terms.size() == 2) {
    GP_ASSIGN_OR_RETURN(EvalTensor y, tensor(n, s, 1));
    in.push_back(std::move(y));
  }
  std::map<char, int64_t> size;
  std::map<char, int> uses;
  for (size_t k = 0; k < terms.size(); ++k) {
    if (terms[k].size() != in[k].dims.size()) {
      return invalid_argument("equation '" + eq + "': operand " + std::to_string(k) + " has " +
                              std::to_string(in[k].dims.size()) + " axes");
    }
    for (size_t a = 0; a < terms[k].size(); ++a) {
      const char c = terms[k][a];
      if (!std::isalpha(static_cast<unsigned char>(c))) {
        return invalid_argument("equation '" + eq + "': label '" + std::string(1, c) + "'");
      }
      const auto [it, fresh] = size.emplace(c, in[k].dims[a]);
      if (!fresh && it->second != in[k].dims[a]) {
        return invalid_argument("equation '" + eq + "': label " + std::string(1, c) +
                                " has two sizes");
      }
      ++uses[c];
    }
  }
  std::string out_labels;
  if (arrow != std::string::npos) {
    out_labels = eq.substr(arrow + 2);
  } else {
    for (const auto& [c, u] : uses) {
      if (u == 1) out_labels += c;
    }
  }
  std::string labels = out_labels;  // output labels first, then the summed ones
  for (const auto& [c, u] : size) {
    if (labels.find(c) == std::string::npos) labels += c;
  }
  Dims dims, all;
  for (char c : out_labels) {
    if (size.count(c) == 0) return invalid_argument("equation '" + eq + "': output label unknown");
    dims.push_back(size[c]);
  }
  for (char c : labels) all.push_back(size[c]);
  GP_ASSIGN_OR_RETURN(int64_t count, count_of(dims));
  GP_ASSIGN_OR_RETURN(int64_t steps, checked_count(all, max_work_));
  work_ += steps;
  // Each operand's stride for every label (0 where it does not have the label).
  std::vector<Dims> strides(in.size(), Dims(labels.size(), 0));
  for (size_t k = 0; k < in.size(); ++k) {
    const Dims sk = strides_of(in[k].dims);
    for (size_t a = 0; a < terms[k].size(); ++a) {
      strides[k][labels.find(terms[k][a])] += sk[a];
    }
  }
  EvalTensor out{dims, std::vector<double>(static_cast<size_t>(count), 0.0),
                 std::all_of(in.begin(), in.end(), [](const EvalTensor& t) { return t.ints; })};
  const int64_t inner = count == 0 ? 0 : steps / count;
  Dims idx(all.size(), 0);
  for (int64_t e = 0; e < steps; ++e, next_index(&idx, all)) {
    double v = 1;
    for (size_t k = 0; k < in.size(); ++k) {
      int64_t off = 0;
      for (size_t a = 0; a < idx.size(); ++a) off += idx[a] * strides[k][a];
      v *= in[k].values[static_cast<size_t>(off)];
    }
    out.values[static_cast<size_t>(e / inner)] += v;  // output labels vary slowest
  }
  return out;
}

Result<std::vector<EvalValue>> Evaluator::node(const onnx::NodeProto& n, const Scope& s,
                                               int depth) {
  const std::string& t = n.op_type();
  if (!n.domain().empty() && n.domain() != "ai.onnx") {
    return unimplemented("domain '" + n.domain() + "' is not evaluated");
  }
  if (const auto op = structural_ops().find(t); op != structural_ops().end()) {
    return (this->*op->second)(n, s, depth);
  }
  GP_ASSIGN_OR_RETURN(EvalTensor x, tensor(n, s, 0));
  const auto op = tensor_ops().find(t);
  if (op == tensor_ops().end()) return unimplemented("op type " + t + " is not evaluated");
  GP_ASSIGN_OR_RETURN(EvalTensor r, (this->*op->second)(n, s, std::move(x)));
  return one(std::move(r));
}

Result<std::vector<EvalValue>> Evaluator::constant(const onnx::NodeProto& n, const Scope&, int) {
  if (const auto* a = attr(n, "value"); a != nullptr && a->has_t()) {
    GP_ASSIGN_OR_RETURN(EvalTensor v, eval_tensor_of(a->t()));
    return one(std::move(v));
  }
  auto v = constant_attr_value(n);
  if (!v) return unimplemented("a Constant of this attribute");
  const bool list =
      n.attribute(0).name() == "value_ints" || n.attribute(0).name() == "value_floats";
  EvalTensor out{{}, v->values, v->ints};
  if (list) out.dims = {static_cast<int64_t>(v->values.size())};
  return one(std::move(out));
}

Result<std::vector<EvalValue>> Evaluator::identity(const onnx::NodeProto& n, const Scope& s, int) {
  auto v = get(s, n.input_size() > 0 ? n.input(0) : "");
  if (!v) return invalid_argument("its input has no value");
  return std::vector<EvalValue>{std::move(*v)};
}

Result<std::vector<EvalValue>> Evaluator::sequence_empty(const onnx::NodeProto&, const Scope&,
                                                         int) {
  EvalValue v;
  v.sequence = true;
  return std::vector<EvalValue>{v};
}

Result<std::vector<EvalValue>> Evaluator::sequence_insert(const onnx::NodeProto& n, const Scope& s,
                                                          int) {
  auto seq = get(s, n.input_size() > 0 ? n.input(0) : "");
  if (!seq || !seq->sequence) return invalid_argument("input 0 is not a sequence");
  GP_ASSIGN_OR_RETURN(EvalTensor x, tensor(n, s, 1));
  int64_t held = static_cast<int64_t>(x.values.size());
  for (const auto& item : seq->items) held += static_cast<int64_t>(item.values.size());
  if (static_cast<int64_t>(seq->items.size()) >= kMaxEvalTrips || held > kMaxEvalElements) {
    return resource_exhausted("a sequence of more than " + std::to_string(kMaxEvalTrips) +
                              " tensors or " + std::to_string(kMaxEvalElements) + " elements");
  }
  int64_t pos = static_cast<int64_t>(seq->items.size());
  if (has(n, 2)) {
    GP_ASSIGN_OR_RETURN(EvalTensor p, tensor(n, s, 2));
    if (p.values.size() != 1) return invalid_argument("its position is not a scalar");
    pos = to_index(p.values[0]);
    if (pos < 0) pos += static_cast<int64_t>(seq->items.size());
    if (pos < 0 || pos > static_cast<int64_t>(seq->items.size())) {
      return invalid_argument("position out of range");
    }
  }
  seq->items.insert(seq->items.begin() + pos, std::move(x));
  return std::vector<EvalValue>{std::move(*seq)};
}

Result<std::vector<EvalValue>> Evaluator::concat_from_sequence(const onnx::NodeProto& n,
                                                               const Scope& s, int) {
  auto seq = get(s, n.input_size() > 0 ? n.input(0) : "");
  if (!seq || !seq->sequence || seq->items.empty()) {
    return invalid_argument("input 0 is not a non-empty sequence");
  }
  const bool new_axis = attr_i(n, "new_axis", 0) != 0;
  const Dims& d0 = seq->items[0].dims;
  for (const auto& x : seq->items) {
    if (x.dims != d0) return invalid_argument("sequence items differ in shape");
  }
  const auto rank = static_cast<int64_t>(d0.size()) + (new_axis ? 1 : 0);
  bool ok = true;
  const int64_t axis = normalize_axis(attr_i(n, "axis", 0), rank, &ok);
  if (!ok) return invalid_argument("axis out of range");
  Dims item = d0;
  if (new_axis) item.insert(item.begin() + axis, 1);
  Dims dims = item;
  dims[static_cast<size_t>(axis)] *= static_cast<int64_t>(seq->items.size());
  GP_RETURN_IF_ERROR(count_of(dims).status());
  // Row-major: blocks of the axis and everything after it, interleaved item by item.
  int64_t outer = 1, block = 1;
  for (int64_t k = 0; k < rank; ++k) (k < axis ? outer : block) *= item[static_cast<size_t>(k)];
  EvalTensor out{dims, {}, seq->items[0].ints};
  for (int64_t o = 0; o < outer; ++o) {
    for (const auto& x : seq->items) {
      const auto b = x.values.begin() + o * block;
      out.values.insert(out.values.end(), b, b + block);
    }
  }
  return one(std::move(out));
}

Result<std::vector<EvalValue>> Evaluator::if_op(const onnx::NodeProto& n, const Scope& s,
                                                int depth) {
  GP_ASSIGN_OR_RETURN(EvalTensor c, tensor(n, s, 0));
  if (c.values.size() != 1) return invalid_argument("its condition is not a scalar");
  const auto* branch = attr(n, c.values[0] != 0 ? "then_branch" : "else_branch");
  if (branch == nullptr || !branch->has_g()) return invalid_argument("a branch is missing");
  return subgraph(branch->g(), s, {}, depth);
}

Result<EvalTensor> Evaluator::shape_op(const onnx::NodeProto& n, const Scope&, EvalTensor x) {
  std::vector<double> dims(x.dims.begin(), x.dims.end());
  auto v = shape_range(n, dims);
  const auto len = static_cast<int64_t>(v.size());
  return EvalTensor{{len}, std::move(v), true};
}

Result<EvalTensor> Evaluator::size_op(const onnx::NodeProto&, const Scope&, EvalTensor x) {
  return scalar(static_cast<double>(x.values.size()), true);
}

// Cast to attribute `to`'s type, or CastLike to input 1's.
Result<EvalTensor> Evaluator::cast(const onnx::NodeProto& n, const Scope& s, EvalTensor x) {
  bool ints = false, boolean = false;
  if (n.op_type() == "Cast") {
    const int64_t to = attr_i(n, "to", 0);
    boolean = to == kBool;
    ints = boolean || (to >= 2 && to <= 7) || to == 12 || to == 13;
  } else {
    GP_ASSIGN_OR_RETURN(EvalTensor like, tensor(n, s, 1));
    ints = like.ints;
  }
  for (double& v : x.values) v = std::isnan(v) ? v : boolean ? (v != 0) : ints ? std::trunc(v) : v;
  x.ints = ints;
  return x;
}

// Neg, or the logical Not.
Result<EvalTensor> Evaluator::negate(const onnx::NodeProto& n, const Scope&, EvalTensor x) {
  const bool neg = n.op_type() == "Neg";
  for (double& v : x.values) v = neg || std::isnan(v) ? -v : (v == 0);
  if (!neg) x.ints = true;
  return x;
}

Result<EvalTensor> Evaluator::range(const onnx::NodeProto& n, const Scope& s, EvalTensor x) {
  GP_ASSIGN_OR_RETURN(EvalTensor limit, tensor(n, s, 1));
  GP_ASSIGN_OR_RETURN(EvalTensor delta, tensor(n, s, 2));
  if (x.values.size() != 1 || limit.values.size() != 1 || delta.values.size() != 1 ||
      delta.values[0] == 0) {
    return invalid_argument("start, limit and delta are not scalars with a non-zero delta");
  }
  const double count = std::max(0.0, std::ceil((limit.values[0] - x.values[0]) / delta.values[0]));
  if (!(count <= static_cast<double>(max_elements_))) {
    return resource_exhausted("a range of more than " + std::to_string(max_elements_));
  }
  EvalTensor out{{static_cast<int64_t>(count)}, {}, x.ints && limit.ints && delta.ints};
  for (int64_t k = 0; k < out.dims[0]; ++k) {
    out.values.push_back(x.values[0] + static_cast<double>(k) * delta.values[0]);
  }
  return out;
}

Result<EvalTensor> Evaluator::reshape(const onnx::NodeProto& n, const Scope& s, EvalTensor x) {
  GP_ASSIGN_OR_RETURN(EvalTensor shape, tensor(n, s, 1));
  const bool allow_zero = attr_i(n, "allowzero", 0) != 0;
  Dims dims;
  int infer = -1;
  int64_t known = 1;
  for (size_t k = 0; k < shape.values.size(); ++k) {
    int64_t d = to_index(shape.values[k]);
    if (d == 0 && !allow_zero) {
      if (k >= x.dims.size()) return invalid_argument("a 0 past the input's rank");
      d = x.dims[k];
    }
    if (d == -1) {
      if (infer >= 0) return invalid_argument("two -1 dimensions");
      infer = static_cast<int>(k);
      d = 1;
    } else if (d < 0) {
      return invalid_argument("a negative dimension");
    }
    dims.push_back(d);
    GP_ASSIGN_OR_RETURN(known, count_of(dims));
  }
  const auto total = static_cast<int64_t>(x.values.size());
  if (infer >= 0) {
    if (known == 0 || total % known != 0) return invalid_argument("cannot infer a -1 dimension");
    dims[static_cast<size_t>(infer)] = total / known;
  } else if (known != total) {
    return invalid_argument("the target holds another number of elements");
  }
  x.dims = std::move(dims);
  return x;
}

Result<EvalTensor> Evaluator::squeeze(const onnx::NodeProto& n, const Scope& s, EvalTensor x) {
  GP_ASSIGN_OR_RETURN(Dims axes, axes(n, s, 1, 13));
  const auto rank = static_cast<int64_t>(x.dims.size());
  std::vector<bool> drop(x.dims.size(), axes.empty());
  for (int64_t a : axes) {
    bool ok = true;
    const int64_t k = normalize_axis(a, rank, &ok);
    if (!ok || x.dims[static_cast<size_t>(k)] != 1) return invalid_argument("bad axis");
    drop[static_cast<size_t>(k)] = true;
  }
  Dims dims;
  for (size_t k = 0; k < x.dims.size(); ++k) {
    if (!drop[k] || x.dims[k] != 1) dims.push_back(x.dims[k]);
  }
  x.dims = std::move(dims);
  return x;
}

Result<EvalTensor> Evaluator::unsqueeze(const onnx::NodeProto& n, const Scope& s, EvalTensor x) {
  GP_ASSIGN_OR_RETURN(Dims axes, axes(n, s, 1, 13));
  const auto rank = static_cast<int64_t>(x.dims.size());
  const int64_t out_rank = rank + static_cast<int64_t>(axes.size());
  std::vector<bool> added(static_cast<size_t>(out_rank), false);
  for (int64_t a : axes) {
    bool ok = true;
    const int64_t k = normalize_axis(a, out_rank, &ok);
    if (!ok || added[static_cast<size_t>(k)]) return invalid_argument("bad axis");
    added[static_cast<size_t>(k)] = true;
  }
  Dims dims;
  size_t next = 0;
  for (bool a : added) dims.push_back(a ? 1 : x.dims[next++]);
  x.dims = std::move(dims);
  return x;
}

Result<EvalTensor> Evaluator::concat(const onnx::NodeProto& n, const Scope& s, EvalTensor x) {
  std::vector<EvalTensor> parts = {x};
  for (int k = 1; k < n.input_size(); ++k) {
    GP_ASSIGN_OR_RETURN(EvalTensor p, tensor(n, s, k));
    parts.push_back(std::move(p));
  }
  const auto rank = static_cast<int64_t>(x.dims.size());
  bool ok = rank > 0;
  const int64_t axis = normalize_axis(attr_i(n, "axis", 0), rank, &ok);
  if (!ok) return invalid_argument("axis out of range");
  Dims dims = x.dims;
  dims[static_cast<size_t>(axis)] = 0;
  for (const auto& p : parts) {
    for (int64_t k = 0; k < rank; ++k) {
      if (p.dims.size() != x.dims.size() ||
          (k != axis && p.dims[static_cast<size_t>(k)] != x.dims[static_cast<size_t>(k)])) {
        return invalid_argument("inputs differ in shape off the axis");
      }
    }
    dims[static_cast<size_t>(axis)] += p.dims[static_cast<size_t>(axis)];
  }
  GP_RETURN_IF_ERROR(count_of(dims).status());
  int64_t outer = 1;
  for (int64_t k = 0; k < axis; ++k) outer *= x.dims[static_cast<size_t>(k)];
  EvalTensor out{dims, {}, x.ints};
  for (int64_t o = 0; o < outer; ++o) {
    for (const auto& p : parts) {
      const auto block = static_cast<int64_t>(p.values.size()) / outer;
      const auto b = p.values.begin() + o * block;
      out.values.insert(out.values.end(), b, b + block);
      out.ints = out.ints && p.ints;
    }
  }
  return out;
}

Result<EvalTensor> Evaluator::expand(const onnx::NodeProto& n, const Scope& s, EvalTensor x) {
  GP_ASSIGN_OR_RETURN(EvalTensor shape, tensor(n, s, 1));
  Dims target;
  for (double v : shape.values) target.push_back(to_index(v));
  GP_ASSIGN_OR_RETURN(Dims dims, broadcast(x.dims, target));
  GP_ASSIGN_OR_RETURN(int64_t count, count_of(dims));
  EvalTensor out{dims, {}, x.ints};
  const Dims sx = strides_of(x.dims);
  Dims idx(dims.size(), 0);
  for (int64_t e = 0; e < count; ++e, next_index(&idx, dims)) {
    out.values.push_back(at_broadcast(x, sx, idx));
  }
  return out;
}

Result<EvalTensor> Evaluator::tile(const onnx::NodeProto& n, const Scope& s, EvalTensor x) {
  GP_ASSIGN_OR_RETURN(EvalTensor repeats, tensor(n, s, 1));
  if (repeats.values.size() != x.dims.size()) {
    return invalid_argument("repeats holds " + std::to_string(repeats.values.size()) +
                            " values for an input of rank " + std::to_string(x.dims.size()));
  }
  Dims dims = x.dims;
  for (size_t d = 0; d < dims.size(); ++d) {
    const int64_t r = to_index(repeats.values[d]);
    if (r < 0) return invalid_argument("a negative repeat " + std::to_string(r));
    if (__builtin_mul_overflow(dims[d], r, &dims[d])) return resource_exhausted("repeats overflow");
  }
  GP_ASSIGN_OR_RETURN(int64_t count, count_of(dims));
  EvalTensor out{dims, {}, x.ints};
  out.values.reserve(static_cast<size_t>(count));
  const Dims sx = strides_of(x.dims);
  Dims idx(dims.size(), 0);
  for (int64_t e = 0; e < count; ++e, next_index(&idx, dims)) {
    int64_t at = 0;
    for (size_t d = 0; d < idx.size(); ++d) at += (idx[d] % x.dims[d]) * sx[d];
    out.values.push_back(x.values[static_cast<size_t>(at)]);
  }
  work_ += count;
  return out;
}

// CumSum along one axis, inclusive or exclusive, forward or reversed.
Result<EvalTensor> Evaluator::cum_sum(const onnx::NodeProto& n, const Scope& s, EvalTensor x) {
  GP_ASSIGN_OR_RETURN(EvalTensor axis_value, tensor(n, s, 1));
  if (axis_value.values.size() != 1) return invalid_argument("axis is not a scalar");
  bool ok = !x.dims.empty();
  const int64_t axis =
      normalize_axis(to_index(axis_value.values[0]), static_cast<int64_t>(x.dims.size()), &ok);
  if (!ok) return invalid_argument("axis out of range");
  const bool exclusive = attr_i(n, "exclusive", 0) != 0, reverse = attr_i(n, "reverse", 0) != 0;
  const int64_t size = x.dims[static_cast<size_t>(axis)];
  const int64_t inner = strides_of(x.dims)[static_cast<size_t>(axis)];
  const int64_t outer =
      size * inner == 0 ? 0 : static_cast<int64_t>(x.values.size()) / (size * inner);
  EvalTensor out{x.dims, std::vector<double>(x.values.size(), 0.0), x.ints};
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t f = 0; f < inner; ++f) {
      double sum = 0;
      for (int64_t k = 0; k < size; ++k) {
        const int64_t j = reverse ? size - 1 - k : k;
        const auto e = static_cast<size_t>((o * size + j) * inner + f);
        if (!exclusive) sum += x.values[e];
        out.values[e] = sum;
        if (exclusive) sum += x.values[e];
      }
    }
  }
  work_ += static_cast<int64_t>(x.values.size());
  return out;
}

Result<EvalTensor> Evaluator::gather(const onnx::NodeProto& n, const Scope& s, EvalTensor x) {
  GP_ASSIGN_OR_RETURN(EvalTensor indices, tensor(n, s, 1));
  const auto rank = static_cast<int64_t>(x.dims.size());
  bool ok = rank > 0;
  const int64_t axis = normalize_axis(attr_i(n, "axis", 0), rank, &ok);
  if (!ok) return invalid_argument("axis out of range");
  const int64_t size = x.dims[static_cast<size_t>(axis)];
  Dims dims(x.dims.begin(), x.dims.begin() + axis);
  dims.insert(dims.end(), indices.dims.begin(), indices.dims.end());
  dims.insert(dims.end(), x.dims.begin() + axis + 1, x.dims.end());
  GP_RETURN_IF_ERROR(count_of(dims).status());
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < rank; ++k) {
    if (k < axis) outer *= x.dims[static_cast<size_t>(k)];
    if (k > axis) inner *= x.dims[static_cast<size_t>(k)];
  }
  EvalTensor out{dims, {}, x.ints};
  for (int64_t o = 0; o < outer; ++o) {
    for (double iv : indices.values) {
      int64_t i = to_index(iv);
      if (i < 0) i += size;
      if (i < 0 || i >= size)
        return invalid_argument("index " + std::to_string(i) + " out of range");
      const auto b = x.values.begin() + (o * size + i) * inner;
      out.values.insert(out.values.end(), b, b + inner);
    }
  }
  return out;
}

// The depth of GatherND's and ScatterND's indices (their last axis: how many leading axes of x
// each row addresses), or why it does not fit x.
Result<int64_t> index_depth(const EvalTensor& indices, const EvalTensor& x) {
  if (indices.dims.empty()) return invalid_argument("0-D indices");
  const int64_t depth = indices.dims.back();
  const auto rank = static_cast<int64_t>(x.dims.size());
  if (depth < 1 || depth > rank) {
    return invalid_argument("indices of depth " + std::to_string(depth) + " for data of rank " +
                            std::to_string(rank));
  }
  return depth;
}

// The row-major position among x's leading `depth` axes that row `row` of the indices
// addresses (negative indices count from the end).
Result<int64_t> row_position(const EvalTensor& indices, int64_t row, int64_t depth,
                             const EvalTensor& x) {
  int64_t at = 0;
  for (int64_t k = 0; k < depth; ++k) {
    const int64_t size = x.dims[static_cast<size_t>(k)];
    int64_t i = to_index(indices.values[static_cast<size_t>(row * depth + k)]);
    if (i < 0) i += size;
    if (i < 0 || i >= size) return invalid_argument("index " + std::to_string(i) + " out of range");
    at = at * size + i;
  }
  return at;
}

// GatherND without batch dims (torch's lowering of advanced indexing): each row of the last
// axis of `indices` picks a slice of x by its leading coordinates.
Result<EvalTensor> Evaluator::gather_nd(const onnx::NodeProto& n, const Scope& s, EvalTensor x) {
  GP_ASSIGN_OR_RETURN(EvalTensor indices, tensor(n, s, 1));
  if (attr_i(n, "batch_dims", 0) != 0) return unimplemented("batch_dims other than 0");
  GP_ASSIGN_OR_RETURN(const int64_t depth, index_depth(indices, x));
  const auto rank = static_cast<int64_t>(x.dims.size());
  Dims dims(indices.dims.begin(), indices.dims.end() - 1);
  dims.insert(dims.end(), x.dims.begin() + depth, x.dims.end());
  GP_RETURN_IF_ERROR(count_of(dims).status());
  int64_t inner = 1;
  for (int64_t k = depth; k < rank; ++k) inner *= x.dims[static_cast<size_t>(k)];
  EvalTensor out{dims, {}, x.ints};
  const auto rows = static_cast<int64_t>(indices.values.size()) / depth;
  for (int64_t row = 0; row < rows; ++row) {
    GP_ASSIGN_OR_RETURN(const int64_t at, row_position(indices, row, depth, x));
    const auto b = x.values.begin() + at * inner;
    out.values.insert(out.values.end(), b, b + inner);
  }
  return out;
}

// GatherElements (torch.gather): the output has the indices' shape; each element reads x at its
// own coordinates with the one on `axis` replaced by its index.
Result<EvalTensor> Evaluator::gather_elements(const onnx::NodeProto& n, const Scope& s,
                                              EvalTensor x) {
  GP_ASSIGN_OR_RETURN(EvalTensor indices, tensor(n, s, 1));
  const auto rank = static_cast<int64_t>(x.dims.size());
  if (rank == 0 || static_cast<int64_t>(indices.dims.size()) != rank) {
    return invalid_argument("indices of rank " + std::to_string(indices.dims.size()) +
                            " for data of rank " + std::to_string(rank));
  }
  bool ok = true;
  const int64_t axis = normalize_axis(attr_i(n, "axis", 0), rank, &ok);
  if (!ok) return invalid_argument("axis out of range");
  for (int64_t k = 0; k < rank; ++k) {
    const auto d = static_cast<size_t>(k);
    if (k != axis && indices.dims[d] > x.dims[d]) {
      return invalid_argument("indices longer than the data on axis " + std::to_string(k));
    }
  }
  EvalTensor out{indices.dims, {}, x.ints};
  out.values.reserve(indices.values.size());
  const int64_t size = x.dims[static_cast<size_t>(axis)];
  std::vector<int64_t> at(static_cast<size_t>(rank), 0);  // the output coordinates
  for (double iv : indices.values) {
    int64_t i = to_index(iv);
    if (i < 0) i += size;
    if (i < 0 || i >= size) return invalid_argument("index " + std::to_string(i) + " out of range");
    int64_t flat = 0;
    for (int64_t k = 0; k < rank; ++k) {
      flat = flat * x.dims[static_cast<size_t>(k)] + (k == axis ? i : at[static_cast<size_t>(k)]);
    }
    out.values.push_back(x.values[static_cast<size_t>(flat)]);
    for (int64_t k = rank - 1; k >= 0; --k) {  // the next output coordinates, row-major
      if (++at[static_cast<size_t>(k)] < indices.dims[static_cast<size_t>(k)]) break;
      at[static_cast<size_t>(k)] = 0;
    }
  }
  return out;
}

// ScatterND (torch's slice assignment, `mask[h0:h1, w0:w1] = k` of Swin's shifted windows): a
// copy of x with the slices that each row of the indices' last axis addresses replaced by
// `updates`, or combined with them by the reduction.
Result<EvalTensor> Evaluator::scatter_nd(const onnx::NodeProto& n, const Scope& s, EvalTensor x) {
  GP_ASSIGN_OR_RETURN(EvalTensor indices, tensor(n, s, 1));
  GP_ASSIGN_OR_RETURN(EvalTensor updates, tensor(n, s, 2));
  const std::string reduction = attr_s(n, "reduction", "none");
  if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" &&
      reduction != "min") {
    return invalid_argument("reduction '" + reduction + "'");
  }
  GP_ASSIGN_OR_RETURN(const int64_t depth, index_depth(indices, x));
  const auto rank = static_cast<int64_t>(x.dims.size());
  int64_t inner = 1;
  for (int64_t k = depth; k < rank; ++k) inner *= x.dims[static_cast<size_t>(k)];
  const auto rows = static_cast<int64_t>(indices.values.size()) / depth;
  Dims want(indices.dims.begin(), indices.dims.end() - 1);  // ONNX: indices[:-1] + x[depth:]
  want.insert(want.end(), x.dims.begin() + depth, x.dims.end());
  if (updates.dims != want) return invalid_argument("updates of a shape other than ONNX's");
  for (int64_t row = 0; row < rows; ++row) {
    GP_ASSIGN_OR_RETURN(const int64_t at, row_position(indices, row, depth, x));
    for (int64_t e = 0; e < inner; ++e) {
      double& to = x.values[static_cast<size_t>(at * inner + e)];
      const double u = updates.values[static_cast<size_t>(row * inner + e)];
      to = reduction == "add"   ? to + u
           : reduction == "mul" ? to * u
           : reduction == "max" ? std::max(to, u)
           : reduction == "min" ? std::min(to, u)
                                : u;
    }
  }
  work_ += rows * inner;
  return x;
}

}  // namespace

Result<EvalTensor> eval_tensor_of(const onnx::TensorProto& t, int64_t max_elements) {
  EvalTensor out;
  out.dims.assign(t.dims().begin(), t.dims().end());
  GP_ASSIGN_OR_RETURN(int64_t count, checked_count(out.dims, max_elements));
  if (t.data_type() == kBool) {
    for (int32_t v : t.int32_data()) out.values.push_back(v != 0);
    for (char c : t.raw_data()) out.values.push_back(c != 0);
  } else {
    out.values = values_of(t);
  }
  out.ints = t.data_type() != kOnnxFloat && t.data_type() != kOnnxDouble;
  if (static_cast<int64_t>(out.values.size()) != count || (out.values.empty() && count > 0)) {
    return invalid_argument("tensor '" + t.name() + "' holds " + std::to_string(out.values.size()) +
                            " values for " + std::to_string(count) +
                            " elements (or an unsupported type)");
  }
  return out;
}

Result<std::map<std::string, EvalValue>> evaluate_nodes(
    std::span<const onnx::NodeProto* const> nodes, int64_t opset, const EvalLookup& outer,
    int64_t max_elements) {
  Evaluator e(opset, outer, max_elements);
  Evaluator::Scope scope;
  GP_RETURN_IF_ERROR(e.run(nodes, &scope, 0));
  return std::move(scope.values);
}

}  // namespace gp::model::onnx_detail
