// Reference plans for gp_planner_bench: stage assignments written by hand (configs/assignments/,
// each listed with the configuration it is for in configs/assignments/index.txt) and the
// baselines' partitions replayed as graph pipelines. Every one goes through the lowering of
// `graphpipe-plan lower` (resolve_assignment, lower_assignment, the faster feasible lowering,
// verify_plan), so GraphPipe's search is judged against plans on the same simulator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/cost/cost_model.h"
#include "gp/model/graph.h"
#include "gp/planner/lower.h"
#include "graphpipe/v1/cluster.pb.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::bench {

// One configuration a plan is made for.
struct BenchConfig {
  std::string model;    // zoo:NAME[?k=v&...] or a model file
  std::string cluster;  // cluster preset or file
  int devices = 0;
  int64_t mini_batch = 0;
  graphpipe::v1::Precision precision = graphpipe::v1::PRECISION_FP32;
  bool operator==(const BenchConfig&) const = default;
};

// "zoo:dlrm @8 dgx-h100 b256 fp32"
std::string config_label(const BenchConfig& config);

// One line of the index: an assignment file, the configuration it is for, how to lower it.
struct HandPlan {
  std::string path;  // the file: the index's directory joined with its name
  std::string name;  // its name in the index
  BenchConfig config;
  planner::Lowering lowering = planner::Lowering::kBest;
  std::string lowering_name;  // as written: chain, dag or best
  int line = 0;               // in the index
};

inline constexpr const char* kIndexName = "index.txt";

// Reads `dir`/index.txt: one line per (file, configuration), whitespace-separated columns
//   file model cluster devices batch precision lowering
// (precision: fp32 or bf16; lowering: chain, dag or best); `#` starts a comment. A file may be
// listed for several configurations. Errors name the line: "index.txt:4: devices = 'x' ...".
Result<std::vector<HandPlan>> read_hand_plan_index(const std::string& dir);

// The assignment files of `dir` (.json, .pbtxt, .pb), names only, sorted.
Result<std::vector<std::string>> assignment_files(const std::string& dir);

// Adam with the CLI's hyper-parameters (plan_commands.cc training_config) at `precision`.
graphpipe::v1::TrainingConfig training_config(graphpipe::v1::Precision precision);

// The inputs the CLI's prepare() builds without a profile: the model's graph, the first
// `devices` devices of the cluster, Adam at the precision, the analytic compute model (links:
// the cluster's datasheet, as lower_assignment and search_plan default to).
struct PlanningInputs {
  std::unique_ptr<model::Graph> graph;
  graphpipe::v1::Cluster cluster;
  graphpipe::v1::TrainingConfig training;
  std::unique_ptr<cost::AnalyticCostModel> compute;
};
Result<PlanningInputs> planning_inputs(const std::string& model_spec,
                                       const graphpipe::v1::Cluster& full_cluster, int devices,
                                       graphpipe::v1::Precision precision);
// The same for a configuration whose cluster is a preset or file.
Result<PlanningInputs> planning_inputs(const BenchConfig& config);

// A reference plan after lowering: the faster feasible lowering, or why none fits.
struct ReferenceResult {
  bool feasible = false;
  std::string lowering;  // "chain" or "dag", when feasible
  std::string reason;    // when not feasible
  double throughput = 0;
  graphpipe::v1::Plan plan;  // verified, when feasible
};

// Lowers `file` (op ids, replicas, optional micro-batches) as `graphpipe-plan lower` does;
// errors for files that do not resolve against the model and devices, and for a lowered plan
// the verifier rejects.
Result<ReferenceResult> lower_assignment_file(const graphpipe::v1::StageAssignmentFile& file,
                                              const PlanningInputs& in, int64_t mini_batch,
                                              planner::Lowering lowering);
// The hand plan's file, read and lowered for its configuration.
Result<ReferenceResult> lower_hand_plan(const HandPlan& hand_plan, const PlanningInputs& in);

// A plan's partition (each stage's ops and replicas; micro-batches left to the lowering, which
// tries every size) as an assignment: what a user replaying PipeDream's or Piper's optimizer
// output through `lower` writes.
graphpipe::v1::StageAssignmentFile partition_of(const graphpipe::v1::Plan& plan);

}  // namespace gp::bench
