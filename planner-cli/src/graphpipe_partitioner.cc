// GraphPipe's stage partitioner (Jeon et al., ASPLOS '25, §5; our reconstruction in
// docs/planner.md): binary search on the bottleneck time per sample T; for each T a memoised DP
// over (SP sub-tree range, devices, successor in-flight) that returns the smallest in-flight
// count at the sub-graph's source stages such that every stage meets T and fits in memory.
#include <algorithm>
#include <limits>

#include "gp/planner/partition.h"
#include "gp/planner/sp_decomposition.h"

namespace gp::planner {
namespace {

constexpr int kInfeasible = std::numeric_limits<int>::max() / 2;

// How a DP state was solved, for reconstruction.
struct Choice {
  enum Kind : uint8_t { kNone, kStage, kRecurse } kind = kNone;
  int16_t end = 0;       // kStage: children [i, end) form one stage
  int16_t devices = 0;   // devices given to the stage or recursed child
  int16_t dp_degree = 0; // kStage: data-parallel degree actually used (<= devices)
};

struct Entry {
  int value = -1;  // -1: not computed; else in-flight micro-batches at the source stage(s)
  Choice choice;
};

class GraphPipeDp {
 public:
  GraphPipeDp(const PartitionContext& ctx, const SpTree& tree, int64_t b)
      : ctx_(ctx), tree_(tree), b_(b), max_devices_(ctx.num_devices) {
    const auto& units = *ctx.units;
    const int num_nodes = static_cast<int>(tree.nodes.size());
    agg_.resize(num_nodes);
    in_bytes_.assign(num_nodes, 0);
    out_bytes_.assign(num_nodes, 0);
    std::vector<char> inside(units.num_units(), 0);
    for (int n = 0; n < num_nodes; ++n) {
      const SpNode& node = tree.nodes[n];
      agg_[n] = ctx.costs->aggregate(node.units);
      for (int u : node.units) inside[u] = 1;
      for (const auto& [edge, bytes] : units.edge_bytes) {
        if (!inside[edge.first] && inside[edge.second]) in_bytes_[n] += bytes;
        if (inside[edge.first] && !inside[edge.second]) out_bytes_[n] += bytes;
      }
      for (int u : node.units) inside[u] = 0;
    }
    offset_.resize(num_nodes);
    size_t total = 0;
    for (int n = 0; n < num_nodes; ++n) {
      offset_[n] = total;
      total += (tree.nodes[n].children.size() + 1) * static_cast<size_t>(max_devices_ + 1) *
               static_cast<size_t>(max_devices_ + 2);
    }
    memo_.resize(total);
  }

  // Feasibility of bottleneck `tps`; on success the stages can be reconstructed.
  bool feasible(double tps) {
    tps_ = tps;
    std::fill(memo_.begin(), memo_.end(), Entry{});
    return solve(tree_.root, max_devices_, 0) < kInfeasible;
  }

  std::vector<PartitionStage> stages() {
    std::vector<PartitionStage> out;
    emit(tree_.root, 0, max_devices_, 0, &out);
    return out;
  }

  double upper_bound() const {
    double sum = 0;
    for (int u = 0; u < ctx_.units->num_units(); ++u) {
      int64_t bytes = 0;
      for (int v : ctx_.units->succs[u]) bytes += ctx_.units->bytes(u, v);
      for (int v : ctx_.units->preds[u]) bytes += ctx_.units->bytes(v, u);
      sum += ctx_.costs->tps_s(ctx_.costs->unit(u), b_, 1, bytes);
    }
    return sum * 1.0001;
  }

  double lower_bound() const {
    const auto& a = agg_[tree_.root];
    const int level = log2_exact(b_);
    const double compute = level < static_cast<int>(a.compute_us.size()) ? a.compute_us[level] : 0;
    return compute / static_cast<double>(b_) * 1e-6 / max_devices_;
  }

 private:
  Entry& at(int node, int i, int d, int k) {
    return memo_[offset_[node] +
                 (static_cast<size_t>(i) * (max_devices_ + 1) + static_cast<size_t>(d)) *
                     (max_devices_ + 2) +
                 static_cast<size_t>(k)];
  }

  // Smallest power-of-two replica count <= d (dividing b) meeting T; 0 when none does.
  int tps_degree(const StageAggregate& agg, int64_t boundary, int d) const {
    for (int dp = 1; dp <= d && b_ % dp == 0; dp *= 2) {
      if (ctx_.costs->tps_s(agg, b_, dp, boundary) <= tps_) return dp;
    }
    return 0;
  }

