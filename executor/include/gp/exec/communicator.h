// The data plane between ranks: tagged point-to-point messages and sum all-reduce over a group.
// Implementations: LoopbackHub (ranks as threads of one process, for tests and single-host
// runs); Gloo over TCP, shared memory and NCCL (device memory) plug in behind the same interface.
//
// Every blocking call takes the communicator's timeout and fails with DEADLINE_EXCEEDED naming
// the peer instead of hanging; abort() makes every pending and later call fail with the reason.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "gp/common/status.h"

namespace gp::exec {

// "2,3": a group's ranks for messages (and Gloo's store keys).
inline std::string rank_list(std::span<const int> ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  // Asynchronous for the caller: the bytes are copied before returning.
  virtual Status send(int peer, uint64_t tag, std::span<const std::byte> data) = 0;
  // Blocks until the message (peer, tag) arrives; its size must equal data.size().
  virtual Status recv(int peer, uint64_t tag, std::span<std::byte> data) = 0;
  // Element-wise sum over `group` (sorted global ranks including this one), in place.
  virtual Status allreduce_sum(std::span<const int> group, std::span<float> data) = 0;
  virtual void abort(const std::string& reason) = 0;

  // True when send/recv/allreduce_sum take memory of the rank's device (NCCL) instead of host
  // memory. Such calls are stream-ordered and return before the transfer is done: a send reads
  // its data after the device work queued before it, device work queued after a receive or an
  // all-reduce sees its result, and a send's data must stay unchanged, like a receive's buffer
  // unread on the host, until wait_all() returns. Failures may surface at any later call.
  virtual bool device_memory() const { return false; }
  // Waits until every queued transfer is complete, within the communicator's timeout (device-
  // memory communicators; the others complete in their calls).
  virtual Status wait_all() { return ok_status(); }
};

// In-process hub: one Communicator per rank; messages are queued per (src, dst, tag).
class LoopbackHub {
 public:
  LoopbackHub(int world_size, std::chrono::milliseconds timeout);
  std::unique_ptr<Communicator> communicator(int rank);

 private:
  friend class LoopbackCommunicator;
  struct Key {
    int src, dst;
    uint64_t tag;
    bool operator<(const Key& o) const {
      return std::tie(src, dst, tag) < std::tie(o.src, o.dst, o.tag);
    }
  };
  struct Reduction {
    std::vector<double> sum;
    int arrived = 0;
    int collected = 0;
    uint64_t generation = 0;
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, std::vector<std::byte>> mailbox_;
  std::map<std::vector<int>, Reduction> reductions_;
  std::string aborted_;
  int world_size_;
  std::chrono::milliseconds timeout_;
};

}  // namespace gp::exec
