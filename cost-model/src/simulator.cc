#include "gp/sim/simulator.h"

#include <algorithm>
#include <map>
#include <memory>
#include <queue>
#include <string>

#include "gp/plan/plan_util.h"

namespace gp::sim {
namespace {

using graphpipe::v1::Instruction;
using graphpipe::v1::Plan;
using K = graphpipe::v1::InstructionKind;

struct StageCosts {
  double forward_us = 0;
  double backward_us = 0;
  double recompute_us = 0;  // Stage.recompute: the forward rerun before each backward
  double optimizer_us = 0;
  // Stage.shard_optimizer with several replicas: the parameter all-gather after the step.
  bool shard_optimizer = false;
  int64_t samples_per_replica = 0;
  int64_t activation_bytes_per_sample = 0;
  int64_t gradient_bytes = 0;  // all-reduce volume
  cost::MemoryBreakdown static_memory;
  int64_t capacity_bytes = 0;  // the smallest memory of the stage's devices
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

// What a rank's own device takes for one micro-batch of its stage (mixed clusters: replicas of
// one stage on different kinds differ).
struct RankTimes {
  double forward_us = 0;
  double backward_us = 0;
  double recompute_us = 0;
  double optimizer_us = 0;
};

struct Costs {
  std::vector<StageCosts> stages;  // times: the slowest replica's
  std::vector<RankTimes> ranks;    // indexed by rank; zero for ranks without a stage
};

// Per-stage and per-rank costs, computed once before the replay. Each distinct device kind of a
// stage's replicas is priced once.
Costs stage_costs(const Plan& plan, const model::Graph& graph, const plan::PlanIndex& index,
                  const cost::DeviceCostModels& compute, const cost::MemoryOptions& memory) {
  const auto& cluster = plan.cluster();
  Costs out;
  out.stages.resize(plan.stages_size());
  out.ranks.resize(static_cast<size_t>(index.world_size));
  for (int s = 0; s < plan.stages_size(); ++s) {
    const auto& st = plan.stages(s);
    const auto& ops = index.stage_ops[s];
    StageCosts& c = out.stages[s];
    cost::MemoryOptions stage_options = memory;
    stage_options.recompute = st.recompute();
    const int d = st.device_ranks_size();
    c.shard_optimizer = st.shard_optimizer() && d > 1;
    stage_options.shard_optimizer = c.shard_optimizer;
    // The largest replica slice (replica_samples: they differ by at most one sample) sets the
    // stage's pace and its memory.
    c.samples_per_replica = (st.micro_batch() + d - 1) / d;
    c.static_memory =
        cost::stage_memory(graph, ops, st.micro_batch(), /*in_flight_samples=*/0, d, stage_options);
    c.activation_bytes_per_sample =
        cost::stage_memory(graph, ops, 1, /*in_flight_samples=*/1, 1, stage_options)
            .activation_bytes;
    c.gradient_bytes = cost::stage_param_bytes(graph, ops, plan.training().precision());
    // ZeRO-1: each replica steps only its slice of the weights, gradients and state.
    const cost::MemoryBreakdown step_state =
        cost::optimizer_step_state(c.static_memory, d, c.shard_optimizer);
    const int64_t step_tensors =
        cost::optimizer_step_tensors(cost::stage_param_tensors(graph, ops), d, c.shard_optimizer);
    std::map<std::string, RankTimes> by_kind;  // one pricing per device kind of the replicas
    for (int r : st.device_ranks()) {
      const auto& device = cost::device_of_rank(cluster, r);
      auto [it, added] = by_kind.try_emplace(device.name());
      RankTimes& t = it->second;
      if (added) {
        const cost::CostModel& model = compute.for_kind(device.name());
        for (int op : ops) {
          const cost::OpTime ot = model.op_time(graph.op(op), c.samples_per_replica);
          t.forward_us += ot.forward_us;
          t.backward_us += ot.backward_us;
        }
        if (st.recompute()) t.recompute_us = t.forward_us;
        t.optimizer_us = cost::optimizer_step_us(
            model.optimizer_step_cost(device, memory.optimizer), step_state, step_tensors);
      }
      if (r >= 0 && r < index.world_size) out.ranks[static_cast<size_t>(r)] = t;
      c.forward_us = std::max(c.forward_us, t.forward_us);
      c.backward_us = std::max(c.backward_us, t.backward_us);
      c.recompute_us = std::max(c.recompute_us, t.recompute_us);
      c.optimizer_us = std::max(c.optimizer_us, t.optimizer_us);
      c.capacity_bytes = c.capacity_bytes == 0
                             ? device.memory_capacity_bytes()
                             : std::min(c.capacity_bytes, device.memory_capacity_bytes());
    }
  }
  return out;
}

// One replay of a validated plan: the event loop and the state it advances. Each instruction
// kind has its own step; a step that blocks its rank leaves it to be resumed by another rank.
class Replay {
 public:
  Replay(const Plan& plan, const model::Graph& graph, const plan::PlanIndex& index,
         const SimOptions& options, const cost::CommModel& comm, Costs costs)
      : plan_(plan),
        graph_(graph),
        index_(index),
        options_(options),
        comm_(comm),
        costs_(std::move(costs.stages)),
        rank_times_(std::move(costs.ranks)) {}

