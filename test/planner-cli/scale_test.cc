// Large graphs: the series-parallel decomposition against its definition, coarsening of graphs
// beyond UnitOptions::max_units, and a search of a few-thousand-operator model.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <set>

#include "../support/models.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/planner/search.h"
#include "gp/planner/sp_decomposition.h"
#include "gp/planner/units.h"
#include "gp/planner/verify.h"

using namespace gp;
using planner::SpNode;
using planner::SpTree;
using planner::UnitGraph;

namespace {

// The decomposition as docs/planner.md defines it, with the whole reachability relation: split
// in series at the units comparable with every other unit of the set, else in parallel into
// weakly connected components, else in series at the topological cut needing the fewest added
// edges (the first on ties). Quadratic and cubic steps: small graphs only.
class ReferenceDecomposer {
 public:
  explicit ReferenceDecomposer(const UnitGraph& g) : g_(g), n_(g.num_units()) {
    reach_.assign(n_, std::vector<char>(n_, 0));
    for (auto it = g.topo.rbegin(); it != g.topo.rend(); ++it) {
      for (int s : g.succs[*it]) {
        reach_[*it][s] = 1;
        for (int x = 0; x < n_; ++x) reach_[*it][x] |= reach_[s][x];
      }
    }
  }

  SpTree run() {
    tree_.root = build(g_.topo);
    return tree_;
  }

 private:
  int add(SpNode node) {
    tree_.nodes.push_back(std::move(node));
    return static_cast<int>(tree_.nodes.size()) - 1;
  }

  int build(const std::vector<int>& set) {
    if (set.size() == 1) {
      SpNode leaf;
      leaf.unit = set[0];
      leaf.units = set;
      return add(leaf);
    }
    std::vector<std::vector<int>> parts;
    std::vector<int> segment;
    for (int u : set) {
      const bool bottleneck = std::all_of(
          set.begin(), set.end(), [&](int v) { return v == u || reach_[u][v] || reach_[v][u]; });
      if (!bottleneck) {
        segment.push_back(u);
        continue;
      }
      if (!segment.empty()) parts.push_back(segment);
      segment.clear();
      parts.push_back({u});
    }
    if (parts.empty()) return parallel_or_cut(set);
    if (!segment.empty()) parts.push_back(segment);
    return composite(SpNode::Kind::kSeries, parts, set);
  }

  int parallel_or_cut(const std::vector<int>& set) {
    std::set<int> in(set.begin(), set.end());
    std::vector<int> comp(n_, -1);
    int num = 0;
    std::function<void(int)> visit = [&](int x) {
      for (const auto* nbrs : {&g_.preds[x], &g_.succs[x]}) {
        for (int y : *nbrs) {
          if (in.count(y) && comp[y] < 0) {
            comp[y] = num;
            visit(y);
          }
        }
      }
    };
    for (int u : set) {
      if (comp[u] >= 0) continue;
      comp[u] = num;
      visit(u);
      ++num;
    }
    if (num > 1) {
      std::vector<std::vector<int>> groups(num);
      for (int u : set) groups[comp[u]].push_back(u);
      return composite(SpNode::Kind::kParallel, groups, set);
    }
    const int size = static_cast<int>(set.size());
    int best_cut = 1, best_cost = std::numeric_limits<int>::max();
    for (int cut = 1; cut < size; ++cut) {
      int cost = 0;
      for (int a = 0; a < cut; ++a) {
        bool sink = true;
        for (int x = 0; x < cut; ++x) sink = sink && !reach_[set[a]][set[x]];
        for (int b = cut; sink && b < size; ++b) {
          bool source = true;
          for (int x = cut; x < size; ++x) source = source && !reach_[set[x]][set[b]];
          if (source && !reach_[set[a]][set[b]]) ++cost;
        }
      }
      if (cost < best_cost) best_cost = cost, best_cut = cut;
    }
    tree_.added_edges += best_cost;
    return composite(SpNode::Kind::kSeries,
                     {{set.begin(), set.begin() + best_cut}, {set.begin() + best_cut, set.end()}},
                     set);
  }

