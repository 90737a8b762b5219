// GraphPipe's stage partitioner (Jeon et al., ASPLOS '25, §5; our reconstruction in
// docs/planner.md): binary search on the bottleneck time per sample T; for each T a memoised DP
// over (SP sub-tree range, devices, successor in-flight) that returns the smallest in-flight
// count at the sub-graph's source stages such that every stage meets T and fits in memory.
#include <algorithm>
#include <array>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <tuple>

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

// The DP's memo: an open-addressing table keyed by the packed state, cleared in O(1) per
// feasibility test by an epoch. A dense table over (node, child, devices, in-flight) grows with
// devices squared (gigabytes at a few hundred devices) while a test touches a small fraction.
class Memo {
 public:
  void clear() {
    if (++epoch_ == 0) {  // wrapped: forget every slot for real
      std::fill(slots_.begin(), slots_.end(), Slot{});
      epoch_ = 1;
    }
    live_ = 0;
  }

  // The entry for (a, b), inserted as "not computed" when absent. Invalidated by the next call.
  Entry& at(uint64_t a, uint64_t b) {
    if (2 * (live_ + 1) > slots_.size()) grow();
    const size_t mask = slots_.size() - 1;
    for (size_t h = hash(a, b) & mask;; h = (h + 1) & mask) {
      Slot& slot = slots_[h];
      if (slot.epoch != epoch_) {
        slot = Slot{a, b, epoch_, Entry{}};
        ++live_;
        return slot.entry;
      }
      if (slot.a == a && slot.b == b) return slot.entry;
    }
  }

 private:
  struct Slot {
    uint64_t a = 0, b = 0;
    uint32_t epoch = 0;
    Entry entry;
  };

  static size_t hash(uint64_t a, uint64_t b) {
    uint64_t h = (a ^ (b * 0x9e3779b97f4a7c15ULL)) * 0xff51afd7ed558ccdULL;
    return static_cast<size_t>(h ^ (h >> 32));
  }

  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(std::max<size_t>(1024, old.size() * 2), Slot{});
    const size_t mask = slots_.size() - 1;
    for (const Slot& slot : old) {
      if (slot.epoch != epoch_) continue;
      size_t h = hash(slot.a, slot.b) & mask;
      while (slots_[h].epoch == epoch_) h = (h + 1) & mask;
      slots_[h] = slot;
    }
  }

  std::vector<Slot> slots_;
  uint32_t epoch_ = 1;
  size_t live_ = 0;
};

// Aggregates of children [i, end) of one SP node for growing `end`, their boundary bytes and
// their TPS at every data-parallel degree: independent of the bottleneck T, so they are built
// once per search and shared by every feasibility test and state.
constexpr int kMaxDegrees = 13;  // 2^12 = 4096 devices

