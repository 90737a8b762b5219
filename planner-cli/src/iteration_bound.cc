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
  Bisection(const std::vector<OpTerms>& ops, int devices, double s_per_byte)
      : ops_(ops), devices_(devices), s_per_byte_(s_per_byte) {}

  // Seconds of one all-reduce of `bytes` over r replicas, latency left out.
  double allreduce_s(double bytes, int r) const {
    return r <= 1 ? 0 : 2.0 * (r - 1) / r * bytes * s_per_byte_;
  }

  // Whether an iteration of `t` seconds can fit every op; fills `out` with the devices' time.
  bool fits(double t, IterationBound* out) const {
    IterationBound sum;
    for (const OpTerms& op : ops_) {
      int r = 1;
      while (r <= devices_ &&
             op.compute_s / r + op.optimizer_s + allreduce_s(op.gradient_bytes, r) > t) {
        ++r;
      }
      if (r > devices_) return false;
      sum.compute_s += op.compute_s;
      sum.optimizer_s += r * op.optimizer_s;
      sum.allreduce_s += r * allreduce_s(op.gradient_bytes, r);
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
  double s_per_byte_;
};

}  // namespace

IterationBoundModel::IterationBoundModel(const model::Graph& graph, const cost::CostModel& compute,
                                         const graphpipe::v1::Cluster& cluster,
                                         const graphpipe::v1::TrainingConfig& training,
                                         int64_t mini_batch, int64_t largest_kernel,
                                         bool count_allreduce)
    : ops_(op_terms(graph, compute, cluster, training, mini_batch,
                    largest_kernel > 0 ? largest_kernel : mini_batch)),
      mini_batch_(mini_batch) {
  const double bandwidth = std::max(cluster.intra_node().bandwidth_bytes_per_s(),
                                    cluster.inter_node().bandwidth_bytes_per_s());
  s_per_byte_ = count_allreduce && bandwidth > 0 ? 1.0 / bandwidth : 0.0;
}

IterationBound IterationBoundModel::at(int devices) const {
  IterationBound bound = Bisection(ops_, devices, s_per_byte_).solve();
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
