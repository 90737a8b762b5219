// graphpipe-executor submit: spreads a plan's ranks over node daemons (in node order, one rank
// per free device), starts them, prints their output as it comes, and exits with the first
// failing rank's status.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "gp/common/file_read.h"
#include "gp/common/logging.h"
#include "gp/common/util.h"
#include "gp/model/model_io.h"
#include "graphpipe/v1/daemon.grpc.pb.h"
#include "graphpipe/v1/plan.pb.h"
#include "launch/launch.h"
#include "node_daemon.h"

namespace gp::exec::daemon {
namespace {

namespace pb = graphpipe::v1;

struct Node {
  std::string address;
  std::unique_ptr<pb::NodeDaemon::Stub> stub;
  pb::DaemonInfo info;
  std::vector<int> ranks;
  std::vector<int64_t> offsets;
  bool done = false;      // its ranks exited and their output is all read
  bool draining = false;  // its ranks exited; output is left to read
  // Why the daemon stopped answering (frozen or gone) once it did for --timeout; empty while it
  // answers. Its ranks then stop on their own (--daemon-beacon).
  std::string lost;
  std::optional<std::chrono::steady_clock::time_point> failing_since;
};

// What a rank says when it cannot reach the coordinator that rank 0 hosts (job/heartbeat.cc,
// job/run.cc): the coordinator, not that rank, is what failed.
constexpr std::string_view kLostRank0 = "lost the coordinator (rank 0)";

void authorize(grpc::ClientContext* ctx, const std::string& token, int seconds) {
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

// gp::StatusCode mirrors gRPC's codes (as the control client relies on): cast and keep.
Status from_grpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return ok_status();
  return Status(static_cast<StatusCode>(s.error_code()), what + ": " + s.error_message());
}

// The first SIGINT/SIGTERM, and whether another came: the first stops the job at an iteration
// every rank agrees on, another kills it. One within a second of the first is the same request
// passed on twice (`timeout` forwards the SIGTERM it gets to this process, which got it too).
std::atomic<int> g_signal{0};
std::atomic<int> g_signals{0};
std::atomic<int64_t> g_signal_ms{0};
constexpr int64_t kRepeatAfterMs = 1000;

int64_t monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void on_signal(int sig) {
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) {
    g_signal_ms.store(monotonic_ms());
    g_signals.store(1);
  } else if (const int64_t first = g_signal_ms.load();
             first != 0 && monotonic_ms() - first >= kRepeatAfterMs) {
    // (0: the first handler, on another thread, has not noted its time yet: the same request.)
    g_signals.store(2);
  }
}

const char* stop_signal_name(int sig) { return sig == SIGINT ? "SIGINT" : "SIGTERM"; }

// This process's command line as typed (from /proc), with `--resume DIR` added among the ranks'
// flags unless it resumes already: the command that continues an interrupted job.
std::string resume_command(const std::string& checkpoint_dir) {
  FileReadOptions small;
  small.max_bytes = 1 << 20;
  auto cmdline = read_regular_file("/proc/self/cmdline", small);
  std::vector<std::string> words;
  if (cmdline.ok()) {
    for (size_t at = 0; at < cmdline->size();) {
      const size_t end = std::min(cmdline->find('\0', at), cmdline->size());
      words.push_back(cmdline->substr(at, end - at));
      at = end + 1;
    }
  }
  if (words.empty()) words = {"graphpipe-executor", "submit", "..."};
  bool resumes = false, ranks_flags = false;
  for (const auto& w : words) {
    resumes = resumes || w.starts_with("--resume");
    ranks_flags = ranks_flags || w == "--";
  }
  if (!resumes) {
    if (!ranks_flags) words.push_back("--");
    words.push_back("--resume");
    words.push_back(checkpoint_dir);
  }
  return shell_command(words);
}

std::string random_id() { return random_hex(8); }

// One submitted job, in the order it runs: check the options and read the plan → ask every
// daemon for its free devices → assign the ranks in node order → start them → follow the job to
// its end → blame a failure on its cause.
class Submission {
 public:
  explicit Submission(const SubmitOptions& options) : o_(options), log_(log::get("submit")) {}

