// Runs one rank's instruction stream of a plan: the executor's step loop. The runner is created
// from the lowered program (lower_rank_program in rank_program.h: the stage's layout, slots,
// message layouts, tags), which names the stage's buffers every message piece uses, so an
// iteration is a straight loop over the program's steps that allocates nothing and logs nothing.
//
// On a device without host memory, messages and the data-parallel all-reduce go through host
// buffers allocated at creation: a send waits for the tensor to arrive on the host (copy_to_host
// synchronizes the device), a received gradient is added on the host to the device's copy, and
// the all-reduce downloads, reduces and uploads the flat gradients. These copies serialize with
// the device's compute; the device is synchronized at the end of every iteration, so an error of
// its queued work fails that iteration.
//
// With a data plane that moves device memory (Communicator::device_memory(), NCCL), a message is
// packed on the device into its own region of a staging buffer (every send and receive of an
// iteration has one, allocated by bind()), handed to the communicator, and
// unpacked on the device; a received gradient is added on the device, in the same order. Nothing
// is copied through the host, and the iteration ends with Communicator::wait_all().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/common/steady_clock.h"
#include "gp/exec/communicator.h"
#include "gp/exec/dataset.h"
#include "gp/exec/device.h"
#include "gp/exec/rank_program.h"
#include "gp/exec/stage_runner.h"
#include "gp/model/graph.h"
#include "gp/plan/plan_util.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec {

// One measured interval of a rank's step loop (for Chrome traces).
struct TraceEvent {
  enum Kind : uint8_t { kForward, kBackward, kAllReduce, kOptimizer, kRecv } kind;
  int stage = 0;
  int micro_batch = 0;
  int peer = -1;          // kRecv: the sender
  bool gradient = false;  // kRecv: gradient or activation
  int64_t bytes = 0;
  double start_us = 0;  // microseconds since the Unix epoch (comparable across processes)
  double end_us = 0;
};

class TieReducer;

class RankRunner {
 public:
  ~RankRunner();
  // Lowers the rank's program (lower_rank_program) and runs it on `device` with synthetic data.
  // `graph` must be built from plan.model() and `index` from plan::validate_plan (tests that
  // build plans by hand may use validate_plan_structure alone).
  static Result<std::unique_ptr<RankRunner>> create(const graphpipe::v1::Plan& plan,
                                                    const model::Graph& graph,
                                                    const plan::PlanIndex& index, int rank,
                                                    const Device& device = cpu_device());
  // Runs a lowered program of a plan on `graph` (which must outlive the runner) on `device`; its
  // stage's graph inputs read `data` (which must outlive the runner; nullptr: synthetic data).
  static Result<std::unique_ptr<RankRunner>> create(RankProgram program, const model::Graph& graph,
                                                    const graphpipe::v1::TrainingConfig& training,
                                                    const Device& device = cpu_device(),
                                                    const DataSource* data = nullptr);

  // Binds the data plane every iteration uses, once, before the first: the step loop's message
  // buffers and pack/unpack paths are chosen here (a device-memory data plane gets its staging
  // buffer allocated now), so run_iteration has no branch on where memory lives. `comm` must
  // outlive the runner's iterations; binding again replaces it. Refused (Unimplemented, naming
  // the rank) for training.clip_grad_norm over a device data plane, and for a stage sharding its
  // optimizer state (Stage.shard_optimizer) over one, before any iteration runs.
  Status bind(Communicator& comm);
  // One training iteration over the bound data plane; returns this rank's sum of per-sample
  // losses (0 if it holds none). Refused before bind().
  Result<double> run_iteration(int64_t iteration);
  // Evaluation between iterations: the program's forward steps and forward messages only, over
  // `iterations` mini-batches of `data` (held-out samples, read in order: mini-batch k from
  // sample k * mini_batch); every rank of the plan must call it with the same count. Returns
  // this rank's sum of per-sample losses over them (0 if it holds none). Its messages carry
  // their own tags, so none meets a training iteration's.
  Result<double> evaluate(const DataSource& data, int64_t iterations);

  // Records up to `max_events` intervals from now on (preallocated; recording never allocates).
  void enable_trace(size_t max_events);

  // One send or receive of a stamped iteration, on the steady clock (which every process of a
  // host shares), microseconds: a send from handing the message to the data plane until the call
  // returned, a receive from asking for it until it was there. `tag` is the program's.
  struct TransferStamp {
    int peer = 0;
    uint64_t tag = 0;
    int64_t bytes = 0;
    bool send = false;
    double start_us = 0;
    double end_us = 0;
  };
  // Stamps the sends and receives of the iterations run while on (into buffers bind() made: no
  // allocation); never on a device data plane, whose calls return before the transfer.
  void set_stamping(bool on) { stamping_ = on && !stamps_.empty(); }
  // The last stamped iteration's, in program order.
  std::span<const TransferStamp> transfer_stamps() const { return {stamps_.data(), stamps_used_}; }
  const std::vector<TraceEvent>& trace() const { return trace_; }

