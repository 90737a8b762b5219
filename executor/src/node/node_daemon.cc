// graphpipe-executor serve: the NodeDaemon gRPC service. Ranks are child processes of the
// daemon (this executable's `run`), their output in the job directory; a reaper records exits
// and frees devices, and stops a job's other local ranks when one fails.
#include "node_daemon.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "control/server_guard.h"
#include "gp/common/file_read.h"
#include "gp/common/logging.h"
#include "gp/common/util.h"
#include "gp/common/version.h"
#include "gp/exec/rank_session.h"
#include "gp/model/model_io.h"
#include "graphpipe/v1/daemon.grpc.pb.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec::daemon {
namespace {

namespace fs = std::filesystem;
namespace pb = graphpipe::v1;

// A call's 'authorization' header against the daemon's token (none: every call is accepted).
Status check_authorization(const std::string& token,
                           std::optional<std::string_view> authorization) {
  if (token.empty() || (authorization && constant_time_equal(*authorization, "Bearer " + token))) {
    return ok_status();
  }
  return Status(StatusCode::kUnauthenticated,
                "this daemon requires 'authorization: Bearer <token>' with its token");
}

// Flags a client may pass on to the ranks (no path to a binary, nothing that changes where
// the rank listens).
const std::set<std::string> kAllowedFlags = {
    "--checkpoint-dir", "--checkpoint-every", "--resume",        "--resume-if-present",
    "--heartbeat-ms",   "--metrics-out",      "--trace",         "--kill-rank-at",
    "--log-level",      "--data-plane",       "--cpu-affinity",  "--precision",
    "--allow-new-seed", "--tensorboard",      "--measure-every", "--measured-profile-out"};

// The flags among kAllowedFlags whose value is a path: confined to the daemon's output root.
const std::set<std::string> kPathFlags = {
    "--checkpoint-dir", "--resume",      "--resume-if-present",   "--metrics-out",
    "--trace",          "--tensorboard", "--measured-profile-out"};

// `path` as the ranks will use it (relative to this process's directory, which they inherit),
// with symlinks of its existing part resolved and ".." folded; an error naming `what` unless it
// lies inside `root` (itself canonical).
Result<std::string> confine(const std::string& what, const std::string& path,
                            const fs::path& root) {
  if (path.empty()) return invalid_argument(what + ": empty path");
  std::error_code ec;
  const fs::path resolved = fs::weakly_canonical(fs::absolute(path, ec), ec);
  if (ec) return invalid_argument(what + " = '" + path + "': " + ec.message());
  auto r = root.begin();
  auto p = resolved.begin();
  for (; r != root.end() && !r->empty(); ++r, ++p) {
    if (p == resolved.end() || *p != *r) {
      return invalid_argument(what + " = '" + path + "' resolves to '" + resolved.string() +
                              "', outside this daemon's output root '" + root.string() +
                              "' (serve --output-root)");
    }
  }
  return resolved.string();
}

struct RankProc {
  int rank = 0;
  int device = 0;
  pid_t pid = -1;
  bool running = false;
  int exit_code = 0;
  int64_t exited_unix_ms = 0;
  std::string log_path;
  // Set by terminate(): SIGKILL follows at this time if SIGTERM did not end it (a frozen
  // process does not act on SIGTERM until it is continued).
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  bool sigkill_sent = false;
  // Whether this daemon's signal ended the rank: a rank that died of a SIGKILL the daemon never
  // sent killed itself (or was killed by someone else) even if a SIGTERM was on its way.
  bool stopped_by_daemon() const {
    return kill_at.has_value() && (exit_code != 128 + SIGKILL || sigkill_sent);
  }
};

// How long a rank has between SIGTERM and SIGKILL.
constexpr std::chrono::seconds kKillGrace{1};

void terminate(RankProc& r, std::chrono::seconds grace = kKillGrace) {
  if (!r.running || r.kill_at) return;
  // A rank that has exited but is not reaped yet keeps its own exit status: signalling it would
  // make its death look like the daemon's doing.
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(r.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
      info.si_pid == r.pid) {
    return;
  }
  kill(r.pid, SIGTERM);
  r.kill_at = std::chrono::steady_clock::now() + grace;
}

grpc::Status bad_request(const std::string& msg) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg);
}

