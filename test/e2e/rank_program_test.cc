// Lowering (plan + rank -> program) against golden files: the slots, message tags, sample ranges,
// pieces and staging regions every rank of three hand-partitioned plans runs. A change to the
// lowering shows up here as a readable diff; after checking it, regenerate with
// GP_UPDATE_GOLDEN=1 build/bin/gp_e2e_tests "lowering*".
#include "gp/exec/rank_program.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "../support/example_plans.h"
#include "../support/models.h"
#include "gp/exec/rank_runner.h"
#include "gp/plan/plan_util.h"

namespace {

using namespace gp;

std::string all_ranks(const graphpipe::v1::Plan& plan, const model::Graph& g) {
  auto index = plan::validate_plan(plan, g);
  INFO(index.status().to_string());
  REQUIRE(index.ok());
  std::string text;
  for (int rank = 0; rank < index->world_size; ++rank) {
    auto program = exec::lower_rank_program(plan, g, *index, rank);
    INFO("rank " << rank << ": " << program.status().to_string());
    REQUIRE(program.ok());
    text += exec::describe(*program);
  }
  return text;
}

void check_golden(const std::string& name, const std::string& text) {
  const std::string path = std::string(GP_TEST_DATA_DIR) + "/golden/" + name + ".txt";
  const char* update = std::getenv("GP_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path) << text;
  }
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream golden;
  golden << in.rdbuf();
  INFO("golden file " << path << " (GP_UPDATE_GOLDEN=1 rewrites it)");
  CHECK(text == golden.str());
}

}  // namespace

TEST_CASE("lowering a plan with replicated stages gives each replica its sample slice") {
  const auto g = testing::zoo_graph("tiny-mmt");
  const auto text = all_ranks(
      testing::replicated_plan(g, testing::training(graphpipe::v1::OPTIMIZER_KIND_ADAM)), g);
  check_golden("rank_programs_replicated", text);
}

TEST_CASE("lowering a chain plan relays a skipped tensor through the middle stage") {
  const auto g = testing::zoo_graph("tiny-candle-uno");
  const auto text =
      all_ranks(testing::relay_plan(g, testing::training(graphpipe::v1::OPTIMIZER_KIND_SGD)), g);
  CHECK(text.find("relay ") != std::string::npos);
  check_golden("rank_programs_relay", text);
}

TEST_CASE("lowering a fan-out receives the trunk's gradient in one message per consumer") {
  const auto g = testing::fan_in_graph();
  const auto text =
      all_ranks(testing::fan_in_plan(g, testing::training(graphpipe::v1::OPTIMIZER_KIND_SGD)), g);
  check_golden("rank_programs_fan_in", text);
}

TEST_CASE("lowering refuses a rank without a program, naming it and the world size") {
  const auto g = testing::fan_in_graph();
  const auto plan = testing::fan_in_plan(g, testing::training(graphpipe::v1::OPTIMIZER_KIND_SGD));
  auto index = plan::validate_plan(plan, g);
  REQUIRE(index.ok());
  auto program = exec::lower_rank_program(plan, g, *index, 7);
  REQUIRE_FALSE(program.ok());
  CHECK(program.status().message().find("--rank = 7") != std::string::npos);
  CHECK(program.status().message().find("4 ranks") != std::string::npos);
}

TEST_CASE("a rank runner refuses to iterate before a data plane is bound, naming its rank") {
  const auto g = testing::fan_in_graph();
  const auto plan = testing::fan_in_plan(g, testing::training(graphpipe::v1::OPTIMIZER_KIND_SGD));
  auto index = plan::validate_plan(plan, g);
  REQUIRE(index.ok());
  auto runner = exec::RankRunner::create(plan, g, *index, 2);
  REQUIRE(runner.ok());
  CHECK(exec::describe((*runner)->program()) ==
        exec::describe(*exec::lower_rank_program(plan, g, *index, 2)));
  auto loss = (*runner)->run_iteration(0);
  REQUIRE_FALSE(loss.ok());
  CHECK(loss.status().message().find("rank 2") != std::string::npos);
  CHECK(loss.status().message().find("before bind") != std::string::npos);
}
