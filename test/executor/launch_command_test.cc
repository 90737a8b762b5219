// `graphpipe-executor launch`: its command line, the words it hands a shell, the processes it
// starts, and the addresses it finds. The jobs it runs are the e2e launcher tests'.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "gp/common/util.h"
#include "program/launch_options.h"
#include "program/launch_process.h"

using namespace gp::exec::daemon;
using gp::shell_quote;

namespace {

// What `sh -c 'printf "%s|" WORDS'` prints for the quoted words: the shell's reading of them.
std::string shell_reads(const std::vector<std::string>& words) {
  std::string script = "printf '%s|'";
  for (const auto& w : words) script += " " + shell_quote(w);
  return command_output({"sh", "-c", script});
}

int run_to_end(const std::vector<std::string>& argv, const SpawnOptions& options = {}) {
  auto pid = spawn(argv, options);
  REQUIRE(pid.ok());
  int status = 0;
  REQUIRE(waitpid(*pid, &status, 0) == *pid);
  return shell_status(status);
}

// A temporary plan file: the parser only checks that --plan names a regular file.
struct PlanFile {
  std::string path = "launch_command_test_plan.pb";
  PlanFile() { std::fclose(std::fopen(path.c_str(), "w")); }
  ~PlanFile() { std::remove(path.c_str()); }
};

}  // namespace

TEST_CASE("quoted words reach a shell as they were, quotes, spaces and dollars included",
          "[launch]") {
  const std::vector<std::string> words = {"plain", "a b", "it's", "$HOME", "", "x\"y", "*", "-x"};
  CHECK(shell_reads(words) == "plain|a b|it's|$HOME||x\"y|*|-x|");
  CHECK(shell_quote("--plan") == "--plan");
  CHECK(shell_quote("dir/plan.pb") == "dir/plan.pb");
  CHECK(shell_quote("a b") == "'a b'");
  CHECK(split_blanks("ssh  -o BatchMode=yes\t") ==
        std::vector<std::string>{"ssh", "-o", "BatchMode=yes"});
}

TEST_CASE("a child's end reads as the shell reports it, with its signals reset", "[launch]") {
  CHECK(run_to_end({"sh", "-c", "exit 3"}) == 3);
  CHECK(run_to_end({"sh", "-c", "kill -TERM $$"}) == 143);
  CHECK(run_to_end({"/nonexistent/program"}) == 127);
  // Ignored SIGINT: the child survives its own SIGINT and exits by itself.
  CHECK(run_to_end({"sh", "-c", "kill -INT $$; exit 5"}, SpawnOptions{true, false, -1, -1}) == 5);
  CHECK(run_to_end({"sh", "-c", "kill -INT $$; exit 5"}) == 130);
  CHECK(command_output({"sh", "-c", "echo out; echo err >&2"}) == "out\n");
  CHECK(command_output({"sh", "-c", "echo partial; exit 1"}).empty());
}

TEST_CASE("this host's addresses: loopback by interface, by name and by route", "[launch]") {
  CHECK(interface_ipv4("lo") == "127.0.0.1");
  CHECK(interface_ipv4("no-such-interface").empty());
  CHECK(resolve_ipv4("127.0.0.1") == "127.0.0.1");
  CHECK(resolve_ipv4("").empty());
  CHECK(route_source_ipv4("127.0.0.1") == "127.0.0.1");
  CHECK(route_source_ipv4("not an address").empty());
  CHECK(address_of_ip_addr("2: eth0    inet 10.0.0.2/24 brd 10.0.0.255 scope global eth0\n") ==
        "10.0.0.2");
  CHECK(address_of_ip_addr("").empty());
  CHECK(source_of_ip_route("10.0.0.1 dev veth0 src 10.0.0.2 uid 0\n    cache\n") == "10.0.0.2");
  CHECK(source_of_ip_route("unreachable").empty());
}

TEST_CASE("the launcher's command line: flags before --, the rank flags after, the last value wins",
          "[launch]") {
  PlanFile plan;
  const auto parsed = parse_launch_command_line({"--invoked-as",
                                                 "scripts/graphpipe-launch",
                                                 "--executor",
                                                 "/opt/gp/graphpipe-executor",
                                                 "--plan",
                                                 plan.path,
                                                 "--iterations",
                                                 "7",
                                                 "--timeout",
                                                 "5",
                                                 "--timeout",
                                                 "20",
                                                 "--slowdown",
                                                 "1:3",
                                                 "--slowdown",
                                                 "2:1.5",
                                                 "--log-dir=runs/x",
                                                 "--",
                                                 "--heartbeat-ms",
                                                 "500",
                                                 "--plan"});
  REQUIRE(parsed.run);
  const LaunchOptions& o = parsed.options;
  CHECK(o.invoked_as == std::vector<std::string>{"scripts/graphpipe-launch"});
  CHECK(o.executor == "/opt/gp/graphpipe-executor");
  CHECK(o.iterations == 7);
  CHECK(o.timeout_s == 20);
  CHECK(o.slowdown.at(1) == "3");
  CHECK(o.slowdown.at(2) == "1.5");
  CHECK(o.run_dir == "runs/x");
  CHECK(o.dashdash);
  CHECK(o.extra == std::vector<std::string>{"--heartbeat-ms", "500", "--plan"});
  CHECK(o.given.size() == 13);
  CHECK(!o.per_node());
}

TEST_CASE("the launcher refuses bad flags with exit 2 before anything starts", "[launch]") {
  PlanFile plan;
  const auto refused = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--plan", plan.path});
    const auto parsed = parse_launch_command_line(args);
    return !parsed.run && parsed.exit_code == 2;
  };
  CHECK(refused({"--bogus"}));
  CHECK(refused({"stray"}));
  CHECK(refused({"--iterations", "0"}));
  CHECK(refused({"--kill-grace", "-1"}));
  CHECK(refused({"--port", "65536"}));
  CHECK(refused({"--slowdown", "1:0.5"}));
  CHECK(refused({"--checkpoint-every", "5"}));
  CHECK(refused({"--auth-token", "s3cret"}));
  CHECK(refused({"--auth-token", ""}));
  CHECK(refused({"--nnodes", "2", "--node-rank", "2", "--master-addr", "127.0.0.1"}));
  CHECK(refused({"--nnodes", "2"}));
  CHECK(refused({"--hostfile", "h", "--slurm"}));
  CHECK(refused({"--adapt"}));
  CHECK(!parse_launch_command_line({"--plan", "/nonexistent/plan.pb"}).run);
  const auto help = parse_launch_command_line({"--help"});
  CHECK((!help.run && help.exit_code == 0));
}
