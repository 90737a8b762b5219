// Subcommands of graphpipe-plan. Each returns a Status; main turns it into an exit code.
#pragma once

#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/common/version.h"
#include "gp/cost/cost_model.h"
#include "gp/cost/device_costs.h"
#include "gp/model/graph.h"
#include "gp/planner/search.h"
#include "graphpipe/v1/cluster.pb.h"
#include "graphpipe/v1/plan.pb.h"

#define GP_PLANNER_VERSION GP_VERSION_STRING

namespace CLI {
class App;
}  // namespace CLI

namespace gp::plan_cli {

struct ModelInfoOptions {
  std::string model;
  bool json = false;
};
struct ZooExportOptions {
  std::string name;
  std::string out;
};
struct ImportOptions {
  std::string file;
  std::string out;
  std::string loss = "mse";
  bool allow_opaque = false;
  bool untie_weights = false;
  bool inline_weights = false;      // keep parameter values inside the model file
  int64_t max_bag = 0;              // ids per sample for bags of varying length (0: refuse them)
  std::vector<std::string> freeze;  // initializers kept constant (registered buffers)
  std::vector<std::string> padding_idx;  // TABLE=ROW: nn.Embedding's padding_idx
};

struct SearchOptions {
  std::string model;
  std::string cluster = "summit-v100";
  int devices = 0;  // 0: all usable devices of the cluster
  // --nodes/--devices-per-node: the cluster's device and links in this shape (0: the cluster's).
  int nodes = 0;
  int devices_per_node = 0;
  std::vector<int> exclude_devices;
  int64_t batch = 0;
  std::string strategy = "graphpipe";
  std::vector<std::string> strategies = {"graphpipe", "sequential", "piper"};  // compare
  std::string profile;
  std::string out;
  std::string out_dir;  // compare
  std::string report;
  std::string trace;
  std::string dot;
  std::vector<int64_t> micro_batches;
  std::string optimizer = "adam";
  std::string precision = "fp32";
  uint64_t seed = 1;
  // Optimizer hyperparameters; unset: the optimizer's default (sgd/momentum lr 0.01, momentum
  // 0.9; adam lr 0.001, betas 0.9 and 0.999, eps 1e-8). A given NaN is validated, not ignored.
  std::optional<double> lr;
  std::optional<double> momentum;
  std::optional<double> beta1;
  std::optional<double> beta2;
  std::optional<double> eps;
  double weight_decay = 0;
  double clip_grad_norm = 0;
  std::string lr_schedule = "constant";  // or warmup-cosine
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
  double min_lr = 0;
  int piper_downset_limit = 40000;
  bool piper_compress_branches = false;
  // Per-stage micro-batch refinement: on for the graphpipe strategy unless --uniform-microbatch,
  // off for the baselines unless --per-stage-microbatch.
  bool per_stage_microbatch = false;
  bool uniform_microbatch = false;
  // The improvement search after the fast one (improve.h): a time budget, a trial budget (which
  // replays a run exactly), and its generator's seed.
  double effort_s = 0;
  int64_t effort_trials = 0;
  uint64_t effort_seed = 1;
  std::string recompute = "auto";        // auto, never or always (planner/recompute.h)
  std::string shard_optimizer = "auto";  // auto, never or always (planner/shard_optimizer.h)
  std::string command_line;
};

// Lower an external stage assignment (graphpipe-plan lower).
struct LowerOptions {
  SearchOptions search;  // model, cluster, devices, batch, training, cost models, outputs
  std::string assignment;
  std::string lowering = "best";
  std::vector<std::string> compare;  // planner strategies to add to the table
};

// Re-plan a plan's model and training for the devices that are left.
struct ReplanOptions {
  std::string plan;
  std::string out;
  std::vector<int> exclude_ranks;  // ranks of the old plan that are gone
  int devices = 0;                 // 0: every remaining device
  std::string profile;
  std::string command_line;
};

struct PlanFileOptions {
  std::string plan;
  std::string report;
  std::string trace;
  std::string profile;
  std::string model;    // verify: the model the plan must be for
  std::string cluster;  // verify: the cluster the plan must be for
  int devices = 0;
  bool json = false;  // inspect: machine-readable shape
};

// Resolved inputs shared by search and compare.
struct PlanningSetup {
  std::unique_ptr<model::Graph> graph;
  graphpipe::v1::Cluster cluster;
  graphpipe::v1::TrainingConfig training;
  // The reference compute model: on a mixed cluster the fastest kind's.
  std::shared_ptr<const cost::CostModel> compute;
  std::shared_ptr<const cost::CommModel> comm;
  std::string profile_hash;  // empty without --profile
  // Per-device compute (cost/device_costs.h); nullptr: `compute` for every device. A mixed
  // `cluster` (device_groups of other kinds) needs one model per kind: set it with
  // DeviceCostModels::create(cluster, by_kind_name) and `compute` to its reference(); then
  // run_search_for searches and simulates with it, and write_outputs' trace and the verifier
  // simulate with it.
  std::shared_ptr<const cost::DeviceCostModels> device_costs;
};
// The setup's per-device models, or `compute` for every device when it has none.
cost::DeviceCostModels device_costs_of(const PlanningSetup& setup);

// A plan file checked before any tool touches it: its cluster (costs divide by its numbers), its
// model and, unless the caller reports problems itself (verify), its hashes, structure, fields
// and schedule, as the executor checks them (a tool refuses what no rank would run).
// plan_tools.cc.
Result<graphpipe::v1::Plan> load_plan(const std::string& path, bool check_structure = true);

Status run_zoo_list();
Status run_zoo_export(const ZooExportOptions& opts);
Status run_import(const ImportOptions& opts);
Status run_model_info(const ModelInfoOptions& opts);
Status run_ops_list();

Result<PlanningSetup> prepare(const SearchOptions& opts);
struct CostModels {
  std::shared_ptr<const cost::CostModel> compute;  // the fastest kind's on a mixed cluster
  std::shared_ptr<const cost::CommModel> comm;
  std::string profile_hash;  // message_hash of the profile DB; empty without one
  // One model per device kind (uniform: `compute` for all on a homogeneous cluster).
  std::shared_ptr<const cost::DeviceCostModels> devices;
};
// The analytic compute model and datasheet links of `cluster`, or, with a profile DB, measured
// operator times (analytic fallback per op) and measured link fits. A mixed cluster gets one
// model per device kind (each profiled kind falls back to its own analytic model); the profile
// is refused as for another cluster only when none of its records is for any of its kinds.
Result<CostModels> make_cost_models(const graphpipe::v1::Cluster& cluster,
                                    graphpipe::v1::Precision precision,
                                    const std::string& profile_path);
Result<planner::SearchResult> run_search_for(const SearchOptions& opts, const PlanningSetup& setup,
                                             graphpipe::v1::Strategy strategy);
// The search `old` came from (GraphPipe's for a hand-made or lowered plan) with its mini-batch,
// repeated for `setup`: what replan and adapt switch to. With `keep_micro_batch` (adapt), a plan
// whose stages share one micro-batch size gets a plan of that size only, so that a job switching
// to it goes on with the same losses bit for bit. plan_commands.cc.
Result<planner::SearchResult> search_again(const graphpipe::v1::Plan& old,
                                           const PlanningSetup& setup, const std::string& profile,
                                           const std::string& command_line,
                                           bool keep_micro_batch = false);
Status write_outputs(const SearchOptions& opts, const PlanningSetup& setup,
                     const planner::SearchResult& result, graphpipe::v1::Strategy strategy);

// One row of the comparison table that compare and lower print.
struct TableRow {
  std::string name;
  const planner::SearchResult* result = nullptr;
};
void print_plan_table(const PlanningSetup& setup, int64_t mini_batch,
                      const std::vector<TableRow>& rows);

// A subcommand registered on the app: its CLI11 subcommand and what runs once it is parsed,
// given the whole command line (plans record it in their provenance). The options it fills live
// as long as `run`.
struct Command {
  CLI::App* cli = nullptr;
  std::function<Status(const std::string& command_line)> run;
};

// Registration of each subcommand, next to its implementation; main adds them in this order,
// which is the order --help lists them in.
Command add_zoo_command(CLI::App& app);         // model_commands.cc
Command add_model_info_command(CLI::App& app);  // model_commands.cc
Command add_ops_command(CLI::App& app);         // model_commands.cc
Command add_import_command(CLI::App& app);      // model_commands.cc
Command add_search_command(CLI::App& app);      // plan_commands.cc
Command add_lower_command(CLI::App& app);       // lower_command.cc
Command add_compare_command(CLI::App& app);     // plan_tools.cc
Command add_replan_command(CLI::App& app);      // plan_commands.cc
Command add_adapt_command(CLI::App& app);       // adapt_command.cc
Command add_simulate_command(CLI::App& app);    // plan_tools.cc
Command add_inspect_command(CLI::App& app);     // plan_tools.cc
Command add_verify_command(CLI::App& app);      // plan_tools.cc
Command add_report_command(CLI::App& app);      // html_report/report_command.cc

// The options search, lower and compare share (compare: --strategies instead of --strategy).
void add_search_options(CLI::App* cmd, SearchOptions* o, bool compare);

Status run_search(const SearchOptions& opts);
Status run_lower(const LowerOptions& opts);
Status run_replan(const ReplanOptions& opts);
Status run_compare(const SearchOptions& opts);
Status run_simulate(const PlanFileOptions& opts);
Status run_inspect(const PlanFileOptions& opts);
Status run_verify(const PlanFileOptions& opts);

}  // namespace gp::plan_cli
