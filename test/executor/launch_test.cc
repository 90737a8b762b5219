// The launcher's decisions, table by table: where ranks run, whom a failed attempt is blamed on
// and with which exit status, and whether the job is re-planned.
#include "launch/launch.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

namespace gp::exec::launch {
namespace {

std::vector<RankExit> exits(std::initializer_list<int> statuses,
                            std::initializer_list<int> stopped = {}) {
  std::vector<RankExit> out;
  for (int s : statuses) out.push_back({s, false});
  for (int r : stopped) out[r].stopped_by_launcher = true;
  return out;
}

Verdict blames(int rank, std::string reason = "") { return {rank, std::move(reason)}; }

TEST_CASE("a rank that could not be started is blamed before any other failure") {
  std::vector<RankExit> ranks = exits({137, 127, 1}, {0});
  ranks[1].not_started = true;
  const Attribution a = attribute_failure(ranks, blames(2), 0);
  CHECK(a.failed_rank == 1);
  CHECK(a.exit_status == 127);
  CHECK(a.message == "rank 1 could not be started (exit status 127)");
}

TEST_CASE("a failed attempt is blamed on the rank that caused it") {
  struct Row {
    const char* what;
    std::vector<RankExit> ranks;
    std::optional<Verdict> verdict;
    int stop_signal;
    int blamed;
    int exit_status;
  };
  const std::vector<Row> rows = {
      {"all succeeded", exits({0, 0, 0}), std::nullopt, 0, -1, 0},
      {"rank 2 killed by SIGSEGV beats the verdict naming rank 1", exits({1, 1, 139}), blames(1), 0,
       2, 139},
      {"SIGKILL of rank 2 (--kill-rank-at) beats the first failure, rank 0", exits({1, 1, 137}),
       std::nullopt, 0, 2, 137},
      {"the verdict's rank 1, stopped by the launcher: blamed, with another rank's status",
       exits({1, 137, 0}, {1}), blames(1), 0, 1, 1},
      {"the verdict's rank 1, stopped by the launcher, when no other rank failed: status 1",
       exits({0, 137, 0}, {1}), blames(1), 0, 1, 1},
      {"a signal the launcher sent does not make the rank the cause", exits({1, 143, 1}, {1}),
       blames(2), 0, 2, 1},
      {"without a verdict, a rank the launcher stopped beats the first failure",
       exits({1, 137, 0}, {1}), std::nullopt, 0, 1, 1},
      {"without a verdict or signals, the first rank that failed", exits({0, 4, 1}), std::nullopt,
       0, 1, 4},
      {"a non-finite loss keeps its exit status 3", exits({3, 1, 1}), blames(0), 0, 0, 3},
      {"a verdict naming a rank that exited 0 does not blame it", exits({1, 0, 0}), blames(1), 0, 0,
       1},
      {"a verdict naming no rank of the job is ignored", exits({0, 1, 0}), blames(-1), 0, 1, 1},
      {"SIGTERM passed on: every rank stopped with 143, none failed", exits({143, 143, 143}),
       std::nullopt, 15, -1, 143},
      {"SIGINT passed on, the ranks finished first", exits({0, 0, 0}), std::nullopt, 2, -1, 130},
      {"SIGTERM passed on, a rank frozen and killed: it is blamed", exits({143, 137, 143}, {1}),
       std::nullopt, 15, 1, 143},
      {"SIGTERM passed on, one rank crashed meanwhile", exits({143, 139, 143}), std::nullopt, 15, 1,
       139},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    const Attribution a = attribute_failure(row.ranks, row.verdict, row.stop_signal);
    CHECK(a.failed_rank == row.blamed);
    CHECK(a.exit_status == row.exit_status);
    CHECK(a.message.empty() == (row.blamed < 0));
  }
}

TEST_CASE("the blame message names the rank, its own status, the launcher's part and the reason") {
  const Attribution a =
      attribute_failure(exits({1, 137, 1}, {1}), blames(1, "rank 1 stopped responding"), 0);
  CHECK(a.message ==
        "rank 1 failed (exit status 137, stopped by the launcher): rank 1 stopped responding");
  const Attribution b = attribute_failure(exits({0, 0, 137}), std::nullopt, 0);
  CHECK(b.message == "rank 2 failed (exit status 137)");
}

TEST_CASE("a verdict file names a rank of the job, or none") {
  struct Row {
    const char* text;
    int nprocs;
    int rank;
    const char* reason;
  };
  const std::vector<Row> rows = {
      {"failed_rank=1\nreason=rank 1 stopped responding\n", 3, 1, "rank 1 stopped responding"},
      {"reason=x = y\nfailed_rank=0\n", 3, 0, "x = y"},
      {"failed_rank=3\nreason=r\n", 3, -1, "r"},
      {"failed_rank=-1\nreason=operator abort\n", 3, -1, "operator abort"},
      {"failed_rank=1x\n", 3, -1, ""},
      {"failed_rank=\n", 3, -1, ""},
      {"", 3, -1, ""},
      {"failed_rank=99999999999999999999\n", 3, -1, ""},
  };
  for (const auto& row : rows) {
    INFO(row.text);
    const Verdict v = parse_verdict(row.text, row.nprocs);
    CHECK(v.failed_rank == row.rank);
    CHECK(v.reason == row.reason);
  }
}

TEST_CASE("ranks fill the hostfile's hosts in order, each with its local rank and device") {
  const PlanShape plan{5, 2, 3};
  PlacementRequest req;
  req.plan_path = "p.pb";
  req.hostfile = "hosts";
  req.device = "cuda";
  req.hosts = {{"a", 3, "10.0.0.1"}, {"b", 2, ""}};
  auto placed = place_ranks(plan, req);
  INFO(placed.status().to_string());
  REQUIRE(placed.ok());
  REQUIRE(placed->size() == 5);
  const std::vector<std::tuple<int, int, std::string>> want = {
      {0, 0, "cuda:0"}, {0, 1, "cuda:1"}, {0, 2, "cuda:2"}, {1, 0, "cuda:0"}, {1, 1, "cuda:1"}};
  for (int r = 0; r < 5; ++r) {
    INFO("rank " << r);
    CHECK((*placed)[r].rank == r);
    CHECK((*placed)[r].host == std::get<0>(want[r]));
    CHECK((*placed)[r].local_rank == std::get<1>(want[r]));
    CHECK((*placed)[r].device == std::get<2>(want[r]));
  }
}

TEST_CASE("local ranks: --nprocs defaults to the plan's ranks, each on its own local device") {
  PlacementRequest req;
  req.plan_path = "p.pb";
  auto placed = place_ranks({3, 1, 8}, req);
  REQUIRE(placed.ok());
  REQUIRE(placed->size() == 3);
  CHECK((*placed)[2].local_rank == 2);
  CHECK((*placed)[2].device == "cpu");
  req.device = "cuda";
  req.visible_gpus = 3;
  placed = place_ranks({3, 1, 8}, req);
  REQUIRE(placed.ok());
  CHECK((*placed)[2].device == "cuda:2");
}

TEST_CASE("placements that do not fit the plan are refused, naming what does not fit") {
  struct Row {
    const char* what;
    PlanShape plan;
    int nprocs;
    std::vector<Host> hosts;
    std::string device;
    int visible_gpus;
    const char* message;
  };
  const std::vector<Row> rows = {
      {"--nprocs other than the plan's",
       {3, 1, 8},
       4,
       {},
       "cpu",
       -1,
       "--nprocs 4, but the plan p.pb has 3 ranks (leave --nprocs out)"},
      {"more slots than ranks",
       {2, 2, 1},
       0,
       {{"a", 2, ""}, {"b", 1, ""}},
       "cpu",
       -1,
       "--hostfile hosts has 3 slots, the plan has 2 ranks"},
      {"a plan node split across two hosts",
       {4, 2, 2},
       0,
       {{"a", 3, ""}, {"b", 1, ""}},
       "cpu",
       -1,
       "--hostfile hosts: ranks 2 and 3 would run on hosts a and b, but the plan puts both on "
       "its node 1 (of 2 nodes of 2 devices), linked within the node; ranks fill the hosts in "
       "order, so each host's slots must hold whole plan nodes (e.g. 2 per host)"},
      {"one plan node over hosts of fewer slots",
       {4, 1, 4},
       0,
       {{"a", 2, ""}, {"b", 2, ""}},
       "cpu",
       -1,
       "ranks 1 and 2 would run on hosts a and b, but the plan puts both on its node 0"},
      {"a re-planned plan's node split (device 1 excluded: ranks 1 and 2 are node 1's)",
       {3, 2, 2, {1}},
       0,
       {{"a", 2, ""}, {"b", 1, ""}},
       "cpu",
       -1,
       "ranks 1 and 2 would run on hosts a and b, but the plan puts both on its node 1"},
      {"more local CUDA ranks than visible GPUs",
       {3, 1, 8},
       0,
       {},
       "cuda",
       2,
       "--device cuda: 3 local ranks, but CUDA_VISIBLE_DEVICES lists 2 GPUs"},
      {"an unknown device kind", {3, 1, 8}, 0, {}, "tpu", -1, "--device must be cpu or cuda"},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    PlacementRequest req;
    req.plan_path = "p.pb";
    req.hostfile = "hosts";
    req.nprocs = row.nprocs;
    req.hosts = row.hosts;
    req.device = row.device;
    req.visible_gpus = row.visible_gpus;
    const auto placed = place_ranks(row.plan, req);
    REQUIRE_FALSE(placed.ok());
    CHECK(placed.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(placed.status().message(), Catch::Contains(row.message));
  }
}

TEST_CASE("a host may run several whole plan nodes, since ranks fill the hosts in order") {
  PlacementRequest req;
  req.plan_path = "p.pb";
  req.hostfile = "hosts";
  req.device = "cuda";
  // 4 plan nodes of 2 devices on 2 hosts of 4 slots; then 2 nodes of 1 device on one host.
  req.hosts = {{"a", 4, ""}, {"b", 4, ""}};
  auto placed = place_ranks({8, 4, 2}, req);
  INFO(placed.status().to_string());
  REQUIRE(placed.ok());
  REQUIRE(placed->size() == 8);
  CHECK((*placed)[3].host == 0);
  CHECK((*placed)[3].device == "cuda:3");
  CHECK((*placed)[4].host == 1);
  CHECK((*placed)[4].local_rank == 0);
  req.hosts = {{"a", 2, ""}};
  placed = place_ranks({2, 2, 1}, req);
  REQUIRE(placed.ok());
  CHECK((*placed)[1].host == 0);
  CHECK((*placed)[1].local_rank == 1);
  // A re-planned plan without device 1: node 0 keeps rank 0, node 1 ranks 1 and 2.
  req.hosts = {{"a", 1, ""}, {"b", 2, ""}};
  placed = place_ranks({3, 2, 2, {1}}, req);
  REQUIRE(placed.ok());
  CHECK((*placed)[1].host == 1);
  CHECK((*placed)[2].local_rank == 1);
}

TEST_CASE("a DeepSpeed or MPI hostfile lists HOST slots=N and an optional max_slots=M") {
  auto hosts = parse_hostfile(
      "# DeepSpeed\nworker-0 slots=8\n\nworker-1   slots=4 max_slots=8  # spare cores\n"
      "worker-2 max_slots=2 slots=2\n",
      "hf");
  INFO(hosts.status().to_string());
  REQUIRE(hosts.ok());
  REQUIRE(hosts->size() == 3);
  CHECK((*hosts)[0].name == "worker-0");
  CHECK((*hosts)[0].slots == 8);
  CHECK((*hosts)[0].address.empty());
  CHECK((*hosts)[1].name == "worker-1");
  CHECK((*hosts)[1].slots == 4);
  CHECK((*hosts)[2].slots == 2);
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"a slots=2\nb slots=x\n",
            "--hostfile hf line 2: slots 'x' must be a positive integer (HOST SLOTS [ADDRESS], "
            "or HOST slots=N [max_slots=M])"},
           {"a slots=0\n", "line 1: slots '0' must be a positive integer"},
           {"a slots=\n", "line 1: slots '' must be a positive integer"},
           {"a max_slots=4\n", "line 1: host a has no slots=N"},
           {"a slots=2 max_slots=1\n", "line 1: max_slots=1 is below slots=2"},
           {"a slots=2 slots=3\n", "line 1: slots= is given twice"},
           {"a slots=2 gpus=2\n", "line 1: 'gpus=2' is neither slots=N nor max_slots=M"},
           {"a slots=2 10.0.0.1\n", "line 1: '10.0.0.1' is neither slots=N nor max_slots=M"},
           {"a slots=2\n\n# c\na slots=1\n",
            "line 4: host 'a' is listed on line 1 already (give each host one line with all its "
            "slots)"}}) {
    INFO(text);
    const auto bad = parse_hostfile(text, "hf");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.status().code() == StatusCode::kInvalidArgument);
    CHECK_THAT(bad.status().message(), Catch::Contains(message));
  }
}

