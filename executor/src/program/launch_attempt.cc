// One attempt of a launched job: its ranks' commands, the supervisor that runs them to their
// end, and whom the attempt's failure is blamed on.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <sstream>

#include "checkpoint/checkpoint_files.h"
#include "gp/common/util.h"
#include "gp/model/model_io.h"
#include "launch/supervisor.h"
#include "launch_job.h"
#include "launch_process.h"

namespace gp::exec::daemon {
namespace fs = std::filesystem;
namespace {

void append(std::vector<std::string>& to, const std::vector<std::string>& words) {
  to.insert(to.end(), words.begin(), words.end());
}

// The srun task's script: binds to --iface's address or its address on the route to the
// coordinator, takes its rank from SLURM_PROCID and its GPU from SLURM_LOCALID.
constexpr const char* kSrunTask =
    R"(if [ -n "$2" ]; then src=$(ip -4 -o addr show dev "$2" | awk "{print \$4; exit}" | cut -d/ -f1)
else src=$(ip route get "$1" | awk "{for (i = 1; i < NF; i++) if (\$i == \"src\") { print \$(i + 1); exit }}"); fi
[ -n "$src" ] || { echo "graphpipe-launch: task $SLURM_PROCID: no address to bind to" >&2; exit 2; }
exe=$0; shift 2; export LOCAL_RANK=${SLURM_LOCALID:-0}
exec "$exe" run --rank "$SLURM_PROCID" --bind "$src" "$@")";

}  // namespace

// What every rank's `run` gets.
std::vector<std::string> Launcher::rank_flags(const std::string& plan, int nprocs,
                                              const std::string& dir, bool resume) const {
  std::vector<std::string> f{"--plan",       plan,
                             "--world-size", std::to_string(nprocs),
                             "--iterations", std::to_string(o_.iterations),
                             "--timeout",    std::to_string(o_.timeout_s),
                             "--store-dir",  dir + "/store",
                             "--log-every",  std::to_string(o_.log_every)};
  if (!o_.multi_host()) append(f, {"--coordinator-file", dir + "/coordinator"});
  append(f, {"--auth-token-file", token_file_});
  append(f, tls_args_);
  append(f, {"--launcher-beacon", beacon_, "--orphan-timeout", std::to_string(o_.orphan_timeout_s),
             "--job-id", o_.job_id});
  if (!o_.trace.empty()) append(f, {"--trace", o_.trace});
  if (!o_.checkpoint_dir.empty()) {
    append(f, {"--checkpoint-dir", o_.checkpoint_dir, "--checkpoint-every",
               std::to_string(o_.checkpoint_every)});
  }
  if (resume) append(f, {"--resume", o_.checkpoint_dir});
  bool measure_given = false;
  for (const auto& w : o_.extra)
    measure_given = measure_given || w.rfind("--measure-every", 0) == 0;
  if (o_.adapt && !measure_given) append(f, {"--measure-every", "2"});
  return f;
}

// What rank 0 alone gets: its verdict and stop files, and the job's outputs.
std::vector<std::string> Launcher::rank0_flags(const std::string& dir) const {
  std::vector<std::string> f{"--verdict-file", dir + "/verdict", "--stop-file", dir + "/stopped"};
  if (!o_.metrics.empty()) append(f, {"--metrics-out", o_.metrics});
  if (!o_.tensorboard.empty()) append(f, {"--tensorboard", o_.tensorboard});
  // Each attempt's own: --adapt must not read an earlier plan's measurements.
  append(f, {"--measured-profile-out",
             o_.measured_profile.empty() ? dir + "/measured-profile.pbtxt" : o_.measured_profile});
  return f;
}

void Launcher::note_coordinator(const std::string& address) const {
  (void)model::write_file_atomic(run_dir_ + "/coordinator", address + "\n");
  say("job " + o_.job_id + ": coordinator at " + address);
}

