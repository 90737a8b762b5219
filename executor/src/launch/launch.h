// The decisions of scripts/graphpipe-launch, whose processes (local, ssh, srun) run under the
// supervisor (supervisor.h): where each rank runs, which rank a failed job is blamed on and with
// which exit status, and whether (and how) the job is re-planned and restarted. Every function is
// pure, so each decision is unit-tested; `graphpipe-executor launcher` exposes them to the script.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gp/common/status.h"

namespace gp::exec::launch {

// One node of a hostfile line: "HOST SLOTS [ADDRESS]", or DeepSpeed's/MPI's
// "HOST slots=N [max_slots=M]"; `address` is empty when the line has none (the launcher then
// finds it on the host). max_slots (MPI's oversubscription bound) is checked, not used: a host
// runs `slots` ranks.
struct Host {
  std::string name;
  int slots = 0;
  std::string address;
};

// A hostfile's text: one host per line in either form, blank lines skipped, '#' to the end of a
// line a comment. `file` names it in errors ("--hostfile F line 3: slots 'x' must be a positive
// integer ...").
Result<std::vector<Host>> parse_hostfile(const std::string& text, const std::string& file);

// What placement needs of a plan (graphpipe-plan inspect --json's ranks, nodes,
// devices_per_node). Ranks are node-major over the devices the plan does not exclude: rank R
// runs on the R-th device not in `excluded_devices`, on node device / devices_per_node.
struct PlanShape {
  int ranks = 0;
  int nodes = 0;
  int devices_per_node = 0;
  std::vector<int> excluded_devices = {};
};

struct PlacementRequest {
  std::string plan_path;       // for messages
  int nprocs = 0;              // --nprocs; 0 when not given (then the plan's rank count)
  std::string device = "cpu";  // cpu, or cuda: each rank takes the GPU of its local rank
  // --hostfile's hosts, in node order; empty: every rank is a local process.
  std::vector<Host> hosts;
  std::string hostfile;  // for messages
  // GPUs that CUDA_VISIBLE_DEVICES lists for local ranks; -1 when it is unset.
  int visible_gpus = -1;
};

struct RankPlacement {
  int rank = 0;
  int host = 0;        // index into the hosts (0 for local ranks)
  int local_rank = 0;  // its position among the ranks of its host
  std::string device;  // cpu or cuda:LOCAL_RANK
};

// Ranks fill the hosts in order: the first SLOTS ranks on the first host, and so on. Refuses an
// --nprocs other than the plan's, a hostfile whose slots do not add up to the plan's ranks, and
// more local CUDA ranks than visible GPUs. Hosts need not be the plan's nodes: a host may run
// several whole plan nodes (their links only get faster than the plan assumed), but a plan node
// split across hosts is refused, since the plan counted on its intra-node links between them.
Result<std::vector<RankPlacement>> place_ranks(const PlanShape& plan,
                                               const PlacementRequest& request);

// Rank 0's verdict file ("failed_rank=R\nreason=...\n"). A failed_rank that is not a rank of
// the job (missing, negative, >= nprocs, not a number) is -1: nobody is blamed by it.
struct Verdict {
  int failed_rank = -1;
  std::string reason;
};
Verdict parse_verdict(const std::string& text, int nprocs);

// How one rank of an attempt ended.
struct RankExit {
  int status = 0;                    // exit status as the shell reports it (128 + N: signal N)
  bool stopped_by_launcher = false;  // the launcher sent it SIGTERM (and perhaps SIGKILL)
  bool not_started = false;          // its command could not be started at all
};

// The failed ranks of a job as they are seen, ranked by how likely each is the cause: a rank
// killed by a signal nobody on our side sent (status > 128, not stopped by us: its neighbours
// then fail on their own) before any other, else the earliest exit; on a tie the one seen first.
// The launcher adds its failures in rank order without exit times; `graphpipe-executor submit`
// adds them as its node daemons report them, with their exit times.
class FailureRanking {
 public:
  // A rank that failed (each rank once); `exited_at` orders failures of the same kind.
  void add(int rank, const RankExit& exit, int64_t exited_at);

