// A cluster file: parse, validate, then select devices from it (all, one, and a few) and map
// ranks to devices and nodes, as the planner does.
#include "fuzz_common.h"
#include "gp/cost/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  graphpipe::v1::Cluster cluster;
  if (!gp::model::parse_message(gp::fuzz::body(data, size), gp::fuzz::format_of(data[0]), &cluster)
           .ok()) {
    return 0;
  }
  if (!gp::cost::validate_cluster(cluster).ok()) return 0;
  const int n = gp::cost::num_devices(cluster);
  for (int want : {n, 1, 3}) {
    auto selected = gp::cost::select_devices(cluster, want);
    if (!selected.ok()) continue;
    const int m = gp::cost::num_devices(*selected);
    for (int r = 0; r < m && r < 64; ++r) {
      (void)gp::cost::physical_device(*selected, r);
      (void)gp::cost::node_of(*selected, r);
    }
  }
  return 0;
}
