// Planning units and the series-parallel decomposition.
#include "gp/planner/units.h"

#include <catch2/catch.hpp>
#include <set>

#include "../support/models.h"
#include "gp/model/builder.h"
#include "gp/model/zoo.h"
#include "gp/planner/sp_decomposition.h"

using namespace gp;
using planner::SpNode;

namespace {

model::Graph zoo(const std::string& spec) { return testing::zoo_graph(spec); }

void check_covers_every_unit_once(const planner::SpTree& tree, int num_units) {
  std::multiset<int> leaves;
  for (const auto& n : tree.nodes) {
    if (n.kind == SpNode::Kind::kLeaf) leaves.insert(n.unit);
  }
  // Only leaves reachable from the root count.
  std::multiset<int> reachable;
  std::vector<int> stack{tree.root};
  while (!stack.empty()) {
    const auto& n = tree.nodes[stack.back()];
    stack.pop_back();
    if (n.kind == SpNode::Kind::kLeaf) reachable.insert(n.unit);
    for (int c : n.children) stack.push_back(c);
  }
  REQUIRE(static_cast<int>(reachable.size()) == num_units);
  for (int u = 0; u < num_units; ++u) CHECK(reachable.count(u) == 1);
}

}  // namespace

TEST_CASE("a transformer layer becomes three units and graph inputs join their consumer") {
  auto g = zoo("transformer?layers=1&seq=32");
  const auto units = planner::build_units(g);
  // [input, attn, res1, ln1], [ffn1], [ffn2, res2, ln2], [head, target, loss]
  REQUIRE(units.num_units() == 4);
  auto unit_of = [&](const char* id) { return units.unit_of_op[g.index_of(id)]; };
  CHECK(unit_of("input") == unit_of("l0.attn"));
  CHECK(unit_of("l0.res1") == unit_of("l0.attn"));
  CHECK(unit_of("l0.ln1") == unit_of("l0.attn"));
  CHECK(unit_of("l0.ffn1") != unit_of("l0.attn"));
  CHECK(unit_of("l0.res2") == unit_of("l0.ffn2"));
  CHECK(unit_of("target") == unit_of("loss"));
  CHECK(units.topo.size() == 4u);
  // The attention unit feeds the FFN-up unit with one [seq, hidden] fp32 tensor per sample.
  CHECK(units.bytes(unit_of("l0.attn"), unit_of("l0.ffn1")) == 32 * 1024 * 4);
}

TEST_CASE("without merging every non-input op is its own unit") {
  auto g = zoo("tiny-transformer?layers=1");
  planner::UnitOptions opts;
  opts.merge_cheap_ops = false;
  const auto units = planner::build_units(g, opts);
  CHECK(units.num_units() == g.num_ops() - 2);  // input and target join consumers
}

TEST_CASE("mmt decomposes into a parallel block of branch chains, then concat and head") {
  auto g = zoo("mmt?branches=2&layers=2&seq=32");
  const auto units = planner::build_units(g);
  const auto tree = planner::decompose_series_parallel(units);
  CHECK(tree.added_edges == 0);
  const SpNode& root = tree.nodes[tree.root];
  REQUIRE(root.kind == SpNode::Kind::kSeries);
  REQUIRE(root.children.size() == 3);  // branches, concat, head
  const SpNode& branches = tree.nodes[root.children[0]];
  REQUIRE(branches.kind == SpNode::Kind::kParallel);
  REQUIRE(branches.children.size() == 2);
  for (int c : branches.children) {
    const SpNode& chain = tree.nodes[c];
    CHECK(chain.kind == SpNode::Kind::kSeries);
    CHECK(chain.children.size() == 6);  // 2 layers x 3 units
  }
  check_covers_every_unit_once(tree, units.num_units());
}

TEST_CASE("a chain decomposes into one series of leaves") {
  auto g = zoo("tiny-transformer");
  const auto units = planner::build_units(g);
  const auto tree = planner::decompose_series_parallel(units);
  CHECK(tree.added_edges == 0);
  CHECK(tree.nodes[tree.root].kind == SpNode::Kind::kSeries);
  CHECK(static_cast<int>(tree.nodes[tree.root].children.size()) == units.num_units());
}

