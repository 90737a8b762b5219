#include <CLI/CLI.hpp>
#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>

#include "commands.h"
#include "gp/common/logging.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/model/model_io.h"
#include "gp/model/zoo.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/report.h"
#include "gp/planner/search.h"
#include "gp/planner/verify.h"
#include "gp/profile_db/profile_db.h"

namespace gp::plan_cli {
namespace {

Result<graphpipe::v1::TrainingConfig> training_config(const SearchOptions& opts) {
  graphpipe::v1::TrainingConfig t;
  if (opts.optimizer == "adam") {
    t.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
    t.set_learning_rate(1e-3);
    t.set_adam_beta1(0.9);
    t.set_adam_beta2(0.999);
    t.set_adam_epsilon(1e-8);
  } else if (opts.optimizer == "sgd") {
    t.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_SGD);
    t.set_learning_rate(1e-2);
  } else if (opts.optimizer == "momentum") {
    t.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_MOMENTUM);
    t.set_learning_rate(1e-2);
    t.set_momentum(0.9);
  } else {
    return invalid_argument("--optimizer = '" + opts.optimizer +
                            "', expected adam, sgd or momentum");
  }
  if (opts.precision == "fp32") {
    t.set_precision(graphpipe::v1::PRECISION_FP32);
  } else if (opts.precision == "bf16") {
    t.set_precision(graphpipe::v1::PRECISION_BF16_FP32_MASTER);
  } else {
    return invalid_argument("--precision = '" + opts.precision + "', expected fp32 or bf16");
  }
  t.set_seed(opts.seed);
  // Explicit hyperparameters override the defaults above, for the optimizer that uses them.
  if (opts.lr) t.set_learning_rate(*opts.lr);
  const bool adam = t.optimizer() == graphpipe::v1::OPTIMIZER_KIND_ADAM;
  const bool momentum = t.optimizer() == graphpipe::v1::OPTIMIZER_KIND_MOMENTUM;
  if (opts.momentum && !momentum) {
    return invalid_argument("--momentum applies to --optimizer momentum, not " + opts.optimizer);
  }
  if ((opts.beta1 || opts.beta2 || opts.eps) && !adam) {
    return invalid_argument("--beta1, --beta2 and --eps apply to --optimizer adam, not " +
                            opts.optimizer);
  }
  if (opts.momentum) t.set_momentum(*opts.momentum);
  if (opts.beta1) t.set_adam_beta1(*opts.beta1);
  if (opts.beta2) t.set_adam_beta2(*opts.beta2);
  if (opts.eps) t.set_adam_epsilon(*opts.eps);
  t.set_weight_decay(opts.weight_decay);
  t.set_clip_grad_norm(opts.clip_grad_norm);
  if (opts.lr_schedule == "warmup-cosine") {
    t.set_lr_schedule(graphpipe::v1::LR_SCHEDULE_WARMUP_COSINE);
    t.set_warmup_steps(opts.warmup_steps);
    t.set_total_steps(opts.total_steps);
    t.set_min_learning_rate(opts.min_lr);
  } else if (opts.lr_schedule != "constant") {
    return invalid_argument("--lr-schedule = '" + opts.lr_schedule +
                            "', expected constant or warmup-cosine");
  }
  GP_RETURN_IF_ERROR(plan::validate_training(t, /*allow_unset_learning_rate=*/false));
  return t;
}

// The improvement search's outcome, and the moves that took the plan there.
void print_improvement(const planner::ImproveSummary& s) {
  std::printf(
      "improvement: %.1f -> %.1f samples/s (%+.2f%%), %lld plans simulated (%lld events) in %.1f s "
      "(stopped: %s; --effort-trials %lld replays it)\n",
      s.start_samples_per_s, s.end_samples_per_s,
      100 * (s.end_samples_per_s / s.start_samples_per_s - 1), static_cast<long long>(s.trials),
      static_cast<long long>(s.events), s.time_s, s.stopped_by.c_str(),
      static_cast<long long>(s.trials));
  for (const auto& m : s.moves) {
    std::printf("  %s %s: %.1f -> %.1f samples/s\n",
                m.kick ? "kick:" : "move:", m.description.c_str(), m.before_samples_per_s,
                m.after_samples_per_s);
  }
}

}  // namespace

