// `graphpipe-plan report`: one self-contained HTML file (inline SVG and CSS, no script, nothing
// fetched) about a plan: its stage graph, a timeline of one iteration (predicted and, given the
// executor's trace, measured), memory per device, and, given the executor's metrics, the loss
// curve and samples/s against the predicted rate.
#pragma once

#include <string>
#include <vector>

#include "gp/sim/simulator.h"
#include "graphpipe/v1/plan.pb.h"
#include "html_report/report_inputs.h"

namespace gp::plan_report {

struct ReportData {
  const graphpipe::v1::Plan* plan = nullptr;
  const sim::SimResult* sim = nullptr;  // the plan simulated with record_events
  std::string plan_name;                // shown as the report's source (the path given)
  const std::vector<MetricsPoint>* metrics = nullptr;  // optional
  std::string metrics_name;
  const MeasuredIteration* measured = nullptr;  // optional
  std::string trace_name;
};

std::string html_report(const ReportData& data);

// The sections, one <svg> element each (html_report wraps them).
// The stage with the longest predicted busy time per iteration (the pipeline's bottleneck).
int bottleneck_stage(const sim::SimResult& sim);
std::string stage_graph_svg(const graphpipe::v1::Plan& plan, const sim::SimResult& sim);
std::string timeline_svg(const graphpipe::v1::Plan& plan, const sim::SimResult& sim,
                         const MeasuredIteration* measured);
std::string memory_svg(const graphpipe::v1::Plan& plan, const sim::SimResult& sim);
std::string metrics_svg(const std::vector<MetricsPoint>& metrics, double predicted_samples_per_s);

// "12.3 us", "4.567 ms", "1.234 s".
std::string duration_text(double us);

}  // namespace gp::plan_report
