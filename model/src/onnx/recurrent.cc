// ONNX LSTM and GRU (torch's nn.LSTM and nn.GRU, from every exporter), unrolled over the static
// sequence length into catalogue ops. Per sample and direction: one linear computes the input
// projections of every step at once (its weight and bias are W's and Wb's gates), a
// broadcast_param holds the recurrent weight R (and one the recurrent bias Rb) once, read by
// every step's matmul, so each trained tensor is one parameter whatever the length. States are
// [hidden, 1] columns: R [gates * hidden, hidden] times h is R's own layout, so the parameters
// are blocks of the ONNX tensors as they are (COPY or RANGE) and export writes them back there.
//
// torch writes W, R and B as computed tensors: its legacy exporter and dynamo without the
// optimiser slice its own gate order (LSTM i f g o, GRU r z n) out of the parameters and
// concatenate them in ONNX's (LSTM i o f c, GRU z r h); the optimiser folds that into new
// initializers. flat_weight follows the slices back to the parameters: the operator reads each
// ONNX gate at its block of the parameter, which stays torch's tensor.
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

// The most steps one direction is unrolled over (each step is about 16 operators).
constexpr int64_t kMaxSteps = 4096;

// Why node `n`'s attributes are not the ones the unrolling computes ("" when they are): the
// activations must be the defaults, no clip, no coupled input and forget gates.
std::string attribute_refusal(const onnx::NodeProto& n, bool lstm, int dirs) {
  static const std::set<std::string> kLstm = {
      "activation_alpha", "activation_beta", "activations",  "clip",
      "direction",        "hidden_size",     "input_forget", "layout"};
  static const std::set<std::string> kGru = {
      "activation_alpha", "activation_beta", "activations", "clip",
      "direction",        "hidden_size",     "layout",      "linear_before_reset"};
  for (const auto& a : n.attribute()) {
    if (!(lstm ? kLstm : kGru).count(a.name())) return "attribute '" + a.name() + "' is unknown";
  }
  if (const auto* a = attr(n, "activations")) {
    std::vector<std::string> want;
    for (int d = 0; d < dirs; ++d) {
      want.insert(want.end(), {"Sigmoid", "Tanh"});
      if (lstm) want.push_back("Tanh");
    }
    std::vector<std::string> got(a->strings().begin(), a->strings().end());
    if (got != want) {
      std::string list;
      for (const auto& s : got) list += (list.empty() ? "" : ", ") + s;
      return "activations = [" + list + "]: only the defaults (Sigmoid, Tanh" +
             (lstm ? ", Tanh" : "") + " per direction) map";
    }
  }
  for (const char* name : {"activation_alpha", "activation_beta"}) {
    if (attr(n, name) != nullptr) return std::string(name) + " is set: only the defaults map";
  }
  if (attr(n, "clip") != nullptr) {
    std::ostringstream clip;
    clip << attr_f(n, "clip", 0);
    return "clip = " + clip.str() + ": only unclipped cells map";
  }
  if (const int64_t f = attr_i(n, "input_forget", 0); lstm && f != 0) {
    return "input_forget = " + std::to_string(f) + ": only 0 (separate gates) maps";
  }
  if (const int64_t l = attr_i(n, "linear_before_reset", 0); !lstm && l != 0 && l != 1) {
    return "linear_before_reset = " + std::to_string(l) + ", expected 0 or 1";
  }
  if (const int64_t l = attr_i(n, "layout", 0); l != 0 && l != 1) {
    return "layout = " + std::to_string(l) + ", expected 0 or 1";
  }
  return "";
}

}  // namespace

// One direction's parameters: a block of an ONNX tensor each (offset, count elements), and
// where each ONNX gate sits among the blocks' gates.
struct Importer::RnnBlock {
  std::string tensor;
  int64_t offset = 0, count = 0;
};
struct Importer::RnnDirection {
  RnnBlock w, r, wb, rb;
  bool bias = false;
  std::vector<int64_t> gate_at;  // ONNX gate g is block gate gate_at[g]
};
struct Importer::RnnSpec {
  std::string id;  // the operators' prefix
  bool lstm = true;
  int gates = 4;
  int64_t hidden = 0, steps = 0;
  bool linear_before_reset = false;  // GRU
};
// One direction's states: h of every step in time order, and the last h and c ([hidden, 1]).
struct Importer::RnnRun {
  std::vector<TensorRef> h;
  TensorRef last_h, last_c;
};