TEST_CASE("a hostfile lists HOST SLOTS and an optional ADDRESS per line, skipping comments") {
  auto hosts =
      parse_hostfile("# host slots address\n\nnode-a 2 10.0.0.1 # rack 1\n  node-b 1#\n", "hf");
  INFO(hosts.status().to_string());
  REQUIRE(hosts.ok());
  REQUIRE(hosts->size() == 2);
  CHECK((*hosts)[0].name == "node-a");
  CHECK((*hosts)[0].slots == 2);
  CHECK((*hosts)[0].address == "10.0.0.1");
  CHECK((*hosts)[1].name == "node-b");
  CHECK((*hosts)[1].address.empty());
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"a 2\nb x\n", "--hostfile hf line 2: slots 'x' must be a positive integer"},
           {"a 0\n", "--hostfile hf line 1: slots '0' must be a positive integer"},
           {"a\n", "--hostfile hf line 1: slots '' must be a positive integer"},
           {"a -1\n", "slots '-1'"},
           {"a 2 10.0.0.1 extra\n", "line 1: unexpected 'extra' after the address"},
           {"# nothing\n\n", "--hostfile hf lists no host"}}) {
    INFO(text);
    const auto bad = parse_hostfile(text, "hf");
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(bad.status().message(), Catch::Contains(message));
  }
}

