// graphpipe-plan adapt: re-plan a running job from what it measured (gp/planner/adapt.h), and
// say whether switching to the new plan pays. Prints "KEY VALUE" lines on stdout, VALUE running
// to the end of the line, for scripts/graphpipe-launch --adapt to read and log.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "adapt_models.h"
#include "commands.h"
#include "gp/cost/cluster.h"
#include "gp/model/model_io.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/adapt.h"
#include "gp/planner/verify.h"
#include "gp/profile_db/profile_db.h"
#include "html_report/report_inputs.h"

namespace gp::plan_cli {
namespace {

struct AdaptOptions {
  std::string plan;
  std::string measured_profile;
  std::string metrics;
  int64_t from_iteration = 0;
  int64_t iterations = 0;  // the job's total
  std::string profile;
  std::string out;
  double threshold = 1.5;
  double min_gain = 0.10;
  double margin = 2.0;
  double switch_cost_s = 0;
  double calibration = 0;  // measured / predicted from an earlier check; 0: none yet
  double drop = 0.10;
  std::string command_line;
};

void line(const std::string& key, const std::string& value) {
  std::printf("%s %s\n", key.c_str(), value.c_str());
}
std::string num(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// The links the running job measured, where it measured them, priced from now on; each printed.
Status use_measured_links(const graphpipe::v1::Cluster& cluster, const std::string& profile,
                          const graphpipe::v1::ProfileDB& measured, AdaptModels& models) {
  if (measured.comm_size() == 0) return ok_status();
  GP_ASSIGN_OR_RETURN(models.comm, with_measured_links(cluster, profile, measured));
  for (const auto& fit : measured.comm()) {
    const bool intra = fit.link_class() == graphpipe::v1::LINK_CLASS_INTRA_NODE;
    line("link", std::string(intra ? "intra_node" : "inter_node") + " measured alpha_us " +
                     num(fit.alpha_us(), 1) + " beta_GBps " + num(fit.beta_bytes_per_s() / 1e9, 3) +
                     " from " + std::to_string(fit.points_size()) + " message size(s)");
  }
  return ok_status();
}

// Mean samples/s of the metrics entries after `from_iteration` (each window's rate counts once per
// iteration it covers) and the last iteration seen; 0 when there are none yet.
struct MeasuredRate {
  double samples_per_s = 0;
  int64_t last_iteration = 0;
  int entries = 0;
};
Result<MeasuredRate> measured_rate(const AdaptOptions& o) {
  MeasuredRate rate;
  if (o.metrics.empty()) return rate;
  GP_ASSIGN_OR_RETURN(const std::string text, model::read_file(o.metrics));
  GP_ASSIGN_OR_RETURN(auto points,
                      plan_report::parse_metrics("--metrics " + o.metrics, o.metrics, text));
  double sum = 0;
  for (const auto& p : points) {
    rate.last_iteration = std::max(rate.last_iteration, p.iteration);
    if (p.iteration <= o.from_iteration || !(p.samples_per_s > 0)) continue;
    sum += p.samples_per_s;
    ++rate.entries;
  }
  if (rate.entries > 0) rate.samples_per_s = sum / rate.entries;
  return rate;
}

Status run_adapt(const AdaptOptions& o) {
  if (!o.out.empty()) GP_RETURN_IF_ERROR(model::check_output_path("--out", o.out));
  GP_ASSIGN_OR_RETURN(graphpipe::v1::Plan plan, load_plan(o.plan));
  auto built = model::Graph::build(plan.model());
  if (!built.ok()) return built.status().with_context("--plan " + o.plan + ": plan.model");
  const model::Graph graph = std::move(built).value();
  GP_ASSIGN_OR_RETURN(const MeasuredRate rate, measured_rate(o));
  const double predicted = plan.predicted().throughput_samples_per_s();
  line("measured_samples_per_s", num(rate.samples_per_s, 1));
  line("predicted_samples_per_s", num(predicted, 1));
  // A later check searches only when the job got slower than the plan, calibrated, predicts.
  if (o.calibration > 0 && rate.samples_per_s > 0 && predicted > 0) {
    const double expected = predicted * o.calibration;
    if (rate.samples_per_s >= (1 - o.drop) * expected) {
      line("switch", "0");
      line("reason", "stay: measured " + num(rate.samples_per_s, 1) + " samples/s is within " +
                         num(100 * o.drop, 0) + "% of the " + num(expected, 1) +
                         " expected (prediction x calibration " + num(o.calibration, 3) + ")");
      return ok_status();
    }
  }

  graphpipe::v1::ProfileDB measured;
  GP_RETURN_IF_ERROR(model::read_message(o.measured_profile, &measured)
                         .with_context("--measured-profile " + o.measured_profile));
  GP_RETURN_IF_ERROR(
      profile::validate_profile(measured).with_context("--measured-profile " + o.measured_profile));
  const auto precision = plan.training().precision();
  GP_ASSIGN_OR_RETURN(const AdaptModels base,
                      own_kind_models(plan.cluster(), precision, o.profile));
  GP_ASSIGN_OR_RETURN(auto speeds,
                      planner::measured_rank_speeds(
                          plan, graph, measured,
                          [&base](int r) -> const cost::CostModel& { return base.for_rank(r); }));
  for (const auto& s : speeds) {
    line("rank", std::to_string(s.rank) + " stage " + std::to_string(s.stage) + " measured_ms " +
                     num(s.measured_us / 1000, 3) + " modelled_ms " + num(s.modelled_us / 1000, 3) +
                     " slowdown " + num(s.relative, 2) +
                     (s.relative >= o.threshold ? " slow" : ""));
  }
  const graphpipe::v1::Cluster cluster =
      planner::cluster_with_measured_speeds(plan.cluster(), speeds, o.threshold);
  GP_ASSIGN_OR_RETURN(AdaptModels models, measured_models(cluster, base, speeds));
  GP_RETURN_IF_ERROR(use_measured_links(cluster, o.profile, measured, models));

  // The running plan, priced under the measured speeds.
  graphpipe::v1::Plan current = plan;
  *current.mutable_cluster() = cluster;
  GP_ASSIGN_OR_RETURN(const sim::SimResult now, simulate_with(current, graph, models));
  const double current_s = now.iteration_time_us / 1e6;
  for (const auto& st : now.stages) {
    line("stage", std::to_string(st.stage) + " predicted_ms " +
                      num((st.forward_us + st.backward_us) / 1000, 3) + " busy_ms " +
                      num(st.busy_us / 1000, 3));
  }
  const double under_speeds = plan.mini_batch() / current_s;
  line("current_under_measured_samples_per_s", num(under_speeds, 1));
  if (rate.samples_per_s > 0) line("calibration", num(rate.samples_per_s / under_speeds, 4));

  GP_ASSIGN_OR_RETURN(auto candidate, search_with(plan, graph, models, o.command_line));
  const auto& cp = candidate.predicted();
  line("candidate", std::to_string(candidate.stages_size()) + " stages on " +
                        std::to_string(candidate.programs_size()) + " ranks, " +
                        num(cp.throughput_samples_per_s(), 1) + " samples/s predicted");

  planner::SwitchInputs in;
  in.current_iteration_s = current_s;
  in.candidate_iteration_s = cp.iteration_time_s();
  in.measured_iteration_s = rate.samples_per_s > 0 ? plan.mini_batch() / rate.samples_per_s : 0;
  in.iterations_left = std::max<int64_t>(0, o.iterations - rate.last_iteration);
  in.switch_cost_s = o.switch_cost_s;
  in.min_gain = o.min_gain;
  in.margin = o.margin;
  const planner::SwitchDecision d = planner::decide_switch(in);
  line("gain", num(d.predicted_gain, 4));
  line("switch", d.do_switch ? "1" : "0");
  line("reason", d.reason);
  if (d.do_switch && !o.out.empty()) {
    GP_RETURN_IF_ERROR(model::write_message(o.out, candidate).with_context("--out"));
    line("plan", o.out);
  }
  return ok_status();
}

}  // namespace

Command add_adapt_command(CLI::App& app) {
  auto o = std::make_shared<AdaptOptions>();
  auto* cmd = app.add_subcommand(
      "adapt",
      "Re-plan a running job from the costs it measured (each rank's speed from "
      "graphpipe-executor run --measured-profile-out) and say whether switching pays; prints "
      "KEY VALUE lines (graphpipe-launch --adapt runs it)");
  cmd->add_option("--plan", o->plan, "the plan the job runs")->required();
  cmd->add_option("--measured-profile", o->measured_profile,
                  "the job's measured profile (rank 0's --measured-profile-out)")
      ->required();
  cmd->add_option("--metrics", o->metrics, "the job's metrics (.jsonl or .json): measured rate");
  cmd->add_option("--from-iteration", o->from_iteration,
                  "measure the rate over iterations after this one (the warm-up's end)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--iterations", o->iterations, "the job's iterations in all")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--profile", o->profile, "the profile DB the plan was searched with");
  cmd->add_option("--out", o->out, "where the new plan goes when switching pays");
  cmd->add_option("--slow-threshold", o->threshold,
                  "a rank this many times slower than the fastest is a device of its own kind")
      ->check(CLI::Range(1.01, 1000.0))
      ->capture_default_str();
  cmd->add_option("--min-gain", o->min_gain, "least predicted speed-up worth a switch (0.1: 10%)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd->add_option("--margin", o->margin, "time saved must exceed the switch cost this many times")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
  cmd->add_option("--switch-cost-s", o->switch_cost_s,
                  "measured cost of switching: a checkpoint plus a restart, seconds")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--calibration", o->calibration,
                  "measured / predicted from an earlier check: then search only when the rate "
                  "fell --drop below prediction x calibration")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--drop", o->drop, "the fall in rate that triggers a search (0.1: 10%)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  return {cmd, [o](const std::string& command_line) {
            o->command_line = command_line;
            return run_adapt(*o);
          }};
}

}  // namespace gp::plan_cli
