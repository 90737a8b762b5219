// Planning units: the granularity at which planners cut stages. Every strategy (GraphPipe,
// sequential, Piper) plans over the same units, so their search spaces differ only by their
// algorithms, never by granularity.
//
// Units are built from the operator graph by two rules:
// 1. graph inputs (zero-cost "input" ops) join the unit of their first consumer;
// 2. a cheap op (FLOPs and parameters both under 1/64 of the largest op's) joins its
//    predecessor when the two form a chain edge of the transitive reduction (the op has one
//    immediate predecessor, which has one immediate successor). A transformer layer becomes
//    three units: [attention, residual, norm], [FFN up], [FFN down, residual, norm].
// Contracting chain edges keeps the unit graph acyclic.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "gp/model/graph.h"

namespace gp::planner {

struct UnitGraph {
  std::vector<std::vector<int>> unit_ops;             // op indices per unit, topological
  std::vector<int> unit_of_op;                        // per op
  std::vector<std::vector<int>> preds;                // distinct predecessor units
  std::vector<std::vector<int>> succs;                // distinct successor units
  std::vector<int> topo;                              // units in topological order
  std::map<std::pair<int, int>, int64_t> edge_bytes;  // activation bytes per sample, u -> v

  int num_units() const { return static_cast<int>(unit_ops.size()); }
  int64_t bytes(int from, int to) const {
    auto it = edge_bytes.find({from, to});
    return it == edge_bytes.end() ? 0 : it->second;
  }
};

struct UnitOptions {
  bool merge_cheap_ops = true;
  double cheap_fraction = 1.0 / 64;
  // Beyond this many units the graph is coarsened (coarsen_units); 0: never. Every model of the
  // benchmarks has fewer, so their units are exactly the two rules' above.
  int max_units = 512;
};

UnitGraph build_units(const model::Graph& graph, const UnitOptions& options = {});

// Coarsening, for graphs of thousands of units: the partitioners' DPs are quadratic in the units
// (ranges of a series, pairs of positions of a chain), so a graph beyond `max_units` units is
// planned over at most that many. Units merge along the series-parallel decomposition: a run of
// consecutive children of a series node, or of branches of a parallel node, becomes one unit
// while its work (FLOPs, or bytes moved at 64 FLOPs per byte, whichever is more) and its
// parameters both stay within the same share of the whole graph's; an SP node within the share
// is one unit. Such a run is convex, so the coarse graph is a DAG, and a chain stays a chain.
// The share is the smallest (found by bisection) that leaves at most `max_units` units: a
// 10,000-operator chain of 4,285 units (three per layer) becomes 477 of about three layers each.
// A graph of at most `max_units` units is returned unchanged.
UnitGraph coarsen_units(const model::Graph& graph, const UnitGraph& units, int max_units);

// Any grouping of ops into units (a plan's stages, say) as a UnitGraph: edges with their bytes
// per sample (each tensor once per consuming unit) and a topological order, the lowest index
// first among the ready units. `groups` must hold every op once; when the groups form a cycle,
// `topo` leaves out the units on or after it.
UnitGraph group_units(const model::Graph& graph, const std::vector<std::vector<int>>& groups);

// PipeDream's compress_branches, for graphs whose branches start at sources as well as at forks.
// Branch units are units incomparable with some other unit; each connected set of them becomes
// one unit when no path leaves it and comes back, else each run of them joined by single links
// (a unit whose only successor has it as its only predecessor) does. Trunk
// units, comparable with every other, are kept, so a chain is unchanged. k branches of n units
// then have about 2^k downsets instead of n^k, which lets Piper plan multi-branch models, at
// the price of never cutting inside a branch.
UnitGraph compress_branches(const model::Graph& graph, const UnitGraph& units);

}  // namespace gp::planner
