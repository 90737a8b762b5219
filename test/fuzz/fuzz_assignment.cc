// A stage assignment file as graphpipe-plan lower --assignment reads it: the first input byte
// picks the format (fuzz_common.h) and the device count, the rest is parsed as a
// StageAssignmentFile and resolved against the tiny-mmt model (op ids, convexity, replicas,
// micro-batches dividing the mini-batch).
#include "fuzz_common.h"
#include "gp/model/graph.h"
#include "gp/model/zoo.h"
#include "gp/planner/lower.h"
#include "graphpipe/v1/assignment.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const gp::model::Graph graph =
      std::move(gp::model::Graph::build(gp::model::build_zoo_model("tiny-mmt").value())).value();
  graphpipe::v1::StageAssignmentFile file;
  if (!gp::model::parse_message(gp::fuzz::body(data, size), gp::fuzz::format_of(data[0]), &file)
           .ok()) {
    return 0;
  }
  const int devices = 1 + (data[0] / 3) % 8;
  (void)gp::planner::resolve_assignment(file, graph, devices, 16);
  return 0;
}
