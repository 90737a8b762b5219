// The plan report's HTML document: a summary table and the sections, with inline CSS only.
#include "html_report/html_report.h"

#include <algorithm>
#include <cmath>

#include "gp/common/version.h"
#include "gp/cost/cluster.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/report.h"
#include "gp/planner/search.h"
#include "html_report/svg.h"

namespace gp::plan_report {
namespace {

constexpr const char* kStyle = R"(
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin: 28px 0 6px; border-bottom: 1px solid #ddd; }
p.note { color: #555; font-size: 13px; margin: 4px 0 10px; }
table.summary { border-collapse: collapse; font-size: 14px; }
table.summary td { padding: 3px 14px 3px 0; vertical-align: top; }
table.summary td:first-child { color: #555; }
.scroll { overflow-x: auto; }
svg { font-family: system-ui, sans-serif; }
footer { margin-top: 30px; color: #888; font-size: 12px; }
)";

std::string row(const std::string& name, const std::string& value) {
  return "<tr><td>" + xml_escape(name) + "</td><td>" + xml_escape(value) + "</td></tr>\n";
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Measured samples/s without the first entry (first-touch and connection set-up), where there
// are more.
double measured_rate(const std::vector<MetricsPoint>& metrics) {
  std::vector<double> rates;
  for (size_t i = metrics.size() > 1 ? 1 : 0; i < metrics.size(); ++i) {
    if (std::isfinite(metrics[i].samples_per_s)) rates.push_back(metrics[i].samples_per_s);
  }
  return median(rates);
}

std::string summary_table(const ReportData& d) {
  const auto& plan = *d.plan;
  const auto& sim = *d.sim;
  const auto& c = plan.cluster();
  std::string out = "<table class=\"summary\">\n";
  out +=
      row("model", plan.model().name() + " (" + std::to_string(plan.model().ops_size()) + " ops)");
  out += row("cluster", c.name() + ": " + std::to_string(plan.programs_size()) + " of " +
                            std::to_string(c.num_nodes() * c.devices_per_node()) + " x " +
                            (cost::is_mixed(c) ? "(" + planner::cluster_kinds_text(c) + ")"
                                               : c.device().name()) +
                            " used");
  out += row("plan", std::string(gp::plan::strategy_name(plan.provenance().strategy())) +
                         ", mini-batch " + std::to_string(plan.mini_batch()) + ", " +
                         std::to_string(plan.stages_size()) + " stages, depth " +
                         std::to_string(planner::pipeline_depth(plan)));
  out += row("predicted", duration_text(sim.iteration_time_us) + " per iteration, " +
                              num(sim.throughput_samples_per_s) + " samples/s, bubbles " +
                              num(100 * sim.bubble_fraction) + "%, peak memory " +
                              planner::human_bytes(static_cast<double>(sim.peak_memory_bytes)));
  const int hot = bottleneck_stage(sim);
  if (hot >= 0) {
    out += row("bottleneck", "stage " + std::to_string(hot) + " (" +
                                 duration_text(sim.stages[hot].busy_us) + " busy per iteration)");
  }
  if (d.measured != nullptr) {
    out += row("measured iteration", duration_text(d.measured->duration_us) + " (iteration " +
                                         std::to_string(d.measured->index + 1) + " of " +
                                         std::to_string(d.measured->count) + " in " + d.trace_name +
                                         ")");
  }
  if (d.metrics != nullptr) {
    const double rate = measured_rate(*d.metrics);
    std::string text = num(rate) + " samples/s, the median of " +
                       std::to_string(d.metrics->size()) + " logged iterations" +
                       (d.metrics->size() > 1 ? " but the first (warm-up)" : "");
    if (sim.throughput_samples_per_s > 0 && std::isfinite(rate)) {
      text += " (" + num(100 * rate / sim.throughput_samples_per_s) + "% of predicted)";
    }
    out += row("measured rate", text);
  }
  return out + "</table>\n";
}

std::string section(const char* id, const std::string& title, const std::string& note,
                    const std::string& svg) {
  return std::string("<section id=\"") + id + "\">\n<h2>" + xml_escape(title) +
         "</h2>\n<p class=\"note\">" + xml_escape(note) + "</p>\n<div class=\"scroll\">\n" + svg +
         "</div>\n</section>\n";
}

}  // namespace

std::string html_report(const ReportData& d) {
  const auto& plan = *d.plan;
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>Plan "
      "report: " +
      xml_escape(plan.model().name()) + "</title>\n<style>" + kStyle +
      "</style>\n</head>\n<body>\n";
  out += "<h1>Plan report: " + xml_escape(plan.model().name()) + " on " +
         xml_escape(plan.cluster().name()) + "</h1>\n";
  out += summary_table(d);
  out += section("stage-graph", "Stage graph",
                 "Stages laid out by pipeline depth with their predicted busy time per iteration "
                 "(one replica) and peak memory per device; the bottleneck stage is outlined in "
                 "red. Hover a stage for its ops.",
                 stage_graph_svg(plan, *d.sim));
  out += section("timeline", "One iteration",
                 d.measured != nullptr
                     ? "Predicted by the simulator and measured by the executor, per device, on "
                       "one time scale. Hover a span for its details."
                     : "Predicted by the simulator, per device. Give --trace (the executor's "
                       "--trace output) to compare with a measured iteration.",
                 timeline_svg(plan, *d.sim, d.measured));
  out += section("memory", "Memory per device",
                 "Predicted peak memory of each device against its capacity.",
                 memory_svg(plan, *d.sim));
  // Which stages recompute or shard their optimizer state, and what each saves (inspect's
  // text).
  const std::string recompute = planner::recompute_summary(plan);
  const std::string shard = planner::shard_summary(plan);
  if (!recompute.empty() || !shard.empty()) {
    out +=
        "<section id=\"memory-choices\">\n<h2>Recomputation and sharding</h2>\n<p "
        "class=\"note\">Stages that keep only their boundary tensors per in-flight "
        "micro-batch and recompute their forward before each backward, and replicated stages "
        "whose replicas each keep 1/r of the optimizer state (ZeRO-1): per device, the "
        "memory without and with.</p>\n<pre>" +
        xml_escape(recompute + shard) + "</pre>\n</section>\n";
  }
  if (d.metrics != nullptr) {
    out += section("metrics", "Training",
                   "From " + d.metrics_name +
                       ": the loss per logged iteration, and samples/s against the plan's "
                       "predicted rate.",
                   metrics_svg(*d.metrics, d.sim->throughput_samples_per_s));
  }
  out += "<footer>graphpipe-plan " + xml_escape(GP_VERSION_STRING) + " report of " +
         xml_escape(d.plan_name) + "</footer>\n</body>\n</html>\n";
  return out;
}

}  // namespace gp::plan_report