std::optional<std::vector<int64_t>> Importer::static_ints(const std::string& name,
                                                          int depth) const {
  auto ints = [](const std::vector<double>& v) -> std::optional<std::vector<int64_t>> {
    std::vector<int64_t> out;
    for (double d : v) {
      if (!std::isfinite(d) || d == kBatchDim) return std::nullopt;
      out.push_back(to_index(d));
    }
    return out;
  };
  if (depth > 32) return std::nullopt;
  if (auto f = folded(name)) {
    if (auto v = ints(*f)) return v;
  }
  if (auto c = consts_.find(name); c != consts_.end()) {
    if (c->second->dims_size() > 1) return std::nullopt;
    return ints(values_of(*c->second));
  }
  const int p = producer(name);
  if (p < 0) return std::nullopt;
  const auto& n = g_.node(p);
  if (n.op_type() == "Shape") {
    // Only the dims it reads need to be known (torch reads the hidden size of its zero state).
    const auto dims =
        is_weight(n.input(0)) ? std::optional(weight_dims(n.input(0))) : onnx_shape(n.input(0));
    if (!dims) return std::nullopt;
    std::vector<double> d;
    for (int64_t v : *dims) d.push_back(v > 0 ? static_cast<double>(v) : NAN);
    return ints(shape_range(n, d));
  }
  auto v = fold_node(n, [&](const std::string& in) -> std::optional<FoldedValue> {
    auto r = static_ints(in, depth + 1);
    if (!r) return std::nullopt;
    return FoldedValue{{r->begin(), r->end()}, true};
  });
  if (!v) return std::nullopt;
  return ints(v->values);
}

bool recurrent_weight_view(const std::string& t) {
  return t == "Slice" || t == "Identity" || t == "Unsqueeze" || t == "Squeeze" || t == "Reshape" ||
         t == "Flatten";
}

Result<Importer::FlatWeight> Importer::flat_weight(const std::string& name, int depth) const {
  if (depth > 64) return invalid_argument("'" + name + "' is computed by too many nodes");
  // (A slice view is followed to the weight it slices: the operator reads its blocks there.)
  if (is_weight(name) && !slice_of_.count(name)) {
    if (!param_like(name)) return invalid_argument("'" + name + "' is not a trained weight");
    if (resolve_view(name).source_transposed) {
      return invalid_argument("'" + name + "' is a transposed view of a weight");
    }
    const auto dims = weight_dims(name);
    return FlatWeight{dims, {{name, 0, product(dims)}}};
  }
  const int p = producer(name);
  if (p < 0) return invalid_argument("'" + name + "' is neither a weight nor computed from one");
  const auto& n = g_.node(p);
  const std::string& t = n.op_type();
  const std::string not_view = "'" + name + "' is computed by " + where(p) +
                               ", which is not a slice, concatenation or view of weights";
  if (t == "Concat") {
    FlatWeight out;
    int64_t axis = attr_i(n, "axis", 0);
    for (const auto& in : n.input()) {
      auto f = flat_weight(in, depth + 1);
      if (!f.ok()) return f.status();
      const auto rank = static_cast<int64_t>(f->dims.size());
      const int64_t a = axis < 0 ? axis + rank : axis;
      // Flat concatenation: nothing but size-1 axes before the concatenated one.
      if (a < 0 || a >= rank || product(f->dims, 0, static_cast<size_t>(a)) != 1) {
        return invalid_argument(not_view + " (a concatenation along an inner axis)");
      }
      if (out.dims.empty()) {
        out.dims = f->dims;
      } else {
        out.dims[static_cast<size_t>(a)] += f->dims[static_cast<size_t>(a)];
      }
      out.pieces.insert(out.pieces.end(), f->pieces.begin(), f->pieces.end());
    }
    return out;
  }
  if (recurrent_weight_view(t)) {
    auto f = flat_weight(n.input(0), depth + 1);
    if (!f.ok()) return f.status();
    if (t == "Identity") return f;
    if (t == "Slice") return slice_weight(p, *f);
    auto dims = weight_view_dims(p, f->dims);
    if (!dims) return invalid_argument(not_view + " (its shape is not constant)");
    f->dims = *dims;
    return f;
  }
  return invalid_argument(not_view);
}