Result<CostModels> make_cost_models(const graphpipe::v1::Cluster& cluster,
                                    graphpipe::v1::Precision precision,
                                    const std::string& profile_path) {
  CostModels models;
  // One analytic model per device kind, fastest first (one kind on a homogeneous cluster).
  const std::vector<std::string> kinds = cost::device_kind_names(cluster);
  std::map<std::string, std::shared_ptr<const cost::CostModel>> by_kind;
  for (const std::string& kind : kinds) {
    by_kind[kind] = std::make_shared<const cost::AnalyticCostModel>(
        *cost::find_device_kind(cluster, kind), precision);
  }
  const auto finish = [&]() -> Result<CostModels> {
    models.compute = by_kind[kinds.front()];
    if (kinds.size() == 1) {
      models.devices = std::make_shared<const cost::DeviceCostModels>(models.compute);
    } else {
      GP_ASSIGN_OR_RETURN(auto devices, cost::DeviceCostModels::create(cluster, by_kind));
      models.devices = std::make_shared<const cost::DeviceCostModels>(std::move(devices));
    }
    return std::move(models);
  };
  if (profile_path.empty()) {
    models.comm = std::make_shared<const cost::CommModel>(cluster);
    return finish();
  }
  graphpipe::v1::ProfileDB db;
  GP_RETURN_IF_ERROR(model::read_message(profile_path, &db).with_context("--profile"));
  // graphpipe-profile's own check: a record it would refuse must not steer a plan.
  GP_RETURN_IF_ERROR(profile::validate_profile(db).with_context("--profile " + profile_path));
  int kind_records = 0;
  for (const auto& m : db.ops()) {
    kind_records += std::find(kinds.begin(), kinds.end(), m.device_kind()) != kinds.end();
  }
  if (db.ops_size() > 0 && kind_records == 0) {
    // Every op would silently fall back to the analytic model: almost surely the wrong cluster.
    std::string names;
    for (const auto& k : kinds) names += (names.empty() ? "'" : ", '") + k + "'";
    return invalid_argument("--profile " + profile_path + ": none of its " +
                            std::to_string(db.ops_size()) + " op records is for device kind " +
                            names + " of cluster '" + cluster.name() + "' (first record: '" +
                            db.ops(0).device_kind() + "')");
  }
  for (const std::string& kind : kinds) {
    auto profiled = cost::ProfiledCostModel::create(db, kind, by_kind[kind]);
    if (!profiled.ok()) return profiled.status().with_context("--profile " + profile_path);
    by_kind[kind] = std::shared_ptr<const cost::CostModel>(std::move(profiled).value());
  }
  models.comm = std::make_shared<const cost::CommModel>(cluster, db);
  models.profile_hash = model::message_hash(db);
  return finish();
}

cost::DeviceCostModels device_costs_of(const PlanningSetup& setup) {
  if (setup.device_costs != nullptr) return *setup.device_costs;
  return cost::DeviceCostModels(setup.compute);
}