  // The likeliest cause so far; -1 while no rank failed.
  int cause() const { return cause_; }
  const RankExit& cause_exit() const { return cause_exit_; }
  // Whether a rank was killed by a signal of its own: the cause then, whatever a verdict says.
  bool own_signal() const;
  // The other failed ranks, in the order they were outranked.
  struct Failure {
    int rank = 0;
    RankExit exit;
  };
  const std::vector<Failure>& others() const { return others_; }

 private:
  int cause_ = -1;
  RankExit cause_exit_;
  int64_t cause_at_ = 0;
  std::vector<Failure> others_;
};

struct Attribution {
  int failed_rank = -1;  // -1: no rank failed
  int exit_status = 0;   // the launcher's exit status for the attempt
  std::string message;   // "rank R failed (exit status S[, stopped by the launcher])[: reason]"
};

// Whom a finished attempt is blamed on. Exits of 0, and of 128 + stop_signal after the launcher
// passed a stop signal on, are not failures. Among the failures, in this order: a rank that
// could not be started (the others fail for want of it); a rank killed by
// a signal the launcher did not send (its neighbours then fail on their own, and the first of
// them to report becomes the coordinator's verdict); the verdict's rank; a rank the launcher had
// to stop; the first rank that failed. The exit status is the blamed rank's, unless the launcher
// killed it (which says nothing about why it failed): then another failed rank's, else 1.
// Without a failure it is 128 + stop_signal after a stop, else 0.
Attribution attribute_failure(const std::vector<RankExit>& ranks,
                              const std::optional<Verdict>& verdict, int stop_signal);

// --on-failure and what bounds it.
struct RestartPolicy {
  bool replan = false;  // --on-failure replan
  int max_restarts = 3;
  bool slurm = false;          // srun cannot shrink the allocation yet
  std::string checkpoint_dir;  // where plans of later attempts are kept
};

// The attempt that just ended.
struct AttemptResult {
  int attempt = 0;  // 0 for the first
  int nprocs = 0;
  int exit_status = 0;
  int failed_rank = -1;
  int stop_signal = 0;          // SIGINT/SIGTERM the launcher passed on, 0 when none
  bool has_checkpoint = false;  // the checkpoint directory has a LATEST to resume from
  std::vector<Host> hosts;      // the attempt's hosts (empty: local ranks)
};

struct NextAttempt {
  bool restart = false;
  // Why not, when there is something to say (a failure the policy would have re-planned); or
  // "re-planning without rank R (N devices left)" when it restarts.
  std::string message;
  int exclude_rank = -1;  // graphpipe-plan replan --exclude-ranks
  std::string plan;       // CHECKPOINT_DIR/plan-after-failure-K.pb, beside what it resumes from
  int attempt = 0;        // K: its run directory is attempt-K
  int nprocs = 0;
  // The blamed rank's device leaves its host, and a host left without devices leaves the list;
  // the new plan numbers the remaining devices in the same node order.
  std::vector<Host> hosts;
};

// After an attempt: stop (success, a stop signal, --on-failure stop, a non-finite loss (exit 3,
// which comes back on any number of devices), --slurm, --max-restarts reached, no checkpoint,
// no rank to exclude or none left), else re-plan without the blamed rank and resume.
NextAttempt next_attempt(const RestartPolicy& policy, const AttemptResult& result);

// The one decision with a side effect: after an attempt, removes the shared-memory ring
// directories its ranks noted in the store directory (`*.shm-dir`, written when a rank sets up
// its rings), which ranks that were killed could not remove. Only directories directly under
// `shm_root` named "graphpipe-<this uid>-..." are removed, whatever a note says. Returns them.
Result<std::vector<std::string>> remove_noted_rings(const std::string& store_dir,
                                                    const std::string& shm_root = "/dev/shm");

}  // namespace gp::exec::launch
