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
    case StepOp::kAllReduce:
      return "allreduce";
    case StepOp::kOptimizer:
      return "optimizer";
  }
  return "?";
}

}  // namespace

Result<RankProgram> lower_rank_program(const graphpipe::v1::Plan& plan, const graph::Graph& graph,
                                       const graph::PlanIndex& index, int rank) {
  if (rank < 0 || rank >= index.world_size || index.program_of_rank[rank] < 0) {
    return invalid_argument("--rank = " + std::to_string(rank) + " has no program in the plan (" +
                            std::to_string(index.world_size) + " ranks)");
  }
  RankProgram p;
  p.rank = rank;
  p.stage = index.stage_of_rank[rank];
  const auto& st = plan.stages(p.stage);
  const auto& program = plan.programs(index.program_of_rank[rank]);
  const int64_t b = st.micro_batch();
  const int j = index.replica_of_rank[rank];
  const graph::SampleRange first_slice = graph::replica_samples(st, j, 0);
  p.per_replica = first_slice.end - first_slice.begin;
  p.mini_batch = plan.mini_batch();
  p.group.assign(st.device_ranks().begin(), st.device_ranks().end());
  std::sort(p.group.begin(), p.group.end());
  if (plan.training().clip_grad_norm() > 0) {
    // The norm's all-reduce is over the ranks whose programs step the optimizer (a stage without
    // parameters has no step), as each of them reaches it just before its own step.
    for (int other = 0; other < index.world_size; ++other) {
      const int q = index.program_of_rank[static_cast<size_t>(other)];
      if (q < 0) continue;
      const auto& steps = plan.programs(q).instructions();
      if (std::any_of(steps.begin(), steps.end(), [](const Instruction& in) {
            return in.kind() == K::INSTRUCTION_KIND_OPTIMIZER_STEP;
          })) {
        p.world.push_back(other);
      }
    }
    p.counts_norm = rank == p.group.front();
  }

  for (const auto& e : plan.edges()) {
    if (e.src_stage() != p.stage) continue;
    for (const auto& t : e.tensors()) {
      const bool produced_here = index.stage_of_op[graph.index_of(t.op())] == p.stage;
      auto& list = produced_here ? p.exports : p.relays;
      if (!contains(list, t)) list.push_back(t);
    }
  }
  // Slots: a micro-batch holds one from its first instruction to its last.
  const int num_mb = static_cast<int>(plan.mini_batch() / b);
  std::vector<int> first(num_mb, -1), last(num_mb, -1);
  for (int k = 0; k < program.instructions_size(); ++k) {
    const auto& in = program.instructions(k);
    if (in.kind() == K::INSTRUCTION_KIND_ALLREDUCE_GRADS ||
        in.kind() == K::INSTRUCTION_KIND_OPTIMIZER_STEP) {
      continue;
    }
    if (first[in.micro_batch()] < 0) first[in.micro_batch()] = k;
    last[in.micro_batch()] = k;
  }
  int slots = 0, live = 0;
  for (int k = 0; k < program.instructions_size(); ++k) {
    for (int m = 0; m < num_mb; ++m) live += first[m] == k ? 1 : 0;
    slots = std::max(slots, live);
    for (int m = 0; m < num_mb; ++m) live -= last[m] == k ? 1 : 0;
  }
  p.slots = std::max(slots, 1);

  std::vector<int> slot_of(num_mb, -1);
  std::vector<char> backward_begun(num_mb, 0);
  std::vector<int> free_slots;
  for (int s = p.slots - 1; s >= 0; --s) free_slots.push_back(s);
  for (int k = 0; k < program.instructions_size(); ++k) {
    const Instruction& in = program.instructions(k);
    const int m = in.micro_batch();
    ProgramStep step;
    step.instruction = k;
    step.micro_batch = m;
    const bool per_mb = in.kind() != K::INSTRUCTION_KIND_ALLREDUCE_GRADS &&
                        in.kind() != K::INSTRUCTION_KIND_OPTIMIZER_STEP;
    if (per_mb) {
      if (first[m] == k) {
        slot_of[m] = free_slots.back();
        free_slots.pop_back();
      }
      step.slot = slot_of[m];
    }
    const int64_t replica_begin = graph::replica_samples(st, j, m).begin;
    const bool needs_begin =
        in.kind() == K::INSTRUCTION_KIND_BACKWARD || in.kind() == K::INSTRUCTION_KIND_RECV_GRADIENT;
    if (needs_begin && !backward_begun[m]) {
      backward_begun[m] = 1;
      ProgramStep begin = step;
      begin.op = StepOp::kBeginBackward;
      p.steps.push_back(begin);
    }
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
      default: {
        const bool send = graph::is_send(in.kind());
        step.gradient = graph::is_gradient_transfer(in.kind());
        step.op = send ? StepOp::kSend : StepOp::kRecv;
        // validate_plan checked the message against this instruction (direction, rank, samples
        // inside this replica's slice); its index is the wire tag.
        const auto& msg = plan.messages(in.message());
        step.peer = send ? msg.dst_rank() : msg.src_rank();
        step.tag = static_cast<uint64_t>(in.message());
        step.sample_offset = msg.sample_begin() - replica_begin;
        step.samples = msg.sample_end() - msg.sample_begin();
        if (step.sample_offset < 0 || step.sample_offset + step.samples > p.per_replica) {
          return invalid_argument(where(rank, k) + ": samples outside its micro-batch slice");
        }
        for (const auto& t : plan.edges(msg.edge()).tensors()) {
          if (step.gradient && !graph::carries_gradient(graph, t)) continue;
          MessagePiece piece;
          piece.tensor = t;
          piece.exported = contains(p.exports, t);
          const int producer = graph.index_of(t.op());
          if (producer < 0 || t.output() < 0 ||
              t.output() >= graph.op(producer).proto->outputs_size()) {
            return invalid_argument(where(rank, k) + ": no tensor '" + t.op() +
                                    "':" + std::to_string(t.output()) + " in the model");
          }
          // As stored (ids as int64); a gradient's tensor is never an integer one.
          piece.bytes_per_sample =
              graph::stored_size_bytes(graph.op(producer).proto->outputs(t.output()));
          step.bytes += piece.bytes_per_sample * step.samples;
          p.max_piece_bytes = std::max(p.max_piece_bytes,
                                       static_cast<size_t>(piece.bytes_per_sample * step.samples));
          step.pieces.push_back(std::move(piece));
        }
        p.max_message_bytes = std::max(p.max_message_bytes, static_cast<size_t>(step.bytes));
        step.staging_offset = p.device_staging_bytes;
        p.device_staging_bytes += (static_cast<size_t>(step.bytes) + 255) / 256 * 256;
      }
    }
    p.steps.push_back(std::move(step));
    if (per_mb && last[m] == k) free_slots.push_back(slot_of[m]);
  }
  return p;
}

std::string describe(const RankProgram& p) {
  std::ostringstream out;
  out << "rank " << p.rank << " stage " << p.stage << " per_replica " << p.per_replica
      << " mini_batch " << p.mini_batch << " slots " << p.slots << " group";
  for (int r : p.group) out << ' ' << r;
  out << " staging " << p.max_message_bytes << '/' << p.device_staging_bytes << '\n';
  for (const auto& t : p.exports) out << "export " << t.op() << ':' << t.output() << '\n';
  for (const auto& t : p.relays) out << "relay " << t.op() << ':' << t.output() << '\n';
  for (const ProgramStep& s : p.steps) {
    out << s.instruction << ' ' << op_name(s.op);
    if (s.op == StepOp::kAllReduce || s.op == StepOp::kOptimizer) {
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
