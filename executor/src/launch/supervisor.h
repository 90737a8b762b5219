// One attempt of a launched job, supervised (`graphpipe-executor launcher supervise`, which
// scripts/graphpipe-launch runs once per attempt): starts every rank's command (a local process,
// `ssh HOST ...` or `srun ...`) with ATTEMPT/rank-R.log as its stdout and stderr (so that nothing
// a rank says is lost if the supervisor dies first) and echoes each log, prefixed "[rank R] ", on
// stderr as it grows; keeps the launcher's beacon fresh; passes SIGINT/SIGTERM on (a second one
// more than a second later kills every rank); stops the rank the coordinator blames and whoever
// still runs after a failure; and reports how each rank ended.
//
// Nothing outlives it by design: its ranks stop as on SIGTERM when it dies (their parent
// watchdog), ranks elsewhere when its beacon goes stale (--orphan-timeout); when the launcher
// that started it dies, it asks its ranks to stop and waits for them.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "gp/common/status.h"

namespace gp::exec::launch {

struct RankCommand {
  int rank = 0;  // its exit status is reported under this rank
  // "R": ATTEMPT/rank-R.log, echoed with "[rank R] " on stderr; "srun": every task's output
  // (srun's --label prefixes it) to ATTEMPT/ranks.log, echoed on stdout.
  std::string log_name;
  std::vector<std::string> argv;  // run with execvp; `env K=V ...` sets its environment
};

// The commands file the launcher writes: NUL-terminated fields, per rank RANK, LOG_NAME, the
// number of words, then the words. `file` names it in errors.
Result<std::vector<RankCommand>> parse_rank_commands(const std::string& text,
                                                     const std::string& file);
// The commands file's text for `ranks` (parse_rank_commands reads it back).
std::string format_rank_commands(const std::vector<RankCommand>& ranks);

struct SuperviseOptions {
  std::string attempt_dir;  // rank logs; rank 0 writes its verdict and coordinator files here
  std::string run_dir;      // RUN_DIR/coordinator: the address `status --run-dir` reads
  std::string job_id;       // named with the coordinator's address
  std::string beacon;       // rewritten every second while this runs
  int nprocs = 0;           // the job's ranks (a verdict naming another is nobody's)
  int kill_grace_s = 10;    // SIGTERM to SIGKILL; and how long a failed job's ranks may take
  int timeout_s = 30;       // the ranks' --timeout: a requested stop may take twice that
  int stop_signal = 0;      // SIGINT/SIGTERM the launcher received before the ranks started
  int launcher_pid = 0;     // the parent whose death stops the job as SIGTERM does (0: none)
  // A file the launcher writes a stop signal's number to before passing the signal on: a
  // signal that came before our handlers were in place is not lost.
  std::string stop_request;
};

struct SuperviseResult {
  std::map<int, int> exit_status;  // by rank: 0..255, 128 + N when signal N ended it
  std::vector<int> stopped;        // ranks it sent SIGTERM (and perhaps SIGKILL)
  std::vector<int> not_started;    // ranks whose command could not be started (status 127)
  int stop_signal = 0;             // the first SIGINT/SIGTERM it received or was given
  bool force_stop = false;         // a second one killed every rank
  int expected_signal = 0;         // the stop asked for: 128 + it is no rank's failure
  bool launcher_gone = false;      // the launcher died while the ranks ran
};

// Runs `ranks` to their end; a rank that cannot be started ends with status 127 (the others
// are then stopped as after a failure). While it runs, SIGINT and SIGTERM stop the job (as above)
// and SIGUSR1 asks rank 0 to stop the job after an agreed iteration (an --adapt switch: SIGTERM to
// rank 0, whose exit 143 is then expected); the previous handlers come back after it.
Result<SuperviseResult> supervise(const std::vector<RankCommand>& ranks,
                                  const SuperviseOptions& options);

}  // namespace gp::exec::launch
