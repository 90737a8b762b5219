// The hand-written stage assignments of configs/assignments/ (gp_planner_bench's reference
// plans): every file is listed in index.txt, and every line lowers, as `graphpipe-plan lower`
// does, to a plan the verifier accepts for the configuration it names, so a hand plan cannot rot
// when the zoo, the lowering or the verifier change. The lowered plans also stay under the
// bench's iteration bound, which no plan may pass.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "gp/model/model_io.h"
#include "gp/planner/iteration_bound.h"
#include "gp/planner/verify.h"
#include "reference_plans.h"

using namespace gp;

namespace {

const std::string kDir = GP_SOURCE_DIR "/configs/assignments";

}  // namespace

TEST_CASE("every file of configs/assignments is listed in its index, every listed file exists") {
  const auto files = bench::assignment_files(kDir);
  REQUIRE(files.ok());
  const auto index = bench::read_hand_plan_index(kDir);
  REQUIRE(index.ok());
  CHECK(files->size() >= 2);
  for (const auto& f : *files) {
    INFO("configs/assignments/" << f << " names no configuration in index.txt");
    CHECK(std::any_of(index->begin(), index->end(),
                      [&](const bench::HandPlan& hp) { return hp.name == f; }));
  }
  for (const auto& hp : *index) {
    INFO("index.txt:" << hp.line << ": " << hp.name);
    CHECK(std::find(files->begin(), files->end(), hp.name) != files->end());
  }
}

TEST_CASE("every hand plan lowers to a verified plan for each configuration it is listed for") {
  const auto index = bench::read_hand_plan_index(kDir);
  REQUIRE(index.ok());
  REQUIRE(!index->empty());
  for (const auto& hp : *index) {
    INFO("index.txt:" << hp.line << ": " << hp.name << " for " << bench::config_label(hp.config));
    const auto in = bench::planning_inputs(hp.config);
    REQUIRE(in.ok());
    const auto lowered = bench::lower_hand_plan(hp, *in);
    INFO((lowered.ok() ? lowered->reason : lowered.status().to_string()));
    REQUIRE(lowered.ok());
    REQUIRE(lowered->feasible);
    if (hp.lowering == planner::Lowering::kDag) CHECK(lowered->lowering == "dag");
    if (hp.lowering == planner::Lowering::kChain) CHECK(lowered->lowering == "chain");

    // The plan is the file's partition on the configuration's devices, and the verifier takes it.
    graphpipe::v1::StageAssignmentFile file;
    REQUIRE(model::read_message(hp.path, &file).ok());
    const graphpipe::v1::Plan& plan = lowered->plan;
    CHECK(plan.stages_size() == file.stages_size());
    CHECK(plan.mini_batch() == hp.config.mini_batch);
    CHECK(plan.programs_size() <= hp.config.devices);
    const auto report = planner::verify_plan(plan, *in->compute);
    REQUIRE(report.ok());
    CHECK(report->ok());

    // No plan passes the bound (iteration_bound.h); a hand plan that did would disprove it.
    const auto bound = planner::iteration_bound(*in->graph, *in->compute, in->cluster, in->training,
                                                hp.config.mini_batch);
    CHECK(lowered->throughput > 0);
    CHECK(lowered->throughput <= bound.samples_per_s * (1 + 1e-9));
  }
}

TEST_CASE("a baseline's partition replayed through the lowering keeps its stages and replicas") {
  const bench::BenchConfig config{"zoo:tiny-candle-uno", "cpu-local", 4, 16,
                                  graphpipe::v1::PRECISION_FP32};
  const auto in = bench::planning_inputs(config);
  REQUIRE(in.ok());
  const auto hand = bench::lower_hand_plan(
      {kDir + "/tiny-candle-uno-branches.json", "tiny-candle-uno-branches.json", config,
       planner::Lowering::kBest, "best", 1},
      *in);
  REQUIRE(hand.ok());
  REQUIRE(hand->feasible);
  const auto file = bench::partition_of(hand->plan);
  REQUIRE(file.stages_size() == hand->plan.stages_size());
  for (int s = 0; s < file.stages_size(); ++s) {
    CHECK(file.stages(s).ops_size() == hand->plan.stages(s).op_ids_size());
    CHECK(file.stages(s).replicas() == hand->plan.stages(s).device_ranks_size());
    CHECK(file.stages(s).micro_batch() == 0);  // left to the lowering
  }
  const auto replayed =
      bench::lower_assignment_file(file, *in, config.mini_batch, planner::Lowering::kBest);
  REQUIRE(replayed.ok());
  REQUIRE(replayed->feasible);
  CHECK(replayed->throughput == hand->throughput);
}

TEST_CASE("the index refuses a malformed line, naming the line and the column") {
  const auto dir = std::filesystem::temp_directory_path() / "gp-assignments-index-test";
  std::filesystem::create_directories(dir);
  auto index_with = [&](const std::string& line) {
    std::ofstream(dir / bench::kIndexName) << "# comment\n\n" << line << "\n";
    return bench::read_hand_plan_index(dir.string());
  };
  const auto good = index_with("a.json zoo:dlrm dgx-h100 8 256 fp32 dag  # trailing comment");
  REQUIRE(good.ok());
  REQUIRE(good->size() == 1);
  CHECK((*good)[0].line == 3);
  CHECK((*good)[0].config.devices == 8);
  CHECK((*good)[0].config.mini_batch == 256);
  CHECK((*good)[0].lowering == planner::Lowering::kDag);
  CHECK((*good)[0].path == (dir / "a.json").string());

  const auto few = index_with("a.json zoo:dlrm dgx-h100 8");
  REQUIRE(!few.ok());
  CHECK(few.status().message().find("index.txt:3") != std::string::npos);
  CHECK(few.status().message().find("expected 7 columns") != std::string::npos);
  const auto devices = index_with("a.json zoo:dlrm dgx-h100 x 256 fp32 dag");
  REQUIRE(!devices.ok());
  CHECK(devices.status().message().find("devices = 'x'") != std::string::npos);
  const auto precision = index_with("a.json zoo:dlrm dgx-h100 8 256 fp16 dag");
  REQUIRE(!precision.ok());
  CHECK(precision.status().message().find("precision = 'fp16'") != std::string::npos);
  const auto lowering = index_with("a.json zoo:dlrm dgx-h100 8 256 fp32 tree");
  REQUIRE(!lowering.ok());
  CHECK(lowering.status().message().find("lowering = 'tree'") != std::string::npos);
  std::filesystem::remove_all(dir);
}