RestartPolicy replan(int max_restarts = 3) { return {true, max_restarts, false, "/ck"}; }

AttemptResult failed(int attempt, int nprocs, int rank, int status = 137) {
  AttemptResult r;
  r.attempt = attempt;
  r.nprocs = nprocs;
  r.exit_status = status;
  r.failed_rank = rank;
  r.has_checkpoint = true;
  return r;
}

TEST_CASE(
    "a failed attempt is re-planned without the blamed rank, its plan kept by the checkpoints") {
  const NextAttempt next = next_attempt(replan(), failed(1, 3, 2));
  CHECK(next.restart);
  CHECK(next.exclude_rank == 2);
  CHECK(next.attempt == 2);
  CHECK(next.nprocs == 2);
  CHECK(next.plan == "/ck/plan-after-failure-2.pb");
  CHECK(next.message == "re-planning without rank 2 (2 devices left)");
}

TEST_CASE("an attempt is not restarted when it should not or cannot be") {
  struct Row {
    const char* what;
    RestartPolicy policy;
    AttemptResult result;
    const char* message;  // "" when there is nothing to say
  };
  auto with = [](AttemptResult r, auto change) {
    change(r);
    return r;
  };
  RestartPolicy slurm = replan();
  slurm.slurm = true;
  RestartPolicy stop = replan();
  stop.replan = false;
  const std::vector<Row> rows = {
      {"it succeeded", replan(), failed(0, 3, -1, 0), ""},
      {"--on-failure stop", stop, failed(0, 3, 1), ""},
      {"a stop signal", replan(),
       with(failed(0, 3, 1, 143), [](AttemptResult& r) { r.stop_signal = 15; }), ""},
      {"a non-finite loss comes back on any number of devices", replan(), failed(0, 3, 0, 3), ""},
      {"--slurm", slurm, failed(0, 3, 1), "does not run under --slurm yet"},
      {"--max-restarts reached", replan(2), failed(2, 3, 1), "giving up after 2 restarts"},
      {"no checkpoint", replan(),
       with(failed(0, 3, 1), [](AttemptResult& r) { r.has_checkpoint = false; }),
       "no checkpoint in /ck to resume from; not restarting"},
      {"one rank only", replan(), failed(0, 1, 0), "no device left to re-plan for"},
      {"nobody to blame", replan(), failed(0, 3, -1, 1), "no device left to re-plan for"},
  };
  for (const auto& row : rows) {
    INFO(row.what);
    const NextAttempt next = next_attempt(row.policy, row.result);
    CHECK_FALSE(next.restart);
    CHECK_THAT(next.message, Catch::Contains(row.message));
    if (std::string(row.message).empty()) CHECK(next.message.empty());
  }
}

