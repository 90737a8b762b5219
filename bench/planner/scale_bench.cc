// Planner scale benchmark: how GraphPipe's default search (exactly `graphpipe-plan search`:
// analytic costs, Adam, every power-of-two micro-batch, per-stage refinement) grows with the
// graph. Chains (zoo:transformer) and branchy graphs (zoo:mmt, 16 branches) of about 1,000,
// 10,000 and 50,000 operators on 8 and 32 H100s, mini-batch 256; the layers are narrow
// (hidden 256, sequence 64) so that plans fit at every size. Prints ops x devices x seconds with
// the planning units (the graph's, and the at most UnitOptions::max_units the DPs search) and
// the plan found.
//
// Targets (issue 38): up to 10,000 operators under 10 s, 50,000 under 60 s. They are judged on
// the search's CPU time, which on an idle machine is its wall time (the search is single
// threaded) and which other work on a shared machine does not inflate; both are printed.
//
// Coarsening check: the 1,000-operator graphs planned again with their units coarsened about as
// much as the 10,000-operator graphs' are (to at most 64 units), to show what the coarser
// granularity costs the plan (informative; no target).
//
//   gp_scale_bench           every row (minutes)
//   gp_scale_bench --quick   the 1,000 and 10,000-operator rows only
// Exits 1 when a row misses its target or finds no plan.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "gp/common/logging.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/model/graph.h"
#include "gp/model/zoo.h"
#include "gp/planner/search.h"
#include "gp/planner/units.h"

using namespace gp;

namespace {

[[noreturn]] void die(const Status& st) {
  std::fprintf(stderr, "gp_scale_bench: %s\n", st.to_string().c_str());
  std::exit(1);
}

template <typename T>
T check(Result<T> r) {
  if (!r.ok()) die(r.status());
  return std::move(r).value();
}

constexpr const char* kLayerShape = "&seq=64&hidden=256&heads=4&ffn=1024";
constexpr int64_t kMiniBatch = 256;

struct Shape {
  const char* kind;  // "chain" or "branchy"
  int ops;           // about
  std::string spec;
};

// transformer: 7 ops per layer and 4 more; mmt with 16 branches: 7 per layer per branch and 21.
std::vector<Shape> shapes(bool quick) {
  std::vector<Shape> out = {
      {"chain", 1000, std::string("zoo:transformer?layers=142") + kLayerShape},
      {"branchy", 1000, std::string("zoo:mmt?branches=16&layers=9") + kLayerShape},
      {"chain", 10000, std::string("zoo:transformer?layers=1428") + kLayerShape},
      {"branchy", 10000, std::string("zoo:mmt?branches=16&layers=89") + kLayerShape},
  };
  if (!quick) {
    out.push_back({"chain", 50000, std::string("zoo:transformer?layers=7142") + kLayerShape});
    out.push_back({"branchy", 50000, std::string("zoo:mmt?branches=16&layers=446") + kLayerShape});
  }
  return out;
}

double target_s(int ops) { return ops <= 10000 ? 10.0 : 60.0; }

struct Row {
  std::string kind;
  int ops = 0;
  int units = 0;          // the graph's planning units
  int planned_units = 0;  // the units the search planned over
  int devices = 0;
  double wall_s = 0;
  double cpu_s = 0;
  bool feasible = false;
  double throughput = 0;
  int stages = 0;
  int64_t micro_batch = 0;
};

// One search of `g` on the first `devices` H100s of dgx-h100, timed.
Row run(const model::Graph& g, int devices, const planner::UnitOptions& units) {
  const auto cluster = check(cost::select_devices(check(cost::load_cluster("dgx-h100")), devices));
  const cost::AnalyticCostModel compute(cluster.device(), graphpipe::v1::PRECISION_FP32);
  planner::SearchRequest req;
  req.graph = &g;
  req.cluster = cluster;
  req.mini_batch = kMiniBatch;
  req.compute = &compute;
  req.training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  req.per_stage_microbatch = true;  // as graphpipe-plan search does for graphpipe
  req.units = units;
  Row row;
  row.ops = g.num_ops();
  row.devices = devices;
  const auto wall0 = std::chrono::steady_clock::now();
  const std::clock_t cpu0 = std::clock();
  auto result = check(planner::search_plan(req));
  row.cpu_s = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  row.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  row.planned_units = result.num_units;
  row.feasible = result.feasible;
  if (row.feasible) {
    row.throughput = result.plan.predicted().throughput_samples_per_s();
    row.stages = result.plan.stages_size();
    row.micro_batch = result.plan.stages(0).micro_batch();
  }
  return row;
}

void print_header() {
  std::printf("%-8s %7s %7s %7s %8s %8s %8s %12s %7s %4s  %s\n", "graph", "ops", "units", "planned",
              "devices", "wall s", "cpu s", "samples/s", "stages", "mb", "target");
}

bool print_row(const Row& r, bool judged) {
  const bool met = r.feasible && r.cpu_s < target_s(r.ops);
  char target[64] = "";
  if (judged) {
    std::snprintf(target, sizeof(target), "< %.0f s: %s", target_s(r.ops), met ? "yes" : "NO");
  }
  std::printf("%-8s %7d %7d %7d %8d %8.2f %8.2f %12.1f %7d %4lld  %s\n", r.kind.c_str(), r.ops,
              r.units, r.planned_units, r.devices, r.wall_s, r.cpu_s, r.throughput, r.stages,
              static_cast<long long>(r.micro_batch), r.feasible ? target : "no plan");
  return met || !judged;
}

// The 1,000-operator graphs with their units coarsened to at most 64 against as they are.
void print_coarsening_check(const std::vector<Shape>& all) {
  std::printf(
      "\nCoarsening check: 1,000-operator graphs on 32 devices, units as they are and "
      "coarsened to at most 64\n\n");
  std::printf("%-8s %7s %14s %14s %8s\n", "graph", "units", "samples/s", "coarse s/s", "ratio");
  planner::UnitOptions coarse;
  coarse.max_units = 64;
  for (const Shape& s : all) {
    if (s.ops != 1000) continue;
    const auto g = check(model::Graph::build(check(model::build_zoo_model(s.spec))));
    const Row fine = run(g, 32, {});
    const Row coarsened = run(g, 32, coarse);
    std::printf("%-8s %7d %14.1f %14.1f %8.3f\n", s.kind, fine.planned_units, fine.throughput,
                coarsened.throughput,
                fine.throughput > 0 ? coarsened.throughput / fine.throughput : 0.0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: gp_scale_bench [--quick]\n");
      return 2;
    }
  }
  if (auto st = log::init("gp_scale_bench", ""); !st.ok()) die(st);
  const std::vector<Shape> all = shapes(quick);
  std::printf("Planner scale: GraphPipe's default search on dgx-h100, mini-batch %lld, Adam\n\n",
              static_cast<long long>(kMiniBatch));
  print_header();
  bool ok = true;
  planner::UnitOptions as_is;
  as_is.max_units = 0;
  for (const Shape& s : all) {
    const auto g = check(model::Graph::build(check(model::build_zoo_model(s.spec))));
    const int units = planner::build_units(g, as_is).num_units();
    for (const int devices : {8, 32}) {
      Row r = run(g, devices, {});
      r.kind = s.kind;
      r.units = units;
      ok = print_row(r, true) && ok;
      std::fflush(stdout);
    }
  }
  print_coarsening_check(all);
  std::printf("\nEvery row within its target: %s\n", ok ? "yes" : "NO");
  return ok ? 0 : 1;
}
