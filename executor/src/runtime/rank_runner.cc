#include "gp/exec/rank_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "gp/common/chrome_trace.h"
#include "tie_reducer.h"

namespace gp::exec {
namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

using graphpipe::v1::Instruction;
using K = graphpipe::v1::InstructionKind;

}  // namespace

RankRunner::~RankRunner() = default;

Result<std::unique_ptr<RankRunner>> RankRunner::create(const graphpipe::v1::Plan& plan,
                                                       const model::Graph& graph,
                                                       const plan::PlanIndex& index, int rank,
                                                       const Device& device) {
  GP_ASSIGN_OR_RETURN(RankProgram program, lower_rank_program(plan, graph, index, rank));
  return create(std::move(program), graph, plan.training(), device);
}

Result<std::unique_ptr<RankRunner>> RankRunner::create(
    RankProgram program, const model::Graph& graph, const graphpipe::v1::TrainingConfig& training,
    const Device& device, const DataSource* data) {
  auto r = std::unique_ptr<RankRunner>(new RankRunner());
  r->program_ = std::move(program);
  const RankProgram& p = r->program_;
  if (!p.world.empty()) r->norm_sum_.assign(1, 0.0f);
  StageOptions options;
  options.max_batch = p.per_replica;
  options.slots = p.slots;
  options.recompute = p.recompute;
  options.shard_index = p.shard_index;
  options.shard_count = p.shard_count;
  options.training = training;
  options.device = &device;
  options.data = data;
  GP_ASSIGN_OR_RETURN(r->runner_, StageRunner::create(graph, p.layout, options));
  const StageRunner& runner = *r->runner_;
  r->staging_.assign(p.max_message_bytes, std::byte{0});
  if (!runner.host_memory()) {
    r->grad_scratch_.assign(p.max_piece_bytes / sizeof(float), 0.0f);
    r->allreduce_staging_.assign(static_cast<size_t>(runner.param_count()), 0.0f);
  }
  return r;
}

TensorView RankRunner::piece_view(const Step& s, const Piece& p) const {
  return !p.exported ? (s.gradient ? runner_->external_input_grad(s.slot, p.index)
                                   : runner_->external_input(s.slot, p.index))
                     : (s.gradient ? runner_->export_grad(s.slot, p.index)
                                   : runner_->export_value(s.slot, p.index));
}

namespace {

// ZeRO-1: each replica stepped its slice; zeroing the rest and summing over the replicas
// all-gathers the slices with the one collective every data plane has (x + 0 is exact, so the
// parameters are bit for bit the unsharded step's, -0.0 aside, which becomes +0.0). In place
// where the data plane sums the memory the parameters are in (host, or device for NCCL); a
// device's parameters over a host data plane go through `staging` (param_count() floats).
Status gather_params(Communicator& comm, StageRunner& runner, const std::vector<int>& group,
                     std::vector<float>& staging) {
  if (runner.host_memory() || comm.device_memory()) {
    runner.zero_params_outside_shard();
    return comm.allreduce_sum(group, runner.param_memory());
  }
  GP_RETURN_IF_ERROR(runner.download_params(staging));
  std::fill(staging.begin(), staging.begin() + runner.shard_begin(), 0.0f);
  std::fill(staging.begin() + runner.shard_end(), staging.end(), 0.0f);
  GP_RETURN_IF_ERROR(comm.allreduce_sum(group, staging));
  return runner.upload_params(staging);
}

// The sum over `group` of a host buffer, in place: directly on a host data plane; on one that sums
// device memory (NCCL) through `scratch` when it is large enough (the step loop's, made at
// bind), else through a device buffer allocated for it (checkpoints).
Status sum_host_floats(Communicator& comm, const Device& device, const std::vector<int>& group,
                       std::span<float> data, const DeviceBuffer* scratch = nullptr) {
  if (!comm.device_memory()) return comm.allreduce_sum(group, data);
  DeviceBuffer own;
  if (scratch == nullptr || scratch->bytes() < data.size_bytes()) {
    GP_ASSIGN_OR_RETURN(own, DeviceBuffer::create(device, data.size_bytes()));
    scratch = &own;
  }
  GP_RETURN_IF_ERROR(device.copy_from_host(scratch->data(), data.data(), data.size_bytes()));
  GP_RETURN_IF_ERROR(comm.allreduce_sum(group, {scratch->f(), data.size()}));
  return device.copy_to_host(data.data(), scratch->data(), data.size_bytes());
}

// Fan-in: a received gradient adds to what the other successors sent.
void add_floats(float* sum, const std::byte* in, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    float g;
    std::memcpy(&g, in + 4 * i, 4);
    sum[i] += g;
  }
}

}  // namespace

