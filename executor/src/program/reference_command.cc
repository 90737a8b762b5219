// graphpipe-executor reference: trains in one process without pipelining, the numerical
// reference that every plan must reproduce.
#include <cmath>
#include <filesystem>
#include <memory>
#include <vector>

#include "checkpoint/checkpoint_guard.h"
#include "commands.h"
#include "gp/common/logging.h"
#include "gp/common/util.h"
#include "gp/exec/evaluator.h"
#include "gp/exec/rank_session.h"
#include "gp/exec/reference_trainer.h"
#include "gp/model/model_io.h"
#include "gp/plan/plan_util.h"
#include "runtime/checkpoint.h"
#include "shared_flags.h"

namespace gp::exec::daemon {
namespace {

struct ReferenceOptions {
  std::string model;
  std::string plan;  // instead of --model: the plan's model and training settings
  // Whether the flag was given (it then overrides the plan's setting).
  bool optimizer_given = false, lr_given = false, momentum_given = false, seed_given = false;
  double weight_decay = 0;
  bool weight_decay_given = false;
  double clip_grad_norm = 0;
  bool clip_grad_norm_given = false;
  int64_t batch = 0;
  int64_t micro_batch = 0;
  int iterations = 5;
  std::string optimizer = "sgd";
  double learning_rate = 0.01;
  double momentum = 0.9;
  uint64_t seed = 1;
  std::string metrics_out;
  std::string device = "cpu";
  std::string precision = "fp32";
  std::string data;  // --data DIR: one <input op id>.npy per graph input
  bool no_shuffle = false;
  bool allow_nonfinite = false;
  std::string checkpoint_dir;  // write the trained parameters here at the end
  std::string eval_data;       // --eval-data DIR: held-out samples, as --data
  int eval_every = 0;          // evaluate every K iterations (0: after the last only)
};

// The optimizer named by --optimizer with --momentum; the rest of `training` is kept.
gp::Status set_optimizer(const ReferenceOptions& o, graphpipe::v1::TrainingConfig& training) {
  if (o.optimizer == "sgd") {
    training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_SGD);
  } else if (o.optimizer == "momentum") {
    training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_MOMENTUM);
    training.set_momentum(o.momentum);
  } else if (o.optimizer == "adam") {
    training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  } else {
    return gp::invalid_argument("--optimizer = '" + o.optimizer +
                                "', expected sgd, momentum or adam");
  }
  return gp::ok_status();
}

// The training settings: with --plan the plan's mini-batch (into o.batch, unless --batch) and
// every setting a flag does not override; with --model the flags'.
gp::Status training_settings(const graphpipe::v1::Plan& plan, ReferenceOptions& o,
                             graphpipe::v1::TrainingConfig* training) {
  if (!o.plan.empty()) {
    *training = plan.training();
    if (o.batch == 0) o.batch = plan.mini_batch();
    if (o.optimizer_given) {
      training->clear_momentum();
      training->clear_adam_beta1();
      training->clear_adam_beta2();
      training->clear_adam_epsilon();
      GP_RETURN_IF_ERROR(set_optimizer(o, *training));
    } else if (o.momentum_given) {
      training->set_momentum(o.momentum);
    }
    if (o.lr_given) training->set_learning_rate(o.learning_rate);
    if (o.weight_decay_given) training->set_weight_decay(o.weight_decay);
    if (o.clip_grad_norm_given) training->set_clip_grad_norm(o.clip_grad_norm);
    if (o.seed_given) training->set_seed(o.seed);
    return gp::plan::validate_training(*training, false).with_context("--plan " + o.plan);
  }
  if (o.batch == 0) return gp::invalid_argument("--batch is required with --model");
  GP_RETURN_IF_ERROR(set_optimizer(o, *training));
  training->set_learning_rate(o.learning_rate);
  training->set_weight_decay(o.weight_decay);
  training->set_clip_grad_norm(o.clip_grad_norm);
  training->set_seed(o.seed);
  return gp::plan::validate_training(*training, false);
}