// Slice node p of weight `f` along one axis with nothing but size-1 axes before it: a flat range.
Result<Importer::FlatWeight> Importer::slice_weight(int p, const FlatWeight& f) const {
  const auto& n = g_.node(p);
  const auto rank = static_cast<int64_t>(f.dims.size());
  auto input = [&](int k) {
    return k < n.input_size() && !n.input(k).empty() ? static_ints(n.input(k)) : std::nullopt;
  };
  const auto starts = input(1), ends = input(2);
  auto axes = input(3);
  const auto steps = input(4);
  if (!axes && n.input_size() <= 3) {
    axes = std::vector<int64_t>();
    for (int64_t a = 0; starts && a < static_cast<int64_t>(starts->size()); ++a) axes->push_back(a);
  }
  if (!starts || !ends || !axes || starts->size() != ends->size() ||
      axes->size() != starts->size() || (n.input_size() > 4 && !n.input(4).empty() && !steps)) {
    return invalid_argument(where(p) + ": the slice of a weight has no constant bounds");
  }
  FlatWeight out = f;
  int64_t cut = -1, lo = 0, hi = 0;
  for (size_t k = 0; k < axes->size(); ++k) {
    const int64_t a = (*axes)[k] < 0 ? (*axes)[k] + rank : (*axes)[k];
    if (a < 0 || a >= rank || (steps && (*steps)[k] != 1)) {
      return invalid_argument(where(p) + ": a slice of a weight with a step or axis out of range");
    }
    const int64_t size = f.dims[static_cast<size_t>(a)];
    const auto [s, e] =
        slice_bounds(static_cast<double>((*starts)[k]), static_cast<double>((*ends)[k]), size);
    if (s == 0 && e == size) continue;
    if (cut >= 0 || product(f.dims, 0, static_cast<size_t>(a)) != 1) {
      return invalid_argument(where(p) + ": a slice of a weight along an inner axis");
    }
    cut = a, lo = s, hi = std::max(s, e);
  }
  if (cut < 0) return out;
  const int64_t inner = product(f.dims, static_cast<size_t>(cut) + 1);
  out.dims[static_cast<size_t>(cut)] = hi - lo;
  out.pieces = f.range(lo * inner, (hi - lo) * inner);
  return out;
}

// The output dims of view node p (Unsqueeze, Squeeze, Reshape, Flatten) of dims `in`.
std::optional<std::vector<int64_t>> Importer::weight_view_dims(
    int p, const std::vector<int64_t>& in) const {
  const auto& n = g_.node(p);
  const std::string& t = n.op_type();
  auto axes = attr(n, "axes") != nullptr                  ? std::optional(attr_ints(n, "axes"))
              : n.input_size() > 1 && !n.input(1).empty() ? static_ints(n.input(1))
                                                          : std::nullopt;
  std::vector<int64_t> out = in;
  if (t == "Unsqueeze") {
    if (!axes) return std::nullopt;
    const auto rank = static_cast<int64_t>(in.size() + axes->size());
    for (int64_t& a : *axes) a = a < 0 ? a + rank : a;
    std::sort(axes->begin(), axes->end());
    for (int64_t a : *axes) {
      if (a < 0 || a > static_cast<int64_t>(out.size())) return std::nullopt;
      out.insert(out.begin() + a, 1);
    }
    return out;
  }
  if (t == "Squeeze") {
    out.clear();
    const auto rank = static_cast<int64_t>(in.size());
    for (int64_t d = 0; d < rank; ++d) {
      const bool listed = axes && (std::count(axes->begin(), axes->end(), d) > 0 ||
                                   std::count(axes->begin(), axes->end(), d - rank) > 0);
      if (!(listed || (!axes && in[static_cast<size_t>(d)] == 1))) {
        out.push_back(in[static_cast<size_t>(d)]);
      }
    }
    return out;
  }
  if (t == "Flatten") {
    int64_t a = attr_i(n, "axis", 1);
    if (a < 0) a += static_cast<int64_t>(in.size());
    if (a < 0 || a > static_cast<int64_t>(in.size())) return std::nullopt;
    return std::vector<int64_t>{product(in, 0, static_cast<size_t>(a)),
                                product(in, static_cast<size_t>(a))};
  }
  auto target = n.input_size() > 1 ? static_ints(n.input(1)) : std::nullopt;  // Reshape
  if (!target) return std::nullopt;
  int64_t known = 1, infer = -1;
  for (size_t k = 0; k < target->size(); ++k) {
    int64_t& d = (*target)[k];
    if (d == 0 && attr_i(n, "allowzero", 0) == 0 && k < in.size()) d = in[k];
    if (d == -1 && infer < 0) {
      infer = static_cast<int64_t>(k);
    } else if (d <= 0) {
      return std::nullopt;
    } else {
      known *= d;
    }
  }
  if (infer >= 0) (*target)[static_cast<size_t>(infer)] = product(in) / known;
  if (product(*target) != product(in)) return std::nullopt;
  return target;
}

