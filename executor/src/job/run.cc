#include "run.h"

#include <spdlog/fmt/fmt.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_guard.h"
#include "control/control_client.h"
#include "control/coordinator.h"
#include "control/key_store.h"
#include "gp/common/logging.h"
#include "gp/common/steady_clock.h"
#include "gp/exec/data_plane.h"
#include "gp/exec/device.h"
#include "gp/exec/device_info.h"
#include "gp/exec/gloo_communicator.h"
#include "gp/exec/nccl_layout.h"
#include "gp/exec/rank_session.h"
#include "gp/exec/reference_trainer.h"
#include "gp/model/model_io.h"
#include "gp/plan/plan_util.h"
#include "gp/profile_db/profile_db.h"
#include "heartbeat.h"
#include "job_outputs.h"
#include "measured_profile.h"
#include "runtime/checkpoint.h"
#include "stop_signals.h"

namespace gp::exec::daemon {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string token_or_env(const std::string& token) {
  if (!token.empty()) return token;
  const char* env = std::getenv("GP_AUTH_TOKEN");
  return env != nullptr ? env : "";
}

// Waits for rank 0 to publish the coordinator's address.
Result<std::string> read_coordinator_file(const std::string& path, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    auto text = model::read_file(path);
    if (text.ok() && !text->empty()) {
      std::string addr = *text;
      while (!addr.empty() && (addr.back() == '\n' || addr.back() == ' ')) addr.pop_back();
      return addr;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return Status(StatusCode::kDeadlineExceeded,
                "--coordinator-file " + path +
                    ": rank 0 did not publish the coordinator's address within " +
                    std::to_string(timeout.count() / 1000) + " s");
}

// A job id names files (the data plane's store keys, shared-memory rings): a plain name.
Status check_job_id(const std::string& id) {
  const bool plain = id.size() <= 64 && id.find_first_not_of(
                                            "abcdefghijklmnopqrstuvwxyz"
                                            "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789._-") == std::string::npos;
  if (plain && id != "." && id != "..") return ok_status();
  return invalid_argument("--job-id = '" + id +
                          "': must be at most 64 letters, digits, '.', '_' or '-'");
}

// The data plane's rendezvous through the coordinator (--rendezvous coordinator).
class CoordinatorRendezvous final : public RendezvousStore {
 public:
  CoordinatorRendezvous(ControlClient& client, int rank) : store_(client, rank) {}
  Status set(const std::string& key, const std::string& value) override {
    return store_.set(key, value);
  }
  Result<std::string> get(const std::string& key, milliseconds timeout) override {
    return store_.get(key, timeout);
  }

 private:
  CoordinatorStore store_;
};

// One rank's job under the control plane, in the order it runs: prepare (options, device, the
// session, outputs, the checkpoint to resume) → connect (rank 0 hosts the coordinator; everyone
// registers) → open the data plane → train (iterations, checkpoints, an agreed stop) → finish;
// a failure after registration is reported so the others learn of it within a heartbeat.
class RankJob {
 public:
  explicit RankJob(const RunOptions& options) : o_(options), log_(log::get("exec")) {}

  Result<int> run() {
    GP_RETURN_IF_ERROR(prepare());
    GP_RETURN_IF_ERROR(connect());
    // Every rank has registered: from here a stop goes through the coordinator, which has every
    // rank stop at one iteration (before, a rank waiting for the others ended at once).
    set_stop_exits_at_once(false);
    // The job's other ranks check that the checkpoint directory's lock names this job.
    if (dir_lock_ != nullptr) GP_RETURN_IF_ERROR(dir_lock_->record_job(registered_.job_id()));
    // From here on every rank is known to the coordinator: a failure is reported to it, so the
    // others learn of it within a heartbeat instead of waiting out their timeouts.
    heartbeat_ =
        std::make_unique<Heartbeat>(*client_, session_->runner(), plan(), o_.rank,
                                    milliseconds(o_.heartbeat_ms), timeout_, coordinator_name());
    Result<int> outcome = train();
    if (outcome.ok()) return outcome;
    return fail(outcome.status());
  }

 private:
  const graphpipe::v1::Plan& plan() const { return session_->plan(); }

  // torchrun's conventions where a scheduler sets them: MASTER_ADDR:MASTER_PORT is where rank 0
  // hosts the coordinator; --device cuda picks the GPU of LOCAL_RANK.
  void apply_environment() {
    const char* local_rank = std::getenv("LOCAL_RANK");
    if (o_.device == "cuda") o_.device = std::string("cuda:") + (local_rank ? local_rank : "0");
    if (o_.coordinator.empty() && o_.coordinator_file.empty()) {
      const char* addr = std::getenv("MASTER_ADDR");
      const char* port = std::getenv("MASTER_PORT");
      if (addr != nullptr && port != nullptr && *addr != '\0') {
        o_.coordinator = std::string(addr) + ":" + port;
      }
    }
  }

  // Everything checked before this rank talks to anyone.
  Status prepare() {
    apply_environment();
    GP_RETURN_IF_ERROR(check_job_id(o_.job_id));
    if (!o_.launcher_beacon.empty() && !o_.daemon_beacon.empty()) {
      return invalid_argument("give --launcher-beacon or --daemon-beacon, not both");
    }
    GP_RETURN_IF_ERROR(
        o_.daemon_beacon.empty()
            ? install_stop_signals(o_.launcher_beacon, o_.orphan_timeout_s)
            : install_stop_signals(o_.daemon_beacon, o_.orphan_timeout_s, BeaconOwner::kDaemon));
    timeout_ = milliseconds(static_cast<int64_t>(o_.timeout_s) * 1000);
    // Barriers wait longer than the heartbeat timeout, so that when a rank freezes the
    // coordinator's verdict (naming it) ends the wait rather than a waiting rank's own timeout,
    // which would blame the waiter.
    barrier_timeout_ = 2 * timeout_;
    token_ = token_or_env(o_.auth_token);
    // Rank 0 also serves the coordinator: its files must do for both ends.
    hosts_coordinator_ = o_.rank == 0 && !o_.external_coordinator;
    GP_RETURN_IF_ERROR(
        check_tls(o_.tls, hosts_coordinator_ ? TlsRole::kServerAndClient : TlsRole::kClient));
    if (o_.log_every < 1) {
      return invalid_argument("--log-every = " + std::to_string(o_.log_every) + ", must be >= 1");
    }
    GP_ASSIGN_OR_RETURN(const MatmulPrecision precision, parse_precision(o_.precision));
    GP_ASSIGN_OR_RETURN(device_, find_device(o_.device, precision));
    GP_ASSIGN_OR_RETURN(const std::shared_ptr<const plan::LoadedPlan> loaded,
                        plan::LoadedPlan::read(o_.plan));
    if (o_.world_size != loaded->world_size()) {
      return invalid_argument("--world-size = " + std::to_string(o_.world_size) +
                              ", but the plan has " + std::to_string(loaded->world_size()) +
                              " ranks");
    }
    SessionOptions so;
    so.rank = o_.rank;
    so.device = device_;
    so.data_dir = o_.data;  // only this rank's input ops' files
    so.shuffle = !o_.no_shuffle;
    so.eval_data_dir = o_.eval_data;
    GP_RETURN_IF_ERROR(check_eval_every());
    GP_ASSIGN_OR_RETURN(session_, RankSession::open(loaded, so));  // checks --rank
    if (!o_.trace.empty()) {
      const auto& program = plan().programs(loaded->index().program_of_rank[o_.rank]);
      session_->runner().enable_trace(static_cast<size_t>(program.instructions_size()) *
                                      static_cast<size_t>(o_.iterations));
    }
    GP_RETURN_IF_ERROR(prepare_measuring());
    GP_RETURN_IF_ERROR(prepare_outputs());
    GP_RETURN_IF_ERROR(prepare_resume());
    GP_RETURN_IF_ERROR(prepare_progress());
    if (!o_.kill_rank_at.empty()) {
      int kill_rank = -1;
      if (std::sscanf(o_.kill_rank_at.c_str(), "%d:%d", &kill_rank, &kill_at_) != 2) {
        return invalid_argument("--kill-rank-at = '" + o_.kill_rank_at +
                                "', expected RANK:ITERATION");
      }
      if (kill_rank != o_.rank || !o_.resume.empty()) kill_at_ = -1;
    }
    // Chosen before anyone registers: rank 0 hands out what the transport's ranks meet through.
    GP_ASSIGN_OR_RETURN(transport_, choose_transport(o_.data_plane, device_));
    if (transport_->setup != nullptr) nccl_plan_ = nccl_layout(plan());
    return ok_status();
  }

  Status check_eval_every() const {
    if (o_.eval_every == 0 || (o_.eval_every > 0 && !o_.eval_data.empty())) return ok_status();
    return invalid_argument("--eval-every = " + std::to_string(o_.eval_every) +
                            (o_.eval_every < 0 ? ", must be >= 0 (0: after the last iteration)"
                                               : " needs --eval-data DIR (the held-out samples)"));
  }

  // --slowdown and --measure-every: the clock and its windows, made before the step loop.
  Status prepare_measuring() {
    GP_RETURN_IF_ERROR(check_slowdown(o_.slowdown));
    if (o_.measure_every < 0) {
      return invalid_argument("--measure-every = " + std::to_string(o_.measure_every) +
                              ", must be >= 0 (0: never)");
    }
    StageRunner& stage = session_->runner().mutable_stage_runner();
    clock_ = std::make_unique<OpClock>(static_cast<int>(stage.op_indices().size()), o_.slowdown);
    stage.set_op_clock(clock_.get());
    if (o_.measure_every > 0) {
      const bool cuda = o_.device.starts_with("cuda");
      std::string name(device_->name());
      if (!cuda) {
        name = query_host().cpu_model;
      } else {
        for (const CudaDeviceInfo& d : query_cuda().devices) {
          if (o_.device == "cuda:" + std::to_string(d.index)) name = d.name;
        }
      }
      provenance_ = profile::make_provenance(cuda ? "cuda" : "cpu", name, "",
                                             "measured by a running job (run --measure-every)");
    }
    if (hosts_coordinator_ && !o_.measured_profile_out.empty()) {
      measured_ =
          std::make_unique<MeasuredProfile>(plan(), session_->graph(), o_.measured_profile_out);
    }
    return ok_status();
  }

  // Outputs are checked before anyone trains, not discovered unwritable afterwards.
  Status prepare_outputs() {
    if (o_.checkpoint_every < 0) {
      return invalid_argument("--checkpoint-every = " + std::to_string(o_.checkpoint_every) +
                              ", must be >= 0");
    }
    if (o_.checkpoint_every > 0 && o_.checkpoint_dir.empty()) {
      return invalid_argument("--checkpoint-every needs --checkpoint-dir");
    }
    if (o_.rank == 0) {
      GP_RETURN_IF_ERROR(check_writable("--metrics-out", o_.metrics_out));
      GP_RETURN_IF_ERROR(check_writable("--trace", o_.trace));
      GP_RETURN_IF_ERROR(check_writable("--verdict-file", o_.verdict_file));
      GP_RETURN_IF_ERROR(check_writable("--stop-file", o_.stop_file));
      GP_RETURN_IF_ERROR(check_writable("--measured-profile-out", o_.measured_profile_out));
      if (!o_.measured_profile_out.empty()) {
        GP_RETURN_IF_ERROR(model::format_for_path(o_.measured_profile_out)
                               .status()
                               .with_context("--measured-profile-out " + o_.measured_profile_out));
      }
    }
    if (!o_.checkpoint_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(o_.checkpoint_dir, ec);
      if (ec) {
        return invalid_argument("--checkpoint-dir " + o_.checkpoint_dir + ": " + ec.message());
      }
      GP_RETURN_IF_ERROR(check_writable(
          "--checkpoint-dir", (std::filesystem::path(o_.checkpoint_dir) / "LATEST").string()));
    }
    return ok_status();
  }

  Status prepare_resume() {
    // Rank 0 commits checkpoints: it holds the directory for the job, before anything is read
    // or removed there, and checks that a resume continues the checkpoint's seed and data.
    if (o_.rank == 0 && !o_.checkpoint_dir.empty()) {
      GP_ASSIGN_OR_RETURN(dir_lock_,
                          CheckpointDirLock::acquire(o_.checkpoint_dir, "--checkpoint-dir"));
    }
    if (o_.rank == 0 &&
        (!o_.checkpoint_dir.empty() || !o_.resume.empty() || !o_.resume_optional.empty())) {
      GP_ASSIGN_OR_RETURN(stream_, data_stream(plan().training().seed(), o_.data, !o_.no_shuffle,
                                               plan().mini_batch()));
    }
    // --resume-if-present (a requeued job's first attempt has nothing to resume): every rank
    // sees the same files, and none is written before every rank has registered, so all agree.
    if (!o_.resume_optional.empty()) {
      if (holds_checkpoint(o_.resume_optional)) {
        o_.resume = o_.resume_optional;
      } else if (o_.rank == 0) {
        log_->warn("--resume-if-present {}: no checkpoint there yet; starting from iteration 0",
                   o_.resume_optional);
      }
    }
    // The checkpoint the job resumes from: every rank checks every file of it, so all of them
    // pick the same one (a damaged newest checkpoint falls back to the previous one).
    if (!o_.resume.empty()) {
      std::vector<std::string> warnings;
      auto found = latest_checkpoint(o_.resume, &warnings);
      if (found.status().code() == StatusCode::kNotFound) {
        return Status(StatusCode::kNotFound,
                      "--resume " + o_.resume + ": " + found.status().message() +
                          "; --resume-if-present starts from iteration 0 when there is none");
      }
      GP_ASSIGN_OR_RETURN(manifest_, std::move(found));
      if (o_.rank == 0) {
        GP_RETURN_IF_ERROR(check_resume_stream(manifest_, stream_, o_.allow_new_seed, &warnings));
      }
      for (const auto& w : warnings) {
        if (o_.rank == 0) log_->warn("{}", w);
      }
      first_iteration_ = static_cast<int>(manifest_.iteration()) + 1;
    }
    // What an interrupted checkpoint left behind goes before anyone writes a new one (rank 0
    // commits checkpoints; no rank writes before the pipeline runs, which needs rank 0).
    if (o_.rank == 0 && !o_.checkpoint_dir.empty()) {
      GP_ASSIGN_OR_RETURN(auto removed, clean_torn_checkpoints(o_.checkpoint_dir));
      for (const auto& path : removed) log_->warn("removed a torn checkpoint file: {}", path);
    }
    return ok_status();
  }

  // Rank 0's progress lines and metrics file; a resumed run keeps the file's earlier entries
  // (and refuses one it cannot parse rather than dropping them).
  Status prepare_progress() {
    ProgressOptions po;
    po.mini_batch = plan().mini_batch();
    po.loss_ranks = count_loss_ranks(plan(), session_->graph());
    po.iterations = o_.iterations;
    po.log_every = o_.log_every;
    po.training = plan().training();
    po.predicted_samples_per_s = plan().predicted().throughput_samples_per_s();
    if (hosts_coordinator_) po.metrics_out = o_.metrics_out;
    if (hosts_coordinator_) po.tensorboard = o_.tensorboard;
    po.eval_samples = session_->eval_samples();
    progress_ = std::make_unique<ProgressLog>(std::move(po));
    return progress_->open(first_iteration_);
  }

  // Control plane: rank 0 hosts the coordinator unless told otherwise; every rank registers.
  Status connect() {
    address_ = o_.coordinator;
    if (hosts_coordinator_) {
      CoordinatorOptions co;
      co.listen_address = o_.coordinator.empty() ? "127.0.0.1:0" : o_.coordinator;
      co.plan = plan();
      co.world_size = o_.world_size;
      co.auth_token = token_;
      co.tls = o_.tls;
      co.heartbeat_timeout = timeout_;
      co.job_id = o_.job_id;
      co.on_metrics = [this](const graphpipe::v1::ReportMetricsRequest& r) {
        if (r.has_timings() && measured_ != nullptr) measured_->add(r.rank(), r.timings());
        progress_->add(r);
      };
      GP_ASSIGN_OR_RETURN(coordinator_, Coordinator::start(co));
      address_ = coordinator_->address();
      if (!o_.coordinator_file.empty()) {
        GP_RETURN_IF_ERROR(model::write_file_atomic(o_.coordinator_file, address_ + "\n"));
      }
      log_->info("rank 0: coordinator listening on {}", address_);
    } else if (address_.empty()) {
      if (o_.coordinator_file.empty()) {
        return invalid_argument("give --coordinator HOST:PORT or --coordinator-file FILE");
      }
      GP_ASSIGN_OR_RETURN(address_, read_coordinator_file(o_.coordinator_file, timeout_));
    }
    GP_ASSIGN_OR_RETURN(client_, ControlClient::connect(address_, token_, timeout_, o_.tls));
    graphpipe::v1::RegisterRequest reg;
    reg.set_rank(o_.rank);
    reg.set_world_size(o_.world_size);
    reg.set_plan_hash(model::message_hash(plan()));
    reg.set_host(o_.bind_host);
    reg.set_device(o_.device);
    if (transport_->setup != nullptr && o_.rank == 0) {
      GP_ASSIGN_OR_RETURN(auto ids, transport_->setup(nccl_plan_));
      for (auto& id : ids) reg.add_nccl_unique_ids(std::move(id));
    }
    GP_ASSIGN_OR_RETURN(registered_, client_->register_rank(reg, timeout_));
    return ok_status();
  }

  // The store directory the ranks meet in: --store-dir, else one beside the plan.
  Result<std::string> make_store_dir() const {
    std::string store_dir = o_.store_dir;
    if (store_dir.empty()) {
      store_dir = std::filesystem::path(o_.plan).parent_path() / ".graphpipe-store";
    }
    std::error_code ec;
    std::filesystem::create_directories(store_dir, ec);
    if (ec) return invalid_argument("--store-dir " + store_dir + ": " + ec.message());
    return store_dir;
  }

  // The transport chosen in prepare(), met through the ids rank 0 handed out (NCCL) or the store.
  Status open_data_plane() {
    GP_ASSIGN_OR_RETURN(const std::string store_dir, make_store_dir());
    DataPlaneOptions dp;
    dp.transport = o_.data_plane;
    dp.device = device_;
    GlooOptions& go = dp.gloo;
    go.rank = o_.rank;
    go.world_size = o_.world_size;
    go.store_dir = store_dir;
    go.prefix = registered_.job_id();
    go.hostname = o_.bind_host;
    // --rendezvous coordinator: ranks that share no filesystem meet through rank 0's coordinator.
    if (o_.rendezvous == "coordinator") {
      go.store = std::make_shared<CoordinatorRendezvous>(*client_, o_.rank);
    }
    // The data plane waits longer than the heartbeat timeout, so that when a rank hangs the
    // coordinator's verdict (naming it) arrives before a neighbour's receive gives up.
    go.timeout = 2 * timeout_;
    dp.nccl_layout = nccl_plan_;
    dp.nccl_unique_ids.assign(registered_.nccl_unique_ids().begin(),
                              registered_.nccl_unique_ids().end());
    dp.abort_reason = [this] { return heartbeat_->abort_reason(); };
    GP_ASSIGN_OR_RETURN(plane_, connect_data_plane(*transport_, dp));
    log_->info("rank {} of {}: stage {}, job {}, coordinator {}, data plane: {}", o_.rank,
               o_.world_size, session_->stage(), registered_.job_id(), address_,
               plane_.description);
    if (o_.cpu_affinity == "auto" && plane_.local_ranks.size() > 1) pin_compute_thread();
    heartbeat_->attach(*plane_.comm);
    return session_->bind(*plane_.comm);
  }

  // Co-located ranks' compute threads on distinct cores; a rank that cannot be pinned runs on.
  void pin_compute_thread() {
    auto cpu = pin_to_local_core(o_.rank, plane_.local_ranks);
    if (!cpu.ok()) {
      log_->warn("rank {}: not pinned to a core: {}", o_.rank, cpu.status().message());
    } else if (*cpu < 0) {
      log_->info("rank {}: {} ranks on this host and fewer cores: not pinned", o_.rank,
                 plane_.local_ranks.size());
    } else {
      log_->info("rank {}: compute thread pinned to cpu {}", o_.rank, *cpu);
    }
  }

  // Every part is on disk before rank 0 declares the checkpoint complete.
  Status checkpoint(int it) {
    const std::string& run_id = registered_.job_id();
    if (o_.rank != 0 && session_->checkpoint_writer()) {
      GP_RETURN_IF_ERROR(check_lock_holder(o_.checkpoint_dir, run_id, "--checkpoint-dir"));
    }
    GP_RETURN_IF_ERROR(session_->write_checkpoint_part(o_.checkpoint_dir, it, run_id));
    GP_RETURN_IF_ERROR(
        client_->barrier(o_.rank, "checkpoint-" + std::to_string(it), barrier_timeout_));
    if (o_.rank == 0) {
      GP_RETURN_IF_ERROR(session_->commit_checkpoint(o_.checkpoint_dir, it, run_id, &stream_));
      log_->info("checkpoint after iteration {} in {}", it, o_.checkpoint_dir);
      // Every rank reported its iterations before the barrier: the file matches the checkpoint.
      if (coordinator_) GP_RETURN_IF_ERROR(progress_->write_metrics());
    }
    return ok_status();
  }

  // A measured iteration's per-op times to the coordinator; rank 0 rewrites the profile with
  // what every rank has sent so far.
  Status report_timings(int it) {
    const RankRunner& runner = session_->runner();
    graphpipe::v1::RankTimings timings =
        rank_timings(*clock_, runner.stage_runner().op_indices(), it, runner.program().per_replica,
                     provenance_, runner.transfer_stamps());
    // On the coordinator's clock, rank 0 pairs this rank's messages with other hosts' ranks'.
    const double now_us = steady_us();
    if (const ClockEstimate clock = heartbeat_->clock_offset(now_us); clock.uncertainty_us >= 0) {
      timings.set_clock_offset_us(clock.offset_us);
      timings.set_clock_uncertainty_us(clock.uncertainty_us);
    }
    GP_RETURN_IF_ERROR(client_->report_timings(o_.rank, timings));
    return measured_ != nullptr ? measured_->write() : ok_status();
  }

  // With --eval-data: whether iteration `it` ends with an evaluation (every --eval-every, and the
  // last of the run), and if so this rank's part of the held-out loss. Every rank evaluates.
  Result<std::optional<double>> evaluate_after(int it, int last) {
    if (o_.eval_data.empty()) return std::optional<double>();
    if (it != last && (o_.eval_every == 0 || (it + 1) % o_.eval_every != 0)) {
      return std::optional<double>();
    }
    clock_->set_recording(false);  // the measured profile times training steps only
    session_->runner().set_stamping(false);
    const auto start = Clock::now();
    GP_ASSIGN_OR_RETURN(const double part, session_->evaluate());
    last_eval_s_ = std::chrono::duration<double>(Clock::now() - start).count();
    return std::optional<double>(part);
  }

  // One iteration's loss to the coordinator, refusing a non-finite one unless allowed.
  Status report_loss(int it, double loss, std::optional<double> eval_loss) {
    if (!session_->runner().stage_runner().has_loss()) return ok_status();
    if (!std::isfinite(loss) && !o_.allow_nonfinite) {
      nonfinite_ = true;
      return Status(StatusCode::kOutOfRange,
                    fmt::format("the loss is {} at iteration {} (rank {}, stage {}); "
                                "--allow-nonfinite trains on",
                                std::isnan(loss) ? "NaN" : (loss > 0 ? "inf" : "-inf"), it, o_.rank,
                                session_->stage()));
    }
    graphpipe::v1::IterationMetrics m;
    m.set_iteration(it);
    m.set_loss(loss);
    m.set_time_s(last_time_s_);
    const double grad_norm = session_->runner().grad_norm();
    if (!std::isnan(grad_norm)) m.set_grad_norm(grad_norm);  // computed with clipping only
    if (eval_loss) {
      m.set_eval_loss(*eval_loss);
      m.set_eval_time_s(last_eval_s_);
    }
    return client_->report_metrics(o_.rank, {m});
  }

  Result<int> train() {
    if (!o_.resume.empty()) {
      // Any plan of the same model may resume: tensors are per operator, not per rank.
      GP_RETURN_IF_ERROR(session_->resume(o_.resume, manifest_).with_context("--resume"));
      log_->info("rank {}: resuming after iteration {} from {}", o_.rank, manifest_.iteration(),
                 o_.resume);
    }
    GP_RETURN_IF_ERROR(open_data_plane());
    if (o_.slowdown != 1.0) {
      // Short sleeps end when asked (this thread runs the iterations).
      if (Status st = lower_timer_slack(); !st.ok()) {
        log_->warn("rank {}: {}", o_.rank, st.message());
      }
      log_->info("rank {}: compute slowed {:.1f}x (--slowdown)", o_.rank, o_.slowdown);
    }
    progress_->start();
    int64_t stop_after = -1;  // agreed with every rank once a stop is requested
    int stop_signal = 0;
    int last = o_.iterations - 1;
    for (int it = first_iteration_; it < o_.iterations; ++it) {
      if (it == kill_at_) std::raise(SIGKILL);  // fault injection for tests
      heartbeat_->set_iteration(it);
      failed_iteration_ = it;
      const bool measured = measured_iteration(it, first_iteration_, o_.measure_every);
      clock_->set_recording(measured);
      session_->runner().set_stamping(measured);
      const auto start = Clock::now();
      GP_ASSIGN_OR_RETURN(const double loss, session_->run_iteration(it));
      last_time_s_ = std::chrono::duration<double>(Clock::now() - start).count();
      if (measured) GP_RETURN_IF_ERROR(report_timings(it));
      heartbeat_->set_samples_per_s(static_cast<double>(plan().mini_batch()) / last_time_s_);
      GP_ASSIGN_OR_RETURN(const auto eval_loss, evaluate_after(it, o_.iterations - 1));
      GP_RETURN_IF_ERROR(report_loss(it, loss, eval_loss));
      // A requested stop: propose this boundary, then ask at each one until every rank has.
      if (stop_after < 0 && heartbeat_->stop_requested()) {
        GP_ASSIGN_OR_RETURN(auto decision, client_->propose_stop(o_.rank, it));
        stop_after = decision.stop_after_iteration();
        stop_signal = decision.signal();
        if (stop_after >= 0 && stop_after < it) {
          return internal_error(
              fmt::format("rank {} finished iteration {}, past the agreed stop after iteration {}",
                          o_.rank, it, stop_after));
        }
        if (stop_after >= 0) {
          log_->info("rank {}: {}; stopping after iteration {}", o_.rank, decision.reason(),
                     stop_after);
        }
      }
      const bool stop_here = stop_after == it && it < o_.iterations - 1;
      log_->debug("rank {}: iteration {} done", o_.rank, it);
      if (!o_.checkpoint_dir.empty() &&
          ((o_.checkpoint_every > 0 && (it + 1) % o_.checkpoint_every == 0) || stop_here)) {
        GP_RETURN_IF_ERROR(checkpoint(it));
      }
      if (stop_here) {
        last = it;
        break;
      }
    }
    failed_iteration_ = -1;
    return finish(last, stop_signal);
  }

  // Parts of the trace first (rank 0 merges them after the barrier), then the barrier with
  // heartbeats still running (a rank waiting for slower ones must not look dead), then FINISHED.
  Result<int> finish(int last, int stop_signal) {
    if (!o_.trace.empty()) {
      GP_RETURN_IF_ERROR(write_trace_part(o_.trace + ".rank" + std::to_string(o_.rank),
                                          session_->runner().trace()));
    }
    GP_RETURN_IF_ERROR(client_->barrier(o_.rank, "done", barrier_timeout_));
    heartbeat_->stop();
    graphpipe::v1::RankStatus done;
    done.set_rank(o_.rank);
    done.set_state(graphpipe::v1::RANK_STATE_FINISHED);
    done.set_iteration(last);
    if (coordinator_) {
      GP_RETURN_IF_ERROR(client_->report_status(done));
      progress_->finish();
      GP_RETURN_IF_ERROR(progress_->write_metrics());
      // Every rank reported its measured times before the barrier.
      if (measured_ != nullptr) GP_RETURN_IF_ERROR(measured_->write());
      if (!o_.trace.empty()) GP_RETURN_IF_ERROR(merge_trace(plan(), o_.world_size, o_.trace));
      // Keep serving until every rank has said FINISHED, so none of them meets a closed server.
      (void)coordinator_->wait_for_completion(timeout_);
    } else if (Status st = client_->report_status(done); !st.ok()) {
      // Training is complete; a coordinator that already shut down is not a failure.
      log_->debug("rank {}: final status not delivered: {}", o_.rank, st.message());
    }
    if (last < o_.iterations - 1) {
      log_->warn("rank {}: stopped after iteration {} of {}{}", o_.rank, last, o_.iterations,
                 o_.checkpoint_dir.empty() ? "" : " (checkpoint written)");
      if (o_.rank == 0 && !o_.stop_file.empty()) GP_RETURN_IF_ERROR(write_stop_file(last));
      return stop_signal > 0 ? 128 + stop_signal : 0;
    }
    return 0;
  }

  // Where the stop left the job, for the launcher's last line (written once every rank is done).
  Status write_stop_file(int last) const {
    std::string text = fmt::format("stopped_after {}\niterations {}\n", last, o_.iterations);
    if (!o_.checkpoint_dir.empty()) {
      text += "checkpoint " + checkpoint_format::iter_dir(o_.checkpoint_dir, last) + "\n";
    }
    return model::write_file_atomic(o_.stop_file, text).with_context("--stop-file");
  }

  // "the coordinator (rank 0) at HOST:PORT": what a rank that cannot reach it names.
  std::string coordinator_name() const {
    return std::string(o_.external_coordinator ? "the coordinator" : "the coordinator (rank 0)") +
           " at " + address_;
  }

  // The first rank other than this one that `error` names ("rank 2 (pid 7) exited while rank 1
  // waited ..."): the peer this rank lost, when its failure is about one; -1: none.
  int lost_peer(const std::string& error) const {
    for (size_t at = error.find("rank "); at != std::string::npos;
         at = error.find("rank ", at + 5)) {
      if (at > 0 && std::isalnum(static_cast<unsigned char>(error[at - 1]))) continue;
      size_t end = at + 5;
      int r = 0;
      while (end < error.size() && std::isdigit(static_cast<unsigned char>(error[end])) &&
             r < o_.world_size) {
        r = 10 * r + (error[end++] - '0');
      }
      if (end > at + 5 && r != o_.rank && r < o_.world_size) return r;
    }
    return -1;
  }

  // Reports the failure and waits for the coordinator's verdict, which may take a moment when
  // this rank lost a peer (the coordinator then finds the rank that stopped first). Returns what
  // this rank should say: its own error when the job is blamed on it (or no verdict came), the
  // verdict when another rank is blamed, and, when the coordinator cannot be reached, that:
  // then no rank can tell which failed first, so none blames a neighbour.
  Status await_verdict(const Status& failure, graphpipe::v1::RankStatus failed) {
    if (const int peer = lost_peer(failure.message()); peer >= 0) failed.set_lost_peer(peer);
    const auto deadline = Clock::now() + timeout_;
    for (;;) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      auto resp =
          client_->heartbeat(failed, std::clamp(left, milliseconds(200), milliseconds(2000)));
      if (!resp.ok()) {
        const StatusCode code = resp.status().code();
        if (code != StatusCode::kUnavailable && code != StatusCode::kDeadlineExceeded) {
          return failure;
        }
        return Status(StatusCode::kUnavailable,
                      "lost " + coordinator_name() + ": " + resp.status().message());
      }
      if (resp->abort()) {
        if (resp->failed_rank() == o_.rank) return failure;
        return Status(StatusCode::kAborted, "job aborted: " + resp->abort_reason());
      }
      if (Clock::now() >= deadline) return failure;
      std::this_thread::sleep_for(milliseconds(100));
    }
  }

  Result<int> fail(Status failure) {
    heartbeat_->stop();
    const std::string seen = failure.message();
    graphpipe::v1::RankStatus failed;
    failed.set_rank(o_.rank);
    failed.set_state(graphpipe::v1::RANK_STATE_FAILED);
    failed.set_iteration(std::max<int64_t>(failed_iteration_, 0));
    failed.set_error(seen);
    // A job aborted meanwhile (or a coordinator lost) explains the failure better than what this
    // rank saw: a peer's failure reaches its neighbours first; ranks further away see
    // connections close. Best effort, the coordinator learns that this rank knows and leaves,
    // so rank 0 need not wait for it.
    if (std::string why = heartbeat_->abort_reason(); !why.empty()) {
      failure = Status(StatusCode::kAborted, why);
      (void)client_->heartbeat(failed, milliseconds(1000));
    } else {
      failure = await_verdict(failure, failed);
    }
    if (seen.find(failure.message()) == std::string::npos) {
      log_->info("rank {}: what it saw itself: {}", o_.rank, seen);
    }
    if (coordinator_) {
      coordinator_->abort("rank 0 failed: " + seen, 0);  // no-op when aborted already
      if (Status st = write_verdict(o_.verdict_file, coordinator_->status()); !st.ok()) {
        log_->error("rank 0: {}", st.message());
      }
      // The iterations every rank completed count: a restart appends to them.
      if (Status st = progress_->write_metrics(); !st.ok()) {
        log_->error("rank 0: {}", st.message());
      }
      if (measured_ != nullptr) {
        if (Status st = measured_->write(); !st.ok()) log_->error("rank 0: {}", st.message());
      }
      // The others learn of the abort from their next heartbeat; serve it to them first. Live
      // ranks heartbeat every period from a thread of their own, so a few periods reach them
      // all; waiting out --timeout instead would only wait for the rank that died.
      coordinator_->wait_until_told(
          std::min(timeout_, milliseconds(3 * int64_t{o_.heartbeat_ms} + 1000)));
    }
    if (nonfinite_) {  // its own exit code, so that schedulers can tell it from a crash
      std::fprintf(stderr, "graphpipe-executor: error: %s\n", failure.message().c_str());
      return kExitNonFiniteLoss;
    }
    return failure;
  }

  RunOptions o_;
  std::shared_ptr<spdlog::logger> log_;
  milliseconds timeout_{0}, barrier_timeout_{0};
  std::string token_;
  bool hosts_coordinator_ = false;
  const Device* device_ = nullptr;
  std::unique_ptr<RankSession> session_;
  int first_iteration_ = 0;
  graphpipe::v1::CheckpointManifest manifest_;
  std::unique_ptr<CheckpointDirLock> dir_lock_;  // rank 0 with --checkpoint-dir
  graphpipe::v1::CheckpointDataStream stream_;   // rank 0: what its checkpoints record
  int kill_at_ = -1;
  std::unique_ptr<OpClock> clock_;        // the stage runner's (--slowdown, --measure-every)
  graphpipe::v1::Provenance provenance_;  // of this rank's measured times
  const Transport* transport_ = nullptr;  // from the transport table (data_plane.h)
  NcclLayout nccl_plan_;
  // Declared before the coordinator, which calls them, so that they outlive it.
  std::unique_ptr<ProgressLog> progress_;
  std::unique_ptr<MeasuredProfile> measured_;  // rank 0 with --measured-profile-out
  std::unique_ptr<Coordinator> coordinator_;
  std::string address_;
  std::unique_ptr<ControlClient> client_;
  graphpipe::v1::RegisterResponse registered_;
  // The data plane outlives the heartbeat, which may abort it; both outlive the session's
  // iterations.
  DataPlane plane_;
  std::unique_ptr<Heartbeat> heartbeat_;
  int64_t failed_iteration_ = -1;
  bool nonfinite_ = false;
  double last_time_s_ = 0;  // of the last iteration (nothing per iteration is kept)
  double last_eval_s_ = 0;  // of the last evaluation (--eval-data)
};

}  // namespace

