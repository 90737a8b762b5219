// GraphPipe's stage partitioner (Jeon et al., ASPLOS '25, §5; our reconstruction in
// docs/planner.md): binary search on the bottleneck time per sample T; for each T a memoised DP
// over (SP sub-tree range, devices, successor in-flight) that returns the smallest in-flight
// count at the sub-graph's source stages such that every stage meets T and fits in memory.
#include <algorithm>
#include <limits>
#include <map>
#include <tuple>
#include <unordered_map>

#include "gp/planner/partition.h"
#include "gp/planner/sp_decomposition.h"

namespace gp::planner {
namespace {

constexpr int kInfeasible = std::numeric_limits<int>::max() / 2;

// How a DP state was solved, for reconstruction. 32-bit fields: a series node may have more
// than 32767 children (a long chain of units) and a cluster more than 32767 devices.
struct Choice {
  enum Kind : uint8_t { kNone, kStage, kRecurse, kJoin } kind = kNone;
  int32_t end = 0;        // kStage: children [i, end) form one stage; kJoin: join is [i+1, end)
  int32_t devices = 0;    // devices given to the stage or recursed child
  int32_t dp_degree = 0;  // kStage: data-parallel degree actually used (<= devices)
  int32_t join = 0;       // kJoin: tail id of the join segment
};

struct Entry {
  int value = -1;  // -1: not computed; else in-flight micro-batches at the source stage(s)
  Choice choice;
};

// A join segment (series children after a parallel node, e.g. concat and head) carried into the
// last stage of one branch instead of a stage of its own: "tails".
struct Tail {
  StageAggregate agg;
  int64_t out_bytes = 0;
  std::vector<int> units;
};

constexpr int kMaxTails = 1023;
constexpr int kMaxJoinChildren = 8;

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
    // Branches heaviest first: contiguous groups join similar branches, and a join segment
    // rides on the lightest branch, which is last.
    children_.resize(num_nodes);
    for (int n = 0; n < num_nodes; ++n) {
      children_[n] = tree.nodes[n].children;
      if (tree.nodes[n].kind == SpNode::Kind::kParallel) {
        std::stable_sort(children_[n].begin(), children_[n].end(),
                         [&](int a, int c) { return work(a) > work(c); });
      }
    }
    offset_.resize(num_nodes);
    size_t total = 0;
    for (int n = 0; n < num_nodes; ++n) {
      offset_[n] = total;
      total += (children_[n].size() + 1) * static_cast<size_t>(max_devices_ + 1) *
               static_cast<size_t>(max_devices_ + 2);
    }
    memo_.resize(total);
    tails_.emplace_back();  // id 0: no tail
  }

  // Feasibility of bottleneck `tps`; on success the stages can be reconstructed.
  bool feasible(double tps) {
    tps_ = tps;
    std::fill(memo_.begin(), memo_.end(), Entry{});
    tail_memo_.clear();
    return range(tree_.root, 0, max_devices_, 0, 0) < kInfeasible;
  }

  std::vector<PartitionStage> stages() {
    std::vector<PartitionStage> out;
    emit(tree_.root, 0, max_devices_, 0, 0, &out);
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
    return work(tree_.root) / static_cast<double>(b_) * 1e-6 / max_devices_;
  }

 private:
  double work(int node) const {
    const auto& a = agg_[node];
    const int level = log2_exact(b_);
    return level < static_cast<int>(a.compute_us.size()) ? a.compute_us[level] : 0;
  }

  Entry& at(int node, int i, int d, int k, int tail) {
    if (tail != 0) {
      const uint64_t key = (((static_cast<uint64_t>(node) << 12 | static_cast<uint64_t>(i)) << 13 |
                             static_cast<uint64_t>(d))
                                << 13 |
                            static_cast<uint64_t>(k))
                               << 10 |
                           static_cast<uint64_t>(tail);
      return tail_memo_[key];
    }
    return memo_[offset_[node] +
                 (static_cast<size_t>(i) * (max_devices_ + 1) + static_cast<size_t>(d)) *
                     (max_devices_ + 2) +
                 static_cast<size_t>(k)];
  }

