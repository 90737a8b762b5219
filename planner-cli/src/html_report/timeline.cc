// The iteration timeline of the plan report: one lane per device, predicted above measured, on
// one time scale so that the two compare by eye.
#include <algorithm>
#include <cmath>
#include <set>

#include "html_report/html_report.h"
#include "html_report/svg.h"

namespace gp::plan_report {
namespace {

constexpr double kMargin = 20;
constexpr double kLabelW = 130;
constexpr double kPlotW = 900;  // the whole svg fits a 1200 px window
constexpr double kLaneH = 16;
constexpr double kLaneGap = 4;
constexpr double kHeaderH = 26;
constexpr double kAxisH = 24;

const char* kind_color(trace::SpanKind kind) {
  switch (kind) {
    case trace::SpanKind::kForward:
      return "#4e79a7";
    case trace::SpanKind::kBackward:
      return "#f28e2b";
    case trace::SpanKind::kAllReduce:
      return "#59a14f";
    case trace::SpanKind::kOptimizer:
      return "#b07aa1";
    case trace::SpanKind::kTransfer:
      return "#bab0ac";
  }
  return "#999";
}

std::string span_text(const trace::Span& s) {
  std::string what;
  switch (s.kind) {
    case trace::SpanKind::kForward:
      what = "forward mb " + std::to_string(s.micro_batch);
      break;
    case trace::SpanKind::kBackward:
      what = "backward mb " + std::to_string(s.micro_batch);
      break;
    case trace::SpanKind::kAllReduce:
      what = "all-reduce";
      break;
    case trace::SpanKind::kOptimizer:
      what = "optimizer step";
      break;
    case trace::SpanKind::kTransfer:
      what = "transfer";
      break;
  }
  return "rank " + std::to_string(s.rank) + " stage " + std::to_string(s.stage) + ": " + what +
         ", " + duration_text(s.end_us - s.start_us) + " from " + duration_text(s.start_us);
}

struct Scale {
  double total_us = 1;
  double x(double us) const { return kMargin + kLabelW + kPlotW * us / total_us; }
};

// One group of lanes (a header line, then one lane per rank) from `top`; returns its bottom.
double draw_group(Svg& svg, double top, const std::string& title, const std::vector<int>& ranks,
                  const std::vector<int>& stage_of, const std::vector<trace::Span>& spans,
                  const Scale& scale) {
  svg.text(kMargin, top + 16, title, {.size = 13, .bold = true});
  top += kHeaderH;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const double y = top + static_cast<double>(i) * (kLaneH + kLaneGap);
    std::string label = "rank " + std::to_string(ranks[i]);
    if (stage_of[i] >= 0) label += " (stage " + std::to_string(stage_of[i]) + ")";
    svg.text(kMargin + kLabelW - 8, y + 12, label, {.size = 11, .anchor = "end"});
    svg.rect(scale.x(0), y, kPlotW, kLaneH, "#f6f6f6");
    for (const auto& s : spans) {
      if (s.rank != ranks[i] || s.kind == trace::SpanKind::kTransfer) continue;
      svg.rect(scale.x(s.start_us), y, std::max(1.0, scale.x(s.end_us) - scale.x(s.start_us)),
               kLaneH, kind_color(s.kind), "none", 1, span_text(s));
    }
  }
  return top + static_cast<double>(ranks.size()) * (kLaneH + kLaneGap);
}

void draw_axis(Svg& svg, double y, const Scale& scale) {
  svg.line(scale.x(0), y, scale.x(scale.total_us), y, "#333");
  for (int i = 0; i <= 5; ++i) {
    const double us = scale.total_us * i / 5;
    svg.line(scale.x(us), y, scale.x(us), y + 4, "#333");
    svg.text(scale.x(us), y + 16, duration_text(us), {.size = 10, .anchor = "middle"});
  }
}

void draw_legend(Svg& svg, double y) {
  const std::pair<trace::SpanKind, const char*> items[] = {
      {trace::SpanKind::kForward, "forward"},
      {trace::SpanKind::kBackward, "backward"},
      {trace::SpanKind::kAllReduce, "all-reduce"},
      {trace::SpanKind::kOptimizer, "optimizer"}};
  double x = kMargin + kLabelW;
  for (const auto& [kind, name] : items) {
    svg.rect(x, y, 12, 12, kind_color(kind));
    svg.text(x + 16, y + 10, name, {.size = 11});
    x += 100;
  }
}

}  // namespace

std::string timeline_svg(const graphpipe::v1::Plan& plan, const sim::SimResult& sim,
                         const MeasuredIteration* measured) {
  std::vector<int> ranks, stage_of;
  for (const auto& p : plan.programs()) ranks.push_back(p.rank()), stage_of.push_back(p.stage());
  if (measured != nullptr) {
    // Ranks of the trace that the plan does not run show too, without a stage.
    std::set<int> extra;
    for (const auto& s : measured->spans) extra.insert(s.rank);
    for (int r : extra) {
      if (std::find(ranks.begin(), ranks.end(), r) == ranks.end()) {
        ranks.push_back(r), stage_of.push_back(-1);
      }
    }
  }
  Scale scale;
  scale.total_us = std::max(sim.iteration_time_us, measured ? measured->duration_us : 0.0);
  if (!(scale.total_us > 0)) scale.total_us = 1;
  const double group_h = kHeaderH + static_cast<double>(ranks.size()) * (kLaneH + kLaneGap);
  const double height = 2 * kMargin + 20 + group_h * (measured != nullptr ? 2 : 1) + kAxisH + 8;
  Svg svg(2 * kMargin + kLabelW + kPlotW + 40, height, "iteration timeline");
  draw_legend(svg, kMargin);
  double y = draw_group(svg, kMargin + 20,
                        "predicted (simulator): " + duration_text(sim.iteration_time_us), ranks,
                        stage_of, sim.events, scale);
  if (measured != nullptr) {
    y = draw_group(svg, y,
                   "measured (executor trace, iteration " + std::to_string(measured->index + 1) +
                       " of " + std::to_string(measured->count) +
                       "): " + duration_text(measured->duration_us),
                   ranks, stage_of, measured->spans, scale);
  }
  draw_axis(svg, y + 4, scale);
  return svg.str();
}

std::string duration_text(double us) {
  if (!std::isfinite(us)) return "n/a";
  if (std::fabs(us) < 1000) return num(us, 1) + " us";
  if (std::fabs(us) < 1e6) return num(us / 1e3, 3) + " ms";
  return num(us / 1e6, 3) + " s";
}

}  // namespace gp::plan_report
