// graphpipe-plan report: the plan report as one HTML file (html_report.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <memory>

#include "commands.h"
#include "gp/common/file_read.h"
#include "gp/model/model_io.h"
#include "gp/sim/simulator.h"
#include "html_report/html_report.h"

namespace gp::plan_cli {
namespace {

struct ReportOptions {
  std::string plan;
  std::string metrics;
  std::string trace;
  std::string profile;
  std::string out;
};

// A measured trace must be of this plan: every rank it shows runs here, the stage it ran there.
Status check_trace_matches(const graphpipe::v1::Plan& plan,
                           const plan_report::MeasuredIteration& measured,
                           const std::string& where) {
  std::map<int, int> stage_of;
  for (const auto& p : plan.programs()) stage_of[p.rank()] = p.stage();
  for (const auto& s : measured.spans) {
    const auto it = stage_of.find(s.rank);
    if (it == stage_of.end()) {
      return invalid_argument(where + ": rank " + std::to_string(s.rank) +
                              " is not a rank of the plan (a trace of another plan?)");
    }
    if (s.stage >= 0 && s.stage != it->second) {
      return invalid_argument(where + ": rank " + std::to_string(s.rank) + " ran stage " +
                              std::to_string(s.stage) + " in the trace but runs stage " +
                              std::to_string(it->second) +
                              " in the plan (a trace of another "
                              "plan?)");
    }
  }
  return ok_status();
}

Result<std::string> read_input(const char* flag, const std::string& path) {
  auto text = read_regular_file(path);
  if (!text.ok()) return text.status().with_context(flag);
  return text;
}

Status run_report(const ReportOptions& o) {
  GP_RETURN_IF_ERROR(model::check_output_path("--out", o.out));
  GP_ASSIGN_OR_RETURN(auto plan, load_plan(o.plan));
  std::optional<std::vector<plan_report::MetricsPoint>> metrics;
  if (!o.metrics.empty()) {
    GP_ASSIGN_OR_RETURN(const std::string text, read_input("--metrics", o.metrics));
    GP_ASSIGN_OR_RETURN(metrics,
                        plan_report::parse_metrics("--metrics " + o.metrics, o.metrics, text));
  }
  std::optional<plan_report::MeasuredIteration> measured;
  if (!o.trace.empty()) {
    GP_ASSIGN_OR_RETURN(const std::string text, read_input("--trace", o.trace));
    GP_ASSIGN_OR_RETURN(measured, plan_report::parse_measured_trace("--trace " + o.trace, text));
    GP_RETURN_IF_ERROR(check_trace_matches(plan, *measured, "--trace " + o.trace));
  }
  auto built = model::Graph::build(plan.model());
  if (!built.ok()) return built.status().with_context("--plan " + o.plan + ": plan.model");
  GP_ASSIGN_OR_RETURN(auto models,
                      make_cost_models(plan.cluster(), plan.training().precision(), o.profile));
  const sim::Simulator simulator(
      *models.devices, *models.comm,
      {plan.training().optimizer(), plan.training().precision(), models.compute.get()});
  auto sim = simulator.run(plan, *built, {/*record_events=*/true});
  if (!sim.ok()) return sim.status().with_context("--plan " + o.plan);
  if (sim->deadlocked) {
    return failed_precondition("--plan " + o.plan +
                               ": the plan deadlocks: " + sim->deadlock_report());
  }
  plan_report::ReportData data;
  data.plan = &plan;
  data.sim = &*sim;
  data.plan_name = o.plan;
  if (metrics) data.metrics = &*metrics, data.metrics_name = o.metrics;
  if (measured) data.measured = &*measured, data.trace_name = o.trace;
  GP_RETURN_IF_ERROR(model::write_file_atomic(o.out, plan_report::html_report(data)));
  std::printf("report of %s (%d stages, bottleneck stage %d) -> %s\n", o.plan.c_str(),
              plan.stages_size(), plan_report::bottleneck_stage(*sim), o.out.c_str());
  return ok_status();
}

}  // namespace

Command add_report_command(CLI::App& app) {
  auto opts = std::make_shared<ReportOptions>();
  auto* report = app.add_subcommand(
      "report",
      "Write a plan report: one self-contained HTML page (no network, no scripts) with the\n"
      "stage graph, one iteration's timeline per device, memory per device and, given the\n"
      "executor's outputs, the measured iteration, the loss curve and samples/s against the\n"
      "prediction");
  report->add_option("plan,--plan", opts->plan, "the plan file, as search or lower wrote it")
      ->required();
  report
      ->add_option("--metrics", opts->metrics,
                   "the executor's --metrics-out file (.jsonl, or .json): adds the loss curve and "
                   "samples/s against the plan's predicted rate")
      ->type_name("FILE");
  report
      ->add_option("--trace", opts->trace,
                   "the executor's --trace file (its measured Chrome trace): draws its last "
                   "iteration under the predicted one")
      ->type_name("FILE");
  report->add_option("--profile", opts->profile,
                     "profile DB for measured costs, as the plan was searched with");
  report->add_option("--out", opts->out, "the HTML file to write; open it in any browser")
      ->required()
      ->type_name("FILE");
  report->footer(
      "Example:\n"
      "  graphpipe-executor local --plan plan.pb --iterations 20 --metrics-out m.jsonl "
      "--trace measured.json\n"
      "  graphpipe-plan report plan.pb --metrics m.jsonl --trace measured.json --out report.html");
  return {report, [opts](const std::string&) { return run_report(*opts); }};
}

}  // namespace gp::plan_cli
