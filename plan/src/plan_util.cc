#include "gp/plan/plan_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <queue>
#include <set>
#include <tuple>

#include "gp/model/model_io.h"

namespace gp::plan {

using model::Graph;
namespace {

using graphpipe::v1::Instruction;
using graphpipe::v1::Plan;

std::string idx(const char* field, int i) {
  return std::string(field) + "[" + std::to_string(i) + "]";
}

// A message goes between replicas of its edge's two stages, the right way round, and carries
// samples of the mini-batch; gradients only where the edge carries some.
Status check_message(const Plan& plan, const Graph& graph, const PlanIndex& index, int m) {
  const auto& msg = plan.messages(m);
  const std::string where = idx("messages", m);
  if (msg.edge() < 0 || msg.edge() >= plan.edges_size()) {
    return invalid_argument(where + ".edge = " + std::to_string(msg.edge()) +
                            " is not an index of plan.edges (" + std::to_string(plan.edges_size()) +
                            " edges)");
  }
  const auto& edge = plan.edges(msg.edge());
  if (msg.gradient() && gradient_bytes_per_sample(graph, edge) == 0) {
    return invalid_argument(where + ".gradient = true, but edge " + std::to_string(msg.edge()) +
                            " carries no tensor with a gradient");
  }
  const int from = msg.gradient() ? edge.dst_stage() : edge.src_stage();
  const int to = msg.gradient() ? edge.src_stage() : edge.dst_stage();
  for (const auto& [field, rank, stage] :
       {std::tuple{"src_rank", msg.src_rank(), from}, std::tuple{"dst_rank", msg.dst_rank(), to}}) {
    if (rank < 0 || rank >= index.world_size || index.stage_of_rank[rank] != stage) {
      return invalid_argument(where + "." + field + " = " + std::to_string(rank) +
                              " is not a replica of stage " + std::to_string(stage) + " (edge " +
                              std::to_string(msg.edge()) + (msg.gradient() ? ", gradient)" : ")"));
    }
  }
  if (msg.sample_begin() < 0 || msg.sample_end() <= msg.sample_begin() ||
      msg.sample_end() > plan.mini_batch()) {
    return invalid_argument(where + ": samples [" + std::to_string(msg.sample_begin()) + ", " +
                            std::to_string(msg.sample_end()) +
                            ") are empty or outside the mini-batch");
  }
  return ok_status();
}

Status check_instruction(const Plan& plan, const PlanIndex& index, int p, int k) {
  const auto& prog = plan.programs(p);
  const Instruction& in = prog.instructions(k);
  const std::string where = idx("programs", p) + "." + idx("instructions", k);
  const auto& stage = plan.stages(prog.stage());
  if (in.stage() != prog.stage()) {
    return invalid_argument(where + ".stage = " + std::to_string(in.stage()) +
                            ", the program runs stage " + std::to_string(prog.stage()));
  }
  const int64_t num_mb = plan.mini_batch() / stage.micro_batch();
  if (in.micro_batch() < 0 || in.micro_batch() >= num_mb) {
    return invalid_argument(where + ".micro_batch = " + std::to_string(in.micro_batch()) +
                            " outside [0, " + std::to_string(num_mb) + ")");
  }
  using K = graphpipe::v1::InstructionKind;
  const K kind = in.kind();
  if (kind == K::INSTRUCTION_KIND_UNSPECIFIED || !graphpipe::v1::InstructionKind_IsValid(kind)) {
    return invalid_argument(where + ".kind: unspecified or unknown");
  }
  if (!is_send(kind) && !is_recv(kind)) return ok_status();
  if (in.message() < 0 || in.message() >= plan.messages_size()) {
    return invalid_argument(where + ".message = " + std::to_string(in.message()) +
                            " is not an index of plan.messages (" +
                            std::to_string(plan.messages_size()) + " messages)");
  }
  const auto& msg = plan.messages(in.message());
  const bool send = is_send(kind);
  if (msg.gradient() != is_gradient_transfer(kind)) {
    return invalid_argument(where + ".message = " + std::to_string(in.message()) + ": " +
                            describe_message(plan, in.message()) + " carries " +
                            (msg.gradient() ? "gradients" : "activations") + ", but the " +
                            "instruction is a " + graphpipe::v1::InstructionKind_Name(kind));
  }
  if ((send ? msg.src_rank() : msg.dst_rank()) != prog.rank()) {
    return invalid_argument(where + ".message = " + std::to_string(in.message()) + ": " +
                            describe_message(plan, in.message()) + " is not " +
                            (send ? "sent" : "received") + " by this instruction's rank " +
                            std::to_string(prog.rank()));
  }
  const SampleRange slice =
      replica_samples(stage, index.replica_of_rank[prog.rank()], in.micro_batch());
  if (!slice.contains(msg.sample_begin(), msg.sample_end())) {
    return invalid_argument(where + ".message = " + std::to_string(in.message()) + ": samples [" +
                            std::to_string(msg.sample_begin()) + ", " +
                            std::to_string(msg.sample_end()) + ") are outside rank " +
                            std::to_string(prog.rank()) + "'s samples [" +
                            std::to_string(slice.begin) + ", " + std::to_string(slice.end) +
                            ") of micro-batch " + std::to_string(in.micro_batch()));
  }
  return ok_status();
}

// The two halves of check_plan_hashes: validate_plan_structure checks the model's alone (the
// simulator prices plans whose links a caller varies in memory), validate_plan both.
Status model_hash_matches(const Plan& plan) {
  const std::string hash = model::model_hash(plan.model());
  if (plan.model_hash() == hash) return ok_status();
  return invalid_argument("plan.model_hash = '" + plan.model_hash() +
                          "' does not match the embedded model (" + hash + ")");
}

Status cluster_hash_matches(const Plan& plan) {
  const std::string hash = model::message_hash(plan.cluster());
  if (plan.cluster_hash() == hash) return ok_status();
  return invalid_argument("plan.cluster_hash = '" + plan.cluster_hash() +
                          "' does not match the embedded cluster (" + hash +
                          "): the cluster was changed after planning; plan again for it");
}

// Structural validation, one check per aspect of the plan, in the order the checks run: the first
// failing check's error is the one reported. A check may fill the part of the index that later
// checks read (the stages check fills the op and rank tables, the programs check
// program_of_rank).
class PlanValidator {
 public:
  PlanValidator(const Plan& plan, const Graph& graph) : plan_(plan), graph_(graph) {}

