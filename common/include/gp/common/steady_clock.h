// The steady clock as every process of a job stamps it: rank 0 relates ranks' stamps through
// clock offsets measured against the coordinator's, so all of them must read the same clock.
#pragma once

#include <chrono>
#include <cstdint>

namespace gp {

// Microseconds since the steady clock's epoch (boot, on Linux).
inline double steady_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Milliseconds since the same epoch.
inline int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace gp