  Result<int> run() {
    GP_RETURN_IF_ERROR(prepare());
    GP_RETURN_IF_ERROR(ask_daemons());
    assign_ranks();
    GP_RETURN_IF_ERROR(start_ranks());
    GP_RETURN_IF_ERROR(follow());
    if (stop_signal_ != 0) {  // the ranks' exits were the stop asked for, not failures
      print_stop_summary();
      return 128 + stop_signal_;
    }
    GP_RETURN_IF_ERROR(outcome());
    return 0;
  }

 private:
  Status prepare() {
    if (o_.auth_token.empty()) {
      if (const char* env = std::getenv("GP_AUTH_TOKEN")) o_.auth_token = env;
    }
    if (o_.nodes.empty()) return invalid_argument("--nodes: give the daemons, host:port,...");
    GP_RETURN_IF_ERROR(check_tls(o_.tls, TlsRole::kClient));
    GP_ASSIGN_OR_RETURN(credentials_, channel_credentials(o_.tls));
    GP_RETURN_IF_ERROR(model::read_message(o_.plan, &plan_).with_context("--plan"));
    plan_.SerializeToString(&plan_bytes_);
    world_ = plan_.programs_size();
    if (world_ < 1) return invalid_argument("--plan " + o_.plan + ": no ranks");
    return ok_status();
  }

  // Asks every daemon first: nothing starts unless the whole plan fits.
  Status ask_daemons() {
    int free_total = 0;
    for (const auto& address : o_.nodes) {
      Node n;
      n.address = address;
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
      n.stub = pb::NodeDaemon::NewStub(grpc::CreateCustomChannel(address, credentials_, args));
      grpc::ClientContext ctx;
      authorize(&ctx, o_.auth_token, 10);
      const grpc::Status info = n.stub->GetInfo(&ctx, pb::DaemonInfoRequest(), &n.info);
      // A daemon that is there but speaks the other protocol fails here too, at once: say which.
      if (info.error_code() == grpc::StatusCode::UNAVAILABLE) {
        return unavailable(
            "daemon " + address + (o_.tls.enabled() ? " (over TLS)" : "") +
            ": unavailable: " + explain_connect_failure(address, o_.tls, info.error_message()));
      }
      GP_RETURN_IF_ERROR(from_grpc(info, "daemon " + address));
      free_total += n.info.devices() - n.info.busy_devices_size();
      nodes_.push_back(std::move(n));
    }
    if (free_total < world_) {
      return failed_precondition("the plan has " + std::to_string(world_) +
                                 " ranks, the daemons have " + std::to_string(free_total) +
                                 " free devices");
    }
    return ok_status();
  }

  // Ranks fill the daemons' free devices in node order; rank 0, on the first node with ranks,
  // hosts the coordinator on its bind address.
  void assign_ranks() {
    int next = 0;
    for (auto& n : nodes_) {
      const int free = n.info.devices() - n.info.busy_devices_size();
      for (int i = 0; i < free && next < world_; ++i) n.ranks.push_back(next++);
      n.offsets.assign(n.ranks.size(), 0);
    }
    job_ = random_id();
    for (const auto& n : nodes_) {
      if (!n.ranks.empty() && n.ranks.front() == 0) {
        coordinator_ = n.info.bind_address() + ":" + std::to_string(o_.port);
      }
    }
    log_->info("job {}: {} ranks on {} node(s), coordinator {}", job_, world_, nodes_.size(),
               coordinator_);
  }

  // Starts each node's ranks; when a daemon refuses, the ranks already started are stopped.
  Status start_ranks() {
    for (auto& n : nodes_) {
      if (n.ranks.empty()) continue;
      pb::StartRanksRequest req;
      req.set_job_id(job_);
      req.set_plan(plan_bytes_);
      req.set_world_size(world_);
      for (int r : n.ranks) req.add_ranks(r);
      req.set_coordinator(coordinator_);
      req.set_iterations(o_.iterations);
      req.set_timeout_s(o_.timeout_s);
      req.set_store_dir(o_.store_dir);
      for (const auto& a : o_.extra) req.add_extra_args(a);
      grpc::ClientContext ctx;
      authorize(&ctx, o_.auth_token, 10);
      pb::StartRanksResponse resp;
      Status st = from_grpc(n.stub->StartRanks(&ctx, req, &resp), "daemon " + n.address);
      if (!st.ok()) {
        stop_all();
        return st;
      }
      std::string list;
      for (int r : n.ranks) list += (list.empty() ? "" : ",") + std::to_string(r);
      log_->info("daemon {} ({}): ranks {}", n.address, n.info.host(), list);
    }
    return ok_status();
  }

