#include "gp/planner/plan_builder.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <tuple>

#include "gp/cost/cluster.h"
#include "gp/model/model_io.h"
#include "gp/plan/plan_util.h"

namespace gp::planner {
namespace {

using graphpipe::v1::Instruction;
using graphpipe::v1::InstructionKind;
using graphpipe::v1::Plan;
using graphpipe::v1::StageEdge;

std::string stage_field(size_t s, const char* field) {
  return "stages[" + std::to_string(s) + "]." + field;
}

// Stage order for greedy synchronous 1F1B: `warmup` forwards, then one backward and one forward
// alternately, then the remaining backwards. true = forward.
std::vector<std::pair<bool, int>> one_f_one_b(int num_micro_batches, int warmup) {
  std::vector<std::pair<bool, int>> order;
  int f = 0, b = 0;
  while (f < std::min(warmup, num_micro_batches)) order.emplace_back(true, f++);
  while (b < num_micro_batches) {
    order.emplace_back(false, b++);
    if (f < num_micro_batches) order.emplace_back(true, f++);
  }
  return order;
}

struct Slice {
  int rank;
  int64_t begin, end;  // samples, half-open
};

// The replica slices of `stage` that overlap the sample range [lo, hi).
std::vector<Slice> overlapping_slices(const graphpipe::v1::Stage& stage, int64_t lo, int64_t hi) {
  std::vector<Slice> out;
  const int64_t b = stage.micro_batch();
  for (int64_t m = lo / b; m * b < hi; ++m) {
    for (int j = 0; j < stage.device_ranks_size(); ++j) {
      const plan::SampleRange r = plan::replica_samples(stage, j, m);
      const int64_t begin = std::max(lo, r.begin);
      const int64_t end = std::min(hi, r.end);
      if (begin < end) out.push_back({stage.device_ranks(j), begin, end});
    }
  }
  return out;
}

Instruction make(InstructionKind kind, int stage, int mb) {
  Instruction in;
  in.set_kind(kind);
  in.set_stage(stage);
  in.set_micro_batch(mb);
  return in;
}

// The plan's message table, built while the programs are written: each transfer is first known
// by what it carries (direction, edge, ranks, samples), and numbered once every program is
// written, channel by channel in the sender's order.
class MessageTable {
 public:
  Instruction transfer(InstructionKind kind, int stage, int mb, int edge, int rank,
                       const Slice& peer) {
    const bool send = plan::is_send(kind);
    graphpipe::v1::Message m;
    m.set_edge(edge);
    m.set_gradient(plan::is_gradient_transfer(kind));
    m.set_src_rank(send ? rank : peer.rank);
    m.set_dst_rank(send ? peer.rank : rank);
    m.set_sample_begin(peer.begin);
    m.set_sample_end(peer.end);
    const Key key{m.gradient(), edge, m.src_rank(), m.dst_rank(), peer.begin, peer.end};
    auto [it, fresh] = provisional_.try_emplace(key, static_cast<int>(messages_.size()));
    if (fresh) messages_.push_back(std::move(m));
    Instruction in = make(kind, stage, mb);
    in.set_message(it->second);
    return in;
  }

  // Numbers the messages channel by channel in the order the senders issue them, writes
  // plan.messages and renumbers every instruction.
  void finish(Plan& plan) const {
    std::map<std::pair<int, int>, std::vector<int>> channels;
    std::vector<char> listed(messages_.size(), 0);
    for (const auto& prog : plan.programs()) {
      for (const auto& in : prog.instructions()) {
        if (!plan::is_send(in.kind())) continue;
        const auto& m = messages_[in.message()];
        channels[{m.src_rank(), m.dst_rank()}].push_back(in.message());
        listed[in.message()] = 1;
      }
    }
    std::vector<int> final_id(messages_.size(), -1);
    for (const auto& [pair, ids] : channels) {
      for (int id : ids) {
        final_id[id] = plan.messages_size();
        *plan.add_messages() = messages_[id];
      }
    }
    // Received but never sent cannot come from build_plan; numbered last, verify names them.
    for (size_t id = 0; id < messages_.size(); ++id) {
      if (!listed[id]) {
        final_id[id] = plan.messages_size();
        *plan.add_messages() = messages_[id];
      }
    }
    for (auto& prog : *plan.mutable_programs()) {
      for (auto& in : *prog.mutable_instructions()) {
        if (plan::is_send(in.kind()) || plan::is_recv(in.kind())) {
          in.set_message(final_id[in.message()]);
        }
      }
    }
  }

