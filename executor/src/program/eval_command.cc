// graphpipe-executor eval: the held-out loss of a checkpoint (any plan's, or the reference's) over
// a data directory, in one process: how a pipelined run's checkpoints are evaluated.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "gp/common/cli.h"
#include "gp/common/json_writer.h"
#include "gp/common/logging.h"
#include "gp/exec/evaluator.h"
#include "gp/plan/plan_util.h"
#include "runtime/checkpoint.h"
#include "shared_flags.h"

namespace gp::exec::daemon {
namespace {

struct EvalOptions {
  std::string model, plan, checkpoint, data;
  int64_t batch = 0;  // 0: the plan's mini-batch, else 256
  std::string device = "cpu", precision = "fp32";
  bool json = false;
};

constexpr int64_t kDefaultEvalBatch = 256;

gp::Status run_eval(const EvalOptions& o) {
  GP_ASSIGN_OR_RETURN(const gp::exec::Device* device, device_from_flags(o.device, o.precision));
  graphpipe::v1::Plan plan;
  GP_ASSIGN_OR_RETURN(auto model, model_or_plan("eval", o.model, o.plan, &plan));
  auto graph = gp::model::Graph::build(model);
  if (!graph.ok()) {
    return graph.status().with_context(o.plan.empty() ? "model '" + o.model + "'"
                                                      : "--plan " + o.plan + ": plan.model");
  }
  std::vector<std::string> notes;
  GP_ASSIGN_OR_RETURN(auto manifest, gp::exec::latest_checkpoint(o.checkpoint, &notes));
  auto log = gp::log::get("exec");
  for (const auto& n : notes) log->warn("--checkpoint {}: {}", o.checkpoint, n);
  // Only the optimizer's state layout matters for loading; nothing steps.
  graphpipe::v1::TrainingConfig training;
  training.set_optimizer(manifest.optimizer());
  training.set_learning_rate(1);
  if (manifest.optimizer() == graphpipe::v1::OPTIMIZER_KIND_MOMENTUM) training.set_momentum(0.9);
  const int64_t batch = o.batch > 0             ? o.batch
                        : plan.mini_batch() > 0 ? plan.mini_batch()
                                                : kDefaultEvalBatch;
  GP_ASSIGN_OR_RETURN(auto evaluator, gp::exec::Evaluator::create(*graph, o.data, batch, training,
                                                                  *device, "--data"));
  GP_RETURN_IF_ERROR(gp::exec::load_stage_checkpoint(o.checkpoint, manifest, *graph, training,
                                                     evaluator->mutable_runner())
                         .with_context("--checkpoint " + o.checkpoint));
  GP_ASSIGN_OR_RETURN(const auto r, evaluator->evaluate());
  if (o.json) {
    gp::JsonWriter w(/*pretty=*/false);
    w.begin_object()
        .field("iteration", manifest.iteration())
        .field("samples", r.samples)
        .field("loss", r.loss)
        .field("time_s", r.time_s)
        .end_object();
    std::printf("%s\n", w.str().c_str());
  } else {
    std::printf("held-out loss %.6f over %lld samples of %s (checkpoint of iteration %lld)\n",
                r.loss, static_cast<long long>(r.samples), o.data.c_str(),
                static_cast<long long>(manifest.iteration()));
  }
  return gp::ok_status();
}

class EvalCommand final : public Command {
 public:
  explicit EvalCommand(CLI::App& app)
      : Command(app.add_subcommand(
            "eval",
            "Evaluate a checkpoint: its mean loss over every sample of a data directory "
            "(held-out data, the layout --data of training reads), forward only, in one "
            "process")) {
    cmd_->add_option("--checkpoint", o_.checkpoint,
                     "checkpoint directory (its newest complete checkpoint)")
        ->required();
    cmd_->add_option("--data", o_.data, "directory of <input op id>.npy files, samples first")
        ->required();
    cmd_->add_option("--model", o_.model, "the model that was trained (or --plan)");
    cmd_->add_option("--plan", o_.plan, "a plan of the model that was trained");
    cmd_->add_option("--batch", o_.batch,
                     "samples per forward (default: the plan's mini-batch, else 256; the loss "
                     "is the same, batch_norm's statistics aside)")
        ->check(CLI::Range(int64_t{1}, gp::plan::kMaxMiniBatch));
    cmd_->add_flag("--json", o_.json,
                   "print {\"iteration\", \"samples\", \"loss\", \"time_s\"} as one JSON line");
    add_device_options(cmd_, o_.device, o_.precision);
  }

  int run() override { return gp::cli::report("graphpipe-executor", run_eval(o_)); }

 private:
  EvalOptions o_;
};

}  // namespace

std::unique_ptr<Command> add_eval_command(CLI::App& app) {
  return std::make_unique<EvalCommand>(app);
}

}  // namespace gp::exec::daemon