  Result<SimResult> run() {
    start_ranks();
    GP_RETURN_IF_ERROR(event_loop());
    if (find_deadlock()) return std::move(result_);
    aggregate();
    return std::move(result_);
  }

 private:
  // Every rank with a program starts runnable at time 0 with its stage's static memory.
  void start_ranks() {
    const int world = index_.world_size;
    ranks_.resize(world);
    result_.ranks.resize(world);
    for (int r = 0; r < world; ++r) {
      ranks_[r].program = index_.program_of_rank[r];
      ranks_[r].finished = ranks_[r].program < 0;
      result_.ranks[r].rank = r;
      result_.ranks[r].stage = index_.stage_of_rank[r];
      if (index_.stage_of_rank[r] >= 0) {
        result_.ranks[r].static_memory = costs_[index_.stage_of_rank[r]].static_memory;
        result_.ranks[r].capacity_bytes =
            cost::device_of_rank(plan_.cluster(), r).memory_capacity_bytes();
        result_.ranks[r].peak_memory_bytes = result_.ranks[r].static_memory.total();
      }
    }
    for (int r = 0; r < world; ++r) {
      if (!ranks_[r].finished) runnable_.emplace(0.0, r);
    }
    egress_free_.assign(world, 0.0);
    ingress_free_.assign(world, 0.0);
    arrived_.assign(plan_.messages_size(), -1);
    waiting_.assign(plan_.messages_size(), -1);
    allreduce_waiting_.resize(plan_.stages_size());
    allreduce_ready_.assign(plan_.stages_size(), 0.0);
  }

  // Always advances the runnable rank with the earliest clock.
  Status event_loop() {
    while (!runnable_.empty()) {
      const int r = runnable_.top().second;
      runnable_.pop();
      RankState& rank = ranks_[r];
      const auto& prog = plan_.programs(rank.program);
      if (rank.pc >= prog.instructions_size()) {
        rank.finished = true;
        result_.ranks[r].finish_us = rank.clock;
        continue;
      }
      ++result_.events_processed;
      const Step step = execute(r, prog.instructions(rank.pc), prog.stage());
      if (step == Step::kUnknownKind) {
        return internal_error("simulator: unhandled instruction kind");
      }
      if (step == Step::kAdvanced) {
        ++rank.pc;
        runnable_.emplace(rank.clock, r);
      }
    }
    return ok_status();
  }

  // What an instruction did to its rank.
  enum class Step { kAdvanced, kBlocked, kUnknownKind };

  // Runs rank r's current instruction (of stage s).
  Step execute(int r, const Instruction& in, int s) {
    switch (in.kind()) {
      case K::INSTRUCTION_KIND_FORWARD:
        forward(r, in, s);
        return Step::kAdvanced;
      case K::INSTRUCTION_KIND_BACKWARD:
        backward(r, in, s);
        return Step::kAdvanced;
      case K::INSTRUCTION_KIND_SEND_ACTIVATION:
      case K::INSTRUCTION_KIND_SEND_GRADIENT:
        send(r, in, s);
        return Step::kAdvanced;
      case K::INSTRUCTION_KIND_RECV_ACTIVATION:
      case K::INSTRUCTION_KIND_RECV_GRADIENT:
        return receive(r, in) ? Step::kAdvanced : Step::kBlocked;
      case K::INSTRUCTION_KIND_ALLREDUCE_GRADS:
        allreduce(r, s);
        return Step::kBlocked;  // every replica is resumed when the last one arrives
      case K::INSTRUCTION_KIND_OPTIMIZER_STEP:
        optimizer_step(r, s);
        return Step::kAdvanced;
      default:
        return Step::kUnknownKind;
    }
  }

  void forward(int r, const Instruction& in, int s) {
    RankState& rank = ranks_[r];
    const StageCosts& c = costs_[s];
    rank.activation_bytes += c.activation_bytes_per_sample * c.samples_per_replica;
    rank.live_samples += c.samples_per_replica;
    rank.max_live_samples = std::max(rank.max_live_samples, rank.live_samples);
    record_memory(r, rank.clock);
    const RankTimes& t = rank_times_[static_cast<size_t>(r)];
    add_event(
        {EventKind::kForward, r, -1, s, in.micro_batch(), rank.clock, rank.clock + t.forward_us});
    rank.clock += t.forward_us;
    result_.ranks[r].busy_us += t.forward_us;
  }