  int composite(SpNode::Kind kind, const std::vector<std::vector<int>>& parts,
                const std::vector<int>& set) {
    SpNode node;
    node.kind = kind;
    node.units = set;
    for (const auto& part : parts) {
      const int c = build(part);
      if (tree_.nodes[c].kind == kind) {
        const auto& grand = tree_.nodes[c].children;
        node.children.insert(node.children.end(), grand.begin(), grand.end());
      } else {
        node.children.push_back(c);
      }
    }
    return add(node);
  }

  const UnitGraph& g_;
  int n_;
  std::vector<std::vector<char>> reach_;
  SpTree tree_;
};

// A random DAG on n units: edges i -> j (i < j in a random topological order) with probability
// p, the unit ids shuffled so that ids and order differ.
UnitGraph random_dag(std::mt19937& rng, int n, double p) {
  std::vector<int> id(n);
  for (int i = 0; i < n; ++i) id[i] = i;
  std::shuffle(id.begin(), id.end(), rng);
  std::bernoulli_distribution edge(p);
  UnitGraph g;
  g.unit_ops.assign(n, {});
  g.preds.assign(n, {});
  g.succs.assign(n, {});
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      if (!edge(rng)) continue;
      g.succs[id[i]].push_back(id[j]);
      g.preds[id[j]].push_back(id[i]);
    }
  }
  g.topo = id;
  return g;
}

// Appends a random series-parallel block of about `budget` units to `g` (ids in creation
// order, which is topological); returns its source and sink.
std::pair<int, int> sp_block(std::mt19937& rng, UnitGraph& g, int budget) {
  auto unit = [&] {
    g.unit_ops.emplace_back();
    g.preds.emplace_back();
    g.succs.emplace_back();
    return g.num_units() - 1;
  };
  auto link = [&](int a, int b) {
    g.succs[a].push_back(b);
    g.preds[b].push_back(a);
  };
  if (budget <= 1) {
    const int u = unit();
    return {u, u};
  }
  const int parts = std::uniform_int_distribution<int>(2, 3)(rng);
  const int each = std::max(1, (budget - 2) / parts);
  if (std::bernoulli_distribution(0.5)(rng)) {  // series
    std::pair<int, int> whole{-1, -1};
    for (int k = 0; k < parts; ++k) {
      const auto [src, snk] = sp_block(rng, g, each);
      if (whole.first < 0) whole.first = src;
      if (whole.second >= 0) link(whole.second, src);
      whole.second = snk;
    }
    return whole;
  }
  const int fork = unit();
  std::vector<int> sinks;
  for (int k = 0; k < parts; ++k) {
    const auto [src, snk] = sp_block(rng, g, each);
    link(fork, src);
    sinks.push_back(snk);
  }
  const int join = unit();
  for (int snk : sinks) link(snk, join);
  return {fork, join};
}

// A random series-parallel DAG of about n units with `extra` random forward edges (which may
// make it non-series-parallel), its unit ids shuffled so that ids and order differ.
UnitGraph random_sp_dag(std::mt19937& rng, int n, int extra) {
  UnitGraph g;
  sp_block(rng, g, n);
  const int m = g.num_units();
  std::uniform_int_distribution<int> pos(0, m - 1);
  for (int e = 0; e < extra; ++e) {
    const int a = pos(rng), b = pos(rng);
    if (a == b) continue;
    const int lo = std::min(a, b), hi = std::max(a, b);
    if (std::find(g.succs[lo].begin(), g.succs[lo].end(), hi) != g.succs[lo].end()) continue;
    g.succs[lo].push_back(hi);
    g.preds[hi].push_back(lo);
  }
  std::vector<int> id(m);
  for (int i = 0; i < m; ++i) id[i] = i;
  std::shuffle(id.begin(), id.end(), rng);
  UnitGraph out;
  out.unit_ops.assign(m, {});
  out.preds.assign(m, {});
  out.succs.assign(m, {});
  for (int a = 0; a < m; ++a) {
    for (int b : g.succs[a]) {
      out.succs[id[a]].push_back(id[b]);
      out.preds[id[b]].push_back(id[a]);
    }
    out.topo.push_back(id[a]);
  }
  return out;
}

