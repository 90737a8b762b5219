// What every gRPC server of the executor gets before it listens (the coordinator, in rank 0 or
// standalone, and the node daemon of `serve`): a size limit for requests and responses, a memory
// quota for what its transport buffers, and, with a token, a check of each call's
// 'authorization' header before gRPC reads the call's request.
//
// NOTE [what gRPC guarantees] (gRPC 1.51, as Debian ships it)
// - The maximum receive message size is compared with a request's length only once the whole
//   request has arrived: chttp2 buffers it first (grpc/grpc#43012). Alone it bounds nothing: a
//   200 MB request to a server with a 4 MiB limit is buffered, then refused RESOURCE_EXHAUSTED.
// - The resource quota bounds what the transport holds (read buffers, calls): past it gRPC
//   cancels the stream that holds the memory (RST_STREAM ENHANCE_YOUR_CALM; the client sees
//   RESOURCE_EXHAUSTED). It must leave room for the largest legitimate request and every
//   rank's calls, so it is sized from the limit and the number of clients.
// - The auth metadata processor runs on a call's headers, before the server asks the transport
//   for the request (a unary handler is called only once its request is read in full). A refused
//   call is cancelled there and what the client already sent is dropped with the stream, so an
//   unauthenticated caller gets at most an HTTP/2 window buffered, not its message.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "control/tls.h"
#include "gp/common/status.h"

namespace grpc {
class ServerBuilder;
class ServerContext;
}  // namespace grpc

namespace gp::exec {

// OK for a call with this 'authorization' header value (nullopt: none), else UNAUTHENTICATED
// saying why. Must be thread-safe: gRPC calls it on its own threads.
using AuthorizationCheck = std::function<Status(std::optional<std::string_view> authorization)>;

struct ServerGuard {
  std::string name;            // "coordinator", "daemon": for log lines
  int max_request_bytes = 0;   // the largest request a call may send (> 0)
  int max_response_bytes = 0;  // the largest response it may get (> 0)
  int64_t buffer_bytes = 0;    // the transport's memory quota (> max_request_bytes)
  AuthorizationCheck check;    // empty: every call is accepted
};

// Adds a listening port on `address` with the credentials of `tls` to `builder` and applies
// `guard`: the message limits, the quota and, when guard.check is set, the header check ahead of
// every call. `*port` is filled in by BuildAndStart as with ServerBuilder::AddListeningPort.
Status add_guarded_port(grpc::ServerBuilder& builder, const std::string& address,
                        const TlsOptions& tls, const ServerGuard& guard, int* port);

// The 'authorization' header of a call, for the handlers' own check.
std::optional<std::string_view> authorization_of(const grpc::ServerContext& ctx);

}  // namespace gp::exec
