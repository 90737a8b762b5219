// ONNX's upsampling ops: ConvTranspose (torch's ConvTranspose2d) onto conv_transpose2d, and
// Resize (nn.Upsample, F.interpolate) onto resize. Only what computes as torch computes maps: the
// rest is refused with the attribute and value that differ.
#include <cmath>
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

std::string number_text(double v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

void Importer::conv_transpose(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x || n.input_size() < 2 || !is_weight(n.input(1))) {
    return refuse(i, "expected an activation convolved with a weight");
  }
  const auto w = weight_dims(n.input(1));  // [C, out / group, kh, kw]
  if (w.size() != 4) {
    return refuse(i, "a weight of rank " + std::to_string(w.size()) + " (only 2-D maps)");
  }
  const auto s = sample_shape(n.input(0));
  if (!s || s->size() != 3 || (*s)[0] != w[0]) {
    return refuse(i, "its input '" + n.input(0) + "' is not [batch, " + std::to_string(w[0]) +
                         ", H, W] (the weight's input channels) with H and W known");
  }
  if (const int64_t group = attr_i(n, "group", 1); group != 1) {
    return refuse(i, "group = " + std::to_string(group) + " (only 1 maps)");
  }
  for (int64_t d : attr_ints(n, "dilations")) {
    if (d != 1)
      return refuse(i, "dilations " + dims_text(attr_ints(n, "dilations")) + " (only 1 maps)");
  }
  if (const std::string pad = attr_s(n, "auto_pad", "NOTSET"); pad != "NOTSET" && pad != "VALID") {
    return refuse(i, "auto_pad = " + pad + " (only explicit pads map)");
  }
  if (attr(n, "output_shape") != nullptr) {
    return refuse(i, "output_shape " + dims_text(attr_ints(n, "output_shape")) +
                         " is given (only pads and output_padding map)");
  }
  if (const auto k = attr_ints(n, "kernel_shape"); !k.empty() && k != std::vector{w[2], w[3]}) {
    return refuse(i, "kernel_shape " + dims_text(k) + " differs from the weight's " +
                         dims_text({w[2], w[3]}));
  }
  std::vector<int64_t> pads = attr_ints(n, "pads"), strides = attr_ints(n, "strides"),
                       extra = attr_ints(n, "output_padding");
  if (pads.empty()) pads = {0, 0, 0, 0};
  if (strides.empty()) strides = {1, 1};
  if (extra.empty()) extra = {0, 0};
  if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3]) {
    return refuse(i, "pads " + dims_text(pads) + " (only symmetric 2-D padding maps)");
  }
  if (strides.size() != 2 || extra.size() != 2 || extra[0] >= strides[0] ||
      extra[1] >= strides[1]) {
    return refuse(i, "output_padding " + dims_text(extra) + " with strides " + dims_text(strides) +
                         " (2-D, each output_padding below its stride)");
  }
  // torch 2.x's unoptimised exports give a bias-free convolution a computed all-zero bias.
  const bool has_bias = n.input_size() > 2 && !n.input(2).empty();
  bool zero_bias = false;
  if (has_bias && !is_weight(n.input(2))) {
    const auto v = folded(n.input(2));
    zero_bias =
        v && !v->empty() && std::all_of(v->begin(), v->end(), [](double e) { return e == 0; });
    if (!zero_bias) return refuse(i, "bias B is neither a weight nor constant zeros");
  }
  const bool bias = has_bias && !zero_bias;
  if (bias && weight_dims(n.input(2)) != std::vector<int64_t>{w[1]}) {
    return refuse(i, "bias B is not a weight of the " + std::to_string(w[1]) + " output channels");
  }
  const bool dropped = !bias && dropped_bias(i);  // an all-zero bias torch's optimiser dropped
  act_[n.output(0)] = b_.conv_transpose2d(id, *x, w[1], {w[2], w[3]}, strides, {pads[0], pads[1]},
                                          extra, bias || dropped);
  take(id, "weight", n.input(1));  // [C, out, kh, kw] both
  if (bias) take(id, "bias", n.input(2));
  if (dropped) train_dropped_bias(where(i), id, "bias", w[1]);
}

