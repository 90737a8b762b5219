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

// SIGTERM/SIGINT ask for a graceful stop: the heartbeat thread passes it to the coordinator and
// training ends at an iteration boundary every rank agrees on. A second signal more than
// kForceAfter after the first exits at once (the first may be stuck behind a dead peer).
std::atomic<int> g_stop_signal{0};
std::atomic<int64_t> g_stop_signal_ms{0};
constexpr int64_t kForceAfterMs = 5000;

int64_t monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void on_stop_signal(int sig) {
  int expected = 0;
  if (g_stop_signal.compare_exchange_strong(expected, sig)) {
    g_stop_signal_ms.store(monotonic_ms());
    return;
  }
  if (monotonic_ms() - g_stop_signal_ms.load() > kForceAfterMs) _exit(128 + sig);
}

// Installs the stop handlers, and makes the rank stop (as on SIGTERM) when whoever started it
// (the launcher, the node daemon, sshd's session, a shell) dies, so no rank outlives its job.
// A watchdog polls the parent process rather than using PR_SET_PDEATHSIG, which fires when the
// forking *thread* exits (the node daemon forks from gRPC pool threads that come and go).
Status install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &sa, nullptr) != 0 || sigaction(SIGINT, &sa, nullptr) != 0) {
    return internal_error(std::string("cannot install the SIGTERM/SIGINT handlers: ") +
                          std::strerror(errno));
  }
  const pid_t parent = getppid();
  if (parent > 1) {
    std::thread([parent] {
      while (getppid() == parent) std::this_thread::sleep_for(milliseconds(200));
      ::kill(::getpid(), SIGTERM);
    }).detach();
  }
  return ok_status();
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "a signal";
  }
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
      if (const int sig = g_stop_signal.load(); sig != 0 && !stop_sent) {
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

// Ranks that compute a loss: every replica of a stage holding a loss operator.
int count_loss_ranks(const graphpipe::v1::Plan& plan, const graph::Graph& graph) {
  int n = 0;
  for (const auto& stage : plan.stages()) {
    bool loss = false;
    for (const auto& id : stage.op_ids()) {
      const int i = graph.index_of(id);
      loss = loss || (i >= 0 && graph.op(i).info->is_loss);
    }
    if (loss) n += stage.device_ranks_size();
  }
  return n;
}

// Rank 0: one line per --log-every iterations as soon as every rank with a loss has reported it
// (the coordinator calls `add` from its RPC threads).
class ProgressLog {
 public:
  ProgressLog(const graphpipe::v1::Plan& plan, const graph::Graph& graph, int iterations,
              int log_every)
      : mini_batch_(plan.mini_batch()),
        iterations_(iterations),
        log_every_(log_every),
        loss_ranks_(count_loss_ranks(plan, graph)) {}

  void add(const graphpipe::v1::ReportMetricsRequest& report) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& m : report.iterations()) {
      Pending& p = pending_[m.iteration()];
      p.loss += m.loss();
      p.time_s = std::max(p.time_s, m.time_s());
      if (++p.reports < loss_ranks_) continue;
      const int64_t k = m.iteration();
      const double loss = p.loss / static_cast<double>(mini_batch_);
      const double rate = p.time_s > 0 ? static_cast<double>(mini_batch_) / p.time_s : 0;
      const double time_s = p.time_s;
      pending_.erase(k);
      const Clock::time_point now = Clock::now();
      if (done_++ == 0) first_done_ = now;
      if ((k + 1) % log_every_ != 0 && k + 1 != iterations_) continue;
      // Seconds per iteration: measured between completions once there are two, so that set-up
      // time does not count.
      const double per_iteration = done_ > 1
                                       ? std::chrono::duration<double>(now - first_done_).count() /
                                             static_cast<double>(done_ - 1)
                                       : time_s;
      const double eta =
          per_iteration * static_cast<double>(std::max<int64_t>(0, iterations_ - 1 - k));
      log::get("exec")->info("iteration {}: loss {:.6f}, {:.1f} samples/s, {} of {} done, ETA {}",
                             k, loss, rate, k + 1, iterations_, format_duration(eta));
    }
  }

 private:
  struct Pending {
    double loss = 0;
    double time_s = 0;
    int reports = 0;
  };
  static std::string format_duration(double s) {
    if (s < 60) return fmt::format("{:.0f} s", s);
    if (s < 3600) return fmt::format("{:.0f} min {:.0f} s", std::floor(s / 60), std::fmod(s, 60));
    return fmt::format("{:.0f} h {:.0f} min", std::floor(s / 3600), std::fmod(s, 3600) / 60);
  }

  const int64_t mini_batch_;
  const int iterations_;
  const int log_every_;
  const int loss_ranks_;
  Clock::time_point first_done_;
  std::mutex mu_;
  std::map<int64_t, Pending> pending_;
  int64_t done_ = 0;
};

