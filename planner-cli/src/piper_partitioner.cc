// Piper's planner (NeurIPS'21; paper brief §7.2, Piper's algo.cpp): a DP over the downsets of the
// unit DAG (sets closed under predecessors; Piper's code calls them ideals). A stage is the
// difference J \ I of two nested downsets, hence convex, and consecutive stages form a chain.
//
// Piper also searches tensor-parallel configurations per layer and activation recomputation; we
// do not: like GraphPipe and PipeDream here, stages are pipeline + data parallel only, costed
// by the shared StageCostModel.
//
// Piper's table is dp[I][k][s] over prefixes with s a bound on the sum of data-parallel degrees
// after a stage. To make memory exact for synchronous 1F1B we run it over suffixes instead:
// dp[I][s][m] is the lowest bottleneck TPS for the units NOT in downset I, cut into s stages on
// exactly m devices. The stage J \ I at the head of that suffix keeps k = s * b samples in flight:
//
//   dp[all units][0][0] = 0
//   dp[I][s][m] = min over downsets J ⊋ I, d | b (power of two), d <= m, with
//                      memory(J \ I, b, d, s * b) <= capacity
//                 of max(TPS(J \ I, d), dp[J][s - 1][m - d])
//
// and the answer is min over m <= num_devices and s of dp[{}][s][m]. Boundary bytes of a stage
// are the bytes of unit edges entering or leaving it (Piper's cost model; the lowered chain plan
// also relays tensors that skip stages, which the simulator then charges). Like Piper, we give
// up when the unit graph has more downsets than the limit (IDEALS_LIMIT = 40000): the DP is
// quadratic in their number, which grows as n^k for k parallel branches of n units. Piper
// enumerates them all before comparing; we stop as soon as the count passes the limit and report
// the count reached.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gp/planner/partition.h"

namespace gp::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<int> replica_degrees(int64_t b, int devices) {
  std::vector<int> out;
  for (int d = 1; d <= devices && d <= b; d *= 2) out.push_back(d);
  return out;
}

struct BitsHash {
  size_t operator()(const std::vector<uint64_t>& v) const {
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (uint64_t w : v) {
      h ^= w + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
      h *= 0xff51afd7ed558ccdULL;
    }
    return static_cast<size_t>(h ^ (h >> 33));
  }
};

// All downsets of the unit DAG with, for each, its one-unit extensions (Piper's immediate
// sub-ideals, seen from below).
struct Downsets {
  int words = 0;
  std::vector<uint64_t> bits;                        // count * words
  std::vector<int> size;                             // units per downset
  std::vector<std::vector<std::pair<int, int>>> up;  // (downset J ∪ {u}, unit u)

  int count() const { return static_cast<int>(size.size()); }
  bool contains(int set, int unit) const {
    return (bits[static_cast<size_t>(set) * words + unit / 64] >> (unit % 64)) & 1;
  }
};

// BFS from the empty set; returns the number reached when it passed `limit`, or 0 when done.
int64_t enumerate_downsets(const UnitGraph& ug, int limit, Downsets& out) {
  const int n = ug.num_units();
  out.words = (n + 63) / 64;
  std::unordered_map<std::vector<uint64_t>, int, BitsHash> index;
  std::vector<uint64_t> current(out.words, 0);
  index.emplace(current, 0);
  out.bits = current;
  out.size = {0};
  out.up.emplace_back();
  if (out.count() > limit) return out.count();
  for (int at = 0; at < out.count(); ++at) {
    std::copy_n(out.bits.begin() + static_cast<size_t>(at) * out.words, out.words, current.begin());
    for (int u = 0; u < n; ++u) {
      if (out.contains(at, u)) continue;
      bool ready = true;
      for (int p : ug.preds[u]) ready = ready && out.contains(at, p);
      if (!ready) continue;
      std::vector<uint64_t> grown = current;
      grown[u / 64] |= uint64_t{1} << (u % 64);
      auto [it, inserted] = index.emplace(std::move(grown), out.count());
      if (inserted) {
        out.bits.insert(out.bits.end(), it->first.begin(), it->first.end());
        out.size.push_back(out.size[at] + 1);
        out.up.emplace_back();
        if (out.count() > limit) return out.count();
      }
      out.up[at].emplace_back(it->second, u);
    }
  }
  return 0;
}

// Walks the downsets J ⊋ I in BFS order (deterministic), building the aggregate and boundary
// bytes of J \ I incrementally. Stops growing past a stage that fits on no degree even with b
// samples in flight: its supersets need at least as much memory.
class StageWalker {
 public:
  StageWalker(const UnitGraph& ug, const StageCostModel& costs, const Downsets& sets,
              const std::vector<int>& degrees, int64_t b)
      : costs_(costs),
        sets_(sets),
        degrees_(degrees),
        b_(b),
        stamp_(sets.count(), -1),
        agg_(sets.count()),
        boundary_(sets.count(), 0) {
    in_bytes_.resize(ug.num_units());
    out_bytes_.assign(ug.num_units(), 0);
    for (const auto& [edge, bytes] : ug.edge_bytes) {
      in_bytes_[edge.second].emplace_back(edge.first, bytes);
      out_bytes_[edge.first] += bytes;
    }
  }

