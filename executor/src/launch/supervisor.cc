#include "supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>
#include <optional>

#include "gp/common/file_read.h"
#include "gp/common/steady_clock.h"
#include "launch/launch.h"
#include "supervisor_io.h"

namespace gp::exec::launch {
namespace {

constexpr int64_t kSameSignalMs = 1000;  // ^C reaches us from the terminal and the launcher
constexpr int kPollMs = 100;
constexpr size_t kMaxLineBytes = 1 << 20;    // a longer "line" goes out in pieces
constexpr size_t kMaxEchoPerTick = 4 << 20;  // a rank that floods its log waits its turn
constexpr std::array<int, 4> kHandled = {SIGINT, SIGTERM, SIGUSR1, SIGCHLD};
constexpr int kNotStarted = 127;  // a rank whose command could not be started: as a shell says

int g_signal_pipe = -1;  // the handlers' self-pipe (write end)

void on_signal(int sig) {
  const int saved = errno;
  const auto byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe, &byte, 1);
  errno = saved;
}

int64_t now_ms() { return steady_ms(); }

const char* stop_name(int sig) { return sig == SIGINT ? "INT" : "TERM"; }

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

struct Rank {
  const RankCommand* command = nullptr;
  pid_t pid = -1;       // > 0 once started
  int tail_fd = -1;     // ATTEMPT/rank-R.log, read from where this attempt's output starts
  std::string pending;  // console output after its last newline
  std::optional<int> status;
  int64_t kill_at_ms = -1;  // set when stopped: SIGKILL then
  bool killed = false;
  bool running() const { return pid > 0 && !status; }
};

// The signal handlers while supervising, and the ones before it afterwards.
class SignalScope {
 public:
  Status install(int write_fd) {
    g_signal_pipe = write_fd;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < kHandled.size(); ++i) {
      if (::sigaction(kHandled[i], &sa, &saved_[i]) != 0) {
        return internal_error(std::string("cannot install a signal handler: ") +
                              std::strerror(errno));
      }
      installed_ = i + 1;
    }
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &saved_pipe_);  // a console gone away is not fatal
    return ok_status();
  }
  ~SignalScope() {
    for (size_t i = 0; i < installed_; ++i) ::sigaction(kHandled[i], &saved_[i], nullptr);
    if (installed_ > 0) ::sigaction(SIGPIPE, &saved_pipe_, nullptr);
  }

 private:
  std::array<struct sigaction, 4> saved_{};
  struct sigaction saved_pipe_ {};
  size_t installed_ = 0;
};

class Supervisor {
 public:
  Supervisor(const std::vector<RankCommand>& commands, const SuperviseOptions& options)
      : options_(options), err_(STDERR_FILENO), out_(STDOUT_FILENO) {
    for (const auto& c : commands) {
      Rank r;
      r.command = &c;
      ranks_.push_back(std::move(r));
    }
  }
  ~Supervisor() {
    for (auto& r : ranks_) {
      if (r.tail_fd >= 0) ::close(r.tail_fd);
    }
    for (int fd : signal_pipe_) {
      if (fd >= 0) ::close(fd);
    }
  }

  Result<SuperviseResult> run();

 private:
  void say(const std::string& line) { err_.write("graphpipe-launch: " + line + "\n"); }
  Status start_ranks();
  Status spawn(Rank& rank, int null_fd);
  void on_signal_byte(int sig, int64_t now);
  void request_stop(int sig, int64_t now);
  void pump(Rank& rank, size_t budget);
  void flush_pending(Rank& rank);
  void tick(int64_t now);
  void reap(int64_t now);
  void read_verdict(int64_t now);
  void read_stop_request(int64_t now);
  void stop_rank(Rank& rank, const std::string& why, int64_t now);
  void note_coordinator();
  int expected() const { return stop_signal_ != 0 ? stop_signal_ : (switching_ ? SIGTERM : 0); }
  SuperviseResult result() const;