  // From `dp` (meeting T) upwards, the first replica count whose memory fits with `k`
  // in-flight micro-batches downstream (more replicas split the activations). 0 when none.
  int memory_degree(const StageAggregate& agg, int dp, int d, int k) const {
    const int64_t in_flight = static_cast<int64_t>(k + 1) * b_;
    for (; dp <= d && b_ % dp == 0; dp *= 2) {
      if (ctx_.costs->memory_bytes(agg, b_, dp, in_flight) <= ctx_.costs->capacity_bytes()) {
        return dp;
      }
    }
    return 0;
  }

  int stage_degree(const StageAggregate& agg, int64_t boundary, int d, int k) const {
    const int dp = tps_degree(agg, boundary, d);
    return dp == 0 ? 0 : memory_degree(agg, dp, d, k);
  }

  // Lowest TPS reachable by one stage of `agg` on up to `d` devices (to stop growing ranges).
  double best_tps(const StageAggregate& agg, int64_t boundary, int d) const {
    int dp = 1;
    while (dp * 2 <= d && b_ % (dp * 2) == 0) dp *= 2;
    return ctx_.costs->tps_s(agg, b_, dp, boundary);
  }

  int solve(int node, int d, int k) {
    const SpNode& n = tree_.nodes[node];
    if (n.kind == SpNode::Kind::kLeaf) return range(node, 0, d, k);
    return range(node, 0, d, k);
  }

  // Children [i, end) of `node` (a leaf counts as one child: itself) on d devices.
  int range(int node, int i, int d, int k) {
    if (d <= 0 || k > max_devices_) return kInfeasible;
    Entry& e = at(node, i, d, k);
    if (e.value >= 0) return e.value;
    const SpNode& n = tree_.nodes[node];
    const bool leaf = n.kind == SpNode::Kind::kLeaf;
    const bool series = n.kind == SpNode::Kind::kSeries;
    const int count = leaf ? 1 : static_cast<int>(n.children.size());
    auto child = [&](int c) { return leaf ? node : n.children[c]; };
    int best = kInfeasible;
    Choice choice;

    // (a) children [i, end) merged into one stage. Prefix aggregates up to the last end whose
    // stage can still meet T with every device (work only grows with more children).
    std::vector<StageAggregate> prefix;
    std::vector<int64_t> bounds;
    {
      StageAggregate agg;
      int64_t parallel_boundary = 0;
      for (int end = i + 1; end <= count; ++end) {
        const int c = child(end - 1);
        agg.add(agg_[c]);
        parallel_boundary += in_bytes_[c] + out_bytes_[c];
        const int64_t boundary = series ? in_bytes_[child(i)] + out_bytes_[c] : parallel_boundary;
        if (best_tps(agg, boundary, d) > tps_) break;
        prefix.push_back(agg);
        bounds.push_back(boundary);
      }
    }
    const int last_end = i + static_cast<int>(prefix.size());  // largest end meeting T
    if (last_end == count) {
      const int x = count - i - 1;
      if (const int dp = stage_degree(prefix[x], bounds[x], d, k); dp > 0) {
        best = k + 1;
        choice = {Choice::kStage, static_cast<int16_t>(count), static_cast<int16_t>(d),
                  static_cast<int16_t>(dp)};
      }
    }
    // A stage on d1 devices followed (series) or flanked (parallel) by the rest. The rest's
    // in-flight never grows as the stage takes more children, and the stage's memory fits
    // better with a smaller k, so for each d1 the largest end that meets T and memory is best.
    for (int d1 = 1; d1 < d; d1 *= 2) {
      int end = std::min(last_end, count - 1);
      while (end > i && tps_degree(prefix[end - i - 1], bounds[end - i - 1], d1) == 0) --end;
      for (; end > i; --end) {
        const int x = end - i - 1;
        const int rest = range(node, end, d - d1, k);
        if (rest >= kInfeasible) break;  // fewer children left could not be solved either
        const int stage_k = series ? rest : k;  // series: the rest follows this stage
        const int dp_tps = tps_degree(prefix[x], bounds[x], d1);
        const int dp = memory_degree(prefix[x], dp_tps, d1, stage_k);
        if (dp == 0) continue;
        const int value = series ? stage_k + 1 : std::max(k + 1, rest);
        if (value < best) {
          best = value;
          choice = {Choice::kStage, static_cast<int16_t>(end), static_cast<int16_t>(d1),
                    static_cast<int16_t>(dp)};
        }
        break;
      }
    }

    // (b) child i decomposed on its own (composite children only).
    if (!leaf && tree_.nodes[child(i)].kind != SpNode::Kind::kLeaf) {
      if (i + 1 == count) {
        const int value = solve(child(i), d, k);
        if (value < best) best = value, choice = {Choice::kRecurse, 0, static_cast<int16_t>(d), 0};
      } else {
        for (int d1 = 1; d1 < d; ++d1) {
          const int rest = range(node, i + 1, d - d1, k);
          if (rest >= kInfeasible) continue;
          const int first = solve(child(i), d1, series ? rest : k);
          if (first >= kInfeasible) continue;
          const int value = series ? first : std::max(first, rest);
          if (value < best) best = value, choice = {Choice::kRecurse, 0, static_cast<int16_t>(d1), 0};
        }
      }
    }
    Entry& slot = at(node, i, d, k);  // memo_ does not reallocate; re-fetch for clarity
    slot.value = best;
    slot.choice = choice;
    return best;
  }