struct RangeRow {
  std::vector<StageAggregate> agg;  // index end - i - 1
  std::vector<int64_t> boundary;
  std::vector<double> tps;  // (end - i - 1) * degrees + x: TPS on 2^x replicas
  int64_t parallel_boundary = 0;
  // Per feasibility test (valid while `test` is the DP's current one): the last end meeting T
  // on the top degree x, and the largest end below it meeting T on some degree up to 2^y.
  uint32_t test = 0;
  std::array<int, kMaxDegrees> last_end{};
  std::array<std::array<int, kMaxDegrees>, kMaxDegrees> reach{};
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
constexpr int kExactSplits = 64;
// Estimated bubble fraction above which shallower partitions are also offered.
constexpr double kShallowerBubble = 0.1;

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
      total += std::max<size_t>(1, children_[n].size());
    }
    row_of_.assign(total, -1);
    for (int dp = 1; dp <= max_devices_ && b_ % dp == 0; dp *= 2) ++num_degrees_;
    // Device splits tried for a composite child in series: every split up to kExactSplits
    // devices; beyond, every count up to 16 on either side and about 8 per octave between,
    // which keeps large clusters tractable (the device counts of stages are powers of two
    // anyway).
    splits_.resize(max_devices_ + 1);
    for (int d = 2; d <= max_devices_; ++d) {
      std::vector<int>& out = splits_[d];
      for (int d1 = 1; d1 < d; d1 += d <= kExactSplits || d1 < 16 || d - d1 <= 16
                                         ? 1
                                         : std::max(1, std::min(d1, d - d1) / 8)) {
        out.push_back(d1);
      }
    }
    tails_.emplace_back();  // id 0: no tail
  }

  // Feasibility of bottleneck `tps`; on success the stages can be reconstructed.
  bool feasible(double tps) {
    tps_ = tps;
    memo_.clear();
    ++test_;
    depth_ = range(tree_.root, 0, max_devices_, 0, 0);
    return depth_ < kInfeasible;
  }

  // The last feasible test's micro-batches in flight at the source stages: the pipeline's depth
  // (1F1B keeps one per stage on the longest path), the smallest of any partition meeting T.
  int depth() const { return depth_; }

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
    return level < a.levels ? a.compute_us[level] : 0;
  }

  Entry& at(int node, int i, int d, int k, int tail) {
    return memo_.at(static_cast<uint64_t>(node) << 32 | static_cast<uint32_t>(i),
                    (static_cast<uint64_t>(d) << 40) | (static_cast<uint64_t>(k) << 16) |
                        static_cast<uint64_t>(tail));
  }

  // Children [i, end) of `node` for ends up to `need_end` (clamped to the child count).
  int row_id(int node, int i) {
    int& id = row_of_[offset_[node] + i];
    if (id < 0) {
      id = static_cast<int>(rows_.size());
      rows_.emplace_back();
    }
    return id;
  }

  const RangeRow& row(int node, int i, int need_end) {
    RangeRow& r = rows_[row_id(node, i)];
    const SpNode& n = tree_.nodes[node];
    const bool leaf = n.kind == SpNode::Kind::kLeaf;
    const bool series = n.kind == SpNode::Kind::kSeries;
    const int count = leaf ? 1 : static_cast<int>(children_[node].size());
    auto child = [&](int c) { return leaf ? node : children_[node][c]; };
    need_end = std::min(need_end, count);
    for (int end = i + 1 + static_cast<int>(r.agg.size()); end <= need_end; ++end) {
      const int c = child(end - 1);
      StageAggregate agg = r.agg.empty() ? StageAggregate{} : r.agg.back();
      agg.add(agg_[c]);
      r.parallel_boundary += in_bytes_[c] + out_bytes_[c];
      const int64_t boundary = series ? in_bytes_[child(i)] + out_bytes_[c] : r.parallel_boundary;
      for (int x = 0; x < num_degrees_; ++x) {
        r.tps.push_back(ctx_.costs->tps_s(agg, b_, 1 << x, boundary));
      }
      r.agg.push_back(agg);
      r.boundary.push_back(boundary);
    }
    return r;
  }

  // Index of the largest degree <= d (degrees are 2^x dividing b).
  int top_degree(int d) const {
    int x = 0;
    while (x + 1 < num_degrees_ && (2 << x) <= d) ++x;
    return x;
  }

  // Smallest degree 2^x <= d meeting T from a row's cached TPS; 0 when none does.
  int cached_tps_degree(const double* tps, int d) const {
    for (int x = 0; x < num_degrees_ && (1 << x) <= d; ++x) {
      if (tps[x] <= tps_) return 1 << x;
    }
    return 0;
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
    State s = state(node, i, d, k, tail);
    try_stages(s);
    try_recurse(s);
    try_joins(s);
    Entry& slot = at(node, i, d, k, tail);  // the memo may have grown: fetch again
    slot.value = s.best;
    slot.choice = s.choice;
    return s.best;
  }

  // One DP state of `range` being solved, with the best value and choice found so far.
  struct State {
    int node = 0, i = 0, d = 0, k = 0, tail = 0;
    bool leaf = false, series = false;
    int count = 0;  // children of the node (a leaf: 1, itself)
    // Beside a tail-holding stage, parallel groups feed that stage, which holds one more.
    int side_k = 0;
    int best = kInfeasible;
    Choice choice;

    void offer(int value, Choice c) {
      if (value < best) {
        best = value;
        choice = c;
      }
    }
  };

  State state(int node, int i, int d, int k, int tail) const {
    const SpNode& n = tree_.nodes[node];
    State s;
    s.node = node;
    s.i = i;
    s.d = d;
    s.k = k;
    s.tail = tail;
    s.leaf = n.kind == SpNode::Kind::kLeaf;
    s.series = n.kind == SpNode::Kind::kSeries;
    s.count = s.leaf ? 1 : static_cast<int>(children_[node].size());
    s.side_k = tail != 0 ? k + 1 : k;
    return s;
  }

  int child(const State& s, int c) const { return s.leaf ? s.node : children_[s.node][c]; }

  static Choice stage_choice(int end, int devices, int dp_degree) {
    return {Choice::kStage, static_cast<int32_t>(end), static_cast<int32_t>(devices),
            static_cast<int32_t>(dp_degree), 0};
  }
  static Choice recurse_choice(int devices) {
    return {Choice::kRecurse, 0, static_cast<int32_t>(devices), 0, 0};
  }
  static Choice join_choice(int end, int devices, int tail) {
    return {Choice::kJoin, static_cast<int32_t>(end), static_cast<int32_t>(devices), 0,
            static_cast<int32_t>(tail)};
  }

  // A row's cached TPS of children [i, i + x + 1) on every degree.
  const double* row_tps(const RangeRow& r, int x) const {
    return &r.tps[static_cast<size_t>(x) * num_degrees_];
  }

  // The row of children [i, ...) of `node`, its per-test caches reset for a new test.
  RangeRow& test_row(int node, int i) {
    RangeRow& cached = rows_[row_id(node, i)];
    if (cached.test != test_) {
      cached.test = test_;
      cached.last_end.fill(-1);
      for (auto& a : cached.reach) a.fill(-1);
    }
    return cached;
  }

  // The last end whose stage [i, end) still meets T on the top degree `top` (cached per test).
  int last_stage_end(const State& s, RangeRow& cached, int top) {
    if (cached.last_end[top] < 0) {
      int end = s.i;
      const RangeRow* r = &row(s.node, s.i, s.i + 1);
      while (end < s.count) {
        if (static_cast<int>(r->agg.size()) <= end - s.i) {
          r = &row(s.node, s.i, s.i + 2 * (end - s.i) + 1);  // grow geometrically
        }
        if (r->tps[static_cast<size_t>(end - s.i) * num_degrees_ + top] > tps_) break;
        ++end;
      }
      cached.last_end[top] = end;
    }
    return cached.last_end[top];
  }

  // (a) children [i, end) merged into one stage, for ends up to the last whose stage can
  // still meet T with every device (work only grows with more children).
  void try_stages(State& s) {
    const int top = top_degree(s.d);
    RangeRow& cached = test_row(s.node, s.i);
    const int last_end = last_stage_end(s, cached, top);
    const RangeRow& r = row(s.node, s.i, last_end);  // holds [i, end) for every end <= last_end
    if (last_end == s.count) try_whole_stage(s, r);
    try_stage_then_rest(s, cached, r, last_end, top);
  }

  // Every remaining child (and the tail) as one stage on all d devices.
  void try_whole_stage(State& s, const RangeRow& r) {
    const int x = s.count - s.i - 1;
    if (s.tail != 0) {
      StageAggregate agg = r.agg[x];
      agg.add(tails_[s.tail].agg);
      const int64_t boundary =
          (s.series ? in_bytes_[child(s, s.i)] : r.boundary[x]) + tails_[s.tail].out_bytes;
      if (const int dp = stage_degree(agg, boundary, s.d, s.k); dp > 0) {
        s.offer(s.k + 1, stage_choice(s.count, s.d, dp));
      }
    } else if (const int dp =
                   memory_degree(r.agg[x], cached_tps_degree(row_tps(r, x), s.d), s.d, s.k);
               dp > 0) {
      s.offer(s.k + 1, stage_choice(s.count, s.d, dp));
    }
  }

  // A stage on d1 devices followed (series) or flanked (parallel) by the rest. The rest's
  // in-flight never grows as the stage takes more children, and the stage's memory fits
  // better with a smaller k, so for each d1 the largest end that meets T and memory is best.
  void try_stage_then_rest(State& s, RangeRow& cached, const RangeRow& r, int last_end, int top) {
    for (int d1 = 1; d1 < s.d; d1 *= 2) {
      int& reach = cached.reach[top][top_degree(d1)];
      if (reach < 0) {
        reach = std::min(last_end, s.count - 1);
        while (reach > s.i && cached_tps_degree(row_tps(r, reach - s.i - 1), d1) == 0) --reach;
      }
      for (int end = reach; end > s.i; --end) {
        const int x = end - s.i - 1;
        const int tps_dp = cached_tps_degree(row_tps(r, x), d1);
        // A stage that does not fit even with nothing downstream needs no look at the rest.
        if (memory_degree(r.agg[x], tps_dp, d1, 0) == 0) continue;
        const int rest = range(s.node, end, s.d - d1, s.k, s.tail);
        if (rest >= kInfeasible) break;  // fewer children left could not be solved either
        const int stage_k = s.series ? rest : s.side_k;
        const int dp = memory_degree(r.agg[x], tps_dp, d1, stage_k);
        if (dp == 0) continue;
        const int value = s.series ? stage_k + 1 : std::max(stage_k + 1, rest);
        s.offer(value, stage_choice(end, d1, dp));
        break;
      }
    }
  }

  // (b) child i decomposed on its own (composite children only).
  void try_recurse(State& s) {
    if (s.leaf || tree_.nodes[child(s, s.i)].kind == SpNode::Kind::kLeaf) return;
    if (s.i + 1 == s.count) {
      s.offer(range(child(s, s.i), 0, s.d, s.k, s.tail), recurse_choice(s.d));
    } else if (s.series) {
      for (int d1 : splits_[s.d]) try_split(s, d1);
    } else {
      const int lo = crossing_split(s);
      if (lo > 1) try_split(s, lo - 1);
      try_split(s, lo);
    }
  }

  // Child i on d1 devices beside or before children [i + 1, count) on the rest.
  void try_split(State& s, int d1) {
    const int rest = range(s.node, s.i + 1, s.d - d1, s.k, s.tail);
    if (rest >= kInfeasible) return;
    const int first = range(child(s, s.i), 0, d1, s.series ? rest : s.side_k, 0);
    if (first >= kInfeasible) return;
    s.offer(s.series ? first : std::max(first, rest), recurse_choice(d1));
  }

  // Beside each other, the child's value falls and the rest's rises with the child's
  // devices (more devices never hurt), so the best split is where they cross: the smallest d1
  // with first(d1) <= rest(d - d1), else d - 1.
  int crossing_split(const State& s) {
    int lo = 1, hi = s.d - 1;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      const int rest = range(s.node, s.i + 1, s.d - mid, s.k, s.tail);
      const int first = range(child(s, s.i), 0, mid, s.side_k, 0);
      if (first <= rest) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  }

  // (c) series only: a parallel child i whose join [i+1, end) rides on its last branch.
  void try_joins(State& s) {
    if (!s.series || tree_.nodes[child(s, s.i)].kind != SpNode::Kind::kParallel) return;
    for (int end = s.i + 2; end <= s.count && end <= s.i + 1 + kMaxJoinChildren; ++end) {
      if (end == s.count && s.tail != 0) break;  // one tail per stage
      const int t = tail_id(s.node, s.i + 1, end);
      if (t == 0) break;
      if (best_tps(tails_[t].agg, tails_[t].out_bytes, s.d) > tps_) break;
      if (end == s.count) {
        s.offer(range(child(s, s.i), 0, s.d, s.k, t), join_choice(end, s.d, t));
        continue;
      }
      for (int d1 : splits_[s.d]) {
        const int rest = range(s.node, end, s.d - d1, s.k, s.tail);
        if (rest >= kInfeasible) continue;
        s.offer(range(child(s, s.i), 0, d1, rest, t), join_choice(end, d1, t));
      }
    }
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
  std::vector<size_t> offset_;              // per node: first slot of its children in row_of_
  std::vector<int> row_of_;               // (node, first child) -> index into rows_, -1 until built
  std::deque<RangeRow> rows_;             // deque: rows stay put while others are added
  int num_degrees_ = 0;                   // powers of two dividing b, at most the devices
  int depth_ = kInfeasible;               // of the last feasibility test
  uint32_t test_ = 0;                     // feasibility tests so far (RangeRow's per-test caches)
  std::vector<std::vector<int>> splits_;  // per device count: device counts of the first part
  Memo memo_;
  std::vector<Tail> tails_;
  std::map<std::tuple<int, int, int>, int> tail_ids_;
};

}  // namespace