 private:
  using Key = std::tuple<bool, int, int, int, int64_t, int64_t>;
  std::map<Key, int> provisional_;
  std::vector<graphpipe::v1::Message> messages_;
};

}  // namespace

Result<std::vector<StageEdge>> stage_edges(const model::Graph& graph,
                                           const std::vector<StageAssignment>& stages, bool chain) {
  std::vector<int> stage_of(graph.num_ops(), -1);
  for (size_t s = 0; s < stages.size(); ++s) {
    for (int op : stages[s].ops) {
      if (op < 0 || op >= graph.num_ops()) {
        return invalid_argument(stage_field(s, "ops") + ": op index " + std::to_string(op) +
                                " out of range");
      }
      if (stage_of[op] >= 0) {
        return invalid_argument(stage_field(s, "ops") + ": op '" + graph.op(op).id() +
                                "' is also in stages[" + std::to_string(stage_of[op]) + "]");
      }
      stage_of[op] = static_cast<int>(s);
    }
  }
  for (int op = 0; op < graph.num_ops(); ++op) {
    if (stage_of[op] < 0)
      return invalid_argument("stages: op '" + graph.op(op).id() + "' is in no stage");
  }
  std::map<std::pair<int, int>, std::vector<graphpipe::v1::TensorRef>> by_pair;
  auto add_tensor = [&](int src, int dst, const graphpipe::v1::TensorRef& ref) {
    auto& tensors = by_pair[{src, dst}];
    const bool seen = std::any_of(tensors.begin(), tensors.end(), [&](const auto& t) {
      return t.op() == ref.op() && t.output() == ref.output();
    });
    if (!seen) tensors.push_back(ref);
  };
  for (int op : graph.topo_order()) {
    for (const auto& ref : graph.op(op).proto->inputs()) {
      const int producer = graph.index_of(ref.op());
      const int src = stage_of[producer], dst = stage_of[op];
      if (src == dst) continue;
      if (!chain) {
        add_tensor(src, dst, ref);
        continue;
      }
      if (src > dst) {
        return invalid_argument("stages: op '" + graph.op(op).id() + "' in stages[" +
                                std::to_string(dst) + "] consumes '" + ref.op() +
                                "' from the later stages[" + std::to_string(src) +
                                "]; a chain needs stages in topological order");
      }
      for (int s = src; s < dst; ++s) add_tensor(s, s + 1, ref);  // relayed through s+1..dst-1
    }
  }
  std::vector<StageEdge> edges;
  for (const auto& [pair, tensors] : by_pair) {
    StageEdge e;
    e.set_src_stage(pair.first);
    e.set_dst_stage(pair.second);
    int64_t bytes = 0;
    for (const auto& t : tensors) {
      *e.add_tensors() = t;
      bytes += model::size_bytes(graph.op(graph.index_of(t.op())).proto->outputs(t.output()));
    }
    e.set_bytes_per_sample(bytes);
    edges.push_back(std::move(e));
  }
  // The stage graph must be a DAG (stages convex in the op graph).
  std::vector<int> indegree(stages.size(), 0);
  for (const auto& e : edges) ++indegree[e.dst_stage()];
  std::queue<int> ready;
  for (size_t s = 0; s < stages.size(); ++s) {
    if (indegree[s] == 0) ready.push(static_cast<int>(s));
  }
  size_t visited = 0;
  while (!ready.empty()) {
    const int s = ready.front();
    ready.pop();
    ++visited;
    for (const auto& e : edges) {
      if (e.src_stage() == s && --indegree[e.dst_stage()] == 0) ready.push(e.dst_stage());
    }
  }
  if (visited != stages.size()) {
    std::string cyclic;
    for (size_t s = 0; s < stages.size(); ++s) {
      if (indegree[s] > 0) cyclic += (cyclic.empty() ? "" : ", ") + std::to_string(s);
    }
    return invalid_argument("stages: the stage graph has a cycle through stages " + cyclic +
                            " (a stage is not convex in the operator graph)");
  }
  return edges;
}

std::vector<int64_t> in_flight_samples(const std::vector<StageAssignment>& stages,
                                       const std::vector<StageEdge>& edges) {
  const size_t n = stages.size();
  std::vector<int64_t> k(n, 0);
  std::vector<int> pending(n, 0);  // successors not yet resolved
  for (const auto& e : edges) ++pending[e.src_stage()];
  std::queue<int> ready;
  for (size_t s = 0; s < n; ++s) {
    if (pending[s] == 0) {
      k[s] = stages[s].micro_batch;
      ready.push(static_cast<int>(s));
    }
  }
  while (!ready.empty()) {
    const int done = ready.front();
    ready.pop();
    for (const auto& e : edges) {
      if (e.dst_stage() != done) continue;
      const int s = e.src_stage();
      k[s] = std::max(k[s], k[done] + std::max(stages[s].micro_batch, stages[done].micro_batch));
      if (--pending[s] == 0) ready.push(s);
    }
  }
  return k;
}

Result<Plan> build_plan(const PlanInputs& inputs, const std::vector<StageAssignment>& stages) {
  const model::Graph& graph = *inputs.graph;
  if (inputs.mini_batch <= 0) {
    return invalid_argument("--batch = " + std::to_string(inputs.mini_batch) + ", must be > 0");
  }
  if (stages.empty()) return invalid_argument("stages: empty");
  const int cluster_devices = cost::num_devices(inputs.cluster);  // ranks are dense
  std::set<int> used;
  for (size_t s = 0; s < stages.size(); ++s) {
    const auto& st = stages[s];
    if (st.ranks.empty()) return invalid_argument(stage_field(s, "ranks") + ": empty");
    for (int r : st.ranks) {
      if (r < 0 || r >= cluster_devices || !used.insert(r).second) {
        return invalid_argument(stage_field(s, "ranks") + ": rank " + std::to_string(r) +
                                " is out of range or used twice");
      }
    }
    if (st.micro_batch <= 0 || inputs.mini_batch % st.micro_batch != 0) {
      return invalid_argument(stage_field(s, "micro_batch") + " = " +
                              std::to_string(st.micro_batch) + " does not divide the mini-batch " +
                              std::to_string(inputs.mini_batch));
    }
    if (st.micro_batch < static_cast<int64_t>(st.ranks.size())) {
      return invalid_argument(stage_field(s, "micro_batch") + " = " +
                              std::to_string(st.micro_batch) + " is smaller than its " +
                              std::to_string(st.ranks.size()) +
                              " data-parallel devices (each needs a sample)");
    }
  }
  GP_ASSIGN_OR_RETURN(std::vector<StageEdge> edges, stage_edges(graph, stages, inputs.chain));
  const std::vector<int64_t> k = in_flight_samples(stages, edges);

  Plan plan;
  plan.set_format_version(plan::kPlanFormatVersion);
  *plan.mutable_model() = graph.model();
  plan.set_model_hash(graph.model_hash());  // hashed once per graph, not per plan
  *plan.mutable_cluster() = inputs.cluster;
  plan.set_cluster_hash(model::message_hash(inputs.cluster));
  plan.set_mini_batch(inputs.mini_batch);
  *plan.mutable_training() = inputs.training;
  plan.mutable_provenance()->set_strategy(inputs.strategy);

  std::vector<int> position(graph.num_ops());
  for (int i = 0; i < graph.num_ops(); ++i) position[graph.topo_order()[i]] = i;
  for (size_t s = 0; s < stages.size(); ++s) {
    auto* st = plan.add_stages();
    st->set_id(static_cast<int>(s));
    std::vector<int> ops = stages[s].ops;
    std::sort(ops.begin(), ops.end(), [&](int a, int b) { return position[a] < position[b]; });
    for (int op : ops) st->add_op_ids(graph.op(op).id());
    for (int r : stages[s].ranks) st->add_device_ranks(r);
    st->set_micro_batch(stages[s].micro_batch);
    st->set_in_flight_samples(k[s]);
    const int64_t num_mb = inputs.mini_batch / stages[s].micro_batch;
    st->set_warmup_forwards(static_cast<int>(
        std::min<int64_t>(num_mb, (k[s] + stages[s].micro_batch - 1) / stages[s].micro_batch)));
  }
  for (auto& e : edges) *plan.add_edges() = e;

  MessageTable table;
  for (size_t s = 0; s < stages.size(); ++s) {
    const auto& st = stages[s];
    const int stage = static_cast<int>(s);
    const int num_mb = static_cast<int>(inputs.mini_batch / st.micro_batch);
    int64_t params = 0;
    for (int op : st.ops) params += graph.op(op).cost.param_count;
    const auto order = one_f_one_b(num_mb, plan.stages(stage).warmup_forwards());
    for (size_t j = 0; j < st.ranks.size(); ++j) {
      auto* prog = plan.add_programs();
      const int rank = st.ranks[j];
      prog->set_rank(rank);
      prog->set_stage(stage);
      // Transfers of micro-batch `mb` on the edges whose `end` (src or dst stage) is this stage,
      // with every replica of the other end whose samples overlap this replica's.
      const auto transfers = [&](InstructionKind kind, int mb, bool this_is_src, bool gradient) {
        const plan::SampleRange mine =
            plan::replica_samples(plan.stages(stage), static_cast<int>(j), mb);
        for (int e = 0; e < plan.edges_size(); ++e) {
          const auto& edge = plan.edges(e);
          if ((this_is_src ? edge.src_stage() : edge.dst_stage()) != stage) continue;
          if (gradient && plan::gradient_bytes_per_sample(graph, edge) == 0) continue;
          const auto& other = plan.stages(this_is_src ? edge.dst_stage() : edge.src_stage());
          for (const Slice& peer : overlapping_slices(other, mine.begin, mine.end)) {
            *prog->add_instructions() = table.transfer(kind, stage, mb, e, rank, peer);
          }
        }
      };
      for (const auto& [forward, mb] : order) {
        if (forward) {
          transfers(graphpipe::v1::INSTRUCTION_KIND_RECV_ACTIVATION, mb, false, false);
          *prog->add_instructions() = make(graphpipe::v1::INSTRUCTION_KIND_FORWARD, stage, mb);
          transfers(graphpipe::v1::INSTRUCTION_KIND_SEND_ACTIVATION, mb, true, false);
        } else {
          transfers(graphpipe::v1::INSTRUCTION_KIND_RECV_GRADIENT, mb, true, true);
          *prog->add_instructions() = make(graphpipe::v1::INSTRUCTION_KIND_BACKWARD, stage, mb);
          transfers(graphpipe::v1::INSTRUCTION_KIND_SEND_GRADIENT, mb, false, true);
        }
      }
      if (params > 0 && st.ranks.size() > 1) {
        *prog->add_instructions() = make(graphpipe::v1::INSTRUCTION_KIND_ALLREDUCE_GRADS, stage, 0);
      }
      if (params > 0) {
        *prog->add_instructions() = make(graphpipe::v1::INSTRUCTION_KIND_OPTIMIZER_STEP, stage, 0);
      }
    }
  }
  table.finish(plan);
  return plan;
}

Result<Plan> compact_idle_ranks(Plan plan) {
  std::set<int> used;
  for (const auto& st : plan.stages())
    used.insert(st.device_ranks().begin(), st.device_ranks().end());
  if (used.empty() || *used.rbegin() + 1 == static_cast<int>(used.size())) return plan;
  const int ranks = cost::num_devices(plan.cluster());
  if (*used.begin() < 0 || *used.rbegin() >= ranks) {
    return invalid_argument("plan.stages: rank " + std::to_string(*used.rbegin()) +
                            " is outside the cluster's " + std::to_string(ranks) + " devices");
  }
  std::vector<int> dense(static_cast<size_t>(ranks), -1);
  int next = 0;
  for (int r : used) dense[static_cast<size_t>(r)] = next++;
  graphpipe::v1::Cluster cluster = plan.cluster();
  for (int r = 0; r < *used.rbegin(); ++r) {
    if (dense[static_cast<size_t>(r)] < 0) {
      cluster.add_excluded_ranks(cost::physical_device(plan.cluster(), r));
    }
  }
  const auto to_dense = [&](int r) { return dense[static_cast<size_t>(r)]; };
  for (auto& st : *plan.mutable_stages()) {
    for (auto& r : *st.mutable_device_ranks()) r = to_dense(r);
  }
  for (auto& prog : *plan.mutable_programs()) prog.set_rank(to_dense(prog.rank()));
  for (auto& m : *plan.mutable_messages()) {
    m.set_src_rank(to_dense(m.src_rank()));
    m.set_dst_rank(to_dense(m.dst_rank()));
  }
  *plan.mutable_cluster() = cluster;
  plan.set_cluster_hash(model::message_hash(cluster));
  return plan;
}

}  // namespace gp::planner