  Result<PlanIndex> run() && {
    using Check = Status (PlanValidator::*)();
    static constexpr Check kChecks[] = {
        &PlanValidator::check_format_version, &PlanValidator::check_model_hash,
        &PlanValidator::check_mini_batch,     &PlanValidator::check_training,
        &PlanValidator::check_has_stages,     &PlanValidator::check_cluster_shape,
        &PlanValidator::check_stages,         &PlanValidator::check_op_coverage,
        &PlanValidator::check_edges,          &PlanValidator::check_messages,
        &PlanValidator::check_programs,       &PlanValidator::check_every_rank_has_program,
    };
    for (const Check check : kChecks) GP_RETURN_IF_ERROR((this->*check)());
    return std::move(index_);
  }

 private:
  Status check_format_version() {
    if (plan_.format_version() == kPlanFormatVersion) return ok_status();
    const std::string why =
        plan_.format_version() == 1
            ? ": a plan from an older graphpipe-plan, whose SEND and RECV instructions do not "
              "name a shared message; make the plan again with this graphpipe-plan"
            : ", this build reads format " + std::to_string(kPlanFormatVersion);
    return invalid_argument("plan.format_version = " + std::to_string(plan_.format_version()) +
                            why);
  }

  Status check_model_hash() { return model_hash_matches(plan_); }

  Status check_mini_batch() {
    if (plan_.mini_batch() > 0 && plan_.mini_batch() <= kMaxMiniBatch) return ok_status();
    return invalid_argument("plan.mini_batch = " + std::to_string(plan_.mini_batch()) +
                            ", must be in [1, " + std::to_string(kMaxMiniBatch) + "]");
  }

  Status check_training() {
    return validate_training(plan_.training(), /*allow_unset_learning_rate=*/true)
        .with_context("plan");
  }

  Status check_has_stages() {
    if (plan_.stages_size() == 0) return invalid_argument("plan.stages: empty");
    return ok_status();
  }

  // Ranks are dense: rank k is the cluster's k-th usable (not excluded) device.
  // The cluster's shape, which ranks are checked against (cost::validate_cluster checks the
  // rest for the tools that price a plan). In 64 bits: this sizes a vector.
  Status check_cluster_shape() {
    const auto& cl = plan_.cluster();
    if (cl.num_nodes() <= 0 || cl.devices_per_node() <= 0) {
      return invalid_argument("plan.cluster: num_nodes = " + std::to_string(cl.num_nodes()) +
                              ", devices_per_node = " + std::to_string(cl.devices_per_node()) +
                              ": both must be > 0");
    }
    const int64_t listed = static_cast<int64_t>(cl.num_nodes()) * cl.devices_per_node();
    if (listed > (int64_t{1} << 20)) {
      return invalid_argument("plan.cluster: num_nodes * devices_per_node = " +
                              std::to_string(listed) + " devices, more than the 1048576 supported");
    }
    cluster_devices_ = static_cast<int>(std::max<int64_t>(0, listed - cl.excluded_ranks_size()));
    return ok_status();
  }

  // Each stage in turn (its id, ops, devices, micro-batch), then the rank tables.
  Status check_stages() {
    index_.stage_of_op.assign(graph_.num_ops(), -1);
    index_.stage_ops.resize(plan_.stages_size());
    owner_of_rank_.assign(cluster_devices_, -1);
    for (int s = 0; s < plan_.stages_size(); ++s) {
      const auto& st = plan_.stages(s);
      const std::string where = idx("stages", s);
      if (st.id() != s) {
        return invalid_argument(where + ".id = " + std::to_string(st.id()) +
                                ", must equal its index");
      }
      GP_RETURN_IF_ERROR(check_stage_ops(s, where));
      GP_RETURN_IF_ERROR(check_stage_ranks(s, where));
      GP_RETURN_IF_ERROR(check_stage_micro_batch(s, where));
    }
    index_.stage_of_rank.assign(index_.world_size, -1);
    for (int r = 0; r < index_.world_size; ++r) index_.stage_of_rank[r] = owner_of_rank_[r];
    index_.replica_of_rank.assign(index_.world_size, -1);
    for (const auto& st : plan_.stages()) {
      for (int j = 0; j < st.device_ranks_size(); ++j) {
        index_.replica_of_rank[st.device_ranks(j)] = j;
      }
    }
    return ok_status();
  }

