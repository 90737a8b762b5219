#include "gp/exec/evaluator.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "gp/exec/stage_layout.h"

namespace gp::exec {

Evaluator::~Evaluator() = default;

Result<std::unique_ptr<Evaluator>> Evaluator::create(const model::Graph& graph,
                                                     const std::string& dir, int64_t batch,
                                                     const graphpipe::v1::TrainingConfig& training,
                                                     const Device& device,
                                                     const std::string& flag) {
  if (batch <= 0) {
    return invalid_argument(flag + ": the evaluation batch is " + std::to_string(batch) +
                            ", must be > 0");
  }
  auto e = std::unique_ptr<Evaluator>(new Evaluator());
  // Opened with one sample per mini-batch first: a directory smaller than `batch` is evaluated
  // whole, in one forward of its size.
  auto probe =
      open_stage_data(dir, graph, graph.topo_order(), 1, /*shuffle=*/false, training.seed());
  if (!probe.ok()) return probe.status().with_context(flag + " " + dir);
  e->batch_ = std::min(batch, (*probe)->samples());
  probe = open_stage_data(dir, graph, graph.topo_order(), e->batch_, false, training.seed());
  if (!probe.ok()) return probe.status().with_context(flag + " " + dir);
  e->data_ = std::move(*probe);
  std::vector<int> ops(graph.num_ops());
  std::iota(ops.begin(), ops.end(), 0);
  GP_ASSIGN_OR_RETURN(StageLayout layout, layout_stage(graph, std::move(ops)));
  StageOptions options;
  options.max_batch = e->batch_;
  options.slots = 1;
  options.training = training;
  options.device = &device;
  options.data = e->data_.get();
  GP_ASSIGN_OR_RETURN(e->runner_, StageRunner::create(graph, std::move(layout), options));
  if (!e->runner_->has_loss()) {
    return invalid_argument(flag + ": the model has no loss operator to evaluate");
  }
  e->params_.assign(static_cast<size_t>(e->runner_->param_count()), 0.0f);
  return e;
}

Result<EvalResult> Evaluator::evaluate(const StageRunner& trained) {
  if (trained.param_count() != runner_->param_count()) {
    return internal_error("evaluation: the trained runner holds " +
                          std::to_string(trained.param_count()) + " parameters, the evaluator " +
                          std::to_string(runner_->param_count()));
  }
  GP_RETURN_IF_ERROR(trained.download_params(params_));
  GP_RETURN_IF_ERROR(runner_->upload_params(params_));
  return evaluate();
}

Result<EvalResult> Evaluator::evaluate() {
  const auto start = std::chrono::steady_clock::now();
  const int64_t n = data_->samples();
  double loss = 0;
  // Sample g of the stream is row g (no shuffle, g < n): batch k reads rows [k * batch_, ...),
  // the last one only the rows left.
  for (int64_t k = 0; k * batch_ < n; ++k) {
    const int64_t count = std::min(batch_, n - k * batch_);
    runner_->forward(0, count, k, 0);
    loss += runner_->loss_sum(0);
  }
  GP_RETURN_IF_ERROR(runner_->synchronize().with_context("evaluation on " +
                                                         std::string(runner_->device().name())));
  EvalResult r;
  r.samples = n;
  r.loss = loss / static_cast<double>(n);
  r.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace gp::exec
