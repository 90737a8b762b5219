// A bound on the throughput of every plan of a model on a set of devices, tighter than compute
// alone: every op's compute, the optimizer step over its parameters and the all-reduce of its
// gradients, which the simulator charges every replica of the op's stage once per iteration.
//
// For an op i with replicas r (those of its stage): its compute is at least c_i = mini-batch x
// its cheapest time per sample over kernels of 1..mini-batch samples; each replica steps the
// optimizer over the op's state, o_i = the simulator's step time of the op alone less the fixed
// part a stage shares (cost::optimizer_step_us, the cost model's step); and all-reduces its
// gradients,
// a_i(r) = 2 (r-1)/r x bytes_i / the faster link's bandwidth (the ring formula's volume without
// latency, a stage's one latency being shared by its ops; the hierarchical formula costs at
// least as much). An iteration of T seconds then needs, for every op, some r with
//     c_i / r + o_i + a_i(r) <= T                  (one replica's share; nothing else counted)
// and, over all ops (the smallest such r minimises the work, which grows with r),
//     sum_i [c_i + r_i (o_i + a_i(r_i))] <= devices x T    (the devices' time, no bubble).
// The bound is the least T meeting both (bisection; the work only falls as T grows), as
// mini-batch / T samples/s. No transfer, bubble, fill or drain is counted. The search prunes
// device counts with it (search.h); gp_planner_bench prints it beside each row.
#pragma once

#include <cstdint>
#include <vector>

#include "gp/cost/cost_model.h"
#include "gp/model/graph.h"
#include "graphpipe/v1/cluster.pb.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::planner {

struct IterationBound {
  double samples_per_s = 0;  // mini-batch / iteration_s
  double iteration_s = 0;
  // At that iteration time, the devices' time summed: compute, optimizer steps (every
  // replica's) and all-reduces.
  double compute_s = 0;
  double optimizer_s = 0;
  double allreduce_s = 0;
};

// The bound at any device count, its per-op terms computed once.
class IterationBoundModel {
 public:
  // Kernels of 1..largest_kernel samples are considered (the mini-batch when 0). With
  // `count_allreduce` false the all-reduce term is left out (the bound stays valid, and looser),
  // for searches whose links are measured rather than the cluster's datasheet.
  IterationBoundModel(const model::Graph& graph, const cost::CostModel& compute,
                      const graphpipe::v1::Cluster& cluster,
                      const graphpipe::v1::TrainingConfig& training, int64_t mini_batch,
                      int64_t largest_kernel = 0, bool count_allreduce = true);
  // No plan on `devices` devices passes it; it never falls as devices grow.
  IterationBound at(int devices) const;

  struct OpTerms {
    double compute_s = 0;    // the whole mini-batch at the cheapest time per sample
    double optimizer_s = 0;  // one replica's step over the op's state, no launch
    double gradient_bytes = 0;
  };

 private:
  std::vector<OpTerms> ops_;
  int64_t mini_batch_;
  double s_per_byte_;
};

// `cluster` is already reduced to the devices a plan may use.
IterationBound iteration_bound(const model::Graph& graph, const cost::CostModel& compute,
                               const graphpipe::v1::Cluster& cluster,
                               const graphpipe::v1::TrainingConfig& training, int64_t mini_batch);

}  // namespace gp::planner
