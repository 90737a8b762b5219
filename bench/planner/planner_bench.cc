// Planner benchmark: predicted (simulated) throughput and search time of the graphpipe,
// sequential and piper strategies on the paper's models (summit-v100 at 4-32 devices, dgx-h100
// at 8, 32 and 64), a branch-count sweep of zoo:nbranch, and a summary of the performance targets
// computed from those numbers. Every search goes through planner::search_plan exactly as
// `graphpipe-plan search/compare` does (analytic cost model, every power-of-two micro-batch,
// the default Piper downset limit).
//
// Reference plans: the hand-written assignments of configs/assignments/ (index.txt names the
// configuration of each; a configuration outside the grid gets a row of its own) and the
// sequential and Piper partitions replayed as graph pipelines, all lowered as `graphpipe-plan
// lower` does (reference_plans.h). Each row also shows GraphPipe against an iteration bound that
// counts every op's compute, optimizer step and all-reduce (iteration_bound.h).
//
//   gp_planner_bench           all rows, and a 1,016-operator mmt on 256 H100s (minutes)
//   gp_planner_bench --quick   only the 32-device summit rows, the hand-plan configurations and
//                              the nbranch sweep
//   gp_planner_bench --json F  also write every row as JSON to F
//   gp_planner_bench --assignments DIR   hand plans from DIR (default: configs/assignments)
// A last table searches models that overflow memory with and without recomputation and
// optimizer sharding (memory_rows.h). Exits 1 when GraphPipe's plan is slower than a baseline's
// anywhere, below 0.95x a reference plan, or slower (or infeasible) with recomputation and
// sharding allowed than without.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gp/common/logging.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/model/graph.h"
#include "gp/model/zoo.h"
#include "gp/plan/plan_util.h"
#include "gp/planner/iteration_bound.h"
#include "gp/planner/search.h"
#include "memory_rows.h"
#include "reference_plans.h"

using namespace gp;

