#include "run.h"

#include <spdlog/fmt/fmt.h>
#include <unistd.h>

#include <atomic>
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

#include "gp/common/logging.h"
#include "gp/exec/checkpoint.h"
#include "gp/exec/control_client.h"
#include "gp/exec/coordinator.h"
#include "gp/exec/data_plane.h"
#include "gp/exec/device.h"
#include "gp/exec/nccl.h"
#include "gp/exec/rank_session.h"
#include "gp/exec/reference_trainer.h"
#include "gp/graph/model_io.h"
#include "gp/graph/plan_util.h"
#include "job_outputs.h"
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

int64_t unix_ms() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Waits for rank 0 to publish the coordinator's address.
Result<std::string> read_coordinator_file(const std::string& path, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    auto text = graph::read_file(path);
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

// Sends heartbeats with the rank's live position; aborts the data plane when the coordinator
// says the job is over or cannot be reached for longer than the timeout; passes a stop signal on.
class Heartbeat {
 public:
  Heartbeat(ControlClient& client, const RankRunner& runner, const graphpipe::v1::Plan& plan,
            int rank, milliseconds period, milliseconds timeout)
      : client_(client),
        runner_(runner),
        plan_(plan),
        rank_(rank),
        period_(period),
        timeout_(timeout),
        thread_([this] { loop(); }) {}
  ~Heartbeat() { stop(); }

  // The data plane to abort when the job is aborted (it may be set up after heartbeats start:
  // NCCL's set-up can take longer than the coordinator waits for a silent rank).
  void attach(Communicator& comm) {
    std::lock_guard<std::mutex> lock(mu_);
    comm_ = &comm;
    if (!reason_.empty()) comm.abort(reason_);
  }
  void set_iteration(int64_t it) { iteration_.store(it); }
  void set_samples_per_s(double v) { samples_per_s_.store(v); }
  // The coordinator said a stop was requested (by any rank's signal or the operator).
  bool stop_requested() const { return stop_requested_.load(); }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  std::string abort_reason() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }

 private:
  void loop() {
    auto last_ok = Clock::now();
    bool stop_sent = false;
    const int program = [&] {
      for (int p = 0; p < plan_.programs_size(); ++p) {
        if (plan_.programs(p).rank() == rank_) return p;
      }
      return -1;
    }();
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, period_, [&] { return stopping_; })) {
      lock.unlock();
      if (const int sig = stop_signal(); sig != 0 && !stop_sent) {
        stop_sent = client_.request_stop(rank_, sig, signal_name(sig)).ok();
      }
      graphpipe::v1::RankStatus st;
      st.set_rank(rank_);
      st.set_state(graphpipe::v1::RANK_STATE_RUNNING);
      st.set_iteration(iteration_.load());
      st.set_samples_per_s(samples_per_s_.load());
      const int k = runner_.current_instruction();
      st.set_instruction_index(k);
      if (k >= 0 && program >= 0 && k < plan_.programs(program).instructions_size()) {
        st.set_instruction(
            graph::describe_instruction(plan_, plan_.programs(program).instructions(k)));
      }
      st.set_unix_time_ms(unix_ms());
      auto resp = client_.heartbeat(st);
      std::string reason;
      if (resp.ok()) {
        last_ok = Clock::now();
        if (resp->abort()) reason = "job aborted: " + resp->abort_reason();
        if (resp->stop_requested()) stop_requested_.store(true);
      } else if (Clock::now() - last_ok > timeout_) {
        reason = "lost the coordinator at " + client_.address() + ": " + resp.status().message();
      }
      lock.lock();
      if (!reason.empty() && reason_.empty()) {
        reason_ = reason;
        if (comm_ != nullptr) comm_->abort(reason);
      }
    }
  }

  ControlClient& client_;
  Communicator* comm_ = nullptr;
  const RankRunner& runner_;
  const graphpipe::v1::Plan& plan_;
  int rank_;
  milliseconds period_, timeout_;
  std::atomic<int64_t> iteration_{0};
  std::atomic<double> samples_per_s_{0};
  std::atomic<bool> stop_requested_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::string reason_;
  std::thread thread_;
};

}  // namespace

