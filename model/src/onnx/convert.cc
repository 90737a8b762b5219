// One ONNX node -> catalogue operators. ONNX axes count the batch (axis 0); GraphPipe's are per
// sample, so an ONNX axis k > 0 is k - 1 and an operation on the batch axis has no mapping.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "gp/model/onnx_file.h"
#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

// The mapped ONNX types with the number of inputs each needs at least.
const std::map<std::string, int>& mapped_inputs() {
  static const std::map<std::string, int> kMapped = {{"Identity", 1},
                                                     {"Dropout", 1},
                                                     {"Relu", 1},
                                                     {"Gelu", 1},
                                                     {"Softmax", 1},
                                                     {"LayerNormalization", 2},
                                                     {"LogSoftmax", 1},
                                                     {"ConvTranspose", 2},
                                                     {"Resize", 1},
                                                     {"Gemm", 2},
                                                     {"MatMul", 2},
                                                     {"Add", 2},
                                                     {"Mul", 2},
                                                     {"Div", 2},
                                                     {"Concat", 1},
                                                     {"Slice", 3},
                                                     {"Split", 1},
                                                     {"SplitToSequence", 1},
                                                     {"SequenceAt", 2},
                                                     {"Gather", 2},
                                                     {"GatherND", 2},
                                                     {"Transpose", 1},
                                                     {"Reshape", 1},
                                                     {"Flatten", 1},
                                                     {"Squeeze", 1},
                                                     {"Unsqueeze", 1},
                                                     {"Conv", 2},
                                                     {"MaxPool", 1},
                                                     {"AveragePool", 1},
                                                     {"GlobalAveragePool", 1},
                                                     {"GlobalMaxPool", 1},
                                                     {"BatchNormalization", 3},
                                                     {"Sigmoid", 1},
                                                     {"Tanh", 1},
                                                     {"Clip", 1},
                                                     {"Pad", 1},
                                                     {"ReduceSum", 1},
                                                     {"ReduceMean", 1},
                                                     {"Expand", 2},
                                                     {"GRU", 3},
                                                     {"LSTM", 3},
                                                     {"Einsum", 2},
                                                     {"InstanceNormalization", 3},
                                                     {"ScatterND", 3},
                                                     {"ScatterElements", 3}};
  return kMapped;
}

// The types general_ops.cc maps (onto unary, binary, compare, where and reduce) with the number
// of inputs each needs at least; 0 for other types.
int general_min_inputs(const std::string& t) {
  static const std::set<std::string> kOne = {
      "Max",      "Min",  "Neg",   "Exp",         "Log",      "Sqrt", "Reciprocal",
      "Abs",      "Erf",  "Sin",   "Cos",         "Softplus", "Not",  "ReduceMax",
      "ReduceL2", "Cast", "IsNaN", "HardSigmoid", "HardSwish"};
  static const std::set<std::string> kTwo = {"CastLike", "Sub",         "Pow",     "Equal",
                                             "Less",     "LessOrEqual", "Greater", "GreaterOrEqual",
                                             "And",      "Or",          "Xor"};
  return t == "Where" ? 3 : kTwo.count(t) ? 2 : kOne.count(t) ? 1 : 0;
}

}  // namespace

bool mapped_type(const std::string& t) {
  return mapped_inputs().count(t) > 0 || general_min_inputs(t) > 0;
}

int min_inputs(const std::string& t) {
  const auto it = mapped_inputs().find(t);
  return it == mapped_inputs().end() ? general_min_inputs(t) : it->second;
}

// Types that map element by element: they also take a tensor without the batch axis.
bool elementwise_type(const std::string& t) {
  static const std::set<std::string> kElementwise = {
      "Identity",  "Dropout",     "Relu",     "Sigmoid",
      "Tanh",      "Gelu",        "Add",      "Sub",
      "Mul",       "Div",         "Pow",      "Max",
      "Min",       "Neg",         "Exp",      "Log",
      "Sqrt",      "Reciprocal",  "Abs",      "Erf",
      "Sin",       "Cos",         "Softplus", "Equal",
      "Less",      "LessOrEqual", "Greater",  "GreaterOrEqual",
      "Not",       "And",         "Or",       "Xor",
      "Where",     "Cast",        "IsNaN",    "HardSigmoid",
      "HardSwish", "CastLike"};
  return kElementwise.count(t) > 0;
}

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
  for (const auto& input : n.input()) {
    if (empty_.count(input) && t != "Concat") {
      return refuse(i, "reads '" + input +
                           "', an empty slice (no elements): only a Concat, which drops it, may "
                           "read one");
    }
  }
  // (They read X and write Y with the batch where their layout attribute has it.)
  if (t == "LSTM" || t == "GRU") return recurrent(i, id);
  // (Slice assignment: its data and updates may have their batch at different axes.)
  if ((t == "ScatterND" || t == "ScatterElements") &&
      (act_.count(n.input(0)) || act_.count(n.input(2)))) {
    return scatter_nd(i, id);
  }
  // Inputs whose batch is not first (batch_layout.cc) that this op cannot take.
  if (const std::string why = layout_refusal(i); !why.empty()) return refuse(i, why);
  // A value computed from the batch size that did not fold per sample (Swin's window mask
  // expanded, then viewed with the windows folded into the batch) may be one laid out per batch.
  const auto any_input = [&](auto&& pred) {
    return std::any_of(n.input().begin(), n.input().end(), pred);
  };
  if (any_input([&](const std::string& in) { return sample_consts_.count(in) > 0; }) &&
      !any_input([&](const std::string& in) { return act_.count(in) > 0 || param_like(in); })) {
    return laid_constant(i, id);
  }
  if (const std::string why = sample_const_refusal(i); !why.empty()) return refuse(i, why);
  if (fused != fused_.end()) return emit_fused(i, fused->second);
  // (Nodes without an output or with too few inputs were refused before any conversion.)
  // A trained weight with its elements moved (weight_maps.cc) becomes a tensor here, for the
  // element-wise ops that take it.
  // (CastLike reads only the type of its input 1.)
  const int read = t == "CastLike" ? 1 : n.input_size();
  for (int k = 0; k < read; ++k) {
    const std::string& input = n.input(k);
    const auto map = weight_maps_.find(input);
    if (map == weight_maps_.end() || act_.count(input)) continue;
    if (!elementwise_type(t)) {
      // A legacy export's constant folding writes what it computed from weights as initializers
      // of its own (onnx::*): a copy, which training would not tie to the weights it came from.
      const bool exporter_made = map->second.source.rfind("onnx::", 0) == 0;
      return refuse(i, "reads '" + input + "', the trained weight '" + map->second.source +
                           "' with its elements moved (Reshape, Transpose, Gather); only "
                           "element-wise ops take such a tensor" +
                           (exporter_made ? std::string("; '") + map->second.source +
                                                "' is no weight of the model but the exporter's "
                                                "constant folding of some: export with "
                                                "do_constant_folding=False"
                                          : std::string()));
    }
    if (!materialize_weight_map(i, input)) return;
    // As for a weight added as it is (bias_add): a legacy export does not say which
    // initializers are buffers (BART's final_logits_bias, cast before it is added).
    if (!dynamo_metadata_ && (t == "Add" || t == "Sub") && options_.warnings != nullptr) {
      const std::string& source = map->second.source;
      options_.warnings->push_back(where(i) + ": initializer '" + source +
                                   "' is added to activations as a learned weight; if it is a "
                                   "registered buffer, import with --freeze " +
                                   source + " to keep it constant");
    }
  }
  // A tensor without the batch axis (an embedding of constant position ids) is the same for
  // every sample: element-wise ops take it, as they take a constant; other ops would read its
  // first axis as the batch.
  bool batched_input = false;
  std::string unbatched;
  for (int k = 0; k < read; ++k) {
    const std::string& input = n.input(k);
    if (unbatched_.count(input)) {
      if (unbatched.empty()) unbatched = input;
    } else if (act_.count(input)) {
      batched_input = true;
    }
  }
  if (!unbatched.empty() && !batched_input && maps_unbatched(n)) return unbatched_op(i, id);
  if (!unbatched.empty() && !elementwise_type(t)) {
    return refuse(i, "reads '" + unbatched +
                         "', which has no batch axis (computed from weights and constants); "
                         "only element-wise ops map on such a tensor");
  }
  using Conversion = void (Importer::*)(int, const std::string&);
  static const std::map<std::string, Conversion> kConversions = {
      {"Shape", &Importer::shape_of},
      {"Size", &Importer::shape_of},
      {"Identity", &Importer::pass_through},
      {"Dropout", &Importer::pass_through},
      {"Relu", &Importer::pointwise},
      {"Gelu", &Importer::pointwise},
      {"Sigmoid", &Importer::pointwise},
      {"Tanh", &Importer::pointwise},
      {"Softmax", &Importer::softmax},
      {"LogSoftmax", &Importer::log_softmax},
      {"ConvTranspose", &Importer::conv_transpose},
      {"Resize", &Importer::resize},
      {"LayerNormalization", &Importer::layer_norm},
      {"Gemm", &Importer::gemm},
      {"MatMul", &Importer::matmul},
      {"Einsum", &Importer::einsum},
      {"InstanceNormalization", &Importer::instance_norm},
      {"Add", &Importer::add},
      {"Clip", &Importer::clip},
      {"Pad", &Importer::pad},
      {"ReduceSum", &Importer::reduce},
      {"ReduceMean", &Importer::reduce},
      {"Mul", &Importer::scale},
      {"Div", &Importer::scale},
      {"ReduceMax", &Importer::general},
      {"ReduceL2", &Importer::general},
      {"Concat", &Importer::concat},
      {"Slice", &Importer::slice},
      {"Expand", &Importer::expand},
      {"Tile", &Importer::tile},
      {"CumSum", &Importer::cumsum},
      {"ArgMax", &Importer::argmax},
      {"ArgMin", &Importer::argmax},
      {"Split", &Importer::split},
      {"SplitToSequence", &Importer::split_to_sequence},
      {"SequenceAt", &Importer::sequence_at},
      {"Gather", &Importer::gather},
      {"GatherND", &Importer::gather_nd},
      {"GatherElements", &Importer::gather_elements},
      {"Transpose", &Importer::transpose},
      {"Reshape", &Importer::reshape},
      {"Flatten", &Importer::reshape},
      {"Squeeze", &Importer::reshape},
      {"Unsqueeze", &Importer::reshape},
      {"Conv", &Importer::conv},
      {"MaxPool", &Importer::pool},
      {"AveragePool", &Importer::pool},
      {"GlobalAveragePool", &Importer::pool},
      {"GlobalMaxPool", &Importer::pool},
      {"BatchNormalization", &Importer::batch_norm},
      {"Loop", &Importer::loop}};
  const auto conversion = kConversions.find(t);
  if (conversion != kConversions.end()) {
    (this->*conversion->second)(i, id);
  } else if (elementwise_type(t)) {
    general(i, id);
  } else if (t.rfind("Random", 0) == 0 || t == "Bernoulli" || t == "Multinomial") {
    return refuse(i,
                  "draws random numbers (stochastic depth or dropout computed in training "
                  "mode): GraphPipe trains deterministically and passes Dropout through; export "
                  "with the drop probability 0 (torchvision's stochastic_depth_prob, timm's "
                  "drop_path_rate)");
  } else {
    return refuse(i, "no GraphPipe operator for this type");
  }
  // Element-wise ops of tensors without the batch axis make another one.
  if (!unbatched.empty() && !batched_input && act_.count(n.output(0))) {
    unbatched_.insert(n.output(0));
  }
}

