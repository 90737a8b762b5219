// Human- and machine-readable views of a plan: the search report JSON, a Graphviz stage graph,
// and the `inspect` summary with an ASCII stage graph.
#pragma once

#include <string>

#include "gp/planner/improve.h"
#include "gp/planner/search.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::planner {

struct ReportContext {
  std::string strategy;
  bool feasible = false;
  std::string infeasible_reason;
  int num_devices = 0;
  int64_t mini_batch = 0;
  double search_time_s = 0;
  int num_units = 0;  // planning units the search cut stages from
  const std::vector<CandidateSummary>* candidates = nullptr;
  std::string idle_devices_reason;  // why the plan leaves devices idle (empty: uses all)
  const ImproveSummary* improvement = nullptr;  // when --effort ran
  // Per stage, why it recomputes its activations (SearchResult::recompute_reasons); nullptr or
  // empty entries where none is known.
  const std::vector<std::string>* recompute_reasons = nullptr;
};

// The report of `graphpipe-plan search --report` (docs/plan-format.md lists the keys).
std::string plan_report_json(const ReportContext& ctx, const graphpipe::v1::Plan* plan);

// Graphviz: one box per stage (ops, devices, micro-batch, in-flight), edges labelled with bytes.
std::string stage_graph_dot(const graphpipe::v1::Plan& plan);

// Readable summary: model, cluster, stages, edges, predicted metrics and an ASCII stage graph
// laid out by pipeline depth.
std::string inspect_text(const graphpipe::v1::Plan& plan);

std::string human_bytes(double bytes);

// Mixed clusters (inspect, the reports): the device kinds of a cluster's usable devices with
// their counts, fastest first ("16 x A100-SXM4-80GB + 16 x V100-SXM2-16GB"; one kind: its name),
// and those of one stage's replicas ("A100-SXM4-80GB", "2 x A100-SXM4-80GB + 1 x V100-...").
std::string cluster_kinds_text(const graphpipe::v1::Cluster& cluster);
std::string stage_kinds_text(const graphpipe::v1::Plan& plan, const graphpipe::v1::Stage& stage);

}  // namespace gp::planner