// Runs --iterations optimizer steps into `metrics`. A non-finite loss stops them unless
// --allow-nonfinite, `stopped` saying where.
// With an evaluator, the held-out loss after every --eval-every-th iteration and the last joins
// the progress line and the metrics.
gp::Status train(const ReferenceOptions& o, gp::exec::ReferenceTrainer& trainer,
                 gp::exec::Evaluator* evaluator, std::vector<gp::exec::IterationMetrics>* metrics,
                 gp::Status* stopped) {
  auto log = gp::log::get("exec");
  for (int it = 0; it < o.iterations; ++it) {
    GP_ASSIGN_OR_RETURN(auto iteration, trainer.run_iteration(it));
    const bool evaluate =
        evaluator != nullptr &&
        (it + 1 == o.iterations || (o.eval_every > 0 && (it + 1) % o.eval_every == 0));
    std::string held_out;
    if (evaluate) {
      GP_ASSIGN_OR_RETURN(const auto e, evaluator->evaluate(trainer.runner()));
      iteration.eval_loss = e.loss;
      held_out = fmt::format(", held-out loss {:.6f} ({} samples)", e.loss, e.samples);
    }
    metrics->push_back(iteration);
    const auto& m = metrics->back();
    log->info("iteration {}: loss {:.6f}, {:.1f} samples/s{}", m.iteration, m.loss, m.samples_per_s,
              held_out);
    if (!std::isfinite(m.loss) && !o.allow_nonfinite) {
      *stopped = nonfinite_loss(m.loss, m.iteration);
      break;
    }
  }
  return gp::ok_status();
}

// --checkpoint-dir: the trained parameters as the checkpoint of the last iteration.
gp::Status write_checkpoint(const ReferenceOptions& o, const gp::model::Graph& graph,
                            const graphpipe::v1::TrainingConfig& training,
                            gp::exec::ReferenceTrainer& trainer) {
  const int64_t last = o.iterations - 1;
  const std::string run_id = "reference-" + gp::utc_now_iso8601();
  std::error_code ec;
  std::filesystem::create_directories(o.checkpoint_dir, ec);  // for its lock file
  GP_ASSIGN_OR_RETURN(const auto lock,
                      gp::exec::CheckpointDirLock::acquire(o.checkpoint_dir, "--checkpoint-dir"));
  GP_ASSIGN_OR_RETURN(const auto stream,
                      gp::exec::data_stream(training.seed(), o.data, !o.no_shuffle, o.batch));
  GP_RETURN_IF_ERROR(gp::exec::write_stage_checkpoint(o.checkpoint_dir, last, graph,
                                                      trainer.mutable_runner(), run_id));
  GP_RETURN_IF_ERROR(gp::exec::commit_checkpoint(o.checkpoint_dir, last, graph, "reference",
                                                 training, run_id, &stream));
  gp::log::get("exec")->info("checkpoint of iteration {} written to {}", last, o.checkpoint_dir);
  return gp::ok_status();
}

gp::Status run_reference(ReferenceOptions o, bool* nonfinite) {
  GP_ASSIGN_OR_RETURN(const gp::exec::Device* device, device_from_flags(o.device, o.precision));
  graphpipe::v1::Plan plan;
  GP_ASSIGN_OR_RETURN(auto model, model_or_plan("reference", o.model, o.plan, &plan));
  graphpipe::v1::TrainingConfig training;
  GP_RETURN_IF_ERROR(training_settings(plan, o, &training));
  auto graph = gp::model::Graph::build(model);
  if (!graph.ok()) {
    return graph.status().with_context(o.plan.empty() ? "model '" + o.model + "'"
                                                      : "--plan " + o.plan + ": plan.model");
  }
  std::unique_ptr<gp::exec::NpyDataset> data;  // read by the trainer; outlives it
  if (!o.data.empty()) {
    GP_ASSIGN_OR_RETURN(data, gp::exec::open_stage_data(o.data, *graph, graph->topo_order(),
                                                        o.batch, !o.no_shuffle, training.seed()));
  }
  GP_ASSIGN_OR_RETURN(auto trainer,
                      gp::exec::ReferenceTrainer::create(*graph, o.batch, o.micro_batch, training,
                                                         *device, data.get()));
  std::unique_ptr<gp::exec::Evaluator> evaluator;
  if (!o.eval_data.empty()) {
    GP_ASSIGN_OR_RETURN(
        evaluator, gp::exec::Evaluator::create(*graph, o.eval_data, o.batch, training, *device));
  } else if (o.eval_every > 0) {
    return gp::invalid_argument("--eval-every " + std::to_string(o.eval_every) +
                                " needs --eval-data DIR (the held-out samples)");
  }
  auto log = gp::log::get("exec");
  if (data != nullptr) {
    log->info("data: {} samples from {} ({} iterations per epoch{})", data->samples(), o.data,
              data->samples() / o.batch, o.no_shuffle ? ", file order" : ", shuffled per epoch");
  }
  log->debug("training on {}", device->name());
  std::vector<gp::exec::IterationMetrics> metrics;
  gp::Status stopped;
  GP_RETURN_IF_ERROR(train(o, *trainer, evaluator.get(), &metrics, &stopped));
  if (!o.metrics_out.empty()) {
    GP_RETURN_IF_ERROR(
        gp::model::write_file_atomic(o.metrics_out, gp::exec::metrics_json(metrics)));
  }
  if (!stopped.ok()) {
    *nonfinite = true;
    return stopped;
  }
  if (!o.checkpoint_dir.empty()) {
    GP_RETURN_IF_ERROR(write_checkpoint(o, *graph, training, *trainer));
  }
  return gp::ok_status();
}

