// The measurement loop: warm-up calls, then timed calls until both a minimum count and a minimum
// total time are reached (bounded by a maximum count), summarised by the median and the p10-p90
// spread. The clock is an interface so that tests drive it with a fake and accelerators plug in
// their own (CUDA events) without this header knowing about them.
#pragma once

#include <functional>
#include <span>

namespace gp::profile {

class Timer {
 public:
  virtual ~Timer() = default;
  // Marks the start of one timed call.
  virtual void start() = 0;
  // Microseconds since the matching start(), after the call's work is complete.
  virtual double stop_us() = 0;
};

// std::chrono::steady_clock; right for CPU kernels, which finish before they return.
class SteadyTimer final : public Timer {
 public:
  void start() override;
  double stop_us() override;

 private:
  double start_us_ = 0;
};

struct MeasureOptions {
  int warmup = 2;                // untimed calls first (caches, lazy allocations, clocks)
  int min_repetitions = 5;       // timed calls, at least
  int max_repetitions = 200;     // timed calls, at most
  double min_total_us = 20'000;  // keep timing until this much was measured
};

struct Stats {
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  int repetitions = 0;
  double spread_us() const { return p90_us - p10_us; }
};

// Median and the 10th/90th percentiles (linear interpolation between order statistics).
// `samples_us` is reordered. Empty input gives all zeros.
Stats summarize(std::span<double> samples_us);

// Runs `call` options.warmup times untimed, then timed until the stopping rule holds. `before`,
// when given, runs untimed before every timed call (e.g. to evict the caches, as the rest of a
// stage does between two calls of one operator during training).
Stats measure(Timer& timer, const MeasureOptions& options, const std::function<void()>& call,
              const std::function<void()>& before = nullptr);

}  // namespace gp::profile
