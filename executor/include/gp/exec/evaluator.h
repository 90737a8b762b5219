// Held-out evaluation: the mean loss of a model over every sample of a data directory, once, in
// the files' order, forward only (no gradient, no optimizer step). The loss is the training
// loss's definition (the summed per-sample losses, averaged over samples), so the two compare.
// batch_norm normalises with each evaluation batch's statistics, as in training (the catalogue
// keeps no running statistics).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/dataset.h"
#include "gp/exec/device.h"
#include "gp/exec/stage_runner.h"
#include "gp/model/graph.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec {

struct EvalResult {
  int64_t samples = 0;
  double loss = 0;  // mean over the samples of the summed per-sample losses
  double time_s = 0;
};

class Evaluator {
 public:
  // Opens `dir` for every input op of `graph` (the names and shapes training data has) and builds
  // a whole-model runner of at most `batch` samples per forward (fewer when the directory holds
  // fewer) on `device`. InvalidArgument naming --eval-data (`flag`) for a directory that does
  // not fit the model, or a model without a loss.
  static Result<std::unique_ptr<Evaluator>> create(const model::Graph& graph,
                                                   const std::string& dir, int64_t batch,
                                                   const graphpipe::v1::TrainingConfig& training,
                                                   const Device& device,
                                                   const std::string& flag = "--eval-data");
  ~Evaluator();

  // The loss of `trained`'s parameters: a whole-model runner of the same graph (the reference
  // trainer's). Copies them in first; allocates nothing after create.
  Result<EvalResult> evaluate(const StageRunner& trained);
  // The loss of the parameters this evaluator holds (a checkpoint loaded into mutable_runner()).
  Result<EvalResult> evaluate();
  StageRunner& mutable_runner() { return *runner_; }
  int64_t samples() const { return data_->samples(); }

 private:
  Evaluator() = default;
  std::unique_ptr<NpyDataset> data_;  // read by runner_: declared first, destroyed last
  std::unique_ptr<StageRunner> runner_;
  int64_t batch_ = 0;
  std::vector<float> params_;  // staging of evaluate(trained)
};

}  // namespace gp::exec
