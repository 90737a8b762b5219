// The per-rank daemon (`graphpipe-executor run`), the standalone coordinator and `status`.
#pragma once

#include <string>

#include "control/tls.h"
#include "gp/common/status.h"

namespace gp::exec::daemon {

struct RunOptions {
  std::string plan;
  int rank = -1;
  int world_size = 0;
  std::string coordinator;       // host:port; rank 0 hosts it there unless external_coordinator
  std::string coordinator_file;  // rank 0 writes the bound address here; others read it
  bool external_coordinator = false;
  std::string store_dir;                 // Gloo rendezvous directory shared by the ranks
  std::string rendezvous = "store-dir";  // or "coordinator": through rank 0's StoreSet/StoreGet
  std::string data_plane = "auto";      // auto: NCCL on CUDA, else shared memory + Gloo; gloo; nccl
  std::string cpu_affinity = "auto";    // auto: co-located ranks' compute threads on distinct cores
  std::string bind_host = "127.0.0.1";  // data-plane interface
  std::string auth_token;               // or $GP_AUTH_TOKEN
  TlsOptions tls;                       // rank 0 serves with it; every rank connects with it
  std::string device = "cpu";           // cpu or cuda:N
  std::string precision = "fp32";       // GEMM input precision on CUDA: fp32, tf32, bf16
  int iterations = 5;
  int timeout_s = 30;  // peers, registration, heartbeats
  int heartbeat_ms = 500;
  std::string metrics_out;       // rank 0: the job's per-iteration metrics
  std::string tensorboard;       // rank 0: a directory for TensorBoard event files of them
  std::string trace;             // rank 0: the job's measured trace; ranks write <trace>.rank<r>
  std::string checkpoint_dir;    // write checkpoints here ...
  int checkpoint_every = 0;      // ... after every this many iterations (0: never)
  std::string resume;            // start from the newest checkpoint in this directory
  std::string resume_optional;   // --resume-if-present: as resume, or start fresh (a warning)
  bool allow_new_seed = false;   // resume even when the seed or data stream differs (a warning)
  std::string data;              // training data: one <input op id>.npy per graph input
  bool no_shuffle = false;       // with data: file order every epoch
  std::string eval_data;         // held-out samples (data's layout): the loss on them ...
  int eval_every = 0;            // ... after every this many iterations and the last (0: last)
  int log_every = 1;             // rank 0: a progress line per this many iterations
  bool allow_nonfinite = false;  // a NaN/inf loss trains on instead of stopping the job (exit 3)
  std::string verdict_file;      // rank 0: when the job aborts, "failed_rank=R\nreason=...\n"
  // rank 0: when a requested stop ends training early, "stopped_after N\niterations M\n" and,
  // with a checkpoint directory, "checkpoint DIR/iter-N\n" (what the launcher's summary says).
  std::string stop_file;
  std::string job_id;           // rank 0's coordinator names the job so (default: a random id)
  std::string launcher_beacon;  // a file the launcher rewrites every second ...
  std::string daemon_beacon;    // ... or the node daemon that started the rank ...
  int orphan_timeout_s = 30;    // ... and the rank stops when it stays unchanged this long
  // Testing: "R:K" makes rank R SIGKILL itself when it starts iteration K of a run that did not
  // resume (so a re-planned run carries on).
  std::string kill_rank_at;
  // Measured costs (measured_profile.h) and the slowdown test aid (op_timing.h).
  double slowdown = 1.0;             // stretch this rank's compute by this factor (>= 1)
  int measure_every = 10;            // time every op each K-th iteration after 2 (0: never)
  std::string measured_profile_out;  // rank 0: every rank's times as a ProfileDB ("": none)
};

struct CoordinatorRunOptions {
  std::string plan;
  int world_size = 0;
  std::string listen = "127.0.0.1:0";
  std::string coordinator_file;
  std::string auth_token;
  TlsOptions tls;
  int timeout_s = 30;
};

// Whether `dir` holds a checkpoint to resume from (a LATEST file or a complete iter-N, checked
// or not): what --resume-if-present and the launcher go by. A missing directory holds none.
bool holds_checkpoint(const std::string& dir);

// Exit codes of `run` beside gp::cli's: a non-finite loss, and a stop asked for by a signal.
constexpr int kExitNonFiniteLoss = 3;

// Trains one rank. The value is the exit code of a run that ended as planned: 0, or 128 + the
// signal when SIGTERM/SIGINT (at any rank) stopped it at an iteration boundary.
Result<int> run_rank(const RunOptions& options);
Status run_coordinator(const CoordinatorRunOptions& options);
Status print_status(const std::string& coordinator, const std::string& auth_token,
                    const TlsOptions& tls, bool json);

}  // namespace gp::exec::daemon