void Importer::shape_of(int i, const std::string& /*id*/) {
  refuse(i, "the shape of '" + g_.node(i).input(0) + "' is not known");
}

void Importer::pass_through(int i, const std::string& /*id*/) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  act_[n.output(0)] = *x;
  if (masks_.count(n.input(0))) masks_.insert(n.output(0));
}

void Importer::pointwise(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const std::string& t = n.op_type();
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  auto& out = act_[n.output(0)];
  if (t == "Relu") out = b_.relu(id, *x);
  if (t == "Sigmoid") out = b_.sigmoid(id, *x);
  if (t == "Tanh") out = b_.tanh(id, *x);
  if (t == "Gelu") out = b_.gelu(id, *x, attr_s(n, "approximate", "none") != "tanh");
}

std::optional<int64_t> Importer::feature_axis(int i, int64_t axis) {
  const auto& n = g_.node(i);
  const auto rank = rank_of(n.input(0));
  const auto a = sample_axis(n.input(0), axis);
  if (!rank) {
    refuse(i, "the rank of its input '" + n.input(0) +
                  "' is unknown (no shape information), so axis " + std::to_string(axis) +
                  " cannot be placed");
    return std::nullopt;
  }
  if (*rank == 1) {
    refuse(i, "its input '" + n.input(0) + "' is [batch]: axis " + std::to_string(axis) +
                  " is the batch axis");
    return std::nullopt;
  }
  if (!a) {
    refuse(i, "axis = " + std::to_string(axis) + " of a tensor of rank " + std::to_string(*rank) +
                  " is the batch axis or out of range");
    return std::nullopt;
  }
  return a;
}

int64_t Importer::per_sample_rank(const std::string& name) const {
  return sample_rank(name).value_or(*rank_of(name) - 1);
}

std::optional<int64_t> Importer::softmax_axis(int i) {
  const auto& n = g_.node(i);
  // Before opset 13 (Log)Softmax defaults to axis 1 and flattens from there: the last axis only
  // when that is axis 1 of a 2-D tensor.
  const bool coerced = opset_ > 0 && opset_ < 13;
  const int64_t axis = attr_i(n, "axis", coerced ? 1 : -1);
  const auto a = feature_axis(i, axis);
  if (!a) return std::nullopt;
  const int64_t rank = per_sample_rank(n.input(0));
  if (coerced && *a != rank - 1) {
    refuse(i, "axis = " + std::to_string(axis) + " of a tensor of rank " +
                  std::to_string(rank + 1) + " (before opset 13 " + n.op_type() +
                  " flattens the axes from there: only the last axis maps)");
    return std::nullopt;
  }
  return a;
}

void Importer::softmax(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  const auto a = softmax_axis(i);
  if (!a) return;
  const int64_t rank = per_sample_rank(n.input(0));
  if (*a == rank - 1) {
    act_[n.output(0)] = b_.softmax(id, *x);
    return;
  }
  // The catalogue's softmax takes the last axis: move the axis there and back.
  std::vector<int64_t> perm, back(static_cast<size_t>(rank));
  for (int64_t k = 0; k < rank; ++k) {
    if (k != *a) perm.push_back(k);
  }
  perm.push_back(*a);
  for (int64_t k = 0; k < rank; ++k) back[static_cast<size_t>(perm[static_cast<size_t>(k)])] = k;
  const TensorRef last = b_.transpose(unique_id(id + ".to_last", id), *x, perm);
  act_[n.output(0)] = b_.transpose(unique_id(id + ".back", id), b_.softmax(id, last), back);
}

void Importer::log_softmax(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  const auto a = softmax_axis(i);
  if (!a) return;
  // x - max - log(sum(exp(x - max))), as torch computes it: a softmax followed by a log would
  // lose the small probabilities (log of an underflowed 0 is -inf).
  auto part = [&](const std::string& what) { return unique_id(id + "." + what, id); };
  const TensorRef max = b_.reduce_axes(part("max"), *x, {*a}, "max", true);
  const TensorRef shifted = b_.binary(part("shift"), *x, max, "sub");
  const TensorRef sum =
      b_.reduce_axes(part("sum"), b_.unary(part("exp"), shifted, "exp"), {*a}, "sum", true);
  act_[n.output(0)] = b_.binary(id, shifted, b_.unary(part("log"), sum, "log"), "sub");
}

// Whether node n computes on integers held as activations (ids, or what arithmetic made of
// them): the general element-wise ops take it, casting the ids and tracking integer results.
bool Importer::integer_arithmetic(const onnx::NodeProto& n) const {
  return std::any_of(n.input().begin(), n.input().end(), [this](const std::string& in) {
    return act_.count(in) &&
           (int_valued_.count(in) || dtype_of(in) != graphpipe::v1::DATA_TYPE_FLOAT32);
  });
}

void Importer::add(int i, const std::string& id) {
  const auto& n = g_.node(i);
  if (integer_arithmetic(n)) return general(i, id);
  // Two activations of one shape (residuals) and a learned bias over the trailing axes keep
  // their own ops; anything else broadcasts in a general binary add.
  auto x = activation(n.input(0)), y = activation(n.input(1));
  const bool aligned = rank_of(n.input(0)) == rank_of(n.input(1)) || unbatched_.count(n.input(0)) ||
                       unbatched_.count(n.input(1));
  const bool floats = dtype_of(n.input(0)) == graphpipe::v1::DATA_TYPE_FLOAT32 &&
                      dtype_of(n.input(1)) == graphpipe::v1::DATA_TYPE_FLOAT32;
  if (x && y && aligned && floats && sample_shape(n.input(0)) &&
      sample_shape(n.input(0)) == sample_shape(n.input(1))) {
    act_[n.output(0)] = b_.add(id, {*x, *y});
    return;
  }
  for (int k = 0; k < 2; ++k) {
    auto xk = activation(n.input(k));
    if (xk && !unbatched_.count(n.input(k)) && bias_fits(n.input(k), n.input(1 - k))) {
      return bias_add(i, id, *xk, n.input(1 - k));
    }
  }
  general(i, id);
}

