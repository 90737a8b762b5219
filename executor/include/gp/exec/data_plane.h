// The job's data plane, chosen from one transport table as NCCL chooses its transports (each has
// canConnect, setup, connect; the first entry that can connect is taken):
//   nccl  device memory between GPUs, through the backend table's NCCL entry points (nccl.h);
//   shm   shared-memory rings between the ranks that turn out to share a host, Gloo beyond
//         (see shm_communicator.h);
//   gloo  Gloo (TCP) between all ranks, when the transport is forced to Gloo.
// Ranks run as threads of one process (rank_session.h) meet over a LoopbackHub instead.
//
// Ranks tell hosts apart by hostname, kernel boot id and mount, network and pid namespaces, which
// each writes to the store directory before connecting: once Gloo has connected every rank, every
// identity is there.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/communicator.h"
#include "gp/exec/gloo_communicator.h"
#include "gp/exec/nccl_layout.h"

namespace gp::exec {

class Device;

struct DataPlaneOptions {
  // auto: NCCL for device memory, else shared memory between local ranks and Gloo beyond;
  // gloo: Gloo only; nccl: NCCL (device memory only).
  std::string transport = "auto";
  const Device* device = nullptr;  // where this rank's tensors live; nullptr: host memory
  GlooOptions gloo;                // rank, world size and timeout of every transport
  int64_t shm_ring_bytes = int64_t{8} << 20;
  std::string shm_root = "/dev/shm";  // where the per-job ring directory is made
  // NCCL: the plan's communicators, the ids rank 0 handed out at registration (none: rank 0
  // chose another transport) and what ends a set-up the job no longer waits for.
  NcclLayout nccl_layout;
  std::vector<std::string> nccl_unique_ids;
  std::function<std::string()> abort_reason;
};

struct DataPlane {
  std::unique_ptr<Communicator> comm;
  std::string description;  // for the log: "gloo" or "shared memory with ranks 0,1, gloo beyond"
  std::vector<int> local_ranks;  // the ranks on this host, this one included, ascending
};

// One entry of the transport table.
struct Transport {
  std::string_view name;  // "nccl", "shm", "gloo"
  // Whether the transport carries the tensors of a rank that asked for `requested` and keeps
  // them on `device` (nullptr: host memory); an error when the rank asked for it by name and it
  // cannot.
  Result<bool> (*can_connect)(std::string_view requested, const Device* device);
  // Rank 0, before the ranks meet: the rendezvous ids it hands every rank at registration, one
  // per communicator of the plan's layout. nullptr: the ranks meet in the store directory.
  Result<std::vector<std::string>> (*setup)(const NcclLayout& layout);
  // This rank's end of the data plane, once every rank has registered.
  Result<DataPlane> (*connect)(const DataPlaneOptions& options);
};

// The table, in the order it is walked.
std::span<const Transport> transports();

// The first transport of the table that can connect; InvalidArgument naming the flag when none
// can (or when the one asked for by name cannot).
Result<const Transport*> choose_transport(std::string_view requested, const Device* device);

// Connects `transport`, chosen by choose_transport(options.transport, options.device), after
// checking that rank 0 chose a transport of the same kind (its ids say): every rank must use the
// same data plane, and the one that finds out tells the coordinator.
Result<DataPlane> connect_data_plane(const Transport& transport, const DataPlaneOptions& options);

// choose_transport, then connect_data_plane.
Result<DataPlane> make_data_plane(const DataPlaneOptions& options);

// Pins the calling thread to the k-th CPU it may run on, k = this rank's index among the ranks
// of its host, so that the compute threads of co-located ranks never share a core (the
// scheduler otherwise migrates them, and one rank's step runs slower than the plan assumes).
// Returns the CPU, or -1 (nothing changed) when the host has fewer allowed CPUs than ranks.
Result<int> pin_to_local_core(int rank, const std::vector<int>& local_ranks);

}  // namespace gp::exec
