// PipeDream's planner (SOSP'19; paper brief §7.1): the unit DAG is linearised into a chain and
// cut into contiguous stages, each replicated data-parallel on d devices, minimising the slowest
// stage's time per sample.
//
// PipeDream's recurrence is a prefix DP over the states of its antichain DAG in topological
// order, A(j, m) = min over k < j, m' < m of max(A(k, m - m'), T(k+1 -> j, m')), whose memory
// check only approximates in-flight activations. Two changes keep it exact and fast here:
//
// * Memory is exact for synchronous 1F1B: a stage with s - 1 stages after it keeps s * b
//   samples in flight, so the DP runs over suffixes with the stage count in the state.
// * Instead of the min-max recurrence over (stages, devices) we search the bottleneck T: for a
//   given T, G(i, s) = the fewest devices that cut units [i, n) into s stages, each meeting T and
//   fitting in memory (a stage takes the smallest degree that does both; the others do not
//   care). A binary search brackets the optimum, then the search descends through the actual
//   bottlenecks of the partitions found until no lower one is feasible, which makes the result
//   the exact optimum of the min-max recurrence. Each test is O(units x range x stages) instead
//   of O(units^2 x stages x devices), which is what large clusters need.
//
// The chain is cut in two topological orders, and the lower bottleneck wins:
// * depth first (UnitGraph::topo): branch after branch, so a stage holds consecutive layers of
//   one branch (the cuts PipeDream's antichain DAG reaches first);
// * by critical-path fraction: units sorted by how far along their longest source-to-sink path
//   they start, so every branch is spread evenly over the chain and a stage holds the same
//   slice of every branch — the horizontal cuts among PipeDream's antichain states, which a
//   depth-first order cannot express.
// Transfers are part of TPS (StageCostModel::tps_s overlaps them with compute). A chain pipeline
// relays every tensor live across a cut through that cut, so a stage's boundary bytes are the
// bytes live across its entering and leaving cuts, skip edges included at every cut they cross.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <queue>
#include <string>
#include <vector>

#include "gp/planner/partition.h"

namespace gp::planner {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kNoDevices = std::numeric_limits<int>::max() / 4;
// Descent steps after the binary search (each finds a strictly lower bottleneck); the bracket
// is within the tolerance already, so the cap only bounds pathological cases.
constexpr int kMaxDescentSteps = 256;

class ChainDp {
 public:
  ChainDp(const PartitionContext& ctx, std::vector<int> order, int64_t b)
      : costs_(*ctx.costs),
        order_(std::move(order)),
        b_(b),
        n_(static_cast<int>(order_.size())),
        max_devices_(ctx.num_devices),
        max_stages_(std::min(n_, ctx.num_devices)) {
    for (int d = 1; d <= max_devices_ && d <= b; d *= 2) degrees_.push_back(d);
    cut_ = chain_cut_bytes(*ctx.units, order_);
    const size_t table = static_cast<size_t>(n_ + 1) * (max_stages_ + 1);
    devices_.assign(table, kNoDevices);
    next_.assign(table, -1);
    degree_.assign(table, 0);
    frontier_begin_.assign(n_ + 1, 0);
    frontier_end_.assign(n_ + 1, 0);
  }

  // Fills G for bottleneck `tps` (kInf: memory only); true when some s fits the devices.
  bool feasible(double tps) {
    std::fill(devices_.begin(), devices_.end(), kNoDevices);
    devices_[at(n_, 0)] = 0;
    frontier_.clear();
    frontier_.push_back(0);  // position n: the empty suffix, 0 stages on 0 devices
    frontier_begin_[n_] = 0;
    frontier_end_[n_] = 1;
    const int nd = static_cast<int>(degrees_.size());
    const int finest = log2_exact(b_ / degrees_.back());
    std::vector<char> meets(nd);
    std::vector<int> s_limit(nd);
    for (int i = n_ - 1; i >= 0; --i) {
      StageAggregate agg;
      int* to = &devices_[at(i, 0)];
      for (int j = i + 1; j <= n_; ++j) {
        agg.add(costs_.unit(order_[j - 1]));
        // Compute only grows with j; no degree can meet T once the finest split misses it.
        if (agg.compute_us[finest] / static_cast<double>(b_) * 1e-6 > tps) break;
        const int64_t boundary = cut_[i] + cut_[j];
        const int most = std::min(max_stages_, n_ - j + 1);
        bool fits_somewhere = false;
        for (int x = 0; x < nd; ++x) {
          s_limit[x] = stage_limit(agg, degrees_[x], most);
          fits_somewhere = fits_somewhere || s_limit[x] > 0;
          meets[x] = s_limit[x] > 0 && costs_.tps_s(agg, b_, degrees_[x], boundary) <= tps;
        }
        // A longer range needs at least as much memory on every degree: nothing further fits.
        if (!fits_somewhere) break;
        // Only the suffixes of j on its frontier matter (more stages behind a stage must buy
        // fewer devices). For each, the smallest degree meeting T whose memory holds s stages'
        // in-flight samples; the memory limit grows with the degree, so it only moves up as s
        // grows along the frontier.
        int x = 0;
        for (int f = frontier_begin_[j]; f < frontier_end_[j]; ++f) {
          const int s = frontier_[f] + 1;
          if (s > most) break;
          while (x < nd && !(meets[x] && s_limit[x] >= s)) ++x;
          if (x == nd) break;
          const int value = devices_[at(j, s - 1)] + degrees_[x];
          if (value < to[s]) {
            to[s] = value;
            next_[at(i, s)] = j;
            degree_[at(i, s)] = degrees_[x];
          }
        }
      }
      add_frontier(i);
    }
    return best_stage_count() > 0;
  }

