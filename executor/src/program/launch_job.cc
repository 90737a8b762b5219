#include "launch_job.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
#include <sstream>

#include "control/job_tls.h"
#include "control/tls.h"
#include "gp/common/cli.h"
#include "gp/common/util.h"
#include "gp/model/model_io.h"
#include "job/run.h"
#include "launch_process.h"

namespace gp::exec::daemon {
namespace fs = std::filesystem;

namespace {

std::string sha256_hex(const std::string& data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(data.data(), data.size(), digest, &size, EVP_sha256(), nullptr);
  return to_hex(digest, size);
}

// An output's directory must exist (model::check_output_path) and be writable, and the file
// writable if it exists: refused before any rank starts rather than by rank 0 at the end.
Status check_output(const std::string& flag, const std::string& path) {
  if (path.empty()) return ok_status();
  GP_RETURN_IF_ERROR(model::check_output_path(flag, path));
  std::string dir = fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (access(dir.c_str(), W_OK) != 0) {
    return invalid_argument(flag + " " + path + ": directory " + dir + " is not writable");
  }
  if (fs::exists(path, ec) && access(path.c_str(), W_OK) != 0) {
    return invalid_argument(flag + " " + path + ": not writable");
  }
  return ok_status();
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

void say(const std::string& line) { std::fprintf(stderr, "graphpipe-launch: %s\n", line.c_str()); }

Launcher::Launcher(LaunchOptions options, std::string executor, std::string planner)
    : o_(std::move(options)), exe_(std::move(executor)), planner_(std::move(planner)) {
  sigemptyset(&signals_);
  for (int sig : {SIGINT, SIGTERM, SIGCHLD}) sigaddset(&signals_, sig);
}

Status Launcher::check_outputs() {
  GP_RETURN_IF_ERROR(check_output("--metrics-out", o_.metrics));
  GP_RETURN_IF_ERROR(check_output("--trace", o_.trace));
  GP_RETURN_IF_ERROR(check_output("--measured-profile-out", o_.measured_profile));
  if (o_.checkpoint_dir.empty()) return ok_status();
  std::error_code ec;
  fs::create_directories(o_.checkpoint_dir, ec);
  if (!fs::is_directory(o_.checkpoint_dir, ec)) {
    return invalid_argument("--checkpoint-dir " + o_.checkpoint_dir + ": cannot create it");
  }
  if (access(o_.checkpoint_dir.c_str(), W_OK) != 0) {
    return invalid_argument("--checkpoint-dir " + o_.checkpoint_dir + ": not writable");
  }
  return ok_status();
}

// TLS files given: checked as rank 0 uses them, passed to every rank as absolute paths.
Status Launcher::prepare_tls_files() {
  const TlsOptions given{o_.tls_cert, o_.tls_key, o_.tls_ca};
  if (!given.enabled()) return ok_status();
  GP_RETURN_IF_ERROR(check_tls(given, TlsRole::kServerAndClient));
  tls_args_ = tls_flags(absolute_tls(given));
  return ok_status();
}

// Whether there is a checkpoint to resume from: decided (and refused) once, not by every rank.
Status Launcher::decide_resume() {
  if (!o_.resume && !o_.resume_if_present) return ok_status();
  GP_ASSIGN_OR_RETURN(const ResumeDecision d,
                      daemon::decide_resume(o_.checkpoint_dir, o_.resume_if_present));
  if (!d.warning.empty()) say("warning: " + d.warning);
  o_.resume = d.resume;
  return ok_status();
}

Status Launcher::read_hosts() {
  GP_ASSIGN_OR_RETURN(hosts_, read_hostfile(o_.hostfile));
  return ok_status();
}

// HOST's address over the remote shell: --iface's there, else its source on the route.
std::string Launcher::host_address_over_shell(const std::string& host,
                                              const std::string& route_to) {
  std::vector<std::string> argv = split_blanks(o_.remote_shell);
  argv.push_back(host);
  if (!o_.iface.empty()) {
    for (const char* w : {"ip", "-4", "-o", "addr", "show", "dev"}) argv.push_back(w);
    argv.push_back(o_.iface);
    return address_of_ip_addr(command_output(argv));
  }
  for (const char* w : {"ip", "route", "get"}) argv.push_back(w);
  argv.push_back(route_to);
  return source_of_ip_route(command_output(argv));
}

// Addresses not in the hostfile: --iface's on that host, else the route to the first host.
Status Launcher::find_host_addresses() {
  launch::Host& first = hosts_[0];
  if (first.address.empty()) {
    first.address =
        o_.iface.empty() ? resolve_ipv4(first.name) : host_address_over_shell(first.name, "");
    if (first.address.empty()) {
      return invalid_argument("--hostfile " + o_.hostfile + ": no address for the first host '" +
                              first.name + "' (give ADDRESS or --iface)");
    }
  }
  for (launch::Host& h : hosts_) {
    if (!h.address.empty()) continue;
    h.address = host_address_over_shell(h.name, first.address);
    if (h.address.empty()) {
      return invalid_argument(
          "--hostfile " + o_.hostfile + ": no address for host '" + h.name + "' (give ADDRESS" +
          (o_.iface.empty() ? "" : "; no IPv4 address on " + o_.iface + " there") + ")");
    }
  }
  return ok_status();
}

// Where PLAN's ranks run on the current hosts (or locally).
Status Launcher::place(const std::string& plan, int nprocs) {
  PlacementInput input;
  input.plan = plan;
  input.nprocs = nprocs;
  input.device = o_.device;
  input.hosts = hosts_;
  input.hostfile = o_.hostfile;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (o_.hostfile.empty() && !o_.slurm && visible != nullptr) input.cuda_visible_devices = visible;
  GP_ASSIGN_OR_RETURN(ranks_, place_plan(input));
  nprocs_ = static_cast<int>(ranks_.size());
  return ok_status();
}

// Per node: this node's ranks, the address they bind to, and the job id every node derives.
Status Launcher::prepare_per_node() {
  PlacementInput input;
  input.plan = o_.plan;
  GP_ASSIGN_OR_RETURN(const auto all, place_plan(input));
  const int plan_ranks = static_cast<int>(all.size());
  if (o_.nproc_per_node == 0) o_.nproc_per_node = plan_ranks / o_.nnodes;
  const int64_t ranks = int64_t{o_.nnodes} * o_.nproc_per_node;
  if (ranks != plan_ranks) {
    return invalid_argument("--nnodes " + std::to_string(o_.nnodes) + " x --nproc-per-node " +
                            std::to_string(o_.nproc_per_node) + " = " + std::to_string(ranks) +
                            " ranks, but the plan " + o_.plan + " has " +
                            std::to_string(plan_ranks));
  }
  if (o_.nprocs != 0 && o_.nprocs != plan_ranks) {
    return invalid_argument("--nprocs " + std::to_string(o_.nprocs) + ", but the plan " + o_.plan +
                            " has " + std::to_string(plan_ranks) + " ranks (leave --nprocs out)");
  }
  nprocs_ = plan_ranks;
  first_rank_ = o_.node_rank * o_.nproc_per_node;
  if (!o_.iface.empty()) {
    node_addr_ = interface_ipv4(o_.iface);
  } else {
    master_ip_ = resolve_ipv4(o_.master_addr);
    if (master_ip_.empty()) {
      return invalid_argument("--master-addr '" + o_.master_addr + "': no IPv4 address");
    }
    node_addr_ = route_source_ipv4(master_ip_);
  }
  if (node_addr_.empty()) {
    return invalid_argument(std::string("--nnodes: no address of this node to bind to") +
                            (o_.iface.empty() ? "" : " on --iface " + o_.iface) +
                            " (give --iface)");
  }
  if (o_.job_id.empty()) {
    const std::string token = o_.token.empty() ? token_from_environment() : o_.token;
    GP_ASSIGN_OR_RETURN(const std::string plan_bytes, model::read_file(o_.plan));
    o_.job_id =
        "job-" + sha256_hex(token + "\n" + o_.master_addr + ":" + std::to_string(o_.master_port) +
                            "\n" + sha256_hex(plan_bytes) + "\n")
                     .substr(0, 16);
  }
  return ok_status();
}

Status Launcher::check_slowdowns() const {
  if (!o_.slowdown.empty() && o_.slurm) {
    return invalid_argument(
        "--slowdown is not available with --slurm (srun starts every task with the same flags)");
  }
  for (const auto& [rank, factor] : o_.slowdown) {
    if (rank >= nprocs_) {
      return invalid_argument("--slowdown " + std::to_string(rank) + ":" + factor + ": rank " +
                              std::to_string(rank) + ", but the job has " +
                              std::to_string(nprocs_) + " ranks (0.." +
                              std::to_string(nprocs_ - 1) + ")");
    }
  }
  return ok_status();
}

// One job per run directory: a second launcher would overwrite the first's beacon, coordinator
// file and rank logs. The lock lives with an open file that the supervisor and the ranks
// inherit, so the kernel drops it when the last process of the job is gone, however the
// launcher ends. Per node, each node's launcher has a lock of its own (a shared working
// directory gives every node the same RUN_DIR).
Status Launcher::open_run_dir() {
  if (o_.job_id.empty()) o_.job_id = "job-" + random_hex(8);
  std::string dir = o_.run_dir;
  if (dir.empty()) {
    const char* root = std::getenv("GRAPHPIPE_RUNS_DIR");
    dir = std::string(root != nullptr && *root != '\0' ? root : "graphpipe-runs") + "/" + o_.job_id;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec))
    return invalid_argument("--log-dir " + dir + ": cannot create it");
  run_dir_ = fs::absolute(dir, ec).lexically_normal().string();  // ranks elsewhere start elsewhere
  while (run_dir_.size() > 1 && run_dir_.back() == '/') run_dir_.pop_back();
  const std::string lock =
      run_dir_ + "/.launcher-lock" + (o_.per_node() ? ".node" + std::to_string(o_.node_rank) : "");
  lock_fd_ = open(lock.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW, 0644);
  if (lock_fd_ < 0) return invalid_argument("--log-dir " + run_dir_ + ": cannot write " + lock);
  if (flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) {
      say("warning: --log-dir " + run_dir_ + ": cannot lock it (" + std::strerror(errno) +
          "); nothing stops a second job from using it at the same time");
    } else {
      auto pid = model::read_file(lock + ".pid");
      return invalid_argument("--log-dir " + run_dir_ + ": another job (launcher pid " +
                              (pid.ok() ? trimmed(*pid) : std::string("unknown")) +
                              ") still uses it; give another --log-dir, or wait until that "
                              "job's ranks have exited");
    }
  }
  GP_RETURN_IF_ERROR(model::write_file_atomic(lock + ".pid", std::to_string(getpid()) + "\n"));
  if (o_.adapt && o_.metrics.empty()) o_.metrics = run_dir_ + "/metrics.jsonl";
  say("job " + o_.job_id + ": logs in " + run_dir_ + " (graphpipe-executor status --run-dir " +
      run_dir_ + ")");
  return ok_status();
}

// The job's control-plane token ($GP_AUTH_TOKEN, else a fresh random one), in a fresh file only
// its owner can read (never through a link or an older file's wider mode): ranks read it there,
// never from argv, which `ps` shows.
Status Launcher::write_token() {
  if (o_.token.empty()) o_.token = token_from_environment();
  if (o_.token.empty()) o_.token = random_hex(16);
  token_file_ = run_dir_ + "/auth-token";
  unlink(token_file_.c_str());
  const int fd =
      open(token_file_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  const std::string line = o_.token + "\n";
  const bool ok =
      fd >= 0 && write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  if (fd >= 0) close(fd);
  if (!ok) return invalid_argument("--run-dir " + run_dir_ + ": cannot write " + token_file_);
  return ok_status();
}

// Under --slurm the coordinator runs on the allocation's first node (the launcher's).
void Launcher::find_slurm_coordinator() {
  const char* list = std::getenv("SLURM_JOB_NODELIST");
  const std::string names =
      command_output({"scontrol", "show", "hostnames", list != nullptr ? list : ""});
  slurm_first_ = names.substr(0, names.find('\n'));
  if (slurm_first_.empty()) {
    const char* node = std::getenv("SLURMD_NODENAME");
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    slurm_first_ = node != nullptr ? node : host;
  }
  slurm_coordinator_ = o_.iface.empty() ? resolve_ipv4(slurm_first_) : interface_ipv4(o_.iface);
  if (slurm_coordinator_.empty()) slurm_coordinator_ = slurm_first_;
}

// Ranks that may span hosts and no TLS files given: mutual TLS with a CA of this job's own,
// derived from its token (each node's launcher derives the same); the coordinator's
// certificate names the address the ranks dial. --no-tls: plaintext.
Status Launcher::prepare_job_tls() {
  if (o_.no_tls) {
    say("warning: --no-tls: the control plane (the token, plans with their weights, metrics) "
        "crosses the network in clear");
    return ok_status();
  }
  if (!o_.multi_host() || !tls_args_.empty()) return ok_status();
  std::vector<std::string> names;
  if (!o_.hostfile.empty()) {
    names = {hosts_[0].address, hosts_[0].name};
  } else if (o_.slurm) {
    names = {slurm_coordinator_, slurm_first_};
  } else {
    names = {o_.master_addr, master_ip_};
  }
  JobTlsRequest request;
  request.token = o_.token;
  request.job_id = o_.job_id;
  request.dir = run_dir_ + "/tls";
  // A host name that is no DNS name (a stand-in's) names nothing: only addresses and names go in.
  for (const auto& n : names) {
    if (std::regex_match(n, std::regex("[A-Za-z0-9.:-]+"))) request.names.push_back(n);
  }
  GP_ASSIGN_OR_RETURN(const TlsOptions files, make_job_tls(request));
  GP_RETURN_IF_ERROR(check_tls(files, TlsRole::kServerAndClient));
  tls_args_ = tls_flags(files);
  say("control plane: mutual TLS with the job's own CA (" + run_dir_ +
      "/tls; --no-tls for plaintext)");
  return ok_status();
}

Status Launcher::prepare() {
  // Ranks get their rank, world size and coordinator as flags; torchrun's variables in our own
  // environment (a PyTorchJob pod's, say) would conflict with them.
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) {
    unsetenv(v);
  }
  GP_RETURN_IF_ERROR(prepare_tls_files());
  GP_RETURN_IF_ERROR(check_outputs());
  GP_RETURN_IF_ERROR(decide_resume());
  if (!o_.hostfile.empty()) {
    GP_RETURN_IF_ERROR(read_hosts());
    GP_RETURN_IF_ERROR(find_host_addresses());
  }
  if (o_.per_node()) {
    GP_RETURN_IF_ERROR(prepare_per_node());
  } else {
    GP_RETURN_IF_ERROR(place(o_.plan, o_.nprocs));
  }
  GP_RETURN_IF_ERROR(check_slowdowns());
  GP_RETURN_IF_ERROR(open_run_dir());
  GP_RETURN_IF_ERROR(write_token());
  if (o_.slurm) find_slurm_coordinator();
  GP_RETURN_IF_ERROR(prepare_job_tls());
  // The launcher's beacon, which each attempt's supervisor rewrites every second: ranks whose
  // parent outlives it (srun's tasks, lingering ssh sessions) stop once it has stayed unchanged
  // for --orphan-timeout seconds.
  beacon_ = run_dir_ + "/launcher-beacon";
  if (!model::write_file_atomic(beacon_, "0\n").ok()) {
    return invalid_argument("--run-dir " + run_dir_ + ": cannot write " + beacon_);
  }
  return ok_status();
}

// An --adapt switch: the ranks stopped after an agreed iteration with a checkpoint; resume it
// under the new plan. False when they did not stop so.
Result<bool> Launcher::switch_plans(std::string& plan, bool& resume) {
  adapt_.stopping = false;
  std::string after;
  if (auto text = model::read_file(run_dir_ + "/attempt-" + std::to_string(attempt_) + "/stopped");
      text.ok()) {
    std::smatch m;
    if (std::regex_search(*text, m, std::regex("(^|\n)stopped_after ([^\n]*)"))) after = m[2];
  }
  std::error_code ec;
  if (after.empty() || !fs::is_regular_file(adapt_.next_plan, ec)) {
    adapt_log("the ranks did not stop at an agreed iteration; not switching");
    return false;
  }
  adapt_.stop_took_ms = steady_ms() - adapt_.stop_sent_ms;
  ++adapt_.switches;
  plan = adapt_.next_plan;
  resume = true;
  ++attempt_;
  GP_RETURN_IF_ERROR(place(plan, 0));
  char took[32];
  std::snprintf(took, sizeof took, "%.1f", static_cast<double>(adapt_.stop_took_ms / 100) / 10);
  adapt_log("resuming after iteration " + after + " under " + plan + " on " +
            std::to_string(nprocs_) + " ranks (switch " + std::to_string(adapt_.switches) +
            " of at most " + std::to_string(o_.adapt_max_switches) + "; the stop took " + took +
            " s)");
  return true;
}

// After a failure: whether to re-plan without the blamed rank's device and resume.
Result<bool> Launcher::restart_after_failure(std::string& plan, bool& resume) {
  launch::RestartPolicy policy;
  policy.replan = o_.replan_on_failure;
  policy.max_restarts = o_.max_restarts;
  policy.slurm = o_.slurm;
  policy.checkpoint_dir = o_.checkpoint_dir;
  launch::AttemptResult result;
  result.attempt = attempt_;
  result.nprocs = nprocs_;
  result.exit_status = job_status_;
  result.failed_rank = failed_rank_;
  result.stop_signal = stop_signal_;
  const std::string latest = o_.checkpoint_dir + "/LATEST";
  std::error_code ec;
  result.has_checkpoint = !o_.checkpoint_dir.empty() && fs::is_regular_file(latest, ec);
  result.hosts = hosts_;
  const launch::NextAttempt step = launch::next_attempt(policy, result);
  if (!step.message.empty()) say(step.message);
  if (!step.restart) return false;
  GP_ASSIGN_OR_RETURN(const std::string checkpoint, model::read_file(latest));
  attempt_ = step.attempt;
  if (!o_.hostfile.empty()) hosts_ = step.hosts;
  auto replan =
      spawn({planner_, "replan", "--plan", plan, "--exclude-ranks",
             std::to_string(step.exclude_rank), "--out", step.plan, "--log-level", "warn"},
            SpawnOptions{false, false, 2, -1});
  int ws = 0;
  if (!replan.ok() || waitpid(*replan, &ws, 0) != *replan || shell_status(ws) != 0) {
    say("re-planning failed");
    return false;
  }
  plan = step.plan;
  resume = true;
  GP_RETURN_IF_ERROR(place(plan, 0));  // as many ranks as the new plan has
  say("resuming from " + trimmed(checkpoint) + " on " + std::to_string(nprocs_) + " ranks");
  return true;
}

// This launcher's command line, quoted for a shell, with --resume added before its `--` unless
// it has --resume or --resume-if-present already.
std::string Launcher::command_line(bool add_resume) const {
  std::vector<std::string> words = o_.invoked_as;
  words.insert(words.end(), o_.given.begin(), o_.given.end());
  for (const auto& w : o_.given)
    add_resume = add_resume && w != "--resume" && w != "--resume-if-present";
  if (add_resume) words.push_back("--resume");
  if (o_.dashdash) {
    words.push_back("--");
    words.insert(words.end(), o_.extra.begin(), o_.extra.end());
  }
  return shell_command(words);
}

// The last line after a requested stop (STATUS 128 + its signal): where the job stopped, its
// checkpoint and the command that resumes from it (rank 0's stop file says; else LATEST).
namespace {

// Rank 0's stop file: "stopped_after N", "iterations M", "checkpoint DIR".
struct StopFile {
  std::string after, total, checkpoint;
};

StopFile read_stop_file(const std::string& path, int iterations) {
  StopFile f{"", std::to_string(iterations), ""};
  auto text = model::read_file(path);
  std::istringstream lines(text.ok() ? *text : "");
  for (std::string key, value; lines >> key && std::getline(lines >> std::ws, value);) {
    if (key == "stopped_after") f.after = value;
    if (key == "iterations") f.total = value;
    if (key == "checkpoint") f.checkpoint = value;
  }
  return f;
}

}  // namespace

void Launcher::stop_summary(int status) const {
  if (stop_signal_ == 0 || status != 128 + stop_signal_) return;
  StopFile stop =
      read_stop_file(run_dir_ + "/attempt-" + std::to_string(attempt_) + "/stopped", o_.iterations);
  const std::string line = !stop.after.empty()
                               ? "stopped after iteration " + stop.after + " of " + stop.total
                           : force_stop_ ? "killed before the ranks stopped at an agreed iteration"
                                         : "stopped before the ranks agreed on an iteration";
  if (o_.checkpoint_dir.empty()) {
    say(line + "; no checkpoint (no --checkpoint-dir)");
    return;
  }
  std::string what = "checkpoint";
  if (stop.checkpoint.empty()) {
    auto latest = model::read_file(o_.checkpoint_dir + "/LATEST");
    if (latest.ok() && !trimmed(*latest).empty()) {
      stop.checkpoint = o_.checkpoint_dir + "/" + trimmed(*latest);
      what = "newest checkpoint";
    }
  }
  if (stop.checkpoint.empty()) {
    say(line + "; no checkpoint yet; start again with: " + command_line(false));
  } else {
    say(line + "; " + what + " " + stop.checkpoint + "; resume with: " + command_line(true));
  }
}

int Launcher::finish(int status) const {
  unlink(beacon_.c_str());
  unlink((beacon_ + ".tmp").c_str());
  // The run directory stays: the ranks' logs are what explains a failure or a stop.
  if (status == 130 || status == 143) {
    stop_summary(status);
  } else if (status != 0) {
    say("the ranks' logs are in " + run_dir_);
  }
  return status;
}

int Launcher::run() {
  if (const Status st = prepare(); !st.ok()) return gp::cli::report("graphpipe-launch", st);
  // Our children's ends are ours to wait for: an ignored SIGCHLD (inherited) would reap them.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGCHLD, &dfl, nullptr);
  // From here a SIGINT/SIGTERM stops the job at an agreed iteration: taken in our wait loops
  // (sigtimedwait), passed on to the supervisor.
  sigprocmask(SIG_BLOCK, &signals_, nullptr);
  std::string plan = o_.plan;
  bool resume = o_.resume;
  for (;;) {
    run_attempt(plan, nprocs_, run_dir_ + "/attempt-" + std::to_string(attempt_), resume);
    take_signals(0);  // a stop that came as the attempt ended: no switch, no restart
    Result<bool> again = false;
    if (adapt_.stopping && stop_signal_ == 0 && job_status_ == 143) {
      again = switch_plans(plan, resume);
      if (again.ok() && *again) continue;
    }
    if (again.ok()) again = restart_after_failure(plan, resume);
    if (!again.ok()) return finish(gp::cli::report("graphpipe-launch", again.status()));
    if (!*again) break;
  }
  return finish(job_status_);
}

namespace {

// Descriptors 0-2 open (on /dev/null where they were closed), so that no file the launcher opens
// lands on one of them and is taken for a child's stdin, stdout or stderr.
void open_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      const int null_fd = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (null_fd >= 0 && null_fd != fd) close(null_fd);  // it took the lowest free one: fd
    }
  }
}

}  // namespace