namespace {

[[noreturn]] void die(const Status& st) {
  std::fprintf(stderr, "gp_planner_bench: %s\n", st.to_string().c_str());
  std::exit(1);
}

template <typename T>
T check(Result<T> r) {
  if (!r.ok()) die(r.status());
  return std::move(r).value();
}

constexpr graphpipe::v1::Strategy kStrategies[] = {graphpipe::v1::STRATEGY_GRAPHPIPE,
                                                   graphpipe::v1::STRATEGY_SEQUENTIAL,
                                                   graphpipe::v1::STRATEGY_PIPER};
constexpr int kNumStrategies = 3;
constexpr int kGraphPipe = 0;
constexpr int kSequential = 1;

struct Cell {
  bool feasible = false;
  std::string reason;  // short: "infeasible" or "too many downsets"
  double throughput = 0;
  double search_s = 0;
  int devices_used = 0;
  bool compressed = false;  // Piper over compressed branches (plain Piper gave up)
};

// A plan GraphPipe's search is held against: a hand-written assignment or a baseline's partition
// replayed as a graph pipeline.
struct Reference {
  std::string name;  // the assignment file, or "sequential as dag" / "piper as dag"
  bool hand = false;
  bench::ReferenceResult result;
};

// GraphPipe below this fraction of a reference plan fails the bench.
constexpr double kReferenceTolerance = 0.95;
// Where a reference plan beats GraphPipe's fast search, the row also runs the improvement search
// (search --effort) for this many simulated plans: a trial budget, so that the row's result is
// the same on any machine (a time budget is cut short on a slow one).
constexpr int64_t kEffortTrials = 20000;

struct Row {
  std::string model;
  std::string cluster;
  int devices = 0;
  int64_t mini_batch = 0;
  graphpipe::v1::Precision precision = graphpipe::v1::PRECISION_FP32;
  Cell cells[kNumStrategies];
  // No plan on these devices beats every op's compute done in one kernel of the whole mini-batch
  // (the analytic model's time per sample only falls with the samples per kernel), spread
  // perfectly over the devices with no transfer, all-reduce or bubble: samples/s.
  double compute_bound = 0;
  // The same bound with every op's kernels running k samples instead of the whole mini-batch,
  // for each power of two k dividing it: (k, samples/s). A plan whose replicas run kernels of k
  // samples cannot pass the bound at k.
  std::vector<std::pair<int64_t, double>> kernel_batch_bounds;
  // Compute plus every op's optimizer step and all-reduce (iteration_bound.h).
  planner::IterationBound iteration_bound;
  std::vector<Reference> references;
  double gp_speedup = NAN;      // graphpipe / best feasible baseline; NaN when undefined
  double search_speedup = NAN;  // sequential search time / graphpipe search time
  // GraphPipe with --uniform-microbatch (one micro-batch size for every stage, the paper's
  // evaluated default; the GraphPipe column refines stages' sizes); its ratio to the best
  // baseline. NaN when not run or infeasible.
  double gp_uniform_mb = NAN;
  double gp_uniform_mb_speedup = NAN;
  // GraphPipe with kEffortTrials of improvement, run where a reference plan beats its fast
  // search; NaN when not run.
  double gp_effort = NAN;
  double gp_effort_s = 0;
};

std::string short_reason(const std::string& reason) {
  return reason.find("too many downsets") != std::string::npos ? "too many downsets" : "infeasible";
}

std::string row_label(const Row& r) {
  return r.model + " @" + std::to_string(r.devices) + " " + r.cluster + " b" +
         std::to_string(r.mini_batch);
}

// The bounds of a row that need no search: compute alone (whole mini-batch kernels and per
// kernel size) and compute with the optimizer step and all-reduce.
void fill_bounds(Row& row, const bench::PlanningInputs& in) {
  const model::Graph& g = *in.graph;
  auto bound_at = [&](int64_t k) {  // every op's forward and backward in kernels of k samples
    double kernel_s = 0;
    for (const auto& op : g.ops()) {
      const cost::OpTime t = in.compute->op_time(op, k);
      kernel_s += (t.forward_us + t.backward_us) * 1e-6;
    }
    return kernel_s > 0 ? static_cast<double>(k) * row.devices / kernel_s : 0;
  };
  row.compute_bound = bound_at(row.mini_batch);
  for (int64_t k = 1; k <= row.mini_batch; k *= 2) {
    if (row.mini_batch % k == 0) row.kernel_batch_bounds.emplace_back(k, bound_at(k));
  }
  row.iteration_bound =
      planner::iteration_bound(g, *in.compute, in.cluster, in.training, row.mini_batch);
}

// Runs search_plan for the first `num_strategies` strategies (the others stay "not run") and
// returns the feasible plans by strategy (for the replays).
std::vector<graphpipe::v1::Plan> run_strategies(Row& row, const bench::PlanningInputs& in,
                                                int num_strategies) {
  auto request = [&](graphpipe::v1::Strategy strategy) {
    planner::SearchRequest req;
    req.graph = in.graph.get();
    req.cluster = in.cluster;
    req.mini_batch = row.mini_batch;
    req.strategy = strategy;
    req.training = in.training;
    req.compute = in.compute.get();
    return req;
  };
  std::vector<graphpipe::v1::Plan> plans(kNumStrategies);
  for (int s = 0; s < kNumStrategies; ++s) {
    if (s >= num_strategies) {
      row.cells[s].reason = "not run";
      continue;
    }
    planner::SearchRequest req = request(kStrategies[s]);
    // As graphpipe-plan search: GraphPipe refines per-stage micro-batches, the baselines do not.
    req.per_stage_microbatch = kStrategies[s] == graphpipe::v1::STRATEGY_GRAPHPIPE;
    auto result = planner::search_plan(req);
    if (kStrategies[s] == graphpipe::v1::STRATEGY_PIPER && result.ok() && !result->feasible &&
        result->infeasible_reason.find("too many downsets") != std::string::npos) {
      // As PipeDream's users do for multi-branch models: compress the branches, then plan.
      req.piper_compress_branches = true;
      result = planner::search_plan(req);
      row.cells[s].compressed = true;
    }
    if (!result.ok()) {
      die(result.status().with_context(std::string(plan::strategy_name(kStrategies[s])) +
                                       " search for " + row_label(row)));
    }
    Cell& cell = row.cells[s];
    cell.feasible = result->feasible;
    cell.search_s = result->search_time_s;
    if (cell.feasible) {
      cell.throughput = result->plan.predicted().throughput_samples_per_s();
      cell.devices_used = result->plan.programs_size();
      plans[s] = std::move(result->plan);
    } else {
      cell.reason = short_reason(result->infeasible_reason);
    }
  }
  if (num_strategies == kNumStrategies) {
    planner::SearchRequest req = request(graphpipe::v1::STRATEGY_GRAPHPIPE);
    req.per_stage_microbatch = false;
    auto uniform = planner::search_plan(req);
    if (!uniform.ok()) die(uniform.status().with_context("graphpipe --uniform-microbatch"));
    if (uniform->feasible) row.gp_uniform_mb = uniform->plan.predicted().throughput_samples_per_s();
  }
  return plans;
}

// The baselines' partitions replayed as graph pipelines, then the hand plans of this row.
void add_references(Row& row, const bench::PlanningInputs& in,
                    const std::vector<graphpipe::v1::Plan>& plans,
                    const std::vector<const bench::HandPlan*>& hand_plans) {
  for (int s = 0; s < kNumStrategies; ++s) {
    if (s == kGraphPipe || !row.cells[s].feasible) continue;
    Reference ref;
    ref.name = std::string(plan::strategy_name(kStrategies[s])) + " as dag";
    ref.result = check(bench::lower_assignment_file(bench::partition_of(plans[s]), in,
                                                    row.mini_batch, planner::Lowering::kDag));
    row.references.push_back(std::move(ref));
  }
  for (const bench::HandPlan* hp : hand_plans) {
    Reference ref;
    ref.name = hp->name;
    ref.hand = true;
    ref.result = check(bench::lower_hand_plan(*hp, in));
    row.references.push_back(std::move(ref));
  }
}

// The best reference plan's samples/s (0 when none is feasible).
double best_reference(const Row& row) {
  double best = 0;
  for (const auto& ref : row.references) {
    if (ref.result.feasible) best = std::max(best, ref.result.throughput);
  }
  return best;
}

// GraphPipe's search with the improvement after it, where a reference plan beats the fast one.
void run_effort(Row& row, const bench::PlanningInputs& in) {
  const Cell& gp = row.cells[kGraphPipe];
  if (!gp.feasible || best_reference(row) <= gp.throughput) return;
  planner::SearchRequest req;
  req.graph = in.graph.get();
  req.cluster = in.cluster;
  req.mini_batch = row.mini_batch;
  req.strategy = graphpipe::v1::STRATEGY_GRAPHPIPE;
  req.training = in.training;
  req.compute = in.compute.get();
  req.per_stage_microbatch = true;
  req.improve.max_trials = kEffortTrials;
  const auto result = check(planner::search_plan(req));
  if (!result.feasible) return;
  row.gp_effort = result.plan.predicted().throughput_samples_per_s();
  row.gp_effort_s = result.search_time_s;
}

// One (model, cluster, devices, mini-batch, precision) point: builds the inputs like the CLI's
// prepare(), runs the strategies, lowers the reference plans.
Row run_row(const std::string& model_spec, const graphpipe::v1::Cluster& full_cluster, int devices,
            int64_t mini_batch, graphpipe::v1::Precision precision,
            int num_strategies = kNumStrategies,
            const std::vector<const bench::HandPlan*>& hand_plans = {}) {
  const auto start = std::chrono::steady_clock::now();
  Row row;
  row.model = model_spec;
  row.cluster = full_cluster.name();
  row.devices = devices;
  row.mini_batch = mini_batch;
  row.precision = precision;
  const auto in = check(bench::planning_inputs(model_spec, full_cluster, devices, precision));
  fill_bounds(row, in);
  const auto plans = run_strategies(row, in, num_strategies);
  // The scale row (two strategies) skips the replays: minutes of lowering on 256 devices.
  if (num_strategies == kNumStrategies) {
    add_references(row, in, plans, hand_plans);
    run_effort(row, in);
  }

  double best_baseline = 0;
  for (int s = 0; s < kNumStrategies; ++s) {
    if (s != kGraphPipe && row.cells[s].feasible) {
      best_baseline = std::max(best_baseline, row.cells[s].throughput);
    }
  }
  if (row.cells[kGraphPipe].feasible && best_baseline > 0) {
    row.gp_speedup = row.cells[kGraphPipe].throughput / best_baseline;
    if (!std::isnan(row.gp_uniform_mb))
      row.gp_uniform_mb_speedup = row.gp_uniform_mb / best_baseline;
  }
  if (row.cells[kGraphPipe].search_s > 0) {
    row.search_speedup = row.cells[kSequential].search_s / row.cells[kGraphPipe].search_s;
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "[bench] %-28s %-11s %3d devices, mini-batch %4lld: done in %.1f s\n",
               model_spec.c_str(), row.cluster.c_str(), devices, static_cast<long long>(mini_batch),
               elapsed);
  return row;
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

std::string throughput_text(const Cell& c) {
  return (c.feasible ? fmt("%.1f", c.throughput) : c.reason) + (c.compressed ? " cb" : "");
}

std::string ratio_text(double r) { return std::isnan(r) ? "-" : fmt("%.2fx", r); }

const char* precision_text(graphpipe::v1::Precision p) {
  return p == graphpipe::v1::PRECISION_BF16_FP32_MASTER ? "bf16" : "fp32";
}

std::string percent_of(const Cell& gp, double bound) {
  return gp.feasible && bound > 0 ? fmt("%.0f%%", 100 * gp.throughput / bound) : "-";
}

void print_main_table(const std::vector<Row>& rows) {
  std::printf("Predicted (simulated) throughput in samples/s and search time in s per strategy\n");
  std::printf(
      "(Adam; prec: fp32, or bf16 with fp32 master weights; cb: Piper gave up at 40000\n"
      "downsets and ran again over compressed branches; sequential: the faster of its chain DP\n"
      "and PipeDream's own hierarchical DP; bound: no plan on these devices can exceed it, all\n"
      "compute at the mini-batch's efficiency, nothing else; iter bound: no plan can exceed it\n"
      "either: the least iteration T in which every op i, on the r_i replicas of its stage, fits\n"
      "c_i/r_i + o_i + a_i(r_i) <= T on one replica and sum_i [c_i + r_i (o_i + a_i(r_i))] <=\n"
      "devices x T overall (c_i: compute of the mini-batch at its cheapest kernel size; o_i: the\n"
      "simulator's optimizer step over its state; a_i(r) = 2 (r-1)/r x gradient bytes / the\n"
      "fastest link's bandwidth), as mini-batch / T; its o+a share: the optimizer step and\n"
      "all-reduce share of the devices' time at T)\n\n");
  std::printf("%-48s | %-31s | %-31s | %-31s |\n", "", "graphpipe", "sequential", "piper");
  std::printf(
      "%-19s %-11s %4s %6s %4s | %17s %4s %8s | %17s %4s %8s | %17s %4s %8s | %10s %14s | %9s %8s "
      "| %10s %6s %7s | %18s\n",
      "model", "cluster", "devs", "batch", "prec", "samples/s", "used", "search s", "samples/s",
      "used", "search s", "samples/s", "used", "search s", "GP speedup", "search speedup", "bound",
      "GP/bound", "iter bound", "o+a", "GP/iter", "GP uniform mb");
  for (const auto& r : rows) {
    std::printf("%-19s %-11s %4d %6lld %4s", r.model.c_str(), r.cluster.c_str(), r.devices,
                static_cast<long long>(r.mini_batch), precision_text(r.precision));
    for (const auto& c : r.cells) {
      std::printf(" | %17s %4d %8.3f", throughput_text(c).c_str(), c.devices_used, c.search_s);
    }
    const Cell& gp = r.cells[kGraphPipe];
    const std::string uniform_mb =
        std::isnan(r.gp_uniform_mb)
            ? "-"
            : fmt("%.1f", r.gp_uniform_mb) + " " + ratio_text(r.gp_uniform_mb_speedup);
    const planner::IterationBound& ib = r.iteration_bound;
    const double busy = ib.compute_s + ib.optimizer_s + ib.allreduce_s;
    std::printf(
        " | %10s %14s | %9.1f %8s | %10.1f %6s %7s | %18s\n", ratio_text(r.gp_speedup).c_str(),
        ratio_text(r.search_speedup).c_str(), r.compute_bound,
        percent_of(gp, r.compute_bound).c_str(), ib.samples_per_s,
        busy > 0 ? fmt("%.0f%%", 100 * (ib.optimizer_s + ib.allreduce_s) / busy).c_str() : "-",
        percent_of(gp, ib.samples_per_s).c_str(), uniform_mb.c_str());
  }
}

// Every reference plan of every row against GraphPipe's plan.
void print_reference_table(const std::vector<Row>& rows) {
  std::printf(
      "\nReference plans, lowered as graphpipe-plan lower does (hand: configs/assignments, "
      "index.txt;\n<strategy> as dag: that baseline's partition, ops and replicas, replayed as a "
      "graph pipeline,\nevery micro-batch tried); the bench fails where GraphPipe is below "
      "%.2fx one\n\n",
      kReferenceTolerance);
  std::printf("%-19s %-11s %4s %6s %4s | %10s | %-42s %5s %10s %8s\n", "model", "cluster", "devs",
              "batch", "prec", "graphpipe", "reference", "lower", "samples/s", "GP/ref");
  for (const auto& r : rows) {
    const Cell& gp = r.cells[kGraphPipe];
    for (const auto& ref : r.references) {
      const auto& res = ref.result;
      std::printf(
          "%-19s %-11s %4d %6lld %4s | %10s | %-42s %5s %10s %8s\n", r.model.c_str(),
          r.cluster.c_str(), r.devices, static_cast<long long>(r.mini_batch),
          precision_text(r.precision), throughput_text(gp).c_str(),
          ((ref.hand ? "hand: " : "") + ref.name).c_str(),
          res.feasible ? res.lowering.c_str() : "-",
          res.feasible ? fmt("%.1f", res.throughput).c_str() : "infeasible",
          res.feasible && gp.feasible ? ratio_text(gp.throughput / res.throughput).c_str() : "-");
    }
    if (!std::isnan(r.gp_effort)) {
      const double best = best_reference(r);
      std::printf("%-48s | %10.1f | %-42s %5s %10.1f %8s\n", "", r.gp_effort,
                  ("graphpipe --effort-trials " + std::to_string(kEffortTrials) + " (" +
                   fmt("%.1f", r.gp_effort_s) + " s)")
                      .c_str(),
                  "", best, ratio_text(r.gp_effort / best).c_str());
    }
  }
}

void print_nbranch_table(const std::vector<Row>& rows, const std::vector<int>& branches) {
  std::printf(
      "\nBranch-count sweep: zoo:nbranch?branches=N on 16 x summit-v100, mini-batch 128\n\n");
  std::printf("%8s | %17s %8s | %17s %8s | %16s\n", "branches", "graphpipe smp/s", "search s",
              "sequential smp/s", "search s", "GP / sequential");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const Cell& gp = r.cells[kGraphPipe];
    const Cell& seq = r.cells[kSequential];
    const double ratio =
        gp.feasible && seq.feasible ? gp.throughput / seq.throughput : static_cast<double>(NAN);
    std::printf("%8d | %17s %8.3f | %17s %8.3f | %16s\n", branches[i], throughput_text(gp).c_str(),
                gp.search_s, throughput_text(seq).c_str(), seq.search_s, ratio_text(ratio).c_str());
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

const char* verdict(bool met) { return met ? "MET" : "NOT MET"; }

void print_summary(const std::vector<Row>& rows, const std::vector<Row>& nbranch,
                   const std::vector<int>& branches) {
  std::printf("\nTargets (computed from the tables above)\n\n");

  // (1) GraphPipe >= 1.3x the best baseline on the branchy models at 32 summit devices.
  {
    bool met = true;
    int found = 0;
    std::string detail;
    for (const auto& r : rows) {
      if (r.cluster != "summit-v100" || r.devices != 32 || r.model == "zoo:transformer") continue;
      ++found;
      const bool ok = !std::isnan(r.gp_speedup) && r.gp_speedup >= 1.3;
      met = met && ok;
      detail += (detail.empty() ? "" : ", ") + r.model + " " +
                (std::isnan(r.gp_speedup) ? std::string("undefined (no feasible pair)")
                                          : ratio_text(r.gp_speedup));
      if (!std::isnan(r.gp_uniform_mb_speedup)) {
        detail += " (" + ratio_text(r.gp_uniform_mb_speedup) + " with --uniform-microbatch)";
      }
      if (!ok && !std::isnan(r.gp_speedup) && r.compute_bound > 0) {
        // How far the target is from what any plan could reach on these devices.
        const double needed = 1.3 * r.cells[kGraphPipe].throughput / r.gp_speedup;
        detail += " [1.30x needs " + fmt("%.0f", needed) +
                  " samples/s = " + fmt("%.0f%%", 100 * needed / r.compute_bound) +
                  " of the compute bound; with kernels of at most k samples no plan passes";
        // Up to the first k whose bound clears the need: how large every kernel must be.
        for (const auto& [k, bound] : r.kernel_batch_bounds) {
          detail += " " + fmt("%.0f", bound) + " (k=" + std::to_string(k) + ")";
          if (bound >= needed) break;
        }
        detail += "]";
      }
    }
    met = met && found == 3;
    std::printf(
        "(1) [retired by issue 38, for the record] GraphPipe >= 1.30x best baseline on mmt, "
        "dlrm, candle-uno at 32 summit devices: %s (%s)\n",
        verdict(met), detail.c_str());
  }

  // (2) Transformer: GraphPipe never below 0.98x the best baseline.
  {
    bool met = true;
    double worst = INFINITY;
    std::string worst_at = "-";
    std::string undefined;
    for (const auto& r : rows) {
      if (r.model != "zoo:transformer") continue;
      if (std::isnan(r.gp_speedup)) {
        met = false;
        undefined += " " + row_label(r);
        continue;
      }
      if (r.gp_speedup < worst) worst = r.gp_speedup, worst_at = row_label(r);
      met = met && r.gp_speedup >= 0.98;
    }
    std::printf(
        "(2) transformer: GraphPipe >= 0.98x best baseline at every device count: %s "
        "(min %s at %s%s%s)\n",
        verdict(met), std::isinf(worst) ? "-" : ratio_text(worst).c_str(), worst_at.c_str(),
        undefined.empty() ? "" : "; undefined at", undefined.c_str());
  }

  // (3) and (4) over every search of both tables.
  std::vector<const Row*> all;
  for (const auto& r : rows) all.push_back(&r);
  for (const auto& r : nbranch) all.push_back(&r);
  {
    double slowest = 0;
    std::string slowest_at = "-";
    for (const Row* r : all) {
      if (r->cells[kGraphPipe].search_s > slowest) {
        slowest = r->cells[kGraphPipe].search_s;
        slowest_at = row_label(*r);
      }
    }
    std::printf("(3) every GraphPipe search < 1 s: %s (%zu searches, slowest %.3f s: %s)\n",
                verdict(slowest < 1.0), all.size(), slowest, slowest_at.c_str());
  }
  {
    std::vector<double> ratios;
    double lowest = INFINITY;
    std::string lowest_at = "-";
    for (const Row* r : all) {
      if (std::isnan(r->search_speedup)) continue;
      ratios.push_back(r->search_speedup);
      if (r->search_speedup < lowest) lowest = r->search_speedup, lowest_at = row_label(*r);
    }
    const bool met = !ratios.empty() && lowest >= 10.0;
    std::printf(
        "(4) GraphPipe search >= 10x faster than sequential (every row): %s (min %s at %s, "
        "median %s over %zu rows)\n",
        verdict(met), ratios.empty() ? "-" : ratio_text(lowest).c_str(), lowest_at.c_str(),
        ratios.empty() ? "-" : ratio_text(median(ratios)).c_str(), ratios.size());
  }

  // (5) nbranch: GraphPipe / sequential non-decreasing in the branch count.
  {
    bool met = !nbranch.empty();
    double prev = -INFINITY;
    std::string seq;
    for (size_t i = 0; i < nbranch.size(); ++i) {
      const Cell& gp = nbranch[i].cells[kGraphPipe];
      const Cell& sq = nbranch[i].cells[kSequential];
      const double ratio =
          gp.feasible && sq.feasible ? gp.throughput / sq.throughput : static_cast<double>(NAN);
      seq += (seq.empty() ? "" : ", ") + std::to_string(branches[i]) + ": " + ratio_text(ratio);
      if (std::isnan(ratio) || ratio < prev) met = false;
      if (!std::isnan(ratio)) prev = ratio;
    }
    std::printf("(5) nbranch GraphPipe/sequential speedup non-decreasing in branches: %s (%s)\n",
                verdict(met), seq.c_str());
  }
}

constexpr const char* kScaleModel = "zoo:mmt?layers=36";

void print_scale_table(const std::vector<Row>& rows) {
  if (rows.empty()) return;
  std::printf("\nScale: %s (1016 operators) on 256 x H100 (32 DGX nodes), mini-batch 2048\n\n",
              kScaleModel);
  std::printf("%-11s | %17s %4s %8s\n", "strategy", "samples/s", "used", "search s");
  for (const Row& r : rows) {
    for (int s = 0; s < 2; ++s) {
      const Cell& c = r.cells[s];
      std::printf("%-11s | %17s %4d %8.3f\n",
                  std::string(plan::strategy_name(kStrategies[s])).c_str(),
                  throughput_text(c).c_str(), c.devices_used, c.search_s);
    }
  }
}

void print_scale_summary(const std::vector<Row>& rows) {
  if (rows.empty()) return;
  const Cell& gp = rows[0].cells[kGraphPipe];
  std::printf("(6) GraphPipe search of a 1,000-operator graph on 256 devices < 10 s: %s (%.3f s)\n",
              verdict(gp.search_s < 10.0), gp.search_s);
}

// Rows where GraphPipe's plan is slower than a feasible baseline's (or missing while one
// exists), as "model @devices cluster: graphpipe X vs best baseline Y".
std::vector<std::string> losses(const std::vector<const Row*>& rows) {
  std::vector<std::string> out;
  for (const Row* r : rows) {
    double best = 0;
    for (int s = 0; s < kNumStrategies; ++s) {
      if (s != kGraphPipe && r->cells[s].feasible) best = std::max(best, r->cells[s].throughput);
    }
    const Cell& gp = r->cells[kGraphPipe];
    if (best > 0 && (!gp.feasible || gp.throughput < best * (1 - 1e-9))) {
      out.push_back(row_label(*r) + ": graphpipe " + throughput_text(gp) + " vs best baseline " +
                    fmt("%.1f", best));
    }
  }
  return out;
}

// Reference plans GraphPipe's plan is below kReferenceTolerance of (or missing beside), as
// "model @devices cluster bN: graphpipe X = 0.44x hand plan F (Y, dag)".
std::vector<std::string> reference_shortfalls(const std::vector<const Row*>& rows) {
  std::vector<std::string> out;
  for (const Row* r : rows) {
    const Cell& gp = r->cells[kGraphPipe];
    for (const auto& ref : r->references) {
      if (!ref.result.feasible) continue;
      const double ratio = gp.feasible ? gp.throughput / ref.result.throughput : 0.0;
      if (ratio >= kReferenceTolerance) continue;
      const double needed = kReferenceTolerance * ref.result.throughput;
      out.push_back(row_label(*r) + " " + precision_text(r->precision) + ": graphpipe " +
                    throughput_text(gp) + " = " + ratio_text(ratio) + " " +
                    (ref.hand ? "hand plan " : "") + ref.name + " (" +
                    fmt("%.1f", ref.result.throughput) + ", " + ref.result.lowering + "); " +
                    ratio_text(kReferenceTolerance) + " needs " + fmt("%.1f", needed) +
                    " samples/s, " +
                    (gp.feasible ? fmt("%.1f%% more", 100 * (needed / gp.throughput - 1))
                                 : std::string("a feasible plan")));
    }
  }
  return out;
}

// (7) How GraphPipe stands against every reference plan: the worst ratio, and how many it meets
// at the tolerance and at 1.00x.
void print_reference_summary(const std::vector<Row>& rows) {
  int total = 0;
  int at_tolerance = 0;
  int at_par = 0;
  double worst = INFINITY;
  std::string worst_at = "-";
  for (const auto& r : rows) {
    const Cell& gp = r.cells[kGraphPipe];
    for (const auto& ref : r.references) {
      if (!ref.result.feasible) continue;
      ++total;
      const double ratio = gp.feasible ? gp.throughput / ref.result.throughput : 0.0;
      at_tolerance += ratio >= kReferenceTolerance;
      at_par += ratio >= 1 - 1e-9;
      if (ratio < worst) worst = ratio, worst_at = row_label(r) + " vs " + ref.name;
    }
  }
  std::printf(
      "(7) GraphPipe >= %.2fx every reference plan (hand and replayed): %s (%d of %d; >= 1.00x: "
      "%d of %d; min %s at %s)\n",
      kReferenceTolerance, verdict(at_tolerance == total), at_tolerance, total, at_par, total,
      std::isinf(worst) ? "-" : ratio_text(worst).c_str(), worst_at.c_str());
}

// (8) Where a reference plan beats the fast search, the improvement search passes it.
bool print_effort_summary(const std::vector<Row>& rows) {
  int total = 0, passed = 0, below_fast = 0;
  std::string detail;
  for (const auto& r : rows) {
    if (std::isnan(r.gp_effort)) continue;
    ++total;
    const double best = best_reference(r);
    passed += r.gp_effort >= best;
    below_fast += r.gp_effort < r.cells[kGraphPipe].throughput;
    detail += (detail.empty() ? "" : ", ") + row_label(r) + " " +
              fmt("%.1f", r.cells[kGraphPipe].throughput) + " -> " + fmt("%.1f", r.gp_effort) +
              " vs " + fmt("%.1f", best);
  }
  std::printf(
      "(8) where a reference plan beats the fast search, --effort-trials %lld passes it and is "
      "never below the fast search: %s (%d of %d rows%s%s)\n",
      static_cast<long long>(kEffortTrials), verdict(passed == total && below_fast == 0), passed,
      total, detail.empty() ? "" : ": ", detail.c_str());
  return below_fast == 0;
}

std::string json_references(const Row& r) {
  std::string out = "[";
  for (size_t j = 0; j < r.references.size(); ++j) {
    const auto& ref = r.references[j];
    out += std::string(j ? ", " : "") + "{\"name\": \"" + ref.name +
           "\", \"hand\": " + (ref.hand ? "true" : "false") +
           ", \"feasible\": " + (ref.result.feasible ? "true" : "false") + ", \"lowering\": \"" +
           ref.result.lowering + "\", \"samples_per_s\": " + fmt("%.3f", ref.result.throughput) +
           "}";
  }
  return out + "]";
}

std::string json_rows(const std::vector<const Row*>& rows) {
  std::string out = "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = *rows[i];
    out += "  {\"model\": \"" + r.model + "\", \"cluster\": \"" + r.cluster +
           "\", \"devices\": " + std::to_string(r.devices) +
           ", \"mini_batch\": " + std::to_string(r.mini_batch) + ", \"precision\": \"" +
           precision_text(r.precision) + "\", \"strategies\": {";
    for (int s = 0; s < kNumStrategies; ++s) {
      const Cell& c = r.cells[s];
      out += std::string(s ? ", " : "") + "\"" + std::string(plan::strategy_name(kStrategies[s])) +
             "\": {\"feasible\": " + (c.feasible ? "true" : "false") +
             ", \"samples_per_s\": " + fmt("%.3f", c.throughput) +
             ", \"devices_used\": " + std::to_string(c.devices_used) +
             ", \"search_s\": " + fmt("%.6f", c.search_s) +
             ", \"compressed_branches\": " + (c.compressed ? "true" : "false") +
             (c.feasible ? std::string() : ", \"reason\": \"" + c.reason + "\"") + "}";
    }
    out += "}, \"compute_bound_samples_per_s\": " + fmt("%.3f", r.compute_bound) +
           ", \"kernel_batch_bounds\": {";
    for (size_t j = 0; j < r.kernel_batch_bounds.size(); ++j) {
      out += std::string(j ? ", " : "") + "\"" + std::to_string(r.kernel_batch_bounds[j].first) +
             "\": " + fmt("%.3f", r.kernel_batch_bounds[j].second);
    }
    out += "}, \"iteration_bound_samples_per_s\": " + fmt("%.3f", r.iteration_bound.samples_per_s) +
           ", \"references\": " + json_references(r) +
           ", \"graphpipe_uniform_microbatch_samples_per_s\": " +
           (std::isnan(r.gp_uniform_mb) ? std::string("null") : fmt("%.3f", r.gp_uniform_mb)) +
           ", \"graphpipe_vs_best_baseline\": " +
           (std::isnan(r.gp_speedup) ? std::string("null") : fmt("%.6f", r.gp_speedup)) + "}" +
           (i + 1 < rows.size() ? ",\n" : "\n");
  }
  return out + "]\n";
}

struct Options {
  bool quick = false;
  std::string json_path;
  std::string assignments_dir = GP_SOURCE_DIR "/configs/assignments";
};

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      o.quick = true;
    } else if (arg == "--json" && i + 1 < argc) {
      o.json_path = argv[++i];
    } else if (arg == "--assignments" && i + 1 < argc) {
      o.assignments_dir = argv[++i];
    } else if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: %s [--quick] [--json FILE] [--assignments DIR]\n  --quick            only the "
          "32-device summit-v100 rows, the hand-plan configurations\n                     and the "
          "nbranch sweep\n  --json FILE        also write every row as JSON\n  --assignments DIR "
          " hand plans and their index.txt (default: %s)\nExits 1 when GraphPipe loses to a "
          "baseline anywhere, or is below %.2fx a reference plan.\n",
          argv[0], o.assignments_dir.c_str(), kReferenceTolerance);
      std::exit(0);
    } else {
      std::fprintf(stderr, "gp_planner_bench: unknown argument '%s' (usage: %s [--quick])\n",
                   argv[i], argv[0]);
      std::exit(1);
    }
  }
  return o;
}

