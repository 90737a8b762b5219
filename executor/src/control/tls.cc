#include "control/tls.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netdb.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "control/openssl_util.h"
#include "gp/common/file_read.h"

namespace gp::exec {
namespace {

// A key file is never prompted for (no terminal in a rank): an encrypted key fails to load.
int no_passphrase(char*, int, int, void*) { return -1; }

Result<std::string> read_pem_file(const char* flag, const std::string& path) {
  if (::access(path.c_str(), R_OK) != 0) {
    return invalid_argument(std::string(flag) + " " + path + ": " + std::strerror(errno));
  }
  FileReadOptions options;  // certificates and keys: KiB, a CA bundle a few hundred
  options.max_bytes = 16 << 20;
  auto text = read_regular_file(path, options);
  if (!text.ok()) {
    return invalid_argument(std::string(flag) + " " + path + ": " + text.status().message());
  }
  return std::move(*text);
}

// The certificates of a PEM file, each within its validity period.
Result<std::vector<X509Ptr>> parse_certificates(const char* flag, const std::string& path,
                                                const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::vector<X509Ptr> certs;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr)) {
    certs.emplace_back(x);
  }
  ERR_clear_error();  // the end of the file reads as an error
  if (certs.empty()) {
    return invalid_argument(std::string(flag) + " " + path +
                            ": no PEM certificate in it (expected '-----BEGIN CERTIFICATE-----')");
  }
  for (size_t i = 0; i < certs.size(); ++i) {
    const std::string which =
        certs.size() > 1 ? " (certificate " + std::to_string(i + 1) + ")" : "";
    if (X509_cmp_current_time(X509_get0_notAfter(certs[i].get())) < 0) {
      return invalid_argument(std::string(flag) + " " + path + which + ": expired");
    }
    if (X509_cmp_current_time(X509_get0_notBefore(certs[i].get())) > 0) {
      return invalid_argument(std::string(flag) + " " + path + which + ": not valid yet");
    }
  }
  return certs;
}

// --tls-key and --tls-cert: the key readable by its owner only, unencrypted, and the
// certificate's.
Status check_key_pair(const TlsOptions& tls) {
  struct stat st {};
  if (::stat(tls.key.c_str(), &st) != 0) {
    return invalid_argument("--tls-key " + tls.key + ": " + std::strerror(errno));
  }
  // Before its mode: a directory or a FIFO is no key file, whoever may read it.
  if (!S_ISREG(st.st_mode)) {
    return invalid_argument("--tls-key " + tls.key + ": is " + std::string(file_kind(st.st_mode)) +
                            ", not a regular file");
  }
  if ((st.st_mode & 077) != 0) {
    return invalid_argument("--tls-key " + tls.key +
                            ": readable or writable by others (chmod 600 it)");
  }
  GP_ASSIGN_OR_RETURN(const std::string cert_pem, read_pem_file("--tls-cert", tls.cert));
  GP_ASSIGN_OR_RETURN(const auto certs, parse_certificates("--tls-cert", tls.cert, cert_pem));
  GP_ASSIGN_OR_RETURN(const std::string key_pem, read_pem_file("--tls-key", tls.key));
  BioPtr bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  KeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr));
  if (!key) {
    const std::string why = openssl_error();
    if (key_pem.find("ENCRYPTED") != std::string::npos) {
      return invalid_argument("--tls-key " + tls.key +
                              ": the key is encrypted; give it unencrypted (mode 0600)");
    }
    return invalid_argument("--tls-key " + tls.key +
                            ": no PEM private key in it (expected '-----BEGIN PRIVATE KEY-----')" +
                            (why.empty() ? "" : ": " + why));
  }
  if (X509_check_private_key(certs.front().get(), key.get()) != 1) {
    ERR_clear_error();
    return invalid_argument("--tls-key " + tls.key + " is not the key of --tls-cert " + tls.cert);
  }
  return ok_status();
}

// host and port of "host:port" or "[v6]:port".
bool split_address(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return !host->empty() && !port->empty();
}

// Whether something accepts a TCP connection at `address` within a second.
bool tcp_accepts(const std::string& address) {
  std::string host, port;
  if (!split_address(address, &host, &port)) return false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0) return false;
  bool accepted = false;
  for (addrinfo* a = found; a != nullptr && !accepted; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      accepted = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof(err);
      accepted = poll(&p, 1, 1000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
                 err == 0;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return accepted;
}

}  // namespace