Result<PartitionOutcome> partition_graphpipe(const PartitionContext& ctx, int64_t micro_batch) {
  GP_RETURN_IF_ERROR(validate_partition_context(ctx, micro_batch));
  if (ctx.num_devices > 4096) {  // the tail table's keys and the splits are sized for this
    return invalid_argument("--devices = " + std::to_string(ctx.num_devices) +
                            ", the GraphPipe planner supports at most 4096");
  }
  const SpTree tree = decompose_series_parallel(*ctx.units);
  GraphPipeDp dp(ctx, tree, micro_batch);
  PartitionOutcome outcome;
  // A bottleneck another planner reached is close to this one's: bracket the search around it
  // by doubling or halving, which skips the widest (most expensive) tests of a search from the
  // trivial bounds.
  double hi = dp.upper_bound();
  double lo = dp.lower_bound();
  std::vector<PartitionStage> best;
  int depth = kInfeasible;  // the best partition's, from the same feasibility test
  // After a feasible test of `t`: its partition is the best so far.
  auto keep = [&](double t) {
    hi = t;
    best = dp.stages();
    depth = dp.depth();
  };
  if (ctx.tps_upper_hint_s > lo && ctx.tps_upper_hint_s < hi) {
    double t = ctx.tps_upper_hint_s;
    if (dp.feasible(t)) {
      keep(t);
      for (t *= 0.5; t > lo && dp.feasible(t); t *= 0.5) keep(t);
      lo = std::max(lo, t);
    } else {
      lo = t;
      for (t *= 2; t < hi && !dp.feasible(t); t *= 2) lo = t;
      if (t < hi) keep(t);
    }
  }
  if (best.empty()) {
    if (!dp.feasible(hi)) {
      outcome.infeasible_reason = "infeasible: no partition fits in device memory at micro-batch " +
                                  std::to_string(micro_batch);
      return outcome;
    }
    keep(hi);
  }
  while (hi - lo > ctx.tps_relative_tolerance * hi) {
    const double mid = 0.5 * (lo + hi);
    if (dp.feasible(mid)) {
      keep(mid);
    } else {
      lo = mid;
    }
  }
  auto partition = [&](std::vector<PartitionStage> stages, double tps, std::string origin) {
    Partition p;
    p.stages = std::move(stages);
    p.chain = false;
    p.micro_batch = micro_batch;
    p.bottleneck_tps_s = tps;
    p.sp_edges_added = tree.added_edges;
    p.origin = std::move(origin);
    return p;
  };
  outcome.partition = partition(std::move(best), hi, "");
  // The bottleneck ignores the pipeline's fill and drain, (depth - 1) / (M + depth - 1) of the
  // iteration with M micro-batches. Where that is large, a slightly slower bottleneck may allow
  // a shallower pipeline (the DP returns the shallowest partition meeting its T): those
  // partitions compete too, and the simulator, which sees bubbles, judges.
  const double micro_batches = static_cast<double>(ctx.mini_batch / micro_batch);
  if ((depth - 1) / (micro_batches + depth - 1) > kShallowerBubble) {
    for (const double slack : {1.25, 1.5}) {
      if (ctx.tps_useful_limit_s > 0 && hi * slack > ctx.tps_useful_limit_s) break;
      if (depth <= 1 || !dp.feasible(hi * slack) || dp.depth() >= depth) continue;
      depth = dp.depth();
      char origin[96];
      std::snprintf(origin, sizeof(origin), "graph partition, bottleneck +%.0f%% for depth %d",
                    (slack - 1) * 100, depth);
      outcome.alternatives.push_back(partition(dp.stages(), hi * slack, origin));
    }
  }
  return outcome;
}

}  // namespace gp::planner
