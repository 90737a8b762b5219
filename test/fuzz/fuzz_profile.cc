// A profile database as graphpipe-profile reads it (validate, describe, merge) and as the
// planner's --profile reads it: profiled op times for the cluster's device kind (queried at and
// between and beyond the measured micro-batches), fitted links, and with GP_FUZZ_PLAN naming a
// planner-written plan, a simulation of that plan under these costs.
#include <cstdlib>
#include <memory>
#include <optional>

#include "fuzz_common.h"
#include "gp/common/logging.h"
#include "gp/cost/comm_model.h"
#include "gp/cost/cost_model.h"
#include "gp/model/graph.h"
#include "gp/plan/plan_util.h"
#include "gp/profile_db/profile_db.h"
#include "gp/sim/simulator.h"
#include "graphpipe/v1/plan.pb.h"

namespace {

struct Fixture {
  graphpipe::v1::Plan plan;
  std::optional<gp::model::Graph> graph;
};

// Read once: a plan whose ops the seeds' signatures match (fuzz.sh profiles the same model).
const Fixture& fixture() {
  static const Fixture* f = [] {
    auto* out = new Fixture;
    (void)gp::log::init("fuzz_profile", "off");  // a warning per unmatched signature otherwise
    if (const char* path = std::getenv("GP_FUZZ_PLAN")) {
      if (gp::model::read_message(path, &out->plan).ok()) {
        auto g = gp::model::Graph::build(out->plan.model());
        if (g.ok() && gp::plan::validate_plan(out->plan, *g).ok()) out->graph = std::move(*g);
      }
    }
    return out;
  }();
  return *f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Fixture& fx = fixture();
  graphpipe::v1::ProfileDB db;
  if (!gp::model::parse_message(gp::fuzz::body(data, size), gp::fuzz::format_of(data[0]), &db)
           .ok()) {
    return 0;
  }
  if (gp::profile::validate_profile(db).ok()) {
    (void)gp::profile::describe_profile(db);
    const graphpipe::v1::ProfileDB both[] = {db, db};
    (void)gp::profile::merge_profiles(both);
  }
  if (!fx.graph) return 0;
  const auto& cluster = fx.plan.cluster();
  auto analytic = std::make_shared<const gp::cost::AnalyticCostModel>(
      cluster.device(), fx.plan.training().precision());
  auto profiled = gp::cost::ProfiledCostModel::create(db, cluster.device().name(), analytic);
  if (!profiled.ok()) return 0;
  for (const auto& op : fx.graph->ops()) {
    for (int64_t samples : {int64_t{1}, int64_t{3}, int64_t{16}, int64_t{1} << 24}) {
      (void)(*profiled)->op_time(op, samples);
    }
  }
  const gp::cost::CommModel comm(cluster, db);
  const int ranks[] = {0, 1, 2};
  (void)comm.p2p_time_us(0, 1, int64_t{1} << 20);
  (void)comm.allreduce_time_us(ranks, int64_t{1} << 30);
  const gp::sim::Simulator simulator(
      **profiled, comm, {fx.plan.training().optimizer(), fx.plan.training().precision()});
  (void)simulator.run(fx.plan, *fx.graph);
  return 0;
}