class ReferenceCommand final : public Command {
 public:
  explicit ReferenceCommand(CLI::App& app)
      : Command(app.add_subcommand("reference", "Train in one process (numerical reference)")) {
    add_model_flags();
    add_training_flags();
    cmd_->add_option("--metrics-out", o_.metrics_out, "write per-iteration metrics (JSON)");
    cmd_->add_flag("--allow-nonfinite", o_.allow_nonfinite,
                   "keep training when the loss is NaN or infinite (by default training stops "
                   "and the exit status is 3)");
    add_data_options(cmd_, o_.data, o_.no_shuffle);
    cmd_->add_option("--eval-data", o_.eval_data,
                     "held-out samples (a directory as --data's): their mean loss after the "
                     "last iteration, and every --eval-every, in the progress line and the "
                     "metrics (eval_loss)");
    cmd_->add_option("--eval-every", o_.eval_every,
                     "evaluate --eval-data every K iterations too (0: after the last only)")
        ->check(CLI::Range(0, 1 << 30));
    cmd_->add_option("--checkpoint-dir", o_.checkpoint_dir,
                     "write the trained parameters as a checkpoint here at the end (for "
                     "export, or run --resume)");
    add_device_options(cmd_, o_.device, o_.precision);
  }

  int run() override {
    o_.optimizer_given = optimizer_->count() > 0;
    o_.lr_given = lr_->count() > 0;
    o_.momentum_given = momentum_->count() > 0;
    o_.seed_given = seed_->count() > 0;
    o_.weight_decay_given = weight_decay_->count() > 0;
    o_.clip_grad_norm_given = clip_->count() > 0;
    bool nonfinite = false;
    const gp::Status status = run_reference(o_, &nonfinite);
    return training_exit_code(status, nonfinite);
  }

 private:
  // --model or --plan, and the batch sizes.
  void add_model_flags() {
    cmd_->add_option("--model", o_.model, "zoo:NAME[?k=v&...] or a model file");
    cmd_->add_option("--plan", o_.plan,
                     "instead of --model: a plan, whose model, mini-batch and training settings "
                     "it uses (flags given here override them)");
    // The planner's bound: buffer sizes (samples x elements) stay far from overflowing.
    cmd_->add_option("--batch", o_.batch, "mini-batch size (required with --model)")
        ->check(CLI::Range(int64_t{1}, gp::plan::kMaxMiniBatch));
    cmd_->add_option("--micro-batch", o_.micro_batch,
                     "split each mini-batch into chunks of this size (gradients accumulate)")
        ->check(CLI::Range(int64_t{1}, gp::plan::kMaxMiniBatch));
  }

  // The optimizer and its settings; the ones whose presence run() needs are kept.
  void add_training_flags() {
    cmd_->add_option("--iterations", o_.iterations, "optimizer steps")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 30));
    optimizer_ = cmd_->add_option("--optimizer", o_.optimizer, "sgd, momentum or adam")
                     ->capture_default_str();
    lr_ = cmd_->add_option("--lr", o_.learning_rate, "learning rate")->capture_default_str();
    momentum_ =
        cmd_->add_option("--momentum", o_.momentum, "momentum factor")->capture_default_str();
    weight_decay_ = cmd_->add_option("--weight-decay", o_.weight_decay,
                                     "L2 weight decay, as PyTorch's weight_decay");
    clip_ = cmd_->add_option(
        "--clip-grad-norm", o_.clip_grad_norm,
        "clip the gradients' L2 norm over the model at this, as torch.nn.utils.clip_grad_norm_ "
        "(0: no clipping)");
    seed_ = cmd_->add_option("--seed", o_.seed, "parameter and data seed")->capture_default_str();
  }

  ReferenceOptions o_;
  CLI::Option *optimizer_ = nullptr, *lr_ = nullptr, *momentum_ = nullptr, *weight_decay_ = nullptr,
              *clip_ = nullptr, *seed_ = nullptr;
};

}  // namespace

std::unique_ptr<Command> add_reference_command(CLI::App& app) {
  return std::make_unique<ReferenceCommand>(app);
}

}  // namespace gp::exec::daemon
