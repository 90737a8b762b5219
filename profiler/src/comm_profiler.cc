#include "gp/profile/comm_profiler.h"

#include <cmath>
#include <cstddef>
#include <string>

namespace gp::profile {
namespace {

// Distinct tags per (size, repetition, direction): a late message is never taken for another.
uint64_t p2p_tag(size_t size_index, int rep, int direction) {
  return (static_cast<uint64_t>(size_index) << 32) | (static_cast<uint64_t>(rep) << 1) |
         static_cast<uint64_t>(direction);
}

CommSample make_sample(int64_t bytes, std::vector<double>& times_us, double bus_factor) {
  CommSample s;
  s.bytes = bytes;
  s.time = summarize(times_us);
  if (s.time.median_us > 0) {
    s.algbw_bytes_per_s = static_cast<double>(bytes) / (s.time.median_us * 1e-6);
    s.busbw_bytes_per_s = s.algbw_bytes_per_s * bus_factor;
  }
  return s;
}

}  // namespace

std::vector<int64_t> default_sweep_sizes() {
  std::vector<int64_t> sizes;
  for (int64_t b = 1024; b <= (int64_t{16} << 20); b *= 4) sizes.push_back(b);
  return sizes;
}

Status validate_sweep(const CommSweepOptions& options) {
  if (options.sizes_bytes.empty()) return invalid_argument("--sizes: empty list");
  for (size_t i = 0; i < options.sizes_bytes.size(); ++i) {
    const int64_t b = options.sizes_bytes[i];
    if (b <= 0 || b % 4 != 0 || b > kMaxSweepBytes) {
      return invalid_argument("--sizes: " + std::to_string(b) +
                              " bytes, must be a positive multiple of 4 (float32 elements), at "
                              "most 4G");
    }
    if (i > 0 && b <= options.sizes_bytes[i - 1]) {
      return invalid_argument("--sizes: " + std::to_string(b) + " after " +
                              std::to_string(options.sizes_bytes[i - 1]) +
                              ", sizes must be ascending");
    }
  }
  if (options.warmup < 0 || options.warmup > kMaxSweepRepetitions) {
    return invalid_argument("--warmup = " + std::to_string(options.warmup) + ", must be in [0, " +
                            std::to_string(kMaxSweepRepetitions) + "]");
  }
  if (options.repetitions < 1 || options.repetitions > kMaxSweepRepetitions) {
    return invalid_argument("--repetitions = " + std::to_string(options.repetitions) +
                            ", must be in [1, " + std::to_string(kMaxSweepRepetitions) + "]");
  }
  return ok_status();
}

Result<std::vector<CommSample>> sweep_p2p(exec::Communicator& comm, int world_size,
                                          const CommSweepOptions& options,
                                          const std::function<void(const CommSample&)>& on_size) {
  GP_RETURN_IF_ERROR(validate_sweep(options));
  if (world_size < 2) {
    return invalid_argument("--ranks = " + std::to_string(world_size) +
                            ": point-to-point needs at least 2 ranks");
  }
  std::vector<CommSample> out;
  const int rank = comm.rank();
  if (rank > 1) return out;
  const int peer = 1 - rank;
  std::vector<std::byte> buffer(static_cast<size_t>(options.sizes_bytes.back()));
  std::vector<double> times;
  SteadyTimer timer;
  for (size_t i = 0; i < options.sizes_bytes.size(); ++i) {
    const auto bytes = static_cast<size_t>(options.sizes_bytes[i]);
    std::span<std::byte> data(buffer.data(), bytes);
    times.clear();
    for (int rep = 0; rep < options.warmup + options.repetitions; ++rep) {
      if (rank == 0) {
        timer.start();
        GP_RETURN_IF_ERROR(comm.send(peer, p2p_tag(i, rep, 0), data));
        GP_RETURN_IF_ERROR(comm.recv(peer, p2p_tag(i, rep, 1), data));
        const double round_trip_us = timer.stop_us();
        if (rep >= options.warmup) times.push_back(round_trip_us / 2);
      } else {
        GP_RETURN_IF_ERROR(comm.recv(peer, p2p_tag(i, rep, 0), data));
        GP_RETURN_IF_ERROR(comm.send(peer, p2p_tag(i, rep, 1), data));
      }
    }
    if (rank == 0) {
      out.push_back(make_sample(options.sizes_bytes[i], times, 1.0));
      if (on_size) on_size(out.back());
    }
  }
  return out;
}

Result<std::vector<CommSample>> sweep_allreduce(
    exec::Communicator& comm, int world_size, const CommSweepOptions& options,
    const std::function<void(const CommSample&)>& on_size) {
  GP_RETURN_IF_ERROR(validate_sweep(options));
  if (world_size < 2) {
    return invalid_argument("--ranks = " + std::to_string(world_size) +
                            ": all-reduce needs at least 2 ranks");
  }
  std::vector<int> group(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) group[static_cast<size_t>(r)] = r;
  std::vector<float> buffer(static_cast<size_t>(options.sizes_bytes.back() / 4), 1.0f);
  const double bus_factor = 2.0 * (world_size - 1) / world_size;
  std::vector<CommSample> out;
  std::vector<double> times;
  SteadyTimer timer;
  for (int64_t bytes : options.sizes_bytes) {
    std::span<float> data(buffer.data(), static_cast<size_t>(bytes / 4));
    times.clear();
    for (int rep = 0; rep < options.warmup + options.repetitions; ++rep) {
      timer.start();
      GP_RETURN_IF_ERROR(comm.allreduce_sum(group, data));
      const double t = timer.stop_us();
      if (rep >= options.warmup) times.push_back(t);
    }
    if (comm.rank() == 0) {
      out.push_back(make_sample(bytes, times, bus_factor));
      if (on_size) on_size(out.back());
    }
  }
  return out;
}

}  // namespace gp::profile
