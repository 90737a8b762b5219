#include "gp/planner/sp_decomposition.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

namespace gp::planner {
namespace {

using Bits = std::vector<uint64_t>;

// Every step works on one set of units and touches only the set and its edges: a set in
// topological order is convex (a path between two of its units stays inside it), so each
// question below has a local answer, and the whole decomposition costs O(units + edges) per
// level of the tree instead of the units^2 / 64 words per set that global reachability
// bitsets cost.
class Decomposer {
 public:
  explicit Decomposer(const UnitGraph& g)
      : g_(g), n_(g.num_units()), pos_(n_, -1), mark_(n_, 0), comp_(n_, -1) {}

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

  // Marks the units of `set` (in topological order) as the current set with their positions,
  // and fills first_succ_ / last_pred_: per position, the position of the earliest successor
  // (size when none) and of the latest predecessor (-1 when none) inside the set.
  void enter(const std::vector<int>& set) {
    ++stamp_;
    const int size = static_cast<int>(set.size());
    for (int p = 0; p < size; ++p) {
      mark_[set[p]] = stamp_;
      pos_[set[p]] = p;
    }
    first_succ_.assign(size, size);
    last_pred_.assign(size, -1);
    for (int p = 0; p < size; ++p) {
      for (int s : g_.succs[set[p]]) {
        if (inside(s)) first_succ_[p] = std::min(first_succ_[p], pos_[s]);
      }
      for (int q : g_.preds[set[p]]) {
        if (inside(q)) last_pred_[p] = std::max(last_pred_[p], pos_[q]);
      }
    }
  }

  bool inside(int u) const { return mark_[u] == stamp_; }

  // `set` is in topological order.
  int build(const std::vector<int>& set) {
    if (set.size() == 1) {
      SpNode leaf;
      leaf.unit = set[0];
      leaf.units = set;
      return add_node(std::move(leaf));
    }
    enter(set);
    std::vector<std::vector<int>> parts = series_parts(set);
    if (!parts.empty()) return make_composite(SpNode::Kind::kSeries, parts, set);
    parts = parallel_parts(set);
    if (parts.size() > 1) return make_composite(SpNode::Kind::kParallel, parts, set);
    return make_composite(SpNode::Kind::kSeries, cut_in_series(set), set);
  }

  // 1. Series at the bottleneck units (comparable with every other unit of the set), or
  // nothing when there is none. The unit at position p is one when every earlier unit is its
  // ancestor and every later one its descendant, that is when it is the only sink of the
  // prefix [0, p] and the only source of the suffix [p, size). A unit at position v is a sink
  // of the prefixes ending in [v, first_succ) and a source of the suffixes starting in
  // (last_pred, v]: counting those intervals over p answers every position in one sweep.
  std::vector<std::vector<int>> series_parts(const std::vector<int>& set) const {
    const int size = static_cast<int>(set.size());
    std::vector<int> sinks(size + 1, 0), sources(size + 1, 0);
    for (int v = 0; v < size; ++v) {
      ++sinks[v];
      --sinks[first_succ_[v]];
      ++sources[last_pred_[v] + 1];
      --sources[v + 1];
    }
    std::vector<std::vector<int>> parts;
    std::vector<int> segment;
    bool has_bottleneck = false;
    int open_sinks = 0, open_sources = 0;
    for (int p = 0; p < size; ++p) {
      open_sinks += sinks[p];
      open_sources += sources[p];
      if (open_sinks == 1 && open_sources == 1) {
        has_bottleneck = true;
        if (!segment.empty()) parts.push_back(std::move(segment));
        segment.clear();
        parts.push_back({set[p]});
      } else {
        segment.push_back(set[p]);
      }
    }
    if (!has_bottleneck) return {};
    if (!segment.empty()) parts.push_back(std::move(segment));
    return parts;
  }

  // 2. Parallel: the weakly connected components within the set, numbered by their first unit.
  std::vector<std::vector<int>> parallel_parts(const std::vector<int>& set) {
    int num_comp = 0;
    std::vector<int> stack;
    for (int u : set) comp_[u] = -1;
    for (int u : set) {
      if (comp_[u] >= 0) continue;
      stack.assign(1, u);
      comp_[u] = num_comp;
      while (!stack.empty()) {
        const int x = stack.back();
        stack.pop_back();
        for (const auto* nbrs : {&g_.preds[x], &g_.succs[x]}) {
          for (int y : *nbrs) {
            if (inside(y) && comp_[y] < 0) {
              comp_[y] = num_comp;
              stack.push_back(y);
            }
          }
        }
      }
      ++num_comp;
    }
    std::vector<std::vector<int>> groups(num_comp);
    for (int u : set) groups[comp_[u]].push_back(u);
    return groups;
  }

  // 3. Not series-parallel: cut in series at the position that needs the fewest added
  // dependency edges (every sink of the prefix must precede every source of the suffix; the
  // first such position on ties). Reachability inside the set only, as bitsets over positions.
  std::vector<std::vector<int>> cut_in_series(const std::vector<int>& set) {
    const int size = static_cast<int>(set.size());
    const size_t words = (static_cast<size_t>(size) + 63) / 64;
    std::vector<Bits> desc(size, Bits(words, 0));
    for (int v = size - 1; v >= 0; --v) {
      for (int s : g_.succs[set[v]]) {
        if (!inside(s)) continue;
        const int w = pos_[s];
        desc[v][w / 64] |= uint64_t{1} << (w % 64);
        for (size_t k = 0; k < words; ++k) desc[v][k] |= desc[w][k];
      }
    }
    // Sources of the suffix [cut, size) change by events: position v joins at last_pred + 1
    // and leaves once the cut passes it.
    std::vector<std::vector<int>> joins(size + 1);
    for (int v = 0; v < size; ++v) joins[last_pred_[v] + 1].push_back(v);
    Bits sources(words, 0);
    for (int v : joins[0]) sources[v / 64] |= uint64_t{1} << (v % 64);
    int best_cut = 1, best_cost = std::numeric_limits<int>::max();
    for (int cut = 1; cut < size; ++cut) {
      sources[(cut - 1) / 64] &= ~(uint64_t{1} << ((cut - 1) % 64));
      for (int v : joins[cut]) {
        if (v >= cut) sources[v / 64] |= uint64_t{1} << (v % 64);
      }
      int cost = 0;
      for (int a = 0; a < cut; ++a) {
        if (first_succ_[a] < cut) continue;  // not a sink of the prefix
        for (size_t k = 0; k < words; ++k) cost += std::popcount(sources[k] & ~desc[a][k]);
      }
      if (cost < best_cost) best_cost = cost, best_cut = cut;
    }
    tree_.added_edges += best_cost;
    return {{set.begin(), set.begin() + best_cut}, {set.begin() + best_cut, set.end()}};
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
  // Per unit, valid for the set being split (mark_ == stamp_): its position in the set, and
  // its weakly connected component.
  std::vector<int> pos_;
  std::vector<uint32_t> mark_;
  std::vector<int> comp_;
  uint32_t stamp_ = 0;
  std::vector<int> first_succ_, last_pred_;  // per position of the current set
  SpTree tree_;
};

}  // namespace

SpTree decompose_series_parallel(const UnitGraph& units) { return Decomposer(units).run(); }

}  // namespace gp::planner