  // Records position i's frontier: the stage counts whose device count beats that of every
  // smaller stage count, in ascending order, as one slice of frontier_.
  void add_frontier(int i) {
    frontier_begin_[i] = static_cast<int>(frontier_.size());
    int fewest = kNoDevices;
    for (int s = 1; s <= max_stages_; ++s) {
      const int v = devices_[at(i, s)];
      if (v < fewest) {
        fewest = v;
        frontier_.push_back(s);
      }
    }
    frontier_end_[i] = static_cast<int>(frontier_.size());
  }

  // Fewest stages among the solutions on at most the cluster's devices (0: none).
  int best_stage_count() const {
    for (int s = 1; s <= max_stages_; ++s) {
      if (devices_[at(0, s)] <= max_devices_) return s;
    }
    return 0;
  }

  // The partition of the last feasible() call, in chain order, and its actual bottleneck.
  Result<Partition> partition() const {
    Partition p;
    p.chain = true;
    p.micro_batch = b_;
    for (int i = 0, s = best_stage_count(); i < n_; --s) {
      const size_t state = at(i, s);
      if (s < 1 || next_[state] <= i) return internal_error("sequential planner: broken DP trace");
      PartitionStage stage;
      stage.units.assign(order_.begin() + i, order_.begin() + next_[state]);
      stage.devices = degree_[state];
      StageAggregate agg;
      for (int u : stage.units) agg.add(costs_.unit(u));
      p.bottleneck_tps_s = std::max(
          p.bottleneck_tps_s, costs_.tps_s(agg, b_, stage.devices, cut_[i] + cut_[next_[state]]));
      p.stages.push_back(std::move(stage));
      i = next_[state];
    }
    return p;
  }

  // All work at the finest split spread over every device: no partition is faster (each
  // stage's TPS is at least its compute at that split, and there are at most `devices` stages).
  double lower_bound() const {
    StageAggregate all;
    for (int u : order_) all.add(costs_.unit(u));
    return all.compute_us[log2_exact(b_ / degrees_.back())] / static_cast<double>(b_) * 1e-6 /
           max_devices_;
  }

 private:
  size_t at(int i, int s) const { return static_cast<size_t>(i) * (max_stages_ + 1) + s; }

  // How many stages (counting this one) may follow from here with the stage's memory fitting:
  // memory grows with s (s * b samples in flight).
  int stage_limit(const StageAggregate& agg, int d, int most) const {
    const int64_t k = costs_.in_flight_limit(agg, b_, d);
    return k < b_ ? 0 : static_cast<int>(std::min<int64_t>(most, k / b_));
  }