  // Ops of the model, each in one stage only.
  Status check_stage_ops(int s, const std::string& where) {
    const auto& st = plan_.stages(s);
    if (st.op_ids_size() == 0) return invalid_argument(where + ".op_ids: empty");
    for (int k = 0; k < st.op_ids_size(); ++k) {
      const int op = graph_.index_of(st.op_ids(k));
      if (op < 0) {
        return invalid_argument(where + "." + idx("op_ids", k) + " = '" + st.op_ids(k) +
                                "' is not an op of the model");
      }
      if (index_.stage_of_op[op] >= 0) {
        return invalid_argument(where + "." + idx("op_ids", k) + " = '" + st.op_ids(k) +
                                "' is also in stages[" + std::to_string(index_.stage_of_op[op]) +
                                "]");
      }
      index_.stage_of_op[op] = s;
      index_.stage_ops[s].push_back(op);
    }
    return ok_status();
  }

  // Usable devices of the cluster, each in one stage only.
  Status check_stage_ranks(int s, const std::string& where) {
    const auto& st = plan_.stages(s);
    if (st.device_ranks_size() == 0) return invalid_argument(where + ".device_ranks: empty");
    for (int k = 0; k < st.device_ranks_size(); ++k) {
      const int r = st.device_ranks(k);
      const std::string field = where + "." + idx("device_ranks", k) + " = " + std::to_string(r);
      if (r < 0 || r >= cluster_devices_) {
        return invalid_argument(field + " is outside the cluster's " +
                                std::to_string(cluster_devices_) + " usable devices");
      }
      if (owner_of_rank_[r] >= 0) {
        return invalid_argument(field + " is also used by stages[" +
                                std::to_string(owner_of_rank_[r]) + "]");
      }
      owner_of_rank_[r] = s;
      index_.world_size = std::max(index_.world_size, r + 1);
    }
    return ok_status();
  }

  Status check_stage_micro_batch(int s, const std::string& where) {
    const auto& st = plan_.stages(s);
    if (st.micro_batch() <= 0 || plan_.mini_batch() % st.micro_batch() != 0) {
      return invalid_argument(where + ".micro_batch = " + std::to_string(st.micro_batch()) +
                              " must be positive and divide the mini-batch " +
                              std::to_string(plan_.mini_batch()));
    }
    if (st.micro_batch() < st.device_ranks_size()) {
      return invalid_argument(where + ".micro_batch = " + std::to_string(st.micro_batch()) +
                              " is smaller than its " + std::to_string(st.device_ranks_size()) +
                              " data-parallel devices (each needs a sample)");
    }
    return ok_status();
  }

  Status check_op_coverage() {
    for (int op = 0; op < graph_.num_ops(); ++op) {
      if (index_.stage_of_op[op] < 0) {
        return invalid_argument("plan.stages: op '" + graph_.op(op).id() + "' is in no stage");
      }
    }
    return ok_status();
  }

  Status check_edges() {
    for (int e = 0; e < plan_.edges_size(); ++e) GP_RETURN_IF_ERROR(check_edge(e));
    return ok_status();
  }

  // Two distinct stages, tensors of the model, and the bytes per sample they hold.
  Status check_edge(int e) {
    const auto& edge = plan_.edges(e);
    const std::string where = idx("edges", e);
    if (edge.src_stage() < 0 || edge.src_stage() >= plan_.stages_size() || edge.dst_stage() < 0 ||
        edge.dst_stage() >= plan_.stages_size() || edge.src_stage() == edge.dst_stage()) {
      return invalid_argument(where + ": stages " + std::to_string(edge.src_stage()) + " -> " +
                              std::to_string(edge.dst_stage()) + " are not two distinct stages");
    }
    // A tensor is produced by the source stage, or relayed through it (chain pipelines).
    for (int t = 0; t < edge.tensors_size(); ++t) {
      const auto& ref = edge.tensors(t);
      const int op = graph_.index_of(ref.op());
      if (op < 0 || ref.output() < 0 || ref.output() >= graph_.op(op).proto->outputs_size()) {
        return invalid_argument(where + "." + idx("tensors", t) + " = '" + ref.op() + "':" +
                                std::to_string(ref.output()) + " is not a tensor of the model");
      }
    }
    // The simulator prices the edge's transfers by this figure: it must be its tensors' size.
    int64_t bytes = 0;
    for (const auto& ref : edge.tensors()) {
      bytes += model::size_bytes(graph_.op(graph_.index_of(ref.op())).proto->outputs(ref.output()));
    }
    if (edge.bytes_per_sample() != bytes) {
      return invalid_argument(
          where + ".bytes_per_sample = " + std::to_string(edge.bytes_per_sample()) +
          ", but its tensors hold " + std::to_string(bytes) + " bytes per sample");
    }
    return ok_status();
  }

