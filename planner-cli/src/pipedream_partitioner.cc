// PipeDream's own optimizer, optimizer_graph_hierarchical.py (msr-fiddle/pipedream), run on our
// costs so that `sequential` is at least as strong as the original it is named after.
//
// Its recurrence, per cluster level (GPUs of a server with the intra-node bandwidth, then
// servers with the inter-node bandwidth), over states in topological order:
//   A[i][j][m] = min( (C(i..j) + 4 m P(i..j) / (bw (m+1)) / W) / (m+1),     one stage, m+1 machines
//                     min over k in [i, j), m' in [1, m] of
//                       max(A[i][k][m-m'], (C(k+1..j) + 4 (m'-1) P(k+1..j) / (bw m')) / m') )
// where C is the compute time of a micro-batch (forward + backward), P the parameter bytes and W
// the machines of the level below (1 on the first level; PipeDream's hierarchical all-reduce).
// Its memory rule: a candidate stage on m' machines with M - (m+1) machines after it stashes
// ceil((M - (m+1)) / m') x (activations + parameters), which must fit in the device. The next
// level's C(i..j) is this level's A[i][j][all machines]: a segment's time as a pipeline on one
// whole server. Like PipeDream without --use_fewer_machines, every machine of a level is used,
// and like PipeDream without an activation compression ratio, transfers are not priced.
//
// Where this differs from the Python, and why:
// * States are the prefixes of one topological order of the units (PipeDream's antichain DAG
//   is exactly that on a chain; on a multi-branch graph it has exponentially many states).
//   `sequential` runs it on the same two orders as its chain DP.
// * Replication factors are powers of two (our lowering splits a micro-batch evenly over a
//   stage's replicas); a stage whose replication over both levels does not divide the
//   micro-batch makes the partition unusable at that micro-batch.
// * Candidates for one (i, j, m, m') are tried from the smallest last stage upward and stop once
//   the last stage does not fit, or a lower bound of its time reaches the best found; blocks of
//   k whose prefixes are all at least that slow are skipped. The optimum is the same (ties may
//   pick another split).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gp/planner/partition.h"

namespace gp::planner {
namespace {

constexpr double kNone = std::numeric_limits<double>::infinity();
constexpr int kBlock = 16;

struct Level {
  int machines = 1;
  double bandwidth_bytes_per_s = 1;
  int machines_below = 1;  // W: machines of one unit of this level
};

struct Segment {
  int begin = 0;  // positions [begin, end) of the order
  int end = 0;
  int replicas = 1;
};

// One level's table: A[i][j][m] over rows i, columns j in [0, n), m in [0, M). The top level
// needs only row 0 (whole prefixes), the levels below every row (any segment).
class LevelDp {
 public:
  LevelDp(int n, const Level& level, bool final_level)
      : n_(n), rows_(final_level ? 1 : n), level_(level) {
    const size_t size = static_cast<size_t>(rows_) * n * level.machines;
    time_.assign(size, kNone);
    split_k_.assign(size, -1);
    split_m_.assign(size, -1);
    replicas_.assign(size, 0);
  }