namespace {

// --nodes N / --devices-per-node P: the cluster's device kind and links, N nodes of P devices
// (either one alone keeps the cluster's other dimension). --devices M then picks M of them,
// whole nodes first; more than N x P conflicts.
Status reshape_cluster(const SearchOptions& opts, graphpipe::v1::Cluster* cluster) {
  if (opts.nodes == 0 && opts.devices_per_node == 0) return ok_status();
  const int64_t nodes = opts.nodes > 0 ? opts.nodes : cluster->num_nodes();
  const int64_t per_node =
      opts.devices_per_node > 0 ? opts.devices_per_node : cluster->devices_per_node();
  const std::string shape =
      "--nodes " + std::to_string(nodes) + " x --devices-per-node " + std::to_string(per_node);
  if (cluster->excluded_ranks_size() > 0) {
    // Its excluded ranks number devices of the old shape.
    return invalid_argument(shape + ": cluster '" + cluster->name() +
                            "' excludes devices (excluded_ranks), which would not be the same "
                            "devices in the new shape; reshape one without them and use "
                            "--exclude-devices");
  }
  if (nodes * per_node > (1 << 16)) {
    return invalid_argument(shape + " = " + std::to_string(nodes * per_node) +
                            " devices, more than 65536");
  }
  if (opts.devices > nodes * per_node) {
    return invalid_argument("--devices " + std::to_string(opts.devices) + " conflicts with " +
                            shape + " = " + std::to_string(nodes * per_node) +
                            " devices (--devices picks some of them; leave it out for all)");
  }
  cluster->set_num_nodes(static_cast<int>(nodes));
  cluster->set_devices_per_node(static_cast<int>(per_node));
  return cost::validate_cluster(*cluster).with_context(shape);
}

}  // namespace

Result<PlanningSetup> prepare(const SearchOptions& opts) {
  PlanningSetup setup;
  GP_ASSIGN_OR_RETURN(auto model, model::load_model(opts.model));
  auto built = model::Graph::build(model);
  if (!built.ok()) return built.status().with_context("model '" + opts.model + "'");
  setup.graph = std::make_unique<model::Graph>(std::move(built).value());
  GP_ASSIGN_OR_RETURN(auto cluster, cost::load_cluster(opts.cluster));
  GP_RETURN_IF_ERROR(reshape_cluster(opts, &cluster));
  const int available = cost::num_devices(cluster);
  const int wanted = opts.devices > 0 ? opts.devices : available;
  if (wanted > available) {
    return invalid_argument("--devices = " + std::to_string(wanted) + ": cluster '" +
                            cluster.name() + "' has only " + std::to_string(available) +
                            " usable devices");
  }
  if (!opts.exclude_devices.empty()) {
    for (int r : opts.exclude_devices) {
      if (r < 0 || r >= cluster.num_nodes() * cluster.devices_per_node()) {
        return invalid_argument("--exclude-devices: rank " + std::to_string(r) +
                                " is not a device of cluster '" + cluster.name() + "'");
      }
      cluster.add_excluded_ranks(r);
    }
    GP_RETURN_IF_ERROR(cost::validate_cluster(cluster).with_context("--exclude-devices"));
  }
  GP_ASSIGN_OR_RETURN(setup.cluster,
                      cost::select_devices(cluster, std::min(wanted, cost::num_devices(cluster))));
  if (opts.batch <= 0 || opts.batch > plan::kMaxMiniBatch) {
    return invalid_argument("--batch = " + std::to_string(opts.batch) + ", must be in [1, " +
                            std::to_string(plan::kMaxMiniBatch) + "]");
  }
  GP_ASSIGN_OR_RETURN(setup.training, training_config(opts));
  GP_ASSIGN_OR_RETURN(auto models,
                      make_cost_models(setup.cluster, setup.training.precision(), opts.profile));
  setup.compute = std::move(models.compute);
  setup.comm = std::move(models.comm);
  setup.profile_hash = std::move(models.profile_hash);
  setup.device_costs = std::move(models.devices);
  return setup;
}