// One srun task per rank; each takes its rank from SLURM_PROCID (set by srun).
launch::RankCommand Launcher::srun_command(const std::vector<std::string>& common,
                                           const std::vector<std::string>& rank0,
                                           int nprocs) const {
  const std::string coordinator = slurm_coordinator_ + ":" + std::to_string(o_.port);
  note_coordinator(coordinator);
  std::vector<std::string> argv{"srun",
                                "--ntasks=" + std::to_string(nprocs),
                                "--kill-on-bad-exit=1",
                                "--label",
                                "bash",
                                "-c",
                                kSrunTask,
                                exe_,
                                slurm_coordinator_,
                                o_.iface};
  append(argv, common);
  append(argv, {"--coordinator", coordinator});
  append(argv, rank0);
  if (o_.device == "cuda") append(argv, {"--device", "cuda"});  // its SLURM_LOCALID's GPU
  append(argv, o_.extra);
  return {0, "srun", argv};
}

// Rank R's `run` flags beyond the common ones: where it runs and what it stands for.
std::vector<std::string> Launcher::own_flags(int r, const std::string& coordinator) const {
  std::vector<std::string> args{"--rank", std::to_string(r)};
  // --slowdown follows the device (RANK: the first plan's rank), whatever a re-plan numbers it.
  const int physical = o_.per_node() ? r : ranks_[r].physical;
  if (auto slow = o_.slowdown.find(physical); slow != o_.slowdown.end()) {
    append(args, {"--slowdown", slow->second});
  }
  if (o_.device == "cuda") append(args, {"--device", o_.per_node() ? "cuda" : ranks_[r].device});
  if (o_.per_node()) {
    append(args,
           {"--coordinator", coordinator, "--rendezvous", "coordinator", "--bind", node_addr_});
  } else if (!o_.hostfile.empty()) {
    append(args, {"--coordinator", coordinator, "--bind", hosts_[ranks_[r].host].address});
  } else if (r == 0) {
    append(args, {"--coordinator", "127.0.0.1:0"});
  }
  return args;
}

std::vector<launch::RankCommand> Launcher::rank_commands(const std::vector<std::string>& common,
                                                         const std::vector<std::string>& rank0,
                                                         int nprocs) const {
  if (o_.slurm) return {srun_command(common, rank0, nprocs)};
  std::string coordinator;
  if (o_.per_node()) coordinator = o_.master_addr + ":" + std::to_string(o_.master_port);
  if (!o_.hostfile.empty()) coordinator = hosts_[0].address + ":" + std::to_string(o_.port);
  if (!coordinator.empty()) note_coordinator(coordinator);
  const int first = o_.per_node() ? first_rank_ : 0;
  const int count = o_.per_node() ? o_.nproc_per_node : nprocs;
  std::vector<launch::RankCommand> out;
  for (int r = first; r < first + count; ++r) {
    std::vector<std::string> words{exe_};
    if (!o_.log_level.empty()) append(words, {"--log-level", o_.log_level});
    words.push_back("run");
    append(words, common);
    if (r == 0) append(words, rank0);
    append(words, own_flags(r, coordinator));
    append(words, o_.extra);
    const std::string local =
        "LOCAL_RANK=" + std::to_string(o_.per_node() ? r - first : ranks_[r].local_rank);
    std::vector<std::string> argv;
    if (!o_.hostfile.empty()) {
      // The remote shell joins its words into one command line for the host's shell.
      argv = split_blanks(o_.remote_shell);
      append(argv, {hosts_[ranks_[r].host].name, "env", local});
      for (const auto& w : words) argv.push_back(shell_quote(w));
    } else {
      argv = {"env", local};
      append(argv, words);
    }
    out.push_back({r, std::to_string(r), argv});
  }
  return out;
}

// A stop for the ranks: the supervisor passes it on (a ^C typed in the terminal reaches it
// directly too: it counts the two as one); the stop-request file carries it to a supervisor
// whose handlers are not in place yet.
void Launcher::forward_stop(int sig) {
  if (stop_signal_ == 0) stop_signal_ = sig;
  if (!stop_request_.empty()) {
    (void)model::write_file_atomic(stop_request_, std::to_string(sig) + "\n");
  }
  if (supervisor_ > 0) kill(supervisor_, sig);
}

