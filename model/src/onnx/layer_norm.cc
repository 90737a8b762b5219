// LayerNormalization, and the decomposed layer norm patterns.cc finds, as `layer_norm` with the
// scale and shift torch has: a learned gamma and beta where torch has parameters, none where it
// has none (LayerNorm(bias=False), elementwise_affine=False), and element-wise constants where
// the file holds other fixed values. The exporters write "none" as constants (legacy: Constant
// nodes of ones and zeros) or as a reused initializer (dynamo's optimiser merges a constant of
// ones with an all-ones weight): the traced call's arguments tell the two apart.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "gp/model/onnx_file.h"
#include "onnx/importer.h"
#include "onnx/torch_metadata.h"

namespace gp::model::onnx_detail {
namespace {

// The traced call's weight and bias arguments (or {} without metadata): "None" where torch
// passes none.
std::vector<std::string> torch_layer_norm_arguments(const onnx::NodeProto& n) {
  for (const char* call : {"aten.layer_norm.default", "aten.native_layer_norm.default"}) {
    auto args = torch_call_arguments(n, call);
    if (args.size() < 2) continue;
    args.resize(std::max<size_t>(args.size(), 4), "None");  // trailing defaults left out
    return {args[2], args[3]};
  }
  return {};
}

}  // namespace

void Importer::layer_norm(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  const int64_t axis = attr_i(n, "axis", -1);
  const auto a = feature_axis(i, axis);
  if (!a) return;
  // A weight, or a constant (dynamo's unoptimised export computes the ones of a norm without
  // affine as Expand(1, Shape(x)[-1:])).
  auto elements = [&](const std::string& name) -> std::optional<int64_t> {
    if (is_weight(name)) return product(weight_dims(name));
    if (const auto t = const_tensor(name)) return product(t->dims);
    return std::nullopt;
  };
  if (!elements(n.input(1))) {
    return refuse(i, "scale '" + n.input(1) + "' is neither a weight nor a constant");
  }
  const bool beta = n.input_size() > 2 && !n.input(2).empty();
  if (beta && !elements(n.input(2))) {
    return refuse(i, "bias '" + n.input(2) + "' is neither a weight nor a constant");
  }
  // Per sample, the batch's folded dims included.
  const int64_t rank = per_sample_rank(n.input(0));
  TensorRef in = *x;
  std::vector<int64_t> shape;
  int64_t width = 0;
  if (*a != rank - 1) {
    // Over the trailing axes from `axis`: merged into one, normalised, and split again (the
    // scale and bias flatten row-major, as the merged axis does).
    const auto s = sample_shape(n.input(0));
    if (!s) {
      return refuse(i, "normalises axes " + std::to_string(axis) + ".. of '" + n.input(0) +
                           "', whose shape is not known");
    }
    shape = *s;
    width = product(std::vector<int64_t>(s->begin() + *a, s->end()));
    std::vector<int64_t> flat(s->begin(), s->begin() + *a);
    flat.push_back(width);
    in = b_.reshape(unique_id(id + ".merge", id), *x, flat);
  } else if (const auto s = sample_shape(n.input(0))) {
    width = s->back();
  } else {
    width = *elements(n.input(1));
  }
  for (int k = 1; k < (beta ? 3 : 2); ++k) {
    if (*elements(n.input(k)) != width) {
      return refuse(i, std::string(k == 1 ? "scale" : "bias") + " '" + n.input(k) + "' has " +
                           std::to_string(*elements(n.input(k))) +
                           " elements, the normalised axes " + std::to_string(width) +
                           " (only a scale and bias of the normalised shape map)");
    }
  }
  auto y = emit_layer_norm(i, id, in, attr_f(n, "epsilon", 1e-5), n.input(1),
                           beta ? n.input(2) : "", width);
  if (!y) return;
  if (!shape.empty()) y = b_.reshape(unique_id(id + ".split", id), *y, shape);
  act_[n.output(0)] = *y;
}

std::optional<TensorRef> Importer::emit_layer_norm(int i, const std::string& id, const TensorRef& x,
                                                   double epsilon, const std::string& scale,
                                                   const std::string& shift, int64_t width) {
  const auto torch_args = torch_layer_norm_arguments(g_.node(i));
  // Trained: a parameter-like tensor the traced call (where the file has one) passes as such.
  auto trained = [&](const std::string& name, size_t arg) {
    return !name.empty() && param_like(name) && (torch_args.empty() || torch_args[arg] != "None");
  };
  // The values of an untrained scale or shift: empty where they change nothing (torch's "none");
  // nullopt, with node i refused, where it holds none.
  auto constant = [&](const std::string& name,
                      const char* what) -> std::optional<std::vector<float>> {
    const auto t = const_tensor(name);
    if (!t || static_cast<int64_t>(t->values.size()) != width ||
        std::any_of(t->values.begin(), t->values.end(), [](double v) { return std::isnan(v); })) {
      refuse(i, std::string("its ") + what + " '" + name + "' is neither a trained weight nor a " +
                    "constant of " + std::to_string(width) + " values");
      return std::nullopt;
    }
    const double neutral = std::string_view(what) == "scale" ? 1.0 : 0.0;
    if (std::all_of(t->values.begin(), t->values.end(), [&](double v) { return v == neutral; })) {
      return std::vector<float>{};
    }
    return std::vector<float>(t->values.begin(), t->values.end());
  };
  // Decided (and refused) before any op is added.
  const bool scale_trained = trained(scale, 0), shift_trained = trained(shift, 1);
  // torch has a bias the file holds no tensor for: it trains from zero, as torch's does (export
  // then says it has no tensor to write it to).
  const bool shift_unheld =
      !shift_trained && shift.empty() && !torch_args.empty() && torch_args[1] != "None";
  std::vector<float> fixed_scale, fixed_shift;
  for (auto [name, is_trained, what, out] :
       {std::tuple{&scale, scale_trained, "scale", &fixed_scale},
        std::tuple{&shift, shift_trained, "bias", &fixed_shift}}) {
    if (is_trained || name->empty()) continue;
    auto v = constant(*name, what);
    if (!v) return std::nullopt;
    *out = std::move(*v);
  }
  // With a constant scale, a learned shift comes after it (x̂·s + β): its own bias_add.
  const bool learned_shift = shift_trained || shift_unheld;
  const bool shift_after = learned_shift && !fixed_scale.empty();
  auto learn_shift = [&](const std::string& op, const std::string& param) {
    if (shift_trained) return take(op, param, shift);
    set_values(op, param, std::vector<float>(static_cast<size_t>(width), 0.0f));
  };
  TensorRef y = b_.layer_norm(id, x);
  if (std::fabs(epsilon - 1e-5) > 1e-9) set_attr(op_by_id(id), "epsilon", epsilon);
  if (scale_trained) {
    take(id, "gamma", scale);
  } else {
    set_attr(op_by_id(id), "scale", int64_t{0});
  }
  if (learned_shift && !shift_after) {
    learn_shift(id, "beta");
  } else {
    set_attr(op_by_id(id), "shift", int64_t{0});
  }
  if (!fixed_scale.empty()) {
    y = b_.binary(unique_id(id + ".scaled", id), y,
                  b_.constant(unique_id(id + ".scale", id), y, {width}, fixed_scale), "mul");
  }
  if (shift_after) {
    const std::string shifted = unique_id(id + ".shifted", id);
    y = b_.bias_add(shifted, y, {width});
    learn_shift(shifted, "bias");
  }
  if (!fixed_shift.empty()) {
    y = b_.binary(unique_id(id + ".shifted", id), y,
                  b_.constant(unique_id(id + ".bias", id), y, {width}, fixed_shift), "add");
  }
  return y;
}

}  // namespace gp::model::onnx_detail
