#include "control/server_guard.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/server_credentials.h>
#include <spdlog/fmt/fmt.h>

#include <utility>

#include "gp/common/logging.h"

namespace gp::exec {
namespace {

// Judges one call from its headers, and logs a refusal (the path names the RPC).
Status judge(const ServerGuard& guard, std::optional<std::string_view> authorization,
             std::string_view path) {
  Status s = guard.check(authorization);
  if (!s.ok()) {
    log::get("rpc")->warn("{}: {} refused before its request was read: {}", guard.name,
                          path.empty() ? std::string_view("a call") : path, s.message());
  }
  return s;
}

// TLS: gRPC's C++ processor interface, which its SSL credentials take.
class HeaderProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit HeaderProcessor(ServerGuard guard) : guard_(std::move(guard)) {}

  // A string comparison: run inline on gRPC's thread rather than on a thread pool.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext*, OutputMetadata*,
                       OutputMetadata*) override {
    std::optional<std::string_view> authorization;
    std::string_view path;
    for (const auto& [key, value] : metadata) {
      const std::string_view k(key.data(), key.size());
      if (k == "authorization") authorization.emplace(value.data(), value.size());
      if (k == ":path") path = std::string_view(value.data(), value.size());
    }
    const Status s = judge(guard_, authorization, path);
    return s.ok() ? grpc::Status::OK
                  : grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
  }

 private:
  ServerGuard guard_;
};

std::string_view view(const grpc_slice& s) {
  return {reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(s)), GRPC_SLICE_LENGTH(s)};
}

// Plaintext: gRPC's C++ InsecureServerCredentials refuses a processor (it asserts), while the
// core's insecure credentials take one. This is those core credentials with the guard's check,
// added to the server the way the C++ class adds its own.
class InsecureCredentialsWithCheck final : public grpc::ServerCredentials {
 public:
  explicit InsecureCredentialsWithCheck(ServerGuard guard) : guard_(std::move(guard)) {}

  // Unused: the guard's check is the processor (see AddPortToServer).
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    grpc_server_credentials* creds = grpc_insecure_server_credentials_create();
    // The core owns the state from here and frees it with `destroy`.
    grpc_server_credentials_set_auth_metadata_processor(
        creds, grpc_auth_metadata_processor{&process, &destroy, new ServerGuard(guard_)});
    const int port = grpc_server_add_http2_port(server, addr.c_str(), creds);
    grpc_server_credentials_release(creds);
    return port;
  }

  static void process(void* state, grpc_auth_context*, const grpc_metadata* md, size_t num_md,
                      grpc_process_auth_metadata_done_cb done, void* user_data) {
    std::optional<std::string_view> authorization;
    std::string_view path;
    for (size_t i = 0; i < num_md; ++i) {
      const std::string_view key = view(md[i].key);
      if (key == "authorization") authorization = view(md[i].value);
      if (key == ":path") path = view(md[i].value);
    }
    const Status s = judge(*static_cast<const ServerGuard*>(state), authorization, path);
    done(user_data, nullptr, 0, nullptr, 0, static_cast<grpc_status_code>(s.code()),
         s.ok() ? nullptr : s.message().c_str());
  }

  static void destroy(void* state) { delete static_cast<ServerGuard*>(state); }

  ServerGuard guard_;
};

}  // namespace

Status add_guarded_port(grpc::ServerBuilder& builder, const std::string& address,
                        const TlsOptions& tls, const ServerGuard& guard, int* port) {
  if (guard.max_request_bytes <= 0 || guard.max_response_bytes <= 0 ||
      guard.buffer_bytes <= guard.max_request_bytes) {
    return invalid_argument(fmt::format(
        "{}: max_request_bytes = {}, max_response_bytes = {}, buffer_bytes = {}: the limits must "
        "be positive and the buffer larger than a request",
        guard.name, guard.max_request_bytes, guard.max_response_bytes, guard.buffer_bytes));
  }
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (!guard.check) {
    GP_ASSIGN_OR_RETURN(credentials, server_credentials(tls));
  } else if (!tls.enabled()) {
    credentials = std::make_shared<InsecureCredentialsWithCheck>(guard);
  } else {
    GP_ASSIGN_OR_RETURN(credentials, server_credentials(tls));
    credentials->SetAuthMetadataProcessor(std::make_shared<HeaderProcessor>(guard));
  }
  builder.AddListeningPort(address, credentials, port);
  builder.SetMaxReceiveMessageSize(guard.max_request_bytes);
  builder.SetMaxSendMessageSize(guard.max_response_bytes);
  grpc::ResourceQuota quota(guard.name);
  quota.Resize(static_cast<size_t>(guard.buffer_bytes));
  builder.SetResourceQuota(quota);
  return ok_status();
}

std::optional<std::string_view> authorization_of(const grpc::ServerContext& ctx) {
  const auto& metadata = ctx.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  return std::string_view(it->second.data(), it->second.size());
}

}  // namespace gp::exec
