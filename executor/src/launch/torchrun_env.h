// torchrun's environment for `graphpipe-executor run`: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR
// and MASTER_PORT, as torchrun, Slurm wrappers and Kubernetes operators set them. A flag wins
// where the variable is unset; where both are given they must agree, since a rank that silently
// took one of two different ranks (or coordinators) would join the wrong job or none.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "gp/common/status.h"

namespace gp::exec::launch {

// What `run` was given on its command line (nullopt or empty: the flag is absent).
struct RankFlags {
  std::optional<int> rank;
  std::optional<int> world_size;
  std::string coordinator;       // --coordinator HOST:PORT
  std::string coordinator_file;  // --coordinator-file
  std::string device;            // --device (cuda:N is checked against LOCAL_RANK)
};

// A variable's value, or nullptr when it is unset (std::getenv in the program).
using EnvLookup = std::function<const char*(const char*)>;

// The flags with the environment applied: rank and world size from RANK and WORLD_SIZE when
// their flags are absent (one of the two is required), the coordinator MASTER_ADDR:MASTER_PORT
// when neither --coordinator nor --coordinator-file is given. Refuses, naming both, a flag and a
// variable that disagree (--coordinator-file with MASTER_ADDR set; --device cuda:N with another
// LOCAL_RANK), a malformed variable, a rank not below the world size, and MASTER_ADDR or
// MASTER_PORT without the other.
Result<RankFlags> apply_torchrun_env(RankFlags flags, const EnvLookup& env, int max_world_size);

}  // namespace gp::exec::launch
