// A bound on the throughput of every plan of a model on a set of devices, tighter than compute
// alone: every op's compute, the optimizer step over its parameters and the all-reduce of its
// gradients, which the simulator charges every replica of the op's stage once per iteration.
//
// For an op i with r replicas (those of its stage), over a mini-batch of B samples: the busiest
// replica computes at least ceil(B / r) samples (each micro-batch of s samples costs every
// replica its largest slice, ceil(s / r)), each at least p_i, the op's cheapest time per sample
// over kernels of 1..largest samples; every replica steps the optimizer over the op's state,
// o_i = the simulator's step time of the op alone less the fixed part a stage shares
// (cost::optimizer_step_us), or a sharded stage's 1/r of it followed by a parameter all-gather
// priced as an all-reduce; and all-reduces its gradients, a_i(r) = bytes_i x the cheapest
// seconds per byte the communication model charges r replicas on this cluster's nodes (a ring in
// one node, or the hierarchical formula over any placement on the nodes, even or not; latency
// left out, a stage's latencies being shared by its ops). With s_i(r) = min(o_i, o_i / r +
// a_i(r)) for r > 1 (o_i for one replica), an iteration of T seconds needs, for every op, some r
// with
//     p_i ceil(B / r) + s_i(r) + a_i(r) <= T       (one replica's share; nothing else counted)
// and, over all ops (the smallest such r is taken: the seconds per byte are lowered where needed
// so that r a_i(r), and with it r s_i(r), never falls as r grows),
//     sum_i [p_i B + r_i (s_i(r_i) + a_i(r_i))] <= devices x T    (the devices' time, no bubble).
// The bound is the least T meeting both (bisection; both only loosen as T grows), as B / T
// samples/s. No transfer, bubble, fill or drain is counted. The search prunes device counts with
// it (search.h); gp_planner_bench prints it beside each row.
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
  graphpipe::v1::Cluster cluster_;
  bool count_allreduce_;
};

// `cluster` is already reduced to the devices a plan may use.
IterationBound iteration_bound(const model::Graph& graph, const cost::CostModel& compute,
                               const graphpipe::v1::Cluster& cluster,
                               const graphpipe::v1::TrainingConfig& training, int64_t mini_batch);

}  // namespace gp::planner