// Waits up to `timeout_ms` for SIGINT, SIGTERM or SIGCHLD (blocked: they wait for us here),
// passing stop signals on; returns at once when one came.
void Launcher::take_signals(int timeout_ms) {
  timespec wait{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  for (;;) {
    const int sig = sigtimedwait(&signals_, nullptr, &wait);
    if (sig != SIGINT && sig != SIGTERM) return;
    forward_stop(sig);
    wait = {0, 0};  // and any other already pending
  }
}

// Starts the supervisor on the attempt's commands and waits for it; its exit status.
int Launcher::supervise_attempt(const std::string& plan, const std::string& dir, int nprocs,
                                const std::string& own, bool resume) {
  const std::string result = dir + "/supervisor-result" + own;
  stop_request_ = dir + "/stop-request" + own;
  unlink(result.c_str());
  unlink(stop_request_.c_str());
  take_signals(0);
  if (stop_signal_ != 0) forward_stop(stop_signal_);
  // It ignores SIGINT/SIGTERM until its handlers are in place (the stop-request file covers
  // that moment).
  auto pid = spawn({exe_,
                    "--log-level",
                    "error",
                    "launcher",
                    "supervise",
                    "--commands",
                    dir + "/rank-commands" + own,
                    "--result",
                    result,
                    "--attempt-dir",
                    dir,
                    "--run-dir",
                    run_dir_,
                    "--job-id",
                    o_.job_id,
                    "--beacon",
                    beacon_,
                    "--nprocs",
                    std::to_string(nprocs),
                    "--kill-grace",
                    std::to_string(o_.kill_grace_s),
                    "--timeout",
                    std::to_string(o_.timeout_s),
                    "--stop-request",
                    stop_request_,
                    "--launcher-pid",
                    std::to_string(getpid())},
                   SpawnOptions{true, true, -1, -1});
  if (!pid.ok()) {
    say(pid.status().message());
    return 1;
  }
  supervisor_ = *pid;
  if (o_.adapt) adapt_begin(dir, resume);
  int status = 1;
  for (;;) {
    int ws = 0;
    const pid_t r = waitpid(supervisor_, &ws, WNOHANG);
    if (r == supervisor_) {
      status = shell_status(ws);
      break;
    }
    if (r < 0 && errno != EINTR) break;
    take_signals(200);
    if (o_.adapt) adapt_poll(plan);
  }
  supervisor_ = -1;
  stop_request_.clear();
  if (adapt_.check_pid > 0) {  // a check still running when the attempt ended is not waited for
    kill(adapt_.check_pid, SIGTERM);
    waitpid(adapt_.check_pid, nullptr, 0);
    adapt_.check_pid = -1;
  }
  return status;
}

// Starts `nprocs` ranks and supervises them until every one has exited. Sets job_status_ (0 when
// all succeeded) and failed_rank_ (the rank blamed, -1 when none).
void Launcher::run_attempt(const std::string& plan, int nprocs, const std::string& dir,
                           bool resume) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  // A run directory given again (--log-dir D) holds the last job's files: a stale coordinator
  // address would send this attempt's ranks to a port nobody listens on.
  for (const std::string& f :
       {dir + "/verdict", dir + "/stopped", dir + "/coordinator", run_dir_ + "/coordinator"}) {
    unlink(f.c_str());
  }
  // Per node, nodes may share one run directory: each node's files are its own.
  const std::string own = o_.per_node() ? ".node" + std::to_string(o_.node_rank) : "";
  const auto commands =
      rank_commands(rank_flags(plan, nprocs, dir, resume), rank0_flags(dir), nprocs);
  const std::string file = dir + "/rank-commands" + own;
  if (!model::write_file_atomic(file, launch::format_rank_commands(commands)).ok()) {
    say("cannot write " + file);
    job_status_ = 2;
    failed_rank_ = -1;
    return;
  }
  const int supervisor_status = supervise_attempt(plan, dir, nprocs, own, resume);
  judge_attempt(dir, nprocs, dir + "/supervisor-result" + own, supervisor_status);
}

