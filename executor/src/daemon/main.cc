// graphpipe-executor: trains models. This version runs the single-process numerical reference;
// the per-rank daemon that runs a plan's instruction stream is built on the same StageRunner.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "gp/common/cli.h"
#include "gp/common/logging.h"
#include "gp/common/version.h"
#include "gp/exec/rank_runner.h"
#include "gp/exec/reference_trainer.h"
#include "gp/graph/model_io.h"
#include "gp/graph/zoo.h"

namespace {

struct ReferenceOptions {
  std::string model;
  int64_t batch = 0;
  int64_t micro_batch = 0;
  int iterations = 5;
  std::string optimizer = "sgd";
  double learning_rate = 0.01;
  double momentum = 0.9;
  uint64_t seed = 1;
  std::string metrics_out;
};

gp::Status run_reference(const ReferenceOptions& o) {
  GP_ASSIGN_OR_RETURN(auto model, gp::graph::load_model(o.model));
  auto graph = gp::graph::Graph::build(model);
  if (!graph.ok()) return graph.status().with_context("model '" + o.model + "'");
  graphpipe::v1::TrainingConfig training;
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
  training.set_learning_rate(o.learning_rate);
  training.set_seed(o.seed);
  GP_ASSIGN_OR_RETURN(auto trainer,
                      gp::exec::ReferenceTrainer::create(*graph, o.batch, o.micro_batch, training));
  auto log = gp::log::get("exec");
  std::vector<gp::exec::IterationMetrics> metrics;
  for (int it = 0; it < o.iterations; ++it) {
    metrics.push_back(trainer->run_iteration(it));
    const auto& m = metrics.back();
    log->info("iteration {}: loss {:.6f}, {:.1f} samples/s", m.iteration, m.loss, m.samples_per_s);
  }
  if (!o.metrics_out.empty()) {
    GP_RETURN_IF_ERROR(
        gp::graph::write_file_atomic(o.metrics_out, gp::exec::metrics_json(metrics)));
  }
  return gp::ok_status();
}

struct LocalOptions {
  std::string plan;
  int iterations = 5;
  int timeout_s = 60;
  std::string metrics_out;
};

gp::Status run_local(const LocalOptions& o) {
  graphpipe::v1::Plan plan;
  GP_RETURN_IF_ERROR(gp::graph::read_message(o.plan, &plan).with_context("--plan"));
  auto log = gp::log::get("exec");
  log->info("running {} ranks of {} as threads of this process, {} iterations",
            plan.programs_size(), o.plan, o.iterations);
  const auto start = std::chrono::steady_clock::now();
  auto run = gp::exec::run_plan_locally(plan, o.iterations, std::chrono::seconds(o.timeout_s));
  if (!run.ok()) return run.status().with_context("--plan " + o.plan);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<gp::exec::IterationMetrics> metrics;
  for (size_t i = 0; i < run->losses.size(); ++i) {
    gp::exec::IterationMetrics m;
    m.iteration = static_cast<int64_t>(i);
    m.loss = run->losses[i];
    m.time_s = elapsed / static_cast<double>(run->losses.size());
    m.samples_per_s = static_cast<double>(plan.mini_batch()) / m.time_s;
    metrics.push_back(m);
    log->info("iteration {}: loss {:.6f}", m.iteration, m.loss);
  }
  log->info("{:.1f} samples/s over {} iterations",
            static_cast<double>(plan.mini_batch()) * static_cast<double>(metrics.size()) / elapsed,
            metrics.size());
  if (!o.metrics_out.empty()) {
    GP_RETURN_IF_ERROR(
        gp::graph::write_file_atomic(o.metrics_out, gp::exec::metrics_json(metrics)));
  }
  return gp::ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "graphpipe-executor: train a model. `reference` trains it in one process without "
      "pipelining: the numerical reference that every plan must reproduce."};
  app.set_version_flag("--version", std::string("graphpipe-executor ") + GP_VERSION_STRING);
  std::string log_level;
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");
  app.require_subcommand(1);
  ReferenceOptions ref;
  auto* reference = app.add_subcommand("reference", "Train in one process (numerical reference)");
  reference->add_option("--model", ref.model, "zoo:NAME[?k=v&...] or a model file")->required();
  reference->add_option("--batch", ref.batch, "mini-batch size")->required();
  reference->add_option("--micro-batch", ref.micro_batch,
                        "split each mini-batch into chunks of this size (gradients accumulate)");
  reference->add_option("--iterations", ref.iterations, "optimizer steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  reference->add_option("--optimizer", ref.optimizer, "sgd, momentum or adam")
      ->capture_default_str();
  reference->add_option("--lr", ref.learning_rate, "learning rate")->capture_default_str();
  reference->add_option("--momentum", ref.momentum, "momentum factor")->capture_default_str();
  reference->add_option("--seed", ref.seed, "parameter and data seed")->capture_default_str();
  reference->add_option("--metrics-out", ref.metrics_out, "write per-iteration metrics (JSON)");
  LocalOptions local;
  auto* local_cmd = app.add_subcommand(
      "local", "Run every rank of a plan as threads of this process (in-process data plane)");
  local_cmd->add_option("--plan", local.plan, "plan file from graphpipe-plan search")->required();
  local_cmd->add_option("--iterations", local.iterations, "training iterations")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  local_cmd
      ->add_option("--timeout", local.timeout_s,
                   "seconds a rank waits for a peer before the run fails")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  local_cmd->add_option("--metrics-out", local.metrics_out, "write per-iteration metrics (JSON)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? gp::cli::kExitOk : gp::cli::kExitBadInput;
  }
  if (auto st = gp::log::init("graphpipe-executor", log_level); !st.ok()) {
    return gp::cli::report("graphpipe-executor", st);
  }
  if (local_cmd->parsed()) return gp::cli::report("graphpipe-executor", run_local(local));
  return gp::cli::report("graphpipe-executor", run_reference(ref));
}
