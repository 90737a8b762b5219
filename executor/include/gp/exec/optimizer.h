// Optimizers over flat float arrays (one call per parameter tensor), as the plan's
// TrainingConfig names them. State (momentum, Adam moments) lives with the parameter.
#pragma once

#include <cstdint>
#include <span>

#include "gp/common/status.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec {

class Optimizer {
 public:
  // Errors name the field: "training.learning_rate = 0, must be > 0".
  static Result<Optimizer> create(const graphpipe::v1::TrainingConfig& config);

  // Floats of state per parameter element: SGD 0, momentum 1, Adam 2.
  int state_floats() const;
  // One update of `weights` from `grads`; `step` counts from 1 (Adam's bias correction).
  void apply(std::span<float> weights, std::span<const float> grads, std::span<float> state,
             int64_t step) const;

  // The float scalars of one update, as apply() uses them: device backends that run the update
  // themselves take these so that their arithmetic is the CPU's, bit for bit. Adam's bias
  // corrections are computed in double on the host and rounded once.
  struct StepConstants {
    graphpipe::v1::OptimizerKind kind = graphpipe::v1::OPTIMIZER_KIND_SGD;
    float lr = 0;
    float momentum = 0;                   // momentum
    float beta1 = 0, beta2 = 0, eps = 0;  // Adam
    float one_minus_beta1 = 0, one_minus_beta2 = 0;
    float c1 = 0, c2 = 0;    // 1 / (1 - beta^step)
    float weight_decay = 0;  // the gradient used is g + weight_decay * w (when > 0)
  };
  // The learning rate of update `step` (from 1) under the configured schedule, in double.
  double learning_rate(int64_t step) const;
  StepConstants step_constants(int64_t step) const;
  // The validated configuration (defaults filled in).
  const graphpipe::v1::TrainingConfig& config() const { return config_; }

 private:
  explicit Optimizer(const graphpipe::v1::TrainingConfig& config) : config_(config) {}
  graphpipe::v1::TrainingConfig config_;
};

}  // namespace gp::exec
