// Optional TLS for the control plane: the coordinator, the node daemon and their clients (ranks,
// `status`, `submit`) take --tls-cert, --tls-key and --tls-ca, the paths of PEM files (paths, not
// contents, travel to the ranks, so no key material appears in a command line).
//
// A server needs --tls-cert and --tls-key; given --tls-ca as well it requires every client to
// present a certificate that chains to that CA (mutual TLS). A client needs --tls-ca, the CA the
// server's certificate must chain to (that certificate must also name the address the client
// dials, as an IP or DNS subjectAltName), and presents --tls-cert/--tls-key when given. No flag at
// all: plaintext, as before.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gp/common/status.h"

namespace grpc {
class ServerCredentials;
class ChannelCredentials;
}  // namespace grpc

namespace gp::exec {

struct TlsOptions {
  std::string cert;  // --tls-cert: this process's certificate (chain), PEM
  std::string key;   // --tls-key: its private key, PEM, unencrypted, mode 0600
  std::string ca;    // --tls-ca: CA certificates the peer's certificate must chain to, PEM
  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// What a process does with the files: serve, connect, or both (rank 0 hosts the coordinator and
// is a client of it).
enum class TlsRole { kServer, kClient, kServerAndClient };

// Checks the flags for `role` before anything listens or connects: the combination (a server
// needs --tls-cert and --tls-key, a client --tls-ca, a certificate needs its key and vice versa),
// and each file: readable, PEM of the right kind, certificates within their validity period, the
// key unencrypted, readable by its owner only and belonging to the certificate. INVALID_ARGUMENT
// naming the flag and the path. OK when TLS is off.
Status check_tls(const TlsOptions& tls, TlsRole role);

// The same paths made absolute, for processes started in another directory or on another host.
TlsOptions absolute_tls(const TlsOptions& tls);

// "--tls-cert PATH", "--tls-key PATH", "--tls-ca PATH" for the flags that are set.
std::vector<std::string> tls_flags(const TlsOptions& tls);

// gRPC credentials for the files (after check_tls for the role); plaintext ones when TLS is off.
Result<std::shared_ptr<grpc::ServerCredentials>> server_credentials(const TlsOptions& tls);
Result<std::shared_ptr<grpc::ChannelCredentials>> channel_credentials(const TlsOptions& tls);

// Why no channel to `address` came up, for an error message: whether anything accepts TCP
// connections there (then the two ends disagree about TLS or certificates), with gRPC's own
// `detail` when it has one.
std::string explain_connect_failure(const std::string& address, const TlsOptions& tls,
                                    const std::string& detail);

}  // namespace gp::exec