TEST_CASE("a graph that is not series-parallel gets dependency edges, never duplicated work") {
  // The "N" graph: a -> c, a -> d, b -> d (c and d both sinks feeding a join).
  model::GraphBuilder b("n", "");
  auto a = b.linear("a", b.input("x", {8}), 8);
  auto bb = b.linear("b", b.input("y", {8}), 8);
  auto c = b.linear("c", a, 8);
  auto d = b.add("d", {a, bb});
  auto e = b.linear("e", d, 8);
  auto join = b.add("join", {c, e});
  b.add_loss(b.mse_loss("loss", join, b.input("t", {8})));
  auto built = model::Graph::build(b.finish());
  REQUIRE(built.ok());
  planner::UnitOptions opts;
  opts.merge_cheap_ops = false;
  const auto units = planner::build_units(*built, opts);
  const auto tree = planner::decompose_series_parallel(units);
  CHECK(tree.added_edges >= 1);
  check_covers_every_unit_once(tree, units.num_units());
}

namespace {

// Every op in exactly one unit, and the unit graph a DAG in its topological order.
void check_unit_graph(const model::Graph& g, const planner::UnitGraph& u) {
  std::vector<int> seen(g.num_ops(), 0);
  for (int unit = 0; unit < u.num_units(); ++unit) {
    for (int op : u.unit_ops[unit]) {
      ++seen[op];
      CHECK(u.unit_of_op[op] == unit);
    }
  }
  for (int op = 0; op < g.num_ops(); ++op) CHECK(seen[op] == 1);
  REQUIRE(static_cast<int>(u.topo.size()) == u.num_units());
  std::vector<int> pos(u.num_units());
  for (int i = 0; i < u.num_units(); ++i) pos[u.topo[i]] = i;
  for (int a = 0; a < u.num_units(); ++a) {
    for (int b : u.succs[a]) CHECK(pos[a] < pos[b]);
  }
}

}  // namespace

TEST_CASE("compress_branches makes each parallel branch one unit and keeps the trunk") {
  auto g = zoo("mmt?branches=3&layers=2&seq=8&hidden=16&heads=2&ffn=32");
  const auto units = planner::build_units(g);
  const auto compressed = planner::compress_branches(g, units);
  check_unit_graph(g, compressed);
  // Every op of one branch (ids "b<k>.") lands in one unit, and no two branches share one.
  std::set<int> branch_units;
  for (int k = 0; k < 3; ++k) {
    std::set<int> of_branch;
    const std::string prefix = "b" + std::to_string(k) + ".";
    for (const auto& node : g.ops()) {
      if (node.id().rfind(prefix, 0) == 0) of_branch.insert(compressed.unit_of_op[node.index]);
    }
    REQUIRE_FALSE(of_branch.empty());
    CHECK(of_branch.size() == 1);
    branch_units.insert(*of_branch.begin());
  }
  CHECK(branch_units.size() == 3);
  // The ops after the join stay in their own units: only the branches were merged.
  const int trunk_units_before = units.num_units() - [&] {
    std::set<int> in_branches;
    for (const auto& node : g.ops()) {
      if (node.id()[0] == 'b' && node.id().find('.') != std::string::npos) {
        in_branches.insert(units.unit_of_op[node.index]);
      }
    }
    return static_cast<int>(in_branches.size());
  }();
  CHECK(compressed.num_units() == 3 + trunk_units_before);
}

TEST_CASE("compress_branches leaves a chain as it is") {
  auto g = zoo("transformer?layers=2&seq=16&hidden=16&heads=2&ffn=32");
  const auto units = planner::build_units(g);
  const auto compressed = planner::compress_branches(g, units);
  check_unit_graph(g, compressed);
  CHECK(compressed.num_units() == units.num_units());
  CHECK(compressed.unit_ops == units.unit_ops);
}
