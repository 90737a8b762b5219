// graphpipe-executor submit: spreads a plan's ranks over node daemons (in node order, one rank
// per free device), starts them, prints their output as it comes, and exits with the first
// failing rank's status.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "gp/common/logging.h"
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
  bool done = false;
};

void authorize(grpc::ClientContext* ctx, const std::string& token, int seconds) {
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

// gp::StatusCode mirrors gRPC's codes (as the control client relies on): cast and keep.
Status from_grpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return ok_status();
  return Status(static_cast<StatusCode>(s.error_code()), what + ": " + s.error_message());
}

std::atomic<bool> g_interrupted{false};
void on_signal(int) { g_interrupted = true; }

std::string random_id() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%08x%08x", rd(), rd());
  return buf;
}

// One submitted job, in the order it runs: check the options and read the plan → ask every
// daemon for its free devices → assign the ranks in node order → start them → follow the job to
// its end → blame a failure on its cause.
class Submission {
 public:
  explicit Submission(const SubmitOptions& options) : o_(options), log_(log::get("submit")) {}

  Status run() {
    GP_RETURN_IF_ERROR(prepare());
    GP_RETURN_IF_ERROR(ask_daemons());
    assign_ranks();
    GP_RETURN_IF_ERROR(start_ranks());
    GP_RETURN_IF_ERROR(follow());
    return outcome();
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

  void stop_all() {
    for (auto& n : nodes_) {
      if (n.ranks.empty()) continue;
      grpc::ClientContext ctx;
      authorize(&ctx, o_.auth_token, 5);
      pb::StopJobRequest req;
      req.set_job_id(job_);
      pb::StopJobResponse resp;
      (void)n.stub->StopJob(&ctx, req, &resp);
    }
  }

  // Follows the job until every rank has exited: output as it comes, failures as they are
  // seen. Interrupted, it stops the job on every node.
  Status follow() {
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    for (;;) {
      if (g_interrupted) {
        stop_all();
        return Status(StatusCode::kAborted, "job " + job_ + ": interrupted; stopped on every node");
      }
      bool all_done = true;
      for (auto& n : nodes_) {
        if (n.ranks.empty() || n.done) continue;
        GP_RETURN_IF_ERROR(poll(n));
        all_done = all_done && n.done;
      }
      if (all_done) return ok_status();
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

  // One node's ranks: their new output printed, the coordinator's verdict (rank 0's daemon
  // reports it) and the exits noted.
  Status poll(Node& n) {
    grpc::ClientContext ctx;
    authorize(&ctx, o_.auth_token, 10);
    pb::JobStatusRequest req;
    req.set_job_id(job_);
    for (int64_t off : n.offsets) req.add_log_offsets(off);
    pb::JobStatusResponse resp;
    Status st = from_grpc(n.stub->JobStatus(&ctx, req, &resp), "daemon " + n.address);
    if (!st.ok()) {
      stop_all();
      return st.with_context("job " + job_);
    }
    if (resp.has_verdict() && blamed_ < 0 && resp.failed_rank() >= 0) {
      blamed_ = resp.failed_rank();
      blamed_reason_ = resp.failure_reason();
      if (!first_failure_) first_failure_ = std::chrono::steady_clock::now();
    }
    bool running = false;
    for (int i = 0; i < resp.ranks_size(); ++i) {
      const auto& r = resp.ranks(i);
      if (!r.log().empty()) std::fprintf(stdout, "%s", r.log().c_str());
      n.offsets[static_cast<size_t>(i)] = r.log_end();
      running = running || r.running();
      if (!r.running() && r.exit_code() != 0 && exits_seen_.insert(r.rank()).second) {
        if (!first_failure_) first_failure_ = std::chrono::steady_clock::now();
        // The daemon says whether it had stopped the rank: by the time this sees an exit it
        // may already have stopped the others.
        failures_.add(r.rank(), {r.exit_code(), r.stopped_by_daemon()}, r.exited_unix_ms());
      }
    }
    std::fflush(stdout);
    n.done = !running;
    return ok_status();
  }

  // The cause of a failure: a rank killed by a signal its daemon did not send (the others then
  // exit with errors of their own), else the rank the coordinator blamed (e.g. one that froze),
  // else the earliest to fail. Exit times are the daemons' (polled) observations.
  Status outcome() const {
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
    if (failed_rank >= 0) {
      const std::string others = join(also_failed);
      return internal_error("job " + job_ + ": rank " + std::to_string(failed_rank) +
                            " exited with status " + std::to_string(failures_.cause_exit().status) +
                            (others.empty() ? "" : "; then rank(s) " + others));
    }
    log_->info("job {}: every rank finished", job_);
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
  int blamed_ = -1;  // the coordinator's verdict
  std::string blamed_reason_;
  std::optional<std::chrono::steady_clock::time_point> first_failure_;
  bool stragglers_stopped_ = false;
};

}  // namespace

Status run_submit(const SubmitOptions& options) { return Submission(options).run(); }

}  // namespace gp::exec::daemon
