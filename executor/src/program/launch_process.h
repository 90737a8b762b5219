// What the launcher asks of the operating system: child processes with the signal state they
// need, a command's output, this host's addresses, and words quoted for a shell.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "gp/common/status.h"

namespace gp::exec::daemon {

// The words of `text` split on blanks, as an unquoted shell variable expands (--remote-shell).
std::vector<std::string> split_blanks(const std::string& text);

struct SpawnOptions {
  bool ignore_interrupt = false;  // SIGINT ignored (a ^C in the terminal is the launcher's)
  // SIGTERM and SIGQUIT ignored too (the supervisor, until its handlers run)
  bool ignore_terminate = false;
  int stdout_fd = -1;  // -1: the launcher's
  int stderr_fd = -1;
};

// Starts `argv` (PATH searched) with stdin from /dev/null and no signal blocked.
Result<pid_t> spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {});

// How a child ended, as a shell reports it: its exit status, or 128 + the signal that killed it.
int shell_status(int wait_status);

// Runs `argv` to its end and returns what it printed on stdout (at most 64 KiB); "" when it could
// not run or failed. Its stderr is dropped.
std::string command_output(const std::vector<std::string>& argv);

// The IPv4 address of interface `name` on this host; "" when it has none.
std::string interface_ipv4(const std::string& name);
// What `host` resolves to (IPv4); "" when nothing.
std::string resolve_ipv4(const std::string& host);
// This host's address on the route to `ipv4` (the kernel's choice of source address).
std::string route_source_ipv4(const std::string& ipv4);
// The address in `ip -4 -o addr show` output ("2: eth0 inet 10.0.0.2/24 ..." gives 10.0.0.2),
// and the "src" of `ip route get` output.
std::string address_of_ip_addr(const std::string& output);
std::string source_of_ip_route(const std::string& output);

}  // namespace gp::exec::daemon