Status RankRunner::pack_host(const Step& s, std::byte* out) const {
  for (const Piece& p : s.pieces) {
    const TensorView v = piece_view(s, p);
    const size_t n = static_cast<size_t>(p.bytes_per_sample * s.samples);
    std::memcpy(out, static_cast<const std::byte*>(v.data) + p.bytes_per_sample * s.sample_offset,
                n);
    out += n;
  }
  return ok_status();
}

Status RankRunner::pack_via_host(const Step& s, std::byte* out) const {
  const Device& device = runner_->device();
  for (const Piece& p : s.pieces) {
    const TensorView v = piece_view(s, p);
    const size_t n = static_cast<size_t>(p.bytes_per_sample * s.samples);
    // Waits for the producing kernels.
    GP_RETURN_IF_ERROR(device.copy_to_host(
        out, static_cast<const std::byte*>(v.data) + p.bytes_per_sample * s.sample_offset, n));
    out += n;
  }
  return ok_status();
}

Status RankRunner::unpack_host(const Step& s, const std::byte* in) {
  for (const Piece& p : s.pieces) {
    const size_t n = static_cast<size_t>(p.bytes_per_sample * s.samples);
    const TensorView v = piece_view(s, p);
    if (s.gradient) {
      add_floats(v.f() + p.bytes_per_sample / 4 * s.sample_offset, in, n / 4);
    } else {
      std::memcpy(static_cast<std::byte*>(v.data) + p.bytes_per_sample * s.sample_offset, in, n);
    }
    in += n;
  }
  return ok_status();
}