Result<planner::SearchResult> run_search_for(const SearchOptions& opts, const PlanningSetup& setup,
                                             graphpipe::v1::Strategy strategy) {
  planner::SearchRequest req;
  req.graph = setup.graph.get();
  req.cluster = setup.cluster;
  req.mini_batch = opts.batch;
  req.strategy = strategy;
  req.training = setup.training;
  req.compute = setup.compute.get();
  req.comm = setup.comm.get();
  req.device_costs = setup.device_costs.get();
  req.micro_batches = opts.micro_batches;
  req.piper_downset_limit = opts.piper_downset_limit;
  req.piper_compress_branches = opts.piper_compress_branches;
  req.per_stage_microbatch =
      opts.per_stage_microbatch ||
      (strategy == graphpipe::v1::STRATEGY_GRAPHPIPE && !opts.uniform_microbatch);
  req.improve.effort_s = opts.effort_s;
  req.improve.max_trials = opts.effort_trials;
  req.improve.seed = opts.effort_seed;
  GP_ASSIGN_OR_RETURN(req.recompute, planner::parse_recompute_mode(opts.recompute));
  GP_ASSIGN_OR_RETURN(req.shard_optimizer, planner::parse_shard_mode(opts.shard_optimizer));
  auto logger = log::get("plan");
  const std::string name(plan::strategy_name(strategy));
  req.progress = [logger, name](int done, int total, const std::string& line) {
    if (total == 0) {
      logger->info("{} {}", name, line);  // not a step of the micro-batch sweep
    } else {
      logger->info("{} [{}/{}] {}", name, done, total, line);
    }
  };
  GP_ASSIGN_OR_RETURN(auto result, planner::search_plan(req));
  if (result.feasible) {
    const auto& p = result.plan.predicted();
    GP_RETURN_IF_ERROR(planner::check_prediction(p.iteration_time_s(), p.throughput_samples_per_s())
                           .with_context(name + " plan"));
    result.plan.mutable_provenance()->set_planner_version(GP_PLANNER_VERSION);
    result.plan.mutable_provenance()->set_command_line(opts.command_line);
    result.plan.mutable_provenance()->set_profile_hash(setup.profile_hash);
  }
  return result;
}

// A plan whose model carries its parameter values inline (e.g. --model model.onnx) leaves them
// in <out>.weights, referenced by hash, so the plan file stays small. Done before anything
// reports the plan's model_hash, which counts the values by the file's hash.
Status externalize_plan_weights(const std::string& out, graphpipe::v1::Plan& plan) {
  auto& model = *plan.mutable_model();
  if (out.empty() || !model.weights_file().empty()) return ok_status();
  const std::string weights = out + ".weights";
  GP_RETURN_IF_ERROR(model::externalize_weights(
      model, weights, std::filesystem::absolute(weights).lexically_normal().string()));
  if (!model.weights_file().empty()) plan.set_model_hash(model::model_hash(model));
  return ok_status();
}

Status write_outputs(const SearchOptions& opts, const PlanningSetup& setup,
                     const planner::SearchResult& result, graphpipe::v1::Strategy strategy) {
  graphpipe::v1::Plan written;  // the plan as its files show it
  if (result.feasible) {
    written = result.plan;
    GP_RETURN_IF_ERROR(externalize_plan_weights(opts.out, written));
  }
  planner::ReportContext ctx;
  ctx.strategy = std::string(plan::strategy_name(strategy));
  ctx.feasible = result.feasible;
  ctx.infeasible_reason = result.infeasible_reason;
  ctx.num_devices = cost::num_devices(setup.cluster);
  ctx.mini_batch = opts.batch;
  ctx.search_time_s = result.search_time_s;
  ctx.num_units = result.num_units;
  ctx.candidates = &result.candidates;
  ctx.idle_devices_reason = result.idle_devices_reason;
  ctx.recompute_reasons = &result.recompute_reasons;
  if (result.improvement.ran) ctx.improvement = &result.improvement;
  if (!opts.report.empty()) {
    GP_RETURN_IF_ERROR(model::write_file_atomic(
        opts.report, planner::plan_report_json(ctx, result.feasible ? &written : nullptr)));
  }
  if (!result.feasible) return ok_status();
  if (!opts.out.empty()) GP_RETURN_IF_ERROR(model::write_message(opts.out, written));
  if (!opts.dot.empty()) {
    GP_RETURN_IF_ERROR(model::write_file_atomic(opts.dot, planner::stage_graph_dot(result.plan)));
  }
  if (!opts.trace.empty()) {
    // Re-simulate with events recorded (the search keeps only aggregates).
    const sim::Simulator simulator(
        device_costs_of(setup), *setup.comm,
        {setup.training.optimizer(), setup.training.precision(), setup.compute.get()});
    GP_ASSIGN_OR_RETURN(auto sim, simulator.run(result.plan, *setup.graph, {true}));
    GP_RETURN_IF_ERROR(
        model::write_file_atomic(opts.trace, sim::chrome_trace_json(result.plan, sim)));
  }
  return ok_status();
}