  // SIGTERM to every rank, SIGKILL `grace_s` later (0: the daemons' default), or now.
  void stop_all(int grace_s = 0, bool kill_now = false) {
    for (auto& n : nodes_) {
      if (n.ranks.empty() || !n.lost.empty()) continue;
      grpc::ClientContext ctx;
      authorize(&ctx, o_.auth_token, 5);
      pb::StopJobRequest req;
      req.set_job_id(job_);
      req.set_grace_s(grace_s);
      req.set_kill_now(kill_now);
      pb::StopJobResponse resp;
      (void)n.stub->StopJob(&ctx, req, &resp);
    }
  }

  // Follows the job until every rank has exited: output as it comes, failures as they are
  // seen. Interrupted, it stops the job on every node and follows it to its end.
  Status follow() {
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    for (;;) {
      pass_on_signals();
      bool all_done = true, any_running = false;
      for (auto& n : nodes_) {
        if (n.ranks.empty() || n.done) continue;
        GP_RETURN_IF_ERROR(poll(n));
        all_done = all_done && n.done;
        any_running = any_running || (!n.done && !n.draining);
      }
      if (all_done) return ok_status();
      if (!any_running) continue;  // only output left to read: read it without waiting
      // After a failure the others leave within a heartbeat; ranks still there (a frozen one)
      // are stopped on every node: SIGTERM, then SIGKILL from their daemon.
      // A rank the coordinator blamed is stopped at once.
      if (first_failure_ && !stragglers_stopped_ &&
          (blamed_ >= 0 ||
           std::chrono::steady_clock::now() - *first_failure_ > std::chrono::seconds(1))) {
        log_->warn("job {}: ranks still running after a failure; stopping them", job_);
        stop_all();
        stragglers_stopped_ = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  // The first SIGINT/SIGTERM: every rank stops after an iteration they agree on and writes a
  // checkpoint, which may take two heartbeat timeouts (a barrier's) before the daemons kill it.
  // A second: the daemons kill the ranks now.
  void pass_on_signals() {
    const int signals = g_signals.load();
    if (signals > 0 && stop_signal_ == 0) {
      stop_signal_ = g_signal.load();
      std::fprintf(stderr,
                   "graphpipe-executor: %s: asking every rank to stop after an agreed iteration "
                   "(again: stop at once)\n",
                   stop_signal_name(stop_signal_));
      stop_all(2 * o_.timeout_s + 5);
    }
    if (signals > 1 && !killed_) {
      killed_ = true;
      std::fprintf(stderr, "graphpipe-executor: %s again: killing every rank now\n",
                   stop_signal_name(g_signal.load()));
      stop_all(0, /*kill_now=*/true);
    }
  }

  // The last line after a requested stop: where rank 0 said it stopped, its checkpoint and the
  // command that resumes from it.
  void print_stop_summary() const {
    int after = -1, total = o_.iterations;
    const std::string said = "rank 0: stopped after iteration ";
    if (const size_t at = rank0_tail_.rfind(said); at != std::string::npos) {
      std::sscanf(rank0_tail_.c_str() + at + said.size(), "%d of %d", &after, &total);
    }
    std::string line = after >= 0 ? fmt::format("stopped after iteration {} of {}", after, total)
                       : killed_  ? "killed before the ranks stopped at an agreed iteration"
                                  : "stopped before the ranks agreed on an iteration";
    const std::string dir = checkpoint_dir();
    if (dir.empty()) {
      line += "; no checkpoint (no --checkpoint-dir)";
    } else if (after >= 0) {
      line += "; checkpoint " +
              (std::filesystem::path(dir) / ("iter-" + std::to_string(after))).string() +
              "; resume with: " + resume_command(dir);
    } else {
      line += "; resume from the newest checkpoint in " + dir + " with: " + resume_command(dir);
    }
    std::fflush(stdout);
    std::fprintf(stderr, "graphpipe-executor: %s\n", line.c_str());
  }

  // The ranks' --checkpoint-dir, as given among the extra flags.
  std::string checkpoint_dir() const {
    std::string dir;
    for (size_t i = 0; i < o_.extra.size(); ++i) {
      const std::string& a = o_.extra[i];
      if (a.starts_with("--checkpoint-dir=")) dir = a.substr(17);
      if (a == "--checkpoint-dir" && i + 1 < o_.extra.size()) dir = o_.extra[i + 1];
    }
    return dir;
  }

  // One node's ranks: their new output printed, the coordinator's verdict (rank 0's daemon
  // reports it) and the exits noted.
  Status poll(Node& n) {
    grpc::ClientContext ctx;
    authorize(&ctx, o_.auth_token, poll_timeout_s());
    pb::JobStatusRequest req;
    req.set_job_id(job_);
    for (int64_t off : n.offsets) req.add_log_offsets(off);
    pb::JobStatusResponse resp;
    const auto asked = std::chrono::steady_clock::now();
    const grpc::Status got = n.stub->JobStatus(&ctx, req, &resp);
    if (got.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
        got.error_code() == grpc::StatusCode::UNAVAILABLE) {
      return lose_daemon(n, got.error_message(), asked);
    }
    n.failing_since.reset();
    Status st = from_grpc(got, "daemon " + n.address);
    if (!st.ok()) {
      stop_all();
      return st.with_context("job " + job_);
    }
    if (resp.has_verdict() && blamed_ < 0 && resp.failed_rank() >= 0) {
      blamed_ = resp.failed_rank();
      blamed_reason_ = resp.failure_reason();
      if (!first_failure_) first_failure_ = std::chrono::steady_clock::now();
    }
    bool running = false, unread = false;
    for (int i = 0; i < resp.ranks_size(); ++i) {
      const auto& r = resp.ranks(i);
      if (!r.log().empty()) std::fprintf(stdout, "%s", r.log().c_str());
      if (r.rank() == 0) {  // where it says it stopped, for the summary
        rank0_tail_ += r.log();
        if (rank0_tail_.size() > 8192) rank0_tail_.erase(0, rank0_tail_.size() - 8192);
      }
      std::string& tail = tails_[r.rank()];  // its last error line, for the blame
      tail += r.log();
      if (tail.size() > 8192) tail.erase(0, tail.size() - 8192);
      n.offsets[static_cast<size_t>(i)] = r.log_end();
      running = running || r.running();
      // A rank that exited with more output than one reply carries is read to the end first.
      unread = unread || r.log_end() < r.log_size();
      if (!r.running() && r.exit_code() != 0 && exits_seen_.insert(r.rank()).second) {
        if (!first_failure_) first_failure_ = std::chrono::steady_clock::now();
        // The daemon says whether it had stopped the rank: by the time this sees an exit it
        // may already have stopped the others.
        failures_.add(r.rank(), {r.exit_code(), r.stopped_by_daemon()}, r.exited_unix_ms());
      }
    }
    std::fflush(stdout);
    n.done = !running && !unread;
    n.draining = !running && unread;
    return ok_status();
  }

  // The cause of a failure: a rank killed by a signal its daemon did not send (the others then
  // exit with errors of their own), else the rank the coordinator blamed (e.g. one that froze),
  // else the earliest to fail. Exit times are the daemons' (polled) observations.
  Status outcome() const {
    for (const auto& n : nodes_) {
      if (n.lost.empty()) continue;
      std::string list;
      for (int r : n.ranks) list += (list.empty() ? "" : ",") + std::to_string(r);
      return unavailable(fmt::format(
          "job {}: daemon {} ({}, ranks {}) stopped answering for {} s (frozen or gone): {}; its "
          "ranks stop on their own once its beacon is {} s old, the job's ranks elsewhere were "
          "stopped",
          job_, n.address, n.info.host(), list, o_.timeout_s, n.lost,
          std::clamp(o_.timeout_s, 2, 86400)));
    }
    const int failed_rank = failures_.cause();
    std::vector<std::string> also_failed;
    for (const auto& f : failures_.others()) also_failed.push_back(describe(f.rank, f.exit));
    // The coordinator's verdict names a rank that froze or reported an error; a rank that died
    // by a signal of its own is the cause even when a neighbour reported first.
    if (blamed_ >= 0 && !failures_.own_signal()) {
      if (failed_rank >= 0 && failed_rank != blamed_) {
        also_failed.insert(also_failed.begin(), describe(failed_rank, failures_.cause_exit()));
      }
      const std::string others = join(also_failed);
      return internal_error("job " + job_ + ": rank " + std::to_string(blamed_) +
                            " failed: " + blamed_reason_ +
                            (others.empty() ? "" : "; rank(s) " + others + " exited"));
    }
    // Without a verdict, a rank that lost the coordinator blames rank 0, which hosts it (frozen,
    // or too slow to answer): rank 0 had to be stopped, the others only noticed.
    if (failed_rank > 0) {
      if (std::string line = error_line(failed_rank); line.find(kLostRank0) != std::string::npos) {
        also_failed.insert(also_failed.begin(), describe(failed_rank, failures_.cause_exit()));
        return internal_error(
            "job " + job_ + ": rank 0 failed: rank 0 (the coordinator) stopped responding; rank " +
            std::to_string(failed_rank) + " said: " + line + "; rank(s) " + join(also_failed) +
            " exited");
      }
    }
    if (failed_rank >= 0) {
      const std::string others = join(also_failed);
      return internal_error("job " + job_ + ": rank " + std::to_string(failed_rank) +
                            " exited with status " + std::to_string(failures_.cause_exit().status) +
                            (others.empty() ? "" : "; then rank(s) " + others));
    }
    log_->info("job {}: every rank finished", job_);
    return ok_status();
  }

  // The last "error: ..." line in rank r's output (empty: none).
  std::string error_line(int r) const {
    const auto it = tails_.find(r);
    if (it == tails_.end()) return "";
    const std::string& tail = it->second;
    const size_t at = tail.rfind("error: ");
    if (at == std::string::npos) return "";
    const size_t end = tail.find('\n', at);
    return tail.substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7);
  }

  // JobStatus's deadline: a daemon that does not answer within the job's heartbeat timeout is
  // as frozen as a rank that does not heartbeat within it (at most gRPC's 10 s as before).
  int poll_timeout_s() const { return std::clamp(o_.timeout_s, 1, 10); }

  // A daemon that did not answer the call made at `asked`: after --timeout of that it is lost
  // (frozen or gone) and the job's ranks on the other daemons are stopped; its own ranks stop on
  // their own when its beacon goes stale. A daemon that answers again meanwhile is followed as
  // before.
  Status lose_daemon(Node& n, const std::string& why, std::chrono::steady_clock::time_point asked) {
    const auto now = std::chrono::steady_clock::now();
    if (!n.failing_since) n.failing_since = asked;
    if (now - *n.failing_since < std::chrono::seconds(o_.timeout_s)) return ok_status();
    n.lost = why;
    n.done = true;
    log_->error(
        "job {}: daemon {} stopped answering for {} s (frozen or gone): {}; stopping the "
        "job's other ranks",
        job_, n.address, o_.timeout_s, why);
    if (!first_failure_) first_failure_ = now;
    stop_all();
    return ok_status();
  }

  static std::string describe(int rank, const launch::RankExit& exit) {
    return std::to_string(rank) + " (" + std::to_string(exit.status) + ")";
  }

  static std::string join(const std::vector<std::string>& items) {
    std::string out;
    for (const auto& f : items) out += (out.empty() ? "" : ", ") + f;
    return out;
  }

  SubmitOptions o_;
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  pb::Plan plan_;
  std::string plan_bytes_;
  int world_ = 0;
  std::vector<Node> nodes_;
  std::string job_;
  std::string coordinator_;
  // What the job's progress has shown of a failure.
  launch::FailureRanking failures_;  // ranks that exited with an error, as seen
  std::set<int> exits_seen_;
  std::map<int, std::string> tails_;  // the end of each rank's output
  int blamed_ = -1;                   // the coordinator's verdict
  std::string blamed_reason_;
  std::optional<std::chrono::steady_clock::time_point> first_failure_;
  bool stragglers_stopped_ = false;
  // A requested stop: the first signal (0: none), whether a second one killed the ranks, and the
  // end of rank 0's output.
  int stop_signal_ = 0;
  bool killed_ = false;
  std::string rank0_tail_;
};

}  // namespace

Result<int> run_submit(const SubmitOptions& options) { return Submission(options).run(); }

}  // namespace gp::exec::daemon
