#include "gp/exec/rank_runner.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "gp/common/chrome_trace.h"

namespace gp::exec {
namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

using graphpipe::v1::Instruction;
using K = graphpipe::v1::InstructionKind;

bool same(const graphpipe::v1::TensorRef& a, const graphpipe::v1::TensorRef& b) {
  return a.op() == b.op() && a.output() == b.output();
}

}  // namespace

Result<std::unique_ptr<RankRunner>> RankRunner::create(const graphpipe::v1::Plan& plan,
                                                       const graph::Graph& graph,
                                                       const graph::PlanIndex& index, int rank,
                                                       const Device& device) {
  if (rank < 0 || rank >= index.world_size || index.program_of_rank[rank] < 0) {
    return invalid_argument("--rank = " + std::to_string(rank) + " has no program in the plan (" +
                            std::to_string(index.world_size) + " ranks)");
  }
  auto r = std::unique_ptr<RankRunner>(new RankRunner());
  r->rank_ = rank;
  r->stage_ = index.stage_of_rank[rank];
  const auto& st = plan.stages(r->stage_);
  const auto& program = plan.programs(index.program_of_rank[rank]);
  const int64_t b = st.micro_batch();
  const int replicas = st.device_ranks_size();
  const int j =
      static_cast<int>(std::find(st.device_ranks().begin(), st.device_ranks().end(), rank) -
                       st.device_ranks().begin());
  r->per_replica_ = b / replicas;
  r->mini_batch_ = plan.mini_batch();
  r->group_.assign(st.device_ranks().begin(), st.device_ranks().end());
  std::sort(r->group_.begin(), r->group_.end());
  if (plan.training().clip_grad_norm() > 0) {
    // The norm's all-reduce is over the ranks whose programs step the optimizer (a stage without
    // parameters has no step), as each of them reaches it just before its own step.
    for (int other = 0; other < index.world_size; ++other) {
      const int p = index.program_of_rank[static_cast<size_t>(other)];
      if (p < 0) continue;
      const auto& steps = plan.programs(p).instructions();
      if (std::any_of(steps.begin(), steps.end(), [](const Instruction& in) {
            return in.kind() == K::INSTRUCTION_KIND_OPTIMIZER_STEP;
          })) {
        r->world_.push_back(other);
      }
    }
    r->norm_sum_.assign(1, 0.0f);
    r->counts_norm_ = rank == r->group_.front();
  }

  // Tensors leaving this stage: produced here (exports) or passing through (relays).
  std::vector<graphpipe::v1::TensorRef> exports, relays;
  auto contains = [](const std::vector<graphpipe::v1::TensorRef>& v,
                     const graphpipe::v1::TensorRef& t) {
    return std::any_of(v.begin(), v.end(), [&](const auto& x) { return same(x, t); });
  };
  for (const auto& e : plan.edges()) {
    if (e.src_stage() != r->stage_) continue;
    for (const auto& t : e.tensors()) {
      const bool produced_here = index.stage_of_op[graph.index_of(t.op())] == r->stage_;
      auto& list = produced_here ? exports : relays;
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
  GP_ASSIGN_OR_RETURN(
      r->runner_, StageRunner::create(graph, index.stage_ops[r->stage_], exports, r->per_replica_,
                                      std::max(slots, 1), plan.training(), relays, device));
  StageRunner& runner = *r->runner_;

  std::vector<int> slot_of(num_mb, -1);
  std::vector<char> backward_begun(num_mb, 0);
  std::vector<int> free_slots;
  for (int s = std::max(slots, 1) - 1; s >= 0; --s) free_slots.push_back(s);
  size_t max_bytes = 0, max_piece_bytes = 0;
  for (int k = 0; k < program.instructions_size(); ++k) {
    const Instruction& in = program.instructions(k);
    const int m = in.micro_batch();
    Step step;
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
    const int64_t replica_begin = m * b + j * r->per_replica_;
    const bool needs_begin =
        in.kind() == K::INSTRUCTION_KIND_BACKWARD || in.kind() == K::INSTRUCTION_KIND_RECV_GRADIENT;
    if (needs_begin && !backward_begun[m]) {
      backward_begun[m] = 1;
      Step begin = step;
      begin.op = Op::kBeginBackward;
      r->steps_.push_back(begin);
    }
    switch (in.kind()) {
      case K::INSTRUCTION_KIND_FORWARD:
        step.op = Op::kForward;
        step.first_sample = replica_begin;
        break;
      case K::INSTRUCTION_KIND_BACKWARD:
        step.op = Op::kBackward;
        break;
      case K::INSTRUCTION_KIND_ALLREDUCE_GRADS:
        step.op = Op::kAllReduce;
        break;
      case K::INSTRUCTION_KIND_OPTIMIZER_STEP:
        step.op = Op::kOptimizer;
        break;
      default: {
        const bool send = in.kind() == K::INSTRUCTION_KIND_SEND_ACTIVATION ||
                          in.kind() == K::INSTRUCTION_KIND_SEND_GRADIENT;
        step.gradient = in.kind() == K::INSTRUCTION_KIND_SEND_GRADIENT ||
                        in.kind() == K::INSTRUCTION_KIND_RECV_GRADIENT;
        step.op = send ? Op::kSend : Op::kRecv;
        step.peer = in.peer_rank();
        // The tag packs edge, direction and first sample; the top edge ids stay reserved for the
        // data planes' own handshakes.
        if (in.edge() < 0 || in.edge() >= (1 << 22) || in.sample_begin() < 0 ||
            in.sample_begin() >= (int64_t{1} << 40)) {
          return invalid_argument("plan: rank " + std::to_string(rank) + " instruction " +
                                  std::to_string(k) + ": edge " + std::to_string(in.edge()) +
                                  " or first sample " + std::to_string(in.sample_begin()) +
                                  " outside the message tag's range (2^22 edges, 2^40 samples)");
        }
        step.tag = (static_cast<uint64_t>(in.edge()) << 41) |
                   (static_cast<uint64_t>(step.gradient) << 40) |
                   static_cast<uint64_t>(in.sample_begin());
        step.sample_offset = in.sample_begin() - replica_begin;
        step.samples = in.sample_end() - in.sample_begin();
        if (step.sample_offset < 0 || step.sample_offset + step.samples > r->per_replica_) {
          return invalid_argument("plan: rank " + std::to_string(rank) + " instruction " +
                                  std::to_string(k) + ": samples outside its micro-batch slice");
        }
        for (const auto& t : plan.edges(in.edge()).tensors()) {
          if (step.gradient && !graph::carries_gradient(graph, t)) continue;
          Piece piece;
          const int ext = runner.external_index(t);
          const int exp = runner.export_index(t);
          piece.external = exp < 0;
          piece.index = exp >= 0 ? exp : ext;
          if (piece.index < 0) {
            return invalid_argument("plan: rank " + std::to_string(rank) + " holds no tensor '" +
                                    t.op() + "' for instruction " + std::to_string(k));
          }
          const StageTensor& info = piece.external ? runner.external_inputs()[piece.index]
                                                   : runner.exports()[piece.index];
          piece.bytes_per_sample = info.per_sample * (info.is_int && !step.gradient ? 8 : 4);
          step.bytes += piece.bytes_per_sample * step.samples;
          max_piece_bytes =
              std::max(max_piece_bytes, static_cast<size_t>(piece.bytes_per_sample * step.samples));
          step.pieces.push_back(piece);
        }
        max_bytes = std::max(max_bytes, static_cast<size_t>(step.bytes));
        step.staging_offset = r->device_staging_bytes_;
        r->device_staging_bytes_ += (static_cast<size_t>(step.bytes) + 255) / 256 * 256;
      }
    }
    r->steps_.push_back(std::move(step));
    if (per_mb && last[m] == k) free_slots.push_back(slot_of[m]);
  }
  r->staging_.assign(max_bytes, std::byte{0});
  if (!runner.host_memory()) {
    r->grad_scratch_.assign(max_piece_bytes / sizeof(float), 0.0f);
    r->allreduce_staging_.assign(static_cast<size_t>(runner.param_count()), 0.0f);
  }
  return r;
}

TensorView RankRunner::piece_view(const Step& s, const Piece& p) const {
  return p.external ? (s.gradient ? runner_->external_input_grad(s.slot, p.index)
                                  : runner_->external_input(s.slot, p.index))
                    : (s.gradient ? runner_->export_grad(s.slot, p.index)
                                  : runner_->export_value(s.slot, p.index));
}

Status RankRunner::pack(const Step& s, std::byte* out) const {
  const Device& device = runner_->device();
  const bool host = runner_->host_memory();
  for (const Piece& p : s.pieces) {
    const TensorView v = piece_view(s, p);
    const size_t n = static_cast<size_t>(p.bytes_per_sample * s.samples);
    const std::byte* src =
        static_cast<const std::byte*>(v.data) + p.bytes_per_sample * s.sample_offset;
    if (host) {
      std::memcpy(out, src, n);
    } else {
      GP_RETURN_IF_ERROR(device.copy_to_host(out, src, n));  // waits for the producing kernels
    }
    out += n;
  }
  return ok_status();
}

Status RankRunner::unpack(const Step& s, const std::byte* in) {
  const Device& device = runner_->device();
  const bool host = runner_->host_memory();
  for (const Piece& p : s.pieces) {
    const size_t n = static_cast<size_t>(p.bytes_per_sample * s.samples);
    if (s.gradient) {
      // Fan-in: gradients from every successor add up.
      const TensorView v = p.external ? runner_->external_input_grad(s.slot, p.index)
                                      : runner_->export_grad(s.slot, p.index);
      float* dst = v.f() + p.bytes_per_sample / 4 * s.sample_offset;
      const size_t count = n / 4;
      // On a device without host memory the sum is formed on the host, in the same order.
      float* sum = host ? dst : grad_scratch_.data();
      if (!host) GP_RETURN_IF_ERROR(device.copy_to_host(sum, dst, n));
      for (size_t i = 0; i < count; ++i) {
        float g;
        std::memcpy(&g, in + 4 * i, 4);
        sum[i] += g;
      }
      if (!host) GP_RETURN_IF_ERROR(device.copy_from_host(dst, sum, n));
    } else {
      const TensorView v = runner_->external_input(s.slot, p.index);
      std::byte* dst = static_cast<std::byte*>(v.data) + p.bytes_per_sample * s.sample_offset;
      if (host) {
        std::memcpy(dst, in, n);
      } else {
        GP_RETURN_IF_ERROR(device.copy_from_host(dst, in, n));
      }
    }
    in += n;
  }
  return ok_status();
}

Status RankRunner::pack_on_device(const Step& s, std::byte* out) const {
  const Device& device = runner_->device();
  for (const Piece& p : s.pieces) {
    const TensorView v = piece_view(s, p);
    const size_t n = static_cast<size_t>(p.bytes_per_sample * s.samples);
    GP_RETURN_IF_ERROR(device.copy_on_device(
        out, static_cast<const std::byte*>(v.data) + p.bytes_per_sample * s.sample_offset, n));
    out += n;
  }
  return ok_status();
}

Status RankRunner::unpack_on_device(const Step& s, const std::byte* in) {
  const Device& device = runner_->device();
  for (const Piece& p : s.pieces) {
    const size_t n = static_cast<size_t>(p.bytes_per_sample * s.samples);
    if (s.gradient) {  // fan-in: gradients from every successor add up
      const TensorView v = p.external ? runner_->external_input_grad(s.slot, p.index)
                                      : runner_->export_grad(s.slot, p.index);
      GP_RETURN_IF_ERROR(device.accumulate(v.f() + p.bytes_per_sample / 4 * s.sample_offset,
                                           reinterpret_cast<const float*>(in),
                                           static_cast<int64_t>(n / 4)));
    } else {
      const TensorView v = runner_->external_input(s.slot, p.index);
      GP_RETURN_IF_ERROR(device.copy_on_device(
          static_cast<std::byte*>(v.data) + p.bytes_per_sample * s.sample_offset, in, n));
    }
    in += n;
  }
  return ok_status();
}

Status RankRunner::allreduce_grads(Communicator& comm) {
  StageRunner& runner = *runner_;
  if (comm.device_memory()) {
    if (group_.size() < 2) return ok_status();  // a sum over one replica
    return comm.allreduce_sum(group_, runner.param_grad_memory());
  }
  if (runner.host_memory()) return comm.allreduce_sum(group_, runner.param_grads());
  if (group_.size() < 2) return ok_status();  // a sum over one replica
  GP_RETURN_IF_ERROR(runner.download_param_grads(allreduce_staging_));
  GP_RETURN_IF_ERROR(comm.allreduce_sum(group_, allreduce_staging_));
  return runner.upload_param_grads(allreduce_staging_);
}

Status RankRunner::clip_grads(Communicator& comm) {
  if (comm.device_memory()) {
    return unimplemented(
        "training.clip_grad_norm is not supported on the NCCL data plane yet (its norm "
        "all-reduce is in host memory); train without it, or on the CPU");
  }
  StageRunner& runner = *runner_;
  GP_ASSIGN_OR_RETURN(const double own, runner.grad_sum_of_squares(allreduce_staging_));
  norm_sum_[0] = counts_norm_ ? static_cast<float>(own) : 0.0f;
  if (world_.size() > 1) GP_RETURN_IF_ERROR(comm.allreduce_sum(world_, norm_sum_));
  return runner.clip_grads(norm_sum_[0], allreduce_staging_);
}

Result<double> RankRunner::run_iteration(int64_t iteration, Communicator& comm) {
  StageRunner& runner = *runner_;
  runner.zero_param_grads();
  double loss = 0;
  const float scale = 1.0f / static_cast<float>(mini_batch_);
  // Alternate tags between iterations so a fast rank's next iteration never meets a message
  // of the previous one.
  const uint64_t parity = static_cast<uint64_t>(iteration & 1) << 63;
  const bool tracing = trace_capacity_ > 0;
  const bool on_device = comm.device_memory();
  if (on_device && device_staging_.bytes() < device_staging_bytes_) {
    // Once, at the first iteration over such a data plane (the runner is made before it).
    auto staging = DeviceBuffer::create(runner.device(), device_staging_bytes_);
    if (!staging.ok()) {
      return staging.status().with_context("rank " + std::to_string(rank_) +
                                           ": message staging buffer");
    }
    device_staging_ = std::move(*staging);
    // The data plane's streams write receives into it without ordering after the compute
    // stream, where the allocation (possibly of memory freed there) is ordered.
    if (Status st = runner.synchronize(); !st.ok()) {
      return st.with_context("rank " + std::to_string(rank_) + ": message staging buffer");
    }
  }
  std::byte* device_staging = static_cast<std::byte*>(device_staging_.data());
  for (const Step& s : steps_) {
    current_.store(s.instruction, std::memory_order_relaxed);
    const double start_us = tracing ? now_us() : 0;
    Status st;
    switch (s.op) {
      case Op::kForward:
        runner.forward(s.slot, per_replica_, iteration, s.first_sample);
        if (runner.has_loss()) loss += runner.loss_sum(s.slot);
        break;
      case Op::kBeginBackward:
        runner.begin_backward(s.slot);
        break;
      case Op::kBackward:
        runner.backward(s.slot, scale);
        break;
      case Op::kSend: {
        std::byte* message = on_device ? device_staging + s.staging_offset : staging_.data();
        st = on_device ? pack_on_device(s, message) : pack(s, message);
        if (st.ok())
          st = comm.send(s.peer, s.tag | parity, {message, static_cast<size_t>(s.bytes)});
        break;
      }
      case Op::kRecv: {
        std::byte* message = on_device ? device_staging + s.staging_offset : staging_.data();
        st = comm.recv(s.peer, s.tag | parity, {message, static_cast<size_t>(s.bytes)});
        if (st.ok()) st = on_device ? unpack_on_device(s, message) : unpack(s, message);
        break;
      }
      case Op::kAllReduce:
        st = allreduce_grads(comm);
        break;
      case Op::kOptimizer:
        if (!world_.empty()) st = clip_grads(comm);
        if (st.ok()) runner.optimizer_step(iteration + 1);
        break;
    }
    // Queued device work would otherwise be timed at its launch.
    if (tracing && !runner.host_memory() && st.ok()) st = runner.synchronize();
    if (tracing && trace_.size() < trace_capacity_ && s.op != Op::kSend &&
        s.op != Op::kBeginBackward) {
      TraceEvent e{};
      e.kind = s.op == Op::kForward     ? TraceEvent::kForward
               : s.op == Op::kBackward  ? TraceEvent::kBackward
               : s.op == Op::kRecv      ? TraceEvent::kRecv
               : s.op == Op::kAllReduce ? TraceEvent::kAllReduce
                                        : TraceEvent::kOptimizer;
      e.stage = stage_;
      e.micro_batch = s.micro_batch;
      e.peer = s.peer;
      e.gradient = s.gradient;
      e.bytes = s.bytes;
      e.start_us = start_us;
      e.end_us = now_us();
      trace_.push_back(e);  // capacity reserved in enable_trace: no allocation
    }
    if (!st.ok()) {
      return st.with_context("rank " + std::to_string(rank_) + ", iteration " +
                             std::to_string(iteration) + ", instruction " +
                             std::to_string(s.instruction));
    }
  }
  current_.store(-1, std::memory_order_relaxed);
  // The staging regions are reused next iteration, and a transfer's failure belongs to this one.
  if (on_device) {
    if (Status st = comm.wait_all(); !st.ok()) {
      return st.with_context("rank " + std::to_string(rank_) + ", iteration " +
                             std::to_string(iteration));
    }
  }
  // Errors of the iteration's queued device work (and of the runner's copies) surface here.
  if (Status st = runner.synchronize(); !st.ok()) {
    return st.with_context("rank " + std::to_string(rank_) + ", iteration " +
                           std::to_string(iteration) + " on " +
                           std::string(runner.device().name()));
  }
  return loss;
}

void RankRunner::enable_trace(size_t max_events) {
  trace_.clear();
  trace_.reserve(max_events);
  trace_capacity_ = max_events;
}

std::string measured_trace_json(const graphpipe::v1::Plan& plan,
                                const std::vector<std::pair<int, std::vector<TraceEvent>>>& ranks) {
  double origin = -1;
  for (const auto& [rank, events] : ranks) {
    for (const auto& e : events) origin = origin < 0 ? e.start_us : std::min(origin, e.start_us);
  }
  std::vector<trace::Track> tracks;
  std::vector<trace::Span> spans;
  double end_us = 0;
  for (const auto& [rank, events] : ranks) {
    for (const auto& st : plan.stages()) {
      for (int r : st.device_ranks()) {
        if (r == rank) tracks.push_back({rank, st.id()});
      }
    }
    for (const auto& e : events) {
      trace::Span out{};
      out.stage = e.stage;
      out.micro_batch = e.micro_batch;
      out.start_us = e.start_us - origin;
      out.end_us = e.end_us - origin;
      out.bytes = e.bytes;
      out.gradient = e.gradient;
      out.rank = rank;
      out.peer = -1;
      switch (e.kind) {
        case TraceEvent::kForward:
          out.kind = trace::SpanKind::kForward;
          break;
        case TraceEvent::kBackward:
          out.kind = trace::SpanKind::kBackward;
          break;
        case TraceEvent::kAllReduce:
          out.kind = trace::SpanKind::kAllReduce;
          break;
        case TraceEvent::kOptimizer:
          out.kind = trace::SpanKind::kOptimizer;
          break;
        case TraceEvent::kRecv:  // drawn on the link from the sender, ending at arrival
          out.kind = trace::SpanKind::kTransfer;
          out.rank = e.peer;
          out.peer = rank;
          break;
      }
      end_us = std::max(end_us, out.end_us);
      spans.push_back(out);
    }
  }
  trace::TraceInput input;
  input.model = plan.model().name();
  input.mini_batch = plan.mini_batch();
  input.iteration_time_us = end_us;
  input.tracks = tracks;
  input.spans = spans;
  return trace::chrome_trace_json(input);
}

Result<LocalRunResult> run_plan_locally(const graphpipe::v1::Plan& plan, int iterations,
                                        std::chrono::milliseconds timeout,
                                        std::vector<std::unique_ptr<RankRunner>>* out_runners,
                                        size_t trace_events, const Device& device,
                                        const std::string& data_dir, bool shuffle) {
  auto built = graph::Graph::build(plan.model());
  if (!built.ok()) return built.status().with_context("plan.model");
  const graph::Graph& graph = *built;
  GP_ASSIGN_OR_RETURN(graph::PlanIndex index, graph::validate_plan(plan, graph));
  std::vector<std::unique_ptr<RankRunner>> runners;
  for (int r = 0; r < index.world_size; ++r) {
    if (index.program_of_rank[r] < 0) continue;
    GP_ASSIGN_OR_RETURN(auto runner, RankRunner::create(plan, graph, index, r, device));
    if (trace_events > 0) runner->enable_trace(trace_events);
    runners.push_back(std::move(runner));
  }
  std::vector<std::unique_ptr<NpyDataset>> data;  // per rank: the files of its input ops
  if (!data_dir.empty()) {
    for (auto& runner : runners) {
      GP_ASSIGN_OR_RETURN(auto d,
                          open_stage_data(data_dir, graph, runner->stage_runner().op_indices(),
                                          plan.mini_batch(), shuffle, plan.training().seed()));
      runner->mutable_stage_runner().set_data(d.get());
      data.push_back(std::move(d));
    }
  }
  LoopbackHub hub(index.world_size, timeout);
  std::vector<std::vector<double>> loss_sums(runners.size(), std::vector<double>(iterations, 0));
  std::mutex mu;
  Status first_error;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < runners.size(); ++i) {
    threads.emplace_back([&, i] {
      auto comm = hub.communicator(runners[i]->rank());
      for (int it = 0; it < iterations; ++it) {
        auto loss = runners[i]->run_iteration(it, *comm);
        if (!loss.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first_error.ok()) first_error = loss.status();
          comm->abort("rank " + std::to_string(runners[i]->rank()) +
                      " failed: " + loss.status().message());
          return;
        }
        loss_sums[i][it] = *loss;
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!first_error.ok()) return first_error;
  LocalRunResult result;
  for (int it = 0; it < iterations; ++it) {
    double sum = 0;
    for (const auto& per_rank : loss_sums) sum += per_rank[it];
    result.losses.push_back(sum / static_cast<double>(plan.mini_batch()));
  }
  for (auto& runner : runners) runner->mutable_stage_runner().set_data(nullptr);  // data goes
  if (out_runners != nullptr) *out_runners = std::move(runners);
  return result;
}

}  // namespace gp::exec
