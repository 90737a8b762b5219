#include "gp/planner/report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "gp/common/json_writer.h"
#include "gp/cost/cluster.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/recompute.h"
#include "gp/planner/shard_optimizer.h"

namespace gp::planner {
namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

std::string op_range(const graphpipe::v1::Stage& s) {
  if (s.op_ids_size() == 0) return "";
  if (s.op_ids_size() == 1) return s.op_ids(0);
  return s.op_ids(0) + " .. " + s.op_ids(s.op_ids_size() - 1);
}

void write_improvement(JsonWriter& w, const ImproveSummary& s) {
  w.key("improvement")
      .begin_object()
      .field("start_throughput_samples_per_s", s.start_samples_per_s)
      .field("throughput_samples_per_s", s.end_samples_per_s)
      .field("trials", s.trials)
      .field("simulated_events", s.events)
      .field("local_optima", s.local_optima)
      .field("time_s", s.time_s)
      .field("stopped_by", s.stopped_by);
  w.key("moves").begin_array();
  for (const auto& m : s.moves) {
    w.begin_object()
        .field("move", m.description)
        .field("kick", m.kick)
        .field("before_samples_per_s", m.before_samples_per_s)
        .field("after_samples_per_s", m.after_samples_per_s)
        .end_object();
  }
  w.end_array().end_object();
}

}  // namespace

namespace {

// "2 x A + 1 x B" for the kinds of `ranks` of `cluster`, fastest first; one kind: its name.
std::string kinds_text(const graphpipe::v1::Cluster& cluster, const std::vector<int>& ranks) {
  std::map<std::string, int> count;
  for (int r : ranks) ++count[cost::device_of_rank(cluster, r).name()];
  if (count.size() == 1) return count.begin()->first;
  std::string out;
  for (const auto& kind : cost::device_kind_names(cluster)) {
    const auto it = count.find(kind);
    if (it == count.end()) continue;
    out += (out.empty() ? "" : " + ") + std::to_string(it->second) + " x " + kind;
  }
  return out;
}

}  // namespace

std::string cluster_kinds_text(const graphpipe::v1::Cluster& cluster) {
  std::vector<int> ranks(static_cast<size_t>(cost::num_devices(cluster)));
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r] = static_cast<int>(r);
  return kinds_text(cluster, ranks);
}

std::string stage_kinds_text(const graphpipe::v1::Plan& plan, const graphpipe::v1::Stage& stage) {
  return kinds_text(plan.cluster(), {stage.device_ranks().begin(), stage.device_ranks().end()});
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (bytes >= 1024 && i < 4) bytes /= 1024, ++i;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f %s", bytes, units[i]);
  return buf;
}

