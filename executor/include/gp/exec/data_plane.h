// The job's data plane: Gloo between all ranks, and shared-memory rings between the ranks that
// turn out to share a host (see shm_communicator.h), unless the transport is forced to Gloo.
//
// Ranks tell hosts apart by hostname, kernel boot id and mount, network and pid namespaces, which
// each writes to the store directory before connecting: once Gloo has connected every rank, every
// identity is there.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/communicator.h"
#include "gp/exec/gloo_communicator.h"

namespace gp::exec {

struct DataPlaneOptions {
  GlooOptions gloo;
  std::string transport = "auto";  // auto: shared memory between local ranks; gloo: Gloo only
  int64_t shm_ring_bytes = int64_t{8} << 20;
  std::string shm_root = "/dev/shm";  // where the per-job ring directory is made
};

struct DataPlane {
  std::unique_ptr<Communicator> comm;
  std::string description;       // for the log: "gloo" or "shared memory with ranks 0,1 + gloo"
  std::vector<int> local_ranks;  // the ranks on this host, this one included, ascending
};

// Pins the calling thread to the k-th CPU it may run on, k = this rank's index among the ranks
// of its host, so that the compute threads of co-located ranks never share a core (the
// scheduler otherwise migrates them, and one rank's step runs slower than the plan assumes).
// Returns the CPU, or -1 (nothing changed) when the host has fewer allowed CPUs than ranks.
Result<int> pin_to_local_core(int rank, const std::vector<int>& local_ranks);

Result<DataPlane> make_data_plane(const DataPlaneOptions& options);

}  // namespace gp::exec
