// The control plane's TLS files when the user gives none: a CA of the job's own and one
// certificate for its processes, so that a job whose ranks span hosts runs mutual TLS by default.
//
// The CA's private key is derived from the job's token (SHA-256 of a label, the job id and the
// token, as a P-256 scalar) and never written: every launcher that holds the token (each node's
// in per-node mode, which share no directory) derives the same CA and signs a certificate of its
// own that the others accept. Whoever holds the token can do the same, and could already
// authenticate to the job; TLS adds that the token, plans and metrics cross the wire encrypted,
// and that only token holders complete a handshake.
#pragma once

#include <string>
#include <vector>

#include "control/tls.h"
#include "gp/common/status.h"

namespace gp::exec {

struct JobTlsRequest {
  std::string token;               // the job's control-plane token
  std::string job_id;              // its id: the CA's name, and part of the key's derivation
  std::vector<std::string> names;  // the coordinator's addresses/host names (subjectAltName)
  std::string dir;                 // written: ca.pem, cert.pem, key.pem (0600), dir made 0700
  int valid_days = 365;
};

// Writes the CA certificate and a certificate for serverAuth and clientAuth naming `names`
// (IP literals as IP, others as DNS), with a fresh P-256 key, each file replaced whole. The paths,
// absolute, as --tls-cert/--tls-key/--tls-ca would give them. INVALID_ARGUMENT naming what is
// wrong (an empty token or name, a directory that cannot be written).
Result<TlsOptions> make_job_tls(const JobTlsRequest& request);

}  // namespace gp::exec
