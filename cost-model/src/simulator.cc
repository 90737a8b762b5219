#include "gp/sim/simulator.h"

#include <algorithm>
#include <queue>

#include "gp/graph/plan_util.h"

namespace gp::sim {
namespace {

using graphpipe::v1::Instruction;
using graphpipe::v1::Plan;
using K = graphpipe::v1::InstructionKind;

struct StageCosts {
  double forward_us = 0;
  double backward_us = 0;
  double optimizer_us = 0;
  int64_t samples_per_replica = 0;
  int64_t activation_bytes_per_sample = 0;
  int64_t gradient_bytes = 0;  // all-reduce volume
  cost::MemoryBreakdown static_memory;
};

struct RankState {
  int program = -1;
  int pc = 0;
  double clock = 0;
  bool finished = false;
  int64_t activation_bytes = 0;
  int64_t live_samples = 0;
  int64_t max_live_samples = 0;
};

}  // namespace

std::string SimResult::deadlock_report() const {
  std::string s;
  for (const auto& b : blocked) {
    if (!s.empty()) s += "; ";
    s += "rank " + std::to_string(b.rank) + " waits on instruction " +
         std::to_string(b.instruction_index) + " (" + b.instruction + ")";
  }
  return s;
}

Simulator::Simulator(const cost::CostModel& compute, const cost::CommModel& comm,
                     cost::MemoryOptions memory)
    : compute_(compute), comm_(comm), memory_(memory) {}

Result<SimResult> Simulator::run(const Plan& plan, const graph::Graph& graph,
                                 const SimOptions& options) const {
  GP_ASSIGN_OR_RETURN(graph::PlanIndex index, graph::validate_plan_structure(plan, graph));
  const auto& device = plan.cluster().device();
  const double mem_bw = std::max(device.memory_bandwidth_bytes_per_s(), 1.0);

  // 1. Per-stage costs, computed once.
  std::vector<StageCosts> costs(plan.stages_size());
  for (int s = 0; s < plan.stages_size(); ++s) {
    const auto& st = plan.stages(s);
    const auto& ops = index.stage_ops[s];
    StageCosts& c = costs[s];
    const int d = st.device_ranks_size();
    // The largest replica slice (replica_samples: they differ by at most one sample) sets the
    // stage's pace and its memory.
    c.samples_per_replica = (st.micro_batch() + d - 1) / d;
    for (int op : ops) {
      const cost::OpTime t = compute_.op_time(graph.op(op), c.samples_per_replica);
      c.forward_us += t.forward_us;
      c.backward_us += t.backward_us;
    }
    c.static_memory =
        cost::stage_memory(graph, ops, st.micro_batch(), /*in_flight_samples=*/0, d, memory_);
    c.activation_bytes_per_sample =
        cost::stage_memory(graph, ops, 1, /*in_flight_samples=*/1, 1, memory_).activation_bytes;
    c.gradient_bytes = cost::stage_param_bytes(graph, ops, plan.training().precision());
    // The optimizer streams weights, gradients and state once: read all, write weights and state.
    const auto& m = c.static_memory;
    const double touched = 2.0 * static_cast<double>(m.weight_bytes + m.optimizer_bytes) +
                           static_cast<double>(m.gradient_bytes);
    c.optimizer_us = touched / mem_bw * 1e6 + device.kernel_launch_overhead_us();
  }

  // 2. Event loop: always advance the runnable rank with the earliest clock.
  const int world = index.world_size;
  std::vector<RankState> ranks(world);
  SimResult result;
  result.ranks.resize(world);
  for (int r = 0; r < world; ++r) {
    ranks[r].program = index.program_of_rank[r];
    ranks[r].finished = ranks[r].program < 0;
    result.ranks[r].rank = r;
    result.ranks[r].stage = index.stage_of_rank[r];
    if (index.stage_of_rank[r] >= 0) {
      result.ranks[r].static_memory = costs[index.stage_of_rank[r]].static_memory;
      result.ranks[r].peak_memory_bytes = result.ranks[r].static_memory.total();
    }
  }
  using Entry = std::pair<double, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> runnable;
  for (int r = 0; r < world; ++r) {
    if (!ranks[r].finished) runnable.emplace(0.0, r);
  }
  std::vector<double> egress_free(world, 0.0), ingress_free(world, 0.0);
  // Per message (Plan.messages): when its send finished (-1: not yet), and the rank blocked in
  // its receive (-1: none).
  std::vector<double> arrived(plan.messages_size(), -1);
  std::vector<int> waiting(plan.messages_size(), -1);
  std::vector<std::vector<int>> allreduce_waiting(plan.stages_size());
  std::vector<double> allreduce_ready(plan.stages_size(), 0.0);

  auto record_memory = [&](int r, double t) {
    RankStats& rs = result.ranks[r];
    const int64_t total = rs.static_memory.total() + ranks[r].activation_bytes;
    rs.peak_memory_bytes = std::max(rs.peak_memory_bytes, total);
    if (options.record_events) rs.memory.push_back({t, total});
  };
  auto add_event = [&](SimEvent e) {
    if (options.record_events) result.events.push_back(e);
  };

  while (!runnable.empty()) {
    const int r = runnable.top().second;
    runnable.pop();
    RankState& rank = ranks[r];
    const auto& prog = plan.programs(rank.program);
    if (rank.pc >= prog.instructions_size()) {
      rank.finished = true;
      result.ranks[r].finish_us = rank.clock;
      continue;
    }
    const Instruction& in = prog.instructions(rank.pc);
    const int s = prog.stage();
    const StageCosts& c = costs[s];
    ++result.events_processed;
    bool advanced = true;
    switch (in.kind()) {
      case K::INSTRUCTION_KIND_FORWARD: {
        rank.activation_bytes += c.activation_bytes_per_sample * c.samples_per_replica;
        rank.live_samples += c.samples_per_replica;
        rank.max_live_samples = std::max(rank.max_live_samples, rank.live_samples);
        record_memory(r, rank.clock);
        add_event({EventKind::kForward, r, -1, s, in.micro_batch(), rank.clock,
                   rank.clock + c.forward_us});
        rank.clock += c.forward_us;
        result.ranks[r].busy_us += c.forward_us;
        break;
      }
      case K::INSTRUCTION_KIND_BACKWARD:
        add_event({EventKind::kBackward, r, -1, s, in.micro_batch(), rank.clock,
                   rank.clock + c.backward_us});
        rank.clock += c.backward_us;
        result.ranks[r].busy_us += c.backward_us;
        rank.activation_bytes -= c.activation_bytes_per_sample * c.samples_per_replica;
        rank.live_samples -= c.samples_per_replica;
        record_memory(r, rank.clock);
        break;
      case K::INSTRUCTION_KIND_SEND_ACTIVATION:
      case K::INSTRUCTION_KIND_SEND_GRADIENT: {
        const bool grad = in.kind() == K::INSTRUCTION_KIND_SEND_GRADIENT;
        const auto& msg = plan.messages(in.message());
        const auto& edge = plan.edges(msg.edge());
        const int64_t per_sample =
            grad ? graph::gradient_bytes_per_sample(graph, edge) : edge.bytes_per_sample();
        const int64_t bytes = per_sample * (msg.sample_end() - msg.sample_begin());
        const int peer = msg.dst_rank();
        const double start = std::max({rank.clock, egress_free[r], ingress_free[peer]});
        const double end = start + comm_.p2p_time_us(r, peer, bytes);
        egress_free[r] = end;
        ingress_free[peer] = end;
        add_event({EventKind::kTransfer, r, peer, s, in.micro_batch(), start, end, grad, bytes});
        if (const int w = waiting[in.message()]; w >= 0) {
          RankState& receiver = ranks[w];
          receiver.clock = std::max(receiver.clock, end);
          ++receiver.pc;
          runnable.emplace(receiver.clock, w);
          waiting[in.message()] = -1;
        } else {
          arrived[in.message()] = end;
        }
        break;
      }
      case K::INSTRUCTION_KIND_RECV_ACTIVATION:
      case K::INSTRUCTION_KIND_RECV_GRADIENT: {
        if (const double at = arrived[in.message()]; at >= 0) {
          rank.clock = std::max(rank.clock, at);
          arrived[in.message()] = -1;
        } else {
          waiting[in.message()] = r;
          advanced = false;  // resumed by the matching send
        }
        break;
      }
      case K::INSTRUCTION_KIND_ALLREDUCE_GRADS: {
        auto& group = allreduce_waiting[s];
        group.push_back(r);
        allreduce_ready[s] = std::max(allreduce_ready[s], rank.clock);
        advanced = false;
        const auto& replicas = plan.stages(s).device_ranks();
        if (static_cast<int>(group.size()) == replicas.size()) {
          std::vector<int> members(replicas.begin(), replicas.end());
          const double start = allreduce_ready[s];
          const double end = start + comm_.allreduce_time_us(members, c.gradient_bytes);
          for (int m : group) {
            add_event({EventKind::kAllReduce, m, -1, s, 0, start, end, true, c.gradient_bytes});
            ranks[m].clock = end;
            ++ranks[m].pc;
            runnable.emplace(end, m);
          }
          group.clear();
        }
        break;
      }
      case K::INSTRUCTION_KIND_OPTIMIZER_STEP:
        add_event({EventKind::kOptimizer, r, -1, s, 0, rank.clock, rank.clock + c.optimizer_us});
        rank.clock += c.optimizer_us;
        result.ranks[r].busy_us += c.optimizer_us;
        break;
      default:
        return internal_error("simulator: unhandled instruction kind");
    }
    if (advanced) {
      ++rank.pc;
      runnable.emplace(rank.clock, r);
    }
  }

  // 3. Deadlock: some rank never finished.
  for (int r = 0; r < world; ++r) {
    if (ranks[r].finished) continue;
    result.deadlocked = true;
    const auto& prog = plan.programs(ranks[r].program);
    result.blocked.push_back(
        {r, ranks[r].pc, graph::describe_instruction(plan, prog.instructions(ranks[r].pc))});
  }
  if (result.deadlocked) return result;

  // 4. Aggregates.
  for (const auto& rs : result.ranks) {
    result.iteration_time_us = std::max(result.iteration_time_us, rs.finish_us);
    result.peak_memory_bytes = std::max(result.peak_memory_bytes, rs.peak_memory_bytes);
  }
  const double iter = std::max(result.iteration_time_us, 1e-9);
  result.throughput_samples_per_s = static_cast<double>(plan.mini_batch()) / (iter * 1e-6);
  result.stages.assign(plan.stages_size(), StageStats{});
  int used = 0;
  for (const auto& rs : result.ranks) {
    if (rs.stage < 0) continue;
    ++used;
    result.bubble_fraction += 1.0 - rs.busy_us / iter;
    StageStats& st = result.stages[rs.stage];
    st.busy_us = std::max(st.busy_us, rs.busy_us);
    st.peak_memory_bytes = std::max(st.peak_memory_bytes, rs.peak_memory_bytes);
  }
  result.bubble_fraction /= std::max(used, 1);
  for (int s = 0; s < plan.stages_size(); ++s) {
    StageStats& st = result.stages[s];
    st.stage = s;
    st.bubble_fraction = 1.0 - st.busy_us / iter;
    st.forward_us = costs[s].forward_us;
    st.backward_us = costs[s].backward_us;
    st.max_live_samples = ranks[plan.stages(s).device_ranks(0)].max_live_samples;
  }
  return result;
}

void fill_predicted_metrics(const SimResult& result, Plan* plan) {
  auto* p = plan->mutable_predicted();
  p->Clear();
  const double iter_s = result.iteration_time_us * 1e-6;
  p->set_iteration_time_s(iter_s);
  p->set_throughput_samples_per_s(result.throughput_samples_per_s);
  p->set_bubble_fraction(result.bubble_fraction);
  p->set_peak_memory_bytes(result.peak_memory_bytes);
  double bottleneck = 0;
  for (const auto& st : result.stages) {
    auto* m = p->add_stages();
    m->set_stage(st.stage);
    m->set_busy_time_s(st.busy_us * 1e-6);
    m->set_bubble_fraction(st.bubble_fraction);
    m->set_peak_memory_bytes(st.peak_memory_bytes);
    const double tps = st.busy_us * 1e-6 / static_cast<double>(plan->mini_batch());
    m->set_time_per_sample_s(tps);
    bottleneck = std::max(bottleneck, tps);
  }
  p->set_bottleneck_tps_s(bottleneck);
}

std::string chrome_trace_json(const Plan& plan, const SimResult& result) {
  std::vector<trace::Track> tracks;
  std::vector<trace::MemoryPoint> memory;
  for (const RankStats& rs : result.ranks) {
    if (rs.stage >= 0) tracks.push_back({rs.rank, rs.stage});
    for (const MemorySample& m : rs.memory) memory.push_back({rs.rank, m.time_us, m.bytes});
  }
  trace::TraceInput input;
  input.model = plan.model().name();
  input.mini_batch = plan.mini_batch();
  input.iteration_time_us = result.iteration_time_us;
  input.tracks = tracks;
  input.spans = result.events;
  input.memory = memory;
  return trace::chrome_trace_json(input);
}

}  // namespace gp::sim