namespace {

struct SupervisorReport {
  std::map<int, int> status;
  std::vector<int> stopped, not_started;
  int stop_signal = 0, expected_signal = 0;
  bool force_stop = false;
};

SupervisorReport read_report(const std::string& path) {
  SupervisorReport r;
  auto text = model::read_file(path);
  if (!text.ok()) return r;
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string key;
    int a = 0, b = 0;
    in >> key >> a;
    if (key == "status" && in >> b) r.status[a] = b;
    if (key == "stopped") r.stopped.push_back(a);
    if (key == "not_started") r.not_started.push_back(a);
    if (key == "stop_signal") r.stop_signal = a;
    if (key == "force_stop") r.force_stop = a != 0;
    if (key == "expected_signal") r.expected_signal = a;
  }
  return r;
}

// How each rank ended; per node, the other nodes' ranks count as succeeded.
std::vector<launch::RankExit> rank_exits(const SupervisorReport& report, int nprocs) {
  std::vector<launch::RankExit> ranks(static_cast<size_t>(nprocs));
  const auto at = [&](int r) -> launch::RankExit* {
    return r >= 0 && r < nprocs ? &ranks[static_cast<size_t>(r)] : nullptr;
  };
  for (const auto& [rank, status] : report.status) {
    if (auto* e = at(rank)) e->status = status;
  }
  for (int r : report.stopped) {
    if (auto* e = at(r)) e->stopped_by_launcher = true;
  }
  for (int r : report.not_started) {
    if (auto* e = at(r)) e->not_started = true;
  }
  return ranks;
}

// What the attempt left behind now that no rank runs: the /dev/shm rings of killed ranks (noted
// in the store directory) and any checkpoint it did not commit.
void clean_attempt(const std::string& store_dir, const std::string& checkpoint_dir) {
  if (auto rings = launch::remove_noted_rings(store_dir); rings.ok()) {
    for (const auto& f : *rings) say("removed the shared-memory rings of a killed rank: " + f);
  } else {
    say("warning: " + rings.status().message());
  }
  if (checkpoint_dir.empty()) return;
  if (auto torn = clean_torn_checkpoints(checkpoint_dir); torn.ok()) {
    for (const auto& f : *torn) say("removed a torn checkpoint: " + f);
  } else {
    say("warning: " + torn.status().message());
  }
}

}  // namespace

// Whom the failure is blamed on, and the attempt's exit status. Per node, the other nodes' ranks
// count as succeeded (their launchers report them).
void Launcher::judge_attempt(const std::string& dir, int nprocs, const std::string& result_file,
                             int supervisor_status) {
  job_status_ = 0;
  failed_rank_ = -1;
  const SupervisorReport report = read_report(result_file);
  if (report.status.empty()) {
    // Its error is on the console; ranks it started stop when it is gone (parent watchdog).
    say("supervising the ranks failed (exit " + std::to_string(supervisor_status) + ")");
    job_status_ = supervisor_status != 0 ? supervisor_status : 1;
    return;
  }
  if (stop_signal_ == 0) stop_signal_ = report.stop_signal;
  force_stop_ = report.force_stop;
  clean_attempt(dir + "/store", o_.checkpoint_dir);
  if (force_stop_) {  // killed at the user's second signal: nobody's failure
    job_status_ = 128 + stop_signal_;
    return;
  }
  const std::vector<launch::RankExit> ranks = rank_exits(report, nprocs);
  std::optional<launch::Verdict> verdict;
  if (auto text = model::read_file(dir + "/verdict"); text.ok()) {
    verdict = launch::parse_verdict(*text, nprocs);
  }
  const launch::Attribution a = launch::attribute_failure(ranks, verdict, report.expected_signal);
  failed_rank_ = a.failed_rank;
  job_status_ = a.exit_status;
  if (!a.message.empty()) say(a.message);
}

}  // namespace gp::exec::daemon