int launch_main(const std::vector<std::string>& args, const std::string& program) {
  open_standard_descriptors();
  LaunchCommandLine parsed = parse_launch_command_line(args);
  if (!parsed.run) return parsed.exit_code;
  if (parsed.options.invoked_as.size() == 2) parsed.options.invoked_as[0] = program;
  const char* env_exe = std::getenv("GP_EXECUTOR");
  std::error_code ec;
  std::string exe = parsed.options.executor;
  if (exe.empty()) exe = env_exe != nullptr ? env_exe : "";
  if (exe.empty()) exe = fs::read_symlink("/proc/self/exe", ec).string();
  if (exe.empty() || access(exe.c_str(), X_OK) != 0) {
    return gp::cli::report(
        "graphpipe-launch",
        invalid_argument("executor not found at " + exe + " (build first, or set GP_EXECUTOR)"));
  }
  const char* env_planner = std::getenv("GP_PLANNER");
  const std::string planner = env_planner != nullptr && *env_planner != '\0'
                                  ? std::string(env_planner)
                                  : (fs::path(exe).parent_path() / "graphpipe-plan").string();
  const LaunchOptions& o = parsed.options;
  if ((o.replan_on_failure || o.adapt) && access(planner.c_str(), X_OK) != 0) {
    return gp::cli::report(
        "graphpipe-launch",
        invalid_argument("planner not found at " + planner + " (set GP_PLANNER); " +
                         (o.adapt ? "--adapt" : "--on-failure replan") + " runs it"));
  }
  Launcher launcher(std::move(parsed.options), exe, planner);
  return launcher.run();
}

}  // namespace gp::exec::daemon
