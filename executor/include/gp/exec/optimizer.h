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

 private:
  explicit Optimizer(const graphpipe::v1::TrainingConfig& config) : config_(config) {}
  graphpipe::v1::TrainingConfig config_;
};

}  // namespace gp::exec
