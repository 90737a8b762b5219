// The training curves of the plan report: loss per iteration, and samples/s per iteration
// against the plan's predicted rate.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "html_report/html_report.h"
#include "html_report/svg.h"

namespace gp::plan_report {
namespace {

constexpr double kPanelW = 520;
constexpr double kPanelH = 240;
constexpr double kPadL = 70;
constexpr double kPadT = 30;
constexpr double kPadB = 36;
constexpr double kPlotW = kPanelW - kPadL - 20;
constexpr double kPlotH = kPanelH - kPadT - kPadB;

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  // A usable range: finite, and not empty (a flat curve gets room around it).
  void settle() {
    if (!std::isfinite(lo)) lo = 0, hi = 1;
    if (hi - lo <= 0) {
      const double pad = std::max(std::fabs(hi) * 0.1, 1e-9);
      lo -= pad, hi += pad;
    }
  }
};

// "48250" rather than "4.825e+04"; four significant digits below 1000.
std::string tick_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), std::fabs(v) >= 1000 ? "%.0f" : "%.4g", v);
  return buf;
}

struct Panel {
  double left = 0;  // the panel's x offset
  Range x = {};
  Range y = {};
  double px(double v) const { return left + kPadL + kPlotW * (v - x.lo) / (x.hi - x.lo); }
  double py(double v) const { return kPadT + kPlotH * (1 - (v - y.lo) / (y.hi - y.lo)); }
};

void draw_frame(Svg& svg, const Panel& p, const std::string& title, const std::string& y_label) {
  svg.text(p.left + kPadL, 18, title, {.size = 13, .bold = true});
  svg.rect(p.left + kPadL, kPadT, kPlotW, kPlotH, "#fbfbfb", "#999");
  for (int i = 0; i <= 4; ++i) {
    const double v = p.y.lo + (p.y.hi - p.y.lo) * i / 4;
    svg.text(p.left + kPadL - 6, p.py(v) + 4, tick_text(v), {.size = 10, .anchor = "end"});
    // Iterations are whole: a tick sits on the iteration it names (a short run repeats some).
    const double it = std::round(p.x.lo + (p.x.hi - p.x.lo) * i / 4);
    svg.text(p.px(it), kPadT + kPlotH + 14, tick_text(it), {.size = 10, .anchor = "middle"});
  }
  svg.text(p.left + kPadL + kPlotW / 2, kPanelH - 4, "iteration", {.size = 11, .anchor = "middle"});
  svg.text(p.left + 4, kPadT - 8, y_label, {.size = 10, .fill = "#555"});
}

}  // namespace

std::string metrics_svg(const std::vector<MetricsPoint>& metrics, double predicted_samples_per_s) {
  Svg svg(2 * kPanelW + 20, kPanelH, "training metrics");
  Panel loss{.left = 0}, rate{.left = kPanelW + 20};
  for (const auto& m : metrics) {
    const double it = static_cast<double>(m.iteration);
    loss.x.add(it), rate.x.add(it);
    loss.y.add(m.loss);
    rate.y.add(m.samples_per_s);
  }
  rate.y.add(0);
  rate.y.add(predicted_samples_per_s * 1.1);
  loss.x.settle(), rate.x.settle(), loss.y.settle(), rate.y.settle();
  draw_frame(svg, loss, "loss", "loss");
  draw_frame(svg, rate, "samples/s (dashed: predicted)", "samples/s");
  std::vector<std::pair<double, double>> loss_points, rate_points;
  for (const auto& m : metrics) {
    const double it = static_cast<double>(m.iteration);
    // A null loss (non-finite) breaks the curve rather than being drawn as zero.
    loss_points.emplace_back(loss.px(it), std::isfinite(m.loss) ? loss.py(m.loss) : NAN);
    rate_points.emplace_back(rate.px(it),
                             std::isfinite(m.samples_per_s) ? rate.py(m.samples_per_s) : NAN);
  }
  svg.polyline(loss_points, "#4e79a7");
  svg.polyline(rate_points, "#f28e2b");
  if (predicted_samples_per_s > 0) {
    const double y = rate.py(predicted_samples_per_s);
    svg.line(rate.px(rate.x.lo), y, rate.px(rate.x.hi), y, "#c0392b", 1.5, /*dashed=*/true);
    svg.text(rate.px(rate.x.hi) - 4, y - 4, "predicted " + tick_text(predicted_samples_per_s),
             {.size = 10, .anchor = "end", .fill = "#c0392b"});
  }
  return svg.str();
}

}  // namespace gp::plan_report
