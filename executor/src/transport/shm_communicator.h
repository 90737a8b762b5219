// Shared-memory data plane for ranks on the same host, layered over another communicator (Gloo)
// that keeps carrying messages to other hosts and the all-reduces of groups that span hosts.
// A group whose members all share this host reduces through the rings (ring_allreduce.h).
//
// Why: on a CPU host, Gloo moves each message through TCP and an I/O thread per rank; when the
// ranks' compute threads fill the cores, a message waits for that thread to be scheduled, which
// cost whole scheduler slices per message on a 2-vCPU host. Here the sender copies the message
// into a ring buffer the receiver has mapped, and a receiver waits on a futex in that ring: no
// extra thread, no socket.
//
// Each directed pair of local ranks has one single-producer single-consumer ring (default 8 MiB).
// Messages larger than the free space are queued by the sender and drained by a pump thread
// that runs only while something is queued, so send never blocks, as the interface requires.
// The ring files live in a per-job directory under /dev/shm only until every local rank has
// mapped them (a handshake over the fallback communicator); they are then unlinked, so nothing
// is left behind when a rank dies. Semantics follow the other communicators: tagged messages,
// out-of-order receives (earlier messages of other tags are stashed), every wait bounded by the
// timeout (DEADLINE_EXCEEDED naming the peer and tag), a peer process that exits is noticed
// within about half a second (UNAVAILABLE), abort() fails pending and later calls and tells local
// peers at once through their rings. A receive that stops partway through a message (timeout)
// leaves the stream unusable: later receives from that peer fail, as Gloo's do.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/communicator.h"

namespace gp::exec {

struct ShmOptions {
  int rank = 0;
  int world_size = 1;
  // Ranks on this host (this rank may be listed); messages to them go through shared memory.
  std::vector<int> local_ranks;
  // A directory unique to the job, created if missing (e.g. /dev/shm/graphpipe-<uid>-<job>).
  std::string dir;
  int64_t ring_bytes = int64_t{8} << 20;
  std::chrono::milliseconds timeout{30000};
};

// Maps the rings to every other local rank and meets them through `fallback`, which carries
// everything else. When some local rank cannot map its rings (no space in /dev/shm, say), every
// local rank learns it in the handshake and gets `fallback` itself back, with the reason in
// *unavailable. Fails with INVALID_ARGUMENT on bad options and with the fallback's error (naming
// the handshake) when a peer cannot be reached.
Result<std::unique_ptr<Communicator>> make_shm_communicator(std::unique_ptr<Communicator> fallback,
                                                            const ShmOptions& options,
                                                            std::string* unavailable = nullptr);

}  // namespace gp::exec
