// Communication profiling over any Communicator (Gloo on CPUs, NCCL on GPUs): a size sweep of
// point-to-point transfers (ping-pong between ranks 0 and 1) and of sum all-reduce over every
// rank, reported as nccl-tests does (time, algorithm and bus bandwidth) and fitted to
// t(bytes) = alpha + bytes / beta.
//
// Every rank of the world calls the same sweep with the same options (the repetition counts are
// fixed, not time-driven, so that all ranks agree on the number of transfers); only rank 0's
// timings are returned.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/communicator.h"
#include "gp/profile/measure.h"
#include "gp/profile_db/comm_fit.h"  // fit_alpha_beta, for the sweeps' points
#include "graphpipe/v1/profile.pb.h"

namespace gp::profile {

// The largest message a sweep measures, and the most timed or warm-up transfers per size.
inline constexpr int64_t kMaxSweepBytes = int64_t{4} << 30;
inline constexpr int kMaxSweepRepetitions = 1000000;

struct CommSweepOptions {
  std::vector<int64_t> sizes_bytes;  // ascending, each > 0 (all-reduce: a multiple of 4)
  int warmup = 2;                    // untimed transfers per size
  int repetitions = 10;              // timed transfers per size
};

struct CommSample {
  int64_t bytes = 0;
  Stats time;                    // one transfer (p2p: half a round trip)
  double algbw_bytes_per_s = 0;  // bytes / time
  double busbw_bytes_per_s = 0;  // p2p: algbw; all-reduce: algbw * 2 (n - 1) / n
};

// The nccl-tests default sweep: 1 KiB to 16 MiB by factors of 4.
std::vector<int64_t> default_sweep_sizes();

// InvalidArgument (naming the option) unless the sizes and counts are usable.
Status validate_sweep(const CommSweepOptions& options);

// Ranks 0 and 1 ping-pong; any other rank returns at once. Needs world_size >= 2.
Result<std::vector<CommSample>> sweep_p2p(exec::Communicator& comm, int world_size,
                                          const CommSweepOptions& options,
                                          const std::function<void(const CommSample&)>& on_size);
// Sum all-reduce over ranks 0..world_size-1 (float32 elements).
Result<std::vector<CommSample>> sweep_allreduce(
    exec::Communicator& comm, int world_size, const CommSweepOptions& options,
    const std::function<void(const CommSample&)>& on_size);

}  // namespace gp::profile