void Importer::concat(int i, const std::string& id) {
  const auto& n = g_.node(i);
  std::vector<TensorRef> xs;
  for (int k = 0; k < n.input_size(); ++k) {
    if (empty_.count(n.input(k))) continue;  // an empty slice adds nothing
    auto x = activation(n.input(k));
    if (!x && static_batch_ > 0 && is_weight(n.input(k)) && !weight_dims(n.input(k)).empty() &&
        weight_dims(n.input(k))[0] == static_batch_) {
      return refuse(i, "input " + std::to_string(k) + " '" + n.input(k) +
                           "' is a weight with the traced batch baked in (torch's optimiser "
                           "folded an expand of a parameter over the static batch); export "
                           "with a dynamic batch, or with optimize=False");
    }
    if (!x) return refuse(i, "input " + std::to_string(k) + " is not an activation");
    xs.push_back(*x);
  }
  // One tensor (the rest empty, or a legacy export's one-input Concat of a cache torch starts
  // empty) is itself, whatever the axis.
  if (xs.empty()) {
    empty_.insert(n.output(0));
    return;
  }
  if (xs.size() == 1) {
    act_[n.output(0)] = xs[0];
    return;
  }
  const auto axis = sample_axis(n.input(0), attr_i(n, "axis", 0));
  if (!axis) return refuse(i, "concatenates along the batch axis (or an axis out of range)");
  act_[n.output(0)] = b_.concat(id, xs, *axis);
}

void Importer::loop(int i, const std::string& /*id*/) {
  const auto helpers = loop_helpers_.find(i);
  const std::string with = helpers == loop_helpers_.end() || helpers->second == 0
                               ? ""
                               : "; refused with it: the " + std::to_string(helpers->second) +
                                     " node(s) that only compute its inputs or pass on its result";
  if (const auto why = ragged_refusals_.find(i); why != ragged_refusals_.end()) {
    return refuse(i, why->second + with);
  }
  refuse(i,
         "no GraphPipe operator for this loop (torch exports nn.EmbeddingBag as a Loop over the "
         "bags; it maps when the ids are one [batch, bag] input, i.e. fixed-size bags in sum or "
         "mean mode; bags of varying length given by an offsets input do not, because every "
         "GraphPipe input is per sample: pad the bags to one length, or use nn.Embedding "
         "followed by .sum(dim=1))" +
             with);
}

void Importer::emit_fused(int i, const Fused& f) {
  auto x = activation(f.x);
  if (!x) return refuse(i, "the input of its pattern is not an activation");
  const std::string& id = current_id_;
  // GELU and a layer norm act on the last axis alone: over a tensor without the batch axis (an
  // MLP over a constant table) they make another one. The other patterns read a batch.
  const bool unbatched = unbatched_.count(f.x) > 0;
  if (unbatched && f.kind != Fused::Kind::kGelu && f.kind != Fused::Kind::kLayerNorm) {
    return refuse(i, "the input of its pattern, '" + f.x +
                         "', has no batch axis (computed from weights and constants)");
  }
  if (unbatched) unbatched_.insert(g_.node(i).output(0));
  if (f.kind == Fused::Kind::kGelu) {
    act_[g_.node(i).output(0)] = b_.gelu(id, *x, f.exact);
    return;
  }
  if (f.kind == Fused::Kind::kAttention) return emit_attention(i, f, *x);
  if (f.kind == Fused::Kind::kRowPick) return emit_row_pick(i, f, *x);
  if (f.kind == Fused::Kind::kEmbeddingBag) {
    const auto dims = weight_dims(f.table);  // match_embedding_bag_loop checked [rows, dim]
    act_[g_.node(i).output(0)] = b_.embedding_bag(id, *x, dims[0], dims[1]);
    take(id, "weight", f.table);
    if (f.mean) set_attr(op_by_id(id), "mode", std::string_view("mean"));
    if (f.padded) set_attr(op_by_id(id), "padding_idx", int64_t{-1});
    return;
  }
  const auto shape = sample_shape(f.x);
  const int64_t width = shape && !shape->empty() ? shape->back() : product(weight_dims(f.gamma));
  if (auto y = emit_layer_norm(i, id, *x, f.epsilon, f.gamma, f.beta, width)) {
    act_[g_.node(i).output(0)] = *y;
  }
}