  const StageCostModel& costs_;
  std::vector<int> order_;
  int64_t b_;
  int n_, max_devices_, max_stages_;
  std::vector<int> degrees_;   // powers of two dividing b, at most the devices
  std::vector<int64_t> cut_;   // bytes per sample live across the cut before position c
  std::vector<int> devices_;   // G(i, s)
  std::vector<int> next_;      // the chosen stage of G(i, s) is [i, next_)
  std::vector<int> degree_;    // and its data-parallel degree
  std::vector<int> frontier_;  // stage counts worth extending, a slice per position
  std::vector<int> frontier_begin_, frontier_end_;
};

// Units by the fraction of their longest source-to-sink path that lies before them, scheduled
// as a topological order (the ready unit with the smallest fraction next), so rounding can never
// put a consumer before its producer.
std::vector<int> critical_path_order(const UnitGraph& ug, const StageCostModel& costs, int64_t b) {
  const int n = ug.num_units();
  const int level = log2_exact(b);
  std::vector<double> work(n), before(n, 0), after(n, 0);
  for (int u = 0; u < n; ++u) work[u] = costs.unit(u).compute_us[level];
  for (int u : ug.topo) {
    for (int p : ug.preds[u]) before[u] = std::max(before[u], before[p] + work[p]);
  }
  for (auto it = ug.topo.rbegin(); it != ug.topo.rend(); ++it) {
    after[*it] = work[*it];
    for (int s : ug.succs[*it]) after[*it] = std::max(after[*it], work[*it] + after[s]);
  }
  std::vector<int> rank(n);
  for (int i = 0; i < n; ++i) rank[ug.topo[i]] = i;
  auto later = [&](int x, int y) {  // priority_queue: true when x comes after y
    const double tx = before[x] + after[x], ty = before[y] + after[y];
    const double fx = tx > 0 ? before[x] / tx : 0, fy = ty > 0 ? before[y] / ty : 0;
    return fx != fy ? fx > fy : rank[x] > rank[y];
  };
  std::priority_queue<int, std::vector<int>, decltype(later)> ready(later);
  std::vector<int> waiting(n);
  for (int u = 0; u < n; ++u) {
    waiting[u] = static_cast<int>(ug.preds[u].size());
    if (waiting[u] == 0) ready.push(u);
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int u = ready.top();
    ready.pop();
    order.push_back(u);
    for (int s : ug.succs[u]) {
      if (--waiting[s] == 0) ready.push(s);
    }
  }
  return order;
}

bool same_stages(const Partition& x, const Partition& y) {
  if (x.stages.size() != y.stages.size()) return false;
  for (size_t s = 0; s < x.stages.size(); ++s) {
    if (x.stages[s].devices != y.stages[s].devices || x.stages[s].units != y.stages[s].units) {
      return false;
    }
  }
  return true;
}

// The optimum over one order: nullopt when nothing fits in memory.
Result<std::optional<Partition>> best_chain(const PartitionContext& ctx, std::vector<int> order,
                                            int64_t b) {
  ChainDp dp(ctx, std::move(order), b);
  if (!dp.feasible(kInf)) return std::optional<Partition>();
  GP_ASSIGN_OR_RETURN(Partition best, dp.partition());
  double lo = dp.lower_bound();
  double hi = best.bottleneck_tps_s;
  while (hi - lo > ctx.tps_relative_tolerance * hi) {
    const double mid = 0.5 * (lo + hi);
    if (dp.feasible(mid)) {
      GP_ASSIGN_OR_RETURN(best, dp.partition());
      hi = best.bottleneck_tps_s;
    } else {
      lo = mid;
    }
  }
  // Descend through actual bottlenecks: each feasible test below the best finds a lower one.
  for (int step = 0; step < kMaxDescentSteps; ++step) {
    const double below = std::nextafter(best.bottleneck_tps_s, 0.0);
    if (!dp.feasible(below)) break;
    GP_ASSIGN_OR_RETURN(best, dp.partition());
  }
  return std::optional<Partition>(std::move(best));
}

}  // namespace

Result<PartitionOutcome> partition_sequential(const PartitionContext& ctx, int64_t b) {
  GP_RETURN_IF_ERROR(validate_partition_context(ctx, b));
  const UnitGraph& ug = *ctx.units;
  PartitionOutcome outcome;
  std::vector<int> balanced = critical_path_order(ug, *ctx.costs, b);
  struct Order {
    const std::vector<int>* units;
    const char* name;
  };
  std::vector<Order> orders = {{&ug.topo, "depth-first order"}};
  if (balanced != ug.topo) orders.push_back({&balanced, "critical-path order"});
  // The chain DP's optimum over each order; the lowest bottleneck is the partition.
  std::vector<Partition> found;
  for (const Order& order : orders) {
    GP_ASSIGN_OR_RETURN(auto best, best_chain(ctx, *order.units, b));
    if (!best) continue;
    best->origin = std::string("chain DP, ") + order.name;
    found.push_back(std::move(*best));
  }
  if (found.empty()) {
    outcome.infeasible_reason =
        "infeasible: no partition fits in device memory at micro-batch " + std::to_string(b);
    return outcome;
  }
  const auto lowest = std::min_element(
      found.begin(), found.end(),
      [](const auto& x, const auto& y) { return x.bottleneck_tps_s < y.bottleneck_tps_s; });
  outcome.partition = std::move(*lowest);
  found.erase(lowest);
  outcome.alternatives = std::move(found);
  // PipeDream's own hierarchical DP over the same orders: its partitions compete in the
  // simulator with the chain DP's (its cost formulas differ from the StageCostModel's).
  for (const Order& order : orders) {
    std::string why;
    GP_ASSIGN_OR_RETURN(auto original,
                        partition_pipedream_hierarchical(ctx, *order.units, b, &why));
    if (!original) continue;
    auto same = [&](const Partition& p) { return same_stages(p, *original); };
    if (same(*outcome.partition) ||
        std::any_of(outcome.alternatives.begin(), outcome.alternatives.end(), same)) {
      continue;  // found already: simulating it twice would change nothing
    }
    original->origin = std::string("PipeDream hierarchical DP, ") + order.name;
    outcome.alternatives.push_back(std::move(*original));
  }
  return outcome;
}

}  // namespace gp::planner