  Status check_messages() {
    for (int m = 0; m < plan_.messages_size(); ++m) {
      GP_RETURN_IF_ERROR(check_message(plan_, graph_, index_, m));
    }
    return ok_status();
  }

  // Each program in turn: its rank and stage, then its instructions.
  Status check_programs() {
    index_.program_of_rank.assign(index_.world_size, -1);
    for (int p = 0; p < plan_.programs_size(); ++p) {
      GP_RETURN_IF_ERROR(check_program_rank(p));
      for (int k = 0; k < plan_.programs(p).instructions_size(); ++k) {
        GP_RETURN_IF_ERROR(check_instruction(plan_, index_, p, k));
      }
    }
    return ok_status();
  }

  // A device of a stage, the only program of that rank, running the rank's stage.
  Status check_program_rank(int p) {
    const auto& prog = plan_.programs(p);
    const std::string where = idx("programs", p);
    if (prog.rank() < 0 || prog.rank() >= index_.world_size ||
        index_.stage_of_rank[prog.rank()] < 0) {
      return invalid_argument(where + ".rank = " + std::to_string(prog.rank()) +
                              " is not a device of any stage");
    }
    if (index_.program_of_rank[prog.rank()] >= 0) {
      return invalid_argument(where + ".rank = " + std::to_string(prog.rank()) +
                              " has two programs");
    }
    if (prog.stage() != index_.stage_of_rank[prog.rank()]) {
      return invalid_argument(where + ".stage = " + std::to_string(prog.stage()) + ", but rank " +
                              std::to_string(prog.rank()) + " belongs to stage " +
                              std::to_string(index_.stage_of_rank[prog.rank()]));
    }
    index_.program_of_rank[prog.rank()] = p;
    return ok_status();
  }

  Status check_every_rank_has_program() {
    for (int r = 0; r < index_.world_size; ++r) {
      if (index_.stage_of_rank[r] >= 0 && index_.program_of_rank[r] < 0) {
        return invalid_argument("plan.programs: rank " + std::to_string(r) + " (stage " +
                                std::to_string(index_.stage_of_rank[r]) + ") has no program");
      }
    }
    return ok_status();
  }