  void backward(int r, const Instruction& in, int s) {
    RankState& rank = ranks_[r];
    const StageCosts& c = costs_[s];
    const RankTimes& t = rank_times_[static_cast<size_t>(r)];
    if (t.recompute_us > 0) {  // drawn as a second forward of the micro-batch
      add_event({EventKind::kForward, r, -1, s, in.micro_batch(), rank.clock,
                 rank.clock + t.recompute_us});
      rank.clock += t.recompute_us;
      result_.ranks[r].busy_us += t.recompute_us;
    }
    add_event(
        {EventKind::kBackward, r, -1, s, in.micro_batch(), rank.clock, rank.clock + t.backward_us});
    rank.clock += t.backward_us;
    result_.ranks[r].busy_us += t.backward_us;
    rank.activation_bytes -= c.activation_bytes_per_sample * c.samples_per_replica;
    rank.live_samples -= c.samples_per_replica;
    record_memory(r, rank.clock);
  }

  // Queues the transfer on the sender's egress and the receiver's ingress; resumes the receiver
  // if it is already waiting.
  void send(int r, const Instruction& in, int s) {
    const RankState& rank = ranks_[r];
    const bool grad = in.kind() == K::INSTRUCTION_KIND_SEND_GRADIENT;
    const auto& msg = plan_.messages(in.message());
    const auto& edge = plan_.edges(msg.edge());
    const int64_t per_sample =
        grad ? plan::gradient_bytes_per_sample(graph_, edge) : edge.bytes_per_sample();
    const int64_t bytes = per_sample * (msg.sample_end() - msg.sample_begin());
    const int peer = msg.dst_rank();
    const double start = std::max({rank.clock, egress_free_[r], ingress_free_[peer]});
    const double end = start + comm_.p2p_time_us(r, peer, bytes);
    egress_free_[r] = end;
    ingress_free_[peer] = end;
    add_event({EventKind::kTransfer, r, peer, s, in.micro_batch(), start, end, grad, bytes});
    if (const int w = waiting_[in.message()]; w >= 0) {
      RankState& receiver = ranks_[w];
      receiver.clock = std::max(receiver.clock, end);
      ++receiver.pc;
      runnable_.emplace(receiver.clock, w);
      waiting_[in.message()] = -1;
    } else {
      arrived_[in.message()] = end;
    }
  }

  // Completes if the message has arrived; otherwise blocks until the matching send.
  bool receive(int r, const Instruction& in) {
    RankState& rank = ranks_[r];
    if (const double at = arrived_[in.message()]; at >= 0) {
      rank.clock = std::max(rank.clock, at);
      arrived_[in.message()] = -1;
      return true;
    }
    waiting_[in.message()] = r;
    return false;  // resumed by the matching send
  }

  // Blocks the replica; the last replica of the stage to arrive starts the all-reduce and
  // resumes them all when it ends.
  void allreduce(int r, int s) {
    const StageCosts& c = costs_[s];
    auto& group = allreduce_waiting_[s];
    group.push_back(r);
    allreduce_ready_[s] = std::max(allreduce_ready_[s], ranks_[r].clock);
    const auto& replicas = plan_.stages(s).device_ranks();
    if (static_cast<int>(group.size()) != replicas.size()) return;
    std::vector<int> members(replicas.begin(), replicas.end());
    const double start = allreduce_ready_[s];
    const double end = start + comm_.allreduce_time_us(members, c.gradient_bytes);
    for (int m : group) {
      add_event({EventKind::kAllReduce, m, -1, s, 0, start, end, true, c.gradient_bytes});
      ranks_[m].clock = end;
      ++ranks_[m].pc;
      runnable_.emplace(end, m);
    }
    group.clear();
  }

  void optimizer_step(int r, int s) {
    RankState& rank = ranks_[r];
    const StageCosts& c = costs_[s];
    const double step_us = rank_times_[static_cast<size_t>(r)].optimizer_us;
    add_event({EventKind::kOptimizer, r, -1, s, 0, rank.clock, rank.clock + step_us});
    rank.clock += step_us;
    result_.ranks[r].busy_us += step_us;
    if (!c.shard_optimizer) return;
    // ZeRO-1's parameter all-gather, priced as an all-reduce of the stage's parameter bytes: the
    // executor runs it as one (each replica zeroes the slices it does not own and the replicas
    // sum), the only collective every data plane offers, so it moves the all-reduce's ring bytes
    // (twice a native all-gather's). No wait for the other replicas: they left the gradient
    // all-reduce together and their steps cost the same.
    const auto& replicas = plan_.stages(s).device_ranks();
    const std::vector<int> members(replicas.begin(), replicas.end());
    const double end = rank.clock + comm_.allreduce_time_us(members, c.gradient_bytes);
    add_event({EventKind::kAllReduce, r, -1, s, 0, rank.clock, end, false, c.gradient_bytes});
    rank.clock = end;
  }

