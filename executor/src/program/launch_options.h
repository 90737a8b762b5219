// The command line of `graphpipe-executor launch` (scripts/graphpipe-launch runs it): every flag
// as the user gave it, checked before anything is created or started. Values are kept as text
// where the check's message must name the value exactly as it was typed.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "gp/common/status.h"

namespace gp::exec::daemon {

struct LaunchOptions {
  // How the user started us (the wrapper's $0, else `graphpipe-executor launch`): the resume
  // hint repeats it.
  std::vector<std::string> invoked_as = {"graphpipe-executor", "launch"};
  // The executor ranks run (the wrapper's --executor, else $GP_EXECUTOR, else this program).
  std::string executor;
  std::vector<std::string> given;  // the flags before `--`, as typed
  std::vector<std::string> extra;  // after `--`: passed to every rank's `run`
  bool dashdash = false;           // whether the command line had a `--`

  std::string plan;
  int nprocs = 0;  // 0: the plan's rank count
  int iterations = 5;
  std::string metrics, tensorboard, trace, measured_profile;
  int timeout_s = 30;
  std::string tls_cert, tls_key, tls_ca;
  bool no_tls = false;
  std::string run_dir;
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  bool resume = false, resume_if_present = false;
  bool replan_on_failure = false;
  int max_restarts = 3;
  int kill_grace_s = 2;
  int orphan_timeout_s = 30;
  std::string hostfile;
  std::string remote_shell = "ssh -o BatchMode=yes";
  int port = 29500;
  std::string iface;
  bool slurm = false;
  // Per node (torchrun's form): nnodes > 0.
  int nnodes = 0, node_rank = 0, nproc_per_node = 0;
  std::string master_addr;
  int master_port = 0;
  std::string token;  // from --auth-token-file (the wrapper never sees it)
  std::string job_id;
  std::string device = "cpu";
  std::string log_level;
  int log_every = 1;
  std::map<int, std::string> slowdown;  // --slowdown RANK:FACTOR by rank (FACTOR as typed)

  bool adapt = false;
  int adapt_warmup = 10;
  std::string adapt_drop = "0.1", adapt_min_gain = "0.1";
  int adapt_max_switches = 3;
  int adapt_confirm = 2;  // checks in a row that must agree before a switch
  std::string adapt_profile;

  bool per_node() const { return nnodes > 0; }
  // Ranks that may span hosts: the control plane then runs TLS by default.
  bool multi_host() const { return !hostfile.empty() || slurm || per_node(); }
};

// What parsing asks of the caller: run the job, or exit with `exit_code` (after --help,
// --version, or a refusal already printed).
struct LaunchCommandLine {
  bool run = false;
  int exit_code = 0;
  LaunchOptions options;
};

// Parses `args` (the words after `launch`) and checks them; prints help, the version or the
// refusal ("graphpipe-launch: error: --kill-grace must be ...") itself.
LaunchCommandLine parse_launch_command_line(const std::vector<std::string>& args);

// $GP_AUTH_TOKEN, "" when unset or empty.
std::string token_from_environment();

}  // namespace gp::exec::daemon