Status run_search(const SearchOptions& opts) {
  GP_RETURN_IF_ERROR(model::format_for_path(opts.out).status().with_context("--out"));
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--out", opts.out},
                                   {"--report", opts.report},
                                   {"--trace", opts.trace},
                                   {"--dot", opts.dot}}) {
    GP_RETURN_IF_ERROR(model::check_output_path(flag, path));
  }
  GP_ASSIGN_OR_RETURN(auto strategy, planner::parse_strategy(opts.strategy));
  // Refused before the model is loaded: a typo should not cost a model import.
  GP_RETURN_IF_ERROR(planner::parse_recompute_mode(opts.recompute).status());
  GP_RETURN_IF_ERROR(planner::parse_shard_mode(opts.shard_optimizer).status());
  GP_ASSIGN_OR_RETURN(auto setup, prepare(opts));
  GP_ASSIGN_OR_RETURN(auto result, run_search_for(opts, setup, strategy));
  if (result.feasible) {
    // Never write a plan the verifier would reject.
    GP_ASSIGN_OR_RETURN(auto report, planner::verify_plan(result.plan, device_costs_of(setup)));
    if (!report.ok()) {
      return internal_error("the searched plan failed verification: " + report.problems[0]);
    }
  }
  GP_RETURN_IF_ERROR(write_outputs(opts, setup, result, strategy));
  if (!result.feasible) {
    return failed_precondition(
        "no feasible " + opts.strategy + " plan for '" + setup.graph->model().name() + "' on " +
        std::to_string(cost::num_devices(setup.cluster)) + " devices: " + result.infeasible_reason);
  }
  const auto& p = result.plan.predicted();
  const int available = cost::num_devices(setup.cluster);
  const int used = result.plan.programs_size();
  std::string devices = "on " + std::to_string(used) + " devices";
  if (used < available) {
    devices = "on " + std::to_string(used) + " of " + std::to_string(available) + " devices (" +
              std::to_string(available - used) + " idle: " + result.idle_devices_reason + ")";
  }
  std::printf(
      "%s: %d stages (depth %d) %s, micro-batch %lld, %.1f samples/s predicted, "
      "iteration %.4g s, peak memory %s, search %.3f s -> %s\n",
      opts.strategy.c_str(), result.plan.stages_size(), planner::pipeline_depth(result.plan),
      devices.c_str(), static_cast<long long>(result.plan.stages(0).micro_batch()),
      p.throughput_samples_per_s(), p.iteration_time_s(),
      planner::human_bytes(static_cast<double>(p.peak_memory_bytes())).c_str(),
      result.search_time_s, opts.out.c_str());
  if (!result.reference_kind.empty()) {
    // Mixed cluster: which kind's costs partitioned the plan, and where each stage runs.
    std::printf("  partitioned with %s as the reference kind; stages on:",
                result.reference_kind.c_str());
    for (const auto& st : result.plan.stages()) {
      std::printf(" %d %s%s", st.id(), planner::stage_kinds_text(result.plan, st).c_str(),
                  st.id() + 1 < result.plan.stages_size() ? ";" : "\n");
    }
  }
  if (result.improvement.ran) print_improvement(result.improvement);
  return ok_status();
}

