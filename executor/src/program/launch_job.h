// `graphpipe-executor launch` (scripts/graphpipe-launch): starts every rank of a plan, locally,
// over ssh, under srun or per node as torchrun does, runs each attempt under the supervisor
// (`launcher supervise`, a process of its own), and decides what follows an attempt: done, a
// re-plan without a failed device (--on-failure replan), or a switch to a faster plan (--adapt).
// Its setup is in launch_job.cc, one attempt in launch_attempt.cc, --adapt in launch_adapt.cc.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/common/steady_clock.h"
#include "launch/launch.h"
#include "launch/supervisor.h"
#include "launch_options.h"
#include "launch_placement.h"

namespace gp::exec::daemon {

// The state of --adapt's checks. Per job: switches made, the first check's calibration, how long
// the last switch's stop took. Per attempt: its first iteration, when the next check is due, when
// it started and when its first iteration was logged (the restart's cost), the check running, how
// many checks in a row found a switch worth it, and a switch under way.
struct AdaptState {
  int switches = 0;
  std::string calibration;
  int64_t stop_took_ms = -1;  // -1: no switch yet
  bool stopping = false;
  std::string next_plan;
  int64_t stop_sent_ms = 0;
  // This attempt's.
  std::string dir;
  int64_t first_iteration = 0;
  int64_t next_check = 0;
  pid_t check_pid = -1;
  int agreeing_checks = 0;
  int64_t polled_ms = 0;
  int64_t start_ms = 0;
  int64_t first_line_ms = -1;
  std::string profile;
};

class Launcher {
 public:
  // `executor` starts ranks and the supervisor; `planner` re-plans.
  Launcher(LaunchOptions options, std::string executor, std::string planner);
  // The job from its start to its end; the exit status.
  int run();

 private:
  // Setup, before the first rank starts (launch_job.cc). A refusal names the flag and value.
  Status prepare();
  Status check_outputs();
  Status prepare_tls_files();
  Status decide_resume();
  Status read_hosts();
  Status find_host_addresses();
  Status place(const std::string& plan, int nprocs);
  Status prepare_per_node();
  Status check_slowdowns() const;
  Status open_run_dir();
  Status write_token();
  void find_slurm_coordinator();
  Status prepare_job_tls();
  std::string host_address_over_shell(const std::string& host, const std::string& route_to);

  // One attempt (launch_attempt.cc): sets job_status_ and failed_rank_.
  void run_attempt(const std::string& plan, int nprocs, const std::string& dir, bool resume);
  std::vector<std::string> rank_flags(const std::string& plan, int nprocs, const std::string& dir,
                                      bool resume) const;
  std::vector<std::string> rank0_flags(const std::string& dir) const;
  std::vector<launch::RankCommand> rank_commands(const std::vector<std::string>& common,
                                                 const std::vector<std::string>& rank0,
                                                 int nprocs) const;
  launch::RankCommand srun_command(const std::vector<std::string>& common,
                                   const std::vector<std::string>& rank0, int nprocs) const;
  std::vector<std::string> own_flags(int rank, const std::string& coordinator) const;
  int supervise_attempt(const std::string& plan, const std::string& dir, int nprocs,
                        const std::string& own, bool resume);
  void judge_attempt(const std::string& dir, int nprocs, const std::string& result_file,
                     int supervisor_status);
  void note_coordinator(const std::string& address) const;
  void forward_stop(int sig);
  void take_signals(int timeout_ms);

  // What follows an attempt (launch_job.cc).
  Result<bool> switch_plans(std::string& plan, bool& resume);
  Result<bool> restart_after_failure(std::string& plan, bool& resume);
  std::string command_line(bool add_resume) const;
  void stop_summary(int status) const;
  int finish(int status) const;

  // --adapt (launch_adapt.cc).
  void adapt_begin(const std::string& dir, bool resume);
  void adapt_poll(const std::string& plan);
  void adapt_start_check(const std::string& plan, int64_t last);
  void adapt_result(int status);
  void adapt_log(const std::string& line) const;
  int64_t last_logged_iteration() const;

  LaunchOptions o_;
  std::string exe_, planner_;
  sigset_t signals_{};  // SIGINT, SIGTERM, SIGCHLD: blocked, taken by sigtimedwait

  std::vector<std::string> tls_args_;
  std::vector<launch::Host> hosts_;
  int nprocs_ = 0;
  std::vector<PlacedRank> ranks_;
  int first_rank_ = 0;     // per node: this node's first rank
  std::string node_addr_;  // per node: the address its ranks bind to
  std::string master_ip_;  // per node
  std::string slurm_first_, slurm_coordinator_;
  std::string run_dir_, token_file_, beacon_;
  int lock_fd_ = -1;

  int attempt_ = 0;
  pid_t supervisor_ = -1;
  std::string stop_request_;
  int stop_signal_ = 0;
  bool force_stop_ = false;
  int job_status_ = 0;
  int failed_rank_ = -1;
  AdaptState adapt_;
};

// `graphpipe-executor launch ARGS...`: the launcher's main.
// "graphpipe-launch: LINE" on stderr: the launcher's own lines, beside the ranks' "[rank R] ".
void say(const std::string& line);

// `program`: how this executor was started (argv[0]), for the resume hint.
int launch_main(const std::vector<std::string>& args, const std::string& program);

}  // namespace gp::exec::daemon
