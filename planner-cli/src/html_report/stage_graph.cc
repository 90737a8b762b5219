// The stage graph and the memory bars of the plan report.
#include <algorithm>
#include <map>

#include "gp/cost/cluster.h"
#include "gp/planner/report.h"
#include "gp/planner/search.h"
#include "html_report/html_report.h"
#include "html_report/svg.h"

namespace gp::plan_report {
namespace {

constexpr double kMargin = 20;
constexpr double kBoxW = 220;
constexpr double kBoxH = 78;
constexpr double kColGap = 70;
constexpr double kRowGap = 26;

struct Box {
  double x = 0;
  double y = 0;
};

std::string ranks_text(const graphpipe::v1::Stage& st) {
  std::string out;
  for (int r : st.device_ranks()) out += (out.empty() ? "" : ",") + std::to_string(r);
  return out;
}

std::string ops_text(const graphpipe::v1::Stage& st) {
  if (st.op_ids_size() == 0) return "(no ops)";
  if (st.op_ids_size() == 1) return st.op_ids(0);
  return st.op_ids(0) + " .. " + st.op_ids(st.op_ids_size() - 1);
}

// Hover text: every op of the stage (up to 40 named) and its numbers.
std::string stage_tooltip(const graphpipe::v1::Plan& plan, const graphpipe::v1::Stage& st,
                          const sim::StageStats* stats) {
  std::string out =
      "stage " + std::to_string(st.id()) + ", ranks " + ranks_text(st) +
      (cost::is_mixed(plan.cluster()) ? " on " + planner::stage_kinds_text(plan, st) : "") + ", " +
      std::to_string(st.op_ids_size()) + " ops, micro-batch " + std::to_string(st.micro_batch()) +
      ", in-flight " + std::to_string(st.in_flight_samples()) + " samples";
  if (stats != nullptr) {
    out += "\nforward " + duration_text(stats->forward_us) + ", backward " +
           duration_text(stats->backward_us) + " per micro-batch";
  }
  if (st.recompute()) out += "\nrecomputes its forward before each backward";
  if (st.shard_optimizer()) {
    out +=
        "\nshards its optimizer state over " + std::to_string(st.device_ranks_size()) + " replicas";
  }
  for (int i = 0; i < st.op_ids_size() && i < 40; ++i) out += "\n  " + st.op_ids(i);
  if (st.op_ids_size() > 40) out += "\n  ... " + std::to_string(st.op_ids_size() - 40) + " more";
  return out;
}

// Stages in columns by pipeline depth, in id order down each column.
std::map<int, Box> layout(const graphpipe::v1::Plan& plan, double* width, double* height) {
  const std::vector<int> depth = planner::stage_depths(plan);
  std::map<int, int> rows_in_column;
  std::map<int, Box> boxes;
  int columns = 0, rows = 0;
  for (const auto& st : plan.stages()) {
    const int column = st.id() < static_cast<int>(depth.size()) ? depth[st.id()] - 1 : 0;
    const int row = rows_in_column[column]++;
    boxes[st.id()] = {kMargin + column * (kBoxW + kColGap), kMargin + 24 + row * (kBoxH + kRowGap)};
    columns = std::max(columns, column + 1);
    rows = std::max(rows, row + 1);
  }
  *width = 2 * kMargin + columns * kBoxW + std::max(0, columns - 1) * kColGap;
  *height = 2 * kMargin + 24 + rows * (kBoxH + kRowGap);
  return boxes;
}

}  // namespace

int bottleneck_stage(const sim::SimResult& sim) {
  int best = -1;
  double busy = -1;
  for (const auto& st : sim.stages) {
    if (st.busy_us > busy) best = st.stage, busy = st.busy_us;
  }
  return best;
}

std::string stage_graph_svg(const graphpipe::v1::Plan& plan, const sim::SimResult& sim) {
  double width = 0, height = 0;
  const auto boxes = layout(plan, &width, &height);
  const int bottleneck = bottleneck_stage(sim);
  Svg svg(std::max(width, 400.0), height, "stage graph");
  svg.text(kMargin, kMargin + 4, "columns: pipeline depth; arrows: activations forward",
           {.size = 12, .fill = "#555"});
  // Edges leave and enter spread along a box's side, so that a fan-in stays readable.
  std::map<int, int> outs, ins, out_slot, in_slot;
  for (const auto& e : plan.edges()) ++outs[e.src_stage()], ++ins[e.dst_stage()];
  const auto side_y = [](const Box& b, int slot, int n) {
    return b.y + kBoxH * (slot + 1) / (n + 1);
  };
  for (const auto& e : plan.edges()) {
    const auto src = boxes.find(e.src_stage());
    const auto dst = boxes.find(e.dst_stage());
    if (src == boxes.end() || dst == boxes.end()) continue;
    svg.line(src->second.x + kBoxW,
             side_y(src->second, out_slot[e.src_stage()]++, outs[e.src_stage()]), dst->second.x,
             side_y(dst->second, in_slot[e.dst_stage()]++, ins[e.dst_stage()]), "#555", 1.5, false,
             /*arrow=*/true);
  }
  for (const auto& st : plan.stages()) {
    const Box& b = boxes.at(st.id());
    const sim::StageStats* stats =
        st.id() < static_cast<int>(sim.stages.size()) ? &sim.stages[st.id()] : nullptr;
    const bool hot = st.id() == bottleneck;
    svg.rect(b.x, b.y, kBoxW, kBoxH, hot ? "#fde2e1" : "#eef3fa", hot ? "#c0392b" : "#4e79a7",
             hot ? 3 : 1.2, stage_tooltip(plan, st, stats));
    svg.text(b.x + 8, b.y + 17,
             "stage " + std::to_string(st.id()) + "  ranks " + shorten(ranks_text(st), 20),
             {.size = 13, .bold = true});
    svg.text(b.x + 8, b.y + 34, shorten(ops_text(st), 34), {.size = 11, .fill = "#444"});
    if (stats != nullptr) {
      svg.text(b.x + 8, b.y + 51, "busy " + duration_text(stats->busy_us) + " / iteration",
               {.size = 11});
      // The memory choices follow the memory they bought.
      const std::string choices = std::string(st.recompute() ? ", recomputes" : "") +
                                  (st.shard_optimizer() ? ", shards" : "");
      svg.text(b.x + 8, b.y + 67,
               "memory " + planner::human_bytes(static_cast<double>(stats->peak_memory_bytes)) +
                   ", mb " + std::to_string(st.micro_batch()) + choices,
               {.size = 11});
    }
    if (hot) {
      svg.text(b.x + kBoxW, b.y - 5, "bottleneck",
               {.size = 12, .anchor = "end", .fill = "#c0392b", .bold = true});
    }
  }
  return svg.str();
}

std::string memory_svg(const graphpipe::v1::Plan& plan, const sim::SimResult& sim) {
  constexpr double kLabelW = 150, kBarW = 700, kBarH = 18, kGap = 8;
  const int n = plan.programs_size();
  Svg svg(kLabelW + kBarW + 260, 2 * kMargin + n * (kBarH + kGap), "memory per device");
  for (int i = 0; i < n; ++i) {
    const auto& program = plan.programs(i);
    const int rank = program.rank();
    const double peak = rank >= 0 && rank < static_cast<int>(sim.ranks.size())
                            ? static_cast<double>(sim.ranks[rank].peak_memory_bytes)
                            : 0;
    // Its own device's memory (mixed clusters differ).
    const double capacity =
        rank >= 0 && rank < cost::num_devices(plan.cluster())
            ? static_cast<double>(
                  cost::device_of_rank(plan.cluster(), rank).memory_capacity_bytes())
            : static_cast<double>(plan.cluster().device().memory_capacity_bytes());
    const double share = capacity > 0 ? peak / capacity : 0;
    const double y = kMargin + i * (kBarH + kGap);
    svg.text(kLabelW - 8, y + 13,
             "rank " + std::to_string(rank) + " (stage " + std::to_string(program.stage()) + ")",
             {.size = 12, .anchor = "end"});
    const std::string tip = "rank " + std::to_string(rank) + ": predicted peak " +
                            planner::human_bytes(peak) + " of " + planner::human_bytes(capacity);
    svg.rect(kLabelW, y, kBarW, kBarH, "#e6e6e6", "#999", 1, tip);
    const char* fill = share > 1 ? "#c0392b" : share > 0.8 ? "#e69f00" : "#59a14f";
    svg.rect(kLabelW, y, std::max(1.0, kBarW * std::min(share, 1.0)), kBarH, fill, "none", 1, tip);
    svg.text(kLabelW + kBarW + 8, y + 13,
             planner::human_bytes(peak) + " of " + planner::human_bytes(capacity) + " (" +
                 num(100 * share) + "%)",
             {.size = 12});
  }
  return svg.str();
}

}  // namespace gp::plan_report
