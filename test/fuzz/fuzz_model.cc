// A model file: parse, build and validate the graph (shapes, attributes, parameter counts), hash.
#include "fuzz_common.h"
#include "gp/model/graph.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  graphpipe::v1::ModelGraph model;
  if (!gp::model::parse_message(gp::fuzz::body(data, size), gp::fuzz::format_of(data[0]), &model)
           .ok()) {
    return 0;
  }
  if (!model.weights_file().empty()) return 0;  // would read another file
  auto graph = gp::model::Graph::build(model);
  if (graph.ok()) (void)gp::model::model_hash(model);
  return 0;
}
