// The node daemon (`graphpipe-executor serve`) and its client (`submit`): a daemon per node
// starts the ranks of submitted plans on its devices, one rank per device, reports their state
// and output, and stops them; `submit` spreads a plan's ranks over the daemons and follows the
// job to its end.
#pragma once

#include <string>
#include <vector>

#include "control/tls.h"
#include "gp/common/status.h"

namespace gp::exec::daemon {

// The most devices (ranks) one daemon serves.
inline constexpr int kMaxDevicesPerNode = 1024;

struct ServeOptions {
  std::string listen = "127.0.0.1:29600";  // never all interfaces unless asked for
  int devices = 1;                         // 1..kMaxDevicesPerNode
  std::string accelerator = "cpu";         // "cuda": the rank on device slot d trains on cuda:d
  std::string bind_host;                   // ranks' data plane; default: the host part of `listen`
  std::string work_dir;  // job directories (plans, logs); default: a temporary directory
  // Every path a job request names for its ranks to write or read (--metrics-out, --trace,
  // --checkpoint-dir, --resume, the store directory) must resolve inside it; default: work_dir.
  std::string output_root;
  std::string auth_token;  // or $GP_AUTH_TOKEN; required from clients when set
  bool insecure = false;   // serve without a token (refused otherwise)
  // Enabled: serve TLS, clients need a certificate of tls.ca, and the ranks get the same files
  // (rank 0 serves its coordinator with them, every rank connects with them).
  TlsOptions tls;
};

struct SubmitOptions {
  std::string plan;
  std::vector<std::string> nodes;  // daemon addresses, host:port, in node order
  int iterations = 5;
  int timeout_s = 30;
  int port = 29500;                // the coordinator's port on the first node
  std::string store_dir;           // shared by every node; default: each daemon's own
  std::string auth_token;          // or $GP_AUTH_TOKEN
  TlsOptions tls;                  // connect to the daemons over TLS
  std::vector<std::string> extra;  // executor run flags for every rank
};

Status run_serve(const ServeOptions& options);
// The exit code of a job that ran: 0, or 128 + the signal when SIGINT/SIGTERM stopped it (then
// its last line says where, and how to resume).
Result<int> run_submit(const SubmitOptions& options);

}  // namespace gp::exec::daemon