  // `compute(i, j)`: C of states i..j (kNone when unusable). `lower(i, j)` <= C(i..j) grows with
  // the segment (the first level: C itself; above: C over the machines below, since a pipeline
  // on W machines takes at least its compute over W), so the search over k stops once a last
  // stage's lower bound reaches the best time found, and the optimum stays the same.
  template <typename Compute, typename Lower>
  void solve(const Compute& compute, const Lower& lower, const std::vector<double>& params_prefix,
             const std::vector<double>& stash_prefix, double capacity, int64_t b) {
    const int M = level_.machines;
    const double bw = level_.bandwidth_bytes_per_s;
    auto params = [&](int i, int j) { return params_prefix[j + 1] - params_prefix[i]; };
    auto stash = [&](int i, int j) { return stash_prefix[j + 1] - stash_prefix[i]; };
    auto usable = [&](int machines) {  // a power of two dividing the micro-batch
      return (machines & (machines - 1)) == 0 && b % machines == 0;
    };
    for (int i = 0; i < rows_; ++i) {
      for (int j = i; j < n_; ++j) {
        const double c = compute(i, j);
        if (c == kNone) continue;
        for (int m = 0; m < M; ++m) {
          if (!usable(m + 1)) continue;
          const double stashed =
              std::ceil(static_cast<double>(M - (m + 1)) / (m + 1)) * stash(i, j);
          if (stashed > capacity) continue;
          const double dp_comm = 4.0 * m * params(i, j) / (bw * (m + 1)) / level_.machines_below;
          set(i, j, m, (c + dp_comm) / (m + 1), -1, -1, m + 1);
        }
      }
    }
    // For the rows A[i][.][m] of the current i, the minimum from the start of k's block of
    // kBlock entries up to k: when it is at least the best time found, no k of that stretch can
    // improve it, and the search jumps past it.
    std::vector<double> block_min(static_cast<size_t>(M) * n_);
    auto summarise = [&](int i, int m) {
      const double* row = &time_[at(i, 0, m)];
      double* out = &block_min[static_cast<size_t>(m) * n_];
      for (int k = 0; k < n_; ++k) out[k] = k % kBlock == 0 ? row[k] : std::min(out[k - 1], row[k]);
    };
    for (int i = 0; i < rows_; ++i) {
      summarise(i, 0);
      for (int m = 1; m < M; ++m) {
        for (int j = i + 1; j < n_; ++j) {
          const size_t at_ijm = at(i, j, m);
          double best = time_[at_ijm];
          int best_k = split_k_[at_ijm], best_m = split_m_[at_ijm], best_r = replicas_[at_ijm];
          // The last stage k+1..j on mp machines: PipeDream's memory rule, its data-parallel
          // time, and the split kept when it beats the best (memory checked by the caller).
          auto fits = [&](int k, int mp) {
            return stash(k + 1, j) * std::ceil(static_cast<double>(M - (m + 1)) / mp) <= capacity;
          };
          auto dp_comm = [&](int k, int mp) {
            return 4.0 * (mp - 1) * params(k + 1, j) / (bw * mp);
          };
          auto try_split = [&](int k, int mp, double comm) {
            const double c = compute(k + 1, j), prev = time_[at(i, k, m - mp)];
            if (c == kNone || prev == kNone) return;
            const double t = std::max(prev, (c + comm) / mp);
            if (t < best) best = t, best_k = k, best_m = m - mp, best_r = mp;
          };
          // Seed: the split that was best for j - 1, which is usually near the best for j, so
          // the bounds below skip most of the search from the start.
          if (const size_t before = at(i, j - 1, m); split_k_[before] >= 0) {
            const int k = split_k_[before], mp = replicas_[before];
            if (fits(k, mp)) try_split(k, mp, dp_comm(k, mp));
          }
          for (int mp = 1; mp <= m; ++mp) {
            if (!usable(mp)) continue;
            const double* prev_min = &block_min[static_cast<size_t>(m - mp) * n_];
            for (int k = j - 1; k >= i; --k) {  // the last stage is k+1..j, smallest first
              if (prev_min[k] >= best) {
                k -= k % kBlock;  // with the loop's --k: to the end of the previous block
                continue;
              }
              // Memory and the lower bound only grow as k falls: nothing further can win.
              if (!fits(k, mp)) break;
              const double comm = dp_comm(k, mp);
              if ((lower(k + 1, j) + comm) / mp >= best) break;
              try_split(k, mp, comm);
            }
          }
          set(i, j, m, best, best_k, best_m, best_r);
        }
        summarise(i, m);
      }
    }
  }

  double time(int i, int j, int m) const { return time_[at(i, j, m)]; }

