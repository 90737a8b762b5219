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
#include <optional>
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
  std::vector<StageTps> tps;  // (end - i - 1) * degrees + x: TPS on 2^x replicas
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
// Step caps (GraphPipeDp::Steps::kCapped) tried: a ladder of ratio kStepCapRatio, at most
// kMaxStepCaps of them, when the longest step is at least kStepShare of the iteration.
constexpr double kStepCapRatio = 1.414213562;  // 2^(1/2)
constexpr int kMaxStepCaps = 8;
constexpr double kStepShare = 0.02;

// How the DP orders the branches of a parallel node; its stages take contiguous runs of them.
enum class BranchOrder {
  // Heaviest first: runs join similar branches, and a join segment rides on the lightest
  // branch, which is last.
  kHeaviestFirst,
  // Heavy and light alternating (heaviest, lightest, second heaviest, second lightest, ...):
  // runs of two pair a heavy branch with a light one, e.g. DLRM's dense MLPs with its embedding
  // tables, whose optimizer steps are heavy while their compute is light.
  kHeavyLightPairs,
};

class GraphPipeDp {
 public:
  GraphPipeDp(const PartitionContext& ctx, const SpTree& tree, int64_t b, BranchOrder order)
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
    order_children(order);
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
    const bool capped_out = steps_ == Steps::kCapped && step_cap_ > tps_;
    depth_ = capped_out ? kInfeasible : range(tree_.root, 0, max_devices_, 0, 0);
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

  // How a stage's end-of-iteration step (its all-reduce and optimizer step, StageTps) counts
  // against T.
  enum class Steps {
    kSum,          // body + step <= T: the stage's TPS (StageCostModel::tps_s)
    kCapped,       // step <= cap and body + cap <= T: the micro-batches plus the longest step
    kNoOptimizer,  // body + all-reduce <= T: the TPS without the optimizer step
  };
  // kCapped models the iteration rather than a stage: every stage's all-reduce and optimizer
  // step follow its last backward pass, when the pipeline drains, so they add the longest step
  // to the pipeline's time instead of filling each stage's bubbles. `cap_s` is per sample.
  void set_steps(Steps steps, double cap_s = 0) {
    steps_ = steps;
    step_cap_ = cap_s;
  }

  // Whether the heavy-light order differs from the heaviest-first one in a way that matters: a
  // parallel node with three or more branches of different weights.
  bool pairs_differ() const { return pairs_differ_; }

 private:
  bool meets(const StageTps& t) const {
    switch (steps_) {
      case Steps::kCapped:
        return t.step_s() <= step_cap_ && t.body_s + step_cap_ <= tps_;
      case Steps::kNoOptimizer:
        return t.body_s + t.allreduce_s <= tps_;
      default:
        return t.body_s + t.step_s() <= tps_;
    }
  }

  // A branch's weight: its stage time per sample on one device, optimizer step included.
  double weight(int node) const { return ctx_.costs->tps_s(agg_[node], b_, 1, 0); }