struct Job {
  std::vector<RankProc> ranks;
  std::string verdict_path;  // rank 0, when here, names the rank the coordinator blamed
};

class Daemon final : public pb::NodeDaemon::Service {
 public:
  Daemon(ServeOptions options, std::string self_exe)
      : options_(std::move(options)),
        self_exe_(std::move(self_exe)),
        owner_(static_cast<size_t>(options_.devices)),
        // By pid: daemons that share a --work-dir each have their own.
        beacon_path_((fs::path(options_.work_dir) / ("daemon-beacon-" + std::to_string(::getpid())))
                         .string()) {
    write_beacon();  // before any rank reads it
    reaper_ = std::thread([this] { reap(); });
    beacon_ = std::thread([this] { beat(); });
  }
  ~Daemon() override {
    beacon_stop_ = true;
    beacon_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      for (auto& [id, job] : jobs_) {
        for (auto& r : job.ranks) {
          terminate(r);
        }
      }
    }
    reaper_.join();
    std::error_code ec;
    fs::remove(beacon_path_, ec);  // best effort, once no rank watches it
  }

  grpc::Status GetInfo(grpc::ServerContext* ctx, const pb::DaemonInfoRequest*,
                       pb::DaemonInfo* out) override {
    if (auto st = authenticate(*ctx); !st.ok()) return st;
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    out->set_host(host);
    out->set_devices(options_.devices);
    out->set_version(GP_VERSION_STRING);
    out->set_bind_address(options_.bind_host);
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t d = 0; d < owner_.size(); ++d) {
      if (!owner_[d].empty()) out->add_busy_devices(static_cast<int>(d));
    }
    return grpc::Status::OK;
  }

  grpc::Status StartRanks(grpc::ServerContext* ctx, const pb::StartRanksRequest* req,
                          pb::StartRanksResponse* out) override {
    if (auto st = authenticate(*ctx); !st.ok()) return st;
    if (auto st = check_request(*req); !st.ok()) return st;
    // The ranks get the paths as checked (resolved), so a later symlink in front of them
    // cannot redirect what was checked.
    std::vector<std::string> extra;
    if (auto st = confine_extra_args(*req, &extra); !st.ok()) return st;
    const std::string& id = req->job_id();
    std::string store_dir = (fs::path(options_.output_root) / ("store-" + id)).string();
    if (!req->store_dir().empty()) {
      auto path = confine("store_dir", req->store_dir(), options_.output_root);
      if (!path.ok()) return bad_request(path.status().message());
      store_dir = *path;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (jobs_.count(id)) return bad_request("job_id = '" + id + "': already submitted here");
    std::vector<int> free;
    if (auto st = free_devices(req->ranks_size(), &free); !st.ok()) return st;
    const fs::path dir = fs::path(options_.work_dir) / ("job-" + id);
    std::error_code ec;
    fs::create_directories(dir, ec);
    const std::string plan_path = (dir / "plan.pb").string();
    if (!model::write_file_atomic(plan_path, req->plan()).ok() || ec) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "cannot write the plan into " + dir.string());
    }
    Job job;
    for (int i = 0; i < req->ranks_size(); ++i) {
      RankProc p;
      p.rank = req->ranks(i);
      p.device = free[static_cast<size_t>(i)];
      p.log_path = (dir / ("rank-" + std::to_string(p.rank) + ".log")).string();
      if (p.rank == 0) job.verdict_path = (dir / "verdict").string();
      p.pid =
          spawn(rank_command(*req, p, plan_path, store_dir, job.verdict_path, extra), p.log_path);
      if (p.pid < 0) {
        for (auto& started : job.ranks) terminate(started);
        return grpc::Status(grpc::StatusCode::INTERNAL,
                            "cannot start rank " + std::to_string(p.rank));
      }
      p.running = true;
      owner_[static_cast<size_t>(p.device)] = id;
      out->add_devices(p.device);
      job.ranks.push_back(p);
    }
    log::get("daemon")->info("job {}: started {} rank(s) of {}", id, job.ranks.size(),
                             req->world_size());
    jobs_.emplace(id, std::move(job));
    return grpc::Status::OK;
  }

  grpc::Status JobStatus(grpc::ServerContext* ctx, const pb::JobStatusRequest* req,
                         pb::JobStatusResponse* out) override {
    if (auto st = authenticate(*ctx); !st.ok()) return st;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(req->job_id());
    if (it == jobs_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job '" + req->job_id() + "' here");
    }
    for (size_t i = 0; i < it->second.ranks.size(); ++i) {
      const RankProc& p = it->second.ranks[i];
      auto* r = out->add_ranks();
      r->set_rank(p.rank);
      r->set_device(p.device);
      r->set_running(p.running);
      r->set_exit_code(p.exit_code);
      r->set_exited_unix_ms(p.exited_unix_ms);
      r->set_stopped_by_daemon(p.stopped_by_daemon());
      const int64_t from = i < static_cast<size_t>(req->log_offsets_size())
                               ? req->log_offsets(static_cast<int>(i))
                               : 0;
      // The log is the daemon's own file, yet a FIFO put in its place must not block the RPC.
      auto log = RegularFile::open(p.log_path);
      const int64_t end = log.ok() ? static_cast<int64_t>(log->size()) : 0;
      const int64_t start = std::clamp<int64_t>(from, 0, end);
      const int64_t n = std::min<int64_t>(end - start, 64 << 10);
      std::string chunk;
      if (n > 0) {
        auto got = log->read_at(static_cast<uint64_t>(start), static_cast<size_t>(n));
        if (got.ok()) chunk = std::move(*got);
      }
      r->set_log(chunk);
      r->set_log_end(start + static_cast<int64_t>(chunk.size()));
      r->set_log_size(end);
    }
    // "failed_rank=R\nreason=...\n", written by rank 0 when the job aborts.
    if (!it->second.verdict_path.empty()) {
      FileReadOptions small;
      small.max_bytes = 1 << 20;
      auto text = read_regular_file(it->second.verdict_path, small);
      std::istringstream v(text.ok() ? *text : std::string());
      std::string line;
      while (std::getline(v, line)) {
        if (line.rfind("failed_rank=", 0) == 0) {
          out->set_has_verdict(true);
          out->set_failed_rank(std::atoi(line.c_str() + 12));
        } else if (line.rfind("reason=", 0) == 0) {
          out->set_failure_reason(line.substr(7, 4096));
        }
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status StopJob(grpc::ServerContext* ctx, const pb::StopJobRequest* req,
                       pb::StopJobResponse*) override {
    if (auto st = authenticate(*ctx); !st.ok()) return st;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(req->job_id());
    if (it == jobs_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job '" + req->job_id() + "' here");
    }
    const int grace_s = std::clamp(req->grace_s(), 0, 3600);
    for (auto& r : it->second.ranks) {
      terminate(r, grace_s > 0 ? std::chrono::seconds(grace_s) : kKillGrace);
      // The reaper sends SIGKILL at its next pass (once: it then sets kill_at to max()).
      if (req->kill_now() && r.kill_at && !r.sigkill_sent) {
        r.kill_at = std::chrono::steady_clock::now();
      }
    }
    return grpc::Status::OK;
  }

 private:
  // A job request a rank could run: a plain job id, a plan the ranks' sessions would load (so
  // `submit` learns why not before any rank starts), ranks of it and a coordinator.
  static grpc::Status check_request(const pb::StartRanksRequest& req) {
    const std::string& id = req.job_id();
    if (id.empty() || id.find('/') != std::string::npos || id.find("..") != std::string::npos) {
      return bad_request("job_id = '" + id + "': must be a plain non-empty name");
    }
    pb::Plan plan;
    if (!plan.ParseFromString(req.plan())) {
      return bad_request("plan: not a serialized graphpipe.v1.Plan");
    }
    if (auto loaded = plan::LoadedPlan::from(plan); !loaded.ok()) {
      return bad_request("plan: " + loaded.status().message());
    }
    if (req.world_size() != plan.programs_size()) {
      return bad_request("world_size = " + std::to_string(req.world_size()) + ", the plan has " +
                         std::to_string(plan.programs_size()) + " ranks");
    }
    if (req.ranks_size() == 0) return bad_request("ranks: none to start");
    for (int r : req.ranks()) {
      if (r < 0 || r >= req.world_size()) {
        return bad_request("ranks: " + std::to_string(r) + " is not a rank of the plan");
      }
    }
    if (req.coordinator().empty()) return bad_request("coordinator is required");
    return grpc::Status::OK;
  }

  // The request's extra_args as the ranks get them: only flags of kAllowedFlags, the paths
  // among them confined to the output root.
  grpc::Status confine_extra_args(const pb::StartRanksRequest& req,
                                  std::vector<std::string>* extra) const {
    const int n_extra = req.extra_args_size();
    for (int i = 0; i < n_extra; ++i) {
      const std::string& a = req.extra_args(i);
      if (!a.starts_with("--")) {
        extra->push_back(a);
        continue;
      }
      const size_t eq = a.find('=');
      const std::string flag = a.substr(0, eq);
      if (!kAllowedFlags.count(flag)) {
        return bad_request("extra_args: '" + flag + "' is not a flag a daemon passes on");
      }
      if (!kPathFlags.count(flag)) {
        extra->push_back(a);
        continue;
      }
      std::string value;
      if (eq != std::string::npos) {
        value = a.substr(eq + 1);
      } else if (i + 1 < n_extra) {
        value = req.extra_args(++i);
      } else {
        return bad_request("extra_args: " + flag + " has no value");
      }
      auto path = confine("extra_args " + flag, value, options_.output_root);
      if (!path.ok()) return bad_request(path.status().message());
      extra->push_back(flag);
      extra->push_back(*path);
    }
    return grpc::Status::OK;
  }

  // The free devices (under mu_), when there are at least `wanted`; else who holds them.
  grpc::Status free_devices(int wanted, std::vector<int>* free) const {
    std::map<std::string, int> holders;
    for (size_t d = 0; d < owner_.size(); ++d) {
      if (owner_[d].empty()) {
        free->push_back(static_cast<int>(d));
      } else {
        ++holders[owner_[d]];
      }
    }
    if (static_cast<int>(free->size()) < wanted) {
      std::string who;
      for (const auto& [job, n] : holders)
        who += (who.empty() ? "" : ", ") + job + " (" + std::to_string(n) + ")";
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "devices busy: " + std::to_string(wanted) + " requested, " +
                              std::to_string(free->size()) + " of " +
                              std::to_string(options_.devices) + " free; held by job " + who);
    }
    return grpc::Status::OK;
  }

  // The command line of rank `p`: this executable's `run`, training on the device it was given
  // (the daemon owns the devices); rank 0 writes the coordinator's verdict to `verdict_path`.
  std::vector<std::string> rank_command(const pb::StartRanksRequest& req, const RankProc& p,
                                        const std::string& plan_path, const std::string& store_dir,
                                        const std::string& verdict_path,
                                        const std::vector<std::string>& extra) const {
    std::vector<std::string> args = {self_exe_,       "run",
                                     "--plan",        plan_path,
                                     "--rank",        std::to_string(p.rank),
                                     "--world-size",  std::to_string(req.world_size()),
                                     "--coordinator", req.coordinator(),
                                     "--bind",        options_.bind_host,
                                     "--store-dir",   store_dir,
                                     "--iterations",  std::to_string(req.iterations()),
                                     "--timeout",     std::to_string(req.timeout_s())};
    // One job id everywhere: rank 0's coordinator names the job as submit and this daemon do.
    args.push_back("--job-id");
    args.push_back(req.job_id());
    if (options_.accelerator == "cuda") {
      args.push_back("--device");
      args.push_back("cuda:" + std::to_string(p.device));
    }
    if (p.rank == 0) {
      args.push_back("--verdict-file");
      args.push_back(verdict_path);
    }
    // A frozen daemon is still the ranks' parent but supervises nothing: they stop on their own
    // once its beacon is a heartbeat timeout old.
    args.push_back("--daemon-beacon");
    args.push_back(beacon_path_);
    args.push_back("--orphan-timeout");
    args.push_back(std::to_string(std::clamp(req.timeout_s(), 2, 86400)));
    for (const auto& a : tls_flags(options_.tls)) args.push_back(a);
    // An --insecure daemon has no token to give: rank 0's coordinator runs without one too.
    if (options_.auth_token.empty()) args.push_back("--insecure");
    for (const auto& a : extra) args.push_back(a);
    return args;
  }

  // The server's header check (daemon_guard) refuses such calls before their request is read;
  // this one stays for any path that reaches a handler without it.
  grpc::Status authenticate(const grpc::ServerContext& ctx) const {
    const Status s = check_authorization(options_.auth_token, authorization_of(ctx));
    return s.ok() ? grpc::Status::OK
                  : grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
  }

  // fork + exec with stdout and stderr into `log`; -1 on failure. The token goes to the rank in
  // its environment ($GP_AUTH_TOKEN), never in argv, which every local user can read; the
  // daemon's own $GRAPHPIPE_AUTH_TOKEN_FILE is not passed on (the ranks use the daemon's token).
  pid_t spawn(const std::vector<std::string>& args, const std::string& log) const {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view var(*e);
      if (var.starts_with("GP_AUTH_TOKEN=") || var.starts_with("GRAPHPIPE_AUTH_TOKEN_FILE=")) {
        continue;
      }
      // Ranks get these as flags; torchrun's variables of the daemon's own environment (a
      // PyTorchJob pod's) would conflict with them.
      if (var.starts_with("RANK=") || var.starts_with("WORLD_SIZE=") ||
          var.starts_with("LOCAL_RANK=") || var.starts_with("MASTER_ADDR=") ||
          var.starts_with("MASTER_PORT=")) {
        continue;
      }
      env_strings.emplace_back(*e);
    }
    if (!options_.auth_token.empty()) env_strings.push_back("GP_AUTH_TOKEN=" + options_.auth_token);
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(fd);
    return pid;
  }

  // The beacon its ranks watch (--daemon-beacon): rewritten every second while the daemon runs.
  void write_beacon() {
    (void)model::write_file_atomic(beacon_path_, std::to_string(++beats_) + "\n");
  }
  void beat() {
    while (!beacon_stop_) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      write_beacon();
    }
  }

  void reap() {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        bool any_running = false;
        for (auto& [id, job] : jobs_) {
          for (auto& r : job.ranks) {
            if (!r.running) continue;
            int status = 0;
            const pid_t got = waitpid(r.pid, &status, WNOHANG);
            if (got == 0) {
              any_running = true;
              if (r.kill_at && std::chrono::steady_clock::now() >= *r.kill_at) {
                kill(r.pid, SIGKILL);
                r.sigkill_sent = true;
                r.kill_at = std::chrono::steady_clock::time_point::max();
              }
              continue;
            }
            r.running = false;
            r.exited_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
            r.exit_code = WIFEXITED(status)     ? WEXITSTATUS(status)
                          : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                                : 1;
            owner_[static_cast<size_t>(r.device)].clear();
            log::get("daemon")->info("job {}: rank {} exited with {}", id, r.rank, r.exit_code);
            if (r.exit_code != 0) {
              // A failed job releases this node: its other ranks here stop too.
              for (auto& other : job.ranks) {
                terminate(other);
              }
            }
          }
        }
        if (stopping_ && !any_running) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  const ServeOptions options_;
  const std::string self_exe_;
  std::mutex mu_;
  std::map<std::string, Job> jobs_;
  std::vector<std::string> owner_;  // job holding each device, empty when free
  bool stopping_ = false;
  std::thread reaper_;
  const std::string beacon_path_;
  uint64_t beats_ = 0;  // the beacon thread's (and the constructor's, before it starts)
  std::atomic<bool> beacon_stop_{false};
  std::thread beacon_;
};

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