  // analyze_partitioning: the stages of states [begin, end) on all of the level's machines.
  std::vector<Segment> stages(int begin, int end) const {
    std::vector<Segment> out;
    int j = end - 1, m = level_.machines - 1;
    while (true) {
      const size_t a = at(begin, j, m);
      const int k = split_k_[a];
      if (k < 0) {
        out.push_back({begin, j + 1, replicas_[a]});
        break;
      }
      out.push_back({k + 1, j + 1, replicas_[a]});
      m = split_m_[a];
      j = k;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }

 private:
  // [i][m][j]: the search over k reads one contiguous row.
  size_t at(int i, int j, int m) const {
    return (static_cast<size_t>(i) * level_.machines + m) * n_ + j;
  }
  void set(int i, int j, int m, double t, int k, int mrem, int replicas) {
    const size_t a = at(i, j, m);
    time_[a] = t;
    split_k_[a] = k;
    split_m_[a] = mrem;
    replicas_[a] = replicas;
  }

  int n_;
  int rows_;
  Level level_;
  std::vector<double> time_;
  std::vector<int> split_k_, split_m_, replicas_;
};

}  // namespace

Result<std::optional<Partition>> partition_pipedream_hierarchical(const PartitionContext& ctx,
                                                                  const std::vector<int>& order,
                                                                  int64_t b, std::string* why) {
  GP_RETURN_IF_ERROR(validate_partition_context(ctx, b));
  const int n = static_cast<int>(order.size());
  if (n != ctx.units->num_units()) {
    return invalid_argument("PipeDream order: " + std::to_string(n) + " positions for " +
                            std::to_string(ctx.units->num_units()) + " units");
  }
  const StageCostModel& costs = *ctx.costs;
  const int level_index = log2_exact(b);
  std::vector<double> compute_prefix(n + 1, 0), params_prefix(n + 1, 0), stash_prefix(n + 1, 0);
  for (int p = 0; p < n; ++p) {
    const StageAggregate& u = costs.unit(order[p]);
    const double params = static_cast<double>(u.gradient_bytes);
    compute_prefix[p + 1] = compute_prefix[p] + u.compute_us[level_index] * 1e-6;
    params_prefix[p + 1] = params_prefix[p] + params;
    stash_prefix[p + 1] =
        stash_prefix[p] + static_cast<double>(u.activation_bytes_per_sample * b) + params;
  }
  const double capacity = static_cast<double>(costs.capacity_bytes());

  // The cluster's levels: servers of G GPUs when the devices form whole servers, else one level.
  std::vector<Level> levels;
  const int g = ctx.devices_per_node;
  if (g > 1 && ctx.num_devices > g && ctx.num_devices % g == 0) {
    levels.push_back({g, ctx.intra_node_bandwidth_bytes_per_s, 1});
    levels.push_back({ctx.num_devices / g, ctx.inter_node_bandwidth_bytes_per_s, g});
  } else {
    const bool one_node = g >= ctx.num_devices;
    levels.push_back(
        {ctx.num_devices,
         one_node ? ctx.intra_node_bandwidth_bytes_per_s : ctx.inter_node_bandwidth_bytes_per_s,
         1});
  }
  for (Level& level : levels) {
    if (level.machines == 1) level.bandwidth_bytes_per_s = 1;  // nothing is ever sent
    if (!(level.bandwidth_bytes_per_s > 0)) {
      *why = "PipeDream's DP needs the bandwidth of every cluster level (not in the context)";
      return std::optional<Partition>();
    }
  }

  std::vector<LevelDp> dps;
  for (size_t l = 0; l < levels.size(); ++l) {
    const bool final_level = l + 1 == levels.size();
    dps.emplace_back(n, levels[l], final_level);
    auto own_compute = [&](int i, int j) { return compute_prefix[j + 1] - compute_prefix[i]; };
    if (l == 0) {
      dps[l].solve(own_compute, own_compute, params_prefix, stash_prefix, capacity, b);
    } else {
      const LevelDp& below = dps[l - 1];
      const int machines_below = levels[l].machines_below;
      dps[l].solve([&](int i, int j) { return below.time(i, j, machines_below - 1); },
                   [&](int i, int j) { return own_compute(i, j) / machines_below; }, params_prefix,
                   stash_prefix, capacity, b);
    }
  }
  if (dps.back().time(0, n - 1, levels.back().machines - 1) == kNone) {
    *why = "PipeDream's DP finds no partition on every device within its memory rule";
    return std::optional<Partition>();
  }

  // Top level first; each of its stages is split again by the level below (a pipeline inside one
  // server, replicated on the top-level stage's servers).
  std::vector<Segment> stages = dps.back().stages(0, n);
  for (int l = static_cast<int>(dps.size()) - 2; l >= 0; --l) {
    std::vector<Segment> finer;
    for (const Segment& top : stages) {
      for (Segment s : dps[l].stages(top.begin, top.end)) {
        s.replicas *= top.replicas;
        finer.push_back(s);
      }
    }
    stages = std::move(finer);
  }

  const std::vector<int64_t> cut = chain_cut_bytes(*ctx.units, order);
  Partition part;
  part.chain = true;
  part.micro_batch = b;
  for (const Segment& s : stages) {
    if (b % s.replicas != 0) {
      *why = "PipeDream's DP replicates a stage " + std::to_string(s.replicas) +
             " times, which does not divide micro-batch " + std::to_string(b);
      return std::optional<Partition>();
    }
    PartitionStage stage;
    stage.units.assign(order.begin() + s.begin, order.begin() + s.end);
    stage.devices = s.replicas;
    part.bottleneck_tps_s = std::max(
        part.bottleneck_tps_s,
        costs.tps_s(costs.aggregate(stage.units), b, s.replicas, cut[s.begin] + cut[s.end]));
    part.stages.push_back(std::move(stage));
  }
  return std::optional<Partition>(std::move(part));
}

}  // namespace gp::planner
