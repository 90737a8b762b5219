// InstanceNormalization: nn.InstanceNorm2d, and nn.GroupNorm as both torch exporters lower it (a
// reshape to [batch, groups, -1], this op with a scale of ones and a bias of zeros, a reshape
// back, then the affine weight and bias as element-wise ops). No catalogue op normalises
// without a trained affine, so it maps onto reduce and element-wise ops: every sample's channel
// normalised over its other axes, with the biased variance, as torch computes it.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gp/model/onnx_file.h"
#include "onnx/importer.h"

namespace gp::model::onnx_detail {

void Importer::instance_norm(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const auto x = activation(n.input(0));
  const auto shape = sample_shape(n.input(0));
  if (!x || !shape || shape->size() < 2) {
    return refuse(i,
                  "expected an activation [batch, channels, ...] with at least one axis to "
                  "normalise over");
  }
  const int64_t channels = (*shape)[0];
  // The per-channel scale and bias are constants (a trained one, nn.InstanceNorm2d with
  // affine=True, would need a view of the weight per channel: not mapped). torch's optimiser
  // folds the lowering's ones and zeros into initializers: its metadata tells them from
  // parameters (GroupNorm applies its own after; an instance norm without one names none).
  // The lowering's are ones and zeros; anything else in an initializer is refused.
  const std::string fx = model::onnx_node_metadata(n, "pkg.torch.onnx.fx_node");
  const bool lowered =
      fx.find("aten.group_norm") != std::string::npos ||
      fx.find("aten.native_group_norm") != std::string::npos ||
      (fx.find("aten.instance_norm") != std::string::npos && fx.find("%p_") == std::string::npos);
  std::vector<std::vector<float>> affine;
  for (int k = 1; k < 3; ++k) {
    const double neutral = k == 1 ? 1.0 : 0.0;
    const bool initializer = param_like(n.input(k));
    std::vector<double> values;
    if (!initializer || lowered) {
      if (auto t = const_tensor(n.input(k))) values = std::move(t->values);
    }
    const bool usable = static_cast<int64_t>(values.size()) == channels &&
                        std::none_of(values.begin(), values.end(), [&](double v) {
                          return std::isnan(v) || (initializer && v != neutral);
                        });
    if (!usable) {
      return refuse(i, "its " + std::string(k == 1 ? "scale" : "bias") + " '" + n.input(k) +
                           "' is not a constant of " + std::to_string(channels) +
                           " values (a trained affine, InstanceNorm's affine=True, is not "
                           "mapped; GroupNorm's weight and bias after it are)");
    }
    affine.emplace_back(values.begin(), values.end());
  }
  std::vector<int64_t> axes;  // per sample: every axis after the channels
  for (size_t a = 1; a < shape->size(); ++a) axes.push_back(static_cast<int64_t>(a));
  auto part = [&](const std::string& what) { return unique_id(id + "." + what, id); };
  const TensorRef mean = b_.reduce_axes(part("mean"), *x, axes, "mean", true);
  const TensorRef centered = b_.binary(part("centered"), *x, mean, "sub");
  const TensorRef square = b_.binary(part("square"), centered, centered, "mul");
  const TensorRef variance = b_.reduce_axes(part("variance"), square, axes, "mean", true);
  const auto epsilon = static_cast<float>(attr_f(n, "epsilon", 1e-5));
  const TensorRef shifted = b_.binary(part("variance_eps"), variance,
                                      b_.constant(part("epsilon"), *x, {1}, {epsilon}), "add");
  const TensorRef inverse = b_.unary(part("rstd"), shifted, "rsqrt");
  const bool scaled =
      std::any_of(affine[0].begin(), affine[0].end(), [](float v) { return v != 1; });
  const bool biased =
      std::any_of(affine[1].begin(), affine[1].end(), [](float v) { return v != 0; });
  std::vector<int64_t> per_channel(shape->size(), 1);  // [channels, 1, ...]
  per_channel[0] = channels;
  TensorRef y = b_.binary(scaled || biased ? part("normalised") : id, centered, inverse, "mul");
  if (scaled) {
    y = b_.binary(biased ? part("scaled") : id, y,
                  b_.constant(part("scale"), *x, per_channel, affine[0]), "mul");
  }
  if (biased) y = b_.binary(id, y, b_.constant(part("bias"), *x, per_channel, affine[1]), "add");
  act_[n.output(0)] = y;
}

}  // namespace gp::model::onnx_detail
