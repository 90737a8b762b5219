#include "gp/exec/rank_program.h"

#include <algorithm>
#include <sstream>

namespace gp::exec {
namespace {

using graphpipe::v1::Instruction;
using K = graphpipe::v1::InstructionKind;

bool same(const graphpipe::v1::TensorRef& a, const graphpipe::v1::TensorRef& b) {
  return a.op() == b.op() && a.output() == b.output();
}

bool contains(const std::vector<graphpipe::v1::TensorRef>& v, const graphpipe::v1::TensorRef& t) {
  return std::any_of(v.begin(), v.end(), [&](const auto& x) { return same(x, t); });
}

std::string where(int rank, int k) {
  return "plan: rank " + std::to_string(rank) + " instruction " + std::to_string(k);
}

const char* op_name(StepOp op) {
  switch (op) {
    case StepOp::kBeginBackward:
      return "begin-backward";
    case StepOp::kForward:
      return "forward";
    case StepOp::kBackward:
      return "backward";
    case StepOp::kSend:
      return "send";
    case StepOp::kRecv:
      return "recv";
    case StepOp::kTieReduce:
      return "tie-reduce";
    case StepOp::kAllReduce:
      return "allreduce";
    case StepOp::kOptimizer:
      return "optimizer";
  }
  return "?";
}

// Lowering in named steps: the rank's place in the plan, its stage's layout, its slots, then one
// instruction after another (a transfer with its message's pieces resolved against the layout).
class Lowering {
 public:
  Lowering(const graphpipe::v1::Plan& plan, const model::Graph& graph, const plan::PlanIndex& index,
           int rank)
      : plan_(plan), graph_(graph), index_(index), rank_(rank) {}

  Result<RankProgram> run() {
    if (rank_ < 0 || rank_ >= index_.world_size || index_.program_of_rank[rank_] < 0) {
      return invalid_argument("--rank = " + std::to_string(rank_) +
                              " has no program in the plan (" + std::to_string(index_.world_size) +
                              " ranks)");
    }
    place_rank();
    if (plan_.training().clip_grad_norm() > 0) find_norm_world();
    GP_ASSIGN_OR_RETURN(p_.layout, layout_plan_stage(plan_, graph_, index_, p_.stage));
    count_slots();
    find_ties();
    GP_RETURN_IF_ERROR(lower_steps());
    return std::move(p_);
  }

 private:
  const graphpipe::v1::RankProgram& program() const {
    return plan_.programs(index_.program_of_rank[rank_]);
  }
  const graphpipe::v1::Stage& stage() const { return plan_.stages(p_.stage); }
  int num_micro_batches() const {
    return static_cast<int>(plan_.mini_batch() / stage().micro_batch());
  }

  // The rank's stage, its replica's share of a micro-batch and its replica group.
  void place_rank() {
    p_.rank = rank_;
    p_.stage = index_.stage_of_rank[rank_];
    replica_ = index_.replica_of_rank[rank_];
    const plan::SampleRange first_slice = plan::replica_samples(stage(), replica_, 0);
    p_.per_replica = first_slice.end - first_slice.begin;
    p_.mini_batch = plan_.mini_batch();
    p_.group.assign(stage().device_ranks().begin(), stage().device_ranks().end());
    std::sort(p_.group.begin(), p_.group.end());
    p_.recompute = stage().recompute();
    if (stage().shard_optimizer() && p_.group.size() > 1) {
      p_.shard_count = static_cast<int>(p_.group.size());
      p_.shard_index =
          static_cast<int>(std::find(p_.group.begin(), p_.group.end(), rank_) - p_.group.begin());
    }
  }

  // The norm's all-reduce is over the ranks whose programs step the optimizer (a stage without
  // parameters has no step), as each of them reaches it just before its own step.
  void find_norm_world() {
    p_.world = plan::ranks_stepping_optimizer(plan_);
    p_.counts_norm = rank_ == p_.group.front();
  }

  // The ties with a copy in this stage: their group is every rank of every stage with a copy.
  void find_ties() {
    for (const auto& members : graph_.ties()) {
      TieProgram t;
      std::vector<int> stages;
      for (const auto& m : members) {
        const int s = index_.stage_of_op[static_cast<size_t>(m.op)];
        if (s == p_.stage) {
          t.members.push_back(m);
          if (&m != &members[0]) ++t.duplicates;
        }
        if (std::find(stages.begin(), stages.end(), s) == stages.end()) stages.push_back(s);
      }
      if (t.members.empty()) continue;
      for (int s : stages) {
        const auto& ranks = plan_.stages(s).device_ranks();
        t.group.insert(t.group.end(), ranks.begin(), ranks.end());
      }
      std::sort(t.group.begin(), t.group.end());
      t.leader = rank_ == p_.group.front();
      const auto& spec = graph_.op(members[0].op).proto->params(members[0].param);
      t.elements = 1;
      for (int64_t d : spec.shape()) t.elements *= d;
      p_.ties.push_back(std::move(t));
    }
  }