// The main table's configurations: the grid, then each hand plan's configuration that is not
// in it; every hand plan attached to its configuration's row.
struct RowSpec {
  bench::BenchConfig config;
  std::vector<const bench::HandPlan*> hand_plans;
};

std::vector<RowSpec> row_specs(bool quick, const std::vector<bench::HandPlan>& hand_plans) {
  const std::vector<std::string> models = {"zoo:mmt", "zoo:dlrm", "zoo:candle-uno",
                                           "zoo:transformer"};
  std::vector<RowSpec> specs;
  for (const auto& m : models) {
    for (int devices : {4, 8, 16, 32}) {
      if (quick && devices != 32) continue;
      specs.push_back(
          {{m, "summit-v100", devices, 8 * devices, graphpipe::v1::PRECISION_FP32}, {}});
    }
  }
  if (!quick) {
    for (const auto& m : models) {
      for (int devices : {8, 32, 64}) {
        specs.push_back(
            {{m, "dgx-h100", devices, 8 * devices, graphpipe::v1::PRECISION_BF16_FP32_MASTER}, {}});
      }
    }
  }
  for (const auto& hp : hand_plans) {
    auto it = std::find_if(specs.begin(), specs.end(),
                           [&](const RowSpec& s) { return s.config == hp.config; });
    if (it == specs.end()) {
      specs.push_back({hp.config, {}});
      it = specs.end() - 1;
    }
    it->hand_plans.push_back(&hp);
  }
  return specs;
}

