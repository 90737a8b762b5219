#include "control/control_client.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <utility>

#include "gp/common/util.h"
#include "graphpipe/v1/executor.grpc.pb.h"

namespace gp::exec {
namespace {

namespace pb = graphpipe::v1;
using std::chrono::milliseconds;

// Blocking calls (Register, Barrier) pass their timeout to the coordinator and give the call
// this much more, so the coordinator's answer naming the missing ranks arrives first.
constexpr milliseconds kBlockingCallGrace{2000};
// Longer timeouts are treated as this (system_clock arithmetic would overflow).
constexpr milliseconds kMaxTimeout{std::chrono::hours(24 * 365)};
constexpr int kMaxMessageBytes = 512 * 1024 * 1024;

std::chrono::system_clock::time_point deadline_after(milliseconds timeout) {
  return std::chrono::system_clock::now() + std::clamp(timeout, milliseconds::zero(), kMaxTimeout);
}

// "0.5 s", "30 s".
std::string seconds_text(milliseconds d) { return fmt::format("{:g} s", d.count() / 1000.0); }

}  // namespace

struct ControlClient::Stub {
  std::unique_ptr<pb::Executor::Stub> stub;
};

namespace {

// Runs one unary call with a deadline and the token; the status keeps gRPC's code (cast) and
// gets the RPC's name in front of the message.
template <typename Req, typename Resp, typename Method>
Status unary_call(pb::Executor::Stub& stub, Method method, const char* rpc,
                  const std::string& address, const std::string& token, const Req& request,
                  Resp* response, milliseconds timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(deadline_after(timeout));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  const grpc::Status s = (stub.*method)(&ctx, request, response);
  if (s.ok()) return ok_status();
  const auto code = static_cast<StatusCode>(s.error_code());
  // The coordinator's own DEADLINE_EXCEEDED carries a message; the client's local one does not.
  if (code == StatusCode::kDeadlineExceeded && s.error_message() == "Deadline Exceeded") {
    return Status(code, fmt::format("{}: no answer from the coordinator at {} within {} ms", rpc,
                                    address, timeout.count()));
  }
  if (code == StatusCode::kUnavailable) {
    return Status(code, fmt::format("{}: the coordinator at {} is unavailable: {}", rpc, address,
                                    s.error_message()));
  }
  return Status(code, std::string(rpc) + ": " + s.error_message());
}

}  // namespace

Result<std::unique_ptr<ControlClient>> ControlClient::connect(const std::string& address,
                                                              const std::string& token,
                                                              milliseconds connect_timeout,
                                                              const TlsOptions& tls) {
  if (address.empty()) return invalid_argument("control client: coordinator address is empty");
  GP_RETURN_IF_ERROR(check_connect_address("coordinator address", address));
  grpc::ChannelArguments args;
  // The control plane is cluster-internal: never through an HTTP proxy from the environment.
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  // Ranks often start before the coordinator listens: retry quickly rather than backing off
  // for up to two minutes, and never share a subchannel (and its backoff) with other channels.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  GP_ASSIGN_OR_RETURN(auto credentials, channel_credentials(tls));
  auto channel = grpc::CreateCustomChannel(address, credentials, args);
  if (!channel) {
    return Status(StatusCode::kUnavailable,
                  fmt::format("cannot create a channel to the coordinator at {}", address));
  }
  if (!channel->WaitForConnected(deadline_after(connect_timeout))) {
    // One call on the failed channel returns gRPC's reason (e.g. the TLS handshake's).
    auto stub = pb::Executor::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline_after(milliseconds(1000)));
    pb::GetStatusRequest request;
    pb::GetStatusResponse response;
    const grpc::Status s = stub->GetStatus(&ctx, request, &response);
    const std::string detail =
        s.error_code() == grpc::StatusCode::UNAVAILABLE ? s.error_message() : std::string();
    return Status(StatusCode::kUnavailable,
                  fmt::format("cannot reach the coordinator at {} within {}{}: {}", address,
                              seconds_text(connect_timeout), tls.enabled() ? " over TLS" : "",
                              explain_connect_failure(address, tls, detail)));
  }
  return std::unique_ptr<ControlClient>(new ControlClient(address, token, std::move(channel)));
}

ControlClient::ControlClient(std::string address, std::string token,
                             std::shared_ptr<grpc::Channel> channel)
    : address_(std::move(address)),
      token_(std::move(token)),
      channel_(std::move(channel)),
      stub_(std::make_unique<Stub>(Stub{pb::Executor::NewStub(channel_)})) {}

ControlClient::~ControlClient() = default;

Result<pb::RegisterResponse> ControlClient::register_rank(pb::RegisterRequest request,
                                                          milliseconds timeout) {
  if (timeout <= milliseconds::zero()) {
    return invalid_argument(fmt::format("Register: timeout = {} ms, must be > 0", timeout.count()));
  }
  timeout = std::min(timeout, kMaxTimeout);
  request.set_timeout_ms(timeout.count());
  pb::RegisterResponse response;
  GP_RETURN_IF_ERROR(unary_call(*stub_->stub, &pb::Executor::Stub::Register, "Register", address_,
                                token_, request, &response, timeout + kBlockingCallGrace));
  return response;
}

