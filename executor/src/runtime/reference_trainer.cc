#include "gp/exec/reference_trainer.h"

#include <chrono>
#include <numeric>

#include "gp/common/json_writer.h"
#include "tie_reducer.h"

namespace gp::exec {

ReferenceTrainer::~ReferenceTrainer() = default;

Result<std::unique_ptr<ReferenceTrainer>> ReferenceTrainer::create(
    const model::Graph& graph, int64_t mini_batch, int64_t micro_batch,
    const graphpipe::v1::TrainingConfig& training, const Device& device, const DataSource* data) {
  if (mini_batch <= 0) {
    return invalid_argument("--batch = " + std::to_string(mini_batch) + ", must be > 0");
  }
  if (micro_batch == 0) micro_batch = mini_batch;
  if (micro_batch < 0 || mini_batch % micro_batch != 0) {
    return invalid_argument("--micro-batch = " + std::to_string(micro_batch) +
                            " must divide --batch = " + std::to_string(mini_batch));
  }
  auto trainer = std::unique_ptr<ReferenceTrainer>(new ReferenceTrainer());
  std::vector<int> ops(graph.num_ops());
  std::iota(ops.begin(), ops.end(), 0);
  GP_ASSIGN_OR_RETURN(StageLayout layout, layout_stage(graph, std::move(ops)));
  StageOptions options;
  options.max_batch = micro_batch;
  options.slots = 1;
  options.training = training;
  options.device = &device;
  options.data = data;
  GP_ASSIGN_OR_RETURN(trainer->runner_, StageRunner::create(graph, std::move(layout), options));
  if (training.clip_grad_norm() > 0 && !trainer->runner_->host_memory()) {
    trainer->clip_scratch_.assign(static_cast<size_t>(trainer->runner_->param_count()), 0.0f);
  }
  GP_ASSIGN_OR_RETURN(trainer->ties_, TieReducer::create(*trainer->runner_,
                                                         TieReducer::local_ties(graph), nullptr));
  trainer->mini_batch_ = mini_batch;
  trainer->micro_batch_ = micro_batch;
  return trainer;
}

Result<IterationMetrics> ReferenceTrainer::run_iteration(int64_t iteration) {
  const auto start = std::chrono::steady_clock::now();
  StageRunner& r = *runner_;
  r.zero_param_grads();
  double loss = 0;
  const float scale = 1.0f / static_cast<float>(mini_batch_);
  for (int64_t first = 0; first < mini_batch_; first += micro_batch_) {
    r.forward(0, micro_batch_, iteration, first);
    loss += r.loss_sum(0);
    r.begin_backward(0);
    r.backward(0, scale);
  }
  GP_RETURN_IF_ERROR(ties_->reduce());
  if (r.clip_grad_norm() > 0) {
    GP_ASSIGN_OR_RETURN(double sum_of_squares, r.grad_sum_of_squares(clip_scratch_));
    GP_ASSIGN_OR_RETURN(const double duplicates, ties_->duplicate_sum_of_squares());
    sum_of_squares -= duplicates;
    GP_RETURN_IF_ERROR(r.clip_grads(sum_of_squares, clip_scratch_));
  }
  r.optimizer_step(iteration + 1);
  if (Status st = r.synchronize(); !st.ok()) {
    return st.with_context("iteration " + std::to_string(iteration) + " on " +
                           std::string(r.device().name()));
  }
  IterationMetrics m;
  m.iteration = iteration;
  m.loss = loss / static_cast<double>(mini_batch_);
  m.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.samples_per_s = m.time_s > 0 ? static_cast<double>(mini_batch_) / m.time_s : 0;
  return m;
}

std::string metrics_json(const std::vector<IterationMetrics>& iterations) {
  JsonWriter w(/*pretty=*/true);
  w.begin_object().key("iterations").begin_array();
  for (const auto& m : iterations) {
    w.begin_object()
        .field("iteration", m.iteration)
        .field("loss", m.loss)
        .field("time_s", m.time_s)
        .field("samples_per_s", m.samples_per_s);
    if (m.eval_loss) w.field("eval_loss", *m.eval_loss);
    w.end_object();
  }
  w.end_array().end_object();
  return w.str() + "\n";
}

}  // namespace gp::exec