std::vector<Row> run_rows(const std::vector<RowSpec>& specs) {
  std::vector<Row> rows;
  for (const auto& spec : specs) {
    const auto cluster = check(cost::load_cluster(spec.config.cluster));
    rows.push_back(run_row(spec.config.model, cluster, spec.config.devices, spec.config.mini_batch,
                           spec.config.precision, kNumStrategies, spec.hand_plans));
  }
  return rows;
}

void write_json(const std::string& path, const std::vector<const Row*>& rows) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) die(invalid_argument("--json: cannot write '" + path + "'"));
  const std::string text = json_rows(rows);
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  const Options opts = parse_options(argc, argv);
  if (auto st = log::init("gp_planner_bench", ""); !st.ok()) die(st);

  const auto start = std::chrono::steady_clock::now();
  const auto summit = check(cost::load_cluster("summit-v100"));
  const auto dgx = check(cost::load_cluster("dgx-h100"));
  const auto hand_plans = check(bench::read_hand_plan_index(opts.assignments_dir));
  const std::vector<Row> rows = run_rows(row_specs(opts.quick, hand_plans));

  const std::vector<int> branches = {1, 2, 4, 8, 16};
  std::vector<Row> nbranch;
  for (int n : branches) {
    // graphpipe and sequential only: the sweep compares those two.
    nbranch.push_back(run_row("zoo:nbranch?branches=" + std::to_string(n), summit, 16, 128,
                              graphpipe::v1::PRECISION_FP32, 2));
  }

  // Scale: a 1,016-operator mmt (36 layers per branch) on 256 H100s (32 DGX nodes).
  auto big_cluster = dgx;
  big_cluster.set_name("dgx-h100-256");
  big_cluster.set_num_nodes(32);
  std::vector<Row> scale;
  if (!opts.quick) {
    scale.push_back(
        run_row(kScaleModel, big_cluster, 256, 2048, graphpipe::v1::PRECISION_BF16_FP32_MASTER, 2));
  }

  print_main_table(rows);
  print_reference_table(rows);
  print_nbranch_table(nbranch, branches);
  print_scale_table(scale);
  print_summary(rows, nbranch, branches);
  print_scale_summary(scale);
  print_reference_summary(rows);
  const bool effort_ok = print_effort_summary(rows);
  const bool memory_ok = bench::run_memory_rows();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<const Row*> all;
  for (const auto& r : rows) all.push_back(&r);
  for (const auto& r : nbranch) all.push_back(&r);
  for (const auto& r : scale) all.push_back(&r);
  if (!opts.json_path.empty()) write_json(opts.json_path, all);
  const auto lost = losses(all);
  std::printf("\nGraphPipe at least as fast as every baseline on every row: %s\n",
              lost.empty() ? "yes" : "NO");
  for (const auto& l : lost) std::printf("  loses: %s\n", l.c_str());
  const auto short_of = reference_shortfalls(all);
  std::printf("GraphPipe at least %.2fx every reference plan on every row: %s\n",
              kReferenceTolerance, short_of.empty() ? "yes" : "NO");
  for (const auto& l : short_of) std::printf("  below: %s\n", l.c_str());
  std::printf("\n(%s run, %.1f s wall)\n", opts.quick ? "quick" : "full", elapsed);
  if (!effort_ok) std::printf("  the improvement search ended below the fast search\n");
  if (!memory_ok) std::printf("  recomputation or sharding made a plan slower or lost one\n");
  return lost.empty() && short_of.empty() && effort_ok && memory_ok ? 0 : 1;
}