// Requests carry a plan (StartRanks): gRPC's default limit, as before. Responses carry up to
// 64 KiB of output per rank (JobStatus).
constexpr int kMaxRequestBytes = 4 << 20;
constexpr int kMaxResponseBytes = 128 << 20;
constexpr int64_t kBufferBytes = 64 << 20;

ServerGuard daemon_guard(const ServeOptions& o) {
  ServerGuard guard;
  guard.name = "daemon";
  guard.max_request_bytes = kMaxRequestBytes;
  guard.max_response_bytes = kMaxResponseBytes;
  guard.buffer_bytes = kBufferBytes + 2 * kMaxRequestBytes;
  if (!o.auth_token.empty()) {
    guard.check = [token = o.auth_token](std::optional<std::string_view> authorization) {
      return check_authorization(token, authorization);
    };
  }
  return guard;
}

}  // namespace

Status run_serve(const ServeOptions& in) {
  ServeOptions o = in;
  if (o.devices < 1)
    return invalid_argument("--devices = " + std::to_string(o.devices) + ", must be >= 1");
  // Checked before a slot per device is allocated.
  if (o.devices > kMaxDevicesPerNode) {
    return invalid_argument("--devices = " + std::to_string(o.devices) + ", must be at most " +
                            std::to_string(kMaxDevicesPerNode) + " (the devices of one node)");
  }
  if (o.accelerator != "cpu" && o.accelerator != "cuda") {
    return invalid_argument("--accelerator = '" + o.accelerator + "', expected cpu or cuda");
  }
  const auto colon = o.listen.rfind(':');
  if (colon == std::string::npos)
    return invalid_argument("--listen = '" + o.listen + "', expected HOST:PORT");
  if (o.bind_host.empty()) o.bind_host = o.listen.substr(0, colon);
  if (o.bind_host == "0.0.0.0" || o.bind_host == "::" || o.bind_host.empty()) {
    return invalid_argument(
        "--bind: give the address the ranks' data plane uses (the daemon never binds ranks to all "
        "interfaces)");
  }
  if (o.auth_token.empty()) {
    if (const char* env = std::getenv("GP_AUTH_TOKEN")) o.auth_token = env;
  }
  // Anyone who reaches the port could start processes as this user: a token is required
  // unless the operator says the network is trusted.
  if (o.auth_token.empty() && !o.insecure) {
    return invalid_argument(
        "serve: no token: without one anyone who can reach " + o.listen +
        " can start ranks as this user; give --auth-token-file FILE (mode 0600; or "
        "$GRAPHPIPE_AUTH_TOKEN_FILE), or --insecure on a network only you can reach");
  }
  if (o.auth_token.empty()) {
    log::get("daemon")->warn(
        "INSECURE: serve runs without a token (--insecure): anyone who can reach {} can start "
        "ranks as this user",
        o.listen);
  }
  // The ranks it starts get the same files: rank 0 serves its coordinator with them and every
  // rank connects with them, so a daemon needs all three. Absolute, as the ranks may not share
  // the directory they are named from.
  if (o.tls.enabled()) {
    GP_RETURN_IF_ERROR(check_tls(o.tls, TlsRole::kServerAndClient)
                           .with_context("serve (its ranks use the same TLS files)"));
    o.tls = absolute_tls(o.tls);
  }
  if (o.work_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "graphpipe-daemon.XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) return internal_error("cannot create a work directory");
    o.work_dir = tmpl;
  }
  std::error_code ec;
  fs::create_directories(o.work_dir, ec);
  if (ec) return invalid_argument("--work-dir " + o.work_dir + ": " + ec.message());
  // What job requests may name for their ranks: by default only the daemon's own work
  // directory (a client must not write, as this user, wherever this user may).
  if (o.output_root.empty()) o.output_root = o.work_dir;
  fs::create_directories(o.output_root, ec);
  if (!ec) o.output_root = fs::canonical(o.output_root, ec).string();
  if (ec) return invalid_argument("--output-root " + o.output_root + ": " + ec.message());
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return internal_error("cannot find this executable (/proc/self/exe)");

  GP_RETURN_IF_ERROR(check_listen_address("--listen", o.listen));
  Daemon service(o, std::string(self, static_cast<size_t>(n)));
  grpc::ServerBuilder builder;
  int port = 0;
  GP_RETURN_IF_ERROR(add_guarded_port(builder, o.listen, o.tls, daemon_guard(o), &port));
  // gRPC sets SO_REUSEPORT by default; a second daemon must not share a live one's port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  if (!server || port == 0) {
    return invalid_argument("--listen " + o.listen +
                            ": cannot bind (the port is in use, or the host is not this "
                            "machine's)");
  }
  auto log = log::get("daemon");
  log->info("serving {} device(s) on {}:{}{}, ranks bind to {}, jobs in {}, outputs under {}",
            o.devices, o.listen.substr(0, colon), port, o.tls.enabled() ? " over mutual TLS" : "",
            o.bind_host, o.work_dir, o.output_root);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  log->info("stopping: running ranks get SIGTERM");
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return ok_status();
}

}  // namespace gp::exec::daemon