std::string plan_report_json(const ReportContext& ctx, const graphpipe::v1::Plan* plan) {
  JsonWriter w(/*pretty=*/true);
  w.begin_object()
      .field("strategy", ctx.strategy)
      .field("feasible", ctx.feasible)
      .field("num_devices", ctx.num_devices)
      .field("mini_batch", ctx.mini_batch)
      .field("search_time_s", ctx.search_time_s);
  if (ctx.num_units > 0) w.field("num_units", ctx.num_units);
  if (!ctx.feasible) w.field("infeasible_reason", ctx.infeasible_reason);
  if (plan != nullptr && ctx.feasible) {
    const auto& p = plan->predicted();
    w.field("micro_batch", plan->stages(0).micro_batch())
        .field("num_stages", plan->stages_size())
        .field("pipeline_depth", pipeline_depth(*plan))
        .field("predicted_iteration_time_s", p.iteration_time_s())
        .field("predicted_throughput_samples_per_s", p.throughput_samples_per_s())
        .field("bottleneck_tps_s", p.bottleneck_tps_s())
        .field("bubble_fraction", p.bubble_fraction())
        .field("peak_memory_bytes", p.peak_memory_bytes())
        .field("sp_edges_added", plan->provenance().sp_edges_added())
        .field("model_hash", plan->model_hash())
        .field("cluster_hash", plan->cluster_hash())
        .field("devices_used", plan->programs_size());
    if (!ctx.idle_devices_reason.empty()) {
      w.field("idle_devices_reason", ctx.idle_devices_reason);
    }
    w.key("stages").begin_array();
    for (int s = 0; s < plan->stages_size(); ++s) {
      const auto& st = plan->stages(s);
      w.begin_object().field("id", st.id());
      w.key("ops").begin_array();
      for (const auto& op : st.op_ids()) w.value(op);
      w.end_array();
      w.key("devices").begin_array();
      for (int r : st.device_ranks()) w.value(r);
      w.end_array();
      if (cost::is_mixed(plan->cluster())) w.field("device_kinds", stage_kinds_text(*plan, st));
      w.field("micro_batch", st.micro_batch())
          .field("in_flight_samples", st.in_flight_samples())
          .field("recompute", st.recompute())
          .field("shard_optimizer", st.shard_optimizer());
      if (st.recompute() && ctx.recompute_reasons != nullptr &&
          s < static_cast<int>(ctx.recompute_reasons->size())) {
        w.field("recompute_reason", (*ctx.recompute_reasons)[static_cast<size_t>(s)]);
      }
      if (s < p.stages_size()) {
        w.field("busy_time_s", p.stages(s).busy_time_s())
            .field("bubble_fraction", p.stages(s).bubble_fraction())
            .field("memory_bytes", p.stages(s).peak_memory_bytes());
      }
      w.end_object();
    }
    w.end_array();
  }
  if (ctx.improvement != nullptr) write_improvement(w, *ctx.improvement);
  if (ctx.candidates != nullptr) {
    w.key("candidates").begin_array();
    for (const auto& c : *ctx.candidates) {
      w.begin_object().field("micro_batch", c.micro_batch).field("feasible", c.feasible);
      if (c.feasible) {
        w.field("num_stages", c.num_stages)
            .field("bottleneck_tps_s", c.bottleneck_tps_s)
            .field("predicted_throughput_samples_per_s", c.throughput_samples_per_s)
            .field("source", c.source);
      } else {
        w.field("reason", c.reason);
      }
      w.end_object();
    }
    w.end_array();
  }
  w.end_object();
  return w.str() + "\n";
}

std::string stage_graph_dot(const graphpipe::v1::Plan& plan) {
  std::string out =
      "digraph stages {\n  rankdir=LR;\n  node [shape=box, fontname=\"monospace\"];\n";
  for (const auto& st : plan.stages()) {
    std::string ranks;
    for (int r : st.device_ranks()) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    out += "  s" + std::to_string(st.id()) + " [label=\"stage " + std::to_string(st.id()) + "\\n" +
           json_escape(op_range(st)) + "\\n" + std::to_string(st.op_ids_size()) + " ops, ranks " +
           ranks + "\\nmb " + std::to_string(st.micro_batch()) + ", in-flight " +
           std::to_string(st.in_flight_samples()) + "\"];\n";
  }
  for (const auto& e : plan.edges()) {
    out += "  s" + std::to_string(e.src_stage()) + " -> s" + std::to_string(e.dst_stage()) +
           " [label=\"" + human_bytes(static_cast<double>(e.bytes_per_sample())) + "/sample\"];\n";
  }
  return out + "}\n";
}

// "adam lr 0.001 (betas 0.9, 0.999, eps 1e-08), fp32, seed 1"
std::string training_text(const graphpipe::v1::TrainingConfig& t) {
  std::string out;
  switch (t.optimizer()) {
    case graphpipe::v1::OPTIMIZER_KIND_SGD:
      out = "sgd lr " + fmt("%g", t.learning_rate());
      break;
    case graphpipe::v1::OPTIMIZER_KIND_MOMENTUM:
      out = "momentum lr " + fmt("%g", t.learning_rate()) + " (momentum " +
            fmt("%g", t.momentum()) + ")";
      break;
    case graphpipe::v1::OPTIMIZER_KIND_ADAM:
      out = "adam lr " + fmt("%g", t.learning_rate()) + " (betas " + fmt("%g", t.adam_beta1()) +
            ", " + fmt("%g", t.adam_beta2()) + ", eps " + fmt("%g", t.adam_epsilon()) + ")";
      break;
    default:
      out = "optimizer " + std::to_string(t.optimizer());
  }
  if (t.weight_decay() > 0) out += ", weight decay " + fmt("%g", t.weight_decay());
  if (t.clip_grad_norm() > 0) out += ", gradient norm clipped at " + fmt("%g", t.clip_grad_norm());
  if (t.lr_schedule() == graphpipe::v1::LR_SCHEDULE_WARMUP_COSINE) {
    out += ", warm-up " + std::to_string(t.warmup_steps()) + " then cosine to " +
           fmt("%g", t.min_learning_rate()) + " at step " + std::to_string(t.total_steps());
  }
  out += t.precision() == graphpipe::v1::PRECISION_BF16_FP32_MASTER ? ", bf16 (fp32 master)"
                                                                    : ", fp32";
  return out + ", seed " + std::to_string(t.seed());
}

