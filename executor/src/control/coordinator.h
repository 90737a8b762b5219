// The coordinator: the gRPC control plane of one training job (the `Executor` service of
// proto/graphpipe/v1/executor.proto). Rank 0 or a standalone process hosts it; every rank talks
// to it through a ControlClient. It hands out the plan and the data-plane addresses, runs named
// barriers, collects heartbeats, status and metrics, and aborts the whole job with one clear
// reason when a rank fails, asks for it, or stops heartbeating, so that nobody hangs.
//
// Thread safety: every public method may be called from any thread, concurrently with the RPC
// handlers. Lifetime: the server runs from start() until shutdown() or destruction; shutdown
// wakes every blocked Register/Barrier with UNAVAILABLE and waits for the handlers to return.
//
// NOTE [coordinator liveness]
// Heartbeat monitoring starts for every rank when the last rank registers (each rank's clock
// starts then). Only Heartbeat RPCs refresh a rank's clock (ReportStatus, Barrier and the other
// calls do not), so a rank must heartbeat from a thread of its own while it computes or waits in
// a barrier. A rank that reports RANK_STATE_FINISHED (by Heartbeat or ReportStatus) is no longer
// monitored, so it may exit. The first abort reason wins; an aborted job stays aborted.
//
// @code
//   CoordinatorOptions o;
//   o.plan = plan;
//   o.world_size = 4;
//   GP_ASSIGN_OR_RETURN(auto coordinator, Coordinator::start(o));
//   // ... ranks connect to coordinator->address() ...
//   GP_RETURN_IF_ERROR(coordinator->wait_for_completion());
// @endcode
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "control/tls.h"
#include "gp/common/status.h"
#include "graphpipe/v1/executor.pb.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec {

// The most ranks a job may have (--world-size and every other rank count of the executor).
inline constexpr int kMaxWorldSize = 65536;

struct CoordinatorOptions {
  // host:port to listen on; port 0 picks a free one (see Coordinator::port()). Loopback by
  // default: a multi-host job passes its own interface address explicitly.
  std::string listen_address = "127.0.0.1:0";
  graphpipe::v1::Plan plan;
  int world_size = 1;  // 1..kMaxWorldSize; the plan's when its stages name device ranks
  // When non-empty, every RPC must carry the metadata "authorization: Bearer <auth_token>"; a
  // call without it is refused from its headers, before its request is read (server_guard.h).
  std::string auth_token;
  // Enabled: serve TLS only (with --tls-ca: only to clients with a certificate of that CA).
  TlsOptions tls;
  // A registered rank silent for longer than this is declared dead and the job is aborted.
  std::chrono::milliseconds heartbeat_timeout{30000};
  // Returned to every rank at registration; empty: a random one is generated.
  std::string job_id;
  // Called after each ReportMetrics is recorded, on the RPC's thread, without the coordinator's
  // lock held (e.g. to log progress as iterations complete).
  std::function<void(const graphpipe::v1::ReportMetricsRequest&)> on_metrics;
};

class Coordinator {
 public:
  // Validates the options, binds and starts serving. UNAVAILABLE when the address cannot be bound.
  static Result<std::unique_ptr<Coordinator>> start(const CoordinatorOptions& options);

  ~Coordinator();  // shutdown()
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // The port actually bound, and "host:port" with it (what ranks connect to).
  int port() const;
  std::string address() const;
  const std::string& job_id() const;
  // gp::model::message_hash of the plan; ranks must register with the same.
  const std::string& plan_hash() const;

  // Blocks until every rank has reported RANK_STATE_FINISHED (OK), the job is aborted (ABORTED
  // with the reason), the coordinator is shut down (UNAVAILABLE) or `timeout` passes
  // (DEADLINE_EXCEEDED naming the unfinished ranks).
  Status wait_for_completion(std::chrono::milliseconds timeout = std::chrono::milliseconds::max());

  // Aborts the job from the hosting process (e.g. rank 0 failed locally), blaming `failed_rank`
  // (-1: nobody). No-op once aborted.
  void abort(const std::string& reason, int failed_rank);
  bool aborted() const;
  // After an abort: blocks until every rank but `self_rank` has been told of it (a heartbeat or
  // barrier answered "aborted"), has finished, or is silent, or until `timeout`. The hosting
  // rank calls it before it exits, so the others hear the reason instead of losing the
  // coordinator.
  void wait_until_told(std::chrono::milliseconds timeout, int self_rank = 0);
  // The first reason the job was aborted for; empty while it is not.
  std::string abort_reason() const;

  // Every rank's last status, as GetStatus returns it.
  graphpipe::v1::GetStatusResponse status() const;
  // Reported iteration metrics: one entry per rank that reported (ascending rank), holding its
  // newest kMetricsKept iterations in ascending order (memory stays flat however long the job
  // runs); a re-reported iteration replaces the earlier report.
  static constexpr size_t kMetricsKept = 16;
  std::vector<graphpipe::v1::ReportMetricsRequest> metrics() const;

  // Stops the heartbeat monitor and the server; blocked calls return UNAVAILABLE. Idempotent.
  void shutdown();

 private:
  struct Impl;
  explicit Coordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One line per rank, e.g. "rank 3: iter 12, waiting on RECV act[stage 2 -> 5, mb 7] from rank 1
// (instruction 17)", preceded by a line saying the job is aborted and why, when it is.
std::string status_text(const graphpipe::v1::GetStatusResponse& status);
// The same as a JSON object: job fields and a "ranks" array (iteration, samples_per_s, loss or
// null, state, liveness, instruction, error per rank).
std::string status_json(const graphpipe::v1::GetStatusResponse& status);

}  // namespace gp::exec
