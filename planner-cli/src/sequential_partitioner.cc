// PipeDream's planner (SOSP'19; paper brief §7.1): the unit DAG is linearised into a chain (units
// in topological order) and cut into contiguous stages, each replicated data-parallel on d
// devices, minimising the slowest stage's time per sample.
//
// PipeDream's recurrence is a prefix DP, A(j, m) = min over i < j, m' < m of
// max(A(i, m - m'), 2 C_i, T(i+1 -> j, m')), whose memory check only approximates in-flight
// activations. We run the same recurrence in suffix form so that memory is exact for synchronous
// 1F1B: a stage with s - 1 stages after it keeps k = s * b samples in flight (the last stage b),
// and s is known when the stage is chosen as the head of an s-stage suffix:
//
//   A(n, 0, 0) = 0
//   A(i, m, s) = min over j > i, d | b (power of two), d <= m, with
//                     memory(units[i, j), b, d, k = s * b) <= capacity
//                of max(TPS(units[i, j), d), A(j, m - d, s - 1))
//
// and the answer is min over m <= num_devices and s of A(0, m, s) (devices may stay idle).
// Transfers are part of TPS (StageCostModel::tps_s overlaps them with compute) rather than a
// separate 2 C_i term. A chain pipeline relays every tensor live across a cut through that cut,
// so a stage's boundary bytes are the bytes live across its entering and leaving cuts, skip
// edges included at every cut they cross.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gp/planner/partition.h"

namespace gp::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Data-parallel degrees: powers of two dividing b, at most `devices`.
std::vector<int> replica_degrees(int64_t b, int devices) {
  std::vector<int> out;
  for (int d = 1; d <= devices && d <= b; d *= 2) out.push_back(d);
  return out;
}

}  // namespace

Result<PartitionOutcome> partition_sequential(const PartitionContext& ctx, int64_t b) {
  GP_RETURN_IF_ERROR(validate_partition_context(ctx, b));
  const UnitGraph& ug = *ctx.units;
  const StageCostModel& costs = *ctx.costs;
  const int n = ug.num_units();
  const int max_devices = ctx.num_devices;
  const int max_stages = std::min(n, max_devices);
  const int64_t capacity = costs.capacity_bytes();
  const std::vector<int>& order = ug.topo;
  const std::vector<int> degrees = replica_degrees(b, max_devices);

  std::vector<int> pos(n, -1);
  for (int i = 0; i < n; ++i) pos[order[i]] = i;

  // cut[c]: bytes per sample live across the cut before chain position c (c = 0..n).
  std::vector<int64_t> cut(n + 1, 0);
  for (const auto& [edge, bytes] : ug.edge_bytes) {
    const int from = pos[edge.first];
    const int to = pos[edge.second];
    for (int c = from + 1; c <= to; ++c) cut[c] += bytes;
  }

  // A(i, s, m) in a flat table; for every finite state the chosen stage [i, next) and degree.
  const int stride_s = max_devices + 1;
  const int stride_i = (max_stages + 1) * stride_s;
  auto at = [&](int i, int s, int m) {
    return static_cast<size_t>(i) * stride_i + s * stride_s + m;
  };
  const size_t table = static_cast<size_t>(n + 1) * stride_i;
  std::vector<double> best(table, kInf);
  std::vector<int> next_unit(table, -1);
  std::vector<int> degree(table, 0);
  best[at(n, 0, 0)] = 0;

  for (int i = n - 1; i >= 0; --i) {
    StageAggregate agg;  // units [i, j), grown one unit at a time
    const int most_stages_here = std::min(max_stages, n - i);
    for (int j = i + 1; j <= n; ++j) {
      agg.add(costs.unit(order[j - 1]));
      const int64_t boundary = cut[i] + cut[j];
      bool fits_somewhere = false;
      for (int d : degrees) {
        // Memory grows with s (k = s * b), so the feasible s form a prefix.
        int s_limit = 0;
        while (s_limit < most_stages_here &&
               costs.memory_bytes(agg, b, d, (s_limit + 1) * b) <= capacity) {
          ++s_limit;
        }
        if (s_limit == 0) continue;
        fits_somewhere = true;
        const double tps = costs.tps_s(agg, b, d, boundary);
        for (int s = 1; s <= s_limit; ++s) {
          const double* from = &best[at(j, s - 1, 0)];
          double* to = &best[at(i, s, 0)];
          for (int m = d; m <= max_devices; ++m) {
            const double rest = from[m - d];
            if (rest == kInf) continue;
            const double v = std::max(tps, rest);
            if (v < to[m]) {
              to[m] = v;
              next_unit[at(i, s, m)] = j;
              degree[at(i, s, m)] = d;
            }
          }
        }
      }
      // A longer range needs at least as much memory on every degree: nothing further fits.
      if (!fits_somewhere) break;
    }
  }

  // Lowest bottleneck; ties go to fewer stages, then fewer devices.
  double bottleneck = kInf;
  int best_s = 0, best_m = 0;
  for (int s = 1; s <= max_stages; ++s) {
    for (int m = 1; m <= max_devices; ++m) {
      if (best[at(0, s, m)] < bottleneck) {
        bottleneck = best[at(0, s, m)];
        best_s = s;
        best_m = m;
      }
    }
  }
  PartitionOutcome outcome;
  if (bottleneck == kInf) {
    outcome.infeasible_reason =
        "infeasible: no partition fits in device memory at micro-batch " + std::to_string(b);
    return outcome;
  }

  Partition partition;
  partition.chain = true;
  partition.micro_batch = b;
  partition.bottleneck_tps_s = bottleneck;
  for (int i = 0, s = best_s, m = best_m; i < n; --s) {
    const size_t state = at(i, s, m);
    if (s < 1 || next_unit[state] <= i) {
      return internal_error("sequential planner: broken DP trace");
    }
    PartitionStage stage;
    stage.units.assign(order.begin() + i, order.begin() + next_unit[state]);
    stage.devices = degree[state];
    partition.stages.push_back(std::move(stage));
    m -= degree[state];
    i = next_unit[state];
  }
  outcome.partition = std::move(partition);
  return outcome;
}

}  // namespace gp::planner