// Entries of a metrics file this executor wrote (metrics_json's layout); malformed ones stop
// the scan.
std::vector<IterationMetrics> read_metrics(const std::string& text) {
  std::vector<IterationMetrics> out;
  auto number_after = [&](const char* key, size_t from, double* v) -> size_t {
    const size_t k = text.find(key, from);
    if (k == std::string::npos) return k;
    const char* p = text.c_str() + k + std::strlen(key);
    char* end = nullptr;
    *v = std::strtod(p, &end);
    if (end == p) *v = std::nan("");  // null: a non-finite value
    return k;
  };
  size_t pos = 0;
  while (true) {
    double it = 0, loss = 0, time_s = 0, rate = 0;
    pos = number_after("\"iteration\": ", pos, &it);
    if (pos == std::string::npos || !std::isfinite(it)) break;
    if (number_after("\"loss\": ", pos, &loss) == std::string::npos ||
        number_after("\"time_s\": ", pos, &time_s) == std::string::npos ||
        number_after("\"samples_per_s\": ", pos, &rate) == std::string::npos) {
      break;
    }
    out.push_back({static_cast<int64_t>(it), loss, time_s, rate});
    ++pos;
  }
  return out;
}

// The iterations this run trained whose loss every loss rank reported: first_iteration ..
// first_iteration + time_s.size() - 1 at most. When the job resumed, the earlier iterations of
// an existing metrics file are kept in front, so restarts append.
Status write_job_metrics(const Coordinator& coordinator, const graphpipe::v1::Plan& plan,
                         int loss_ranks, int first_iteration, const std::vector<double>& time_s,
                         const std::string& path) {
  if (path.empty()) return ok_status();
  const int count = static_cast<int>(time_s.size());
  std::vector<IterationMetrics> run(count);
  std::vector<int> reports(count, 0);
  for (int i = 0; i < count; ++i) {
    run[i].iteration = first_iteration + i;
    run[i].time_s = time_s[i];
    run[i].samples_per_s = time_s[i] > 0 ? static_cast<double>(plan.mini_batch()) / time_s[i] : 0;
  }
  for (const auto& report : coordinator.metrics()) {
    for (const auto& m : report.iterations()) {
      const int64_t i = m.iteration() - first_iteration;
      if (i >= 0 && i < count) {
        run[i].loss += m.loss();
        ++reports[i];
      }
    }
  }
  std::vector<IterationMetrics> out;
  if (first_iteration > 0) {
    if (auto old = graph::read_file(path); old.ok()) {
      for (const auto& m : read_metrics(*old)) {
        if (m.iteration < first_iteration) out.push_back(m);
      }
    }
  }
  for (int i = 0; i < count; ++i) {
    if (reports[i] < loss_ranks) break;  // a failed run's last iterations may be partial
    run[i].loss /= static_cast<double>(plan.mini_batch());
    out.push_back(run[i]);
  }
  return graph::write_file_atomic(path, metrics_json(out));
}

