// The planner bench's "memory binds" table (issue 42): models whose activations or optimizer
// state overflow the devices, searched by GraphPipe without recomputation and sharding
// (`--recompute never --shard-optimizer never`) and with them (auto, the default).
#pragma once

namespace gp::bench {

// Runs the rows, prints the table and target (9); returns whether the target is met: where no
// plan fits without them auto finds one, and where one does auto is never slower.
bool run_memory_rows();

}  // namespace gp::bench