bool Importer::zero_state(const std::string& name, int depth) const {
  if (name.empty()) return true;
  if (depth > 32) return false;
  // A constant of zeros, or an initializer of zeros (torch.zeros that dynamo's optimiser folded
  // over a static batch); zeros expanded over the batch may have become a constant op already
  // (laid_constant): the producers tell.
  if (auto c = const_tensor(name)) {
    return !c->values.empty() &&
           std::all_of(c->values.begin(), c->values.end(), [](double v) { return v == 0; });
  }
  const int p = producer(name);
  if (p < 0) return false;
  const auto& n = g_.node(p);
  const std::string& t = n.op_type();
  if (t == "ConstantOfShape") {
    const auto* a = attr(n, "value");
    if (a == nullptr) return true;  // ONNX's default value is 0
    const auto v = values_of(a->t());
    return std::all_of(v.begin(), v.end(), [](double e) { return e == 0; });
  }
  static const std::set<std::string> kViews = {"Expand",    "Slice",   "Identity",  "Reshape",
                                               "Unsqueeze", "Squeeze", "Transpose", "Cast",
                                               "Tile",      "Flatten"};
  if (kViews.count(t)) return n.input_size() > 0 && zero_state(n.input(0), depth + 1);
  if (t == "Concat") {
    return std::all_of(n.input().begin(), n.input().end(),
                       [&](const std::string& in) { return zero_state(in, depth + 1); });
  }
  return false;
}

void Importer::claim_recurrent_inputs(int i) {
  const auto& n = g_.node(i);
  std::set<int> nodes;
  for (int k : {1, 2, 3, 5, 6}) {
    if (k >= n.input_size() || n.input(k).empty()) continue;
    const std::string& in = n.input(k);
    if (k <= 3 ? !flat_weight(in, 0).ok() : !zero_state(in)) continue;
    // Every node computing it, down to weights, constants and the shapes of activations.
    std::set<int> part;
    bool constant = true;
    for (std::vector<std::string> todo = {in}; !todo.empty() && constant;) {
      const std::string name = todo.back();
      todo.pop_back();
      const int p = producer(name);
      if (p < 0 || done_[static_cast<size_t>(p)] || !part.insert(p).second) continue;
      if (g_.node(p).op_type() == "Shape") continue;
      for (const auto& x : g_.node(p).input()) {
        constant = constant && !act_.count(x);
        if (!x.empty()) todo.push_back(x);
      }
    }
    if (constant) nodes.insert(part.begin(), part.end());
  }
  // Only nodes whose outputs feed nothing else: the others are converted as they are.
  for (bool pruned = true; pruned;) {
    pruned = false;
    std::set<int> inside = nodes;
    inside.insert(i);
    for (int k : std::set<int>(nodes)) {
      for (const auto& o : g_.node(k).output()) {
        if (!only_consumers_in(o, inside) && nodes.erase(k) > 0) pruned = true;
      }
    }
  }
  for (int k : nodes) done_[static_cast<size_t>(k)] = true;
}