void check_same_tree(const SpTree& got, const SpTree& want) {
  CHECK(got.root == want.root);
  CHECK(got.added_edges == want.added_edges);
  REQUIRE(got.nodes.size() == want.nodes.size());
  for (size_t k = 0; k < got.nodes.size(); ++k) {
    CHECK(got.nodes[k].kind == want.nodes[k].kind);
    CHECK(got.nodes[k].unit == want.nodes[k].unit);
    CHECK(got.nodes[k].children == want.nodes[k].children);
    CHECK(got.nodes[k].units == want.nodes[k].units);
  }
}

// Every op in exactly one unit, the unit graph acyclic in its topological order, and every unit
// convex: no path leaves it and comes back.
void check_coarse_units(const model::Graph& g, const UnitGraph& u) {
  std::vector<int> seen(g.num_ops(), 0);
  for (int unit = 0; unit < u.num_units(); ++unit) {
    for (int op : u.unit_ops[unit]) {
      ++seen[op];
      CHECK(u.unit_of_op[op] == unit);
    }
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
  REQUIRE(static_cast<int>(u.topo.size()) == u.num_units());
}

// A GraphPipe search of `g` on `devices` H100s, Adam, analytic costs.
planner::SearchResult search(const model::Graph& g, int devices, int64_t mini_batch,
                             std::vector<int64_t> micro_batches,
                             const planner::UnitOptions& units = {}) {
  const auto cluster = *cost::select_devices(*cost::load_cluster("dgx-h100"), devices);
  const cost::AnalyticCostModel model(cluster.device(), graphpipe::v1::PRECISION_FP32);
  planner::SearchRequest req;
  req.graph = &g;
  req.cluster = cluster;
  req.mini_batch = mini_batch;
  req.compute = &model;
  req.micro_batches = std::move(micro_batches);
  req.units = units;
  req.training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  req.training.set_learning_rate(1e-3);  // verify_plan: a run needs one
  auto result = planner::search_plan(req);
  INFO(result.status().to_string());
  REQUIRE(result.ok());
  REQUIRE(result->feasible);
  auto report = planner::verify_plan(result->plan, model);
  REQUIRE(report.ok());
  INFO((report->problems.empty() ? std::string() : report->problems[0]));
  CHECK(report->ok());
  return std::move(result).value();
}

}  // namespace

TEST_CASE("the series-parallel decomposition of random DAGs follows its definition") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + trial % 30;
    const UnitGraph g = trial % 2 == 0 ? random_dag(rng, n, trial % 6 == 0 ? 0.5 : 0.15)
                                       : random_sp_dag(rng, n, trial % 5);
    INFO("trial " << trial << ", " << n << " units");
    check_same_tree(planner::decompose_series_parallel(g), ReferenceDecomposer(g).run());
  }
}

TEST_CASE("the benchmark models are planned over their units as they are, never coarsened") {
  planner::UnitOptions never;
  never.max_units = 0;
  for (const char* spec :
       {"mmt", "dlrm", "candle-uno", "transformer", "nbranch?branches=16", "mmt?layers=36"}) {
    INFO(spec);
    const auto g = testing::zoo_graph(spec);
    const UnitGraph units = planner::build_units(g);
    CHECK(units.num_units() <= planner::UnitOptions{}.max_units);
    CHECK(units.unit_ops == planner::build_units(g, never).unit_ops);
    check_same_tree(planner::decompose_series_parallel(units), ReferenceDecomposer(units).run());
  }
  // So their searches are the searches without coarsening: the same plan.
  const auto g = testing::zoo_graph("mmt");
  const auto with = search(g, 8, 64, {});
  const auto without = search(g, 8, 64, {}, never);
  CHECK(with.num_units == without.num_units);
  CHECK(with.plan.stages_size() == without.plan.stages_size());
  CHECK(with.simulation.throughput_samples_per_s == without.simulation.throughput_samples_per_s);
}