  void emit(int node, int i, int d, int k, std::vector<PartitionStage>* out) {
    const SpNode& n = tree_.nodes[node];
    const bool leaf = n.kind == SpNode::Kind::kLeaf;
    const bool series = n.kind == SpNode::Kind::kSeries;
    const int count = leaf ? 1 : static_cast<int>(n.children.size());
    auto child = [&](int c) { return leaf ? node : n.children[c]; };
    const Choice c = at(node, i, d, k).choice;
    if (c.kind == Choice::kStage) {
      PartitionStage stage;
      for (int x = i; x < c.end; ++x) {
        const auto& units = tree_.nodes[child(x)].units;
        stage.units.insert(stage.units.end(), units.begin(), units.end());
      }
      stage.devices = c.dp_degree;
      out->push_back(std::move(stage));
      if (c.end < count) {
        emit(node, c.end, d - c.devices, k, out);
      }
      return;
    }
    // kRecurse
    if (i + 1 == count) {
      emit_solve(child(i), d, k, out);
      return;
    }
    const int rest = at(node, i + 1, d - c.devices, k).value;
    emit(node, i + 1, d - c.devices, k, out);
    emit_solve(child(i), c.devices, series ? rest : k, out);
  }

  void emit_solve(int node, int d, int k, std::vector<PartitionStage>* out) { emit(node, 0, d, k, out); }

  const PartitionContext& ctx_;
  const SpTree& tree_;
  int64_t b_;
  int max_devices_;
  double tps_ = 0;
  std::vector<StageAggregate> agg_;
  std::vector<int64_t> in_bytes_, out_bytes_;
  std::vector<size_t> offset_;
  std::vector<Entry> memo_;
};

}  // namespace

Result<PartitionOutcome> partition_graphpipe(const PartitionContext& ctx, int64_t micro_batch) {
  if (ctx.num_devices <= 0 || ctx.num_devices > 4096) {
    return invalid_argument("--devices = " + std::to_string(ctx.num_devices) +
                            ", must be in [1, 4096]");
  }
  const SpTree tree = decompose_series_parallel(*ctx.units);
  GraphPipeDp dp(ctx, tree, micro_batch);
  PartitionOutcome outcome;
  double hi = dp.upper_bound();
  if (!dp.feasible(hi)) {
    outcome.infeasible_reason = "infeasible: no partition fits in device memory at micro-batch " +
                                std::to_string(micro_batch);
    return outcome;
  }
  auto best = dp.stages();
  double lo = dp.lower_bound();
  while (hi - lo > ctx.tps_relative_tolerance * hi) {
    const double mid = 0.5 * (lo + hi);
    if (dp.feasible(mid)) {
      hi = mid;
      best = dp.stages();
    } else {
      lo = mid;
    }
  }
  Partition p;
  p.stages = std::move(best);
  p.chain = false;
  p.micro_batch = micro_batch;
  p.bottleneck_tps_s = hi;
  p.sp_edges_added = tree.added_edges;
  outcome.partition = std::move(p);
  return outcome;
}

}  // namespace gp::planner
