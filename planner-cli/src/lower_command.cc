// graphpipe-plan lower: an external stage assignment turned into a verified, simulated plan.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "gp/cost/cluster.h"
#include "gp/model/model_io.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/lower.h"
#include "gp/planner/recompute.h"
#include "gp/planner/report.h"
#include "gp/planner/shard_optimizer.h"
#include "gp/planner/verify.h"

namespace gp::plan_cli {

namespace {

// The order a file lists its stages in is not part of a graph pipeline: says which placement
// order a DAG lowering used (plan stage i is the file's stages[order[i]], on the ranks after
// those of plan stages 0..i-1).
void print_stage_order(const planner::LoweredPlan& lowered) {
  if (lowered.lowering != "dag") return;
  std::string order;
  for (int s : lowered.stage_order) order += (order.empty() ? "" : ", ") + std::to_string(s);
  std::printf(
      "\nlowered/dag placed the file's stages in the order %s (the fastest order made from the "
      "stage graph; the file's order does not matter)\n",
      order.c_str());
}

}  // namespace

Status run_lower(const LowerOptions& opts) {
  const SearchOptions& so = opts.search;
  GP_RETURN_IF_ERROR(model::format_for_path(so.out).status().with_context("--out"));
  GP_RETURN_IF_ERROR(model::check_output_path("--out", so.out));
  GP_ASSIGN_OR_RETURN(const auto lowering, planner::parse_lowering(opts.lowering));
  std::vector<graphpipe::v1::Strategy> strategies;
  for (const auto& name : opts.compare) {
    auto strategy = planner::parse_strategy(name);
    if (!strategy.ok()) return strategy.status().with_context("--compare");
    strategies.push_back(*strategy);
  }
  graphpipe::v1::StageAssignmentFile file;
  GP_RETURN_IF_ERROR(model::read_message(opts.assignment, &file).with_context("--assignment"));
  GP_ASSIGN_OR_RETURN(auto setup, prepare(so));
  auto stages =
      planner::resolve_assignment(file, *setup.graph, cost::num_devices(setup.cluster), so.batch);
  if (!stages.ok()) return stages.status().with_context("--assignment " + opts.assignment);

  planner::LowerRequest req;
  req.graph = setup.graph.get();
  req.cluster = setup.cluster;
  req.mini_batch = so.batch;
  req.training = setup.training;
  req.compute = setup.compute.get();
  req.device_costs = setup.device_costs.get();
  req.comm = setup.comm.get();
  req.stages = std::move(stages).value();
  req.lowering = lowering;
  req.micro_batches = so.micro_batches;
  GP_ASSIGN_OR_RETURN(req.recompute, planner::parse_recompute_mode(so.recompute));
  GP_ASSIGN_OR_RETURN(req.shard_optimizer, planner::parse_shard_mode(so.shard_optimizer));
  auto lowered = planner::lower_assignment(req);
  if (!lowered.ok()) return lowered.status().with_context("--assignment " + opts.assignment);

  const planner::LoweredPlan* best = nullptr;
  for (auto& l : *lowered) {
    if (!l.result.feasible) continue;
    const auto& p = l.result.plan.predicted();
    GP_RETURN_IF_ERROR(planner::check_prediction(p.iteration_time_s(), p.throughput_samples_per_s())
                           .with_context("lowered/" + l.lowering + " plan"));
    l.result.plan.mutable_provenance()->set_planner_version(GP_PLANNER_VERSION);
    l.result.plan.mutable_provenance()->set_command_line(so.command_line);
    l.result.plan.mutable_provenance()->set_profile_hash(setup.profile_hash);
    if (best == nullptr || l.result.plan.predicted().throughput_samples_per_s() >
                               best->result.plan.predicted().throughput_samples_per_s()) {
      best = &l;
    }
  }
  std::vector<planner::SearchResult> searched;
  searched.reserve(strategies.size());
  for (auto strategy : strategies) {
    GP_ASSIGN_OR_RETURN(auto result, run_search_for(so, setup, strategy));
    searched.push_back(std::move(result));
  }
  std::vector<TableRow> rows;
  for (const auto& l : *lowered) rows.push_back({"lowered/" + l.lowering, &l.result});
  for (size_t i = 0; i < strategies.size(); ++i) {
    rows.push_back({std::string(plan::strategy_name(strategies[i])), &searched[i]});
  }
  print_plan_table(setup, so.batch, rows);

  if (best == nullptr) {
    std::string why;
    for (const auto& l : *lowered)
      why += (why.empty() ? "" : "; ") + l.lowering + ": " + l.result.infeasible_reason;
    return failed_precondition("--assignment " + opts.assignment + ": no lowering fits: " + why);
  }
  // The same gate as search: never write a plan the verifier would reject.
  GP_ASSIGN_OR_RETURN(auto report, planner::verify_plan(best->result.plan, device_costs_of(setup)));
  if (!report.ok()) {
    return internal_error("the lowered plan failed verification: " + report.problems[0]);
  }
  GP_RETURN_IF_ERROR(write_outputs(so, setup, best->result, graphpipe::v1::STRATEGY_MANUAL));
  print_stage_order(*best);
  const auto& p = best->result.plan.predicted();
  std::printf(
      "\nlowered/%s: %d stages (depth %d) on %d devices, %.1f samples/s predicted, "
      "peak memory %s -> %s\n",
      best->lowering.c_str(), best->result.plan.stages_size(),
      planner::pipeline_depth(best->result.plan), best->result.plan.programs_size(),
      p.throughput_samples_per_s(),
      planner::human_bytes(static_cast<double>(p.peak_memory_bytes())).c_str(), so.out.c_str());
  // The memory choices, as the search and inspect print them.
  if (const std::string why = planner::recompute_summary(best->result.plan); !why.empty()) {
    std::printf("recomputation:\n%s", why.c_str());
  }
  if (const std::string why = planner::shard_summary(best->result.plan); !why.empty()) {
    std::printf("optimizer state sharding:\n%s", why.c_str());
  }
  return ok_status();
}

Command add_lower_command(CLI::App& app) {
  auto opts = std::make_shared<LowerOptions>();
  auto* lower = app.add_subcommand(
      "lower",
      "Turn your own stage assignment (from PipeDream, Piper, Megatron or by hand) into a "
      "verified plan: placed, scheduled, lowered and simulated like a searched plan "
      "(format: docs/plan-format.md)");
  lower
      ->add_option("--assignment", opts->assignment,
                   "stage assignment file (.json, .pbtxt or .pb): per stage its op ids, "
                   "replicas and optionally micro_batch")
      ->required();
  add_search_options(lower, &opts->search, /*compare=*/false);
  lower->remove_option(lower->get_option("--strategy"));
  lower->remove_option(lower->get_option("--per-stage-microbatch"));
  lower->remove_option(lower->get_option("--uniform-microbatch"));
  lower->remove_option(lower->get_option("--piper-downset-limit"));
  lower->remove_option(lower->get_option("--piper-compress-branches"));
  for (const char* effort : {"--effort", "--effort-trials", "--effort-seed"}) {
    lower->remove_option(lower->get_option(effort));
  }
  lower
      ->add_option("--lowering", opts->lowering,
                   "chain (tensors relayed along a sequential pipeline), dag (graph pipeline) or "
                   "best (both; the faster simulated plan is written)")
      ->capture_default_str();
  lower
      ->add_option("--compare", opts->compare,
                   "also search with these strategies and show them in the same table, e.g. "
                   "graphpipe,sequential")
      ->delimiter(',');
  lower->add_option("--out", opts->search.out, "plan file to write (.pb, .pbtxt or .json)")
      ->required();
  lower->add_option("--report", opts->search.report, "write a JSON report of the plan");
  lower->add_option("--trace", opts->search.trace, "write the simulated Chrome trace");
  lower->add_option("--dot", opts->search.dot, "write the stage graph as Graphviz");
  return {lower, [opts](const std::string& command_line) {
            opts->search.command_line = command_line;
            return run_lower(*opts);
          }};
}

}  // namespace gp::plan_cli