Result<planner::SearchResult> search_again(const graphpipe::v1::Plan& old,
                                           const PlanningSetup& setup, const std::string& profile,
                                           const std::string& command_line, bool keep_micro_batch) {
  auto strategy = old.provenance().strategy();
  // A hand-made or lowered plan has no search to repeat: GraphPipe's searches instead.
  if (strategy == graphpipe::v1::STRATEGY_UNSPECIFIED ||
      strategy == graphpipe::v1::STRATEGY_MANUAL) {
    strategy = graphpipe::v1::STRATEGY_GRAPHPIPE;
  }
  SearchOptions so;
  so.batch = old.mini_batch();
  so.strategy = std::string(plan::strategy_name(strategy));
  so.profile = profile;
  so.command_line = command_line;
  // One micro-batch size at every stage, kept: each gradient is summed over the same samples in
  // the same order as before, so the losses go on bit for bit.
  std::set<int64_t> sizes;
  for (const auto& st : old.stages()) sizes.insert(st.micro_batch());
  // (Only a size the search can take: a power of two, as searches make them.)
  if (keep_micro_batch && sizes.size() == 1 &&
      std::has_single_bit(static_cast<uint64_t>(*sizes.begin()))) {
    so.micro_batches = {*sizes.begin()};
    so.uniform_microbatch = true;
  }
  return run_search_for(so, setup, strategy);
}

Status run_replan(const ReplanOptions& opts) {
  GP_RETURN_IF_ERROR(model::format_for_path(opts.out).status().with_context("--out"));
  GP_RETURN_IF_ERROR(model::check_output_path("--out", opts.out));
  graphpipe::v1::Plan old;
  GP_RETURN_IF_ERROR(model::read_message(opts.plan, &old).with_context("--plan"));
  GP_RETURN_IF_ERROR(plan::check_plan_hashes(old).with_context("--plan " + opts.plan));
  PlanningSetup setup;
  auto built = model::Graph::build(old.model());
  if (!built.ok()) return built.status().with_context("--plan " + opts.plan + ": plan.model");
  setup.graph = std::make_unique<model::Graph>(std::move(built).value());
  // The old plan's rank k is the k-th usable device of its cluster.
  graphpipe::v1::Cluster cluster = old.cluster();
  GP_RETURN_IF_ERROR(cost::validate_cluster(cluster).with_context("--plan " + opts.plan));
  const std::set<int> excluded(cluster.excluded_ranks().begin(), cluster.excluded_ranks().end());
  std::vector<int> physical;
  for (int r = 0; r < cluster.num_nodes() * cluster.devices_per_node(); ++r) {
    if (!excluded.count(r)) physical.push_back(r);
  }
  for (int rank : opts.exclude_ranks) {
    if (rank < 0 || rank >= static_cast<int>(physical.size())) {
      return invalid_argument("--exclude-ranks: " + std::to_string(rank) + " is not a rank of " +
                              opts.plan + " (it has " + std::to_string(physical.size()) +
                              " ranks)");
    }
    cluster.add_excluded_ranks(physical[static_cast<size_t>(rank)]);
  }
  const int available = cost::num_devices(cluster);
  if (available < 1) return invalid_argument("--exclude-ranks: no device would be left");
  const int wanted = opts.devices > 0 ? opts.devices : available;
  if (wanted > available) {
    return invalid_argument("--devices = " + std::to_string(wanted) + ": only " +
                            std::to_string(available) + " devices are left");
  }
  GP_ASSIGN_OR_RETURN(setup.cluster, cost::select_devices(cluster, wanted));
  setup.training = old.training();
  GP_ASSIGN_OR_RETURN(auto models,
                      make_cost_models(setup.cluster, setup.training.precision(), opts.profile));
  setup.compute = std::move(models.compute);
  setup.comm = std::move(models.comm);
  setup.profile_hash = std::move(models.profile_hash);
  setup.device_costs = std::move(models.devices);

  GP_ASSIGN_OR_RETURN(auto result, search_again(old, setup, opts.profile, opts.command_line));
  if (!result.feasible) {
    return failed_precondition("no feasible plan for '" + setup.graph->model().name() + "' on " +
                               std::to_string(wanted) + " devices: " + result.infeasible_reason);
  }
  GP_ASSIGN_OR_RETURN(auto report, planner::verify_plan(result.plan, device_costs_of(setup)));
  if (!report.ok()) {
    return internal_error("the re-planned plan failed verification: " + report.problems[0]);
  }
  GP_RETURN_IF_ERROR(externalize_plan_weights(opts.out, result.plan));
  GP_RETURN_IF_ERROR(model::write_message(opts.out, result.plan));
  const auto& p = result.plan.predicted();
  std::printf(
      "re-planned for %d devices: %d stages, %.1f samples/s predicted (was %.1f on %d) -> %s\n",
      wanted, result.plan.stages_size(), p.throughput_samples_per_s(),
      old.predicted().throughput_samples_per_s(), old.programs_size(), opts.out.c_str());
  return ok_status();
}

