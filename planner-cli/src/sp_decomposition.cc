#include "gp/planner/sp_decomposition.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

namespace gp::planner {
namespace {

using Bits = std::vector<uint64_t>;

Bits make_bits(int n) { return Bits((static_cast<size_t>(n) + 63) / 64, 0); }
void set_bit(Bits& b, int i) { b[i / 64] |= uint64_t{1} << (i % 64); }
bool has_bit(const Bits& b, int i) { return (b[i / 64] >> (i % 64)) & 1U; }
int count_and(const Bits& a, const Bits& b) {
  int n = 0;
  for (size_t w = 0; w < a.size(); ++w) n += std::popcount(a[w] & b[w]);
  return n;
}

class Decomposer {
 public:
  explicit Decomposer(const UnitGraph& g) : g_(g), n_(g.num_units()) {
    desc_.assign(n_, make_bits(n_));
    anc_.assign(n_, make_bits(n_));
    for (auto it = g.topo.rbegin(); it != g.topo.rend(); ++it) {
      for (int s : g.succs[*it]) {
        set_bit(desc_[*it], s);
        for (size_t w = 0; w < desc_[*it].size(); ++w) desc_[*it][w] |= desc_[s][w];
      }
    }
    for (int u : g.topo) {
      for (int p : g.preds[u]) {
        set_bit(anc_[u], p);
        for (size_t w = 0; w < anc_[u].size(); ++w) anc_[u][w] |= anc_[p][w];
      }
    }
  }

  SpTree run() {
    std::vector<int> all = g_.topo;
    tree_.root = build(all);
    return std::move(tree_);
  }

 private:
  int add_node(SpNode node) {
    tree_.nodes.push_back(std::move(node));
    return static_cast<int>(tree_.nodes.size()) - 1;
  }

  // `set` is in topological order.
  int build(const std::vector<int>& set) {
    if (set.size() == 1) {
      SpNode leaf;
      leaf.unit = set[0];
      leaf.units = set;
      return add_node(std::move(leaf));
    }
    Bits in = make_bits(n_);
    for (int u : set) set_bit(in, u);
    const int size = static_cast<int>(set.size());

    // 1. Series at bottleneck units.
    std::vector<std::vector<int>> parts;
    std::vector<int> segment;
    bool has_bottleneck = false;
    for (int u : set) {
      if (count_and(anc_[u], in) + count_and(desc_[u], in) + 1 == size) {
        has_bottleneck = true;
        if (!segment.empty()) parts.push_back(std::move(segment));
        segment.clear();
        parts.push_back({u});
      } else {
        segment.push_back(u);
      }
    }
    if (!segment.empty()) parts.push_back(std::move(segment));
    if (has_bottleneck) return make_composite(SpNode::Kind::kSeries, parts, set);

    // 2. Parallel: weakly connected components within the set.
    std::vector<int> comp(n_, -1);
    int num_comp = 0;
    for (int u : set) {
      if (comp[u] >= 0) continue;
      std::vector<int> stack{u};
      comp[u] = num_comp;
      while (!stack.empty()) {
        const int x = stack.back();
        stack.pop_back();
        for (const auto* nbrs : {&g_.preds[x], &g_.succs[x]}) {
          for (int y : *nbrs) {
            if (has_bit(in, y) && comp[y] < 0) {
              comp[y] = num_comp;
              stack.push_back(y);
            }
          }
        }
      }
      ++num_comp;
    }
    if (num_comp > 1) {
      std::vector<std::vector<int>> groups(num_comp);
      for (int u : set) groups[comp[u]].push_back(u);
      return make_composite(SpNode::Kind::kParallel, groups, set);
    }

    // 3. Not series-parallel: cut in series where the fewest dependency edges must be added.
    int best_cut = 1, best_cost = std::numeric_limits<int>::max();
    Bits prefix = make_bits(n_);
    for (int cut = 1; cut < size; ++cut) {
      set_bit(prefix, set[cut - 1]);
      Bits suffix = in;
      for (size_t w = 0; w < suffix.size(); ++w) suffix[w] &= ~prefix[w];
      // Every sink of the prefix must precede every source of the suffix.
      int cost = 0;
      for (int a = 0; a < cut; ++a) {
        if (count_and(desc_[set[a]], prefix) > 0) continue;  // not a sink of the prefix
        for (int b = cut; b < size; ++b) {
          if (count_and(anc_[set[b]], suffix) > 0) continue;  // not a source of the suffix
          if (!has_bit(desc_[set[a]], set[b])) ++cost;
        }
      }
      if (cost < best_cost) best_cost = cost, best_cut = cut;
    }
    tree_.added_edges += best_cost;
    std::vector<std::vector<int>> halves{{set.begin(), set.begin() + best_cut},
                                         {set.begin() + best_cut, set.end()}};
    return make_composite(SpNode::Kind::kSeries, halves, set);
  }

  int make_composite(SpNode::Kind kind, const std::vector<std::vector<int>>& parts,
                     const std::vector<int>& set) {
    SpNode node;
    node.kind = kind;
    node.units = set;
    for (const auto& part : parts) node.children.push_back(build(part));
    // Flatten nested nodes of the same kind (series of series, parallel of parallel).
    std::vector<int> flat;
    for (int c : node.children) {
      if (tree_.nodes[c].kind == kind) {
        flat.insert(flat.end(), tree_.nodes[c].children.begin(), tree_.nodes[c].children.end());
      } else {
        flat.push_back(c);
      }
    }
    node.children = std::move(flat);
    return add_node(std::move(node));
  }

  const UnitGraph& g_;
  int n_;
  std::vector<Bits> desc_, anc_;
  SpTree tree_;
};

}  // namespace

SpTree decompose_series_parallel(const UnitGraph& units) { return Decomposer(units).run(); }

}  // namespace gp::planner
