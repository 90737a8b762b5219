// A rank's (or an operator tool's) connection to the coordinator's control service. Every call
// carries a deadline and the job's token, and returns a gp::Status whose code is the gRPC code
// (cast) and whose message starts with the RPC's name, e.g. "Barrier: barrier 'init': rank 1:
// timed out after 500 ms waiting for rank 3".
//
// Thread safety: the calls may be made concurrently (e.g. heartbeats from their own thread while
// the main thread waits in a barrier); set_default_timeout only before sharing the client.
// Lifetime: independent of the coordinator's; a call to a coordinator that went away fails with
// UNAVAILABLE or DEADLINE_EXCEEDED, never hangs.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "control/tls.h"
#include "gp/common/status.h"
#include "graphpipe/v1/executor.pb.h"
#include "graphpipe/v1/plan.pb.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace gp::exec {

class ControlClient {
 public:
  // Connects to "host:port" and waits until the channel is up; UNAVAILABLE "cannot reach the
  // coordinator at HOST:PORT within N s: <why>" when no channel comes up in `connect_timeout`
  // (nobody listens, or the two ends disagree about TLS). `token` empty: no authorization
  // metadata. `tls` enabled: TLS with those files (see gp/exec/tls.h), else plaintext.
  static Result<std::unique_ptr<ControlClient>> connect(
      const std::string& address, const std::string& token,
      std::chrono::milliseconds connect_timeout = std::chrono::seconds(30),
      const TlsOptions& tls = {});

  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  const std::string& address() const { return address_; }
  // The deadline of every call that does not take its own timeout (10 s unless changed).
  void set_default_timeout(std::chrono::milliseconds timeout) { default_timeout_ = timeout; }
  std::chrono::milliseconds default_timeout() const { return default_timeout_; }

  // Registers and blocks until every rank has (returns the data addresses by rank and the job
  // id). The coordinator gives up after `timeout` naming the missing ranks; `request.timeout_ms`
  // is overwritten with it.
  Result<graphpipe::v1::RegisterResponse> register_rank(graphpipe::v1::RegisterRequest request,
                                                        std::chrono::milliseconds timeout);
  Result<graphpipe::v1::Plan> get_plan(int rank);
  // Blocks until every rank reached barrier `name`; DEADLINE_EXCEEDED naming the missing ranks
  // after `timeout`, ABORTED if the job is aborted meanwhile.
  Status barrier(int rank, const std::string& name, std::chrono::milliseconds timeout);
  // Records `status` and proves the rank alive; the response says whether the job is aborted.
  Result<graphpipe::v1::HeartbeatResponse> heartbeat(const graphpipe::v1::RankStatus& status);
  // The same within `timeout` rather than the default.
  Result<graphpipe::v1::HeartbeatResponse> heartbeat(const graphpipe::v1::RankStatus& status,
                                                     std::chrono::milliseconds timeout);
  // Records `status` without counting as a heartbeat; RANK_STATE_FAILED aborts the job.
  Status report_status(const graphpipe::v1::RankStatus& status);
  Status report_metrics(int rank, const std::vector<graphpipe::v1::IterationMetrics>& iterations);
  // The rank's measured per-op times (ReportMetricsRequest.timings), for rank 0's profile.
  Status report_timings(int rank, const graphpipe::v1::RankTimings& timings);
  Result<graphpipe::v1::GetStatusResponse> get_status();
  // Aborts the job for every rank; `rank` -1 is the operator.
  Status abort(int rank, const std::string& reason);
  // Asks every rank to stop at an iteration boundary (see RequestStopRequest); `signal` is the
  // one that asked (0: none).
  Status request_stop(int rank, int signal, const std::string& reason);
  // Proposes stopping after `iteration`; the response says where, once every rank has.
  Result<graphpipe::v1::ProposeStopResponse> propose_stop(int rank, int64_t iteration);
  // The rendezvous store (see control/key_store.h): sets a key; reads one (nullopt: not set yet).
  Status store_set(int rank, const std::string& key, const std::string& value);
  Result<std::optional<std::string>> store_get(int rank, const std::string& key);

 private:
  struct Stub;
  ControlClient(std::string address, std::string token, std::shared_ptr<grpc::Channel> channel);

  std::string address_;
  std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Stub> stub_;
  std::chrono::milliseconds default_timeout_{10000};
};

}  // namespace gp::exec