void add_search_options(CLI::App* cmd, SearchOptions* o, bool compare) {
  cmd->add_option("--model", o->model, "zoo:NAME[?k=v&...] or a model file (.pbtxt, .json, .pb)")
      ->required();
  cmd->add_option("--cluster", o->cluster,
                  "cluster preset (summit-v100, dgx-a100, dgx-h100, h200, cpu-local) or a file")
      ->capture_default_str();
  cmd->add_option("--devices", o->devices,
                  "use the first N devices of the cluster, whole nodes first (default: all)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--nodes", o->nodes,
                  "the cluster's device and links in N nodes (default: the cluster's count)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--devices-per-node", o->devices_per_node,
                  "... of P devices each (default: the cluster's); --devices then picks some of "
                  "the N x P devices, whole nodes first")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--exclude-devices", o->exclude_devices,
                  "ranks of the cluster not to use, e.g. failed GPUs: 3,17")
      ->delimiter(',');
  cmd->add_option("--batch", o->batch, "mini-batch size: samples per optimizer step")->required();
  if (!compare) {
    cmd->add_option("--strategy", o->strategy, "graphpipe, sequential (PipeDream) or piper")
        ->capture_default_str();
  } else {
    cmd->add_option("--strategies", o->strategies, "strategies to compare")
        ->delimiter(',')
        ->capture_default_str();
  }
  cmd->add_option("--profile", o->profile,
                  "profile DB from graphpipe-profile (measured costs; analytic model otherwise)");
  cmd->add_option("--micro-batches", o->micro_batches,
                  "micro-batch sizes to try, powers of two (default: all dividing --batch)")
      ->delimiter(',');
  cmd->add_option("--optimizer", o->optimizer, "adam, momentum or sgd (memory and plan config)")
      ->capture_default_str();
  cmd->add_option("--precision", o->precision, "fp32, or bf16 (bf16 compute, fp32 master)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "parameter initialisation seed stored in the plan")
      ->capture_default_str();
  cmd->add_option("--lr", o->lr,
                  "learning rate stored in the plan (default: 0.01 for sgd and momentum, 0.001 "
                  "for adam)");
  cmd->add_option("--momentum", o->momentum, "momentum factor (--optimizer momentum; default 0.9)");
  cmd->add_option("--beta1", o->beta1, "Adam's first-moment decay (default 0.9)");
  cmd->add_option("--beta2", o->beta2, "Adam's second-moment decay (default 0.999)");
  cmd->add_option("--eps", o->eps, "Adam's epsilon (default 1e-8)");
  cmd->add_option("--weight-decay", o->weight_decay,
                  "L2 weight decay, as PyTorch's weight_decay (default 0)");
  cmd->add_option("--clip-grad-norm", o->clip_grad_norm,
                  "scale the gradients so that their L2 norm over the whole model is at most "
                  "this, as torch.nn.utils.clip_grad_norm_ (default 0: no clipping)");
  cmd->add_option("--lr-schedule", o->lr_schedule,
                  "constant, or warmup-cosine: linear warm-up over --warmup-steps, then cosine "
                  "decay to --min-lr at --total-steps")
      ->capture_default_str();
  cmd->add_option("--warmup-steps", o->warmup_steps, "warm-up steps of warmup-cosine");
  cmd->add_option("--total-steps", o->total_steps, "steps at which warmup-cosine reaches --min-lr");
  cmd->add_option("--min-lr", o->min_lr, "the learning rate warmup-cosine decays to (default 0)");
  auto* per_stage = cmd->add_flag(
      "--per-stage-microbatch", o->per_stage_microbatch,
      "then refine: let single stages double or halve their micro-batch when the simulated "
      "throughput improves (the default for graphpipe; this turns it on for the baselines too)");
  cmd->add_flag("--uniform-microbatch", o->uniform_microbatch,
                "graphpipe without that refinement: one micro-batch size for every stage, as the "
                "paper evaluates")
      ->excludes(per_stage);
  cmd->add_option("--effort", o->effort_s,
                  "then spend up to this many seconds improving the plan by local moves (move a "
                  "unit between stages, split, merge or pair stages, move replicas, change a "
                  "stage's micro-batch), each judged by the simulator; never slower than "
                  "without (default 0: off)")
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--effort-trials", o->effort_trials,
                  "stop the improvement after this many simulated plans: with --effort-seed it "
                  "replays a run exactly on any machine (default 0: only --effort limits it)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--effort-seed", o->effort_seed,
                  "seed of the improvement's move order (default 1)")
      ->capture_default_str();
  cmd->add_option("--piper-downset-limit", o->piper_downset_limit,
                  "Piper gives up beyond this many downsets, as Piper itself does")
      ->capture_default_str();
  cmd->add_flag("--piper-compress-branches", o->piper_compress_branches,
                "Piper plans each parallel branch as one unit (PipeDream's compress_branches), "
                "so it runs on multi-branch models but never cuts inside a branch");
  cmd->add_option("--recompute", o->recompute,
                  "activation recomputation: auto (a stage recomputes its forward before each "
                  "backward only where the plan does not fit in memory without), never or "
                  "always")
      ->capture_default_str();
  cmd->add_option("--shard-optimizer", o->shard_optimizer,
                  "ZeRO-1 for replicated stages (each replica keeps 1/r of the optimizer state "
                  "and all-gathers the parameters after the step): auto (only where the plan "
                  "does not fit in memory without, after recomputation), never or always")
      ->capture_default_str();
}

