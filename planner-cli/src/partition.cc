#include "gp/planner/partition.h"

#include <string>

namespace gp::planner {

Status validate_partition_context(const PartitionContext& ctx, int64_t b) {
  if (ctx.graph == nullptr || ctx.units == nullptr || ctx.costs == nullptr) {
    return invalid_argument("partition context: graph, units and costs must all be set");
  }
  if (ctx.num_devices < 1) {
    return invalid_argument("num_devices = " + std::to_string(ctx.num_devices) + ", must be >= 1");
  }
  if (b < 1 || (b & (b - 1)) != 0) {
    return invalid_argument("micro_batch = " + std::to_string(b) + ", must be a power of two");
  }
  const int n = ctx.units->num_units();
  if (n == 0) return invalid_argument("the unit graph has no units");
  if (static_cast<int>(ctx.units->topo.size()) != n) {
    return invalid_argument("the unit graph's topological order covers " +
                            std::to_string(ctx.units->topo.size()) + " of " + std::to_string(n) +
                            " units");
  }
  const size_t levels = static_cast<size_t>(ctx.costs->unit(0).levels);
  if (static_cast<size_t>(log2_exact(b)) >= levels) {
    return invalid_argument("micro_batch = " + std::to_string(b) +
                            " exceeds the stage cost tables (at most " +
                            std::to_string(int64_t{1} << (levels - 1)) + " samples)");
  }
  return ok_status();
}

}  // namespace gp::planner