  const Plan& plan_;
  const Graph& graph_;
  PlanIndex index_;
  int cluster_devices_ = 0;         // usable devices: the ranks a stage may use
  std::vector<int> owner_of_rank_;  // per usable device: the stage using it, -1 if none
};

}  // namespace

Status validate_training(const graphpipe::v1::TrainingConfig& t, bool allow_unset_learning_rate) {
  using graphpipe::v1::OptimizerKind;
  const auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  if (!graphpipe::v1::OptimizerKind_IsValid(t.optimizer())) {
    return invalid_argument("training.optimizer = " + std::to_string(t.optimizer()) +
                            ": unknown kind (expected SGD, MOMENTUM or ADAM)");
  }
  if (!graphpipe::v1::Precision_IsValid(t.precision())) {
    return invalid_argument("training.precision = " + std::to_string(t.precision()) +
                            ": unknown precision");
  }
  const bool unset = allow_unset_learning_rate && t.learning_rate() == 0;
  if (!unset && !(std::isfinite(t.learning_rate()) && t.learning_rate() > 0)) {
    return invalid_argument("training.learning_rate = " + number(t.learning_rate()) +
                            ", must be finite and > 0");
  }
  if (!(std::isfinite(t.weight_decay()) && t.weight_decay() >= 0)) {
    return invalid_argument("training.weight_decay = " + number(t.weight_decay()) +
                            ", must be finite and >= 0");
  }
  if (!(std::isfinite(t.clip_grad_norm()) && t.clip_grad_norm() >= 0)) {
    return invalid_argument("training.clip_grad_norm = " + number(t.clip_grad_norm()) +
                            ", must be finite and >= 0 (0: no clipping)");
  }
  if (!graphpipe::v1::LrSchedule_IsValid(t.lr_schedule())) {
    return invalid_argument("training.lr_schedule = " + std::to_string(t.lr_schedule()) +
                            ": unknown schedule (expected CONSTANT or WARMUP_COSINE)");
  }
  if (t.lr_schedule() == graphpipe::v1::LR_SCHEDULE_WARMUP_COSINE) {
    if (t.warmup_steps() < 0 || t.total_steps() <= t.warmup_steps() ||
        t.total_steps() > (1 << 30)) {
      return invalid_argument("training.warmup_steps = " + std::to_string(t.warmup_steps()) +
                              ", training.total_steps = " + std::to_string(t.total_steps()) +
                              ": need 0 <= warmup_steps < total_steps <= 2^30");
    }
    if (!(t.min_learning_rate() >= 0 && t.min_learning_rate() <= t.learning_rate())) {
      return invalid_argument("training.min_learning_rate = " + number(t.min_learning_rate()) +
                              ", must be in [0, learning_rate]");
    }
  }
  if (t.optimizer() == graphpipe::v1::OPTIMIZER_KIND_MOMENTUM &&
      !(t.momentum() >= 0 && t.momentum() < 1)) {
    return invalid_argument("training.momentum = " + number(t.momentum()) + ", must be in [0, 1)");
  }
  if (t.optimizer() == graphpipe::v1::OPTIMIZER_KIND_ADAM &&
      !(t.adam_beta1() == 0 && t.adam_beta2() == 0 && t.adam_epsilon() == 0)) {
    if (!(t.adam_beta1() >= 0 && t.adam_beta1() < 1)) {
      return invalid_argument("training.adam_beta1 = " + number(t.adam_beta1()) +
                              ", must be in [0, 1)");
    }
    if (!(t.adam_beta2() >= 0 && t.adam_beta2() < 1)) {
      return invalid_argument("training.adam_beta2 = " + number(t.adam_beta2()) +
                              ", must be in [0, 1)");
    }
    if (!(std::isfinite(t.adam_epsilon()) && t.adam_epsilon() > 0)) {
      return invalid_argument("training.adam_epsilon = " + number(t.adam_epsilon()) +
                              ", must be finite and > 0");
    }
  }
  return ok_status();
}

Result<PlanIndex> validate_plan_structure(const Plan& plan, const Graph& graph) {
  return PlanValidator(plan, graph).run();
}

Status check_plan_hashes(const Plan& plan) {
  GP_RETURN_IF_ERROR(model_hash_matches(plan));
  return cluster_hash_matches(plan);
}

namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// What a run needs beyond validate_training's checks of a plan: the optimizer named (the
// executor would read "unspecified" as SGD, the simulator priced it as whatever it assumed) and
// the learning rate set (the executor's optimizer refuses 0 at the first step).
void check_run_training(const graphpipe::v1::TrainingConfig& t, std::vector<std::string>* out) {
  if (t.optimizer() == graphpipe::v1::OPTIMIZER_KIND_UNSPECIFIED) {
    out->push_back(
        "plan.training.optimizer = OPTIMIZER_KIND_UNSPECIFIED: name the optimizer (SGD, "
        "MOMENTUM or ADAM)");
  }
  if (Status st = validate_training(t, /*allow_unset_learning_rate=*/false); !st.ok()) {
    out->push_back("plan." + st.message());
  }
}

// The planner writes in_flight_samples >= micro_batch (a sink holds one micro-batch, each stage
// before it one more) and at most one mini-batch per stage of the longest path; warmup_forwards
// is ceil(in_flight / micro_batch), capped at the micro-batches.
void check_stage_fields(const Plan& plan, std::vector<std::string>* out) {
  const int64_t most_in_flight = plan.stages_size() * plan.mini_batch();
  for (int s = 0; s < plan.stages_size(); ++s) {
    const auto& st = plan.stages(s);
    const std::string where = "stages[" + std::to_string(s) + "].";
    if (st.in_flight_samples() < st.micro_batch() || st.in_flight_samples() > most_in_flight) {
      out->push_back(where + "in_flight_samples = " + std::to_string(st.in_flight_samples()) +
                     ", must be in [" + std::to_string(st.micro_batch()) + ", " +
                     std::to_string(most_in_flight) + "] (its micro-batch to stages x mini-batch)");
    }
    const int64_t num_mb = plan.mini_batch() / st.micro_batch();
    if (st.warmup_forwards() < 1 || st.warmup_forwards() > num_mb) {
      out->push_back(where + "warmup_forwards = " + std::to_string(st.warmup_forwards()) +
                     ", must be in [1, " + std::to_string(num_mb) + "] (its micro-batches)");
    }
  }
}

// A predicted figure is finite and >= 0 (0: not predicted, as in a hand-written plan), a
// fraction in [0, 1] up to the rounding of the simulator's 1 - busy / iteration.
void check_figure(const std::string& field, double v, bool fraction,
                  std::vector<std::string>* out) {
  constexpr double kRounding = 1e-9;
  if (!fraction && std::isfinite(v) && v >= 0) return;
  if (fraction && v >= -kRounding && v <= 1 + kRounding) return;
  out->push_back(field + " = " + number(v) +
                 (fraction ? ", must be in [0, 1]" : ", must be finite and >= 0"));
}

void check_predicted(const Plan& plan, std::vector<std::string>* out) {
  const auto& p = plan.predicted();
  check_figure("predicted.iteration_time_s", p.iteration_time_s(), false, out);
  check_figure("predicted.throughput_samples_per_s", p.throughput_samples_per_s(), false, out);
  check_figure("predicted.bottleneck_tps_s", p.bottleneck_tps_s(), false, out);
  check_figure("predicted.bubble_fraction", p.bubble_fraction(), true, out);
  if (p.peak_memory_bytes() < 0) {
    out->push_back("predicted.peak_memory_bytes = " + std::to_string(p.peak_memory_bytes()) +
                   ", must be >= 0");
  }
  std::vector<char> seen(static_cast<size_t>(plan.stages_size()), 0);
  for (int i = 0; i < p.stages_size(); ++i) {
    const auto& m = p.stages(i);
    const std::string where = "predicted.stages[" + std::to_string(i) + "]";
    if (m.stage() < 0 || m.stage() >= plan.stages_size() || seen[m.stage()]++) {
      out->push_back(where + ".stage = " + std::to_string(m.stage()) +
                     " is not a stage of the plan, or repeats one");
    }
    check_figure(where + ".busy_time_s", m.busy_time_s(), false, out);
    check_figure(where + ".bubble_fraction", m.bubble_fraction(), true, out);
    check_figure(where + ".time_per_sample_s", m.time_per_sample_s(), false, out);
    if (m.peak_memory_bytes() < 0) {
      out->push_back(where + ".peak_memory_bytes = " + std::to_string(m.peak_memory_bytes()) +
                     ", must be >= 0");
    }
  }
  check_figure("provenance.search_time_s", plan.provenance().search_time_s(), false, out);
  if (plan.provenance().sp_edges_added() < 0) {
    out->push_back("provenance.sp_edges_added = " +
                   std::to_string(plan.provenance().sp_edges_added()) + ", must be >= 0");
  }
}

}  // namespace

