#include "gp/exec/rank_session.h"

#include <algorithm>
#include <mutex>
#include <thread>
#include <utility>

#include "gp/model/model_io.h"
#include "runtime/checkpoint.h"

namespace gp::exec {

Result<std::unique_ptr<RankSession>> RankSession::open(std::shared_ptr<const plan::LoadedPlan> plan,
                                                       const SessionOptions& o) {
  std::unique_ptr<RankSession> s(new RankSession());
  s->plan_ = std::move(plan);
  const plan::LoadedPlan& p = *s->plan_;
  GP_ASSIGN_OR_RETURN(RankProgram program,
                      lower_rank_program(p.plan(), p.graph(), p.index(), o.rank));
  if (!o.data_dir.empty()) {
    GP_ASSIGN_OR_RETURN(
        s->data_, open_stage_data(o.data_dir, p.graph(), program.layout.op_indices(),
                                  p.plan().mini_batch(), o.shuffle, p.plan().training().seed()));
  }
  if (!o.eval_data_dir.empty()) {
    GP_RETURN_IF_ERROR(s->open_eval_data(o.eval_data_dir, program.layout.op_indices()));
  }
  GP_ASSIGN_OR_RETURN(
      s->runner_,
      RankRunner::create(std::move(program), p.graph(), p.plan().training(),
                         o.device != nullptr ? *o.device : cpu_device(), s->data_.get()));
  if (o.trace_events > 0) s->runner_->enable_trace(o.trace_events);
  return s;
}

RankSession::~RankSession() = default;

Status RankSession::open_eval_data(const std::string& dir, const std::vector<int>& stage_ops) {
  const int64_t mini_batch = plan().mini_batch();
  auto mine = open_stage_data(dir, graph(), stage_ops, mini_batch, /*shuffle=*/false, 0);
  if (!mine.ok()) return mine.status().with_context("--eval-data " + dir);
  eval_data_ = std::move(*mine);
  // A stage without inputs counts the samples by a file header, so that it runs as many
  // evaluation batches as the stages with inputs (which checked every header against theirs).
  int64_t samples = eval_data_->samples();
  if (samples == 0) {
    const auto rows = dataset_samples(dir, graph());
    if (!rows || *rows < mini_batch) {
      return invalid_argument(
          "--eval-data " + dir + ": " +
          (rows ? std::to_string(*rows) + " samples, fewer than the mini-batch of " +
                      std::to_string(mini_batch)
                : std::string("no input's .npy file there has a readable header")));
    }
    samples = *rows;
  }
  eval_batches_ = samples / mini_batch;
  return ok_status();
}

Result<double> RankSession::evaluate() {
  if (eval_data_ == nullptr) {
    return failed_precondition("rank " + std::to_string(rank()) +
                               ": no evaluation data (--eval-data)");
  }
  GP_ASSIGN_OR_RETURN(const double sum, runner_->evaluate(*eval_data_, eval_batches_));
  return sum / static_cast<double>(eval_samples());
}

bool RankSession::checkpoint_writer() const {
  const auto& mine = plan().stages(stage());
  return mine.device_ranks_size() > 0 && mine.device_ranks(0) == rank();
}

Status RankSession::resume(const std::string& dir,
                           const graphpipe::v1::CheckpointManifest& manifest) {
  return load_stage_checkpoint(dir, manifest, graph(), plan().training(),
                               runner_->mutable_stage_runner());
}

Status RankSession::bind(Communicator& comm) { return runner_->bind(comm); }

Status RankSession::write_checkpoint_part(const std::string& dir, int64_t iteration,
                                          const std::string& run_id) {
  StageRunner& runner = runner_->mutable_stage_runner();
  if (!runner.sharded()) {
    if (!checkpoint_writer()) return ok_status();
    return write_stage_checkpoint(dir, iteration, graph(), runner, run_id);
  }
  // ZeRO-1: checkpoints keep the unsharded layout, so that any plan resumes from them; every
  // replica takes part in gathering the state, the writer writes it.
  std::vector<float> state;
  GP_RETURN_IF_ERROR(runner.gather_state(state).with_context(
      "rank " + std::to_string(rank()) + ": gathering the sharded optimizer state"));
  if (!checkpoint_writer()) return ok_status();
  return write_stage_checkpoint(dir, iteration, graph(), runner, run_id, &state);
}

Status RankSession::commit_checkpoint(const std::string& dir, int64_t iteration,
                                      const std::string& run_id,
                                      const graphpipe::v1::CheckpointDataStream* stream) const {
  return exec::commit_checkpoint(dir, iteration, graph(), model::message_hash(plan()),
                                 plan().training(), run_id, stream);
}

Result<LocalRunResult> run_plan_locally(const graphpipe::v1::Plan& plan, int iterations,
                                        std::chrono::milliseconds timeout,
                                        std::vector<std::unique_ptr<RankSession>>* sessions,
                                        size_t trace_events, const Device& device,
                                        const std::string& data_dir, bool shuffle) {
  GP_ASSIGN_OR_RETURN(std::shared_ptr<const plan::LoadedPlan> loaded, plan::LoadedPlan::from(plan));
  return run_plan_locally(std::move(loaded), iterations, timeout, sessions, trace_events, device,
                          data_dir, shuffle);
}

Result<LocalRunResult> run_plan_locally(std::shared_ptr<const plan::LoadedPlan> loaded,
                                        int iterations, std::chrono::milliseconds timeout,
                                        std::vector<std::unique_ptr<RankSession>>* out_sessions,
                                        size_t trace_events, const Device& device,
                                        const std::string& data_dir, bool shuffle,
                                        const IterationCallback& on_iteration) {
  std::vector<std::unique_ptr<RankSession>> sessions;
  for (int r = 0; r < loaded->world_size(); ++r) {
    if (loaded->index().program_of_rank[r] < 0) continue;
    SessionOptions o;
    o.rank = r;
    o.device = &device;
    o.data_dir = data_dir;
    o.shuffle = shuffle;
    o.trace_events = trace_events;
    GP_ASSIGN_OR_RETURN(auto session, RankSession::open(loaded, o));
    sessions.push_back(std::move(session));
  }
  LoopbackHub hub(loaded->world_size(), timeout);
  // Each rank's loss per iteration, grown as they run: sized up front, --iterations 2^30 would
  // claim gigabytes per rank before the first step.
  std::vector<std::vector<double>> loss_sums(sessions.size());
  for (auto& per_rank : loss_sums) per_rank.reserve(std::min(iterations, 1 << 16));
  std::mutex mu;
  Status first_error;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < sessions.size(); ++i) {
    threads.emplace_back([&, i] {
      RankSession& session = *sessions[i];
      auto comm = hub.communicator(session.rank());
      Status bound = session.bind(*comm);
      for (int it = 0; it < iterations; ++it) {
        const auto start = std::chrono::steady_clock::now();
        auto loss = bound.ok() ? session.run_iteration(it) : Result<double>(bound);
        if (!loss.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first_error.ok()) first_error = loss.status();
          comm->abort("rank " + std::to_string(session.rank()) +
                      " failed: " + loss.status().message());
          return;
        }
        loss_sums[i].push_back(*loss);
        if (on_iteration) {
          on_iteration(
              session, it, *loss,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!first_error.ok()) return first_error;
  LocalRunResult result;
  for (int it = 0; it < iterations; ++it) {
    double sum = 0;
    for (const auto& per_rank : loss_sums) sum += per_rank[it];
    result.losses.push_back(sum / static_cast<double>(loaded->plan().mini_batch()));
  }
  if (out_sessions != nullptr) *out_sessions = std::move(sessions);
  return result;
}

}  // namespace gp::exec