  // Slots: a micro-batch holds one from its first instruction to its last.
  void count_slots() {
    const int num_mb = num_micro_batches();
    first_.assign(num_mb, -1);
    last_.assign(num_mb, -1);
    for (int k = 0; k < program().instructions_size(); ++k) {
      const auto& in = program().instructions(k);
      if (!per_micro_batch(in)) continue;
      if (first_[in.micro_batch()] < 0) first_[in.micro_batch()] = k;
      last_[in.micro_batch()] = k;
    }
    int slots = 0, live = 0;
    for (int k = 0; k < program().instructions_size(); ++k) {
      for (int m = 0; m < num_mb; ++m) live += first_[m] == k ? 1 : 0;
      slots = std::max(slots, live);
      for (int m = 0; m < num_mb; ++m) live -= last_[m] == k ? 1 : 0;
    }
    p_.slots = std::max(slots, 1);
  }

  static bool per_micro_batch(const Instruction& in) {
    return in.kind() != K::INSTRUCTION_KIND_ALLREDUCE_GRADS &&
           in.kind() != K::INSTRUCTION_KIND_OPTIMIZER_STEP;
  }

  Status lower_steps() {
    const int num_mb = num_micro_batches();
    slot_of_.assign(num_mb, -1);
    backward_begun_.assign(num_mb, 0);
    for (int s = p_.slots - 1; s >= 0; --s) free_slots_.push_back(s);
    for (int k = 0; k < program().instructions_size(); ++k) {
      GP_RETURN_IF_ERROR(lower_instruction(k));
    }
    return ok_status();
  }

  // One instruction: its step, after a begin-backward for the micro-batch's first backward or
  // received gradient; the micro-batch takes a free slot at its first and frees it at its last.
  Status lower_instruction(int k) {
    const Instruction& in = program().instructions(k);
    const int m = in.micro_batch();
    ProgramStep step;
    step.instruction = k;
    step.micro_batch = m;
    const bool per_mb = per_micro_batch(in);
    // The tied copies' sum precedes the replicas' all-reduce and the optimizer step.
    if (!per_mb && !p_.ties.empty() && !ties_reduced_) {
      ties_reduced_ = true;
      ProgramStep tie = step;
      tie.op = StepOp::kTieReduce;
      p_.steps.push_back(tie);
    }
    if (per_mb) {
      if (first_[m] == k) {
        slot_of_[m] = free_slots_.back();
        free_slots_.pop_back();
      }
      step.slot = slot_of_[m];
    }
    const bool needs_begin =
        in.kind() == K::INSTRUCTION_KIND_BACKWARD || in.kind() == K::INSTRUCTION_KIND_RECV_GRADIENT;
    if (needs_begin && !backward_begun_[m]) {
      backward_begun_[m] = 1;
      ProgramStep begin = step;
      begin.op = StepOp::kBeginBackward;
      p_.steps.push_back(begin);
    }
    const int64_t replica_begin = plan::replica_samples(stage(), replica_, m).begin;
    switch (in.kind()) {
      case K::INSTRUCTION_KIND_FORWARD:
        step.op = StepOp::kForward;
        step.first_sample = replica_begin;
        break;
      case K::INSTRUCTION_KIND_BACKWARD:
        step.op = StepOp::kBackward;
        break;
      case K::INSTRUCTION_KIND_ALLREDUCE_GRADS:
        step.op = StepOp::kAllReduce;
        break;
      case K::INSTRUCTION_KIND_OPTIMIZER_STEP:
        step.op = StepOp::kOptimizer;
        break;
      default:
        GP_RETURN_IF_ERROR(lower_transfer(in, k, replica_begin, step));
    }
    p_.steps.push_back(std::move(step));
    if (per_mb && last_[m] == k) free_slots_.push_back(slot_of_[m]);
    return ok_status();
  }

  // A send or receive: its peer, tag, samples, pieces and staging region.
  Status lower_transfer(const Instruction& in, int k, int64_t replica_begin, ProgramStep& step) {
    const bool send = plan::is_send(in.kind());
    step.gradient = plan::is_gradient_transfer(in.kind());
    step.op = send ? StepOp::kSend : StepOp::kRecv;
    // validate_plan checked the message against this instruction (direction, rank, samples
    // inside this replica's slice); its index is the wire tag.
    const auto& msg = plan_.messages(in.message());
    step.peer = send ? msg.dst_rank() : msg.src_rank();
    step.tag = static_cast<uint64_t>(in.message());
    step.sample_offset = msg.sample_begin() - replica_begin;
    step.samples = msg.sample_end() - msg.sample_begin();
    if (step.sample_offset < 0 || step.sample_offset + step.samples > p_.per_replica) {
      return invalid_argument(where(rank_, k) + ": samples outside its micro-batch slice");
    }
    for (const auto& t : plan_.edges(msg.edge()).tensors()) {
      if (step.gradient && !plan::carries_gradient(graph_, t)) continue;
      GP_RETURN_IF_ERROR(add_piece(t, k, step));
    }
    p_.max_message_bytes = std::max(p_.max_message_bytes, static_cast<size_t>(step.bytes));
    step.staging_offset = p_.device_staging_bytes;
    p_.device_staging_bytes += (static_cast<size_t>(step.bytes) + 255) / 256 * 256;
    return ok_status();
  }