Result<pb::Plan> ControlClient::get_plan(int rank) {
  pb::GetPlanRequest request;
  request.set_rank(rank);
  pb::GetPlanResponse response;
  GP_RETURN_IF_ERROR(unary_call(*stub_->stub, &pb::Executor::Stub::GetPlan, "GetPlan", address_,
                                token_, request, &response, default_timeout_));
  return std::move(*response.mutable_plan());
}

Status ControlClient::barrier(int rank, const std::string& name, milliseconds timeout) {
  if (timeout <= milliseconds::zero()) {
    return invalid_argument(
        fmt::format("Barrier: barrier '{}': timeout = {} ms, must be > 0", name, timeout.count()));
  }
  timeout = std::min(timeout, kMaxTimeout);
  pb::BarrierRequest request;
  request.set_rank(rank);
  request.set_name(name);
  request.set_timeout_ms(timeout.count());
  pb::BarrierResponse response;
  return unary_call(*stub_->stub, &pb::Executor::Stub::Barrier, "Barrier", address_, token_,
                    request, &response, timeout + kBlockingCallGrace);
}

Result<pb::HeartbeatResponse> ControlClient::heartbeat(const pb::RankStatus& status) {
  return heartbeat(status, default_timeout_);
}

Result<pb::HeartbeatResponse> ControlClient::heartbeat(const pb::RankStatus& status,
                                                       milliseconds timeout) {
  pb::HeartbeatRequest request;
  *request.mutable_status() = status;
  pb::HeartbeatResponse response;
  GP_RETURN_IF_ERROR(unary_call(*stub_->stub, &pb::Executor::Stub::Heartbeat, "Heartbeat", address_,
                                token_, request, &response, timeout));
  return response;
}

Status ControlClient::report_status(const pb::RankStatus& status) {
  pb::ReportStatusRequest request;
  *request.mutable_status() = status;
  pb::ReportStatusResponse response;
  return unary_call(*stub_->stub, &pb::Executor::Stub::ReportStatus, "ReportStatus", address_,
                    token_, request, &response, default_timeout_);
}

Status ControlClient::report_metrics(int rank,
                                     const std::vector<pb::IterationMetrics>& iterations) {
  pb::ReportMetricsRequest request;
  request.set_rank(rank);
  for (const pb::IterationMetrics& m : iterations) *request.add_iterations() = m;
  pb::ReportMetricsResponse response;
  return unary_call(*stub_->stub, &pb::Executor::Stub::ReportMetrics, "ReportMetrics", address_,
                    token_, request, &response, default_timeout_);
}

Status ControlClient::report_timings(int rank, const pb::RankTimings& timings) {
  pb::ReportMetricsRequest request;
  request.set_rank(rank);
  *request.mutable_timings() = timings;
  pb::ReportMetricsResponse response;
  return unary_call(*stub_->stub, &pb::Executor::Stub::ReportMetrics, "ReportMetrics", address_,
                    token_, request, &response, default_timeout_);
}

Result<pb::GetStatusResponse> ControlClient::get_status() {
  pb::GetStatusRequest request;
  pb::GetStatusResponse response;
  GP_RETURN_IF_ERROR(unary_call(*stub_->stub, &pb::Executor::Stub::GetStatus, "GetStatus", address_,
                                token_, request, &response, default_timeout_));
  return response;
}

Status ControlClient::abort(int rank, const std::string& reason) {
  pb::AbortRequest request;
  request.set_rank(rank);
  request.set_reason(reason);
  pb::AbortResponse response;
  return unary_call(*stub_->stub, &pb::Executor::Stub::Abort, "Abort", address_, token_, request,
                    &response, default_timeout_);
}

Status ControlClient::request_stop(int rank, int signal, const std::string& reason) {
  pb::RequestStopRequest request;
  request.set_rank(rank);
  request.set_signal(signal);
  request.set_reason(reason);
  pb::RequestStopResponse response;
  return unary_call(*stub_->stub, &pb::Executor::Stub::RequestStop, "RequestStop", address_, token_,
                    request, &response, default_timeout_);
}

Result<pb::ProposeStopResponse> ControlClient::propose_stop(int rank, int64_t iteration) {
  pb::ProposeStopRequest request;
  request.set_rank(rank);
  request.set_iteration(iteration);
  pb::ProposeStopResponse response;
  GP_RETURN_IF_ERROR(unary_call(*stub_->stub, &pb::Executor::Stub::ProposeStop, "ProposeStop",
                                address_, token_, request, &response, default_timeout_));
  return response;
}

Status ControlClient::store_set(int rank, const std::string& key, const std::string& value) {
  pb::StoreSetRequest request;
  request.set_rank(rank);
  request.set_key(key);
  request.set_value(value);
  pb::StoreSetResponse response;
  return unary_call(*stub_->stub, &pb::Executor::Stub::StoreSet, "StoreSet", address_, token_,
                    request, &response, default_timeout_);
}

Result<std::optional<std::string>> ControlClient::store_get(int rank, const std::string& key) {
  pb::StoreGetRequest request;
  request.set_rank(rank);
  request.set_key(key);
  pb::StoreGetResponse response;
  GP_RETURN_IF_ERROR(unary_call(*stub_->stub, &pb::Executor::Stub::StoreGet, "StoreGet", address_,
                                token_, request, &response, default_timeout_));
  if (!response.found()) return std::optional<std::string>();
  return std::optional<std::string>(std::move(*response.mutable_value()));
}

}  // namespace gp::exec