bool holds_checkpoint(const std::string& dir) {
  // latest_checkpoint's NOT_FOUND, without reading anything: a damaged checkpoint counts, so
  // that resuming refuses it rather than starting over beside it.
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(dir) / "LATEST", ec)) return true;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 5 && name.starts_with("iter-") &&
        name.find_first_not_of("0123456789", 5) == std::string::npos &&
        std::filesystem::exists(it->path() / "MANIFEST.pbtxt", ec)) {
      return true;
    }
  }
  return false;
}

Result<int> run_rank(const RunOptions& options) {
  RankJob job(options);
  return job.run();
}

Status run_coordinator(const CoordinatorRunOptions& o) {
  GP_RETURN_IF_ERROR(check_tls(o.tls, TlsRole::kServer));
  // A plan no rank would run is refused here too, before the ranks are waited for.
  GP_ASSIGN_OR_RETURN(const auto loaded, plan::LoadedPlan::read(o.plan));
  CoordinatorOptions co;
  co.listen_address = o.listen;
  co.plan = loaded->plan();
  co.world_size = o.world_size;
  co.auth_token = token_or_env(o.auth_token);
  co.tls = o.tls;
  co.heartbeat_timeout = milliseconds(static_cast<int64_t>(o.timeout_s) * 1000);
  GP_ASSIGN_OR_RETURN(auto coordinator, Coordinator::start(co));
  if (!o.coordinator_file.empty()) {
    GP_RETURN_IF_ERROR(model::write_file_atomic(o.coordinator_file, coordinator->address() + "\n"));
  }
  log::get("exec")->info("coordinator for {} ranks listening on {}", o.world_size,
                         coordinator->address());
  return coordinator->wait_for_completion();
}

Status print_status(const std::string& coordinator, const std::string& auth_token,
                    const TlsOptions& tls, bool json) {
  GP_RETURN_IF_ERROR(check_tls(tls, TlsRole::kClient));
  GP_ASSIGN_OR_RETURN(auto client, ControlClient::connect(coordinator, token_or_env(auth_token),
                                                          std::chrono::seconds(5), tls));
  GP_ASSIGN_OR_RETURN(auto status, client->get_status());
  std::printf("%s", (json ? status_json(status) : status_text(status)).c_str());
  return ok_status();
}

}  // namespace gp::exec::daemon