  // f(J, aggregate of J \ I, boundary bytes per sample of J \ I) for every reachable J.
  template <typename F>
  void walk(int lower, F&& f) {
    queue_.clear();
    queue_.push_back(lower);
    ++epoch_;
    stamp_[lower] = epoch_;
    agg_[lower] = StageAggregate{};
    boundary_[lower] = 0;
    for (size_t q = 0; q < queue_.size(); ++q) {
      const int set = queue_[q];
      if (set != lower) {
        bool fits = false;
        for (int d : degrees_) {
          fits = fits || costs_.memory_bytes(agg_[set], b_, d, b_) <= costs_.capacity_bytes();
        }
        if (!fits) continue;
        f(set, agg_[set], boundary_[set]);
      }
      for (const auto& [grown, unit] : sets_.up[set]) {
        if (stamp_[grown] == epoch_) continue;
        stamp_[grown] = epoch_;
        agg_[grown] = agg_[set];
        agg_[grown].add(costs_.unit(unit));
        // Edges into `unit` from inside the stage become internal; from below they enter.
        // Every edge out of `unit` leaves the stage (its consumers are outside the downset).
        int64_t delta = out_bytes_[unit];
        for (const auto& [pred, bytes] : in_bytes_[unit]) {
          delta += sets_.contains(lower, pred) ? bytes : -bytes;
        }
        boundary_[grown] = boundary_[set] + delta;
        queue_.push_back(grown);
      }
    }
  }

 private:
  const StageCostModel& costs_;
  const Downsets& sets_;
  const std::vector<int>& degrees_;
  int64_t b_;
  std::vector<int64_t> stamp_;  // epoch_ of the last walk that reached each downset
  int64_t epoch_ = 0;
  std::vector<StageAggregate> agg_;
  std::vector<int64_t> boundary_;
  std::vector<int> queue_;
  std::vector<std::vector<std::pair<int, int64_t>>> in_bytes_;
  std::vector<int64_t> out_bytes_;
};

// The index of the downset holding every unit.
Result<int> full_downset(const Downsets& sets, int num_units) {
  int full = -1;
  for (int i = 0; i < sets.count() && full < 0; ++i) {
    if (sets.size[i] == num_units) full = i;
  }
  if (full < 0) return internal_error("piper planner: the unit graph is not acyclic");
  return full;
}

// The DP table dp[I][s][m] over the downsets (see the top of this file): filled once, then read
// for the lowest bottleneck and replayed along the optimal path for the stages.
class PiperDp {
 public:
  // The lowest bottleneck, at `stages` stages on `devices` devices.
  struct Best {
    double bottleneck = kInf;
    int stages = 0;
    int devices = 0;
  };

  PiperDp(const PartitionContext& ctx, const Downsets& sets, int full, int64_t b)
      : ug_(*ctx.units),
        costs_(*ctx.costs),
        sets_(sets),
        full_(full),
        b_(b),
        n_(ug_.num_units()),
        max_devices_(ctx.num_devices),
        max_stages_(std::min(n_, max_devices_)),
        capacity_(costs_.capacity_bytes()),
        degrees_(replica_degrees(b, max_devices_)),
        walker_(ug_, costs_, sets_, degrees_, b) {
    // dp[I][s][m] for m >= s only (each stage has a device): a triangle per downset.
    row_.resize(max_stages_ + 1);
    for (int s = 0; s <= max_stages_; ++s) {
      row_[s] = per_set_;
      per_set_ += static_cast<size_t>(max_devices_ + 1 - s);
    }
    dp_.assign(static_cast<size_t>(sets.count()) * per_set_, kInf);
    dp_[at(full_, 0, 0)] = 0;
  }

  void fill();
  // Ties go to fewer stages, then fewer devices; bottleneck kInf when nothing fits.
  Best best() const;
  Result<Partition> reconstruct(const Best& best);

 private:
  static constexpr int kEmpty = 0;  // the empty downset

  size_t at(int set, int s, int m) const {
    return static_cast<size_t>(set) * per_set_ + row_[s] + static_cast<size_t>(m - s);
  }

  // Memory grows with s (k = s * b): the stage fits as the head of 1..limit stages.
  int stage_limit(const StageAggregate& agg, int d, int most) const {
    int s = 0;
    while (s < most && costs_.memory_bytes(agg, b_, d, (s + 1) * b_) <= capacity_) ++s;
    return s;
  }

  // dp[lower] from the stage upper \ lower at the head of every stage count up to `most`.
  void relax(int lower, int upper, const StageAggregate& agg, int64_t boundary, int most);
  // The downset and degree of the head stage of dp[lower][s][m]'s optimum.
  Result<std::pair<int, int>> trace_stage(int lower, int s, int m);

  const UnitGraph& ug_;
  const StageCostModel& costs_;
  const Downsets& sets_;
  const int full_;
  const int64_t b_;
  const int n_;
  const int max_devices_;
  const int max_stages_;
  const int64_t capacity_;
  const std::vector<int> degrees_;
  StageWalker walker_;
  std::vector<size_t> row_;
  size_t per_set_ = 0;
  std::vector<double> dp_;
};