  // One tensor of a message: its size and its index in the stage's layout.
  Status add_piece(const graphpipe::v1::TensorRef& t, int k, ProgramStep& step) {
    MessagePiece piece;
    piece.tensor = t;
    piece.exported = contains(p_.layout.exports, t);
    const int producer = graph_.index_of(t.op());
    if (producer < 0 || t.output() < 0 || t.output() >= graph_.op(producer).proto->outputs_size()) {
      return invalid_argument(where(rank_, k) + ": no tensor '" + t.op() +
                              "':" + std::to_string(t.output()) + " in the model");
    }
    piece.index = piece.exported ? p_.layout.export_index(t) : p_.layout.external_index(t);
    if (piece.index < 0) {
      return invalid_argument("plan: rank " + std::to_string(rank_) + " holds no tensor '" +
                              t.op() + "' for instruction " + std::to_string(k));
    }
    // As stored (ids as int64); a gradient's tensor is never an integer one.
    piece.bytes_per_sample =
        model::stored_size_bytes(graph_.op(producer).proto->outputs(t.output()));
    step.bytes += piece.bytes_per_sample * step.samples;
    p_.max_piece_bytes =
        std::max(p_.max_piece_bytes, static_cast<size_t>(piece.bytes_per_sample * step.samples));
    step.pieces.push_back(std::move(piece));
    return ok_status();
  }

  const graphpipe::v1::Plan& plan_;
  const model::Graph& graph_;
  const plan::PlanIndex& index_;
  const int rank_;
  int replica_ = 0;
  RankProgram p_;
  std::vector<int> first_, last_;  // per micro-batch: its first and last instruction
  std::vector<int> slot_of_;       // per micro-batch
  std::vector<char> backward_begun_;
  std::vector<int> free_slots_;
  bool ties_reduced_ = false;
};

}  // namespace

Result<RankProgram> lower_rank_program(const graphpipe::v1::Plan& plan, const model::Graph& graph,
                                       const plan::PlanIndex& index, int rank) {
  return Lowering(plan, graph, index, rank).run();
}

std::string describe(const RankProgram& p) {
  std::ostringstream out;
  out << "rank " << p.rank << " stage " << p.stage << " per_replica " << p.per_replica
      << " mini_batch " << p.mini_batch << " slots " << p.slots << " group";
  for (int r : p.group) out << ' ' << r;
  out << " staging " << p.max_message_bytes << '/' << p.device_staging_bytes
      << (p.recompute ? " recompute" : "");
  if (p.shard_count > 1) out << " shard " << p.shard_index << '/' << p.shard_count;
  out << '\n';
  for (const auto& t : p.layout.exports) out << "export " << t.op() << ':' << t.output() << '\n';
  for (const auto& t : p.layout.relays) out << "relay " << t.op() << ':' << t.output() << '\n';
  for (const TieProgram& t : p.ties) {
    out << "tie " << t.elements << (t.leader ? " leader" : "") << " group";
    for (int r : t.group) out << ' ' << r;
    out << " members";
    for (const auto& m : t.members) out << ' ' << m.op << '.' << m.param;
    out << '\n';
  }
  for (const ProgramStep& s : p.steps) {
    out << s.instruction << ' ' << op_name(s.op);
    if (s.op == StepOp::kAllReduce || s.op == StepOp::kOptimizer || s.op == StepOp::kTieReduce) {
      out << '\n';
      continue;
    }
    out << " mb=" << s.micro_batch << " slot=" << s.slot;
    if (s.op == StepOp::kForward) out << " first_sample=" << s.first_sample;
    if (s.op == StepOp::kSend || s.op == StepOp::kRecv) {
      out << (s.gradient ? " gradient" : " activation") << " peer=" << s.peer << " tag=0x"
          << std::hex << s.tag << std::dec << " samples=" << s.sample_offset << '+' << s.samples
          << " bytes=" << s.bytes << " at=" << s.staging_offset;
      for (const auto& piece : s.pieces) {
        out << ' ' << piece.tensor.op() << ':' << piece.tensor.output()
            << (piece.exported ? "(out," : "(in,") << piece.bytes_per_sample << "B)";
      }
    }
    out << '\n';
  }
  return out.str();
}

}  // namespace gp::exec