std::string inspect_text(const graphpipe::v1::Plan& plan) {
  std::string out;
  const auto& c = plan.cluster();
  out += "model      " + plan.model().name() + " (" + std::to_string(plan.model().ops_size()) +
         " ops, hash " + plan.model_hash() + ")\n";
  const bool mixed = cost::is_mixed(c);
  out += "cluster    " + c.name() + ": " + std::to_string(c.num_nodes()) + " x " +
         std::to_string(c.devices_per_node()) + " " +
         (mixed ? "(" + cluster_kinds_text(c) + ")" : c.device().name()) + "\n";
  out += "strategy   " + std::string(plan::strategy_name(plan.provenance().strategy())) +
         ", mini-batch " + std::to_string(plan.mini_batch()) + ", " +
         std::to_string(plan.stages_size()) + " stages, depth " +
         std::to_string(pipeline_depth(plan)) + "\n";
  const auto& t = plan.training();
  out += "training   " + training_text(t) + "\n";
  const auto& p = plan.predicted();
  if (p.iteration_time_s() > 0) {
    out += "predicted  iteration " + fmt("%.4f", p.iteration_time_s()) + " s, " +
           fmt("%.1f", p.throughput_samples_per_s()) + " samples/s, bubbles " +
           fmt("%.1f", 100 * p.bubble_fraction()) + "%, peak memory " +
           human_bytes(static_cast<double>(p.peak_memory_bytes())) + "\n";
  }
  out += "\nstages\n";
  for (const auto& st : plan.stages()) {
    std::string ranks;
    for (int r : st.device_ranks()) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    char line[512];
    std::snprintf(line, sizeof(line), "  %3d  ranks %-10s mb %-4lld in-flight %-5lld %3d ops  %s",
                  st.id(), ranks.c_str(), static_cast<long long>(st.micro_batch()),
                  static_cast<long long>(st.in_flight_samples()), st.op_ids_size(),
                  op_range(st).c_str());
    out += line;
    if (st.id() < p.stages_size()) {
      out += "  busy " + fmt("%.4f", p.stages(st.id()).busy_time_s()) + " s, mem " +
             human_bytes(static_cast<double>(p.stages(st.id()).peak_memory_bytes()));
    }
    if (mixed) out += "  on " + stage_kinds_text(plan, st);
    if (st.recompute()) out += "  recomputes";
    if (st.shard_optimizer()) out += "  shards optimizer";
    out += "\n";
  }
  if (const std::string why = recompute_summary(plan); !why.empty()) {
    out +=
        "\nrecomputation (each keeps only its boundary tensors per in-flight micro-batch)\n" + why;
  }
  if (const std::string why = shard_summary(plan); !why.empty()) {
    out +=
        "\noptimizer state sharding (ZeRO-1: each replica keeps 1/r of the state and "
        "all-gathers the parameters after the step)\n" +
        why;
  }
  // ASCII stage graph: one column per pipeline level, each stage listed with its successors.
  const auto level = stage_depths(plan);
  const int depth = plan.stages_size() == 0 ? 0 : *std::max_element(level.begin(), level.end());
  out += "\nstage graph (columns = pipeline depth)\n";
  for (int l = 1; l <= depth; ++l) {
    out += "  depth " + std::to_string(l) + ":";
    for (const auto& st : plan.stages()) {
      if (level[st.id()] != l) continue;
      std::string succ;
      for (const auto& e : plan.edges()) {
        if (e.src_stage() == st.id())
          succ += (succ.empty() ? "" : ",") + std::to_string(e.dst_stage());
      }
      out += "  [" + std::to_string(st.id()) + "]" + (succ.empty() ? "" : "->" + succ);
    }
    out += "\n";
  }
  return out;
}

}  // namespace gp::planner
