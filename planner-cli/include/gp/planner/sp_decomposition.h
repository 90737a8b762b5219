// Series-parallel decomposition of the unit graph (node-SP, as GraphPipe's partitioner needs).
//
// A set of units is split, in this order of preference:
// - in SERIES at its bottleneck units (a unit comparable with every other unit of the set: all
//   are its ancestors or descendants), into the bottlenecks and the segments between them;
// - in PARALLEL into its weakly connected components;
// - otherwise the set is not series-parallel: it is cut in series at the topological position
//   that needs the fewest added dependency edges (every sink before the cut must precede every
//   source after it). No work is duplicated; the added edges are counted and reported.
#pragma once

#include <vector>

#include "gp/planner/units.h"

namespace gp::planner {

struct SpNode {
  enum class Kind { kLeaf, kSeries, kParallel };
  Kind kind = Kind::kLeaf;
  int unit = -1;              // kLeaf
  std::vector<int> children;  // kSeries: in order; kParallel: by smallest unit
  std::vector<int> units;     // every unit below, in topological order
};

struct SpTree {
  std::vector<SpNode> nodes;
  int root = -1;
  int added_edges = 0;  // dependency edges added to make the graph series-parallel
};

SpTree decompose_series_parallel(const UnitGraph& units);

}  // namespace gp::planner
