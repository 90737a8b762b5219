// A plan file as the executor and `verify` read it: parse, build its model's graph, check the
// plan's structure (stages, edges, ranks, programs), hashes, fields and schedule (stage graph,
// matched sends). Any input must end in an OK or an error status, never a crash.
#include "fuzz_common.h"
#include "gp/model/graph.h"
#include "gp/plan/plan_util.h"
#include "graphpipe/v1/plan.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  graphpipe::v1::Plan plan;
  if (!gp::model::parse_message(gp::fuzz::body(data, size), gp::fuzz::format_of(data[0]), &plan)
           .ok()) {
    return 0;
  }
  if (!plan.model().weights_file().empty()) return 0;  // would read another file
  auto graph = gp::model::Graph::build(plan.model());
  if (!graph.ok()) return 0;
  (void)gp::plan::validate_plan(plan, *graph);
  // As `verify` reads it: every field and schedule check, whatever the hashes say (validate_plan
  // stops at an edited cluster, which most mutations of one are).
  auto index = gp::plan::validate_plan_structure(plan, *graph);
  if (!index.ok()) return 0;
  (void)gp::plan::plan_field_problems(plan);
  (void)gp::plan::plan_schedule_problems(plan, *graph, *index);
  return 0;
}