TEST_CASE("a chain of thousands of units is coarsened into a chain of at most max_units") {
  const auto g = testing::zoo_graph("transformer?layers=1428&seq=16&hidden=64&heads=2&ffn=128");
  REQUIRE(g.num_ops() == 10000);
  planner::UnitOptions fine_options;
  fine_options.max_units = 0;
  const UnitGraph fine = planner::build_units(g, fine_options);
  REQUIRE(fine.num_units() == 3 * 1428 + 1);
  const UnitGraph coarse = planner::build_units(g);
  check_coarse_units(g, coarse);
  CHECK(coarse.num_units() <= 512);
  CHECK(coarse.num_units() > 256);  // the finest share that fits, not a much coarser one
  // Still a chain: one source, one sink, every unit comparable with every other.
  const SpTree tree = planner::decompose_series_parallel(coarse);
  CHECK(tree.added_edges == 0);
  CHECK(tree.nodes[tree.root].kind == SpNode::Kind::kSeries);
  CHECK(static_cast<int>(tree.nodes[tree.root].children.size()) == coarse.num_units());
  // Each coarse unit is a run of whole fine units.
  for (int u = 0; u < coarse.num_units(); ++u) {
    std::set<int> fine_units;
    for (int op : coarse.unit_ops[u]) fine_units.insert(fine.unit_of_op[op]);
    size_t ops = 0;
    for (int f : fine_units) ops += fine.unit_ops[f].size();
    CHECK(ops == coarse.unit_ops[u].size());
  }
}

TEST_CASE("coarsening keeps parallel branches apart and merges light ones") {
  SECTION("four heavy branches stay four branches") {
    const auto g = testing::zoo_graph("mmt?branches=4&layers=300&seq=16&hidden=64&heads=2&ffn=128");
    const UnitGraph coarse = planner::build_units(g);
    check_coarse_units(g, coarse);
    CHECK(coarse.num_units() <= 512);
    // No unit holds ops of two branches (ids "b<k>.").
    for (const auto& ops : coarse.unit_ops) {
      std::set<char> branches;
      for (int op : ops) {
        const std::string& id = g.op(op).id();
        if (id.size() > 2 && id[0] == 'b' && id[1] >= '0' && id[1] <= '3' && id[2] == '.') {
          branches.insert(id[1]);
        }
      }
      CHECK(branches.size() <= 1);
    }
    const SpTree tree = planner::decompose_series_parallel(coarse);
    CHECK(tree.added_edges == 0);
    int widest = 0;
    for (const auto& node : tree.nodes) {
      if (node.kind == SpNode::Kind::kParallel) {
        widest = std::max(widest, static_cast<int>(node.children.size()));
      }
    }
    CHECK(widest == 4);
  }
  SECTION("thousands of light branches share units") {
    const auto g = testing::zoo_graph("candle-uno?branches=2000&layers=4&width=64&inputs=64");
    const UnitGraph coarse = planner::build_units(g);
    check_coarse_units(g, coarse);
    CHECK(coarse.num_units() <= 512);
    CHECK(planner::decompose_series_parallel(coarse).added_edges == 0);
  }
}

TEST_CASE("a few-thousand-operator model searches to a valid plan") {
  SECTION("a chain of 3,000 operators") {
    const auto g = testing::zoo_graph("transformer?layers=428&seq=64&hidden=256&heads=4&ffn=1024");
    const auto result = search(g, 8, 64, {4, 8});
    CHECK(result.num_units <= 512);
    CHECK(result.plan.stages_size() >= 1);
    CHECK(result.simulation.throughput_samples_per_s > 0);
  }
  SECTION("four branches of 700 operators") {
    const auto g =
        testing::zoo_graph("mmt?branches=4&layers=100&seq=64&hidden=256&heads=4&ffn=1024");
    const auto result = search(g, 8, 64, {8});
    CHECK(result.num_units <= 512);
    CHECK(result.simulation.throughput_samples_per_s > 0);
  }
}
