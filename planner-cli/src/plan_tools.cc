// compare, simulate, inspect and verify.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "gp/common/json_writer.h"
#include "gp/common/logging.h"
#include "gp/cost/cluster.h"
#include "gp/model/model_io.h"
#include "gp/model/zoo.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/report.h"
#include "gp/planner/verify.h"

namespace gp::plan_cli {

Result<graphpipe::v1::Plan> load_plan(const std::string& path, bool check_structure) {
  graphpipe::v1::Plan plan;
  GP_RETURN_IF_ERROR(model::read_message(path, &plan).with_context("--plan"));
  const std::string where = "--plan " + path;
  GP_RETURN_IF_ERROR(cost::validate_cluster(plan.cluster()).with_context(where + ": plan.cluster"));
  auto built = model::Graph::build(plan.model());
  if (!built.ok()) return built.status().with_context(where + ": plan.model");
  if (check_structure) {
    GP_RETURN_IF_ERROR(plan::validate_plan(plan, *built).status().with_context(where));
  }
  return plan;
}

void print_plan_table(const PlanningSetup& setup, int64_t mini_batch,
                      const std::vector<TableRow>& rows) {
  double best_baseline = 0;
  for (const auto& r : rows) {
    if (r.name != "graphpipe" && r.result->feasible) {
      best_baseline =
          std::max(best_baseline, r.result->plan.predicted().throughput_samples_per_s());
    }
  }
  // A mixed cluster lists its kinds ("16 x A100-SXM4-80GB + 16 x V100-SXM2-16GB").
  const std::string devices = cost::is_mixed(setup.cluster)
                                  ? planner::cluster_kinds_text(setup.cluster)
                                  : std::to_string(cost::num_devices(setup.cluster)) + " x " +
                                        setup.cluster.device().name();
  std::printf("\n%s on %s (%s), mini-batch %lld\n\n", setup.graph->model().name().c_str(),
              devices.c_str(), setup.cluster.name().c_str(), static_cast<long long>(mini_batch));
  std::printf("%-13s %8s %7s %6s %7s %6s %13s %12s %9s %11s %10s  %s\n", "strategy", "feasible",
              "stages", "depth", "devices", "mb", "samples/s", "iteration s", "bubbles", "peak mem",
              "search s", "vs best baseline");
  for (const auto& r : rows) {
    if (!r.result->feasible) {
      std::printf("%-13s %8s  %s (search %.3f s)\n", r.name.c_str(), "no",
                  r.result->infeasible_reason.c_str(), r.result->search_time_s);
      continue;
    }
    const auto& plan = r.result->plan;
    const auto& p = plan.predicted();
    std::string versus = "-";
    if (best_baseline > 0) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.2fx", p.throughput_samples_per_s() / best_baseline);
      versus = buf;
    }
    std::printf("%-13s %8s %7d %6d %7d %6lld %13.1f %12.4f %8.1f%% %11s %10.3f  %s\n",
                r.name.c_str(), "yes", plan.stages_size(), planner::pipeline_depth(plan),
                plan.programs_size(), static_cast<long long>(plan.stages(0).micro_batch()),
                p.throughput_samples_per_s(), p.iteration_time_s(), 100 * p.bubble_fraction(),
                planner::human_bytes(static_cast<double>(p.peak_memory_bytes())).c_str(),
                r.result->search_time_s, versus.c_str());
  }
}

Status run_compare(const SearchOptions& opts) {
  GP_ASSIGN_OR_RETURN(auto setup, prepare(opts));
  struct Row {
    std::string name;
    planner::SearchResult result;
  };
  std::vector<Row> rows;
  for (const auto& name : opts.strategies) {
    GP_ASSIGN_OR_RETURN(auto strategy, planner::parse_strategy(name));
    GP_ASSIGN_OR_RETURN(auto result, run_search_for(opts, setup, strategy));
    if (!opts.out_dir.empty()) {
      SearchOptions files = opts;
      files.out = opts.out_dir + "/" + name + ".pb";
      files.report = opts.out_dir + "/" + name + ".report.json";
      files.dot = opts.out_dir + "/" + name + ".dot";
      files.trace = opts.out_dir + "/" + name + ".trace.json";
      GP_RETURN_IF_ERROR(write_outputs(files, setup, result, strategy));
    }
    rows.push_back({name, std::move(result)});
  }
  std::vector<TableRow> table;
  for (const auto& r : rows) table.push_back({r.name, &r.result});
  print_plan_table(setup, opts.batch, table);
  bool any = false;
  for (const auto& r : rows) any = any || r.result.feasible;
  if (!any) return failed_precondition("no strategy found a feasible plan");
  return ok_status();
}

