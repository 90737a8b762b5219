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
#include "shared_flags.h"

namespace gp::exec::daemon {
namespace {

struct LocalOptions {
  std::string plan;
  int iterations = 5;
  int timeout_s = 60;
  std::string metrics_out;
  std::string trace;
  std::string device = "cpu";
  std::string precision = "fp32";
  std::string data;
  bool no_shuffle = false;
  bool allow_nonfinite = false;
};

// Per-iteration metrics of the ranks' losses, the run's time spread evenly over them.
std::vector<gp::exec::IterationMetrics> iteration_metrics(const std::vector<double>& losses,
                                                          double elapsed, int64_t mini_batch) {
  auto log = gp::log::get("exec");
  std::vector<gp::exec::IterationMetrics> metrics;
  for (size_t i = 0; i < losses.size(); ++i) {
    gp::exec::IterationMetrics m;
    m.iteration = static_cast<int64_t>(i);
    m.loss = losses[i];
    m.time_s = elapsed / static_cast<double>(losses.size());
    m.samples_per_s = static_cast<double>(mini_batch) / m.time_s;
    metrics.push_back(m);
    log->info("iteration {}: loss {:.6f}", m.iteration, m.loss);
  }
  return metrics;
}

gp::Status run_local(const LocalOptions& o, bool* nonfinite) {
  GP_ASSIGN_OR_RETURN(const gp::exec::Device* device, device_from_flags(o.device, o.precision));
  GP_ASSIGN_OR_RETURN(const auto loaded, gp::plan::LoadedPlan::read(o.plan));
  const graphpipe::v1::Plan& plan = loaded->plan();
  auto log = gp::log::get("exec");
  log->info("running {} ranks of {} as threads of this process on {}, {} iterations",
            plan.programs_size(), o.plan, device->name(), o.iterations);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<gp::exec::RankSession>> sessions;
  size_t trace_events = 0;
  if (!o.trace.empty()) {
    for (const auto& prog : plan.programs()) {
      trace_events = std::max<size_t>(trace_events, static_cast<size_t>(prog.instructions_size()) *
                                                        static_cast<size_t>(o.iterations));
    }
  }
  auto run = gp::exec::run_plan_locally(loaded, o.iterations, std::chrono::seconds(o.timeout_s),
                                        &sessions, trace_events, *device, o.data, !o.no_shuffle);
  if (!run.ok()) return run.status().with_context("--plan " + o.plan);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::vector<gp::exec::IterationMetrics> metrics =
      iteration_metrics(run->losses, elapsed, plan.mini_batch());
  // The ranks ran every iteration; the metrics keep them all, and the exit says where it broke.
  gp::Status stopped;
  for (const auto& m : metrics) {
    if (!std::isfinite(m.loss) && !o.allow_nonfinite) {
      stopped = nonfinite_loss(m.loss, m.iteration);
      break;
    }
  }
  log->info("{:.1f} samples/s over {} iterations",
            static_cast<double>(plan.mini_batch()) * static_cast<double>(metrics.size()) / elapsed,
            metrics.size());
  if (!o.metrics_out.empty()) {
    GP_RETURN_IF_ERROR(
        gp::model::write_file_atomic(o.metrics_out, gp::exec::metrics_json(metrics)));
  }
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
    cmd_->add_option("--metrics-out", o_.metrics_out, "write per-iteration metrics (JSON)");
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