Status check_tls(const TlsOptions& tls, TlsRole role) {
  if (!tls.enabled()) return ok_status();
  const bool server = role != TlsRole::kClient;
  const bool client = role != TlsRole::kServer;
  if (tls.cert.empty() != tls.key.empty()) {
    return invalid_argument(tls.cert.empty() ? "--tls-key " + tls.key + " needs --tls-cert"
                                             : "--tls-cert " + tls.cert + " needs --tls-key");
  }
  if (server && tls.cert.empty()) {
    return invalid_argument("--tls-ca " + tls.ca +
                            ": serving TLS needs --tls-cert and --tls-key (this process listens)");
  }
  if (client && tls.ca.empty()) {
    return invalid_argument("--tls-cert " + tls.cert +
                            ": a TLS client needs --tls-ca, the CA that signed the server's "
                            "certificate");
  }
  if (!tls.cert.empty()) GP_RETURN_IF_ERROR(check_key_pair(tls));
  if (!tls.ca.empty()) {
    GP_ASSIGN_OR_RETURN(const std::string ca_pem, read_pem_file("--tls-ca", tls.ca));
    GP_RETURN_IF_ERROR(parse_certificates("--tls-ca", tls.ca, ca_pem).status());
  }
  return ok_status();
}

TlsOptions absolute_tls(const TlsOptions& tls) {
  auto abs = [](const std::string& p) {
    if (p.empty()) return p;
    std::error_code ec;
    const auto a = std::filesystem::absolute(p, ec);
    return ec ? p : a.lexically_normal().string();
  };
  return {abs(tls.cert), abs(tls.key), abs(tls.ca)};
}

std::vector<std::string> tls_flags(const TlsOptions& tls) {
  std::vector<std::string> out;
  if (!tls.cert.empty()) out.insert(out.end(), {"--tls-cert", tls.cert});
  if (!tls.key.empty()) out.insert(out.end(), {"--tls-key", tls.key});
  if (!tls.ca.empty()) out.insert(out.end(), {"--tls-ca", tls.ca});
  return out;
}

Result<std::shared_ptr<grpc::ServerCredentials>> server_credentials(const TlsOptions& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  GP_RETURN_IF_ERROR(check_tls(tls, TlsRole::kServer));
  // With a CA, a client without a certificate of it is refused during the handshake, before
  // any RPC (or token) reaches the service.
  grpc::SslServerCredentialsOptions options(
      tls.ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                     : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  GP_ASSIGN_OR_RETURN(pair.private_key, read_pem_file("--tls-key", tls.key));
  GP_ASSIGN_OR_RETURN(pair.cert_chain, read_pem_file("--tls-cert", tls.cert));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!tls.ca.empty()) {
    GP_ASSIGN_OR_RETURN(options.pem_root_certs, read_pem_file("--tls-ca", tls.ca));
  }
  auto creds = grpc::SslServerCredentials(options);
  if (!creds) return invalid_argument("--tls-cert " + tls.cert + ": gRPC refused the credentials");
  return creds;
}

Result<std::shared_ptr<grpc::ChannelCredentials>> channel_credentials(const TlsOptions& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  GP_RETURN_IF_ERROR(check_tls(tls, TlsRole::kClient));
  grpc::SslCredentialsOptions options;
  GP_ASSIGN_OR_RETURN(options.pem_root_certs, read_pem_file("--tls-ca", tls.ca));
  if (!tls.cert.empty()) {
    GP_ASSIGN_OR_RETURN(options.pem_private_key, read_pem_file("--tls-key", tls.key));
    GP_ASSIGN_OR_RETURN(options.pem_cert_chain, read_pem_file("--tls-cert", tls.cert));
  }
  auto creds = grpc::SslCredentials(options);
  if (!creds) return invalid_argument("--tls-ca " + tls.ca + ": gRPC refused the credentials");
  return creds;
}

std::string explain_connect_failure(const std::string& address, const TlsOptions& tls,
                                    const std::string& detail) {
  std::string why;
  // A failed handshake proves a server was there, even if it is gone by now (its own timeout).
  const bool handshake = detail.find("andshake failed") != std::string::npos;
  if (!(tls.enabled() && handshake) && !tcp_accepts(address)) {
    why = "nothing accepts connections there";
  } else if (tls.enabled()) {
    // The handshake's failures as gRPC reports them (OpenSSL's reasons) name the side at fault.
    why = "a server listens there but no TLS session came up: ";
    if (detail.find("wrong version number") != std::string::npos) {
      why += "it serves plaintext (no --tls-cert)";
    } else if (detail.find("certificate verify failed") != std::string::npos) {
      why += "its certificate does not chain to --tls-ca " + tls.ca;
    } else if (detail.find("Socket closed") != std::string::npos) {
      why += "it ended the handshake, most likely refusing this client's certificate (" +
             (tls.cert.empty() ? std::string("none given") : "--tls-cert " + tls.cert) +
             "; it needs one its CA signed)";
    } else {
      why += "it may serve plaintext (no --tls-cert), its certificate may not chain to --tls-ca " +
             tls.ca + " or not name this address, or it refused this client's certificate";
    }
  } else {
    why =
        "a server listens there but does not answer plaintext gRPC: it may require TLS (give "
        "--tls-ca, and --tls-cert/--tls-key when it requires client certificates)";
  }
  if (!detail.empty()) why += " (" + detail + ")";
  return why;
}

}  // namespace gp::exec