Result<int> run_rank(const RunOptions& options) {
  auto log = log::get("exec");
  RunOptions o = options;
  // torchrun's conventions where a scheduler sets them: MASTER_ADDR:MASTER_PORT is where rank 0
  // hosts the coordinator; --device cuda picks the GPU of LOCAL_RANK.
  const char* local_rank = std::getenv("LOCAL_RANK");
  if (o.device == "cuda") o.device = std::string("cuda:") + (local_rank ? local_rank : "0");
  if (o.coordinator.empty() && o.coordinator_file.empty()) {
    const char* addr = std::getenv("MASTER_ADDR");
    const char* port = std::getenv("MASTER_PORT");
    if (addr != nullptr && port != nullptr && *addr != '\0') {
      o.coordinator = std::string(addr) + ":" + port;
    }
  }
  GP_RETURN_IF_ERROR(install_stop_signals(o.launcher_beacon, o.orphan_timeout_s));
  const milliseconds timeout(static_cast<int64_t>(o.timeout_s) * 1000);
  const std::string token = token_or_env(o.auth_token);
  // Rank 0 also serves the coordinator: its files must do for both ends.
  const bool hosts_coordinator = o.rank == 0 && !o.external_coordinator;
  GP_RETURN_IF_ERROR(
      check_tls(o.tls, hosts_coordinator ? TlsRole::kServerAndClient : TlsRole::kClient));
  if (o.log_every < 1) {
    return invalid_argument("--log-every = " + std::to_string(o.log_every) + ", must be >= 1");
  }
  GP_ASSIGN_OR_RETURN(const MatmulPrecision precision, parse_precision(o.precision));
  GP_ASSIGN_OR_RETURN(const Device* device, find_device(o.device, precision));
  GP_ASSIGN_OR_RETURN(const std::shared_ptr<const LoadedPlan> loaded, LoadedPlan::read(o.plan));
  const graphpipe::v1::Plan& plan = loaded->plan();
  const graph::Graph& graph = loaded->graph();
  if (o.world_size != loaded->world_size()) {
    return invalid_argument("--world-size = " + std::to_string(o.world_size) +
                            ", but the plan has " + std::to_string(loaded->world_size()) +
                            " ranks");
  }
  SessionOptions so;
  so.rank = o.rank;
  so.device = device;
  so.data_dir = o.data;  // only this rank's input ops' files
  so.shuffle = !o.no_shuffle;
  if (!o.trace.empty()) {
    so.trace_events =
        static_cast<size_t>(
            plan.programs(loaded->index().program_of_rank[o.rank]).instructions_size()) *
        static_cast<size_t>(o.iterations);
  }
  GP_ASSIGN_OR_RETURN(const std::unique_ptr<RankSession> session, RankSession::open(loaded, so));
  RankRunner& runner = session->runner();
  if (o.checkpoint_every < 0) {
    return invalid_argument("--checkpoint-every = " + std::to_string(o.checkpoint_every) +
                            ", must be >= 0");
  }
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) {
    return invalid_argument("--checkpoint-every needs --checkpoint-dir");
  }
  // Outputs are checked before anyone trains, not discovered unwritable afterwards.
  if (o.rank == 0) {
    GP_RETURN_IF_ERROR(check_writable("--metrics-out", o.metrics_out));
    GP_RETURN_IF_ERROR(check_writable("--trace", o.trace));
    GP_RETURN_IF_ERROR(check_writable("--verdict-file", o.verdict_file));
  }
  if (!o.checkpoint_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.checkpoint_dir, ec);
    if (ec) return invalid_argument("--checkpoint-dir " + o.checkpoint_dir + ": " + ec.message());
    GP_RETURN_IF_ERROR(check_writable(
        "--checkpoint-dir", (std::filesystem::path(o.checkpoint_dir) / "LATEST").string()));
  }
  // The checkpoint the job resumes from: every rank checks every file of it, so all of them pick
  // the same one (a damaged newest checkpoint falls back to the previous one).
  int first_iteration = 0;
  graphpipe::v1::CheckpointManifest manifest;
  if (!o.resume.empty()) {
    std::vector<std::string> warnings;
    GP_ASSIGN_OR_RETURN(manifest, latest_checkpoint(o.resume, &warnings));
    for (const auto& w : warnings) {
      if (o.rank == 0) log->warn("{}", w);
    }
    first_iteration = static_cast<int>(manifest.iteration()) + 1;
  }
  // What an interrupted checkpoint left behind goes before anyone writes a new one (rank 0
  // commits checkpoints; no rank writes before the pipeline runs, which needs rank 0).
  if (o.rank == 0 && !o.checkpoint_dir.empty()) {
    GP_ASSIGN_OR_RETURN(auto removed, clean_torn_checkpoints(o.checkpoint_dir));
    for (const auto& path : removed) log->warn("removed a torn checkpoint file: {}", path);
  }
  int kill_at = -1;
  if (!o.kill_rank_at.empty()) {
    int kill_rank = -1;
    if (std::sscanf(o.kill_rank_at.c_str(), "%d:%d", &kill_rank, &kill_at) != 2) {
      return invalid_argument("--kill-rank-at = '" + o.kill_rank_at + "', expected RANK:ITERATION");
    }
    if (kill_rank != o.rank || !o.resume.empty()) kill_at = -1;
  }
  // A device whose memory the host cannot read exchanges it over the device data plane (NCCL);
  // host memory goes over shared memory or Gloo.
  const bool use_nccl =
      o.data_plane == "nccl" || (o.data_plane == "auto" && !device->host_memory());
  if (use_nccl && device->host_memory()) {
    return invalid_argument("--data-plane nccl needs --device cuda:N (this rank runs on " +
                            std::string(device->name()) + ", whose memory is the host's)");
  }
  const NcclLayout nccl_plan = use_nccl ? nccl_layout(plan) : NcclLayout{};

  // Control plane: rank 0 hosts the coordinator unless told otherwise.
  // Outlives the coordinator, which calls it.
  ProgressLog progress(plan.mini_batch(), count_loss_ranks(plan, graph), o.iterations, o.log_every);
  std::unique_ptr<Coordinator> coordinator;
  std::string address = o.coordinator;
  if (hosts_coordinator) {
    CoordinatorOptions co;
    co.listen_address = o.coordinator.empty() ? "127.0.0.1:0" : o.coordinator;
    co.plan = plan;
    co.world_size = o.world_size;
    co.auth_token = token;
    co.tls = o.tls;
    co.heartbeat_timeout = timeout;
    co.on_metrics = [&progress](const graphpipe::v1::ReportMetricsRequest& r) { progress.add(r); };
    GP_ASSIGN_OR_RETURN(coordinator, Coordinator::start(co));
    address = coordinator->address();
    if (!o.coordinator_file.empty()) {
      GP_RETURN_IF_ERROR(graph::write_file_atomic(o.coordinator_file, address + "\n"));
    }
    log->info("rank 0: coordinator listening on {}", address);
  } else if (address.empty()) {
    if (o.coordinator_file.empty()) {
      return invalid_argument("give --coordinator HOST:PORT or --coordinator-file FILE");
    }
    GP_ASSIGN_OR_RETURN(address, read_coordinator_file(o.coordinator_file, timeout));
  }
  GP_ASSIGN_OR_RETURN(auto client, ControlClient::connect(address, token, timeout, o.tls));
  graphpipe::v1::RegisterRequest reg;
  reg.set_rank(o.rank);
  reg.set_world_size(o.world_size);
  reg.set_plan_hash(graph::message_hash(plan));
  reg.set_host(o.bind_host);
  reg.set_device(o.device);
  if (use_nccl && o.rank == 0) {
    GP_ASSIGN_OR_RETURN(auto ids, make_nccl_unique_ids(nccl_plan.communicators()));
    for (auto& id : ids) reg.add_nccl_unique_ids(std::move(id));
  }
  GP_ASSIGN_OR_RETURN(auto registered, client->register_rank(reg, timeout));
  const std::string run_id = registered.job_id();

  // From here on every rank is known to the coordinator: a failure is reported to it, so the
  // others learn of it within a heartbeat instead of waiting out their timeouts.
  DataPlane plane;
  Heartbeat heartbeat(*client, runner, plan, o.rank, milliseconds(o.heartbeat_ms), timeout);
  int64_t failed_iteration = -1;
  bool nonfinite = false;
  // Barriers wait longer than the heartbeat timeout, so that when a rank freezes the
  // coordinator's verdict (naming it) ends the wait rather than a waiting rank's own timeout,
  // which would blame the waiter.
  const milliseconds barrier_timeout = 2 * timeout;
  std::vector<double> times;  // of the iterations this run completed
  auto train = [&]() -> Result<int> {
    if (!o.resume.empty()) {
      // Any plan of the same model may resume: tensors are per operator, not per rank.
      GP_RETURN_IF_ERROR(session->resume(o.resume, manifest).with_context("--resume"));
      log->info("rank {}: resuming after iteration {} from {}", o.rank, manifest.iteration(),
                o.resume);
    }
    // Data plane.
    std::string store_dir = o.store_dir;
    if (store_dir.empty())
      store_dir = std::filesystem::path(o.plan).parent_path() / ".graphpipe-store";
    std::error_code ec;
    std::filesystem::create_directories(store_dir, ec);
    if (ec) return invalid_argument("--store-dir " + store_dir + ": " + ec.message());
    // Every rank must use the same data plane; the one that finds out tells the coordinator.
    if (nccl_plan.communicators() > 0 && registered.nccl_unique_ids_size() == 0) {
      return failed_precondition(
          "rank " + std::to_string(o.rank) +
          " uses the NCCL data plane, but rank 0 does not (it handed out no NCCL ids): give "
          "every rank the same --device kind and --data-plane");
    }
    if (!use_nccl && registered.nccl_unique_ids_size() > 0) {
      return failed_precondition("rank 0 uses the NCCL data plane (it handed out " +
                                 std::to_string(registered.nccl_unique_ids_size()) +
                                 " NCCL ids), but rank " + std::to_string(o.rank) + " uses " +
                                 (device->host_memory()
                                      ? "host memory (" + std::string(device->name()) + ")"
                                      : "--data-plane " + o.data_plane) +
                                 ": give every rank the same --device kind and --data-plane");
    }
    if (use_nccl) {
      NcclOptions no;
      no.device = device;
      no.rank = o.rank;
      no.layout = nccl_plan;
      no.unique_ids.assign(registered.nccl_unique_ids().begin(),
                           registered.nccl_unique_ids().end());
      no.timeout = 2 * timeout;  // as Gloo's below
      no.abort_reason = [&heartbeat] { return heartbeat.abort_reason(); };
      GP_ASSIGN_OR_RETURN(plane.comm, make_nccl_communicator(no));
      plane.description =
          "nccl (" + std::to_string(nccl_plan.communicators()) + " communicators in the job)";
    } else {
      DataPlaneOptions dp;
      dp.transport = o.data_plane;
      GlooOptions& go = dp.gloo;
      go.rank = o.rank;
      go.world_size = o.world_size;
      go.store_dir = store_dir;
      go.prefix = registered.job_id();
      go.hostname = o.bind_host;
      // The data plane waits longer than the heartbeat timeout, so that when a rank hangs the
      // coordinator's verdict (naming it) arrives before a neighbour's receive gives up.
      go.timeout = 2 * timeout;
      GP_ASSIGN_OR_RETURN(plane, make_data_plane(dp));
    }
    Communicator& comm = *plane.comm;
    log->info("rank {} of {}: stage {}, job {}, coordinator {}, data plane: {}", o.rank,
              o.world_size, session->stage(), registered.job_id(), address, plane.description);
    if (o.cpu_affinity == "auto" && plane.local_ranks.size() > 1) {
      auto cpu = pin_to_local_core(o.rank, plane.local_ranks);
      if (!cpu.ok()) {
        log->warn("rank {}: not pinned to a core: {}", o.rank, cpu.status().message());
      } else if (*cpu < 0) {
        log->info("rank {}: {} ranks on this host and fewer cores: not pinned", o.rank,
                  plane.local_ranks.size());
      } else {
        log->info("rank {}: compute thread pinned to cpu {}", o.rank, *cpu);
      }
    }

    heartbeat.attach(comm);
    GP_RETURN_IF_ERROR(session->bind(comm));
    int64_t stop_after = -1;  // agreed with every rank once a stop is requested
    int stop_signal = 0;
    auto checkpoint = [&](int it) -> Status {
      GP_RETURN_IF_ERROR(session->write_checkpoint_part(o.checkpoint_dir, it, run_id));
      // Every part is on disk before rank 0 declares the checkpoint complete.
      GP_RETURN_IF_ERROR(
          client->barrier(o.rank, "checkpoint-" + std::to_string(it), barrier_timeout));
      if (o.rank == 0) {
        GP_RETURN_IF_ERROR(session->commit_checkpoint(o.checkpoint_dir, it, run_id));
        log->info("checkpoint after iteration {} in {}", it, o.checkpoint_dir);
      }
      return ok_status();
    };
    int last = o.iterations - 1;
    for (int it = first_iteration; it < o.iterations; ++it) {
      if (it == kill_at) std::raise(SIGKILL);  // fault injection for tests
      heartbeat.set_iteration(it);
      failed_iteration = it;
      const auto start = Clock::now();
      GP_ASSIGN_OR_RETURN(const double loss, session->run_iteration(it));
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      heartbeat.set_samples_per_s(static_cast<double>(plan.mini_batch()) / times.back());
      if (runner.stage_runner().has_loss()) {
        if (!std::isfinite(loss) && !o.allow_nonfinite) {
          nonfinite = true;
          return Status(StatusCode::kOutOfRange,
                        fmt::format("the loss is {} at iteration {} (rank {}, stage {}); "
                                    "--allow-nonfinite trains on",
                                    std::isnan(loss) ? "NaN" : (loss > 0 ? "inf" : "-inf"), it,
                                    o.rank, session->stage()));
        }
        graphpipe::v1::IterationMetrics m;
        m.set_iteration(it);
        m.set_loss(loss);
        m.set_time_s(times.back());
        GP_RETURN_IF_ERROR(client->report_metrics(o.rank, {m}));
      }
      // A requested stop: propose this boundary, then ask at each one until every rank has.
      if (stop_after < 0 && heartbeat.stop_requested()) {
        GP_ASSIGN_OR_RETURN(auto decision, client->propose_stop(o.rank, it));
        stop_after = decision.stop_after_iteration();
        stop_signal = decision.signal();
        if (stop_after >= 0 && stop_after < it) {
          return internal_error(
              fmt::format("rank {} finished iteration {}, past the agreed stop after iteration {}",
                          o.rank, it, stop_after));
        }
        if (stop_after >= 0) {
          log->info("rank {}: {}; stopping after iteration {}", o.rank, decision.reason(),
                    stop_after);
        }
      }
      const bool stop_here = stop_after == it && it < o.iterations - 1;
      log->debug("rank {}: iteration {} done", o.rank, it);
      if (!o.checkpoint_dir.empty() &&
          ((o.checkpoint_every > 0 && (it + 1) % o.checkpoint_every == 0) || stop_here)) {
        GP_RETURN_IF_ERROR(checkpoint(it));
      }
      if (stop_here) {
        last = it;
        break;
      }
    }
    failed_iteration = -1;
    // Parts of the trace first (rank 0 merges them after the barrier), then the barrier with
    // heartbeats still running (a rank waiting for slower ones must not look dead), then FINISHED.
    if (!o.trace.empty()) {
      GP_RETURN_IF_ERROR(
          write_trace_part(o.trace + ".rank" + std::to_string(o.rank), runner.trace()));
    }
    GP_RETURN_IF_ERROR(client->barrier(o.rank, "done", barrier_timeout));
    heartbeat.stop();
    graphpipe::v1::RankStatus done;
    done.set_rank(o.rank);
    done.set_state(graphpipe::v1::RANK_STATE_FINISHED);
    done.set_iteration(last);
    if (coordinator) {
      GP_RETURN_IF_ERROR(client->report_status(done));
      GP_RETURN_IF_ERROR(write_job_metrics(progress.complete_losses(), plan.mini_batch(),
                                           first_iteration, times, o.metrics_out));
      if (!o.trace.empty()) GP_RETURN_IF_ERROR(merge_trace(plan, o.world_size, o.trace));
      // Keep serving until every rank has said FINISHED, so none of them meets a closed server.
      (void)coordinator->wait_for_completion(timeout);
    } else if (Status st = client->report_status(done); !st.ok()) {
      // Training is complete; a coordinator that already shut down is not a failure.
      log->debug("rank {}: final status not delivered: {}", o.rank, st.message());
    }
    if (last < o.iterations - 1) {
      log->warn("rank {}: stopped after iteration {} of {}{}", o.rank, last, o.iterations,
                o.checkpoint_dir.empty() ? "" : " (checkpoint written)");
      return stop_signal > 0 ? 128 + stop_signal : 0;
    }
    return 0;
  };
  Result<int> outcome = train();
  if (outcome.ok()) return outcome;
  Status failure = outcome.status();
  heartbeat.stop();
  // A job aborted meanwhile explains the failure better than what this rank saw: a peer's
  // failure reaches its neighbours first; ranks further away see connections close.
  if (std::string why = heartbeat.abort_reason(); !why.empty()) {
    failure = Status(StatusCode::kAborted, why);
  } else if (auto status = client->get_status(); status.ok() && status->aborted()) {
    failure = Status(StatusCode::kAborted, "job aborted: " + status->abort_reason());
  }
  // Best effort: the coordinator aborts the others (or, when it already has, learns that this
  // rank knows and leaves, so rank 0 need not wait for it).
  graphpipe::v1::RankStatus failed;
  failed.set_rank(o.rank);
  failed.set_state(graphpipe::v1::RANK_STATE_FAILED);
  failed.set_iteration(std::max<int64_t>(failed_iteration, 0));
  failed.set_error(failure.message());
  (void)client->report_status(failed);
  if (coordinator) {
    coordinator->abort("rank 0 failed: " + failure.message(), 0);  // no-op when aborted already
    if (Status st = write_verdict(o.verdict_file, coordinator->status()); !st.ok()) {
      log->error("rank 0: {}", st.message());
    }
    // The iterations every rank completed count: a restart appends to them.
    if (Status st = write_job_metrics(progress.complete_losses(), plan.mini_batch(),
                                      first_iteration, times, o.metrics_out);
        !st.ok()) {
      log->error("rank 0: {}", st.message());
    }
    // The others learn of the abort from their next heartbeat; serve it to them first.
    coordinator->wait_until_told(timeout);
  }
  if (nonfinite) {  // its own exit code, so that schedulers can tell it from a crash
    std::fprintf(stderr, "graphpipe-executor: error: %s\n", failure.message().c_str());
    return kExitNonFiniteLoss;
  }
  return failure;
}

Status run_coordinator(const CoordinatorRunOptions& o) {
  GP_RETURN_IF_ERROR(check_tls(o.tls, TlsRole::kServer));
  // A plan no rank would run is refused here too, before the ranks are waited for.
  GP_ASSIGN_OR_RETURN(const auto loaded, LoadedPlan::read(o.plan));
  CoordinatorOptions co;
  co.listen_address = o.listen;
  co.plan = loaded->plan();
  co.world_size = o.world_size;
  co.auth_token = token_or_env(o.auth_token);
  co.tls = o.tls;
  co.heartbeat_timeout = milliseconds(static_cast<int64_t>(o.timeout_s) * 1000);
  GP_ASSIGN_OR_RETURN(auto coordinator, Coordinator::start(co));
  if (!o.coordinator_file.empty()) {
    GP_RETURN_IF_ERROR(graph::write_file_atomic(o.coordinator_file, coordinator->address() + "\n"));
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
