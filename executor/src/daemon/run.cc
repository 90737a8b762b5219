#include "run.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "gp/common/logging.h"
#include "gp/exec/checkpoint.h"
#include "gp/exec/control_client.h"
#include "gp/exec/coordinator.h"
#include "gp/exec/data_plane.h"
#include "gp/exec/device.h"
#include "gp/exec/nccl.h"
#include "gp/exec/rank_runner.h"
#include "gp/exec/reference_trainer.h"
#include "gp/graph/model_io.h"
#include "gp/graph/plan_util.h"

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
// says the job is over or cannot be reached for longer than the timeout.
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
    const int program = [&] {
      for (int p = 0; p < plan_.programs_size(); ++p) {
        if (plan_.programs(p).rank() == rank_) return p;
      }
      return -1;
    }();
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, period_, [&] { return stopping_; })) {
      lock.unlock();
      graphpipe::v1::RankStatus st;
      st.set_rank(rank_);
      st.set_state(graphpipe::v1::RANK_STATE_RUNNING);
      st.set_iteration(iteration_.load());
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
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::string reason_;
  std::thread thread_;
};

// The iterations this run trained: first_iteration .. first_iteration + time_s.size() - 1.
Status write_job_metrics(const Coordinator& coordinator, const graphpipe::v1::Plan& plan,
                         int first_iteration, const std::vector<double>& time_s,
                         const std::string& path) {
  const int count = static_cast<int>(time_s.size());
  std::vector<IterationMetrics> out(count);
  for (int i = 0; i < count; ++i) {
    out[i].iteration = first_iteration + i;
    out[i].time_s = time_s[i];
    out[i].samples_per_s = time_s[i] > 0 ? static_cast<double>(plan.mini_batch()) / time_s[i] : 0;
  }
  for (const auto& report : coordinator.metrics()) {
    for (const auto& m : report.iterations()) {
      const int64_t i = m.iteration() - first_iteration;
      if (i >= 0 && i < count) out[i].loss += m.loss();
    }
  }
  auto log = log::get("exec");
  for (auto& m : out) {
    m.loss /= static_cast<double>(plan.mini_batch());
    log->info("iteration {}: loss {:.6f}, {:.1f} samples/s", m.iteration, m.loss, m.samples_per_s);
  }
  if (path.empty()) return ok_status();
  return graph::write_file_atomic(path, metrics_json(out));
}

// One line per event: kind stage micro_batch peer gradient bytes start_us end_us.
Status write_trace_part(const std::string& path, const std::vector<TraceEvent>& events) {
  std::string text;
  char line[160];
  for (const auto& e : events) {
    std::snprintf(line, sizeof(line), "%d %d %d %d %d %lld %.3f %.3f\n", static_cast<int>(e.kind),
                  e.stage, e.micro_batch, e.peer, e.gradient ? 1 : 0,
                  static_cast<long long>(e.bytes), e.start_us, e.end_us);
    text += line;
  }
  return graph::write_file_atomic(path, text);
}

// Rank 0, after every rank passed the final barrier: merge the parts into one trace.
Status merge_trace(const graphpipe::v1::Plan& plan, int world_size, const std::string& path) {
  std::vector<std::pair<int, std::vector<TraceEvent>>> ranks;
  for (int r = 0; r < world_size; ++r) {
    const std::string part = path + ".rank" + std::to_string(r);
    GP_ASSIGN_OR_RETURN(std::string text, graph::read_file(part));
    std::vector<TraceEvent> events;
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t end = text.find('\n', pos);
      const std::string line = text.substr(pos, end - pos);
      pos = end == std::string::npos ? text.size() : end + 1;
      TraceEvent e{};
      int kind = 0, gradient = 0;
      long long bytes = 0;
      if (std::sscanf(line.c_str(), "%d %d %d %d %d %lld %lf %lf", &kind, &e.stage, &e.micro_batch,
                      &e.peer, &gradient, &bytes, &e.start_us, &e.end_us) != 8) {
        continue;
      }
      e.kind = static_cast<TraceEvent::Kind>(kind);
      e.gradient = gradient != 0;
      e.bytes = bytes;
      events.push_back(e);
    }
    ranks.emplace_back(r, std::move(events));
    std::remove(part.c_str());
  }
  return graph::write_file_atomic(path, measured_trace_json(plan, ranks));
}

}  // namespace