  const SuperviseOptions& options_;
  Console err_, out_;
  std::vector<Rank> ranks_;
  std::array<int, 2> signal_pipe_ = {-1, -1};
  int running_ = 0;
  int stop_signal_ = 0;
  int64_t stop_ms_ = 0;
  bool force_stop_ = false;
  BeaconWriter* beacon_ = nullptr;  // while run() runs
  bool switching_ = false;
  bool launcher_gone_ = false;
  bool verdict_read_ = false;
  int64_t failed_since_ = -1;
  int64_t stop_since_ = -1;
};

// The handled signals stay blocked from before the fork until the child has put back the
// default dispositions: a signal meant for us must not run our handler in the child.
Status Supervisor::spawn(Rank& rank, int null_fd) {
  const RankCommand& c = *rank.command;
  const std::string log =
      options_.attempt_dir + (c.log_name == "srun" ? "/ranks.log" : "/rank-" + c.log_name + ".log");
  // The rank writes its log itself (the file is its stdout and stderr), so that nothing it says
  // is lost if we die first; we echo the file to the console as it grows.
  // A FIFO or a link left where the log goes is refused, never waited on or followed.
  if (struct stat there{}; ::lstat(log.c_str(), &there) == 0 && !S_ISREG(there.st_mode)) {
    return invalid_argument(log + " is not a regular file: the rank's log cannot go there");
  }
  const int log_fd = ::open(
      log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW, 0644);
  if (log_fd < 0) return internal_error("cannot write " + log + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(log_fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(log_fd);
    return invalid_argument(log + " is not a regular file: the rank's log cannot go there");
  }
  ::fcntl(log_fd, F_SETFL, O_APPEND);  // the rank writes it blocking, as any stdout
  rank.tail_fd = ::open(log.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (rank.tail_fd < 0 || ::lseek(rank.tail_fd, 0, SEEK_END) < 0) {
    ::close(log_fd);
    return internal_error("cannot read " + log + ": " + std::strerror(errno));
  }
  std::vector<char*> argv;
  for (const auto& w : c.argv) argv.push_back(const_cast<char*>(w.c_str()));
  argv.push_back(nullptr);
  const std::string failed = "graphpipe-launch: cannot run " + c.argv[0] + "\n";
  sigset_t handled, before;
  sigemptyset(&handled);
  for (int sig : kHandled) sigaddset(&handled, sig);
  ::pthread_sigmask(SIG_BLOCK, &handled, &before);
  const pid_t pid = ::fork();
  if (pid == 0) {  // only async-signal-safe calls until exec
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    // As a shell starts a background job: ^C from the terminal is the rank's own handler's
    // business (ranks install one).
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGQUIT, SIG_IGN);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGUSR1, SIG_DFL);
    ::signal(SIGCHLD, SIG_DFL);
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execvp(argv[0], argv.data());
    [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, failed.data(), failed.size());
    ::_exit(kNotStarted);
  }
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  ::close(log_fd);
  if (pid < 0) {
    return internal_error(std::string("cannot start a rank: ") + std::strerror(fork_errno));
  }
  rank.pid = pid;
  ++running_;
  return ok_status();
}

Status Supervisor::start_ranks() {
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0)
    return internal_error(std::string("cannot open /dev/null: ") + std::strerror(errno));
  Status status = ok_status();
  for (auto& r : ranks_) {
    if (status.ok()) status = spawn(r, null_fd);
    if (r.pid <= 0) r.status = kNotStarted;  // this one and, after a failure, those after it
  }
  ::close(null_fd);
  return status;
}

