#include "launch_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <sstream>

namespace gp::exec::daemon {

std::vector<std::string> split_blanks(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

namespace {

// In the child, between fork and exec: only async-signal-safe calls.
[[noreturn]] void exec_child(const std::vector<char*>& argv, const SpawnOptions& options) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGINT, SIGTERM, SIGCHLD, SIGUSR1, SIGPIPE}) sigaction(sig, &dfl, nullptr);
  if (options.ignore_interrupt) signal(SIGINT, SIG_IGN);
  if (options.ignore_terminate) {  // and SIGQUIT, as a shell's background job
    signal(SIGTERM, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd > 0) {
    dup2(null_fd, 0);
    close(null_fd);
  }
  if (options.stdout_fd >= 0) dup2(options.stdout_fd, 1);
  if (options.stderr_fd >= 0) dup2(options.stderr_fd, 2);
  execvp(argv[0], argv.data());
  const char* what = strerror(errno);
  (void)!write(2, "graphpipe-launch: cannot run ", 29);
  (void)!write(2, argv[0], strlen(argv[0]));
  (void)!write(2, ": ", 2);
  (void)!write(2, what, strlen(what));
  (void)!write(2, "\n", 1);
  _exit(127);
}

}  // namespace

Result<pid_t> spawn(const std::vector<std::string>& argv, const SpawnOptions& options) {
  if (argv.empty()) return invalid_argument("spawn: no command");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return Status(StatusCode::kInternal, std::string("fork: ") + strerror(errno));
  if (pid == 0) exec_child(args, options);
  return pid;
}

int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

std::string command_output(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return "";
  const int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  SpawnOptions options;
  options.stdout_fd = fds[1];
  options.stderr_fd = null_fd;
  auto pid = spawn(argv, options);
  close(fds[1]);
  if (null_fd >= 0) close(null_fd);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (out.size() < (64u << 10)) out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (!pid.ok()) return "";
  int status = 0;
  while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  return shell_status(status) == 0 ? out : "";
}

std::string interface_ipv4(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string out;
  for (ifaddrs* a = list; a != nullptr && out.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || name != a->ifa_name) {
      continue;
    }
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) != nullptr) out = text;
  }
  freeifaddrs(list);
  return out;
}

std::string resolve_ipv4(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (host.empty() || getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return "";
  char text[INET_ADDRSTRLEN] = {};
  const auto* in = reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  std::string out = inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) ? text : "";
  freeaddrinfo(found);
  return out;
}

std::string route_source_ipv4(const std::string& ipv4) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);  // connecting a UDP socket sends nothing: it only picks a route
  if (inet_pton(AF_INET, ipv4.c_str(), &to.sin_addr) != 1) return "";
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  std::string out;
  sockaddr_in from{};
  socklen_t len = sizeof from;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&from), &len) == 0) {
    char text[INET_ADDRSTRLEN] = {};
    if (inet_ntop(AF_INET, &from.sin_addr, text, sizeof text) != nullptr) out = text;
  }
  close(fd);
  return out;
}

std::string address_of_ip_addr(const std::string& output) {
  std::istringstream in(output.substr(0, output.find('\n')));
  std::string field;
  for (int i = 0; i < 4 && in >> field; ++i) {
  }
  return field.find('.') == std::string::npos ? "" : field.substr(0, field.find('/'));
}

std::string source_of_ip_route(const std::string& output) {
  std::istringstream in(output);
  for (std::string word; in >> word;) {
    if (word == "src" && in >> word) return word;
  }
  return "";
}

}  // namespace gp::exec::daemon