  void record_memory(int r, double t) {
    RankStats& rs = result_.ranks[r];
    const int64_t total = rs.static_memory.total() + ranks_[r].activation_bytes;
    rs.peak_memory_bytes = std::max(rs.peak_memory_bytes, total);
    if (options_.record_events) rs.memory.push_back({t, total});
  }

  void add_event(SimEvent e) {
    if (options_.record_events) result_.events.push_back(e);
  }

  // Some rank never finished: records where each such rank waits.
  bool find_deadlock() {
    for (int r = 0; r < index_.world_size; ++r) {
      if (ranks_[r].finished) continue;
      result_.deadlocked = true;
      const auto& prog = plan_.programs(ranks_[r].program);
      result_.blocked.push_back(
          {r, ranks_[r].pc, plan::describe_instruction(plan_, prog.instructions(ranks_[r].pc))});
    }
    return result_.deadlocked;
  }

  // Iteration time, throughput, bubbles and peak memory, overall and per stage.
  void aggregate() {
    SimResult& result = result_;
    for (const auto& rs : result.ranks) {
      result.iteration_time_us = std::max(result.iteration_time_us, rs.finish_us);
      result.peak_memory_bytes = std::max(result.peak_memory_bytes, rs.peak_memory_bytes);
    }
    const double iter = std::max(result.iteration_time_us, 1e-9);
    result.throughput_samples_per_s = static_cast<double>(plan_.mini_batch()) / (iter * 1e-6);
    result.stages.assign(plan_.stages_size(), StageStats{});
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
    for (int s = 0; s < plan_.stages_size(); ++s) {
      StageStats& st = result.stages[s];
      st.stage = s;
      st.bubble_fraction = 1.0 - st.busy_us / iter;
      st.forward_us = costs_[s].forward_us;
      st.backward_us = costs_[s].backward_us;
      st.recompute_us = costs_[s].recompute_us;
      st.capacity_bytes = costs_[s].capacity_bytes;
      st.max_live_samples = ranks_[plan_.stages(s).device_ranks(0)].max_live_samples;
    }
  }

  const Plan& plan_;
  const model::Graph& graph_;
  const plan::PlanIndex& index_;
  const SimOptions& options_;
  const cost::CommModel& comm_;
  const std::vector<StageCosts> costs_;
  const std::vector<RankTimes> rank_times_;

  std::vector<RankState> ranks_;
  SimResult result_;
  using Entry = std::pair<double, int>;  // (clock, rank)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> runnable_;
  std::vector<double> egress_free_, ingress_free_;
  // Per message (Plan.messages): when its send finished (-1: not yet), and the rank blocked in
  // its receive (-1: none).
  std::vector<double> arrived_;
  std::vector<int> waiting_;
  std::vector<std::vector<int>> allreduce_waiting_;  // per stage: replicas blocked in it
  std::vector<double> allreduce_ready_;              // per stage: when the last one arrived
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

bool SimResult::fits_memory() const {
  for (const auto& rs : ranks) {
    if (rs.stage >= 0 && rs.peak_memory_bytes > rs.capacity_bytes) return false;
  }
  return true;
}

Simulator::Simulator(const cost::CostModel& compute, const cost::CommModel& comm,
                     cost::MemoryOptions memory)
    // Not owned: the caller keeps `compute` alive, as before per-device models existed.
    : compute_(std::shared_ptr<const cost::CostModel>(&compute, [](const cost::CostModel*) {})),
      comm_(comm),
      memory_(memory) {}

Simulator::Simulator(cost::DeviceCostModels compute, const cost::CommModel& comm,
                     cost::MemoryOptions memory)
    : compute_(std::move(compute)), comm_(comm), memory_(memory) {}

Result<SimResult> Simulator::run(const Plan& plan, const model::Graph& graph,
                                 const SimOptions& options) const {
  GP_ASSIGN_OR_RETURN(plan::PlanIndex index, plan::validate_plan_structure(plan, graph));
  GP_RETURN_IF_ERROR(compute_.covers(plan.cluster()));
  Replay replay(plan, graph, index, options, comm_,
                stage_costs(plan, graph, index, compute_, memory_));
  return replay.run();
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