// One direction's block of weight `f` (dims [dirs, rows...]): gates of `rows` x `cols` elements
// from gate `first` on, each one piece of one tensor, together a contiguous block of it in any
// gate order; `gate_at` receives that order, or is checked against it when already set.
Result<Importer::RnnBlock> Importer::gate_block(const FlatWeight& f, int64_t first, int gates,
                                                int64_t rows, int64_t cols,
                                                std::vector<int64_t>* gate_at) const {
  const int64_t size = rows * cols;
  std::vector<FlatWeight::Piece> at;
  for (int g = 0; g < gates; ++g) {
    auto pieces = f.range((first + g) * size, size);
    if (pieces.size() != 1 || (g > 0 && pieces[0].tensor != at[0].tensor)) {
      return invalid_argument("its gates do not each come from one block of one tensor");
    }
    at.push_back(pieces[0]);
  }
  int64_t base = at[0].offset;
  for (const auto& p : at) base = std::min(base, p.offset);
  std::vector<int64_t> order;
  for (const auto& p : at) {
    if ((p.offset - base) % size != 0 || (p.offset - base) / size >= gates) {
      return invalid_argument("its gates are not one contiguous block of '" + p.tensor + "'");
    }
    order.push_back((p.offset - base) / size);
  }
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int g = 0; g < gates; ++g) {
    if (sorted[static_cast<size_t>(g)] != g) {
      return invalid_argument("it reads a gate of '" + at[0].tensor + "' twice");
    }
  }
  if (gate_at->empty()) *gate_at = order;
  if (*gate_at != order) {
    return invalid_argument("its gates are ordered unlike those of the other weights");
  }
  return RnnBlock{at[0].tensor, base, gates * size};
}

// The parameters of every direction of recurrent node i, from its W, R and B.
Result<std::vector<Importer::RnnDirection>> Importer::rnn_directions(int i, int gates,
                                                                     int64_t hidden, int64_t input,
                                                                     int dirs) const {
  const auto& n = g_.node(i);
  const bool bias = n.input_size() > 3 && !n.input(3).empty();
  std::vector<FlatWeight> f;
  const std::vector<std::vector<int64_t>> want = {
      {dirs, gates * hidden, input}, {dirs, gates * hidden, hidden}, {dirs, 2 * gates * hidden}};
  const char* names[] = {"W", "R", "B"};
  for (int k = 1; k <= (bias ? 3 : 2); ++k) {
    auto w = flat_weight(n.input(k), 0);
    const std::string what = std::string(names[k - 1]) + " '" + n.input(k) + "'";
    if (!w.ok()) return invalid_argument(what + ": " + w.status().message());
    if (w->dims != want[static_cast<size_t>(k - 1)]) {
      return invalid_argument(what + " has dims " + dims_text(w->dims) + ", expected " +
                              dims_text(want[static_cast<size_t>(k - 1)]));
    }
    f.push_back(std::move(*w));
  }
  std::vector<RnnDirection> out(static_cast<size_t>(dirs));
  for (int d = 0; d < dirs; ++d) {
    RnnDirection& r = out[static_cast<size_t>(d)];
    r.bias = bias;
    auto block = [&](int k, int64_t first, int64_t cols, RnnBlock* b) -> Status {
      auto got = gate_block(f[static_cast<size_t>(k)], first, gates, hidden, cols, &r.gate_at);
      if (!got.ok()) {
        return invalid_argument(std::string(names[k]) + " '" + n.input(k + 1) + "' direction " +
                                std::to_string(d) + ": " + got.status().message());
      }
      *b = *got;
      return ok_status();
    };
    GP_RETURN_IF_ERROR(block(0, d * gates, input, &r.w));
    GP_RETURN_IF_ERROR(block(1, d * gates, hidden, &r.r));
    if (bias) {
      GP_RETURN_IF_ERROR(block(2, 2 * d * gates, 1, &r.wb));
      GP_RETURN_IF_ERROR(block(2, (2 * d + 1) * gates, 1, &r.rb));
    }
  }
  return out;
}