void PiperDp::fill() {
  // Larger downsets first: dp[J] is final before any I ⊂ J reads it.
  std::vector<int> by_size(sets_.count());
  for (int i = 0; i < sets_.count(); ++i) by_size[i] = i;
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](int x, int y) { return sets_.size[x] > sets_.size[y]; });
  // Transitions are tried in a fixed order, upper downsets in walk order, then degrees
  // ascending; the reconstruction replays the same order.
  for (int lower : by_size) {
    if (lower == full_) continue;
    const int most = std::min(max_stages_, n_ - sets_.size[lower]);
    walker_.walk(lower, [&](int upper, const StageAggregate& agg, int64_t boundary) {
      relax(lower, upper, agg, boundary, most);
    });
  }
}

void PiperDp::relax(int lower, int upper, const StageAggregate& agg, int64_t boundary, int most) {
  for (int d : degrees_) {
    const int s_limit = stage_limit(agg, d, most);
    if (s_limit == 0) continue;
    const double tps = costs_.tps_s(agg, b_, d, boundary);
    for (int s = 1; s <= s_limit; ++s) {
      const double* from = &dp_[at(upper, s - 1, s - 1)];  // indexed by m' - (s - 1)
      double* to = &dp_[at(lower, s, s)];                  // indexed by m - s
      for (int m = s - 1 + d; m <= max_devices_; ++m) {
        const double rest = from[m - d - (s - 1)];
        if (rest == kInf) continue;
        const double v = std::max(tps, rest);
        if (v < to[m - s]) to[m - s] = v;
      }
    }
  }
}

PiperDp::Best PiperDp::best() const {
  Best best;
  for (int s = 1; s <= max_stages_; ++s) {
    for (int m = s; m <= max_devices_; ++m) {
      if (dp_[at(kEmpty, s, m)] < best.bottleneck) {
        best.bottleneck = dp_[at(kEmpty, s, m)];
        best.stages = s;
        best.devices = m;
      }
    }
  }
  return best;
}

Result<std::pair<int, int>> PiperDp::trace_stage(int lower, int s, int m) {
  const double target = dp_[at(lower, s, m)];
  int chosen = -1, chosen_d = 0;
  walker_.walk(lower, [&](int upper, const StageAggregate& agg, int64_t boundary) {
    if (chosen >= 0) return;
    for (int d : degrees_) {
      if (d > m || m - d < s - 1 || stage_limit(agg, d, s) < s) continue;
      const double rest = dp_[at(upper, s - 1, m - d)];
      if (rest == kInf) continue;
      if (std::max(costs_.tps_s(agg, b_, d, boundary), rest) == target) {
        chosen = upper;
        chosen_d = d;
        return;
      }
    }
  });
  if (chosen < 0) return internal_error("piper planner: broken DP trace");
  return std::make_pair(chosen, chosen_d);
}

// By re-running the transitions along the optimal path (as Piper does): the first (J, d) in DP
// order that attains the stored value is the one the DP kept.
Result<Partition> PiperDp::reconstruct(const Best& best) {
  Partition partition;
  partition.chain = true;
  partition.micro_batch = b_;
  partition.bottleneck_tps_s = best.bottleneck;
  for (int lower = kEmpty, s = best.stages, m = best.devices; lower != full_; --s) {
    if (s < 1) return internal_error("piper planner: broken DP trace");
    GP_ASSIGN_OR_RETURN(const auto head, trace_stage(lower, s, m));
    const auto [chosen, chosen_d] = head;
    PartitionStage stage;
    for (int u : ug_.topo) {
      if (sets_.contains(chosen, u) && !sets_.contains(lower, u)) stage.units.push_back(u);
    }
    stage.devices = chosen_d;
    partition.stages.push_back(std::move(stage));
    lower = chosen;
    m -= chosen_d;
  }
  return partition;
}

}  // namespace

Result<PartitionOutcome> partition_piper(const PartitionContext& ctx, int64_t b) {
  GP_RETURN_IF_ERROR(validate_partition_context(ctx, b));
  PartitionOutcome outcome;
  Downsets sets;
  if (const int64_t reached = enumerate_downsets(*ctx.units, ctx.piper_downset_limit, sets);
      reached > 0) {
    outcome.infeasible_reason = "infeasible: too many downsets (" + std::to_string(reached) +
                                " > " + std::to_string(ctx.piper_downset_limit) + ")";
    return outcome;
  }
  GP_ASSIGN_OR_RETURN(const int full, full_downset(sets, ctx.units->num_units()));
  PiperDp dp(ctx, sets, full, b);
  dp.fill();
  const PiperDp::Best best = dp.best();
  if (best.bottleneck == kInf) {
    outcome.infeasible_reason =
        "infeasible: no partition fits in device memory at micro-batch " + std::to_string(b);
    return outcome;
  }
  GP_ASSIGN_OR_RETURN(outcome.partition, dp.reconstruct(best));
  return outcome;
}

}  // namespace gp::planner
