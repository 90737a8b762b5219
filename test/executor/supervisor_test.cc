// The launcher's supervisor of an attempt, with shell commands standing in for ranks: their logs,
// exit statuses, the stops it makes (a failure, the coordinator's verdict, a signal, an --adapt
// switch), the beacon and the coordinator's address.
#include "launch/supervisor.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gp::exec::launch {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

RankCommand shell(int rank, const std::string& script) {
  return RankCommand{rank, std::to_string(rank), {"sh", "-c", script}};
}

// A fresh attempt directory, and what the supervisor printed on stderr while it ran.
struct Attempt {
  fs::path dir;
  std::string console;
  Attempt() {
    dir = fs::temp_directory_path() / ("gp-supervisor-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "attempt");
  }
  ~Attempt() { fs::remove_all(dir); }
  SuperviseOptions options() const {
    SuperviseOptions o;
    o.attempt_dir = (dir / "attempt").string();
    o.run_dir = dir.string();
    o.job_id = "job-test";
    o.beacon = (dir / "beacon").string();
    o.nprocs = 2;
    o.kill_grace_s = 1;
    o.timeout_s = 5;
    return o;
  }
  Result<SuperviseResult> run(const std::vector<RankCommand>& ranks, const SuperviseOptions& o) {
    const fs::path console_path = dir / "console";
    const int saved = ::dup(STDERR_FILENO);
    const int fd = ::open(console_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
    auto result = supervise(ranks, o);
    ::dup2(saved, STDERR_FILENO);
    ::close(saved);
    console = slurp(console_path);
    return result;
  }
  std::string log(int rank) const {
    return slurp(dir / "attempt" / ("rank-" + std::to_string(rank) + ".log"));
  }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST_CASE("a formatted commands file reads back word for word, spaces and quotes included",
          "[launch]") {
  const std::vector<RankCommand> ranks = {
      {0, "0", {"env", "LOCAL_RANK=0", "exe", "run", "--metrics-out", "a b/'m'.json"}},
      {3, "srun", {"srun", "bash", "-c", "echo \"$1\""}}};
  auto parsed = parse_rank_commands(format_rank_commands(ranks), "cmds");
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 2);
  for (size_t i = 0; i < ranks.size(); ++i) {
    CHECK((*parsed)[i].rank == ranks[i].rank);
    CHECK((*parsed)[i].log_name == ranks[i].log_name);
    CHECK((*parsed)[i].argv == ranks[i].argv);
  }
}

TEST_CASE("the commands file gives each rank its log name and words, or is refused by record",
          "[launch]") {
  using namespace std::string_literals;
  auto parsed = parse_rank_commands(
      "0\0"
      "0\0"
      "2\0"
      "echo\0"
      "a b\0"
      "1\0"
      "srun\0"
      "1\0"
      "true\0"s,
      "cmds");
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 2);
  CHECK((*parsed)[0].argv == std::vector<std::string>{"echo", "a b"});
  CHECK((*parsed)[1].log_name == "srun");
  CHECK((*parsed)[1].rank == 1);
  CHECK(parse_rank_commands("0\0"
                            "0\0"
                            "1\0"
                            "true"s,
                            "cmds")
            .status()
            .message() == "cmds: the last field is not NUL-terminated");
  CHECK(parse_rank_commands("0\0"
                            "0\0"
                            "3\0"
                            "true\0"s,
                            "cmds")
            .status()
            .message() == "cmds command 1: COUNT 3, but 1 fields follow");
  CHECK(parse_rank_commands("0\0"
                            "0\0"
                            "1\0"
                            "a\0"
                            "0\0"
                            "x\0"
                            "1\0"
                            "b\0"s,
                            "cmds")
            .status()
            .message() == "cmds command 2: rank 0 twice");
  CHECK(parse_rank_commands("x\0"
                            "0\0"
                            "1\0"
                            "a\0"s,
                            "cmds")
            .status()
            .message() == "cmds command 1: RANK 'x' and COUNT '1' must be numbers");
  CHECK(parse_rank_commands("0\0"
                            "../r\0"
                            "1\0"
                            "a\0"s,
                            "cmds")
            .status()
            .message() ==
        "cmds command 1: rank 0, log name '../r': need a rank >= 0 and a log name without '/'");
  CHECK(!parse_rank_commands("", "cmds").ok());
}

TEST_CASE("each rank's output goes whole to its log and line by line, prefixed, to stderr",
          "[launch]") {
  Attempt a;
  auto result =
      a.run({shell(0, "echo hello; printf 'no newline'"), shell(1, "echo oops >&2")}, a.options());
  REQUIRE(result.ok());
  CHECK(result->exit_status == std::map<int, int>{{0, 0}, {1, 0}});
  CHECK(result->stopped.empty());
  CHECK(a.log(0) == "hello\nno newline");
  CHECK(a.log(1) == "oops\n");
  CHECK(a.console.find("[rank 0] hello\n") != std::string::npos);
  CHECK(a.console.find("[rank 0] no newline\n") != std::string::npos);
  CHECK(a.console.find("[rank 1] oops\n") != std::string::npos);
}

TEST_CASE("after a rank fails, the others are stopped after the grace period, SIGKILL if need be",
          "[launch]") {
  Attempt a;
  const auto start = std::chrono::steady_clock::now();
  auto result = a.run({shell(0, "exit 3"), shell(1, "trap '' TERM; while :; do sleep 0.1; done")},
                      a.options());
  REQUIRE(result.ok());
  CHECK(result->exit_status == std::map<int, int>{{0, 3}, {1, 128 + 9}});
  CHECK(result->stopped == std::vector<int>{1});
  CHECK(result->expected_signal == 0);
  CHECK(a.console.find("stopping rank 1 (still running after the job failed): SIGTERM, SIGKILL "
                       "in 1 s") != std::string::npos);
  CHECK(seconds_since(start) < 10);
}

TEST_CASE("the rank the coordinator's verdict names is stopped at once, then the rest",
          "[launch]") {
  Attempt a;
  const std::string verdict = (a.dir / "attempt" / "verdict").string();
  auto result =
      a.run({shell(0, "printf 'failed_rank=1\\nreason=it froze\\n' > '" + verdict + ".tmp'; mv '" +
                          verdict + ".tmp' '" + verdict + "'; exec sleep 30"),
             shell(1, "exec sleep 30")},
            a.options());
  REQUIRE(result.ok());
  CHECK(result->exit_status == std::map<int, int>{{0, 143}, {1, 143}});
  CHECK(result->stopped == std::vector<int>{0, 1});
  const auto blamed =
      a.console.find("stopping rank 1 (the coordinator declared it failed: it froze)");
  const auto rest = a.console.find("stopping rank 0 (still running after the job failed)");
  CHECK(blamed != std::string::npos);
  CHECK(rest != std::string::npos);
  CHECK(blamed < rest);
}

TEST_CASE("SIGTERM to the supervisor reaches every rank, and their exit 143 is no failure",
          "[launch]") {
  Attempt a;
  auto result =
      a.run({shell(0, "kill -TERM $PPID; exec sleep 30"), shell(1, "exec sleep 30")}, a.options());
  REQUIRE(result.ok());
  CHECK(result->exit_status == std::map<int, int>{{0, 143}, {1, 143}});
  CHECK(result->stop_signal == 15);
  CHECK(result->expected_signal == 15);
  CHECK(!result->force_stop);
  CHECK(result->stopped.empty());
  CHECK(a.console.find("TERM: asking every rank to stop after an agreed iteration") !=
        std::string::npos);
  // For ranks the signal missed: the beacon they watch says it too.
  CHECK(slurp(a.dir / "beacon").find(" stop 15\n") != std::string::npos);
}

TEST_CASE("a second SIGINT more than a second after the first kills every rank", "[launch]") {
  Attempt a;
  auto result = a.run({shell(0,
                             "trap '' INT; kill -INT $PPID; sleep 1.5; kill -INT $PPID; "
                             "while :; do sleep 0.1; done")},
                      a.options());
  REQUIRE(result.ok());
  CHECK(result->exit_status.at(0) == 128 + 9);
  CHECK(result->force_stop);
  CHECK(result->stop_signal == 2);
  CHECK(a.console.find("INT again: killing every rank now (SIGKILL)") != std::string::npos);
}

TEST_CASE("SIGUSR1 stops the job through rank 0 alone, as an --adapt switch", "[launch]") {
  Attempt a;
  auto result =
      a.run({shell(0, "kill -USR1 $PPID; exec sleep 30"), shell(1, "sleep 0.5; echo still here")},
            a.options());
  REQUIRE(result.ok());
  CHECK(result->exit_status == std::map<int, int>{{0, 143}, {1, 0}});
  CHECK(result->stop_signal == 0);
  CHECK(result->expected_signal == 15);
  CHECK(a.log(1) == "still here\n");
}

TEST_CASE("the beacon is rewritten every second and the coordinator's address noted once",
          "[launch]") {
  Attempt a;
  const std::string coordinator = (a.dir / "attempt" / "coordinator").string();
  auto result = a.run({shell(0, "echo 127.0.0.1:4242 > '" + coordinator + ".tmp'; mv '" +
                                    coordinator + ".tmp' '" + coordinator + "'; sleep 2.5")},
                      a.options());
  REQUIRE(result.ok());
  CHECK(std::stoi(slurp(a.dir / "beacon")) >= 2);  // at the start, then every second
  CHECK(slurp(a.dir / "coordinator") == "127.0.0.1:4242\n");
  CHECK(a.console.find("job job-test: coordinator at 127.0.0.1:4242") != std::string::npos);
}

TEST_CASE("a rank that cannot be started ends 127 and the started ones are stopped", "[launch]") {
  Attempt a;
  fs::create_directories(a.dir / "attempt" / "rank-1.log");  // its log cannot be opened
  const auto start = std::chrono::steady_clock::now();
  auto result = a.run({shell(0, "exec sleep 30"), shell(1, "true"), shell(2, "true")}, a.options());
  REQUIRE(result.ok());
  CHECK(result->exit_status == std::map<int, int>{{0, 143}, {1, 127}, {2, 127}});
  CHECK(result->stopped == std::vector<int>{0});
  CHECK(result->not_started == std::vector<int>{1, 2});
  CHECK(a.console.find((a.dir / "attempt" / "rank-1.log").string() + " is not a regular file") !=
        std::string::npos);
  CHECK(seconds_since(start) < 10);
}

TEST_CASE("a FIFO left where a rank's log goes is refused, never waited on", "[launch]") {
  Attempt a;
  const fs::path fifo = a.dir / "attempt" / "rank-0.log";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto start = std::chrono::steady_clock::now();
  auto result = a.run({shell(0, "true")}, a.options());
  REQUIRE(result.ok());
  CHECK(result->exit_status.at(0) == 127);
  CHECK(a.console.find(fifo.string() + " is not a regular file") != std::string::npos);
  CHECK(seconds_since(start) < 5);
}

TEST_CASE("a stop written to the stop-request file is taken as that signal", "[launch]") {
  Attempt a;
  SuperviseOptions o = a.options();
  o.stop_request = (a.dir / "stop-request").string();
  std::ofstream(o.stop_request) << "15\n";
  const auto start = std::chrono::steady_clock::now();
  auto result = a.run({shell(0, "exec sleep 30")}, o);
  REQUIRE(result.ok());
  CHECK(result->exit_status.at(0) == 143);
  CHECK(result->stop_signal == 15);
  CHECK(result->stopped.empty());  // passed on, not stopped as a failure
  CHECK(a.console.find("TERM: asking every rank to stop") != std::string::npos);
  CHECK(seconds_since(start) < 5);
}

TEST_CASE("a console that takes nothing loses its echo, not the ranks' logs or the supervisor",
          "[launch]") {
  Attempt a;
  int fds[2];
  REQUIRE(::pipe(fds) == 0);  // nobody reads it: it fills after 64 KiB
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(fds[1], STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  auto result = supervise({shell(0,
                                 "i=0; while [ $i -lt 4000 ]; do echo line $i of a long log; "
                                 "i=$((i + 1)); done")},
                          a.options());
  const double took = seconds_since(start);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ::close(fds[0]);
  ::close(fds[1]);
  REQUIRE(result.ok());
  CHECK(result->exit_status.at(0) == 0);
  CHECK(a.log(0).find("line 3999 of a long log\n") != std::string::npos);
  CHECK(took < 20);
}

TEST_CASE("a command that cannot run exits 127, naming it", "[launch]") {
  Attempt a;
  auto result =
      a.run({RankCommand{0, "0", {"/nonexistent/graphpipe-executor", "run"}}}, a.options());
  REQUIRE(result.ok());
  CHECK(result->exit_status.at(0) == 127);
  CHECK(a.log(0) == "graphpipe-launch: cannot run /nonexistent/graphpipe-executor\n");
}

}  // namespace
}  // namespace gp::exec::launch