void Importer::take_block(const std::string& id, const std::string& param, const RnnBlock& b) {
  if (b.offset == 0 && b.count == product(weight_dims(b.tensor))) return take(id, param, b.tensor);
  take(id, param, b.tensor, graphpipe::v1::ParamSource::LAYOUT_RANGE, b.offset, b.count);
}

// The initial state `name` (input k) of every direction as [hidden, 1] columns; nullopt entries
// for zeros. Refuses node i (and returns nullopt) when it is neither zeros nor an activation of
// per-sample shape [dirs, hidden] with the batch where the layout has it.
std::optional<std::vector<std::optional<TensorRef>>> Importer::rnn_state(int i, int k, int dirs,
                                                                         int64_t hidden,
                                                                         int64_t layout) {
  const auto& n = g_.node(i);
  std::vector<std::optional<TensorRef>> out(static_cast<size_t>(dirs));
  if (k >= n.input_size() || zero_state(n.input(k))) return out;
  const std::string& name = n.input(k);
  const auto x = activation(name);
  const auto shape = sample_shape(name);
  const BatchLayout l = layout_of(name);
  const BatchLayout want{layout == 0 ? 1 : 0, 1, 1};
  if (!x || !shape || *shape != std::vector<int64_t>{dirs, hidden} || !(l == want)) {
    refuse(i, "its initial state '" + name + "' is neither zeros nor [" + std::to_string(dirs) +
                  ", hidden " + std::to_string(hidden) + "] per sample with the batch at axis " +
                  std::to_string(want.pos));
    return std::nullopt;
  }
  for (int d = 0; d < dirs; ++d) {
    const std::string tag = current_id_ + "_" + name + "_d" + std::to_string(d);
    const TensorRef row = dirs == 1 ? *x : b_.slice(unique_id(tag, tag), *x, 0, d, d + 1);
    out[static_cast<size_t>(d)] = b_.reshape(unique_id(tag + "_col", tag), row, {hidden, 1});
  }
  return out;
}

void Importer::recurrent(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const bool lstm = n.op_type() == "LSTM";
  const std::string direction = attr_s(n, "direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    return refuse(i, "direction = '" + direction + "', expected forward, reverse or bidirectional");
  }
  const int dirs = direction == "bidirectional" ? 2 : 1;
  if (const std::string why = attribute_refusal(n, lstm, dirs); !why.empty()) {
    return refuse(i, why);
  }
  if (n.input_size() > 4 && !n.input(4).empty()) {
    return refuse(i, "sequence_lens '" + n.input(4) + "' is given: only full sequences map");
  }
  if (lstm && n.input_size() > 7 && !n.input(7).empty()) {
    return refuse(i, "peephole weights P '" + n.input(7) + "' are given: no peepholes map");
  }
  const int64_t layout = attr_i(n, "layout", 0);
  const auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input X is not an activation");
  const auto shape = sample_shape(n.input(0));
  const BatchLayout l = layout_of(n.input(0));
  if (!shape || shape->size() != 2 || !(l == BatchLayout{layout == 0 ? 1 : 0, 1, 1})) {
    return refuse(i, "X '" + n.input(0) + "' has the batch at " + l.text() +
                         ", but layout = " + std::to_string(layout) + " reads " +
                         (layout == 0 ? "[sequence, batch, input]" : "[batch, sequence, input]"));
  }
  const int64_t steps = (*shape)[0], input = (*shape)[1];
  const int64_t hidden = attr_i(n, "hidden_size", 0);
  if (hidden <= 0) return refuse(i, "hidden_size = " + std::to_string(hidden) + ", expected > 0");
  if (steps <= 0 || steps > kMaxSteps) {
    return refuse(i, "a sequence of " + std::to_string(steps) + " steps (unrolled up to " +
                         std::to_string(kMaxSteps) + ")");
  }
  const int gates = lstm ? 4 : 3;
  auto params = rnn_directions(i, gates, hidden, input, dirs);
  if (!params.ok()) return refuse(i, params.status().message());
  auto h0 = rnn_state(i, 5, dirs, hidden, layout);
  auto c0 = lstm ? rnn_state(i, 6, dirs, hidden, layout)
                 : std::optional(std::vector<std::optional<TensorRef>>(static_cast<size_t>(dirs)));
  if (!h0 || !c0) return;
  RnnSpec s{id, lstm, gates, hidden, steps, attr_i(n, "linear_before_reset", 0) != 0};
  std::vector<RnnRun> runs;
  for (int d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    runs.push_back(rnn_run(s, (*params)[static_cast<size_t>(d)], d, dirs, reverse, *x,
                           (*h0)[static_cast<size_t>(d)], (*c0)[static_cast<size_t>(d)]));
  }
  rnn_outputs(i, s, runs, layout);
}