// The packed input projection x W_in + b_in (W_in [E, 3E], columns q, k, v) and the output
// projection become multi_head_attention's q/k/v/out weights ([out, in]) and biases.
void Importer::emit_attention(int i, const Fused& f, const TensorRef& x) {
  const std::string& id = current_id_;
  const auto shape = sample_shape(f.x);
  if (!shape || shape->size() != 2) {
    return refuse(i, "multi-head attention of an input that is not [batch, sequence, embedding]");
  }
  const int64_t e = (*shape)[1];
  act_[g_.node(i).output(0)] = b_.attention(id, x, f.heads);
  using PS = graphpipe::v1::ParamSource;
  const char* weights[] = {"q_weight", "k_weight", "v_weight"};
  const char* biases[] = {"q_bias", "k_bias", "v_bias"};
  // No input-projection bias: nn.MultiheadAttention(bias=False), which has no output bias either
  // (the matcher refuses an output bias without an input one).
  const bool bias = !f.in_bias.empty();
  if (!bias) set_attr(op_by_id(id), "bias", int64_t{0});
  for (int64_t p = 0; p < 3; ++p) {
    take(id, weights[p], f.in_weight, PS::LAYOUT_COLUMNS_TRANSPOSED, p * e, e * e);
    if (bias) take(id, biases[p], f.in_bias, PS::LAYOUT_RANGE, p * e, e);
  }
  take(id, "out_weight", f.out_weight, f.out_trans_b ? PS::LAYOUT_COPY : PS::LAYOUT_TRANSPOSE);
  if (!f.out_bias.empty()) {
    take(id, "out_bias", f.out_bias);
  } else if (bias) {
    // torch 2.x's optimiser drops a Gemm's all-zero bias (torch initialises out_proj.bias to
    // zero): it trains from zero here, as in torch, and export writes it back.
    train_dropped_bias("multi-head attention '" + id + "' (its output projection)", id, "out_bias",
                       e);
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
  // torch 2.x's unoptimised exports give a bias-free conv a computed all-zero bias.
  const bool zero_bias = [&] {
    const auto v = n.input_size() > 2 && !is_weight(n.input(2)) ? folded(n.input(2)) : std::nullopt;
    return v && !v->empty() && std::all_of(v->begin(), v->end(), [](double e) { return e == 0; });
  }();
  const bool bias = n.input_size() > 2 && !n.input(2).empty() && !zero_bias;
  // torch 2.x's optimiser drops a linear's all-zero bias (a fresh model's): trained from zero.
  const bool dropped = !bias && dropped_bias(i);
  if (bias) {  // C must be a bias of the output width, not an activation (torch.addmm) or matrix
    const auto c = is_weight(n.input(2)) ? weight_dims(n.input(2)) : std::vector<int64_t>{};
    const bool row = (c.size() == 1 && c[0] == out_features) ||
                     (c.size() == 2 && c[0] == 1 && c[1] == out_features);
    if (!row) return refuse(i, "C is not a bias weight of the output width");
  }
  act_[n.output(0)] = b_.linear(id, *a, out_features, bias || dropped);
  // GraphPipe's weight is [out, in]: ONNX's B as is with transB, transposed without.
  take(id, "weight", n.input(1),
       trans_b ? graphpipe::v1::ParamSource::LAYOUT_COPY
               : graphpipe::v1::ParamSource::LAYOUT_TRANSPOSE);
  if (bias) {
    take(id, "bias", n.input(2));
  } else if (dropped) {
    train_dropped_bias(where(i), id, "bias", out_features);
  }
}

// With a weight: a linear (plus a following Add of a bias of the output width). Of two
// activations (attention scores and context): a batched matmul over equal leading dimensions.
void Importer::matmul(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto a = activation(n.input(0));
  // A constant table times a trained weight (Swin V2's coordinates through its position-bias
  // MLP): the table, the same for every sample, has no batch axis, nor has the product.
  bool unbatched = a && unbatched_.count(n.input(0));
  if (!a && is_weight(n.input(1)) && !activation(n.input(1))) {
    if (param_like(n.input(0))) {
      return refuse(i, "its first input '" + n.input(0) +
                           "' is a trained weight too (a product of two weights)" +
                           (dynamo_metadata_ ? std::string()
                                             : "; if it is a registered buffer, import with "
                                               "--freeze " +
                                                   n.input(0)));
    }
    const auto table = const_tensor(n.input(0));
    const auto anchor = anchor_for(n.output(0));
    if (table && anchor && !table->dims.empty() && !has_nan(table->values)) {
      const std::vector<float> values(table->values.begin(), table->values.end());
      a = b_.constant(unique_id(id + ".table", id), *anchor, table->dims, values);
      unbatched = true;
    }
  }
  if (!a) return refuse(i, "its first input is not an activation");
  if (auto b = activation(n.input(1))) {
    const auto sa = sample_shape(n.input(0)), sb = sample_shape(n.input(1));
    if (sa && sb && (sa->size() != sb->size() || sa->size() < 2)) {
      return refuse(i, "a product of activations " + dims_text(*sa) + " x " + dims_text(*sb) +
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
  take(id, "weight", n.input(1), graphpipe::v1::ParamSource::LAYOUT_TRANSPOSE);
  if (bias) take(id, "bias", bias_name);
  if (unbatched) unbatched_.insert(result);
}

// Mul or Div of an activation by a scalar constant (attention's 1/sqrt(d), for one), a product
// of two activations of one shape, and 1 / x; anything else is a general binary op.
void Importer::scale(int i, const std::string& id) {
  const auto& n = g_.node(i);
  if (n.input_size() != 2) return refuse(i, "expected two inputs");
  if (integer_arithmetic(n)) return general(i, id);
  const bool div = n.op_type() == "Div";
  auto x = activation(n.input(0));
  auto c = scalar(n.input(1));
  if (!div && !(x && c)) {
    x = activation(n.input(1));
    c = scalar(n.input(0));
  }
  if (x && c) {
    if (div && *c == 0) return refuse(i, "divides by zero");
    act_[n.output(0)] = b_.scale(id, *x, div ? 1.0 / *c : *c);
    return;
  }
  auto a = activation(n.input(0)), b = activation(n.input(1));
  if (!div && a && b && rank_of(n.input(0)) == rank_of(n.input(1)) &&
      unbatched_.count(n.input(0)) == unbatched_.count(n.input(1))) {
    const auto sa = sample_shape(n.input(0)), sb = sample_shape(n.input(1));
    if (!sa || !sb || *sa == *sb) {
      act_[n.output(0)] = b_.mul(id, *a, *b);
      return;
    }
  }
  if (div && b && !a && scalar(n.input(0)) == 1.0) {
    act_[n.output(0)] = b_.unary(id, *b, "reciprocal");
    return;
  }
  general(i, id);
}

constexpr const char* kSliceInputs[] = {"starts", "ends", "axes", "steps"};

void Importer::slice(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  // A slice of a trained weight that fold_weight_slice could not make a parameter of its own.
  if (const auto why = slice_refusals_.find(n.output(0)); !x && why != slice_refusals_.end()) {
    fold_errors_.erase(n.output(0));  // ("computes from a trained weight": said here)
    return refuse(i, "slices trained weight '" + n.input(0) +
                         "', but not into a parameter of its own (one contiguous block of "
                         "the weight, by constant bounds): " +
                         why->second);
  }
  if (!x || n.input_size() < 3) return refuse(i, "expected data, starts and ends");
  // starts, ends, axes and steps: constant lists of one length (ONNX's defaults: the leading
  // axes, step 1).
  std::vector<std::vector<double>> lists(4);
  for (int k = 1; k < 5; ++k) {
    if (k >= n.input_size() || n.input(k).empty()) continue;
    auto v = folded(n.input(k));
    if (!v || std::any_of(v->begin(), v->end(),
                          [](double e) { return std::isnan(e) || e == kBatchDim; })) {
      return refuse(i, "its " + std::string(kSliceInputs[k - 1]) + " are not constant");
    }
    lists[static_cast<size_t>(k - 1)] = std::move(*v);
  }
  const size_t count = lists[0].size();
  for (size_t k = 1; k < 4; ++k) {
    if (lists[k].empty() && k >= 2) continue;
    if (lists[k].size() != count) {
      return refuse(i, "starts, ends, axes and steps of different lengths");
    }
  }
  if (count == 0) return refuse(i, "no axis to slice");
  if (const auto rank = rank_of(n.input(0))) {  // (ONNX leaves a repeated axis undefined)
    std::set<int64_t> seen;
    for (size_t k = 0; k < count; ++k) {
      int64_t axis = lists[2].empty() ? static_cast<int64_t>(k) : to_index(lists[2][k]);
      if (axis < 0) axis += *rank;
      if (!seen.insert(axis).second) {
        return refuse(i, "axis " + std::to_string(axis) + " is sliced twice");
      }
    }
  }
  // An empty slice (Phi-3's q[..., rotary_dim:] with the rotary dimension the whole head) is no
  // tensor: only a Concat may read it, and drops it.
  if (const auto shape = sample_shape(n.input(0))) {
    for (size_t k = 0; k < count; ++k) {
      const auto a = sample_axis(
          n.input(0), lists[2].empty() ? static_cast<int64_t>(k) : to_index(lists[2][k]));
      const int64_t stride = lists[3].empty() ? 1 : to_index(lists[3][k]);
      if (!a || *a >= static_cast<int64_t>(shape->size()) || stride == 0) continue;
      const auto [s, e] = slice_bounds(lists[0][k], lists[1][k], (*shape)[*a], stride);
      if (stride > 0 ? s >= e : s <= e) {
        empty_.insert(n.output(0));
        return;
      }
    }
  }
  TensorRef out = *x;
  for (size_t k = 0; k < count; ++k) {
    const double axis = lists[2].empty() ? static_cast<double>(k) : lists[2][k];
    const double step = lists[3].empty() ? 1 : lists[3][k];
    const std::string step_id = k + 1 == count ? id : unique_id(id + "." + std::to_string(k), id);
    const auto sliced = slice_axis(i, step_id, out, to_index(axis), lists[0][k], lists[1][k], step);
    if (!sliced) return;
    out = *sliced;
  }
  act_[n.output(0)] = out;
}

// One axis of node i's Slice, of the tensor `x` (node i's input, or its slice on other axes:
// the same dims but this axis): a slice op for step 1, else a gather of the positions stepped
// to (a negative step reverses). Refuses node i (and returns nullopt) where it cannot map.
std::optional<TensorRef> Importer::slice_axis(int i, const std::string& id, const TensorRef& x,
                                              int64_t axis, double start, double end, double step) {
  const auto& n = g_.node(i);
  const auto a = sample_axis(n.input(0), axis);
  // All of the batch (torch.export writes x[:, 0] as x[0:INT64_MAX] along the batch first): a
  // view of the whole tensor.
  const auto rank = rank_of(n.input(0));
  const auto at = batch_axis(n.input(0));
  const bool on_batch = rank && at && (axis == *at || axis == *at - *rank);
  if (!a && on_batch && start == 0 && end >= 9.2e18 && step == 1) return x;
  if (!a) {
    refuse(i, "slices the batch axis (or an axis out of range)");
    return std::nullopt;
  }
  const auto shape = sample_shape(n.input(0));
  const int64_t size =
      shape && *a < static_cast<int64_t>(shape->size()) ? (*shape)[static_cast<size_t>(*a)] : -1;
  if (size <= 0) {
    refuse(i, "a slice of a tensor of unknown shape");
    return std::nullopt;
  }
  const int64_t stride = to_index(step);
  if (stride == 0) {
    refuse(i, "a step of 0");
    return std::nullopt;
  }
  const auto [s, e] = slice_bounds(start, end, size, stride);
  if (stride == 1) return b_.slice(id, x, *a, s, e);
  std::vector<int64_t> positions;
  for (int64_t p = s; stride > 0 ? p < e : p > e; p += stride) positions.push_back(p);
  if (positions.empty()) {
    refuse(i, "an empty slice");
    return std::nullopt;
  }
  return b_.gather(id, x, *a, std::move(positions));
}

// Expand of a weight over the batch (ViT's class token, learned queries: cls.expand(B, -1, -1))
// -> broadcast_param, whose input is an activation beside it (it only sets the batch).
void Importer::expand(int i, const std::string& id) {
  const auto& n = g_.node(i);
  if (!param_like(n.input(0)) && const_tensor(n.input(0))) return expand_constant(i, id);
  if (auto x = activation(n.input(0)); x && n.input_size() >= 2) {
    return expand_activation(i, id, *x);
  }
  if (n.input_size() < 2 || !is_weight(n.input(0))) {
    return refuse(i, "expands a value that is neither an activation nor a weight");
  }
  const auto target = folded(n.input(1));
  if (!target || target->empty()) return refuse(i, "the target shape is not constant");
  const auto dims = weight_dims(n.input(0));
  if (dims.size() > target->size()) return refuse(i, "the target has fewer dims than the weight");
  // Numpy broadcasting, aligned right; the first dim must become the batch, the others the
  // weight's own (a weight broadcast inside a sample would be a different parameter).
  std::vector<int64_t> sample;
  const size_t lead = target->size() - dims.size();
  for (size_t k = 0; k < target->size(); ++k) {
    const double t = (*target)[k];
    const int64_t d = k < lead ? 1 : dims[k - lead];
    if (k == 0) {
      const bool batch =
          t == kBatchDim || (static_batch_ > 0 && t == static_cast<double>(static_batch_));
      if (!batch || d != 1) return refuse(i, "the first target dim is not the batch");
      continue;
    }
    if (!(t == 1 || t == static_cast<double>(d) || t == -1)) {
      return refuse(i, "target " + dims_text(dims) + " broadcasts the weight inside a sample");
    }
    sample.push_back(d);
  }
  if (sample.empty()) sample.push_back(1);
  // An activation the consumer also reads (the patch embeddings a class token is concatenated
  // to), else the model's first input: the op runs where that is, and takes no gradient from it.
  const auto anchor = anchor_for(n.output(0));
  if (!anchor) return refuse(i, "no activation to take the batch from");
  act_[n.output(0)] = b_.broadcast_param(id, *anchor, sample);
  take(id, "value", n.input(0));
}

void Importer::expand_activation(int i, const std::string& id, const TensorRef& x) {
  const auto& n = g_.node(i);
  const auto target = folded(n.input(1));
  const auto in = sample_shape(n.input(0));
  const auto at = batch_axis(n.input(0));
  if (!target || target->empty()) return refuse(i, "the target shape is not constant");
  if (!in || !at) return refuse(i, "expands an activation whose batch axis or shape is not known");
  // The batch axis `pos` of the ONNX tensor stands for `folded` per-sample dims (Swin V2's
  // windows folded into the batch); every other ONNX axis is one per-sample axis.
  const BatchLayout l = layout_of(n.input(0));
  // One value per sample ([batch], held as [1] per sample) expanded to [batch]: itself.
  const bool batch_only =
      target->size() == 1 &&
      ((*target)[0] == kBatchDim || (static_batch_ > 0 && (*target)[0] == static_batch_));
  if (batch_only && *in == std::vector<int64_t>{1} && l.batch_first() && rank_of(n.input(0)) == 1) {
    act_[n.output(0)] = x;
    return;
  }
  const auto folded_dims = static_cast<size_t>(l.folded());
  const size_t rank = in->size() + 1 - folded_dims, pos = static_cast<size_t>(*at);
  auto sample_index = [&](size_t k) { return k < pos ? k : k - 1 + folded_dims; };
  // ONNX broadcasting of the input's dims against the target's, aligned right: the target may
  // not add axes before the batch, and its dim at the batch is 1 or the batch itself.
  if (target->size() > rank) {
    return refuse(i, "the target " +
                         dims_text(std::vector<int64_t>(target->begin(), target->end())) +
                         " has more dims than the activation's " + std::to_string(rank) +
                         " (axes before the batch)");
  }
  const size_t from_t = rank - target->size();
  if (from_t <= pos) {
    const double t0 = (*target)[pos - from_t];
    const double traced = static_cast<double>(static_batch_ * l.outer * l.inner);
    const bool batch = t0 == kBatchDim || !(t0 == t0) || t0 == 1 || t0 == -1 ||
                       (static_batch_ > 0 && t0 == traced);
    if (!batch) return refuse(i, "the target's dim at the batch axis is not the batch");
  }
  std::vector<int64_t> out(*in);
  for (size_t k = from_t; k < rank; ++k) {
    if (k == pos) continue;
    const int64_t a = (*in)[sample_index(k)];
    const double t = (*target)[k - from_t];
    if (t == 1 || t == -1 || t == static_cast<double>(a)) continue;
    if (a != 1 || !(t > 1) || t > 1e12) {
      return refuse(i, "the target's dim " + std::to_string(to_index(t)) +
                           " does not broadcast the activation's " + std::to_string(a));
    }
    out[sample_index(k)] = static_cast<int64_t>(t);
  }
  if (out == *in) {
    act_[n.output(0)] = x;  // nothing to broadcast
    return;
  }
  int64_t count = 1;
  for (int64_t d : out) count *= d;
  constexpr int64_t kMaxZeros = int64_t{1} << 24;  // as constant folding's bound
  if (count > kMaxZeros) return refuse(i, "broadcasts to more than 2^24 elements per sample");
  const auto zeros = b_.constant(id + ".zeros", x, out, std::vector<float>(count, 0.0f));
  act_[n.output(0)] = b_.binary(id, x, zeros, "add");
}

// Split -> one slice per used output.
void Importer::split(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (const auto why = slice_refusals_.find(n.output(0)); !x && why != slice_refusals_.end()) {
    return refuse(i, "splits trained weight '" + n.input(0) +
                         "', but not into parameters of their own (contiguous blocks of the "
                         "weight, by constant sizes): " +
                         why->second);
  }
  if (!x) return refuse(i, "its input is not an activation");
  const int64_t onnx_axis = attr_i(n, "axis", 0);
  const auto a = sample_axis(n.input(0), onnx_axis);
  if (!a) return refuse(i, "splits the batch axis (or an axis out of range)");
  const auto shape = sample_shape(n.input(0));
  std::vector<int64_t> sizes = attr_ints(n, "split");
  if (sizes.empty() && n.input_size() > 1 && !n.input(1).empty()) {
    auto v = folded(n.input(1));
    if (!v) return refuse(i, "split sizes are not constant");
    for (double s : *v) sizes.push_back(to_index(s));
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

// SplitToSequence (torch 2.x's unoptimised x.split(C, dim)): the pieces are remembered, and each
// SequenceAt of a constant position becomes the slice of its piece.
void Importer::split_to_sequence(int i, const std::string& /*id*/) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  const auto a = sample_axis(n.input(0), attr_i(n, "axis", 0));
  if (!a) return refuse(i, "splits the batch axis (or an axis out of range)");
  const auto shape = sample_shape(n.input(0));
  if (!shape || *a >= static_cast<int64_t>(shape->size())) {
    return refuse(i, "splits an axis of unknown size");
  }
  const int64_t dim = (*shape)[static_cast<size_t>(*a)];
  Sequence seq{*x, *a, {}, false, *shape};
  std::vector<int64_t> sizes;
  if (n.input_size() > 1 && !n.input(1).empty()) {
    auto v = folded(n.input(1));
    if (!v || v->empty()) return refuse(i, "split sizes are not constant");
    const auto c = consts_.find(n.input(1));
    const bool scalar = v->size() == 1 && (c == consts_.end() || c->second->dims_size() == 0);
    if (scalar) {  // pieces of this size, the last one shorter
      const int64_t piece = to_index((*v)[0]);
      if (piece <= 0) return refuse(i, "a split size of " + std::to_string(piece));
      for (int64_t at = 0; at < dim; at += piece) sizes.push_back(std::min(piece, dim - at));
    } else {
      for (double s : *v) sizes.push_back(to_index(s));
    }
  } else {  // pieces of one, the axis dropped unless keepdims
    sizes.assign(static_cast<size_t>(dim), 1);
    seq.squeeze = attr_i(n, "keepdims", 1) == 0;
  }
  int64_t begin = 0;
  for (int64_t s : sizes) {
    if (s <= 0 || begin + s > dim) return refuse(i, "split sizes do not fit the axis");
    seq.pieces.emplace_back(begin, begin + s);
    begin += s;
  }
  if (begin != dim) return refuse(i, "split sizes do not add up to the axis");
  sequences_[n.output(0)] = std::move(seq);
}

void Importer::sequence_at(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const auto it = sequences_.find(n.input(0));
  if (const auto why = slice_refusals_.find(n.output(0));
      it == sequences_.end() && why != slice_refusals_.end()) {
    return refuse(i,
                  "reads a piece of trained weight split into a sequence, but not as a "
                  "parameter of its own (a contiguous block of the weight, by constant "
                  "sizes): " +
                      why->second);
  }
  if (it == sequences_.end()) return refuse(i, "reads a sequence that is not a SplitToSequence");
  const Sequence& seq = it->second;
  const auto k = scalar(n.input(1));
  if (!k) return refuse(i, "the position is not a constant");
  int64_t pos = to_index(*k);
  const auto count = static_cast<int64_t>(seq.pieces.size());
  if (pos < 0) pos += count;
  if (pos < 0 || pos >= count) return refuse(i, "position out of range");
  const auto [begin, end] = seq.pieces[static_cast<size_t>(pos)];
  TensorRef piece = b_.slice(id, seq.x, seq.axis, begin, end);
  if (seq.squeeze) {
    std::vector<int64_t> shape = seq.shape;
    shape.erase(shape.begin() + seq.axis);
    if (shape.empty()) shape.push_back(1);
    piece = b_.reshape(unique_id(id + ".squeeze", id), piece, shape);
  }
  act_[n.output(0)] = piece;
}

// Gather: a lookup in a weight table (an embedding, or an embedding bag when a ReduceSum or
// ReduceMean over the bag follows), or one constant position of an activation (x[:, k]).
void Importer::gather(int i, const std::string& id) {
  const auto& n = g_.node(i);
  if (auto x = activation(n.input(0))) {
    const auto k = scalar(n.input(1));
    if (!k) {
      if (strided_view(i, id, *x)) return;
      if (auto t = const_tensor(n.input(1)); t && !t->values.empty()) {
        return gather_indices(i, id, *x, *t);
      }
    }
    const auto a = sample_axis(n.input(0), attr_i(n, "axis", 0));
    const auto shape = sample_shape(n.input(0));
    if (!k || !a || !shape) {
      return refuse(i,
                    "only a lookup in a weight table, or one constant index of a per-sample "
                    "axis, maps");
    }
    const int64_t size = (*shape)[static_cast<size_t>(*a)];
    int64_t pos = to_index(*k);
    if (pos < 0) pos += size;
    if (pos < 0 || pos >= size) return refuse(i, "index out of range");
    const TensorRef picked = b_.slice(id, *x, *a, pos, pos + 1);
    // A 0-D index (x[:, k]) drops the axis; a one-element 1-D index keeps it with size 1.
    const auto c = consts_.find(n.input(1));
    // (ids[:, f] of [batch, fields] ids: the sample's one id, per-sample [1] as a [batch] input.)
    if ((c != consts_.end() && c->second->dims_size() > 0) || shape->size() == 1) {
      act_[n.output(0)] = picked;
      // A 0-D index of a [batch, n] tensor leaves [batch] (per-sample [1]), whatever the file's
      // shape information says (a legacy export may have none).
      if (shape->size() == 1 && !(c != consts_.end() && c->second->dims_size() > 0)) {
        shapes_[n.output(0)] = {-1};
      }
      return;
    }
    std::vector<int64_t> dropped = *shape;
    dropped.erase(dropped.begin() + *a);
    act_[n.output(0)] = b_.reshape(unique_id(id + ".reshape", id), picked, dropped);
    return;
  }
  if (is_weight(n.input(0)) && !activation(n.input(1)) && attr_i(n, "axis", 0) == 0 &&
      const_tensor(n.input(1))) {
    return constant_lookup(i, id);
  }
  if (!is_weight(n.input(0)) || !activation(n.input(1)) || attr_i(n, "axis", 0) != 0) {
    return refuse(i, "only a lookup in a weight table maps");
  }
  const auto table = weight_dims(n.input(0));
  if (table.size() != 2) return refuse(i, "a table of rank " + std::to_string(table.size()));
  // Ids computed by element-wise arithmetic are held as float32 (RoBERTa's position ids), exact
  // below 2^24 only.
  const bool computed_ids = dtype_of(n.input(1)) == graphpipe::v1::DATA_TYPE_FLOAT32;
  if (computed_ids && table[0] > (int64_t{1} << 24)) {
    return refuse(i, "its ids '" + n.input(1) +
                         "' are computed by arithmetic, which is exact "
                         "below 2^24 only, and table '" +
                         n.input(0) + "' has " + std::to_string(table[0]) + " rows");
  }
  const int r = sole_consumer(n.output(0));
  if (r >= 0 && only_consumers_in(n.output(0), {r}) && rank_of(n.input(1)) == 2 &&
      (g_.node(r).op_type() == "ReduceSum" || g_.node(r).op_type() == "ReduceMean") &&
      g_.node(r).output_size() == 1) {  // embedding_bag() writes the reducer's output
    const auto axes = axes_of(g_.node(r));
    if (axes && axes->size() == 1 && ((*axes)[0] == 1 || (*axes)[0] == -2) &&
        attr_i(g_.node(r), "keepdims", 1) == 0) {
      if (computed_ids) return refuse(i, "a bag of ids computed by arithmetic (not mapped)");
      return embedding_bag(i, id);
    }
  }
  const auto ids_rank = rank_of(n.input(1));
  if (!ids_rank) return refuse(i, "ids of unknown rank");
  TensorRef ids = *activation(n.input(1));
  if (computed_ids) {
    ids = b_.cast(unique_id(id + ".ids", id), ids, "int64");
  }
  TensorRef out = b_.embedding(id, ids, table[0], table[1]);
  take(id, "weight", n.input(0));
  set_padding_idx(i, id);
  // ONNX ids [batch] are per-sample [1] here: the lookup's [1, dim] is the sample's [dim].
  if (*ids_rank == 1) out = b_.reshape(unique_id(id + ".reshape", id), out, {table[1]});
  act_[n.output(0)] = out;
}

// x[:, idx] with constant indices idx (torch.index_select, DLRM's flattened Z[:, li, lj] in the
// legacy export), whatever the batch layout when idx is a vector.
void Importer::gather_indices(int i, const std::string& id, const TensorRef& x,
                              const EvalTensor& t) {
  const auto& n = g_.node(i);
  const int64_t axis = attr_i(n, "axis", 0);
  const auto a = sample_axis(n.input(0), axis);
  const auto shape = sample_shape(n.input(0));
  if (!a || !shape) {
    return refuse(i, "axis = " + std::to_string(axis) +
                         " is the batch axis or out of range (or the shape is unknown)");
  }
  const int64_t size = (*shape)[static_cast<size_t>(*a)];
  std::vector<int64_t> flat;
  for (double v : t.values) {
    if (!std::isfinite(v)) return refuse(i, "the indices are not constant");
    const int64_t p = to_index(v) < 0 ? to_index(v) + size : to_index(v);
    if (p < 0 || p >= size) {
      return refuse(i, "index " + std::to_string(to_index(v)) + " is out of range for axis " +
                           std::to_string(axis) + " of size " + std::to_string(size));
    }
    flat.push_back(p);
  }
  const TensorRef out = b_.gather(id, x, *a, flat);
  if (t.dims.size() == 1) {
    act_[n.output(0)] = out;
    return;
  }
  // Indices of another rank replace the axis with their dims: the batch moves unless first.
  if (!layout_of(n.input(0)).batch_first()) {
    return refuse(i, "indices of rank " + std::to_string(t.dims.size()) +
                         " into a tensor whose batch is not first");
  }
  std::vector<int64_t> dims = *shape;
  dims.erase(dims.begin() + *a);
  dims.insert(dims.begin() + *a, t.dims.begin(), t.dims.end());
  if (dims.empty()) dims.push_back(1);
  act_[n.output(0)] = b_.reshape(unique_id(id + ".reshape", id), out, dims);
}

// GatherND(x, indices [..., k], batch_dims 0) where x's k leading axes are per sample (its batch
// after them, as DLRM's Z[:, li, lj] in torch's dynamo export, [n, n, batch]): those axes as one
// (a reshape), then the gather op at the row-major flat indices. The trailing axes, the batch
// among them, stay where they are.
void Importer::gather_nd(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const auto x = activation(n.input(0));
  const auto t = const_tensor(n.input(1));
  if (!x || !t || t->dims.empty()) {
    return refuse(i, "only constant indices into an activation map");
  }
  if (const int64_t b = attr_i(n, "batch_dims", 0); b != 0) {
    return refuse(i, "batch_dims = " + std::to_string(b) + ": only 0 maps");
  }
  const int64_t k = t->dims.back();
  const auto shape = sample_shape(n.input(0));
  if (!shape || k < 1 || k > static_cast<int64_t>(shape->size())) {
    return refuse(i, "indices [..., " + std::to_string(k) + "] do not fit its input's shape");
  }
  for (int64_t d = 0; d < k; ++d) {
    if (sample_axis(n.input(0), d) != d) {
      return refuse(i, "the indices reach the batch axis (only per-sample leading axes map)");
    }
  }
  std::vector<int64_t> flat;
  for (size_t at = 0; at < t->values.size(); at += static_cast<size_t>(k)) {
    int64_t row = 0;
    for (int64_t d = 0; d < k; ++d) {
      const int64_t size = (*shape)[static_cast<size_t>(d)];
      const double v = t->values[at + static_cast<size_t>(d)];
      const int64_t p = std::isfinite(v) && to_index(v) < 0 ? to_index(v) + size : to_index(v);
      if (!std::isfinite(v) || p < 0 || p >= size) {
        return refuse(i, "an index of axis " + std::to_string(d) + " is out of range [0, " +
                             std::to_string(size) + ") or not constant");
      }
      row = row * size + p;
    }
    flat.push_back(row);
  }
  std::vector<int64_t> rows{1};
  for (int64_t d = 0; d < k; ++d) rows[0] *= (*shape)[static_cast<size_t>(d)];
  rows.insert(rows.end(), shape->begin() + k, shape->end());
  TensorRef v = *x;
  if (k > 1) v = b_.reshape(unique_id(id + ".rows", id), v, rows);
  TensorRef out = b_.gather(id, v, 0, flat);
  std::vector<int64_t> dims(t->dims.begin(), t->dims.end() - 1);
  dims.insert(dims.end(), shape->begin() + k, shape->end());
  if (dims.empty()) dims.push_back(1);
  // (Indices [P, k] leave [P, trailing...], the gather's own output.)
  if (t->dims.size() != 2) out = b_.reshape(unique_id(id + ".reshape", id), out, dims);
  act_[n.output(0)] = out;
}

// Gather(table, ids [batch, bag]) then ReduceSum/ReduceMean over the bag: an embedding bag.
void Importer::embedding_bag(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto ids = activation(n.input(1));
  const auto table = weight_dims(n.input(0));  // gather() checked it is [rows, dim]
  const int r = sole_consumer(n.output(0));    // and that this reduces the bag axis
  const auto& red = g_.node(r);
  done_[static_cast<size_t>(r)] = true;
  TensorRef out = b_.embedding_bag(id, *ids, table[0], table[1]);
  take(id, "weight", n.input(0));
  if (red.op_type() == "ReduceMean") set_attr(op_by_id(id), "mode", std::string_view("mean"));
  act_[red.output(0)] = out;
}

std::optional<std::vector<int64_t>> Importer::axes_of(const onnx::NodeProto& n) const {
  std::vector<int64_t> axes = attr_ints(n, "axes");
  if (axes.empty() && n.input_size() > 1 && !n.input(1).empty()) {
    auto v = folded(n.input(1));
    if (!v) return std::nullopt;
    for (double a : *v) axes.push_back(static_cast<int64_t>(a));
  }
  return axes;
}

// ReduceSum/ReduceMean over per-sample axes: one reduce per axis (each keeps its axis with size
// 1), then a reshape that drops them unless keepdims.
void Importer::reduce(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  const auto axes = axes_of(n);
  const auto shape = sample_shape(n.input(0));
  // One axis of a tensor of known shape: the one-axis reduce (its fast kernel); else the
  // general reduce over a set of axes.
  if (!axes || axes->size() != 1 || !shape) return general_reduce(i, id);
  std::set<int64_t> sample_axes;
  for (int64_t a : *axes) {
    const auto s = sample_axis(n.input(0), a);
    if (!s) return refuse(i, "reduces over the batch axis (or an axis out of range)");
    sample_axes.insert(*s);
  }
  const bool mean = n.op_type() == "ReduceMean";
  TensorRef y = *x;
  std::vector<int64_t> kept = *shape, dropped;
  for (int64_t a : sample_axes) {
    y = b_.reduce(a == *sample_axes.begin() ? id : unique_id(id + "." + std::to_string(a), id), y,
                  a, mean);
    kept[static_cast<size_t>(a)] = 1;
  }
  for (size_t k = 0; k < shape->size(); ++k) {
    if (!sample_axes.count(static_cast<int64_t>(k))) dropped.push_back((*shape)[k]);
  }
  if (dropped.empty()) dropped.push_back(1);
  if (attr_i(n, "keepdims", 1) == 0 && dropped != kept) {
    y = b_.reshape(unique_id(id + ".reshape", id), y, dropped);
  }
  act_[n.output(0)] = y;
}

// x + a weight broadcast over the batch (and leading per-sample axes): a learned bias_add, the
// weight's leading size-1 axes dropped.
void Importer::bias_add(int i, const std::string& id, const TensorRef& x,
                        const std::string& weight) {
  const auto& n = g_.node(i);
  std::vector<int64_t> w = weight_dims(weight);
  while (!w.empty() && w.front() == 1) w.erase(w.begin());
  if (w.empty()) w.push_back(1);
  const auto shape = sample_shape(n.input(0) == weight ? n.input(1) : n.input(0));
  if (!shape) return refuse(i, "adds a weight to a tensor of unknown shape");
  const bool suffix = w.size() <= shape->size() &&
                      std::equal(w.begin(), w.end(), shape->end() - static_cast<long>(w.size()));
  if (!suffix) {
    return refuse(i, "adds a weight " + dims_text(weight_dims(weight)) + " that is not the " +
                         "trailing dimensions of the activation " + dims_text(*shape) +
                         " (only a broadcast over the leading axes maps)");
  }
  act_[n.output(0)] = b_.bias_add(id, x, w);
  take(id, "bias", weight);
  // A legacy export does not say which initializers are buffers: one added to activations may be
  // a registered mask that training must not change.
  if (!dynamo_metadata_ && options_.warnings != nullptr) {
    options_.warnings->push_back(where(i) + ": initializer '" + weight +
                                 "' is added to activations as a learned bias; if it is a "
                                 "registered buffer (an additive attention mask, a fixed table), "
                                 "import with --freeze " +
                                 weight + " to keep it constant");
  }
}

bool Importer::bias_fits(const std::string& x, const std::string& weight) const {
  if (!is_weight(weight) || is_buffer(weight)) return false;
  std::vector<int64_t> w = weight_dims(weight);
  // A scalar is a constant, not a parameter (as in check_weight_sharing).
  if (product(w) <= 1) return false;
  while (!w.empty() && w.front() == 1) w.erase(w.begin());
  const auto shape = sample_shape(x);
  // Over axes after the batch only (a batch moved to the end is not a leading axis).
  const auto batch = batch_axis(x);
  const auto rank = rank_of(x);
  if (!batch || !rank || static_cast<int64_t>(w.size()) > *rank - 1 - *batch) return false;
  return shape && w.size() <= shape->size() &&
         std::equal(w.begin(), w.end(), shape->end() - static_cast<long>(w.size()));
}

// Clip(x, min, max) with constant bounds (ReLU6 is Clip(0, 6)).
void Importer::clip(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x && param_like(n.input(0))) {
    x = trained_operand(i, id);
    if (!x) return;
  }
  if (!x) return refuse(i, "its input is not an activation");
  constexpr double kMax = 3.0e38;  // an absent bound: no clipping on that side
  double lo = -kMax, hi = kMax;
  if (opset_ > 0 && opset_ < 11) {
    lo = attr_f(n, "min", -kMax);
    hi = attr_f(n, "max", kMax);
  } else {
    for (int k = 1; k < 3 && k < n.input_size(); ++k) {
      if (n.input(k).empty()) continue;
      const auto v = scalar(n.input(k));
      if (!v) return refuse(i, "a bound that is not a scalar constant");
      (k == 1 ? lo : hi) = std::clamp(*v, -kMax, kMax);
    }
  }
  if (lo > hi) return refuse(i, "min > max");
  act_[n.output(0)] = b_.clip(id, *x, lo, hi);
}

// Constant-mode padding: zero padding of H and W whose only consumer is a Conv or an
// AveragePool is that op's; any other is blocks of the value joined on.
void Importer::pad(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  if (attr_s(n, "mode", "constant") != "constant") {
    return refuse(i, "mode = " + attr_s(n, "mode", "") + " (only constant padding maps)");
  }
  std::vector<int64_t> pads = attr_ints(n, "pads");
  double value = attr_f(n, "value", 0);
  if (n.input_size() > 1 && !n.input(1).empty()) {
    auto v = folded(n.input(1));
    if (!v) return refuse(i, "pads are not constant");
    pads.clear();
    for (double p : *v) pads.push_back(static_cast<int64_t>(p));
  }
  if (n.input_size() > 2 && !n.input(2).empty()) {
    auto v = scalar(n.input(2));
    if (!v) return refuse(i, "the pad value is not a scalar constant");
    value = *v;
  }
  // torchvision's and timm's Swin pad to a multiple of the window: nothing when it divides.
  if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; })) {
    act_[n.output(0)] = *x;
    return;
  }
  if (n.input_size() > 3 && !n.input(3).empty())
    return refuse(i, "pads only some axes (axes input)");
  // Equal zero padding of H and W that a Conv or an AveragePool reads alone: theirs.
  const int c = sole_consumer(n.output(0));
  const bool absorbed = value == 0 && pads.size() == 8 && !pads[0] && !pads[1] && !pads[4] &&
                        !pads[5] && pads[2] == pads[6] && pads[3] == pads[7] && pads[2] >= 0 &&
                        pads[3] >= 0 && c >= 0 && only_consumers_in(n.output(0), {c}) &&
                        (g_.node(c).op_type() == "Conv" || g_.node(c).op_type() == "AveragePool") &&
                        g_.node(c).input(0) == n.output(0);
  if (absorbed) {
    pad_of_[n.output(0)] = {pads[2], pads[3]};
    act_[n.output(0)] = *x;
    return;
  }
  // Else blocks of the value joined on along each padded per-sample axis (MobileBERT's
  // F.pad(embeds[:, 1:], [0, 0, 0, 1]) shifts its tokens by one).
  if (dtype_of(n.input(0)) != graphpipe::v1::DATA_TYPE_FLOAT32) {
    return refuse(i, "pads the integer tensor '" + n.input(0) + "' (only float tensors pad)");
  }
  const auto rank = rank_of(n.input(0));
  auto shape = sample_shape(n.input(0));
  if (!rank || !shape || static_cast<int64_t>(pads.size()) != 2 * *rank) {
    return refuse(i, "pads " + dims_text(pads) + " for a tensor of unknown rank or another rank");
  }
  // (Every axis checked before any op is made: a refusal leaves none behind.)
  std::vector<std::pair<int64_t, int64_t>> padded;  // ONNX axis, per-sample axis
  for (int64_t d = 0; d < *rank; ++d) {
    const int64_t before = pads[static_cast<size_t>(d)];
    const int64_t after = pads[static_cast<size_t>(d + *rank)];
    if (before == 0 && after == 0) continue;
    if (before < 0 || after < 0) {
      return refuse(i, "pads " + dims_text(pads) + " crop (negative pads do not map)");
    }
    const auto a = sample_axis(n.input(0), d);
    if (!a)
      return refuse(i, "pads " + dims_text(pads) + " pad the batch axis " + std::to_string(d));
    padded.emplace_back(d, *a);
  }
  TensorRef y = *x;
  for (size_t k = 0; k < padded.size(); ++k) {
    // (Plain names: clang before 16 cannot capture structured bindings in the lambda.)
    const int64_t d = padded[k].first, a = padded[k].second;
    const int64_t before = pads[static_cast<size_t>(d)];
    const int64_t after = pads[static_cast<size_t>(d + *rank)];
    auto block = [&](int64_t count, const std::string& where) {
      std::vector<int64_t> dims = *shape;
      dims[static_cast<size_t>(a)] = count;
      const std::vector<float> fill(static_cast<size_t>(product(dims)), static_cast<float>(value));
      return b_.constant(unique_id(id + "." + std::to_string(d) + "." + where, id), *x, dims, fill);
    };
    std::vector<TensorRef> parts;
    if (before > 0) parts.push_back(block(before, "before"));
    parts.push_back(y);
    if (after > 0) parts.push_back(block(after, "after"));
    (*shape)[static_cast<size_t>(a)] += before + after;
    // (The last join is the node's own op.)
    const bool last = k + 1 == padded.size();
    y = b_.concat(last ? id : unique_id(id + "." + std::to_string(d), id), parts, a);
  }
  act_[n.output(0)] = y;
}

// Conv: conv2d. A 3-D weight (nn.Conv1d: Whisper's and wav2vec's front ends) convolves x [C, L]
// as [C, 1, L] with kernel [1, k], its weight [out, C/groups, k] held as [out, C/groups, 1, k]
// (the same elements in the same order), and the output goes back to [out, L'].
void Importer::conv(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x || n.input_size() < 2 || !is_weight(n.input(1))) {
    return refuse(i, "expected an activation convolved with a weight");
  }
  const auto w = weight_dims(n.input(1));
  const bool one_d = w.size() == 3;
  if (w.size() != 4 && !one_d) {
    return refuse(i, "a weight of rank " + std::to_string(w.size()) + " (only 1-D and 2-D)");
  }
  const auto s = sample_shape(n.input(0));
  if (one_d && (!s || s->size() != 2 || batch_axis(n.input(0)) != 0)) {
    return refuse(i, "a 1-D convolution of an input that is not [batch, C, L]");
  }
  for (int64_t d : attr_ints(n, "dilations")) {
    if (d != 1) return refuse(i, "dilations other than 1");
  }
  const std::string auto_pad = attr_s(n, "auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") return refuse(i, "auto_pad = " + auto_pad);
  std::vector<int64_t> pads = attr_ints(n, "pads");
  std::vector<int64_t> strides = attr_ints(n, "strides");
  if (one_d) {  // as 2-D: nothing along the added axis of 1
    if (pads.empty()) pads = {0, 0};
    if (pads.size() != 2 || pads[0] != pads[1]) {
      return refuse(i, "pads " + dims_text(pads) + " (only symmetric padding)");
    }
    pads = {0, pads[0], 0, pads[1]};
    if (strides.empty()) strides = {1};
    if (strides.size() != 1 || strides[0] < 1) return refuse(i, "strides " + dims_text(strides));
    strides.insert(strides.begin(), 1);
  }
  if (pads.empty()) pads = {0, 0, 0, 0};
  if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3]) {
    return refuse(i, "pads " + dims_text(pads) + " (only symmetric 2-D padding)");
  }
  if (auto p = pad_of_.find(n.input(0)); p != pad_of_.end()) {  // a Pad node before it
    pads[0] += p->second[0];
    pads[1] += p->second[1];
  }
  if (strides.empty()) strides = {1, 1};
  // torch 2.x's unoptimised exports give a bias-free conv a computed all-zero bias.
  const bool zero_bias = [&] {
    const auto v = n.input_size() > 2 && !is_weight(n.input(2)) ? folded(n.input(2)) : std::nullopt;
    return v && !v->empty() && std::all_of(v->begin(), v->end(), [](double e) { return e == 0; });
  }();
  const bool bias = n.input_size() > 2 && !n.input(2).empty() && !zero_bias;
  if (bias && weight_dims(n.input(2)) != std::vector<int64_t>{w[0]}) {
    return refuse(i, "bias B is not a weight of the output channels");
  }
  const bool dropped = !bias && dropped_bias(i);  // an all-zero bias torch's optimiser dropped
  const TensorRef in =
      one_d ? b_.reshape(unique_id(id + ".2d", id), *x, {(*s)[0], 1, (*s)[1]}) : *x;
  const std::vector<int64_t> kernel =
      one_d ? std::vector<int64_t>{1, w[2]} : std::vector<int64_t>{w[2], w[3]};
  const TensorRef y = b_.conv2d(id, in, w[0], kernel, strides, {pads[0], pads[1]}, bias || dropped);
  if (dropped) train_dropped_bias(where(i), id, "bias", w[0]);
  if (const int64_t groups = attr_i(n, "group", 1); groups != 1) {
    set_attr(op_by_id(id), "groups", groups);  // weight [out, C/groups, kh, kw] in both
  }
  take(id, "weight", n.input(1));  // [out, C, kh, kw] both (kh 1 for a 3-D weight)
  if (bias) take(id, "bias", n.input(2));
  if (!one_d) {
    act_[n.output(0)] = y;
    return;
  }
  const int64_t out_length = ((*s)[1] + 2 * pads[1] - w[2]) / strides[1] + 1;
  act_[n.output(0)] = b_.reshape(unique_id(id + ".1d", id), y, {w[0], out_length});
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
    // Of [C, L] (nn.AdaptiveAvgPool1d(1) of a sequence's features): a mean or max over L.
    if (s && s->size() == 2) {
      act_[n.output(0)] = b_.reduce_axes(id, *x, {1}, max ? "max" : "mean", /*keepdims=*/true);
      return;
    }
    if (!s || s->size() != 3) {
      return refuse(i, "a global pool of an input that is not [C, L] or [C, H, W]");
    }
    kernel = {(*s)[1], (*s)[2]};
    strides = kernel;
    pads = {0, 0, 0, 0};
  } else {
    kernel = attr_ints(n, "kernel_shape");
    strides = attr_ints(n, "strides");
    pads = attr_ints(n, "pads");
    if (strides.empty()) strides = {1, 1};  // ONNX's default, unlike PyTorch's
    if (pads.empty()) pads = {0, 0, 0, 0};
    if (kernel.size() != 2) return refuse(i, "kernel_shape " + dims_text(kernel) + " (only 2-D)");
    for (int64_t d : attr_ints(n, "dilations")) {
      if (d != 1) return refuse(i, "dilations other than 1");
    }
    const std::string auto_pad = attr_s(n, "auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID") return refuse(i, "auto_pad = " + auto_pad);
    if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3]) {
      return refuse(i, "pads " + dims_text(pads) + " (only symmetric 2-D padding)");
    }
  }
  std::vector<int64_t> padding = {pads[0], pads[1]};
  bool include_pad = attr_i(n, "count_include_pad", 0) != 0;
  if (auto p = pad_of_.find(n.input(0)); p != pad_of_.end() && (p->second[0] || p->second[1])) {
    // Explicit zeros count in the mean, as count_include_pad = 1 does for the pool's own padding.
    if (!include_pad && (padding[0] || padding[1])) {
      return refuse(i, "pads of its own with count_include_pad = 0 after a Pad node");
    }
    padding[0] += p->second[0];
    padding[1] += p->second[1];
    include_pad = true;
  }
  if (padding[0] >= kernel[0] || padding[1] >= kernel[1]) {
    return refuse(
        i, "padding " + dims_text(padding) + " not smaller than the kernel " + dims_text(kernel));
  }
  act_[n.output(0)] = max ? b_.max_pool2d(id, *x, kernel, strides, padding)
                          : b_.avg_pool2d(id, *x, kernel, strides, padding, include_pad);
  if (attr_i(n, "ceil_mode", 0) != 0) set_attr(op_by_id(id), "ceil_mode", int64_t{1});
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
  // Tokens folded into the batch ([batch * N, C, ...], LeViT's bn(x.flatten(0, 1))): per sample
  // [N, C, ...], normalised per channel over the batch and the N tokens, as torch does over the
  // flattened batch: the channels moved first, batch_norm, and back.
  const BatchLayout l = layout_of(n.input(0));
  const auto shape = sample_shape(n.input(0));
  if (!l.batch_first() && (!shape || shape->size() < 2)) {
    return refuse(i, "normalises '" + n.input(0) + "' with the batch at " + l.text() +
                         " and no channel axis after it, or a per-sample shape not known");
  }
  // One output and no training_mode: the eval form, normalising with the running statistics,
  // unless the traced program ran it in training (torch 2.x's dynamo export writes the eval form
  // for a train-mode module, its metadata naming _native_batch_norm_legit_functional).
  const std::string traced = onnx_node_metadata(n, "pkg.torch.onnx.fx_node");
  const bool traced_training = traced.find("_native_batch_norm_legit_functional") != traced.npos ||
                               traced.find("_native_batch_norm_legit.default") != traced.npos;
  if (attr_i(n, "training_mode", 0) == 0 && n.output_size() == 1 && !traced_training) {
    if (eval_batch_norms_++ == 0) first_eval_batch_norm_ = where(i);
  }
  if (!l.batch_first()) {
    std::vector<int64_t> perm(shape->size());
    std::iota(perm.begin(), perm.end(), 0);
    std::swap(perm[0], perm[1]);
    const TensorRef channels_first = b_.transpose(unique_id(id + ".channels", id), *x, perm);
    const std::string norm = unique_id(id + ".norm", id);
    const TensorRef y = b_.batch_norm(norm, channels_first, attr_f(n, "epsilon", 1e-5));
    act_[n.output(0)] = b_.transpose(id, y, perm);
    take(norm, "gamma", n.input(1));
    take(norm, "beta", n.input(2));
    return;
  }
  act_[n.output(0)] = b_.batch_norm(id, *x, attr_f(n, "epsilon", 1e-5));
  take(id, "gamma", n.input(1));
  take(id, "beta", n.input(2));
}

}  // namespace gp::model::onnx_detail
