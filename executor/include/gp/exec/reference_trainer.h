// Single-process training of a whole model without pipelining: the numerical reference that
// every plan must reproduce (same seed, same mini-batch -> same losses to float tolerance).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/stage_runner.h"
#include "gp/model/graph.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec {

struct IterationMetrics {
  int64_t iteration = 0;
  double loss = 0;  // mean over the mini-batch of the summed per-sample losses
  double time_s = 0;
  double samples_per_s = 0;
  std::optional<double> eval_loss;  // --eval-data: the held-out loss after this iteration
};

class TieReducer;

class ReferenceTrainer {
 public:
  ~ReferenceTrainer();
  // `micro_batch` splits each mini-batch into chunks (gradients accumulate); 0 = one chunk.
  // The whole model trains on `device` (the CPU is the reference); its input ops read `data`
  // (covering every input op, outliving the trainer; nullptr: synthetic data).
  static Result<std::unique_ptr<ReferenceTrainer>> create(
      const model::Graph& graph, int64_t mini_batch, int64_t micro_batch,
      const graphpipe::v1::TrainingConfig& training, const Device& device = cpu_device(),
      const DataSource* data = nullptr);

  // Runs iteration `iteration` (0-based): forward and backward of every chunk, one optimizer step.
  // The time includes waiting for the device; a device error of the iteration names it.
  Result<IterationMetrics> run_iteration(int64_t iteration);
  const StageRunner& runner() const { return *runner_; }
  StageRunner& mutable_runner() { return *runner_; }  // checkpoints

 private:
  ReferenceTrainer() = default;
  std::unique_ptr<StageRunner> runner_;
  int64_t mini_batch_ = 0;
  int64_t micro_batch_ = 0;
  std::vector<float> clip_scratch_;   // gradient clipping on devices without host memory
  std::unique_ptr<TieReducer> ties_;  // tied parameters' copies, summed before the step
};

// {"iterations": [{"iteration": i, "loss": x, "time_s": t, "samples_per_s": s}, ...]}, with
// "eval_loss" where the held-out loss was evaluated.
std::string metrics_json(const std::vector<IterationMetrics>& iterations);

}  // namespace gp::exec