Status run_simulate(const PlanFileOptions& opts) {
  GP_ASSIGN_OR_RETURN(auto plan, load_plan(opts.plan));
  auto built = model::Graph::build(plan.model());
  if (!built.ok()) return built.status().with_context("--plan " + opts.plan + ": plan.model");
  GP_ASSIGN_OR_RETURN(auto models,
                      make_cost_models(plan.cluster(), plan.training().precision(), opts.profile));
  const sim::Simulator simulator(
      *models.devices, *models.comm,
      {plan.training().optimizer(), plan.training().precision(), models.compute.get()});
  auto sim = simulator.run(plan, *built, {!opts.trace.empty()});
  if (!sim.ok()) return sim.status().with_context("--plan " + opts.plan);
  if (sim->deadlocked) {
    return failed_precondition("--plan " + opts.plan +
                               ": the plan deadlocks: " + sim->deadlock_report());
  }
  GP_RETURN_IF_ERROR(
      planner::check_prediction(sim->iteration_time_us * 1e-6, sim->throughput_samples_per_s)
          .with_context("--plan " + opts.plan));
  sim::fill_predicted_metrics(*sim, &plan);
  std::printf(
      "iteration %.6f s, %.1f samples/s, bubbles %.1f%%, peak memory %s, %lld instructions\n",
      sim->iteration_time_us * 1e-6, sim->throughput_samples_per_s, 100 * sim->bubble_fraction,
      planner::human_bytes(static_cast<double>(sim->peak_memory_bytes)).c_str(),
      static_cast<long long>(sim->events_processed));
  for (const auto& st : sim->stages) {
    std::printf("  stage %3d  busy %.6f s  bubbles %5.1f%%  peak memory %s\n", st.stage,
                st.busy_us * 1e-6, 100 * st.bubble_fraction,
                planner::human_bytes(static_cast<double>(st.peak_memory_bytes)).c_str());
  }
  if (!opts.report.empty()) {
    planner::ReportContext ctx;
    ctx.strategy = std::string(plan::strategy_name(plan.provenance().strategy()));
    ctx.feasible = true;
    ctx.num_devices = cost::num_devices(plan.cluster());
    ctx.mini_batch = plan.mini_batch();
    ctx.search_time_s = plan.provenance().search_time_s();
    GP_RETURN_IF_ERROR(
        model::write_file_atomic(opts.report, planner::plan_report_json(ctx, &plan)));
  }
  if (!opts.trace.empty()) {
    GP_RETURN_IF_ERROR(model::write_file_atomic(opts.trace, sim::chrome_trace_json(plan, *sim)));
  }
  return ok_status();
}

Status run_inspect(const PlanFileOptions& opts) {
  GP_ASSIGN_OR_RETURN(auto plan, load_plan(opts.plan));
  if (!opts.json) {
    std::printf("%s", planner::inspect_text(plan).c_str());
    return ok_status();
  }
  const auto& c = plan.cluster();
  JsonWriter w(true);
  w.begin_object();
  w.field("model", plan.model().name());
  w.field("model_hash", plan.model_hash());
  w.field("cluster", c.name());
  w.field("nodes", c.num_nodes());
  w.field("devices_per_node", c.devices_per_node());
  w.field("device", c.device().name());
  w.field("ranks", plan.programs_size());
  w.field("stages", plan.stages_size());
  w.field("mini_batch", plan.mini_batch());
  w.key("stage_ranks").begin_array();
  for (const auto& st : plan.stages()) {
    w.begin_array();
    for (int r : st.device_ranks()) w.value(r);
    w.end_array();
  }
  w.end_array();
  if (cost::is_mixed(c)) {  // which kind each stage runs on
    w.key("stage_device_kinds").begin_array();
    for (const auto& st : plan.stages()) w.value(planner::stage_kinds_text(plan, st));
    w.end_array();
  }
  w.end_object();
  std::printf("%s\n", w.str().c_str());
  return ok_status();
}