TEST_CASE(
    "re-planning takes the blamed rank's device off its host, and an empty host off the list") {
  AttemptResult r = failed(0, 4, 1);
  r.hosts = {{"a", 2, "10.0.0.1"}, {"b", 2, "10.0.0.2"}};
  NextAttempt next = next_attempt(replan(), r);
  REQUIRE(next.restart);
  REQUIRE(next.hosts.size() == 2);
  CHECK(next.hosts[0].slots == 1);
  CHECK(next.hosts[1].slots == 2);
  CHECK(next.hosts[0].address == "10.0.0.1");

  r = failed(1, 3, 0);
  r.hosts = next.hosts;
  next = next_attempt(replan(), r);
  REQUIRE(next.restart);
  REQUIRE(next.hosts.size() == 1);
  CHECK(next.hosts[0].name == "b");
  CHECK(next.hosts[0].slots == 2);
  CHECK(next.nprocs == 2);
  CHECK(next.plan == "/ck/plan-after-failure-2.pb");

  r = failed(0, 4, 3);
  r.hosts = {{"a", 2, ""}, {"b", 2, ""}};
  next = next_attempt(replan(), r);
  REQUIRE(next.restart);
  CHECK(next.hosts[1].slots == 1);
}

TEST_CASE("after an attempt the rings its ranks noted are removed, and nothing a note misnames") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("gp-rings-" + std::to_string(getpid()));
  fs::remove_all(root);
  const fs::path shm = root / "shm", store = root / "store";
  fs::create_directories(store);
  const std::string own = "graphpipe-" + std::to_string(getuid()) + "-";
  const fs::path ring = shm / (own + "abc"), other_user = shm / "graphpipe-999999-abc";
  const fs::path nested = shm / (own + "x") / "inner", outside = root / "precious";
  for (const auto& d : {ring, other_user, nested, outside}) {
    fs::create_directories(d);
    std::ofstream(d / "ring") << "data";
  }
  auto note = [&](const std::string& name, const fs::path& dir) {
    std::ofstream(store / (name + ".shm-dir")) << dir.string() << "\n";
  };
  note("rank0", ring);
  note("rank1", other_user);
  note("rank2", nested);
  note("rank3", shm / (own + "abc") / ".." / ".." / "precious");
  note("rank4", outside);
  std::ofstream(store / "rank5.other") << ring.string() << "\n";

  auto removed = remove_noted_rings(store.string(), shm.string());
  REQUIRE(removed.ok());
  REQUIRE(removed->size() == 1);
  CHECK((*removed)[0] == ring.lexically_normal().string());
  CHECK_FALSE(fs::exists(ring));
  CHECK(fs::exists(other_user / "ring"));
  CHECK(fs::exists(nested / "ring"));
  CHECK(fs::exists(outside / "ring"));
  // A second pass finds nothing left to remove; a missing store directory is not an error.
  CHECK(remove_noted_rings(store.string(), shm.string())->empty());
  CHECK(remove_noted_rings((root / "none").string(), shm.string())->empty());
  fs::remove_all(root);
}

}  // namespace
}  // namespace gp::exec::launch