  // The tail made of children [begin, end) of series node `node` (0 when the table is full).
  int tail_id(int node, int begin, int end) {
    const auto key = std::make_tuple(node, begin, end);
    if (auto it = tail_ids_.find(key); it != tail_ids_.end()) return it->second;
    if (static_cast<int>(tails_.size()) > kMaxTails) return 0;
    Tail t;
    for (int c = begin; c < end; ++c) {
      const int child = children_[node][c];
      t.agg.add(agg_[child]);
      t.units.insert(t.units.end(), tree_.nodes[child].units.begin(),
                     tree_.nodes[child].units.end());
    }
    t.out_bytes = out_bytes_[children_[node][end - 1]];
    tails_.push_back(std::move(t));
    const int id = static_cast<int>(tails_.size()) - 1;
    tail_ids_[key] = id;
    return id;
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
    for (; dp > 0 && dp <= d && b_ % dp == 0; dp *= 2) {
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

  // Children [i, count) of `node` (a leaf is its own single child) on d devices, whose sinks
  // feed a successor with k in-flight micro-batches. With a tail, the stage holding the last
  // child also holds the tail (and that stage's successor is the one with k).
  int range(int node, int i, int d, int k, int tail) {
    if (d <= 0 || k > max_devices_) return kInfeasible;
    if (const Entry& e = at(node, i, d, k, tail); e.value >= 0) return e.value;
    const SpNode& n = tree_.nodes[node];
    const bool leaf = n.kind == SpNode::Kind::kLeaf;
    const bool series = n.kind == SpNode::Kind::kSeries;
    const int count = leaf ? 1 : static_cast<int>(children_[node].size());
    auto child = [&](int c) { return leaf ? node : children_[node][c]; };
    // Beside a tail-holding stage, parallel groups feed that stage, which holds one more.
    const int side_k = tail != 0 ? k + 1 : k;
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
      StageAggregate agg = prefix[x];
      int64_t boundary = bounds[x];
      if (tail != 0) {
        agg.add(tails_[tail].agg);
        boundary = (series ? in_bytes_[child(i)] : bounds[x]) + tails_[tail].out_bytes;
      }
      if (const int dp = stage_degree(agg, boundary, d, k); dp > 0) {
        best = k + 1;
        choice = {Choice::kStage, static_cast<int32_t>(count), static_cast<int32_t>(d),
                  static_cast<int32_t>(dp), 0};
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
        const int rest = range(node, end, d - d1, k, tail);
        if (rest >= kInfeasible) break;  // fewer children left could not be solved either
        const int stage_k = series ? rest : side_k;
        const int dp = memory_degree(prefix[x], tps_degree(prefix[x], bounds[x], d1), d1, stage_k);
        if (dp == 0) continue;
        const int value = series ? stage_k + 1 : std::max(stage_k + 1, rest);
        if (value < best) {
          best = value;
          choice = {Choice::kStage, static_cast<int32_t>(end), static_cast<int32_t>(d1),
                    static_cast<int32_t>(dp), 0};
        }
        break;
      }
    }

    // (b) child i decomposed on its own (composite children only).
    if (!leaf && tree_.nodes[child(i)].kind != SpNode::Kind::kLeaf) {
      if (i + 1 == count) {
        const int value = range(child(i), 0, d, k, tail);
        if (value < best)
          best = value, choice = {Choice::kRecurse, 0, static_cast<int32_t>(d), 0, 0};
      } else {
        for (int d1 = 1; d1 < d; ++d1) {
          const int rest = range(node, i + 1, d - d1, k, tail);
          if (rest >= kInfeasible) continue;
          const int first = range(child(i), 0, d1, series ? rest : side_k, 0);
          if (first >= kInfeasible) continue;
          const int value = series ? first : std::max(first, rest);
          if (value < best)
            best = value, choice = {Choice::kRecurse, 0, static_cast<int32_t>(d1), 0, 0};
        }
      }
    }

    // (c) series only: a parallel child i whose join [i+1, end) rides on its last branch.
    if (series && tree_.nodes[child(i)].kind == SpNode::Kind::kParallel) {
      for (int end = i + 2; end <= count && end <= i + 1 + kMaxJoinChildren; ++end) {
        if (end == count && tail != 0) break;  // one tail per stage
        const int t = tail_id(node, i + 1, end);
        if (t == 0) break;
        if (best_tps(tails_[t].agg, tails_[t].out_bytes, d) > tps_) break;
        if (end == count) {
          const int value = range(child(i), 0, d, k, t);
          if (value < best) {
            best = value;
            choice = {Choice::kJoin, static_cast<int32_t>(end), static_cast<int32_t>(d), 0,
                      static_cast<int32_t>(t)};
          }
          continue;
        }
        for (int d1 = 1; d1 < d; ++d1) {
          const int rest = range(node, end, d - d1, k, tail);
          if (rest >= kInfeasible) continue;
          const int value = range(child(i), 0, d1, rest, t);
          if (value < best) {
            best = value;
            choice = {Choice::kJoin, static_cast<int32_t>(end), static_cast<int32_t>(d1), 0,
                      static_cast<int32_t>(t)};
          }
        }
      }
    }
    Entry& slot = at(node, i, d, k, tail);  // unordered_map may have rehashed: fetch again
    slot.value = best;
    slot.choice = choice;
    return best;
  }

  void emit(int node, int i, int d, int k, int tail, std::vector<PartitionStage>* out) {
    const SpNode& n = tree_.nodes[node];
    const bool leaf = n.kind == SpNode::Kind::kLeaf;
    const bool series = n.kind == SpNode::Kind::kSeries;
    const int count = leaf ? 1 : static_cast<int>(children_[node].size());
    auto child = [&](int c) { return leaf ? node : children_[node][c]; };
    const int side_k = tail != 0 ? k + 1 : k;
    const Choice c = at(node, i, d, k, tail).choice;
    switch (c.kind) {
      case Choice::kStage: {
        PartitionStage stage;
        for (int x = i; x < c.end; ++x) {
          const auto& units = tree_.nodes[child(x)].units;
          stage.units.insert(stage.units.end(), units.begin(), units.end());
        }
        if (c.end == count && tail != 0) {
          stage.units.insert(stage.units.end(), tails_[tail].units.begin(),
                             tails_[tail].units.end());
        }
        stage.devices = c.dp_degree;
        out->push_back(std::move(stage));
        if (c.end < count) emit(node, c.end, d - c.devices, k, tail, out);
        return;
      }
      case Choice::kRecurse: {
        if (i + 1 == count) {
          emit(child(i), 0, d, k, tail, out);
          return;
        }
        const int rest = at(node, i + 1, d - c.devices, k, tail).value;
        emit(node, i + 1, d - c.devices, k, tail, out);
        emit(child(i), 0, c.devices, series ? rest : side_k, 0, out);
        return;
      }
      case Choice::kJoin: {
        if (c.end == count) {
          emit(child(i), 0, d, k, c.join, out);
          return;
        }
        const int rest = at(node, c.end, d - c.devices, k, tail).value;
        emit(node, c.end, d - c.devices, k, tail, out);
        emit(child(i), 0, c.devices, rest, c.join, out);
        return;
      }
      case Choice::kNone:
        return;
    }
  }

  const PartitionContext& ctx_;
  const SpTree& tree_;
  int64_t b_;
  int max_devices_;
  double tps_ = 0;
  std::vector<StageAggregate> agg_;
  std::vector<int64_t> in_bytes_, out_bytes_;
  std::vector<std::vector<int>> children_;  // per node, in DP order
  std::vector<size_t> offset_;
  std::vector<Entry> memo_;
  std::unordered_map<uint64_t, Entry> tail_memo_;
  std::vector<Tail> tails_;
  std::map<std::tuple<int, int, int>, int> tail_ids_;
};

}  // namespace

Result<PartitionOutcome> partition_graphpipe(const PartitionContext& ctx, int64_t micro_batch) {
  GP_RETURN_IF_ERROR(validate_partition_context(ctx, micro_batch));
  if (ctx.num_devices > 4096) {  // the memo packs device counts into 13 bits
    return invalid_argument("--devices = " + std::to_string(ctx.num_devices) +
                            ", the GraphPipe planner supports at most 4096");
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
