// Sum all-reduce over a communicator's point-to-point messages: the ring algorithm
// (reduce-scatter, then all-gather), each rank sending 2(n-1)/n of the data once. The shared-
// memory data plane runs it when every member of a group shares this host, where a message costs
// two memory copies and no thread; Gloo keeps the groups that span hosts.
//
// Every element's sum is computed once, by one rank, in the ring's order, and copied to the others,
// so all members end with the same bits. Messages are pieces of at most scratch.size() floats,
// tagged `tag`, and must arrive in the order they were sent between each pair (the rings
// guarantee it), so one tag serves a whole group. A rank may run ahead of its successor by up to
// one piece per member, which the caller's rings should hold. A failed call can leave pieces
// behind: the caller must not run another all-reduce on the same messages after a failure.
#pragma once

#include <cstdint>
#include <span>

#include "gp/common/status.h"
#include "gp/exec/communicator.h"

namespace gp::exec {

// A tag for the all-reduces of `group`, the same on every member, outside the executor's message
// tags and the shared-memory handshake's.
uint64_t ring_allreduce_tag(std::span<const int> group);

// data = the sum of every member's data, in place. `group` holds sorted distinct ranks including
// comm.rank(); `scratch` (non-empty) receives the pieces before they are added.
Status ring_allreduce_sum(Communicator& comm, std::span<const int> group, uint64_t tag,
                          std::span<float> data, std::span<float> scratch);

}  // namespace gp::exec