// Y [steps, dirs, hidden], Y_h and Y_c [dirs, hidden] per sample, where read.
void Importer::rnn_outputs(int i, const RnnSpec& s, const std::vector<RnnRun>& runs,
                           int64_t layout) {
  const auto& n = g_.node(i);
  auto name = [&](const std::string& what) { return unique_id(s.id + what, s.id + what); };
  auto used = [&](int k) {
    if (k >= n.output_size() || n.output(k).empty()) return false;
    const auto c = consumers_.find(n.output(k));
    bool output = false;
    for (const auto& o : g_.output()) output = output || o.name() == n.output(k);
    return output || (c != consumers_.end() && !c->second.empty());
  };
  auto stack = [&](const std::vector<TensorRef>& xs, int64_t axis, const std::string& what) {
    return xs.size() == 1 ? xs[0] : b_.concat(name(what), xs, axis);
  };
  const bool several = runs.size() > 1;
  if (used(0)) {
    std::vector<TensorRef> per_dir;
    for (size_t d = 0; d < runs.size(); ++d) {
      const std::string tag = "_y" + (several ? std::to_string(d) : std::string());
      const TensorRef cols = stack(runs[d].h, 1, tag + "_cat");  // [hidden, steps]
      const TensorRef rows = b_.transpose(name(tag + "_t"), cols, {1, 0});
      per_dir.push_back(b_.reshape(name(tag), rows, {s.steps, 1, s.hidden}));
    }
    act_[n.output(0)] = stack(per_dir, 1, "_y");
    layouts_[n.output(0)] = BatchLayout{layout == 0 ? 2 : 0, 1, 1};
  }
  for (int k = 1; k <= (s.lstm ? 2 : 1); ++k) {
    if (!used(k)) continue;
    const std::string tag = k == 1 ? "_y_h" : "_y_c";
    std::vector<TensorRef> rows;
    for (size_t d = 0; d < runs.size(); ++d) {
      const TensorRef& last = k == 1 ? runs[d].last_h : runs[d].last_c;
      rows.push_back(b_.reshape(name(tag + std::to_string(d)), last, {1, s.hidden}));
    }
    act_[n.output(k)] = stack(rows, 0, tag);
    layouts_[n.output(k)] = BatchLayout{layout == 0 ? 1 : 0, 1, 1};
  }
}