std::vector<std::string> plan_field_problems(const Plan& plan) {
  std::vector<std::string> problems;
  check_run_training(plan.training(), &problems);
  check_stage_fields(plan, &problems);
  check_predicted(plan, &problems);
  return problems;
}

namespace {

using K = graphpipe::v1::InstructionKind;

// Every tensor consumed in another stage must travel along stage edges that carry it.
void check_stage_graph(const Plan& plan, const Graph& g, const PlanIndex& index,
                       std::vector<std::string>* problems) {
  const int n = plan.stages_size();
  std::vector<std::vector<int>> out_edges(n);
  std::vector<int> indegree(n, 0);
  for (int e = 0; e < plan.edges_size(); ++e) {
    out_edges[plan.edges(e).src_stage()].push_back(e);
    ++indegree[plan.edges(e).dst_stage()];
  }
  std::queue<int> ready;
  for (int s = 0; s < n; ++s) {
    if (indegree[s] == 0) ready.push(s);
  }
  int visited = 0;
  while (!ready.empty()) {
    const int s = ready.front();
    ready.pop();
    ++visited;
    for (int e : out_edges[s]) {
      if (--indegree[plan.edges(e).dst_stage()] == 0) ready.push(plan.edges(e).dst_stage());
    }
  }
  if (visited != n) problems->push_back("stage graph: has a cycle (stages are not convex)");

  // The tensors each edge carries, and per produced tensor the stages it reaches (computed once:
  // a tensor may feed many ops, and untrusted plans may be large).
  std::vector<std::set<std::pair<std::string, int>>> carried(plan.edges_size());
  for (int e = 0; e < plan.edges_size(); ++e) {
    for (const auto& tr : plan.edges(e).tensors()) carried[e].insert({tr.op(), tr.output()});
  }
  std::map<std::pair<std::string, int>, std::vector<char>> reach;
  for (const auto& node : g.ops()) {
    const int t = index.stage_of_op[node.index];
    for (const auto& ref : node.proto->inputs()) {
      const int s = index.stage_of_op[g.index_of(ref.op())];
      if (s == t) continue;
      const std::pair<std::string, int> key{ref.op(), ref.output()};
      auto [it, fresh] = reach.try_emplace(key, std::vector<char>(n, 0));
      std::vector<char>& seen = it->second;
      if (fresh) {
        std::queue<int> q;
        q.push(s);
        seen[s] = 1;
        while (!q.empty()) {
          const int x = q.front();
          q.pop();
          for (int e : out_edges[x]) {
            const int d = plan.edges(e).dst_stage();
            if (!seen[d] && carried[e].count(key)) {
              seen[d] = 1;
              q.push(d);
            }
          }
        }
      }
      if (!seen[t]) {
        problems->push_back("stage graph: tensor '" + ref.op() +
                            "':" + std::to_string(ref.output()) + " produced in stage " +
                            std::to_string(s) + " never reaches op '" + node.id() + "' in stage " +
                            std::to_string(t));
      }
    }
  }
}

// Every message is sent once and received once, and on every channel both ends issue its
// messages in the order Plan.messages lists them.
void check_messages(const Plan& plan, std::vector<std::string>* problems) {
  const int n = plan.messages_size();
  std::vector<int> sent(n, 0), received(n, 0);
  for (const auto& prog : plan.programs()) {
    for (const auto& in : prog.instructions()) {
      if (is_send(in.kind())) {
        ++sent[in.message()];
      } else if (is_recv(in.kind())) {
        ++received[in.message()];
      }
    }
  }
  bool counts_ok = true;
  for (int m = 0; m < n; ++m) {
    if (sent[m] == 1 && received[m] == 1) continue;
    counts_ok = false;
    problems->push_back(describe_message(plan, m) + ": sent " + std::to_string(sent[m]) +
                        " time(s), received " + std::to_string(received[m]) +
                        " time(s); every message is sent once and received once");
  }
  if (!counts_ok) return;  // the order below would only restate the miscount
  // Per channel (src, dst): its messages in table order, and how far each end has got.
  struct Channel {
    std::vector<int> messages;
    size_t sent = 0, received = 0;
  };
  std::map<std::pair<int, int>, Channel> channels;
  for (int m = 0; m < n; ++m) {
    channels[{plan.messages(m).src_rank(), plan.messages(m).dst_rank()}].messages.push_back(m);
  }
  for (const auto& prog : plan.programs()) {
    std::set<std::pair<int, int>> reported;
    for (const auto& in : prog.instructions()) {
      const bool send = is_send(in.kind());
      if (!send && !is_recv(in.kind())) continue;
      const auto& msg = plan.messages(in.message());
      const std::pair<int, int> key{msg.src_rank(), msg.dst_rank()};
      Channel& ch = channels[key];
      size_t& at = send ? ch.sent : ch.received;
      if (ch.messages[at] != in.message() && reported.insert(key).second) {
        problems->push_back(
            "channel " + std::to_string(key.first) + "->" + std::to_string(key.second) + ": rank " +
            std::to_string(prog.rank()) + (send ? " sends " : " receives ") +
            describe_message(plan, in.message()) + " as the channel's message " +
            std::to_string(at) + ", where plan.messages lists " +
            describe_message(plan, ch.messages[at]) +
            " (both ends issue a channel's messages in that order: NCCL matches them by order)");
      }
      ++at;
    }
  }
}

void check_programs(const Plan& plan, const Graph& g, std::vector<std::string>* problems) {
  for (const auto& prog : plan.programs()) {
    const auto& st = plan.stages(prog.stage());
    const int64_t num_mb = plan.mini_batch() / st.micro_batch();
    const std::string who =
        "rank " + std::to_string(prog.rank()) + " (stage " + std::to_string(prog.stage()) + ")";
    // Too few instructions for a forward and a backward of each micro-batch: say so before
    // counting, so that a short program cannot make us allocate per micro-batch.
    if (prog.instructions_size() < 2 * num_mb) {
      problems->push_back(who + ": " + std::to_string(prog.instructions_size()) +
                          " instructions cannot forward and backward its " +
                          std::to_string(num_mb) + " micro-batches");
      continue;
    }
    std::vector<int> fwd(static_cast<size_t>(num_mb), 0), bwd(static_cast<size_t>(num_mb), 0);
    int allreduce = 0, optimizer = 0;
    for (const auto& in : prog.instructions()) {
      switch (in.kind()) {
        case K::INSTRUCTION_KIND_FORWARD:
          ++fwd[in.micro_batch()];
          break;
        case K::INSTRUCTION_KIND_BACKWARD:
          if (fwd[in.micro_batch()] == 0) {
            problems->push_back(who + ": BACKWARD of micro-batch " +
                                std::to_string(in.micro_batch()) + " before its FORWARD");
          }
          ++bwd[in.micro_batch()];
          break;
        case K::INSTRUCTION_KIND_ALLREDUCE_GRADS:
          ++allreduce;
          break;
        case K::INSTRUCTION_KIND_OPTIMIZER_STEP:
          ++optimizer;
          break;
        default:
          break;
      }
    }
    for (int64_t m = 0; m < num_mb; ++m) {
      if (fwd[m] != 1 || bwd[m] != 1) {
        problems->push_back(who + ": micro-batch " + std::to_string(m) + " has " +
                            std::to_string(fwd[m]) + " forward(s) and " + std::to_string(bwd[m]) +
                            " backward(s), expected 1 and 1");
        break;
      }
    }
    int64_t params = 0;
    for (const auto& id : st.op_ids()) params += g.op(g.index_of(id)).cost.param_count;
    const int want_allreduce = params > 0 && st.device_ranks_size() > 1 ? 1 : 0;
    if (allreduce != want_allreduce) {
      problems->push_back(who + ": " + std::to_string(allreduce) + " ALLREDUCE_GRADS, expected " +
                          std::to_string(want_allreduce));
    }
    if (optimizer != (params > 0 ? 1 : 0)) {
      problems->push_back(who + ": " + std::to_string(optimizer) + " OPTIMIZER_STEP, expected " +
                          std::to_string(params > 0 ? 1 : 0));
    }
  }
}

}  // namespace