  void order_children(BranchOrder order) {
    const int num_nodes = static_cast<int>(tree_.nodes.size());
    children_.resize(num_nodes);
    for (int n = 0; n < num_nodes; ++n) {
      std::vector<int>& c = children_[n];
      c = tree_.nodes[n].children;
      if (tree_.nodes[n].kind != SpNode::Kind::kParallel) continue;
      std::stable_sort(c.begin(), c.end(), [&](int x, int y) { return weight(x) > weight(y); });
      if (c.size() >= 3 && weight(c.front()) > weight(c.back()) * (1 + 1e-6)) {
        pairs_differ_ = true;
      }
      if (order != BranchOrder::kHeavyLightPairs) continue;
      std::vector<int> paired;
      for (size_t lo = 0, hi = c.size(); lo < hi;) {
        paired.push_back(c[lo++]);
        if (lo < hi) paired.push_back(c[--hi]);
      }
      c = std::move(paired);
    }
  }

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
        r.tps.push_back(ctx_.costs->tps_parts(agg, b_, 1 << x, boundary));
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
  int cached_tps_degree(const StageTps* tps, int d) const {
    for (int x = 0; x < num_degrees_ && (1 << x) <= d; ++x) {
      if (meets(tps[x])) return 1 << x;
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

  // The smallest replica count 2^x <= d meeting T (tps[x], one per degree) whose memory fits
  // with `k` in-flight micro-batches downstream; 0 when none. Every degree is tried: more
  // replicas split the compute and the activations, but each replica still steps the whole
  // stage's optimizer state and they all-reduce its gradients, so TPS need not fall with them.
  int fit_degree(const StageAggregate& agg, const StageTps* tps, int d, int k) const {
    const int64_t in_flight = static_cast<int64_t>(k + 1) * b_;
    for (int x = 0; x < num_degrees_ && (1 << x) <= d; ++x) {
      if (meets(tps[x]) &&
          ctx_.costs->memory_bytes(agg, b_, 1 << x, in_flight) <= ctx_.costs->capacity_bytes()) {
        return 1 << x;
      }
    }
    return 0;
  }

  // TPS of `agg` on each degree 2^x up to d (the rest of `out` untouched).
  void degree_tps(const StageAggregate& agg, int64_t boundary, int d,
                  std::array<StageTps, kMaxDegrees>* out) const {
    for (int x = 0; x < num_degrees_ && (1 << x) <= d; ++x) {
      (*out)[x] = ctx_.costs->tps_parts(agg, b_, 1 << x, boundary);
    }
  }

  int stage_degree(const StageAggregate& agg, int64_t boundary, int d, int k) const {
    std::array<StageTps, kMaxDegrees> tps;
    degree_tps(agg, boundary, d, &tps);
    return fit_degree(agg, tps.data(), d, k);
  }

  // Whether one stage of `agg` meets T on some degree up to `d` (to stop growing ranges).
  bool meets_somewhere(const StageAggregate& agg, int64_t boundary, int d) const {
    std::array<StageTps, kMaxDegrees> tps;
    degree_tps(agg, boundary, d, &tps);
    return cached_tps_degree(tps.data(), d) > 0;
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
  const StageTps* row_tps(const RangeRow& r, int x) const {
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

  // The last end whose stage [i, end) still meets T on some degree up to 2^top (cached per
  // test): every degree's TPS grows with the children, so none meets it past that end.
  int last_stage_end(const State& s, RangeRow& cached, int top) {
    if (cached.last_end[top] < 0) {
      int end = s.i;
      const RangeRow* r = &row(s.node, s.i, s.i + 1);
      while (end < s.count) {
        if (static_cast<int>(r->agg.size()) <= end - s.i) {
          r = &row(s.node, s.i, s.i + 2 * (end - s.i) + 1);  // grow geometrically
        }
        if (cached_tps_degree(row_tps(*r, end - s.i), 1 << top) == 0) break;
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
    } else if (const int dp = fit_degree(r.agg[x], row_tps(r, x), s.d, s.k); dp > 0) {
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
        // A stage that does not fit even with nothing downstream needs no look at the rest.
        if (fit_degree(r.agg[x], row_tps(r, x), d1, 0) == 0) continue;
        const int rest = range(s.node, end, s.d - d1, s.k, s.tail);
        if (rest >= kInfeasible) break;  // fewer children left could not be solved either
        const int stage_k = s.series ? rest : s.side_k;
        const int dp = fit_degree(r.agg[x], row_tps(r, x), d1, stage_k);
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
      if (!meets_somewhere(tails_[t].agg, tails_[t].out_bytes, s.d)) break;
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
  Steps steps_ = Steps::kSum;  // see set_steps
  double step_cap_ = 0;
  std::vector<StageAggregate> agg_;
  std::vector<int64_t> in_bytes_, out_bytes_;
  std::vector<std::vector<int>> children_;  // per node, in DP order
  bool pairs_differ_ = false;
  std::vector<size_t> offset_;            // per node: first slot of its children in row_of_
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

// The smallest bottleneck a DP meets, to the context's tolerance, with its partition and depth.
struct Bottleneck {
  double tps = 0;
  std::vector<PartitionStage> stages;
  int depth = kInfeasible;  // from the same feasibility test as the stages
};

// Binary search on T. A bottleneck likely feasible (`hint_s`, e.g. another planner's) brackets
// the search by doubling or halving, which skips the widest (most expensive) tests of a search
// from the trivial bounds. nullopt when nothing fits even at the upper bound.
std::optional<Bottleneck> min_bottleneck(GraphPipeDp& dp, double hint_s, double tolerance) {
  double hi = dp.upper_bound();
  double lo = dp.lower_bound();
  std::optional<Bottleneck> best;
  // After a feasible test of `t`: its partition is the best so far.
  auto keep = [&](double t) {
    hi = t;
    best = Bottleneck{t, dp.stages(), dp.depth()};
  };
  if (hint_s > lo && hint_s < hi) {
    double t = hint_s;
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
  if (!best) {
    if (!dp.feasible(hi)) return std::nullopt;
    keep(hi);
  }
  while (hi - lo > tolerance * hi) {
    const double mid = 0.5 * (lo + hi);
    if (dp.feasible(mid)) {
      keep(mid);
    } else {
      lo = mid;
    }
  }
  return best;
}

// Each stage's TPS parts at its degree, its boundary being the activation bytes per sample on
// unit edges with one end in it.
std::vector<StageTps> stage_tps(const PartitionContext& ctx,
                                const std::vector<PartitionStage>& stages, int64_t b) {
  std::vector<int> stage_of(ctx.units->num_units(), -1);
  for (size_t s = 0; s < stages.size(); ++s) {
    for (int u : stages[s].units) stage_of[u] = static_cast<int>(s);
  }
  std::vector<int64_t> boundary(stages.size(), 0);
  for (const auto& [edge, bytes] : ctx.units->edge_bytes) {
    const int from = stage_of[edge.first], to = stage_of[edge.second];
    if (from == to || from < 0 || to < 0) continue;
    boundary[from] += bytes;
    boundary[to] += bytes;
  }
  std::vector<StageTps> out;
  for (size_t s = 0; s < stages.size(); ++s) {
    out.push_back(ctx.costs->tps_parts(ctx.costs->aggregate(stages[s].units), b, stages[s].devices,
                                       boundary[s]));
  }
  return out;
}

// The largest body and the largest step of a partition's stages, and its bottleneck (the
// largest body + step).
struct PartitionTps {
  double slowest_body_s = 0, longest_step_s = 0, busiest_s = 0;
};

PartitionTps partition_tps(const PartitionContext& ctx, const std::vector<PartitionStage>& stages,
                           int64_t b) {
  PartitionTps p;
  for (const StageTps& t : stage_tps(ctx, stages, b)) {
    p.slowest_body_s = std::max(p.slowest_body_s, t.body_s);
    p.longest_step_s = std::max(p.longest_step_s, t.step_s());
    p.busiest_s = std::max(p.busiest_s, t.body_s + t.step_s());
  }
  return p;
}

// One micro-batch size's GraphPipe partitions: the bottleneck partition of each branch order
// and, where the all-reduces and optimizer steps are a noticeable share of the iteration,
// partitions that count them as the pipeline does (GraphPipeDp::Steps), then shallower ones.
// The simulator chooses among them all.
class GraphPipePartitioner {
 public:
  GraphPipePartitioner(const PartitionContext& ctx, int64_t b)
      : ctx_(ctx), b_(b), tree_(decompose_series_parallel(*ctx.units)) {}

  PartitionOutcome run() {
    GraphPipeDp heaviest_first(ctx_, tree_, b_, BranchOrder::kHeaviestFirst);
    std::optional<Bottleneck> best =
        min_bottleneck(heaviest_first, ctx_.tps_upper_hint_s, ctx_.tps_relative_tolerance);
    if (!best) {
      outcome_.infeasible_reason =
          "infeasible: no partition fits in device memory at micro-batch " + std::to_string(b_);
      return std::move(outcome_);
    }
    // Branches of unequal weight are also cut from the heavy-light order, bracketed by the first
    // order's bottleneck; the lower bottleneck leads and the other competes as an alternative.
    GraphPipeDp* dp = &heaviest_first;
    std::optional<GraphPipeDp> paired;
    std::optional<Bottleneck> other;
    if (heaviest_first.pairs_differ()) {
      paired.emplace(ctx_, tree_, b_, BranchOrder::kHeavyLightPairs);
      other = min_bottleneck(*paired, best->tps, ctx_.tps_relative_tolerance);
      if (other && other->tps < best->tps) {
        std::swap(best, other);
        dp = &*paired;
      }
    }
    outcome_.partition = partition(best->stages, best->tps, "");
    if (other && (ctx_.tps_useful_limit_s <= 0 || other->tps <= ctx_.tps_useful_limit_s)) {
      add(other->stages, dp == &heaviest_first ? "graph partition, heavy and light branches paired"
                                               : "graph partition, heaviest branches first");
    }
    add_shallower(*dp, *best, "graph partition");
    add_capped(*dp, *best);
    add_without_optimizer(*dp, *best);
    return std::move(outcome_);
  }

 private:
  Partition partition(std::vector<PartitionStage> stages, double tps, std::string origin) const {
    Partition p;
    p.stages = std::move(stages);
    p.chain = false;
    p.micro_batch = b_;
    p.bottleneck_tps_s = tps;
    p.sp_edges_added = tree_.added_edges;
    p.origin = std::move(origin);
    return p;
  }

  // An alternative found under another objective, with its bottleneck as every partition's is
  // (the busiest stage's TPS); none when a partition of the outcome has the same stages.
  void add(std::vector<PartitionStage> stages, std::string origin) {
    auto same = [&](const Partition& p) {
      return std::equal(p.stages.begin(), p.stages.end(), stages.begin(), stages.end(),
                        [](const PartitionStage& x, const PartitionStage& y) {
                          return x.devices == y.devices && x.units == y.units;
                        });
    };
    if (same(*outcome_.partition) ||
        std::any_of(outcome_.alternatives.begin(), outcome_.alternatives.end(), same)) {
      return;
    }
    const double busiest = partition_tps(ctx_, stages, b_).busiest_s;
    outcome_.alternatives.push_back(partition(std::move(stages), busiest, std::move(origin)));
  }

  // The bottleneck counts each stage's all-reduce and optimizer step in its own busy time, yet
  // they follow its last backward pass, after the pipeline has drained, so they cannot fill the
  // stage's bubbles: a stage that meets T with light compute and a heavy step still ends the
  // iteration late (DLRM's embedding tables piled on one device). Where the longest step is at
  // least kStepShare of the iteration, the DP also runs under a ladder of caps on the step (the
  // slowest micro-batches plus the longest step), from the heaviest unit's own step up to the
  // bottleneck partition's longest; the best capped partition competes.
  void add_capped(GraphPipeDp& dp, const Bottleneck& sum_best) {
    const PartitionTps p = partition_tps(ctx_, sum_best.stages, b_);
    if (p.longest_step_s < kStepShare * (p.slowest_body_s + p.longest_step_s)) return;
    if (auto capped = capped_ladder(dp, p)) {
      add(std::move(capped->stages), "graph partition, all-reduce and optimizer steps capped");
    }
    dp.set_steps(GraphPipeDp::Steps::kSum);
  }

  // Conversely the optimizer steps of all stages run side by side at the end, so where every
  // stage steps a similar share of the state the iteration pays about one step whatever the
  // partition, and charging each stage's T with its own (a fully replicated stage steps all of
  // its state on every replica) can push the bottleneck partition, and the shallower ones
  // above T, away from the fastest (a transformer on 32 H100s: 8,366 samples/s from a 2-stage
  // partition of 16 replicas each, 7,267 without it). The partitions found without the
  // optimizer step, the shallower ones included, compete too.
  void add_without_optimizer(GraphPipeDp& dp, const Bottleneck& sum_best) {
    dp.set_steps(GraphPipeDp::Steps::kNoOptimizer);
    if (auto best = min_bottleneck(dp, sum_best.tps, ctx_.tps_relative_tolerance)) {
      add(std::move(best->stages), "graph partition without the optimizer step");
      add_shallower(dp, *best, "graph partition without the optimizer step");
    }
    dp.set_steps(GraphPipeDp::Steps::kSum);
  }

  std::optional<Bottleneck> capped_ladder(GraphPipeDp& dp, const PartitionTps& p) const {
    // No partition has a shorter longest step than its heaviest unit's step unreplicated, nor
    // a faster slowest body than the unit slowest on its most replicas (a cap leaving less than
    // that for the body meets nothing).
    double shortest_step = 0, fastest_body = 0;
    for (int u = 0; u < ctx_.units->num_units(); ++u) {
      const StageAggregate& unit = ctx_.costs->unit(u);
      shortest_step = std::max(shortest_step, ctx_.costs->tps_parts(unit, b_, 1, 0).step_s());
      double body = std::numeric_limits<double>::infinity();
      for (int d = 1; d <= ctx_.num_devices && b_ % d == 0; d *= 2) {
        body = std::min(body, ctx_.costs->tps_parts(unit, b_, d, 0).body_s);
      }
      fastest_body = std::max(fastest_body, body);
    }
    const double tolerance = ctx_.tps_relative_tolerance;
    double target = (p.slowest_body_s + p.longest_step_s) * (1 - tolerance);
    std::optional<Bottleneck> best;
    double cap = shortest_step;
    for (int i = 0; i < kMaxStepCaps && cap < p.longest_step_s && cap + fastest_body < target;
         ++i, cap *= kStepCapRatio) {
      dp.set_steps(GraphPipeDp::Steps::kCapped, cap);
      if (!dp.feasible(target)) continue;
      double hi = target, lo = std::max(cap, dp.lower_bound());
      best = Bottleneck{hi, dp.stages(), dp.depth()};
      while (hi - lo > tolerance * hi) {
        const double mid = 0.5 * (lo + hi);
        if (dp.feasible(mid)) {
          hi = mid;
          best = Bottleneck{hi, dp.stages(), dp.depth()};
        } else {
          lo = mid;
        }
      }
      target = hi * (1 - tolerance);
    }
    return best;
  }

  // The bottleneck ignores the pipeline's fill and drain, (depth - 1) / (M + depth - 1) of the
  // iteration with M micro-batches. Where that is large, a slightly slower bottleneck may allow
  // a shallower pipeline (the DP returns the shallowest partition meeting its T): those
  // partitions compete too, and the simulator, which sees bubbles, judges. The finer steps
  // catch a join that fits on its successor's stage just above T* (DLRM's interaction with the
  // top MLP instead of on a branch: one stage shallower for 0.7 % more bottleneck).
  void add_shallower(GraphPipeDp& dp, const Bottleneck& best, const char* what) {
    const double micro_batches = static_cast<double>(ctx_.mini_batch / b_);
    int depth = best.depth;
    if ((depth - 1) / (micro_batches + depth - 1) <= kShallowerBubble) return;
    for (const double slack : {1.02, 1.05, 1.1, 1.25, 1.5}) {
      if (ctx_.tps_useful_limit_s > 0 && best.tps * slack > ctx_.tps_useful_limit_s) break;
      if (depth <= 1 || !dp.feasible(best.tps * slack) || dp.depth() >= depth) continue;
      depth = dp.depth();
      char origin[128];
      std::snprintf(origin, sizeof(origin), "%s, bottleneck +%.0f%% for depth %d", what,
                    (slack - 1) * 100, depth);
      add(dp.stages(), origin);
    }
  }

  const PartitionContext& ctx_;
  const int64_t b_;
  const SpTree tree_;
  PartitionOutcome outcome_;
};

}  // namespace

Result<PartitionOutcome> partition_graphpipe(const PartitionContext& ctx, int64_t micro_batch) {
  GP_RETURN_IF_ERROR(validate_partition_context(ctx, micro_batch));
  if (ctx.num_devices > 4096) {  // the tail table's keys and the splits are sized for this
    return invalid_argument("--devices = " + std::to_string(ctx.num_devices) +
                            ", the GraphPipe planner supports at most 4096");
  }
  return GraphPipePartitioner(ctx, micro_batch).run();
}

}  // namespace gp::planner