// Fails now, not after training, when `path` cannot be written (its directory is missing or
// read-only).
Status check_writable(const std::string& flag, const std::string& path) {
  if (path.empty()) return ok_status();
  const std::string probe = path + ".probe-" + std::to_string(::getpid());
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  if (f == nullptr) {
    return invalid_argument(flag + " " + path + ": cannot write there: " + std::strerror(errno));
  }
  std::fclose(f);
  std::remove(probe.c_str());
  return ok_status();
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

namespace {

// Rank 0, when the job ended in an abort: who is blamed and why, for whoever started the ranks
// (the launcher kills and excludes that rank rather than the first one to exit).
Status write_verdict(const std::string& path, const graphpipe::v1::GetStatusResponse& status) {
  if (path.empty()) return ok_status();
  std::string reason = status.abort_reason();
  for (char& c : reason) {
    if (c == '\n') c = ' ';
  }
  return graph::write_file_atomic(
      path, "failed_rank=" + std::to_string(status.failed_rank()) + "\nreason=" + reason + "\n");
}

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
  GP_RETURN_IF_ERROR(install_stop_signals());
  const milliseconds timeout(static_cast<int64_t>(o.timeout_s) * 1000);
  const std::string token = token_or_env(o.auth_token);
  if (o.log_every < 1) {
    return invalid_argument("--log-every = " + std::to_string(o.log_every) + ", must be >= 1");
  }
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
  ProgressLog progress(plan, graph, o.iterations, o.log_every);  // outlives the coordinator
  std::unique_ptr<Coordinator> coordinator;
  std::string address = o.coordinator;
  if (o.rank == 0 && !o.external_coordinator) {
    CoordinatorOptions co;
    co.listen_address = o.coordinator.empty() ? "127.0.0.1:0" : o.coordinator;
    co.plan = plan;
    co.world_size = o.world_size;
    co.auth_token = token;
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
  const std::string run_id = registered.job_id();

  // From here on every rank is known to the coordinator: a failure is reported to it, so the
  // others learn of it within a heartbeat instead of waiting out their timeouts.
  DataPlane plane;
  Heartbeat heartbeat(*client, *runner, plan, o.rank, milliseconds(o.heartbeat_ms), timeout);
  int64_t failed_iteration = -1;
  bool nonfinite = false;
  // Barriers wait longer than the heartbeat timeout, so that when a rank freezes the
  // coordinator's verdict (naming it) ends the wait rather than a waiting rank's own timeout,
  // which would blame the waiter.
  const milliseconds barrier_timeout = 2 * timeout;
  std::vector<double> times;  // of the iterations this run completed
  const int loss_ranks = count_loss_ranks(plan, graph);
  auto train = [&]() -> Result<int> {
    if (!o.resume.empty()) {
      // Any plan of the same model may resume: tensors are per operator, not per rank.
      GP_RETURN_IF_ERROR(load_stage_checkpoint(o.resume, manifest, graph, plan.training(),
                                               runner->mutable_stage_runner())
                             .with_context("--resume"));
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
                                 (o.device == "cpu" ? "the CPU" : "--data-plane " + o.data_plane) +
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
              o.world_size, runner->stage(), registered.job_id(), address, plane.description);
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
    int64_t stop_after = -1;  // agreed with every rank once a stop is requested
    int stop_signal = 0;
    auto checkpoint = [&](int it) -> Status {
      if (checkpoint_writer) {
        GP_RETURN_IF_ERROR(write_stage_checkpoint(o.checkpoint_dir, it, graph,
                                                  runner->mutable_stage_runner(), run_id));
      }
      // Every part is on disk before rank 0 declares the checkpoint complete.
      GP_RETURN_IF_ERROR(
          client->barrier(o.rank, "checkpoint-" + std::to_string(it), barrier_timeout));
      if (o.rank == 0) {
        GP_RETURN_IF_ERROR(commit_checkpoint(o.checkpoint_dir, it, graph, graph::message_hash(plan),
                                             plan.training(), run_id));
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
      GP_ASSIGN_OR_RETURN(const double loss, runner->run_iteration(it, comm));
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      heartbeat.set_samples_per_s(static_cast<double>(plan.mini_batch()) / times.back());
      if (runner->stage_runner().has_loss()) {
        if (!std::isfinite(loss) && !o.allow_nonfinite) {
          nonfinite = true;
          return Status(StatusCode::kOutOfRange,
                        fmt::format("the loss is {} at iteration {} (rank {}, stage {}); "
                                    "--allow-nonfinite trains on",
                                    std::isnan(loss) ? "NaN" : (loss > 0 ? "inf" : "-inf"), it,
                                    o.rank, runner->stage()));
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
          write_trace_part(o.trace + ".rank" + std::to_string(o.rank), runner->trace()));
    }
    GP_RETURN_IF_ERROR(client->barrier(o.rank, "done", barrier_timeout));
    heartbeat.stop();
    graphpipe::v1::RankStatus done;
    done.set_rank(o.rank);
    done.set_state(graphpipe::v1::RANK_STATE_FINISHED);
    done.set_iteration(last);
    if (coordinator) {
      GP_RETURN_IF_ERROR(client->report_status(done));
      GP_RETURN_IF_ERROR(
          write_job_metrics(*coordinator, plan, loss_ranks, first_iteration, times, o.metrics_out));
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
    if (Status st = write_job_metrics(*coordinator, plan, loss_ranks, first_iteration, times,
                                      o.metrics_out);
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

Status print_status(const std::string& coordinator, const std::string& auth_token, bool json) {
  GP_ASSIGN_OR_RETURN(auto client, ControlClient::connect(coordinator, token_or_env(auth_token),
                                                          std::chrono::seconds(5)));
  GP_ASSIGN_OR_RETURN(auto status, client->get_status());
  std::printf("%s", (json ? status_json(status) : status_text(status)).c_str());
  return ok_status();
}

}  // namespace gp::exec::daemon
