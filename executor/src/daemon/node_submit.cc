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
#include "gp/graph/model_io.h"
#include "graphpipe/v1/daemon.grpc.pb.h"
#include "graphpipe/v1/plan.pb.h"
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

}  // namespace

Status run_submit(const SubmitOptions& in) {
  SubmitOptions o = in;
  auto log = log::get("submit");
  if (o.auth_token.empty()) {
    if (const char* env = std::getenv("GP_AUTH_TOKEN")) o.auth_token = env;
  }
  if (o.nodes.empty()) return invalid_argument("--nodes: give the daemons, host:port,...");
  GP_RETURN_IF_ERROR(check_tls(o.tls, TlsRole::kClient));
  GP_ASSIGN_OR_RETURN(const auto credentials, channel_credentials(o.tls));
  pb::Plan plan;
  GP_RETURN_IF_ERROR(graph::read_message(o.plan, &plan).with_context("--plan"));
  std::string bytes;
  plan.SerializeToString(&bytes);
  const int world = plan.programs_size();
  if (world < 1) return invalid_argument("--plan " + o.plan + ": no ranks");

  // Ask every daemon first: nothing starts unless the whole plan fits.
  std::vector<Node> nodes;
  int free_total = 0;
  for (const auto& address : o.nodes) {
    Node n;
    n.address = address;
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    n.stub = pb::NodeDaemon::NewStub(grpc::CreateCustomChannel(address, credentials, args));
    grpc::ClientContext ctx;
    authorize(&ctx, o.auth_token, 10);
    const grpc::Status info = n.stub->GetInfo(&ctx, pb::DaemonInfoRequest(), &n.info);
    // A daemon that is there but speaks the other protocol fails here too, at once: say which.
    if (info.error_code() == grpc::StatusCode::UNAVAILABLE) {
      return unavailable(
          "daemon " + address + (o.tls.enabled() ? " (over TLS)" : "") +
          ": unavailable: " + explain_connect_failure(address, o.tls, info.error_message()));
    }
    GP_RETURN_IF_ERROR(from_grpc(info, "daemon " + address));
    free_total += n.info.devices() - n.info.busy_devices_size();
    nodes.push_back(std::move(n));
  }
  if (free_total < world) {
    return failed_precondition("the plan has " + std::to_string(world) +
                               " ranks, the daemons have " + std::to_string(free_total) +
                               " free devices");
  }
  int next = 0;
  for (auto& n : nodes) {
    const int free = n.info.devices() - n.info.busy_devices_size();
    for (int i = 0; i < free && next < world; ++i) n.ranks.push_back(next++);
    n.offsets.assign(n.ranks.size(), 0);
  }
  const std::string job = random_id();
  // Empty: each daemon uses a directory of its own output root (a one-node job).
  // Rank 0 is on the first node with ranks; it hosts the coordinator on its bind address.
  std::string coordinator;
  for (const auto& n : nodes) {
    if (!n.ranks.empty() && n.ranks.front() == 0) {
      coordinator = n.info.bind_address() + ":" + std::to_string(o.port);
    }
  }
  log->info("job {}: {} ranks on {} node(s), coordinator {}", job, world, nodes.size(),
            coordinator);

  auto stop_all = [&] {
    for (auto& n : nodes) {
      if (n.ranks.empty()) continue;
      grpc::ClientContext ctx;
      authorize(&ctx, o.auth_token, 5);
      pb::StopJobRequest req;
      req.set_job_id(job);
      pb::StopJobResponse resp;
      (void)n.stub->StopJob(&ctx, req, &resp);
    }
  };
  for (auto& n : nodes) {
    if (n.ranks.empty()) continue;
    pb::StartRanksRequest req;
    req.set_job_id(job);
    req.set_plan(bytes);
    req.set_world_size(world);
    for (int r : n.ranks) req.add_ranks(r);
    req.set_coordinator(coordinator);
    req.set_iterations(o.iterations);
    req.set_timeout_s(o.timeout_s);
    req.set_store_dir(o.store_dir);
    for (const auto& a : o.extra) req.add_extra_args(a);
    grpc::ClientContext ctx;
    authorize(&ctx, o.auth_token, 10);
    pb::StartRanksResponse resp;
    Status st = from_grpc(n.stub->StartRanks(&ctx, req, &resp), "daemon " + n.address);
    if (!st.ok()) {
      stop_all();
      return st;
    }
    std::string list;
    for (int r : n.ranks) list += (list.empty() ? "" : ",") + std::to_string(r);
    log->info("daemon {} ({}): ranks {}", n.address, n.info.host(), list);
  }

  // Follow the job: output as it comes, the first failure's status at the end. Interrupted,
  // it stops the job on every node.
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  // The cause of a failure: a rank killed by a signal its daemon did not send (the others then
  // exit with errors of their own), else the rank the coordinator blamed (e.g. one that froze;
  // rank 0's daemon reports the verdict), else the earliest to fail. Exit times are the daemons'
  // (polled) observations.
  int failed_rank = -1, failed_code = 0;
  bool failed_own_signal = false;
  int64_t failed_at = 0;
  std::vector<std::string> also_failed;
  std::set<int> exits_seen;
  int blamed = -1;  // the coordinator's verdict
  std::string blamed_reason;
  std::optional<std::chrono::steady_clock::time_point> first_failure;
  bool stragglers_stopped = false;
  // A rank died by a signal of its own. The daemon says whether it had stopped the rank: by
  // the time this loop sees an exit it may already have stopped the others.
  bool own_signal = false;
  auto worse = [&](bool signal, int64_t at) {
    if (failed_rank < 0 || signal != failed_own_signal) return failed_rank < 0 || signal;
    return at < failed_at;
  };
  for (;;) {
    if (g_interrupted) {
      stop_all();
      return Status(StatusCode::kAborted, "job " + job + ": interrupted; stopped on every node");
    }
    bool all_done = true;
    for (auto& n : nodes) {
      if (n.ranks.empty() || n.done) continue;
      grpc::ClientContext ctx;
      authorize(&ctx, o.auth_token, 10);
      pb::JobStatusRequest req;
      req.set_job_id(job);
      for (int64_t off : n.offsets) req.add_log_offsets(off);
      pb::JobStatusResponse resp;
      Status st = from_grpc(n.stub->JobStatus(&ctx, req, &resp), "daemon " + n.address);
      if (!st.ok()) {
        stop_all();
        return st.with_context("job " + job);
      }
      if (resp.has_verdict() && blamed < 0 && resp.failed_rank() >= 0) {
        blamed = resp.failed_rank();
        blamed_reason = resp.failure_reason();
        if (!first_failure) first_failure = std::chrono::steady_clock::now();
      }
      bool running = false;
      for (int i = 0; i < resp.ranks_size(); ++i) {
        const auto& r = resp.ranks(i);
        if (!r.log().empty()) std::fprintf(stdout, "%s", r.log().c_str());
        n.offsets[static_cast<size_t>(i)] = r.log_end();
        running = running || r.running();
        if (!r.running() && r.exit_code() != 0 && exits_seen.insert(r.rank()).second) {
          if (!first_failure) first_failure = std::chrono::steady_clock::now();
          const bool signal = r.exit_code() > 128 && !r.stopped_by_daemon();
          own_signal = own_signal || signal;
          if (worse(signal, r.exited_unix_ms())) {
            if (failed_rank >= 0) {
              also_failed.push_back(std::to_string(failed_rank) + " (" +
                                    std::to_string(failed_code) + ")");
            }
            failed_rank = r.rank();
            failed_code = r.exit_code();
            failed_own_signal = signal;
            failed_at = r.exited_unix_ms();
          } else {
            also_failed.push_back(std::to_string(r.rank()) + " (" + std::to_string(r.exit_code()) +
                                  ")");
          }
        }
      }
      std::fflush(stdout);
      n.done = !running;
      all_done = all_done && n.done;
    }
    if (all_done) break;
    // After a failure the others leave within a heartbeat; ranks still there (a frozen one) are
    // stopped on every node: SIGTERM, then SIGKILL from their daemon.
    // A rank the coordinator blamed is stopped at once.
    if (first_failure && !stragglers_stopped &&
        (blamed >= 0 ||
         std::chrono::steady_clock::now() - *first_failure > std::chrono::seconds(1))) {
      log->warn("job {}: ranks still running after a failure; stopping them", job);
      stop_all();
      stragglers_stopped = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  // The coordinator's verdict names a rank that froze or reported an error; a rank that died by
  // a signal of its own is the cause even when a neighbour reported first.
  if (blamed >= 0 && !own_signal) {
    if (failed_rank >= 0 && failed_rank != blamed) {
      also_failed.insert(also_failed.begin(),
                         std::to_string(failed_rank) + " (" + std::to_string(failed_code) + ")");
    }
    std::string others;
    for (const auto& f : also_failed) others += (others.empty() ? "" : ", ") + f;
    return internal_error("job " + job + ": rank " + std::to_string(blamed) +
                          " failed: " + blamed_reason +
                          (others.empty() ? "" : "; rank(s) " + others + " exited"));
  }
  if (failed_rank >= 0) {
    std::string others;
    for (const auto& f : also_failed) others += (others.empty() ? "" : ", ") + f;
    return internal_error("job " + job + ": rank " + std::to_string(failed_rank) +
                          " exited with status " + std::to_string(failed_code) +
                          (others.empty() ? "" : "; then rank(s) " + others));
  }
  log->info("job {}: every rank finished", job);
  return ok_status();
}

}  // namespace gp::exec::daemon
