// graphpipe-executor run's torchrun variables: RANK, WORLD_SIZE, MASTER_ADDR/MASTER_PORT and
// LOCAL_RANK where flags are absent, refused where a flag disagrees.
#include "launch/torchrun_env.h"

#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

using gp::exec::launch::apply_torchrun_env;
using gp::exec::launch::EnvLookup;
using gp::exec::launch::RankFlags;

namespace {

EnvLookup env_of(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

RankFlags flags(std::optional<int> rank, std::optional<int> world, std::string coordinator = "",
                std::string coordinator_file = "", std::string device = "cpu") {
  return {rank, world, std::move(coordinator), std::move(coordinator_file), std::move(device)};
}

}  // namespace

TEST_CASE("torchrun's variables stand in for absent flags, and flags stand without them") {
  auto r = apply_torchrun_env(flags(std::nullopt, std::nullopt),
                              env_of({{"RANK", "2"},
                                      {"WORLD_SIZE", "4"},
                                      {"MASTER_ADDR", "10.0.0.1"},
                                      {"MASTER_PORT", "29500"},
                                      {"LOCAL_RANK", "0"}}),
                              1024);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  CHECK(*r->rank == 2);
  CHECK(*r->world_size == 4);
  CHECK(r->coordinator == "10.0.0.1:29500");
  r = apply_torchrun_env(flags(1, 3, "127.0.0.1:0"), env_of({}), 1024);
  REQUIRE(r.ok());
  CHECK(*r->rank == 1);
  CHECK(*r->world_size == 3);
  CHECK(r->coordinator == "127.0.0.1:0");
  // The same value twice is no conflict; --coordinator-file without MASTER_* is left alone.
  r = apply_torchrun_env(flags(1, 3, "h:5", "", "cuda:1"),
                         env_of({{"RANK", "1"},
                                 {"WORLD_SIZE", "3"},
                                 {"MASTER_ADDR", "h"},
                                 {"MASTER_PORT", "5"},
                                 {"LOCAL_RANK", "1"}}),
                         1024);
  REQUIRE(r.ok());
  r = apply_torchrun_env(flags(0, 2, "", "/run/coordinator"), env_of({}), 1024);
  REQUIRE(r.ok());
  CHECK(r->coordinator.empty());
  // Flags alone past the world are left to the plan's check, which names the rank's program.
  r = apply_torchrun_env(flags(5, 2), env_of({}), 1024);
  REQUIRE(r.ok());
  CHECK(*r->rank == 5);
}

TEST_CASE("a flag and a torchrun variable that disagree are refused, naming both") {
  struct Row {
    RankFlags given;
    std::map<std::string, std::string> env;
    const char* message;
  };
  const std::vector<Row> rows = {
      {flags(1, 2), {{"RANK", "0"}}, "--rank 1 conflicts with $RANK=0"},
      {flags(1, 2), {{"WORLD_SIZE", "4"}}, "--world-size 2 conflicts with $WORLD_SIZE=4"},
      {flags(0, 2, "10.0.0.2:29500"),
       {{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}},
       "--coordinator 10.0.0.2:29500 conflicts with $MASTER_ADDR:$MASTER_PORT=10.0.0.1:29500"},
      {flags(0, 2, "", "/run/c"),
       {{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}},
       "--coordinator-file /run/c conflicts with $MASTER_ADDR:$MASTER_PORT=10.0.0.1:29500"},
      {flags(0, 2, "", "", "cuda:3"),
       {{"LOCAL_RANK", "1"}},
       "--device cuda:3 conflicts with $LOCAL_RANK=1"},
      {flags(std::nullopt, 2), {}, "--rank is required (or $RANK, as torchrun sets it)"},
      {flags(0, std::nullopt), {}, "--world-size is required (or $WORLD_SIZE"},
      {flags(std::nullopt, 2), {{"RANK", "x"}}, "$RANK='x' must be an integer in [0, 1023]"},
      {flags(0, std::nullopt), {{"WORLD_SIZE", "0"}}, "$WORLD_SIZE='0' must be an integer"},
      {flags(0, 2), {{"MASTER_ADDR", "h"}}, "$MASTER_PORT is not set, but $MASTER_ADDR is"},
      {flags(0, 2), {{"MASTER_PORT", "1"}}, "$MASTER_ADDR is not set, but $MASTER_PORT is"},
      {flags(0, 2),
       {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}},
       "$MASTER_PORT='70000' must be a port"},
      {flags(0, 2), {{"LOCAL_RANK", "-1"}}, "$LOCAL_RANK='-1' must be a non-negative integer"},
      {flags(std::nullopt, std::nullopt),
       {{"RANK", "4"}, {"WORLD_SIZE", "4"}},
       "$RANK = 4 must be below $WORLD_SIZE = 4"},
      {flags(2, std::nullopt), {{"WORLD_SIZE", "2"}}, "--rank = 2 must be below $WORLD_SIZE = 2"},
  };
  for (const auto& row : rows) {
    INFO(row.message);
    const auto r = apply_torchrun_env(row.given, env_of(row.env), 1024);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == gp::StatusCode::kInvalidArgument);
    CHECK_THAT(r.status().message(), Catch::Contains(row.message));
  }
}