std::vector<std::string> plan_schedule_problems(const Plan& plan, const Graph& graph,
                                                const PlanIndex& index) {
  std::vector<std::string> problems;
  check_stage_graph(plan, graph, index, &problems);
  check_programs(plan, graph, &problems);
  check_messages(plan, &problems);
  return problems;
}

Result<PlanIndex> validate_plan(const Plan& plan, const Graph& graph) {
  GP_ASSIGN_OR_RETURN(PlanIndex index, validate_plan_structure(plan, graph));
  GP_RETURN_IF_ERROR(cluster_hash_matches(plan));  // the model's: validate_plan_structure
  std::vector<std::string> problems = plan_field_problems(plan);
  const bool fields = !problems.empty();
  if (!fields) problems = plan_schedule_problems(plan, graph, index);
  if (!problems.empty()) {
    std::string message = (fields ? "" : "plan schedule: ") + problems.front();
    if (problems.size() > 1) {
      message += " (and " + std::to_string(problems.size() - 1) +
                 " other problem(s); graphpipe-plan verify lists them)";
    }
    return invalid_argument(message);
  }
  return index;
}

bool carries_gradient(const Graph& graph, const graphpipe::v1::TensorRef& tensor) {
  const int op = graph.index_of(tensor.op());
  if (op < 0 || graph.op(op).info->is_input) return false;
  const auto& outputs = graph.op(op).proto->outputs();
  if (tensor.output() < 0 || tensor.output() >= outputs.size()) return false;
  const auto dtype = outputs[tensor.output()].dtype();
  return dtype != graphpipe::v1::DATA_TYPE_INT64 && dtype != graphpipe::v1::DATA_TYPE_INT32;
}