// One direction unrolled: its parameters, the input projections of every step, then each step.
Importer::RnnRun Importer::rnn_run(const RnnSpec& s, const RnnDirection& p, int d, int dirs,
                                   bool reverse, const TensorRef& x, std::optional<TensorRef> h,
                                   std::optional<TensorRef> c) {
  const std::string base = s.id + (dirs > 1 ? "_d" + std::to_string(d) : std::string());
  auto name = [&](const std::string& what) { return unique_id(base + what, base + what); };
  const int64_t width = s.gates * s.hidden;
  const std::string proj = name("_x");
  b_.linear(proj, x, width, p.bias);  // [steps, gates * hidden]
  take_block(proj, "weight", p.w);
  if (p.bias) take_block(proj, "bias", p.wb);
  const TensorRef xt_all = b_.transpose(name("_xt"), ref(proj), {1, 0});
  const std::string r_id = name("_r");
  const TensorRef r = b_.broadcast_param(r_id, x, {width, s.hidden});
  take_block(r_id, "value", p.r);
  std::optional<TensorRef> rb;
  if (p.bias) {
    const std::string rb_id = name("_rb");
    rb = b_.broadcast_param(rb_id, x, {width, 1});
    take_block(rb_id, "value", p.rb);
  }
  std::optional<TensorRef> r_h;  // GRU without linear_before_reset: R's rows of the new gate
  RnnRun run;
  for (int64_t k = 0; k < s.steps; ++k) {
    const int64_t t = reverse ? s.steps - 1 - k : k;
    const std::string tag = "_t" + std::to_string(t);
    auto step = [&](const std::string& what) { return name(tag + what); };
    auto gate = [&](const TensorRef& v, int g, const std::string& what) {
      const int64_t at = p.gate_at[static_cast<size_t>(g)] * s.hidden;
      return b_.slice(step(what), v, 0, at, at + s.hidden);
    };
    auto sum = [&](const std::vector<TensorRef>& xs, const std::string& what) {
      return xs.size() == 1 ? xs[0] : b_.add(step(what), xs);
    };
    const TensorRef xt = b_.slice(step("_in"), xt_all, 1, t, t + 1);  // [gates * hidden, 1]
    std::vector<TensorRef> terms = {xt};
    if (h) terms.push_back(b_.matmul(step("_rh"), r, *h));
    if (rb) terms.push_back(*rb);
    const TensorRef a = sum(terms, "_a");
    if (s.lstm) {  // ONNX's gate order: i o f c
      const TensorRef in = b_.sigmoid(step("_i"), gate(a, 0, "_ai"));
      const TensorRef out = b_.sigmoid(step("_o"), gate(a, 1, "_ao"));
      const TensorRef forget = b_.sigmoid(step("_f"), gate(a, 2, "_af"));
      const TensorRef cell = b_.tanh(step("_g"), gate(a, 3, "_ag"));
      const TensorRef fresh = b_.mul(step("_ig"), in, cell);
      c = c ? b_.add(step("_c"), {b_.mul(step("_fc"), forget, *c), fresh}) : fresh;
      h = b_.mul(step("_h"), out, b_.tanh(step("_tc"), *c));
    } else {  // z r h
      const TensorRef z = b_.sigmoid(step("_z"), gate(a, 0, "_az"));
      const TensorRef reset = b_.sigmoid(step("_r"), gate(a, 1, "_ar"));
      std::vector<TensorRef> pre = {gate(xt, 2, "_xn")};
      if (s.linear_before_reset) {  // r * (R_h h + Rb_h)
        std::vector<TensorRef> inner;
        if (h) inner.push_back(gate(terms[1], 2, "_rhn"));
        if (rb) inner.push_back(gate(*rb, 2, "_rbn"));
        if (!inner.empty()) pre.push_back(b_.mul(step("_rn"), reset, sum(inner, "_hn")));
      } else {  // R_h (r * h) + Rb_h
        if (h && !r_h) {
          const int64_t at = p.gate_at[2] * s.hidden;
          r_h = b_.slice(name("_r_h"), r, 0, at, at + s.hidden);
        }
        if (h) pre.push_back(b_.matmul(step("_rn"), *r_h, b_.mul(step("_rh_"), reset, *h)));
        if (rb) pre.push_back(gate(*rb, 2, "_rbn"));
      }
      const TensorRef fresh = b_.tanh(step("_n"), sum(pre, "_pn"));
      // (1 - z) n + z h = n + z (h - n); n - z n from a zero state.
      h = h ? b_.add(step("_h"),
                     {fresh, b_.mul(step("_zd"), z, b_.binary(step("_d"), *h, fresh, "sub"))})
            : b_.binary(step("_h"), fresh, b_.mul(step("_zn"), z, fresh), "sub");
    }
    run.h.push_back(*h);
  }
  if (reverse) std::reverse(run.h.begin(), run.h.end());  // in time order
  run.last_h = *h;
  if (c) run.last_c = *c;
  return run;
}

}  // namespace gp::model::onnx_detail
