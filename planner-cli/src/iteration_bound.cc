#include "gp/planner/iteration_bound.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gp/cost/cluster.h"
#include "gp/cost/memory_model.h"

namespace gp::planner {
namespace {

using OpTerms = IterationBoundModel::OpTerms;

std::vector<OpTerms> op_terms(const model::Graph& graph, const cost::CostModel& compute,
                              const graphpipe::v1::Cluster& cluster,
                              const graphpipe::v1::TrainingConfig& training, int64_t mini_batch,
                              int64_t largest_kernel) {
  const cost::MemoryOptions memory{training.optimizer(), training.precision(), &compute};
  // The step's fixed part is left out: every term here must add up to at most the real cost.
  cost::OptimizerStepCost step =
      compute.optimizer_step_cost(cluster.device(), training.optimizer());
  step.fixed_us = 0;
  // A stage's step streams at the bandwidth of its whole state's size; an op's share can be no
  // faster than the fastest measured.
  if (step.points > 0) {
    step.bytes_per_s = *std::max_element(step.point_bytes_per_s.begin(),
                                         step.point_bytes_per_s.begin() + step.points);
    step.points = 0;
  }
  std::vector<OpTerms> out;
  for (int i = 0; i < graph.num_ops(); ++i) {
    const auto& op = graph.op(i);
    OpTerms t;
    double cheapest_s = INFINITY;
    for (int64_t k = 1; k <= largest_kernel; ++k) {
      const cost::OpTime time = compute.op_time(op, k);
      cheapest_s = std::min(cheapest_s, (time.forward_us + time.backward_us) * 1e-6 / k);
    }
    t.compute_s = cheapest_s * static_cast<double>(mini_batch);
    const int ops[] = {i};
    t.gradient_bytes =
        static_cast<double>(cost::stage_param_bytes(graph, ops, training.precision()));
    if (t.gradient_bytes > 0) {
      const auto state = cost::stage_memory(graph, ops, 1, 0, 1, memory);
      t.optimizer_s =
          cost::optimizer_step_us(step, state, cost::stage_param_tensors(graph, ops)) * 1e-6;
    }
    out.push_back(t);
  }
  return out;
}

class Bisection {
 public:
  Bisection(const std::vector<OpTerms>& ops, int devices, int64_t mini_batch,
            const std::vector<double>& allreduce_s_per_byte)
      : ops_(ops),
        devices_(devices),
        mini_batch_(static_cast<double>(mini_batch)),
        allreduce_s_per_byte_(allreduce_s_per_byte) {}

  // Seconds of one all-reduce of `bytes` over r replicas, latency left out.
  double allreduce_s(double bytes, int r) const {
    return r <= 1 ? 0 : bytes * allreduce_s_per_byte_[static_cast<size_t>(r)];
  }

  // Samples the busiest of r replicas computes: every replica is charged the largest slice of
  // each micro-batch, ceil(s / r), and those add up to at least ceil(mini-batch / r).
  double busiest_samples(int r) const { return std::ceil(mini_batch_ / r); }

  // One replica's step: the whole op's state, or a sharded stage's slice of it followed by the
  // parameter all-gather, which the simulator prices as a second all-reduce.
  static double step_s(const OpTerms& op, int r, double allreduce) {
    return r <= 1 ? op.optimizer_s : std::min(op.optimizer_s, op.optimizer_s / r + allreduce);
  }

  // Whether an iteration of `t` seconds can fit every op; fills `out` with the devices' time.
  bool fits(double t, IterationBound* out) const {
    IterationBound sum;
    for (const OpTerms& op : ops_) {
      const double per_sample_s = op.compute_s / mini_batch_;
      int r = 1;
      double allreduce = 0;
      double step = op.optimizer_s;
      for (; r <= devices_; ++r) {
        allreduce = allreduce_s(op.gradient_bytes, r);
        step = step_s(op, r, allreduce);
        if (per_sample_s * busiest_samples(r) + step + allreduce <= t) break;
      }
      if (r > devices_) return false;
      // r (step + all-reduce) never falls as r grows (allreduce_s_per_byte), so the smallest r
      // costs the devices least; the replicas compute at least the mini-batch between them.
      sum.compute_s += op.compute_s;
      sum.optimizer_s += r * step;
      sum.allreduce_s += r * allreduce;
    }
    if (sum.compute_s + sum.optimizer_s + sum.allreduce_s > devices_ * t) return false;
    *out = sum;
    return true;
  }