Status run_rank(const RunOptions& o) {
  auto log = log::get("exec");
  const milliseconds timeout(static_cast<int64_t>(o.timeout_s) * 1000);
  const std::string token = token_or_env(o.auth_token);
  GP_ASSIGN_OR_RETURN(const MatmulPrecision precision, parse_precision(o.precision));
  GP_ASSIGN_OR_RETURN(const Device* device, find_device(o.device, precision));
  graphpipe::v1::Plan plan;
  GP_RETURN_IF_ERROR(graph::read_message(o.plan, &plan).with_context("--plan"));
  GP_RETURN_IF_ERROR(
      graph::resolve_weights(*plan.mutable_model()).with_context("--plan " + o.plan));
  auto built = graph::Graph::build(plan.model());
  if (!built.ok()) return built.status().with_context("--plan " + o.plan + ": plan.model");
  const graph::Graph& graph = *built;
  GP_ASSIGN_OR_RETURN(graph::PlanIndex index, graph::validate_plan_structure(plan, graph));
  if (o.world_size != index.world_size) {
    return invalid_argument("--world-size = " + std::to_string(o.world_size) +
                            ", but the plan has " + std::to_string(index.world_size) + " ranks");
  }
  GP_ASSIGN_OR_RETURN(auto runner, RankRunner::create(plan, graph, index, o.rank, *device));
  std::unique_ptr<NpyDataset> data;  // only this rank's input ops' files
  if (!o.data.empty()) {
    GP_ASSIGN_OR_RETURN(
        data, open_stage_data(o.data, graph, runner->stage_runner().op_indices(), plan.mini_batch(),
                              !o.no_shuffle, plan.training().seed()));
    runner->mutable_stage_runner().set_data(data.get());
  }
  if (o.checkpoint_every < 0) {
    return invalid_argument("--checkpoint-every = " + std::to_string(o.checkpoint_every) +
                            ", must be >= 0");
  }
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) {
    return invalid_argument("--checkpoint-every needs --checkpoint-dir");
  }
  int first_iteration = 0;
  if (!o.resume.empty()) {
    // Any plan of the same model may resume: tensors are per operator, not per rank.
    GP_ASSIGN_OR_RETURN(auto manifest, latest_checkpoint(o.resume));
    GP_RETURN_IF_ERROR(load_stage_checkpoint(o.resume, manifest, graph, plan.training(),
                                             runner->mutable_stage_runner())
                           .with_context("--resume"));
    first_iteration = static_cast<int>(manifest.iteration()) + 1;
    log->info("rank {}: resuming after iteration {} from {}", o.rank, manifest.iteration(),
              o.resume);
  }
  int kill_at = -1;
  if (!o.kill_rank_at.empty()) {
    int kill_rank = -1;
    if (std::sscanf(o.kill_rank_at.c_str(), "%d:%d", &kill_rank, &kill_at) != 2) {
      return invalid_argument("--kill-rank-at = '" + o.kill_rank_at + "', expected RANK:ITERATION");
    }
    if (kill_rank != o.rank || !o.resume.empty()) kill_at = -1;
  }
  // NCCL moves device memory between GPUs: the default for CUDA ranks.
  const bool use_nccl = o.data_plane == "nccl" || (o.data_plane == "auto" && o.device != "cpu");
  if (use_nccl && o.device == "cpu") {
    return invalid_argument("--data-plane nccl needs --device cuda:N (this rank runs on the CPU)");
  }
  NcclLayout nccl_plan;
  if (use_nccl) {
    GP_ASSIGN_OR_RETURN(nccl_plan, nccl_layout(plan, index));
  }
  // One replica of each stage writes the stage's operators.
  const auto& my_stage = plan.stages(runner->stage());
  const bool checkpoint_writer =
      my_stage.device_ranks_size() > 0 && my_stage.device_ranks(0) == o.rank;

  // Control plane: rank 0 hosts the coordinator unless told otherwise.
  std::unique_ptr<Coordinator> coordinator;
  std::string address = o.coordinator;
  if (o.rank == 0 && !o.external_coordinator) {
    CoordinatorOptions co;
    co.listen_address = o.coordinator.empty() ? "127.0.0.1:0" : o.coordinator;
    co.plan = plan;
    co.world_size = o.world_size;
    co.auth_token = token;
    co.heartbeat_timeout = timeout;
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
  GP_ASSIGN_OR_RETURN(auto client, ControlClient::connect(address, token, timeout));
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

  // Heartbeats from here on: the coordinator counts a registered rank silent for the timeout as
  // dead, and setting up the data plane may take a while. (The plane outlives the heartbeats.)
  DataPlane plane;
  Heartbeat heartbeat(*client, *runner, plan, o.rank, milliseconds(o.heartbeat_ms), timeout);

  // Data plane.
  std::string store_dir = o.store_dir;
  if (store_dir.empty())
    store_dir = std::filesystem::path(o.plan).parent_path() / ".graphpipe-store";
  std::error_code ec;
  std::filesystem::create_directories(store_dir, ec);
  if (ec) return invalid_argument("--store-dir " + store_dir + ": " + ec.message());
  Status plane_status;
  // Every rank must use the same data plane; the one that finds out tells the coordinator.
  if (nccl_plan.communicators() > 0 && registered.nccl_unique_ids_size() == 0) {
    plane_status =
        failed_precondition("rank " + std::to_string(o.rank) +
                            " uses the NCCL data plane, but rank 0 does not (it handed out no "
                            "NCCL ids): give every rank the same --device kind and --data-plane");
  }
  if (!use_nccl && registered.nccl_unique_ids_size() > 0) {
    plane_status =
        failed_precondition("rank 0 uses the NCCL data plane (it handed out " +
                            std::to_string(registered.nccl_unique_ids_size()) +
                            " NCCL ids), but rank " + std::to_string(o.rank) + " uses " +
                            (o.device == "cpu" ? "the CPU" : "--data-plane " + o.data_plane) +
                            ": give every rank the same --device kind and --data-plane");
  }

  if (!plane_status.ok()) {
    // reported below
  } else if (use_nccl) {
    NcclOptions no;
    no.device = device;
    no.rank = o.rank;
    no.layout = nccl_plan;
    no.unique_ids.assign(registered.nccl_unique_ids().begin(), registered.nccl_unique_ids().end());
    no.timeout = 2 * timeout;  // as Gloo's below
    no.abort_reason = [&heartbeat] { return heartbeat.abort_reason(); };
    auto comm = make_nccl_communicator(no);
    if (comm.ok()) {
      plane.comm = std::move(*comm);
      plane.description =
          "nccl (" + std::to_string(nccl_plan.communicators()) + " communicators in the job)";
    } else {
      plane_status = comm.status();
    }
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
    auto made = make_data_plane(dp);
    if (made.ok()) {
      plane = std::move(*made);
    } else {
      plane_status = made.status();
    }
  }
  if (!plane_status.ok()) {
    // A job aborted meanwhile explains the failure better than what the data plane saw.
    if (std::string why = heartbeat.abort_reason(); !why.empty()) {
      return Status(StatusCode::kAborted, why);
    }
    (void)client->report_status([&] {  // best effort: the coordinator aborts the others
      graphpipe::v1::RankStatus st;
      st.set_rank(o.rank);
      st.set_state(graphpipe::v1::RANK_STATE_FAILED);
      st.set_error(plane_status.message());
      return st;
    }());
    return plane_status;
  }
  Communicator& comm = *plane.comm;
  log->info("rank {} of {}: stage {}, job {}, coordinator {}, data plane: {}", o.rank, o.world_size,
            runner->stage(), registered.job_id(), address, plane.description);
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

  if (!o.trace.empty()) {
    const auto& program = plan.programs(index.program_of_rank[o.rank]);
    runner->enable_trace(static_cast<size_t>(program.instructions_size()) *
                         static_cast<size_t>(o.iterations));
  }
  heartbeat.attach(comm);
  std::vector<double> times;
  for (int it = first_iteration; it < o.iterations; ++it) {
    if (it == kill_at) std::raise(SIGKILL);  // fault injection for tests
    heartbeat.set_iteration(it);
    const auto start = Clock::now();
    auto loss = runner->run_iteration(it, comm);
    if (!loss.ok()) {
      heartbeat.stop();
      if (std::string why = heartbeat.abort_reason(); !why.empty()) {
        return Status(StatusCode::kAborted, why);
      }
      // A peer's failure reaches the neighbours first; ranks further away see connections
      // close. Report the first cause the coordinator heard of, or become it.
      if (auto status = client->get_status(); status.ok() && status->aborted()) {
        return Status(StatusCode::kAborted, "job aborted: " + status->abort_reason());
      }
      graphpipe::v1::RankStatus st;
      st.set_rank(o.rank);
      st.set_state(graphpipe::v1::RANK_STATE_FAILED);
      st.set_iteration(it);
      st.set_error(loss.status().message());
      (void)client->report_status(st);  // best effort: the coordinator aborts the others
      return loss.status();
    }
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    if (runner->stage_runner().has_loss()) {
      graphpipe::v1::IterationMetrics m;
      m.set_iteration(it);
      m.set_loss(*loss);
      m.set_time_s(times.back());
      GP_RETURN_IF_ERROR(client->report_metrics(o.rank, {m}));
    }
    log->debug("rank {}: iteration {} done", o.rank, it);
    if (o.checkpoint_every > 0 && (it + 1) % o.checkpoint_every == 0) {
      if (checkpoint_writer) {
        GP_RETURN_IF_ERROR(
            write_stage_checkpoint(o.checkpoint_dir, it, graph, runner->mutable_stage_runner()));
      }
      // Every part is on disk before rank 0 declares the checkpoint complete.
      GP_RETURN_IF_ERROR(client->barrier(o.rank, "checkpoint-" + std::to_string(it), timeout));
      if (o.rank == 0) {
        GP_RETURN_IF_ERROR(commit_checkpoint(o.checkpoint_dir, it, graph, graph::message_hash(plan),
                                             plan.training()));
        log->info("checkpoint after iteration {} in {}", it, o.checkpoint_dir);
      }
    }
  }
  // Parts of the trace first (rank 0 merges them after the barrier), then the barrier with
  // heartbeats still running (a rank waiting for slower ones must not look dead), then FINISHED.
  if (!o.trace.empty()) {
    GP_RETURN_IF_ERROR(
        write_trace_part(o.trace + ".rank" + std::to_string(o.rank), runner->trace()));
  }
  GP_RETURN_IF_ERROR(client->barrier(o.rank, "done", timeout));
  heartbeat.stop();
  graphpipe::v1::RankStatus done;
  done.set_rank(o.rank);
  done.set_state(graphpipe::v1::RANK_STATE_FINISHED);
  done.set_iteration(o.iterations - 1);
  if (coordinator) {
    GP_RETURN_IF_ERROR(client->report_status(done));
    GP_RETURN_IF_ERROR(
        write_job_metrics(*coordinator, plan, first_iteration, times, o.metrics_out));
    if (!o.trace.empty()) GP_RETURN_IF_ERROR(merge_trace(plan, o.world_size, o.trace));
    // Keep serving until every rank has said FINISHED, so none of them meets a closed server.
    (void)coordinator->wait_for_completion(timeout);
  } else if (Status st = client->report_status(done); !st.ok()) {
    // Training is complete; a coordinator that already shut down is not a failure.
    log->debug("rank {}: final status not delivered: {}", o.rank, st.message());
  }
  return ok_status();
}