Status RankRunner::unpack_via_host(const Step& s, const std::byte* in) {
  const Device& device = runner_->device();
  for (const Piece& p : s.pieces) {
    const size_t n = static_cast<size_t>(p.bytes_per_sample * s.samples);
    const TensorView v = piece_view(s, p);
    if (s.gradient) {
      // The sum is formed on the host, in the same order as on a host device.
      float* dst = v.f() + p.bytes_per_sample / 4 * s.sample_offset;
      GP_RETURN_IF_ERROR(device.copy_to_host(grad_scratch_.data(), dst, n));
      add_floats(grad_scratch_.data(), in, n / 4);
      GP_RETURN_IF_ERROR(device.copy_from_host(dst, grad_scratch_.data(), n));
    } else {
      GP_RETURN_IF_ERROR(device.copy_from_host(
          static_cast<std::byte*>(v.data) + p.bytes_per_sample * s.sample_offset, in, n));
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
    const TensorView v = piece_view(s, p);
    if (s.gradient) {  // fan-in: gradients from every successor add up
      GP_RETURN_IF_ERROR(device.accumulate(v.f() + p.bytes_per_sample / 4 * s.sample_offset,
                                           reinterpret_cast<const float*>(in),
                                           static_cast<int64_t>(n / 4)));
    } else {
      GP_RETURN_IF_ERROR(device.copy_on_device(
          static_cast<std::byte*>(v.data) + p.bytes_per_sample * s.sample_offset, in, n));
    }
    in += n;
  }
  return ok_status();
}

Status RankRunner::allreduce_host() {
  return comm_->allreduce_sum(program_.group, runner_->param_grads());
}

Status RankRunner::allreduce_via_host() {
  if (program_.group.size() < 2) return ok_status();  // a sum over one replica
  GP_RETURN_IF_ERROR(runner_->download_param_grads(allreduce_staging_));
  GP_RETURN_IF_ERROR(comm_->allreduce_sum(program_.group, allreduce_staging_));
  return runner_->upload_param_grads(allreduce_staging_);
}

Status RankRunner::allreduce_on_device() {
  if (program_.group.size() < 2) return ok_status();  // a sum over one replica
  return comm_->allreduce_sum(program_.group, runner_->param_grad_memory());
}

Status RankRunner::clip_grads() {
  StageRunner& runner = *runner_;
  GP_ASSIGN_OR_RETURN(double own, runner.grad_sum_of_squares(allreduce_staging_));
  if (ties_ != nullptr) {
    GP_ASSIGN_OR_RETURN(const double duplicates, ties_->duplicate_sum_of_squares());
    own -= duplicates;
  }
  norm_sum_[0] = program_.counts_norm ? static_cast<float>(own) : 0.0f;
  if (program_.world.size() > 1) {
    GP_RETURN_IF_ERROR(
        sum_host_floats(*comm_, runner.device(), program_.world, norm_sum_, &norm_device_));
  }
  grad_norm_ = std::sqrt(std::abs(static_cast<double>(norm_sum_[0])));  // NaN stays NaN
  return runner.clip_grads(norm_sum_[0], allreduce_staging_);
}

Status RankRunner::bind(Communicator& comm) {
  StageRunner& runner = *runner_;
  const bool on_device = comm.device_memory();
  if (on_device && !program_.world.empty() && norm_device_.bytes() == 0) {
    // The gradient norm's all-reduce (one float) goes through device memory on NCCL.
    auto buffer = DeviceBuffer::create(runner.device(), sizeof(float));
    if (!buffer.ok()) {
      return buffer.status().with_context("rank " + std::to_string(program_.rank) +
                                          ": the gradient norm's all-reduce buffer");
    }
    norm_device_ = std::move(*buffer);
  }
  if (runner.sharded()) {
    // Checkpoints gather the sharded state over the stage's replicas: a host buffer, summed in
    // place by a host data plane, through device memory by one that sums device memory.
    runner.set_replica_sum(
        [&comm, &device = runner.device(), group = program_.group](std::span<float> data) {
          return sum_host_floats(comm, device, group, data);
        });
  }
  const std::string where = "rank " + std::to_string(program_.rank) + ": message staging buffer";
  if (on_device && device_staging_.bytes() < program_.device_staging_bytes) {
    auto staging = DeviceBuffer::create(runner.device(), program_.device_staging_bytes);
    if (!staging.ok()) return staging.status().with_context(where);
    device_staging_ = std::move(*staging);
    // The data plane's streams write receives into it without ordering after the compute
    // stream, where the allocation (possibly of memory freed there) is ordered.
    if (Status st = runner.synchronize(); !st.ok()) return st.with_context(where);
  }
  std::byte* device_staging = static_cast<std::byte*>(device_staging_.data());
  message_of_step_.assign(program_.steps.size(), nullptr);
  for (size_t i = 0; i < program_.steps.size(); ++i) {
    message_of_step_[i] =
        on_device ? device_staging + program_.steps[i].staging_offset : staging_.data();
  }
  // Where messages and the all-reduce go: device memory straight to a device data plane, host
  // memory straight to a host one, or device memory through host buffers to a host one.
  const bool host = runner.host_memory();
  pack_ = on_device ? &RankRunner::pack_on_device
          : host    ? &RankRunner::pack_host
                    : &RankRunner::pack_via_host;
  unpack_ = on_device ? &RankRunner::unpack_on_device
            : host    ? &RankRunner::unpack_host
                      : &RankRunner::unpack_via_host;
  allreduce_ = on_device ? &RankRunner::allreduce_on_device
               : host    ? &RankRunner::allreduce_host
                         : &RankRunner::allreduce_via_host;
  if (!program_.ties.empty()) {
    auto ties = TieReducer::create(*runner_, program_.ties, &comm);
    if (!ties.ok()) {
      return ties.status().with_context("rank " + std::to_string(program_.rank) +
                                        ": tied parameters");
    }
    ties_ = std::move(*ties);
  }
  size_stamps(comm);
  comm_ = &comm;
  return ok_status();
}

// A host data plane's calls block until their part of the transfer is done: stamped, they time
// it. A device data plane's return once the transfer is queued: none is stamped.
void RankRunner::size_stamps(const Communicator& comm) {
  size_t transfers = 0;
  for (const Step& s : program_.steps) {
    transfers += s.op == StepOp::kSend || s.op == StepOp::kRecv ? 1 : 0;
  }
  stamps_.assign(comm.device_memory() ? 0 : transfers, TransferStamp{});
  stamps_used_ = 0;
  stamping_ = stamping_ && !stamps_.empty();
}

Result<double> RankRunner::run_iteration(int64_t iteration) {
  if (comm_ == nullptr) {
    return failed_precondition("rank " + std::to_string(program_.rank) +
                               ": run_iteration before bind (no data plane)");
  }
  StageRunner& runner = *runner_;
  runner.zero_param_grads();
  double loss = 0;
  // Alternate tags between iterations so a fast rank's next iteration never meets a message
  // of the previous one.
  const uint64_t parity = static_cast<uint64_t>(iteration & 1) << 63;
  const bool tracing = trace_capacity_ > 0;
  if (stamping_) stamps_used_ = 0;
  for (size_t i = 0; i < program_.steps.size(); ++i) {
    const Step& s = program_.steps[i];
    current_.store(s.instruction, std::memory_order_relaxed);
    const double start_us = tracing ? now_us() : 0;
    Status st = run_step(s, message_of_step_[i], iteration, parity, loss);
    if (synchronize_traced_steps_ && st.ok()) st = runner.synchronize();
    if (tracing) record(s, start_us);
    if (!st.ok()) {
      return st.with_context("rank " + std::to_string(program_.rank) + ", iteration " +
                             std::to_string(iteration) + ", instruction " +
                             std::to_string(s.instruction));
    }
  }
  current_.store(-1, std::memory_order_relaxed);
  // The staging regions are reused next iteration, and a transfer's failure belongs to this one
  // (a host data plane has nothing in flight).
  if (Status st = comm_->wait_all(); !st.ok()) {
    return st.with_context("rank " + std::to_string(program_.rank) + ", iteration " +
                           std::to_string(iteration));
  }
  // Errors of the iteration's queued device work (and of the runner's copies) surface here.
  if (Status st = runner.synchronize(); !st.ok()) {
    return st.with_context("rank " + std::to_string(program_.rank) + ", iteration " +
                           std::to_string(iteration) + " on " +
                           std::string(runner.device().name()));
  }
  return loss;
}

Result<double> RankRunner::evaluate(const DataSource& data, int64_t iterations) {
  if (comm_ == nullptr) {
    return failed_precondition("rank " + std::to_string(program_.rank) + ": evaluate before bind");
  }
  constexpr uint64_t kEvaluation = uint64_t{1} << 62;  // training's tags stay below it
  StageRunner& runner = *runner_;
  double loss = 0;
  for (int64_t k = 0; k < iterations; ++k) {
    const uint64_t tag_bits = kEvaluation | static_cast<uint64_t>(k & 1) << 63;
    for (size_t i = 0; i < program_.steps.size(); ++i) {
      const Step& s = program_.steps[i];
      Status st;
      if (s.op == StepOp::kForward) {  // the held-out samples, not the training data
        runner.forward_from(data, s.slot, program_.per_replica, k, s.first_sample);
        if (runner.has_loss()) loss += runner.loss_sum(s.slot);
      } else if ((s.op == StepOp::kSend || s.op == StepOp::kRecv) && !s.gradient) {
        st = run_step(s, message_of_step_[i], k, tag_bits, loss);
      }
      if (!st.ok()) {
        return st.with_context("rank " + std::to_string(program_.rank) + ", evaluation batch " +
                               std::to_string(k) + ", instruction " +
                               std::to_string(s.instruction));
      }
    }
    GP_RETURN_IF_ERROR(
        comm_->wait_all().with_context("rank " + std::to_string(program_.rank) + ", evaluation"));
  }
  GP_RETURN_IF_ERROR(
      runner.synchronize().with_context("rank " + std::to_string(program_.rank) + ", evaluation"));
  return loss;
}

Status RankRunner::run_step(const Step& s, std::byte* message, int64_t iteration, uint64_t tag_bits,
                            double& loss) {
  Communicator& comm = *comm_;
  StageRunner& runner = *runner_;
  Status st;
  switch (s.op) {
    case StepOp::kForward:
      runner.forward(s.slot, program_.per_replica, iteration, s.first_sample);
      if (runner.has_loss()) loss += runner.loss_sum(s.slot);
      break;
    case StepOp::kBeginBackward:
      runner.begin_backward(s.slot);
      break;
    case StepOp::kBackward:
      runner.backward(s.slot, 1.0f / static_cast<float>(program_.mini_batch));
      break;
    case StepOp::kSend: {
      st = (this->*pack_)(s, message);
      const double start_us = stamp_start();
      if (st.ok())
        st = comm.send(s.peer, s.tag | tag_bits, {message, static_cast<size_t>(s.bytes)});
      stamp(s, start_us);
      break;
    }
    case StepOp::kRecv: {
      const double start_us = stamp_start();
      st = comm.recv(s.peer, s.tag | tag_bits, {message, static_cast<size_t>(s.bytes)});
      stamp(s, start_us);
      if (st.ok()) st = (this->*unpack_)(s, message);
      break;
    }
    case StepOp::kTieReduce:
      st = ties_->reduce();
      break;
    case StepOp::kAllReduce:
      st = (this->*allreduce_)();
      break;
    case StepOp::kOptimizer:
      if (!program_.world.empty()) st = clip_grads();
      if (st.ok()) runner.optimizer_step(iteration + 1);
      if (st.ok() && runner.sharded()) {
        st = gather_params(comm, runner, program_.group, allreduce_staging_);
      }
      break;
  }
  return st;
}

void RankRunner::record(const Step& s, double start_us) {
  if (trace_.size() >= trace_capacity_ || s.op == StepOp::kSend || s.op == StepOp::kBeginBackward) {
    return;
  }
  TraceEvent e{};
  e.kind = s.op == StepOp::kForward                                   ? TraceEvent::kForward
           : s.op == StepOp::kBackward                                ? TraceEvent::kBackward
           : s.op == StepOp::kRecv                                    ? TraceEvent::kRecv
           : s.op == StepOp::kAllReduce || s.op == StepOp::kTieReduce ? TraceEvent::kAllReduce
                                                                      : TraceEvent::kOptimizer;
  e.stage = program_.stage;
  e.micro_batch = s.micro_batch;
  e.peer = s.peer;
  e.gradient = s.gradient;
  e.bytes = s.bytes;
  e.start_us = start_us;
  e.end_us = now_us();
  trace_.push_back(e);  // capacity reserved in enable_trace: no allocation
}

void RankRunner::enable_trace(size_t max_events) {
  trace_.clear();
  trace_.reserve(max_events);
  trace_capacity_ = max_events;
  // Queued device work would otherwise be timed at its launch: a traced step waits for it.
  synchronize_traced_steps_ = max_events > 0 && !runner_->host_memory();
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

}  // namespace gp::exec
