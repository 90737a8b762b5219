// A rank's job as the steps every way of running one shares:
//   load (the plan file, its weights, the model, plan::validate_plan)
//   → open (lower the rank's program, open its stage's data, set the stage up on its device)
//   → resume (optional: this stage's part of a checkpoint)
//   → bind (a data plane) → run iterations
//   → checkpoint hooks (write this stage's part; rank 0 commits once every part is on disk).
// `graphpipe-executor run` wraps one session in the control plane (coordinator, heartbeats,
// barriers) and the data plane's rendezvous; `local` (run_plan_locally) runs one session per
// thread over a loopback hub; the node daemon starts `run` processes. Nothing here talks to the
// coordinator or decides when to checkpoint: that is the caller's protocol.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/communicator.h"
#include "gp/exec/dataset.h"
#include "gp/exec/device.h"
#include "gp/exec/rank_runner.h"
#include "gp/model/graph.h"
#include "gp/plan/loaded_plan.h"
#include "gp/plan/plan_util.h"
#include "graphpipe/v1/checkpoint.pb.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec {

struct SessionOptions {
  int rank = 0;
  const Device* device = nullptr;  // nullptr: the CPU
  std::string data_dir;            // the stage's input ops read their samples here (dataset.h)
  bool shuffle = true;             // with the plan's seed
  size_t trace_events = 0;         // > 0: record that many step intervals (RankRunner::trace)
  // Held-out samples for evaluate() (the layout of data_dir's); "" for none.
  std::string eval_data_dir;
};

class RankSession {
 public:
  // Lowers the rank's program, opens its stage's data and sets the stage up on its device (its
  // input ops reading that data). Errors name the rank.
  static Result<std::unique_ptr<RankSession>> open(std::shared_ptr<const plan::LoadedPlan> plan,
                                                   const SessionOptions& options);
  ~RankSession();
  RankSession(const RankSession&) = delete;
  RankSession& operator=(const RankSession&) = delete;

  int rank() const { return runner_->rank(); }
  int stage() const { return runner_->stage(); }
  const plan::LoadedPlan& loaded() const { return *plan_; }
  const graphpipe::v1::Plan& plan() const { return plan_->plan(); }
  const model::Graph& graph() const { return plan_->graph(); }
  RankRunner& runner() { return *runner_; }
  const RankRunner& runner() const { return *runner_; }
  // Whether this rank writes its stage's part of a checkpoint (the stage's first replica: the
  // replicas hold the same parameters).
  bool checkpoint_writer() const;

  // Loads this stage's operators from the checkpoint `manifest` of `dir` describes (any plan of
  // the same model may resume it: tensors are per operator, not per rank).
  Status resume(const std::string& dir, const graphpipe::v1::CheckpointManifest& manifest);
  // Binds the data plane every iteration uses; `comm` must outlive the session's iterations.
  Status bind(Communicator& comm);
  // One training iteration; this rank's sum of per-sample losses (0 when it holds no loss).
  Result<double> run_iteration(int64_t iteration) { return runner_->run_iteration(iteration); }
  // The held-out loss with the parameters as they are: every rank of the plan runs its part of
  // the forward passes of eval_samples() samples (the whole mini-batches of the evaluation data,
  // in file order); returns this rank's part of their mean loss (0 when it holds no loss).
  // Refused without SessionOptions::eval_data_dir.
  Result<double> evaluate();
  // Samples each evaluation reads: the whole mini-batches the evaluation data holds (0: none).
  int64_t eval_samples() const { return eval_batches_ * plan().mini_batch(); }
  // Writes this stage's part of checkpoint `iteration` into `dir` when this rank is its writer
  // (else nothing; a stage sharding its optimizer state first gathers it from every replica, so
  // each of them takes part). Every rank's part must be on disk before rank 0 calls
  // commit_checkpoint.
  Status write_checkpoint_part(const std::string& dir, int64_t iteration,
                               const std::string& run_id);
  // Declares checkpoint `iteration` complete (rank 0, after every part is written), recording the
  // seed and data `stream` when given.
  Status commit_checkpoint(const std::string& dir, int64_t iteration, const std::string& run_id,
                           const graphpipe::v1::CheckpointDataStream* stream = nullptr) const;

 private:
  RankSession() = default;
  Status open_eval_data(const std::string& dir, const std::vector<int>& stage_ops);
  std::shared_ptr<const plan::LoadedPlan> plan_;
  std::unique_ptr<NpyDataset> data_;  // read by runner_'s input ops; outlives it
  std::unique_ptr<NpyDataset> eval_data_;
  int64_t eval_batches_ = 0;
  std::unique_ptr<RankRunner> runner_;  // destroyed first
};

struct LocalRunResult {
  std::vector<double> losses;  // per iteration: mean over the mini-batch
};

// Called from each rank's thread after each of its iterations (several threads at once): the
// rank's session, the iteration, its loss sum (run_iteration's value) and the iteration's time.
using IterationCallback =
    std::function<void(const RankSession& session, int64_t iteration, double loss, double time_s)>;

// Runs every rank of `plan` as a thread of this process over a LoopbackHub, one RankSession
// each: the in-process executor used by tests and by `graphpipe-executor local`. The first
// failing rank aborts the others; its error is returned. With `trace_events` > 0 each rank
// records that many intervals. Every rank runs on `device` (the ranks' threads share it). With
// `data_dir` each rank reads its input ops' samples from there (dataset.h; shuffled with the
// plan's seed unless !shuffle). The plan is checked first (plan::validate_plan): a broken
// schedule is refused, not run. `sessions`, when given, receives the sessions after the run, for
// tests that inspect the trained parameters and `local` that writes their traces.
// `on_iteration`, when set, sees every iteration as it completes (`local`'s live metrics).
Result<LocalRunResult> run_plan_locally(
    std::shared_ptr<const plan::LoadedPlan> plan, int iterations, std::chrono::milliseconds timeout,
    std::vector<std::unique_ptr<RankSession>>* sessions = nullptr, size_t trace_events = 0,
    const Device& device = cpu_device(), const std::string& data_dir = "", bool shuffle = true,
    const IterationCallback& on_iteration = {});
// The same for a plan in memory (plan::LoadedPlan::from checks it first).
Result<LocalRunResult> run_plan_locally(
    const graphpipe::v1::Plan& plan, int iterations, std::chrono::milliseconds timeout,
    std::vector<std::unique_ptr<RankSession>>* sessions = nullptr, size_t trace_events = 0,
    const Device& device = cpu_device(), const std::string& data_dir = "", bool shuffle = true);

}  // namespace gp::exec