Status run_coordinator(const CoordinatorRunOptions& o) {
  graphpipe::v1::Plan plan;
  GP_RETURN_IF_ERROR(graph::read_message(o.plan, &plan).with_context("--plan"));
  CoordinatorOptions co;
  co.listen_address = o.listen;
  co.plan = plan;
  co.world_size = o.world_size;
  co.auth_token = token_or_env(o.auth_token);
  co.heartbeat_timeout = milliseconds(static_cast<int64_t>(o.timeout_s) * 1000);
  GP_ASSIGN_OR_RETURN(auto coordinator, Coordinator::start(co));
  if (!o.coordinator_file.empty()) {
    GP_RETURN_IF_ERROR(graph::write_file_atomic(o.coordinator_file, coordinator->address() + "\n"));
  }
  log::get("exec")->info("coordinator for {} ranks listening on {}", o.world_size,
                         coordinator->address());
  return coordinator->wait_for_completion();
}

Status print_status(const std::string& coordinator, const std::string& auth_token) {
  GP_ASSIGN_OR_RETURN(auto client, ControlClient::connect(coordinator, token_or_env(auth_token),
                                                          std::chrono::seconds(5)));
  GP_ASSIGN_OR_RETURN(auto status, client->get_status());
  std::printf("%s", status_text(status).c_str());
  return ok_status();
}

}  // namespace gp::exec::daemon
