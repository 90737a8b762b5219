#include "gp/exec/optimizer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "gp/plan/plan_util.h"

namespace gp::exec {

using graphpipe::v1::OPTIMIZER_KIND_ADAM;
using graphpipe::v1::OPTIMIZER_KIND_MOMENTUM;
using graphpipe::v1::OPTIMIZER_KIND_SGD;
using graphpipe::v1::OPTIMIZER_KIND_UNSPECIFIED;

Result<Optimizer> Optimizer::create(const graphpipe::v1::TrainingConfig& config) {
  graphpipe::v1::TrainingConfig c = config;
  if (c.optimizer() == OPTIMIZER_KIND_UNSPECIFIED) c.set_optimizer(OPTIMIZER_KIND_SGD);
  GP_RETURN_IF_ERROR(plan::validate_training(config));
  if (c.optimizer() == OPTIMIZER_KIND_ADAM && c.adam_beta1() == 0 && c.adam_beta2() == 0 &&
      c.adam_epsilon() == 0) {
    c.set_adam_beta1(0.9);
    c.set_adam_beta2(0.999);
    c.set_adam_epsilon(1e-8);
  }
  return Optimizer(c);
}

int Optimizer::state_floats() const {
  switch (config_.optimizer()) {
    case OPTIMIZER_KIND_MOMENTUM:
      return 1;
    case OPTIMIZER_KIND_ADAM:
      return 2;
    default:
      return 0;
  }
}

double Optimizer::learning_rate(int64_t step) const {
  const double lr = config_.learning_rate();
  if (config_.lr_schedule() != graphpipe::v1::LR_SCHEDULE_WARMUP_COSINE) return lr;
  const int64_t warmup = config_.warmup_steps(), total = config_.total_steps();
  if (step <= warmup) return lr * static_cast<double>(step) / static_cast<double>(warmup);
  const double p =
      std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(total - warmup));
  const double lo = config_.min_learning_rate();
  return lo + 0.5 * (lr - lo) * (1.0 + std::cos(3.14159265358979323846 * p));
}

Optimizer::StepConstants Optimizer::step_constants(int64_t step) const {
  StepConstants k;
  k.kind = config_.optimizer();
  k.lr = static_cast<float>(learning_rate(step));
  k.weight_decay = static_cast<float>(config_.weight_decay());
  k.momentum = static_cast<float>(config_.momentum());
  if (k.kind == OPTIMIZER_KIND_ADAM) {
    const double b1 = config_.adam_beta1(), b2 = config_.adam_beta2();
    k.c1 = static_cast<float>(1.0 / (1.0 - std::pow(b1, static_cast<double>(step))));
    k.c2 = static_cast<float>(1.0 / (1.0 - std::pow(b2, static_cast<double>(step))));
    k.beta1 = static_cast<float>(b1);
    k.beta2 = static_cast<float>(b2);
    k.one_minus_beta1 = 1 - k.beta1;
    k.one_minus_beta2 = 1 - k.beta2;
    k.eps = static_cast<float>(config_.adam_epsilon());
  }
  return k;
}

void Optimizer::apply(std::span<float> w, std::span<const float> g, std::span<float> state,
                      int64_t step) const {
  const StepConstants k = step_constants(step);
  const float lr = k.lr;
  const size_t n = w.size();
  if (k.weight_decay > 0) {
    // L2 as PyTorch's weight_decay: the update reads g + wd * w, element by element.
    const float wd = k.weight_decay;
    float* m = state.data();
    float* v = k.kind == OPTIMIZER_KIND_ADAM ? state.data() + n : nullptr;
    for (size_t i = 0; i < n; ++i) {
      const float gi = g[i] + wd * w[i];
      switch (k.kind) {
        case OPTIMIZER_KIND_MOMENTUM:
          m[i] = k.momentum * m[i] + gi;
          w[i] -= lr * m[i];
          break;
        case OPTIMIZER_KIND_ADAM:
          m[i] = k.beta1 * m[i] + k.one_minus_beta1 * gi;
          v[i] = k.beta2 * v[i] + k.one_minus_beta2 * gi * gi;
          w[i] -= lr * (m[i] * k.c1) / (std::sqrt(v[i] * k.c2) + k.eps);
          break;
        default:
          w[i] -= lr * gi;
      }
    }
    return;
  }
  switch (k.kind) {
    case OPTIMIZER_KIND_MOMENTUM: {
      const float mu = k.momentum;
      for (size_t i = 0; i < n; ++i) {
        state[i] = mu * state[i] + g[i];
        w[i] -= lr * state[i];
      }
      return;
    }
    case OPTIMIZER_KIND_ADAM: {
      const float c1 = k.c1, c2 = k.c2, fb1 = k.beta1, fb2 = k.beta2, eps = k.eps;
      const float ob1 = k.one_minus_beta1, ob2 = k.one_minus_beta2;
      float* m = state.data();
      float* v = state.data() + n;
      for (size_t i = 0; i < n; ++i) {
        m[i] = fb1 * m[i] + ob1 * g[i];
        v[i] = fb2 * v[i] + ob2 * g[i] * g[i];
        w[i] -= lr * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
      }
      return;
    }
    default:
      for (size_t i = 0; i < n; ++i) w[i] -= lr * g[i];
  }
}

}  // namespace gp::exec