Status run_verify(const PlanFileOptions& opts) {
  GP_ASSIGN_OR_RETURN(auto plan, load_plan(opts.plan, /*check_structure=*/false));
  planner::VerifyOptions vopts;
  graphpipe::v1::ModelGraph expected_model;
  graphpipe::v1::Cluster expected_cluster;
  if (!opts.model.empty()) {
    GP_ASSIGN_OR_RETURN(expected_model, model::load_model(opts.model));
    vopts.expected_model = &expected_model;
  }
  if (!opts.cluster.empty()) {
    GP_ASSIGN_OR_RETURN(auto cluster, cost::load_cluster(opts.cluster));
    const int n = opts.devices > 0 ? opts.devices : cost::num_devices(cluster);
    GP_ASSIGN_OR_RETURN(expected_cluster, cost::select_devices(cluster, n));
    vopts.expected_cluster = &expected_cluster;
  }
  GP_ASSIGN_OR_RETURN(auto models,
                      make_cost_models(plan.cluster(), plan.training().precision(), opts.profile));
  vopts.comm = models.comm.get();
  GP_ASSIGN_OR_RETURN(auto report, planner::verify_plan(plan, *models.devices, vopts));
  if (!report.ok()) {
    std::string all;
    for (const auto& p : report.problems) all += "\n  " + p;
    return failed_precondition("--plan " + opts.plan + " failed verification (" +
                               std::to_string(report.problems.size()) + " problem(s)):" + all);
  }
  std::printf(
      "%s: ok (%d stages, %d ranks, deadlock-free, peak memory %s of %s)\n", opts.plan.c_str(),
      plan.stages_size(), plan.programs_size(),
      planner::human_bytes(static_cast<double>(report.simulation.peak_memory_bytes)).c_str(),
      planner::human_bytes(static_cast<double>(plan.cluster().device().memory_capacity_bytes()))
          .c_str());
  return ok_status();
}

Command add_compare_command(CLI::App& app) {
  auto opts = std::make_shared<SearchOptions>();
  auto* compare =
      app.add_subcommand("compare", "Search with several strategies and print a comparison table");
  add_search_options(compare, opts.get(), /*compare=*/true);
  compare->add_option("--out-dir", opts->out_dir,
                      "write each strategy's plan, report, trace and stage graph here");
  return {compare, [opts](const std::string& command_line) {
            opts->command_line = command_line;
            return run_compare(*opts);
          }};
}

Command add_simulate_command(CLI::App& app) {
  auto opts = std::make_shared<PlanFileOptions>();
  auto* simulate = app.add_subcommand("simulate", "Simulate a plan file: time, bubbles, memory");
  simulate->add_option("--plan", opts->plan, "plan file")->required();
  simulate->add_option("--report", opts->report, "write a JSON report");
  simulate->add_option("--trace", opts->trace, "write the simulated Chrome trace");
  simulate->add_option("--profile", opts->profile, "profile DB for measured costs");
  return {simulate, [opts](const std::string&) { return run_simulate(*opts); }};
}

Command add_inspect_command(CLI::App& app) {
  auto opts = std::make_shared<PlanFileOptions>();
  auto* inspect = app.add_subcommand("inspect", "Print a readable summary with the stage graph");
  inspect->add_option("--plan", opts->plan, "plan file")->required();
  inspect->add_flag("--json", opts->json,
                    "print the plan's shape as JSON (ranks, nodes, devices_per_node, stages, "
                    "mini_batch, model hash), for scripts");
  return {inspect, [opts](const std::string&) { return run_inspect(*opts); }};
}

Command add_verify_command(CLI::App& app) {
  auto opts = std::make_shared<PlanFileOptions>();
  auto* verify = app.add_subcommand(
      "verify", "Check a plan: coverage, acyclicity, memory, matched sends, deadlock freedom");
  verify->add_option("--plan", opts->plan, "plan file")->required();
  verify->add_option("--model", opts->model, "reject the plan unless it is for this model");
  verify->add_option("--cluster", opts->cluster, "reject the plan unless it is for this cluster");
  verify
      ->add_option("--devices", opts->devices, "with --cluster: its first N devices (default: all)")
      ->check(CLI::Range(1, 1 << 16));
  verify->add_option("--profile", opts->profile, "profile DB for measured costs");
  return {verify, [opts](const std::string&) { return run_verify(*opts); }};
}

}  // namespace gp::plan_cli