  int rank() const { return program_.rank; }
  int stage() const { return program_.stage; }
  const RankProgram& program() const { return program_; }
  const StageRunner& stage_runner() const { return *runner_; }
  StageRunner& mutable_stage_runner() { return *runner_; }  // checkpoints
  // The instruction being executed (for live status), -1 between iterations.
  int current_instruction() const { return current_.load(std::memory_order_relaxed); }
  // The model's gradient L2 norm (before clipping) of the last iteration: only computed, at no
  // extra cost, where training.clip_grad_norm > 0 reduces it; NaN otherwise.
  double grad_norm() const { return grad_norm_; }

 private:
  using Step = ProgramStep;
  using Piece = MessagePiece;

  RankRunner() = default;
  // The tensor a piece of a message is read from (send) or written into (receive): the value
  // going forward, or the gradient going back.
  TensorView piece_view(const Step& s, const Piece& p) const;
  // The step's pieces into / out of a message, one routine per path, chosen by bind(): host
  // memory over a host data plane; device memory over a host data plane, through the device's
  // copies (the errors are theirs); device memory within a device data plane.
  Status pack_host(const Step& s, std::byte* out) const;
  Status unpack_host(const Step& s, const std::byte* in);
  Status pack_via_host(const Step& s, std::byte* out) const;
  Status unpack_via_host(const Step& s, const std::byte* in);
  Status pack_on_device(const Step& s, std::byte* out) const;
  Status unpack_on_device(const Step& s, const std::byte* in);
  // Sums the flat parameter gradients over the stage's replicas, the same three ways.
  Status allreduce_host();
  Status allreduce_via_host();
  Status allreduce_on_device();
  // training.clip_grad_norm: the model's gradient norm summed over every rank, then scaled.
  Status clip_grads();
  // One step of the loop (`message`: its message buffer; `tag_bits`: or-ed into a message's tag,
  // the iteration's parity and, evaluating, the evaluation's bit), adding a forward's losses to
  // `loss`; and its interval, when traced.
  Status run_step(const Step& s, std::byte* message, int64_t iteration, uint64_t tag_bits,
                  double& loss);
  void record(const Step& s, double start_us);
  void size_stamps(const Communicator& comm);
  double stamp_start() const { return stamping_ ? steady_us() : 0; }
  void stamp(const Step& s, double start_us) {
    if (stamping_ && stamps_used_ < stamps_.size()) {
      stamps_[stamps_used_++] = {s.peer,   s.tag,      s.bytes, s.op == StepOp::kSend,
                                 start_us, steady_us()};
    }
  }

  // The lowered program (every piece's index into runner_'s exports or external inputs).
  RankProgram program_;
  std::vector<float> norm_sum_;
  // On a data plane that sums device memory: the norm's float there (made by bind()).
  DeviceBuffer norm_device_;
  double grad_norm_ = std::numeric_limits<double>::quiet_NaN();
  std::unique_ptr<StageRunner> runner_;
  std::vector<std::byte> staging_;
  // Devices without host memory: a received gradient's current value (fan-in adds on the host)
  // and the flat parameter gradients for the all-reduce.
  std::vector<float> grad_scratch_;
  std::vector<float> allreduce_staging_;
  // Tied parameters' copies (model.param_ties) summed before the all-reduce; made by bind().
  std::unique_ptr<TieReducer> ties_;
  // A device-memory data plane's messages, one region per send and receive of an iteration.
  DeviceBuffer device_staging_;
  // Bound by bind(): the data plane, each step's message buffer (host staging_ or its region of
  // device_staging_) and the matching pack, unpack and all-reduce.
  Communicator* comm_ = nullptr;
  std::vector<std::byte*> message_of_step_;
  Status (RankRunner::*pack_)(const Step&, std::byte*) const = nullptr;
  Status (RankRunner::*unpack_)(const Step&, const std::byte*) = nullptr;
  Status (RankRunner::*allreduce_)() = nullptr;
  std::atomic<int> current_{-1};
  std::vector<TraceEvent> trace_;
  size_t trace_capacity_ = 0;
  bool synchronize_traced_steps_ = false;
  std::vector<TransferStamp> stamps_;  // one per send and receive step (bind())
  size_t stamps_used_ = 0;
  bool stamping_ = false;
};

// The measured events of several ranks as a Chrome trace in the simulator's format (times from
// the earliest event).
std::string measured_trace_json(const graphpipe::v1::Plan& plan,
                                const std::vector<std::pair<int, std::vector<TraceEvent>>>& ranks);

}  // namespace gp::exec