  IterationBound solve() const {
    double lo = 0;
    double hi = 0;
    for (const OpTerms& op : ops_) {
      lo += op.compute_s / devices_;
      hi += op.compute_s + op.optimizer_s;  // every op alone on one device in series
    }
    IterationBound best;
    if (hi <= 0 || !fits(hi, &best)) return best;
    best.iteration_s = hi;
    for (int i = 0; i < 100 && hi - lo > 1e-12 * hi; ++i) {
      const double mid = 0.5 * (lo + hi);
      IterationBound at;
      if (fits(mid, &at)) {
        hi = mid;
        best = at;
        best.iteration_s = mid;
      } else {
        lo = mid;
      }
    }
    // `lo` never fits: the bound is the infeasible side, rounded to below the true least T.
    best.iteration_s = lo > 0 ? lo : best.iteration_s;
    return best;
  }

 private:
  const std::vector<OpTerms>& ops_;
  int devices_;
  double mini_batch_;
  const std::vector<double>& allreduce_s_per_byte_;
};

// Seconds per byte of the cheapest all-reduce over r replicas (index r, up to `devices`) that the
// communication model (comm_model.h) can charge, latencies left out: in one node a ring on the
// intra-node link; over m nodes, the most replicas on one node being g, reduce-scatter and
// all-gather inside the nodes and a ring of bytes/g across them. The replicas may lie on any
// nodes: g may be anything up to a node's devices (8 + 1 replicas cost less than 5 + 4 over a
// slow inter-node link), and for a given g the cost only grows with m, so the fewest nodes that
// hold r replicas g to a node, ceil(r / g), price it. O(devices x devices per node).
std::vector<double> allreduce_s_per_byte(const graphpipe::v1::Cluster& cluster, int devices) {
  std::vector<double> out(static_cast<size_t>(std::max(devices, 1)) + 1, 0.0);
  const double intra = cluster.intra_node().bandwidth_bytes_per_s();
  const double inter = cluster.inter_node().bandwidth_bytes_per_s();
  if (intra <= 0 || inter <= 0) return out;
  const int per_node = std::max(1, static_cast<int>(cluster.devices_per_node()));
  const auto cost = [&](int m, int g) {
    return 2.0 * (g - 1) / g / intra + (m > 1 ? 2.0 * (m - 1) / m / g / inter : 0.0);
  };
  for (int r = 2; r <= devices; ++r) {
    double least = INFINITY;
    for (int g = 1; g <= std::min(per_node, r); ++g)
      least = std::min(least, cost((r + g - 1) / g, g));
    out[static_cast<size_t>(r)] = least;
  }
  // Lowered where needed so that r x out[r] never falls as r grows: the devices' time of an op is
  // then least at its fewest replicas (Bisection::fits), and each entry stays a lower bound.
  for (int r = devices - 1; r >= 2; --r) {
    const size_t i = static_cast<size_t>(r);
    out[i] = std::min(out[i], (r + 1) * out[i + 1] / r);
  }
  return out;
}

}  // namespace

IterationBoundModel::IterationBoundModel(const model::Graph& graph, const cost::CostModel& compute,
                                         const graphpipe::v1::Cluster& cluster,
                                         const graphpipe::v1::TrainingConfig& training,
                                         int64_t mini_batch, int64_t largest_kernel,
                                         bool count_allreduce)
    : ops_(op_terms(graph, compute, cluster, training, mini_batch,
                    largest_kernel > 0 ? largest_kernel : mini_batch)),
      mini_batch_(mini_batch),
      cluster_(cluster),
      count_allreduce_(count_allreduce) {}

IterationBound IterationBoundModel::at(int devices) const {
  const std::vector<double> per_byte =
      count_allreduce_ ? allreduce_s_per_byte(cluster_, devices)
                       : std::vector<double>(static_cast<size_t>(std::max(devices, 1)) + 1, 0.0);
  IterationBound bound = Bisection(ops_, devices, mini_batch_, per_byte).solve();
  if (bound.iteration_s > 0) bound.samples_per_s = mini_batch_ / bound.iteration_s;
  return bound;
}

IterationBound iteration_bound(const model::Graph& graph, const cost::CostModel& compute,
                               const graphpipe::v1::Cluster& cluster,
                               const graphpipe::v1::TrainingConfig& training, int64_t mini_batch) {
  return IterationBoundModel(graph, compute, cluster, training, mini_batch)
      .at(cost::num_devices(cluster));
}

}  // namespace gp::planner