void Supervisor::request_stop(int sig, int64_t now) {
  if (stop_signal_ != 0) {
    // The same ^C, from the terminal and passed on by the launcher, counts once.
    if (force_stop_ || now < stop_ms_ + kSameSignalMs) return;
    force_stop_ = true;
    say(std::string(stop_name(sig)) + " again: killing every rank now (SIGKILL)");
    for (auto& r : ranks_) {
      if (r.running()) ::kill(r.pid, SIGKILL);
    }
    return;
  }
  stop_signal_ = sig;
  stop_ms_ = now;
  say(std::string(stop_name(sig)) +
      ": asking every rank to stop after an agreed iteration (again: stop at once)");
  if (beacon_ != nullptr) beacon_->set_stop(sig);
  for (auto& r : ranks_) {
    if (r.running()) ::kill(r.pid, sig);
  }
}

void Supervisor::on_signal_byte(int sig, int64_t now) {
  if (sig == SIGINT || sig == SIGTERM) {
    request_stop(sig, now);
  } else if (sig == SIGUSR1 && !switching_) {
    if (stop_signal_ != 0 || failed_since_ >= 0) {
      say(std::string("adapt: not switching after all: the job ") +
          (stop_signal_ != 0 ? "is stopping" : "failed"));
      return;
    }
    // An --adapt switch: rank 0 asks the coordinator for a stop, as on a SIGTERM.
    for (auto& r : ranks_) {
      if (r.command->rank != 0 || !r.running()) continue;
      switching_ = true;
      ::kill(r.pid, SIGTERM);
    }
  }
}

