#include "launcher_command.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <sstream>

#include "control/coordinator.h"
#include "control/job_tls.h"
#include "gp/common/cli.h"
#include "gp/common/file_read.h"
#include "gp/model/graph.h"
#include "gp/model/model_io.h"
#include "gp/plan/plan_util.h"
#include "graphpipe/v1/plan.pb.h"
#include "job/run.h"
#include "launch/launch.h"
#include "launch_placement.h"
#include "runtime/checkpoint.h"
#include "shared_flags.h"

namespace gp::exec::daemon {
namespace {

// One "KEY VALUE" line; a newline inside VALUE would start a bogus line, so it becomes a space.
void emit(const std::string& key, std::string value) {
  for (char& c : value) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::printf("%s %s\n", key.c_str(), value.c_str());
}

void emit_hosts(const std::vector<launch::Host>& hosts) {
  for (const auto& h : hosts) {
    emit("host",
         h.name + " " + std::to_string(h.slots) + (h.address.empty() ? "" : " ") + h.address);
  }
}

}  // namespace

LauncherCommands::LauncherCommands(CLI::App& app)
    : Command(app.add_subcommand(
          "launcher",
          "The launcher's decisions one at a time (where ranks run, whom a failed job is blamed "
          "on, whether to re-plan; each prints KEY VALUE lines), and the supervisor of an "
          "attempt's ranks that `graphpipe-executor launch` (scripts/graphpipe-launch) runs")) {
  cmd_->require_subcommand(1);
  add_hosts();
  add_place();
  add_verdict();
  add_blame();
  add_clean();
  add_next();
  add_tls();
  add_job_tls();
  add_resume();
  add_supervise();
}

void LauncherCommands::add_hosts() {
  hosts_ = cmd_->add_subcommand(
      "hosts",
      "Check a hostfile (HOST SLOTS [ADDRESS], or DeepSpeed's/MPI's HOST slots=N "
      "[max_slots=M], per line); print `host HOST SLOTS [ADDRESS]`");
  hosts_->add_option("--hostfile", hostfile_, "the hostfile")->required();
}

void LauncherCommands::add_place() {
  place_ = cmd_->add_subcommand(
      "place",
      "Place a plan's ranks: print `nprocs N`, then `rank R HOST_INDEX LOCAL_RANK DEVICE "
      "PHYSICAL_DEVICE` per rank (ranks fill the hosts in order); refuses an --nprocs or "
      "hostfile that does not fit");
  place_->add_option("--plan", plan_, "plan file")->required();
  place_->add_option("--nprocs", nprocs_, "ranks to start (default: the plan's)")
      ->check(CLI::Range(1, kMaxWorldSize));
  place_->add_option("--device", device_, "cpu, or cuda: each rank takes its local GPU")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  place_->add_option("--hostfile", hostfile_,
                     "hosts in node order (- reads them from stdin); default: local ranks");
  place_->add_option("--hostfile-name", hostfile_name_,
                     "the hostfile as messages name it (with --hostfile -)");
  place_->add_option("--cuda-visible-devices", cuda_visible_devices_,
                     "local ranks: $CUDA_VISIBLE_DEVICES, which must list a GPU per rank");
}

void LauncherCommands::add_verdict() {
  verdict_ = cmd_->add_subcommand(
      "verdict", "Read rank 0's verdict file: print `failed_rank R` (-1: none) and `reason TEXT`");
  verdict_->add_option("--verdict-file", verdict_file_, "the file")->required();
  verdict_->add_option("--nprocs", nprocs_, "ranks of the job")
      ->required()
      ->check(CLI::Range(1, kMaxWorldSize));
}

void LauncherCommands::add_blame() {
  blame_ = cmd_->add_subcommand(
      "blame",
      "Blame a finished attempt on one rank: print `failed_rank R` (-1: none failed), "
      "`exit_status S` for the launcher, and `message TEXT` when a rank failed");
  blame_->add_option("--exit-statuses", exit_statuses_, "every rank's exit status, by rank")
      ->delimiter(',')
      ->required()
      ->check(CLI::Range(0, 255));
  blame_->add_option("--stopped-by-launcher", stopped_, "ranks the launcher sent SIGTERM")
      ->delimiter(',')
      ->check(CLI::Range(0, kMaxWorldSize - 1));
  blame_
      ->add_option("--stop-signal", stop_signal_,
                   "SIGINT (2) or SIGTERM (15) the launcher passed on; 0: none")
      ->check(CLI::IsMember({0, 2, 15}))
      ->capture_default_str();
  blame_->add_option("--verdict-file", verdict_file_, "rank 0's verdict, read when it exists");
  blame_->add_option("--not-started", not_started_, "ranks whose command could not be started")
      ->delimiter(',')
      ->check(CLI::Range(0, kMaxWorldSize - 1));
}

void LauncherCommands::add_clean() {
  clean_ = cmd_->add_subcommand(
      "clean",
      "After an attempt, once none of its ranks runs: remove the checkpoints it left half-written "
      "(iter-K without a manifest, *.tmp) and the shared-memory rings its killed ranks left in "
      "/dev/shm; print `removed PATH` for each");
  clean_->add_option("--checkpoint-dir", checkpoint_dir_, "the job's checkpoint directory");
  clean_->add_option("--store-dir", store_dir_,
                     "the attempt's store directory, where ranks note their rings");
}

void LauncherCommands::add_next() {
  next_ = cmd_->add_subcommand(
      "next",
      "After an attempt: print `restart 0|1` and `message TEXT`; when restarting also "
      "`exclude_rank R`, `plan FILE`, `attempt K`, `nprocs N`, `checkpoint iter-K` (what it "
      "resumes from) and the hosts "
      "left (`host ...`, with --hostfile)");
  next_->add_option("--on-failure", on_failure_, "stop or replan")
      ->check(CLI::IsMember({"stop", "replan"}))
      ->capture_default_str();
  next_->add_option("--max-restarts", max_restarts_, "restarts allowed in all")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  next_->add_flag("--slurm", slurm_, "ranks are srun tasks (the allocation cannot shrink yet)");
  next_->add_option("--checkpoint-dir", checkpoint_dir_,
                    "checkpoints to resume from; re-planned plans are kept there");
  next_->add_option("--attempt", attempt_, "the attempt that ended (0: the first)")
      ->required()
      ->check(CLI::Range(0, 1 << 20));
  next_->add_option("--nprocs", nprocs_, "its ranks")
      ->required()
      ->check(CLI::Range(1, kMaxWorldSize));
  next_->add_option("--exit-status", exit_status_, "its exit status (launcher blame's)")
      ->required()
      ->check(CLI::Range(0, 255));
  next_->add_option("--failed-rank", failed_rank_, "the rank it was blamed on (-1: none)")
      ->check(CLI::Range(-1, kMaxWorldSize - 1))
      ->capture_default_str();
  next_->add_option("--stop-signal", stop_signal_, "SIGINT/SIGTERM passed on; 0: none")
      ->check(CLI::IsMember({0, 2, 15}))
      ->capture_default_str();
  next_->add_option("--hostfile", hostfile_, "the attempt's hosts (- reads them from stdin)");
}

void LauncherCommands::add_tls() {
  tls_ = cmd_->add_subcommand(
      "tls",
      "Check the job's TLS files as rank 0 uses them (it serves the coordinator and connects to "
      "it: all three are needed); print `cert PATH`, `key PATH`, `ca PATH`, made absolute");
  tls_->add_option("--tls-cert", tls_options_.cert, "PEM certificate");
  tls_->add_option("--tls-key", tls_options_.key, "its PEM private key");
  tls_->add_option("--tls-ca", tls_options_.ca, "PEM CA certificate(s)");
}

void LauncherCommands::add_job_tls() {
  job_tls_ = cmd_->add_subcommand(
      "job-tls",
      "Make the control plane's TLS files for a job whose ranks span hosts and that was given "
      "none: a CA derived from the job's token (never written; every launcher holding the token "
      "derives the same) and a certificate for serverAuth and clientAuth naming --name; print "
      "`cert PATH`, `key PATH`, `ca PATH`");
  job_tls_->add_option("--auth-token-file", job_tls_token_file_, "the job's token (mode 0600)")
      ->required();
  job_tls_->add_option("--job-id", job_id_, "the job's id")->required();
  job_tls_
      ->add_option("--name", job_tls_names_,
                   "an address or host name clients dial the coordinator at (repeatable)")
      ->required();
  job_tls_->add_option("--dir", job_tls_dir_, "where to write ca.pem, cert.pem and key.pem")
      ->required();
}

void LauncherCommands::add_resume() {
  resume_ = cmd_->add_subcommand(
      "resume",
      "Before the first attempt of --resume or --resume-if-present: print `resume 1` when the "
      "checkpoint directory holds a checkpoint; else refuse (--resume), or print `resume 0` and "
      "`message TEXT` (--if-present: the job starts from iteration 0)");
  resume_->add_option("--checkpoint-dir", checkpoint_dir_, "the job's checkpoint directory")
      ->required();
  resume_->add_flag("--if-present", if_present_, "no checkpoint: start fresh rather than refuse");
}

void LauncherCommands::add_supervise() {
  supervise_ = cmd_->add_subcommand(
      "supervise",
      "Run one attempt's ranks to their end: each rank's output whole in ATTEMPT/rank-R.log and "
      "prefixed on stderr, the beacon rewritten every second, SIGINT/SIGTERM passed on (again "
      "a second later: SIGKILL), SIGUSR1 stops the job through rank 0, the rank the coordinator "
      "blames and any rank left after a failure stopped; write `status R S`, `stopped R`, "
      "`not_started R`, "
      "`stop_signal N`, `force_stop 0|1`, `expected_signal N`, `launcher_gone 0|1` to --result");
  auto& o = supervise_options_;
  supervise_
      ->add_option("--commands", commands_file_,
                   "the ranks' commands: NUL-terminated RANK, LOG_NAME, COUNT, then COUNT words")
      ->required();
  supervise_->add_option("--result", result_file_, "where the result goes (written whole)")
      ->required();
  supervise_->add_option("--attempt-dir", o.attempt_dir, "the attempt's directory")->required();
  supervise_->add_option("--run-dir", o.run_dir, "the job's run directory (coordinator file)");
  supervise_->add_option("--job-id", o.job_id, "the job's id, for the console");
  supervise_->add_option("--beacon", o.beacon, "the launcher's beacon file");
  supervise_->add_option("--nprocs", o.nprocs, "ranks of the job")
      ->required()
      ->check(CLI::Range(1, kMaxWorldSize));
  supervise_->add_option("--kill-grace", o.kill_grace_s, "seconds from SIGTERM to SIGKILL")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  supervise_->add_option("--timeout", o.timeout_s, "the ranks' --timeout, seconds")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  supervise_
      ->add_option("--stop-signal", o.stop_signal,
                   "SIGINT (2) or SIGTERM (15) received before the ranks started; 0: none")
      ->check(CLI::IsMember({0, 2, 15}))
      ->capture_default_str();
  supervise_->add_option("--launcher-pid", o.launcher_pid,
                         "the launcher: when it dies, the ranks are asked to stop");
  supervise_->add_option("--stop-request", o.stop_request,
                         "a file the launcher writes a stop signal's number to (2 or 15) before "
                         "passing the signal on");
}

int LauncherCommands::run() { return gp::cli::report("graphpipe-launch", decide()); }

Status LauncherCommands::decide() const {
  if (hosts_->parsed()) return hosts();
  if (place_->parsed()) return place();
  if (verdict_->parsed()) return verdict();
  if (blame_->parsed()) return blame();
  if (clean_->parsed()) return clean();
  if (tls_->parsed()) return tls();
  if (job_tls_->parsed()) return job_tls();
  if (resume_->parsed()) return resume();
  if (supervise_->parsed()) return supervise();
  return next();
}

Status LauncherCommands::supervise() const {
  FileReadOptions small;
  small.max_bytes = 16 << 20;
  auto text = read_regular_file(commands_file_, small);
  if (!text.ok()) return text.status().with_context("--commands");
  GP_ASSIGN_OR_RETURN(const auto commands, launch::parse_rank_commands(*text, commands_file_));
  // A signal after the ranks have ended (a late ^C, an --adapt switch's SIGUSR1) must not end
  // us before the result is written: ignored outside supervise(), which handles them.
  for (int sig : {SIGINT, SIGTERM, SIGUSR1}) std::signal(sig, SIG_IGN);
  GP_ASSIGN_OR_RETURN(const auto result, launch::supervise(commands, supervise_options_));
  std::string out;
  for (const auto& [rank, status] : result.exit_status) {
    out += "status " + std::to_string(rank) + " " + std::to_string(status) + "\n";
  }
  for (int rank : result.stopped) out += "stopped " + std::to_string(rank) + "\n";
  for (int rank : result.not_started) out += "not_started " + std::to_string(rank) + "\n";
  out += "stop_signal " + std::to_string(result.stop_signal) + "\n";
  out += "force_stop " + std::to_string(result.force_stop ? 1 : 0) + "\n";
  out += "expected_signal " + std::to_string(result.expected_signal) + "\n";
  out += "launcher_gone " + std::to_string(result.launcher_gone ? 1 : 0) + "\n";
  GP_RETURN_IF_ERROR(model::write_file_atomic(result_file_, out).with_context("--result"));
  return ok_status();
}

Status LauncherCommands::tls() const {
  GP_RETURN_IF_ERROR(check_tls(tls_options_, TlsRole::kServerAndClient));
  const TlsOptions abs = absolute_tls(tls_options_);
  emit("cert", abs.cert);
  emit("key", abs.key);
  emit("ca", abs.ca);
  return ok_status();
}

Status LauncherCommands::job_tls() const {
  JobTlsRequest request;
  GP_RETURN_IF_ERROR(read_token_file(job_tls_token_file_, &request.token));
  request.job_id = job_id_;
  request.names = job_tls_names_;
  request.dir = job_tls_dir_;
  GP_ASSIGN_OR_RETURN(const TlsOptions files, make_job_tls(request));
  // As rank 0 will use them: a file that does not work fails here, not in every rank.
  GP_RETURN_IF_ERROR(check_tls(files, TlsRole::kServerAndClient));
  emit("cert", files.cert);
  emit("key", files.key);
  emit("ca", files.ca);
  return ok_status();
}

Status LauncherCommands::resume() const {
  GP_ASSIGN_OR_RETURN(const ResumeDecision d, decide_resume(checkpoint_dir_, if_present_));
  emit("resume", d.resume ? "1" : "0");
  if (!d.warning.empty()) emit("message", d.warning);
  return ok_status();
}

Status LauncherCommands::clean() const {
  if (checkpoint_dir_.empty() && store_dir_.empty()) {
    return invalid_argument("launcher clean: give --checkpoint-dir and/or --store-dir");
  }
  if (!store_dir_.empty()) {
    GP_ASSIGN_OR_RETURN(const auto rings, launch::remove_noted_rings(store_dir_));
    for (const auto& path : rings) emit("removed", path);
  }
  if (!checkpoint_dir_.empty()) {
    GP_ASSIGN_OR_RETURN(const auto removed, clean_torn_checkpoints(checkpoint_dir_));
    for (const auto& path : removed) emit("removed", path);
  }
  return ok_status();
}

Status LauncherCommands::hosts() const {
  GP_ASSIGN_OR_RETURN(const auto listed, read_hostfile(hostfile_));
  emit_hosts(listed);
  return ok_status();
}

Status LauncherCommands::place() const {
  PlacementInput input;
  input.plan = plan_;
  input.nprocs = nprocs_;
  input.device = device_;
  input.hostfile = hostfile_name_.empty() ? hostfile_ : hostfile_name_;
  if (!hostfile_.empty()) {
    GP_ASSIGN_OR_RETURN(input.hosts, read_hostfile(hostfile_));
  }
  input.cuda_visible_devices = cuda_visible_devices_;
  GP_ASSIGN_OR_RETURN(const auto ranks, place_plan(input));
  emit("nprocs", std::to_string(ranks.size()));
  for (size_t r = 0; r < ranks.size(); ++r) {
    emit("rank", std::to_string(r) + " " + std::to_string(ranks[r].host) + " " +
                     std::to_string(ranks[r].local_rank) + " " + ranks[r].device + " " +
                     std::to_string(ranks[r].physical));
  }
  return ok_status();
}

Status LauncherCommands::verdict() const {
  auto text = model::read_file(verdict_file_);
  if (!text.ok()) return text.status().with_context("--verdict-file");
  const launch::Verdict v = launch::parse_verdict(*text, nprocs_);
  emit("failed_rank", std::to_string(v.failed_rank));
  emit("reason", v.reason);
  return ok_status();
}

Status LauncherCommands::blame() const {
  std::vector<launch::RankExit> ranks;
  for (int status : exit_statuses_) ranks.push_back({status, false});
  for (int r : stopped_) {
    if (r >= static_cast<int>(ranks.size())) {
      return invalid_argument("--stopped-by-launcher " + std::to_string(r) + ": the job has " +
                              std::to_string(ranks.size()) + " ranks (--exit-statuses)");
    }
    ranks[r].stopped_by_launcher = true;
  }
  for (int r : not_started_) {
    if (r >= static_cast<int>(ranks.size())) {
      return invalid_argument("--not-started " + std::to_string(r) + ": the job has " +
                              std::to_string(ranks.size()) + " ranks (--exit-statuses)");
    }
    ranks[r].not_started = true;
  }
  std::optional<launch::Verdict> rank0_verdict;
  if (!verdict_file_.empty() && std::filesystem::exists(verdict_file_)) {
    auto text = model::read_file(verdict_file_);
    if (!text.ok()) return text.status().with_context("--verdict-file");
    rank0_verdict = launch::parse_verdict(*text, static_cast<int>(ranks.size()));
  }
  const launch::Attribution a = launch::attribute_failure(ranks, rank0_verdict, stop_signal_);
  emit("failed_rank", std::to_string(a.failed_rank));
  emit("exit_status", std::to_string(a.exit_status));
  if (!a.message.empty()) emit("message", a.message);
  return ok_status();
}

Status LauncherCommands::next() const {
  launch::RestartPolicy policy;
  policy.replan = on_failure_ == "replan";
  policy.max_restarts = max_restarts_;
  policy.slurm = slurm_;
  policy.checkpoint_dir = checkpoint_dir_;
  if (policy.replan && checkpoint_dir_.empty()) {
    return invalid_argument("--on-failure replan needs --checkpoint-dir to resume from");
  }
  launch::AttemptResult result;
  result.attempt = attempt_;
  result.nprocs = nprocs_;
  result.exit_status = exit_status_;
  result.failed_rank = failed_rank_;
  result.stop_signal = stop_signal_;
  const std::filesystem::path latest = std::filesystem::path(checkpoint_dir_) / "LATEST";
  result.has_checkpoint = !checkpoint_dir_.empty() && std::filesystem::is_regular_file(latest);
  if (!hostfile_.empty()) {
    GP_ASSIGN_OR_RETURN(result.hosts, read_hostfile(hostfile_));
  }
  const launch::NextAttempt step = launch::next_attempt(policy, result);
  emit("restart", step.restart ? "1" : "0");
  if (!step.message.empty()) emit("message", step.message);
  if (!step.restart) return ok_status();
  GP_ASSIGN_OR_RETURN(std::string checkpoint, model::read_file(latest.string()));
  while (!checkpoint.empty() && (checkpoint.back() == '\n' || checkpoint.back() == ' ')) {
    checkpoint.pop_back();
  }
  emit("exclude_rank", std::to_string(step.exclude_rank));
  emit("plan", step.plan);
  emit("attempt", std::to_string(step.attempt));
  emit("nprocs", std::to_string(step.nprocs));
  emit("checkpoint", checkpoint);
  emit_hosts(step.hosts);
  return ok_status();
}

std::unique_ptr<Command> add_launcher_command(CLI::App& app) {
  return std::make_unique<LauncherCommands>(app);
}

}  // namespace gp::exec::daemon
