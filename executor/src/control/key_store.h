// The coordinator's key-value table for the data plane's rendezvous (StoreSet/StoreGet), and the
// rank's side of it over a ControlClient (the job module makes it the data plane's
// RendezvousStore: control sits below transport). Ranks that share no filesystem meet through it
// instead of a FileStore directory.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "control/control_client.h"
#include "gp/common/status.h"

namespace gp::exec {

// Bounded, since any holder of the token can fill it: keys up to 1 KiB; values up to
// max(1 MiB, 256 B x world), max(65536, 8 x world) keys and max(64 MiB, 512 B x world^2) in all.
// They grow with the world because Gloo's full mesh stores one value per rank holding an address
// (~150 B) per peer; a job's rendezvous also sets a key per rank and all-reduce group.
class KeyTable {
 public:
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxValueBytes = 1 << 20;           // at least; see above
  static constexpr size_t kMaxKeys = 1 << 16;                 // at least
  static constexpr size_t kMaxTotalBytes = size_t{64} << 20;  // at least

  explicit KeyTable(int world_size = 1);

  // Sets (or replaces) `key`; INVALID_ARGUMENT / RESOURCE_EXHAUSTED past the bounds.
  Status set(const std::string& key, std::string value);
  std::optional<std::string> get(const std::string& key) const;

 private:
  const size_t max_value_bytes_;
  const size_t max_keys_;
  const size_t max_total_bytes_;
  mutable std::mutex mu_;
  std::map<std::string, std::string> values_;
  size_t total_bytes_ = 0;
};

// A rank's side: StoreSet/StoreGet calls to the coordinator, a get polled until its timeout.
// `client` must outlive it.
class CoordinatorStore {
 public:
  CoordinatorStore(ControlClient& client, int rank) : client_(client), rank_(rank) {}
  Status set(const std::string& key, const std::string& value);
  // The key's value once some rank set it; DEADLINE_EXCEEDED naming the key and the coordinator
  // after `timeout`.
  Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout);

 private:
  ControlClient& client_;
  int rank_;
};

}  // namespace gp::exec