// Up to `budget` bytes of what the rank added to its log since the last call, to the console.
void Supervisor::pump(Rank& rank, size_t budget) {
  std::array<char, 65536> buf;
  while (budget > 0 && rank.tail_fd >= 0) {
    const ssize_t n = ::read(rank.tail_fd, buf.data(), std::min(buf.size(), budget));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // all of it for now (an error: nothing more to show)
    budget -= static_cast<size_t>(n);
    if (rank.command->log_name == "srun") {
      out_.write(std::string(buf.data(), static_cast<size_t>(n)));
      continue;
    }
    rank.pending.append(buf.data(), static_cast<size_t>(n));
    std::string out;
    size_t start = 0;
    for (size_t nl; (nl = rank.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      out += "[rank " + rank.command->log_name + "] ";
      out.append(rank.pending, start, nl + 1 - start);
    }
    rank.pending.erase(0, start);
    if (!out.empty()) err_.write(out);
    if (rank.pending.size() > kMaxLineBytes) flush_pending(rank);
  }
}

void Supervisor::flush_pending(Rank& rank) {
  if (rank.pending.empty()) return;
  err_.write("[rank " + rank.command->log_name + "] " + rank.pending + "\n");
  rank.pending.clear();
}

void Supervisor::stop_rank(Rank& rank, const std::string& why, int64_t now) {
  if (rank.kill_at_ms >= 0 || !rank.running()) return;
  say("stopping rank " + std::to_string(rank.command->rank) + " (" + why +
      "): SIGTERM, SIGKILL in " + std::to_string(options_.kill_grace_s) + " s");
  ::kill(rank.pid, SIGTERM);
  rank.kill_at_ms = now + 1000LL * options_.kill_grace_s;
}

void Supervisor::reap(int64_t now) {
  for (auto& r : ranks_) {
    if (!r.running()) continue;
    int st = 0;
    if (::waitpid(r.pid, &st, WNOHANG) == r.pid) {
      r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      --running_;
      pump(r, SIZE_MAX);  // the rest of what it wrote
      flush_pending(r);
      const int e = expected();
      if (*r.status != 0 && failed_since_ < 0 && (e == 0 || *r.status != 128 + e)) {
        failed_since_ = now;
      }
      continue;
    }
    // The grace period is over: SIGKILL (a frozen rank ignores SIGTERM until continued).
    if (r.kill_at_ms >= 0 && now >= r.kill_at_ms && !r.killed) {
      ::kill(r.pid, SIGKILL);
      r.killed = true;
    }
  }
}

// The coordinator's verdict names the rank to blame: stop it now, whatever it is doing. (Rank 0
// writes it atomically, once.)
void Supervisor::read_verdict(int64_t now) {
  const std::string path = options_.attempt_dir + "/verdict";
  if (verdict_read_ || !exists(path)) return;
  verdict_read_ = true;
  FileReadOptions small;
  small.max_bytes = 64 << 10;
  auto text = read_regular_file(path, small);
  const Verdict v = parse_verdict(text.ok() ? *text : "", options_.nprocs);
  if (failed_since_ < 0) failed_since_ = now;
  for (auto& r : ranks_) {
    if (r.command->rank == v.failed_rank) {
      stop_rank(r, "the coordinator declared it failed: " + v.reason, now);
    }
  }
}

// A stop the launcher received before our handlers were in place (it writes the file, then
// signals us): taken as that signal.
void Supervisor::read_stop_request(int64_t now) {
  if (options_.stop_request.empty() || stop_signal_ != 0 || !exists(options_.stop_request)) return;
  FileReadOptions small;
  small.max_bytes = 64;
  auto text = read_regular_file(options_.stop_request, small);
  const int sig = text.ok() ? std::atoi(text->c_str()) : 0;
  request_stop(sig == SIGINT ? SIGINT : SIGTERM, now);
}

// The coordinator's address, for the console and for `graphpipe-executor status --run-dir`.
void Supervisor::note_coordinator() {
  if (options_.run_dir.empty()) return;
  const std::string noted = options_.run_dir + "/coordinator";
  if (exists(noted)) return;
  FileReadOptions small;
  small.max_bytes = 4096;
  auto address = read_regular_file(options_.attempt_dir + "/coordinator", small);
  if (!address.ok() || address->empty()) return;
  std::string line = *address;
  line.erase(line.find_last_not_of("\r\n") + 1);
  if (write_atomically(noted, line + "\n")) {
    say("job " + options_.job_id + ": coordinator at " + line);
  }
}

void Supervisor::tick(int64_t now) {
  if (options_.launcher_pid > 0 && !launcher_gone_ && ::getppid() != options_.launcher_pid) {
    launcher_gone_ = true;
    say("the launcher (pid " + std::to_string(options_.launcher_pid) + ") is gone");
    if (stop_signal_ == 0) request_stop(SIGTERM, now);  // a stop under way goes on as it is
  }
  read_stop_request(now);
  note_coordinator();
  reap(now);
  read_verdict(now);
  // After a failure the others leave within a heartbeat; whoever is still there is stopped.
  if (failed_since_ >= 0 && now >= failed_since_ + 1000LL * options_.kill_grace_s) {
    for (auto& r : ranks_) stop_rank(r, "still running after the job failed", now);
  }
  // A requested stop that does not finish in time (e.g. a peer is frozen) ends by force.
  if (expected() != 0) {
    if (stop_since_ < 0) stop_since_ = now;
    if (now >= stop_since_ + 1000LL * (2 * options_.timeout_s + options_.kill_grace_s)) {
      for (auto& r : ranks_) {
        stop_rank(r, "did not stop within " + std::to_string(2 * options_.timeout_s) + " s", now);
      }
    }
  }
}

SuperviseResult Supervisor::result() const {
  SuperviseResult out;
  for (const auto& r : ranks_) {
    out.exit_status[r.command->rank] = r.status.value_or(0);
    if (r.kill_at_ms >= 0) out.stopped.push_back(r.command->rank);
    if (r.pid <= 0) out.not_started.push_back(r.command->rank);
  }
  out.stop_signal = stop_signal_;
  out.force_stop = force_stop_;
  out.expected_signal = expected();
  out.launcher_gone = launcher_gone_;
  return out;
}

Result<SuperviseResult> Supervisor::run() {
  if (::pipe2(signal_pipe_.data(), O_CLOEXEC | O_NONBLOCK) != 0) {
    return internal_error(std::string("cannot make a pipe: ") + std::strerror(errno));
  }
  SignalScope signals;
  GP_RETURN_IF_ERROR(signals.install(signal_pipe_[1]));
  // Its own thread: a stalled console or a slow disk never lets it go stale.
  BeaconWriter beacon(options_.beacon);
  if (!beacon.ok()) return internal_error("cannot write the beacon " + options_.beacon);
  beacon_ = &beacon;
  Status started = start_ranks();
  if (!started.ok()) {
    // The ranks already started stop, and are waited for, as after a failure.
    say(started.message());
    failed_since_ = now_ms() - 1000LL * options_.kill_grace_s;
  }
  if (options_.stop_signal != 0) request_stop(options_.stop_signal, now_ms());
  while (running_ > 0) {
    pollfd wake{signal_pipe_[0], POLLIN, 0};
    ::poll(&wake, 1, kPollMs);
    unsigned char sig = 0;
    while (::read(signal_pipe_[0], &sig, 1) == 1) on_signal_byte(sig, now_ms());
    for (auto& r : ranks_) {
      if (r.running()) pump(r, kMaxEchoPerTick);
    }
    tick(now_ms());
  }
  for (auto& r : ranks_) flush_pending(r);
  beacon_ = nullptr;
  return result();  // a rank that could not start: its status says so (127)
}

}  // namespace

