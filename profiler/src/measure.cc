#include "gp/profile/measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace gp::profile {
namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The q-quantile of sorted values, interpolating between neighbours.
double quantile(std::span<const double> sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

}  // namespace

void SteadyTimer::start() { start_us_ = now_us(); }
double SteadyTimer::stop_us() { return now_us() - start_us_; }

Stats summarize(std::span<double> samples_us) {
  Stats s;
  if (samples_us.empty()) return s;
  std::sort(samples_us.begin(), samples_us.end());
  s.median_us = quantile(samples_us, 0.5);
  s.p10_us = quantile(samples_us, 0.1);
  s.p90_us = quantile(samples_us, 0.9);
  s.repetitions = static_cast<int>(samples_us.size());
  return s;
}

Stats measure(Timer& timer, const MeasureOptions& options, const std::function<void()>& call,
              const std::function<void()>& before) {
  for (int i = 0; i < options.warmup; ++i) call();
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(std::max(options.min_repetitions, 1)));
  double total_us = 0;
  while (static_cast<int>(samples.size()) < std::max(options.max_repetitions, 1)) {
    if (before) before();
    timer.start();
    call();
    const double t = std::max(timer.stop_us(), 0.0);
    samples.push_back(t);
    total_us += t;
    if (static_cast<int>(samples.size()) >= options.min_repetitions &&
        total_us >= options.min_total_us) {
      break;
    }
  }
  return summarize(samples);
}

}  // namespace gp::profile