int64_t gradient_bytes_per_sample(const Graph& graph, const graphpipe::v1::StageEdge& edge) {
  int64_t bytes = 0;
  for (const auto& t : edge.tensors()) {
    if (carries_gradient(graph, t)) {
      bytes += model::size_bytes(graph.op(graph.index_of(t.op())).proto->outputs(t.output()));
    }
  }
  return bytes;
}

std::vector<int> ranks_stepping_optimizer(const Plan& plan) {
  std::vector<int> ranks;
  for (const auto& program : plan.programs()) {
    const auto& steps = program.instructions();
    if (std::any_of(steps.begin(), steps.end(), [](const graphpipe::v1::Instruction& in) {
          return in.kind() == graphpipe::v1::INSTRUCTION_KIND_OPTIMIZER_STEP;
        })) {
      ranks.push_back(program.rank());
    }
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

SampleRange replica_samples(const graphpipe::v1::Stage& stage, int replica, int64_t micro_batch) {
  const int64_t b = stage.micro_batch();
  const int64_t p = std::max(stage.device_ranks_size(), 1);
  // Floors: slices differ by at most one sample when p does not divide b, and each replica's
  // slice has the same size in every micro-batch.
  return {micro_batch * b + replica * b / p, micro_batch * b + (replica + 1) * b / p};
}

std::string describe_message(const Plan& plan, int m) {
  const auto& msg = plan.messages(m);
  return std::string(msg.gradient() ? "gradient" : "activation") + " message " + std::to_string(m) +
         " (edge " + std::to_string(msg.edge()) + ", rank " + std::to_string(msg.src_rank()) +
         " -> rank " + std::to_string(msg.dst_rank()) + ", samples [" +
         std::to_string(msg.sample_begin()) + ", " + std::to_string(msg.sample_end()) + "))";
}

std::string describe_instruction(const Plan& plan, const Instruction& in) {
  using K = graphpipe::v1::InstructionKind;
  const std::string mb = " mb " + std::to_string(in.micro_batch());
  auto transfer = [&](const char* verb, const char* what, bool send) {
    std::string s = std::string(verb) + " " + what;
    if (in.message() < 0 || in.message() >= plan.messages_size()) return s + " (no message)";
    const auto& msg = plan.messages(in.message());
    if (msg.edge() >= 0 && msg.edge() < plan.edges_size()) {
      const auto& e = plan.edges(msg.edge());
      s += "[stage " + std::to_string(e.src_stage()) + " -> " + std::to_string(e.dst_stage()) +
           "," + mb + "]";
    }
    s += " samples [" + std::to_string(msg.sample_begin()) + ", " +
         std::to_string(msg.sample_end()) + ")";
    return s +
           (send ? " to rank " + std::to_string(msg.dst_rank())
                 : " from rank " + std::to_string(msg.src_rank())) +
           " (message " + std::to_string(in.message()) + ")";
  };
  switch (in.kind()) {
    case K::INSTRUCTION_KIND_FORWARD:
      return "FORWARD stage " + std::to_string(in.stage()) + mb;
    case K::INSTRUCTION_KIND_BACKWARD:
      return "BACKWARD stage " + std::to_string(in.stage()) + mb;
    case K::INSTRUCTION_KIND_SEND_ACTIVATION:
      return transfer("SEND", "act", true);
    case K::INSTRUCTION_KIND_RECV_ACTIVATION:
      return transfer("RECV", "act", false);
    case K::INSTRUCTION_KIND_SEND_GRADIENT:
      return transfer("SEND", "grad", true);
    case K::INSTRUCTION_KIND_RECV_GRADIENT:
      return transfer("RECV", "grad", false);
    case K::INSTRUCTION_KIND_ALLREDUCE_GRADS:
      return "ALLREDUCE_GRADS stage " + std::to_string(in.stage());
    case K::INSTRUCTION_KIND_OPTIMIZER_STEP:
      return "OPTIMIZER_STEP stage " + std::to_string(in.stage());
    default:
      return "UNKNOWN instruction";
  }
}

std::string_view strategy_name(graphpipe::v1::Strategy strategy) {
  switch (strategy) {
    case graphpipe::v1::STRATEGY_GRAPHPIPE:
      return "graphpipe";
    case graphpipe::v1::STRATEGY_SEQUENTIAL:
      return "sequential";
    case graphpipe::v1::STRATEGY_PIPER:
      return "piper";
    case graphpipe::v1::STRATEGY_MANUAL:
      return "manual";
    default:
      return "unspecified";
  }
}

}  // namespace gp::plan