std::string format_rank_commands(const std::vector<RankCommand>& ranks) {
  std::string out;
  const auto field = [&out](const std::string& text) {
    out += text;
    out += '\0';
  };
  for (const RankCommand& r : ranks) {
    field(std::to_string(r.rank));
    field(r.log_name);
    field(std::to_string(r.argv.size()));
    for (const std::string& word : r.argv) field(word);
  }
  return out;
}

Result<std::vector<RankCommand>> parse_rank_commands(const std::string& text,
                                                     const std::string& file) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (size_t end; (end = text.find('\0', start)) != std::string::npos; start = end + 1) {
    fields.push_back(text.substr(start, end - start));
  }
  if (start != text.size()) {
    return invalid_argument(file + ": the last field is not NUL-terminated");
  }
  std::vector<RankCommand> out;
  for (size_t i = 0; i < fields.size();) {
    const std::string where = file + " command " + std::to_string(out.size() + 1);
    if (fields.size() - i < 3) return invalid_argument(where + ": needs RANK, LOG_NAME and COUNT");
    RankCommand c;
    size_t words = 0;
    try {
      c.rank = std::stoi(fields[i]);
      words = std::stoul(fields[i + 2]);
    } catch (const std::exception&) {
      return invalid_argument(where + ": RANK '" + fields[i] + "' and COUNT '" + fields[i + 2] +
                              "' must be numbers");
    }
    c.log_name = fields[i + 1];
    if (c.rank < 0 || c.log_name.empty() || c.log_name.find('/') != std::string::npos) {
      return invalid_argument(where + ": rank " + fields[i] + ", log name '" + c.log_name +
                              "': need a rank >= 0 and a log name without '/'");
    }
    i += 3;
    if (words == 0 || words > fields.size() - i) {
      return invalid_argument(where + ": COUNT " + std::to_string(words) + ", but " +
                              std::to_string(fields.size() - i) + " fields follow");
    }
    c.argv.assign(fields.begin() + static_cast<std::ptrdiff_t>(i),
                  fields.begin() + static_cast<std::ptrdiff_t>(i + words));
    i += words;
    for (const auto& o : out) {
      if (o.rank == c.rank)
        return invalid_argument(where + ": rank " + std::to_string(c.rank) + " twice");
    }
    out.push_back(std::move(c));
  }
  if (out.empty()) return invalid_argument(file + ": no command");
  return out;
}

Result<SuperviseResult> supervise(const std::vector<RankCommand>& ranks,
                                  const SuperviseOptions& options) {
  Supervisor supervisor(ranks, options);
  return supervisor.run();
}

}  // namespace gp::exec::launch