void Importer::resize(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  if (opset_ > 0 && opset_ < 11) {
    return refuse(i, "Resize of opset " + std::to_string(opset_) +
                         " (its coordinates are not torch's; export with opset 11 or later)");
  }
  const auto s = sample_shape(n.input(0));
  if (!s || s->size() != 3) {
    return refuse(i, "its input '" + n.input(0) + "' is not [batch, C, H, W] with C, H and W " +
                         "known (only 4-D NCHW resizing maps)");
  }
  const std::vector<int64_t> in = {0, (*s)[0], (*s)[1], (*s)[2]};  // the batch is never resized
  const std::string mode = attr_s(n, "mode", "nearest");
  const std::string coords = attr_s(n, "coordinate_transformation_mode", "half_pixel");
  const std::string nearest = attr_s(n, "nearest_mode", "round_prefer_floor");
  if (attr_i(n, "antialias", 0) != 0) return refuse(i, "antialias = 1 (torch resizes without)");
  std::vector<int64_t> axes = attr_ints(n, "axes");
  if (axes.empty()) axes = {0, 1, 2, 3};
  for (auto& a : axes) a = a < 0 ? a + 4 : a;
  // The output size of each axis: from `sizes` when given, else floor(size * scale). A scale
  // maps only when the size it gives is exact: the kernel resamples by the size ratio, ONNX (and
  // torch) by the scale.
  std::vector<int64_t> out = in;
  auto given = [&](int k) -> std::optional<std::vector<double>> {
    if (k >= n.input_size() || n.input(k).empty()) return std::vector<double>{};
    return folded(n.input(k));
  };
  const auto scales = given(2), sizes = given(3);
  if (!scales || !sizes) {
    return refuse(i, "its " + std::string(!sizes ? "sizes" : "scales") + " input '" +
                         n.input(!sizes ? 3 : 2) + "' is not constant");
  }
  const auto& values = sizes->empty() ? *scales : *sizes;
  if (values.size() != axes.size()) {
    return refuse(
        i, "neither scales nor sizes give one value for each of the axes " + dims_text(axes));
  }
  if (!sizes->empty() && attr_s(n, "keep_aspect_ratio_policy", "stretch") != "stretch") {
    return refuse(i, "keep_aspect_ratio_policy = " + attr_s(n, "keep_aspect_ratio_policy", "") +
                         " (only stretch maps)");
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = axes[k];
    if (a < 0 || a > 3) return refuse(i, "axes " + dims_text(axes) + " of a 4-D input");
    if (a == 0) continue;  // the batch: its size is symbolic, its scale must be 1 (below)
    if (!sizes->empty()) {
      out[static_cast<size_t>(a)] = to_index(values[k]);
      continue;
    }
    const double exact = static_cast<double>(in[static_cast<size_t>(a)]) * values[k];
    out[static_cast<size_t>(a)] = to_index(std::floor(exact));
    if (exact != std::floor(exact)) {
      return refuse(i, "scale " + number_text(values[k]) + " of axis " + std::to_string(a) +
                           " (size " + std::to_string(in[static_cast<size_t>(a)]) +
                           ") gives no whole size; give the output size instead (nn.Upsample's "
                           "size=)");
    }
  }
  if (sizes->empty() && axes[0] == 0 && values[0] != 1) {
    return refuse(i, "scales the batch axis by " + number_text(values[0]));
  }
  if (out[1] != in[1]) {
    return refuse(i, "resizes the channels (" + std::to_string(in[1]) + " to " +
                         std::to_string(out[1]) + "); only H and W resize");
  }
  if (out[2] <= 0 || out[3] <= 0) {
    return refuse(i, "an output size " + dims_text({out[2], out[3]}) + " that is not positive");
  }
  const std::string how = "mode = " + mode + " with coordinate_transformation_mode = " + coords;
  if (mode == "nearest") {
    if (coords != "asymmetric" || nearest != "floor") {
      return refuse(i, how + " and nearest_mode = " + nearest +
                           " (nearest maps as torch's: asymmetric coordinates, floor)");
    }
    act_[n.output(0)] = b_.resize(id, *x, {out[2], out[3]}, "nearest");
    return;
  }
  if (mode != "linear") {
    return refuse(i, "mode = " + mode + " (only nearest and linear map)");
  }
  const bool align = coords == "align_corners";
  if (!align && coords != "half_pixel" && coords != "pytorch_half_pixel") {
    return refuse(i, how + " (linear maps with align_corners, half_pixel or pytorch_half_pixel)");
  }
  if (!align && (out[2] == 1 || out[3] == 1)) {
    // The two half-pixel modes differ there, and torch computes neither.
    return refuse(i, how + " to an output of size 1");
  }
  act_[n.output(0)] = b_.resize(id, *x, {out[2], out[3]}, "bilinear", align);
}

}  // namespace gp::model::onnx_detail
