// graphpipe-executor local: runs every rank of a plan as threads of this process, the data
// plane in memory.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "commands.h"
#include "gp/common/logging.h"
#include "gp/exec/rank_runner.h"
#include "gp/exec/rank_session.h"
#include "gp/exec/reference_trainer.h"
#include "gp/model/model_io.h"
#include "job/job_outputs.h"
#include "shared_flags.h"

namespace gp::exec::daemon {
namespace {

struct LocalOptions {
  std::string plan;
  int iterations = 5;
  int timeout_s = 60;
  std::string metrics_out;
  std::string tensorboard;
  std::string trace;
  std::string device = "cpu";
  std::string precision = "fp32";
  std::string data;
  bool no_shuffle = false;
  bool allow_nonfinite = false;
  int log_every = 1;
};

// Each loss rank's iteration as the coordinator would have it reported, with the gradient norm
// where clipping computed it.
graphpipe::v1::ReportMetricsRequest loss_report(const gp::exec::RankSession& session,
                                                int64_t iteration, double loss, double time_s) {
  graphpipe::v1::ReportMetricsRequest report;
  report.set_rank(session.rank());
  auto* m = report.add_iterations();
  m->set_iteration(iteration);
  m->set_loss(loss);
  m->set_time_s(time_s);
  const double grad_norm = session.runner().grad_norm();
  if (!std::isnan(grad_norm)) m->set_grad_norm(grad_norm);
  return report;
}

gp::Status run_local(const LocalOptions& o, bool* nonfinite) {
  GP_ASSIGN_OR_RETURN(const gp::exec::Device* device, device_from_flags(o.device, o.precision));
  GP_ASSIGN_OR_RETURN(const auto loaded, gp::plan::LoadedPlan::read(o.plan));
  const graphpipe::v1::Plan& plan = loaded->plan();
  auto log = gp::log::get("exec");
  log->info("running {} ranks of {} as threads of this process on {}, {} iterations",
            plan.programs_size(), o.plan, device->name(), o.iterations);
  GP_RETURN_IF_ERROR(check_writable("--metrics-out", o.metrics_out));
  // The same progress lines and metrics file as `run` writes, as the iterations complete.
  ProgressOptions po;
  po.mini_batch = plan.mini_batch();
  po.loss_ranks = count_loss_ranks(plan, loaded->graph());
  po.iterations = o.iterations;
  po.log_every = o.log_every;
  po.training = plan.training();
  po.predicted_samples_per_s = plan.predicted().throughput_samples_per_s();
  po.metrics_out = o.metrics_out;
  po.tensorboard = o.tensorboard;
  ProgressLog progress(std::move(po));
  GP_RETURN_IF_ERROR(progress.open(0));
  std::vector<std::unique_ptr<gp::exec::RankSession>> sessions;
  size_t trace_events = 0;
  if (!o.trace.empty()) {
    for (const auto& prog : plan.programs()) {
      trace_events = std::max<size_t>(trace_events, static_cast<size_t>(prog.instructions_size()) *
                                                        static_cast<size_t>(o.iterations));
    }
  }
  progress.start();
  auto run = gp::exec::run_plan_locally(
      loaded, o.iterations, std::chrono::seconds(o.timeout_s), &sessions, trace_events, *device,
      o.data, !o.no_shuffle,
      [&progress](const gp::exec::RankSession& s, int64_t it, double loss, double time_s) {
        if (s.runner().stage_runner().has_loss()) progress.add(loss_report(s, it, loss, time_s));
      });
  if (!run.ok()) return run.status().with_context("--plan " + o.plan);
  progress.finish();
  // The ranks ran every iteration; the metrics keep them all, and the exit says where it broke.
  gp::Status stopped;
  for (size_t i = 0; i < run->losses.size(); ++i) {
    if (!std::isfinite(run->losses[i]) && !o.allow_nonfinite) {
      stopped = nonfinite_loss(run->losses[i], static_cast<int64_t>(i));
      break;
    }
  }
  GP_RETURN_IF_ERROR(progress.write_metrics());
  if (!o.trace.empty()) {
    std::vector<std::pair<int, std::vector<gp::exec::TraceEvent>>> events;
    for (const auto& s : sessions) events.emplace_back(s->rank(), s->runner().trace());
    GP_RETURN_IF_ERROR(
        gp::model::write_file_atomic(o.trace, gp::exec::measured_trace_json(plan, events)));
  }
  if (!stopped.ok()) *nonfinite = true;
  return stopped;
}

class LocalCommand final : public Command {
 public:
  explicit LocalCommand(CLI::App& app)
      : Command(app.add_subcommand(
            "local",
            "Run every rank of a plan as threads of this process (in-process data plane)")) {
    cmd_->add_option("--plan", o_.plan, "plan file from graphpipe-plan search")->required();
    cmd_->add_option("--iterations", o_.iterations, "training iterations")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 30));
    cmd_->add_option("--timeout", o_.timeout_s,
                     "seconds a rank waits for a peer before the run fails")
        ->capture_default_str()
        ->check(CLI::Range(1, 86400));
    cmd_->add_option("--metrics-out", o_.metrics_out,
                     "write metrics: FILE.jsonl gets one JSON line per logged iteration as the "
                     "run goes; any other name a JSON file of every iteration at the end");
    cmd_->add_option("--tensorboard", o_.tensorboard,
                     "also write the logged iterations as TensorBoard event files in this "
                     "directory, created if need be (view: tensorboard --logdir DIR)");
    cmd_->add_option("--log-every", o_.log_every,
                     "log iteration, loss, windowed samples/s and ETA every N iterations (and "
                     "write a .jsonl line)")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 30));
    cmd_->add_flag("--allow-nonfinite", o_.allow_nonfinite,
                   "do not fail when the loss is NaN or infinite (by default the exit status "
                   "is 3, naming the first such iteration)");
    cmd_->add_option("--trace", o_.trace,
                     "write the measured Chrome trace (the simulator's format, for comparison)");
    add_data_options(cmd_, o_.data, o_.no_shuffle);
    add_device_options(cmd_, o_.device, o_.precision, " (every rank shares it)");
  }

  int run() override {
    bool nonfinite = false;
    const gp::Status status = run_local(o_, &nonfinite);
    return training_exit_code(status, nonfinite);
  }

 private:
  LocalOptions o_;
};

}  // namespace

std::unique_ptr<Command> add_local_command(CLI::App& app) {
  return std::make_unique<LocalCommand>(app);
}

}  // namespace gp::exec::daemon