Command add_search_command(CLI::App& app) {
  auto opts = std::make_shared<SearchOptions>();
  auto* search = app.add_subcommand(
      "search", "Search a plan: stages, devices, micro-batch and schedule; write it to --out");
  add_search_options(search, opts.get(), /*compare=*/false);
  search->add_option("--out", opts->out, "plan file to write (.pb, .pbtxt or .json)")->required();
  search->add_option("--report", opts->report, "write a JSON report of the search");
  search->add_option("--trace", opts->trace, "write the simulated Chrome trace (Perfetto)");
  search->add_option("--dot", opts->dot, "write the stage graph as Graphviz");
  return {search, [opts](const std::string& command_line) {
            opts->command_line = command_line;
            return run_search(*opts);
          }};
}

Command add_replan_command(CLI::App& app) {
  auto opts = std::make_shared<ReplanOptions>();
  auto* replan = app.add_subcommand(
      "replan",
      "Plan a plan's model and training again for the devices left after a failure (the "
      "executor resumes it from the last checkpoint)");
  replan->add_option("--plan", opts->plan, "the plan that was running")->required();
  replan->add_option("--out", opts->out, "new plan file")->required();
  replan
      ->add_option("--exclude-ranks", opts->exclude_ranks,
                   "ranks of the old plan whose devices are gone, e.g. 2 or 1,5")
      ->delimiter(',');
  // 0 is the default's "all of them", never a value to give.
  replan
      ->add_option("--devices", opts->devices,
                   "use only the first N remaining devices (default: all of them)")
      ->check(CLI::Range(1, 1 << 16));
  replan->add_option("--profile", opts->profile, "profile DB for measured costs");
  return {replan, [opts](const std::string& command_line) {
            opts->command_line = command_line;
            return run_replan(*opts);
          }};
}

}  // namespace gp::plan_cli
