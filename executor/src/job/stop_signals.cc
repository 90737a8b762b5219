#include "stop_signals.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>

#include "gp/common/file_read.h"
#include "gp/common/logging.h"

namespace gp::exec::daemon {
namespace {

// SIGTERM/SIGINT ask for a graceful stop: the heartbeat thread passes it to the coordinator and
// training ends at an iteration boundary every rank agrees on. A second signal more than
// kForceAfter after the first exits at once (the first may be stuck behind a dead peer).
std::atomic<int> g_stop_signal{0};
std::atomic<int64_t> g_stop_signal_ms{0};
constexpr int64_t kForceAfterMs = 5000;
std::atomic<bool> g_exit_at_once{false};
std::atomic<bool> g_handlers_installed{false};
// Why a watchdog raised SIGTERM on its own rank (null: a signal from outside), set before the
// signal: the coordinator passes it to every rank, whose logs then say why the job stopped.
std::atomic<const char*> g_stop_cause{nullptr};

// A watchdog's stop: SIGTERM on this rank, with its cause unless a signal came first.
void raise_stop(const char* cause) {
  if (g_stop_signal.load() == 0) g_stop_cause.store(cause);
  ::kill(::getpid(), SIGTERM);
}

int64_t monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// A ^C typed in a terminal reaches the rank twice at once (from the terminal and passed on by
// the launcher), and the two handlers may run on two threads: until the first has noted its
// time (0 until then), a second one is the same stop.
void on_stop_signal(int sig) {
  if (g_exit_at_once.load()) {
    static const char kInt[] = "graphpipe-executor: SIGINT before the job started: exiting\n";
    static const char kTerm[] = "graphpipe-executor: SIGTERM before the job started: exiting\n";
    if (sig == SIGINT) {
      (void)!write(2, kInt, sizeof kInt - 1);
    } else {
      (void)!write(2, kTerm, sizeof kTerm - 1);
    }
    _exit(128 + sig);
  }
  const int64_t now = monotonic_ms();
  int expected = 0;
  if (g_stop_signal.compare_exchange_strong(expected, sig)) {
    g_stop_signal_ms.store(now);
    return;
  }
  const int64_t first = g_stop_signal_ms.load();
  if (first != 0 && now - first > kForceAfterMs) _exit(128 + sig);
}

// The whole content of FILE, or why it cannot be read. Opening it each time (rather than stat)
// sees a shared filesystem's latest copy: NFS revalidates on open, not on stat. A FIFO or a
// device is refused, never opened to block the watchdog.
Result<std::string> read_beacon(const std::string& path) {
  FileReadOptions small;
  small.max_bytes = 64 << 10;
  return read_regular_file(path, small);
}

// The launcher's beacon says "N stop SIG" once it passed SIGINT/SIGTERM on: a rank that missed
// the signal (it came before our handlers were in place) raises it on itself, once.
void take_stop_from_beacon(const std::string& beacon, bool& taken) {
  if (taken || !g_handlers_installed.load()) return;
  const size_t at = beacon.find(" stop ");
  if (at == std::string::npos) return;
  const int sig = std::atoi(beacon.c_str() + at + 6);
  if (sig != SIGINT && sig != SIGTERM) return;
  taken = true;
  if (g_stop_signal.load() == 0) ::kill(::getpid(), sig);
}

}  // namespace

// Installs the stop handlers, and makes the rank stop (as on SIGTERM) when whoever started it
// (the launcher, the node daemon, sshd's session, a shell) dies, so no rank outlives its job.
// A watchdog polls the parent process rather than using PR_SET_PDEATHSIG, which fires when the
// forking *thread* exits (the node daemon forks from gRPC pool threads that come and go).
// A rank whose parent outlives the launcher (srun's slurmstepd, an ssh session that lingers)
// watches the launcher's beacon file instead: the launcher rewrites it every second, and a
// beacon unchanged for `orphan_timeout_s` (by this host's clock, so clock skew between hosts
// does not matter) means the launcher is gone. A node daemon's ranks watch the daemon's beacon
// the same way: a frozen daemon (SIGSTOP) is still their parent, yet supervises nothing.
Status install_stop_signals(const std::string& launcher_beacon, int orphan_timeout_s,
                            BeaconOwner owner) {
  const bool daemon = owner == BeaconOwner::kDaemon;
  if (!launcher_beacon.empty()) {
    if (orphan_timeout_s < 1) {
      return invalid_argument("--orphan-timeout = " + std::to_string(orphan_timeout_s) +
                              ", must be >= 1 second");
    }
    auto first = read_beacon(launcher_beacon);
    if (!first.ok()) {
      return not_found(std::string(daemon ? "--daemon-beacon '" : "--launcher-beacon '") +
                       launcher_beacon + "' cannot be read: " + first.status().message());
    }
    std::thread([launcher_beacon, orphan_timeout_s, daemon, last = *first]() mutable {
      auto changed_at = std::chrono::steady_clock::now();
      bool stop_taken = false;
      for (;;) {
        take_stop_from_beacon(last, stop_taken);
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        auto now = read_beacon(launcher_beacon);
        if (now.ok() && *now != last) {
          last = *now;
          changed_at = std::chrono::steady_clock::now();
        } else if (std::chrono::steady_clock::now() - changed_at >
                   std::chrono::seconds(orphan_timeout_s)) {
          if (daemon) {
            log::get("exec")->warn(
                "the node daemon's beacon {} has not changed for {} s: the daemon that started "
                "this rank is frozen or gone; stopping",
                launcher_beacon, orphan_timeout_s);
          } else {
            log::get("exec")->warn(
                "the launcher's beacon {} has not changed for {} s: the launcher is gone; "
                "stopping",
                launcher_beacon, orphan_timeout_s);
          }
          raise_stop(daemon ? "the node daemon that started it is frozen or gone"
                            : "the launcher is gone: its beacon stopped changing");
          return;
        }
      }
    }).detach();
  }
  g_exit_at_once.store(true);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &sa, nullptr) != 0 || sigaction(SIGINT, &sa, nullptr) != 0) {
    return internal_error(std::string("cannot install the SIGTERM/SIGINT handlers: ") +
                          std::strerror(errno));
  }
  g_handlers_installed.store(true);
  const pid_t parent = getppid();
  if (parent > 1) {
    std::thread([parent] {
      while (getppid() == parent) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      raise_stop("the process that started it exited");
    }).detach();
  }
  return ok_status();
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "a signal";
  }
}

int stop_signal() { return g_stop_signal.load(); }

const char* stop_reason(int sig) {
  const char* cause = g_stop_cause.load();
  return cause != nullptr ? cause : signal_name(sig);
}

void set_stop_exits_at_once(bool at_once) { g_exit_at_once.store(at_once); }

}  // namespace gp::exec::daemon
