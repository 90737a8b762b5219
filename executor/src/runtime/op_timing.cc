#include "gp/exec/op_timing.h"

#include <spdlog/fmt/fmt.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>

namespace gp::exec {

double sample_quantile(std::span<float> samples, double q) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const double pos = q * static_cast<double>(samples.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, samples.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return samples[lo] + (static_cast<double>(samples[hi]) - samples[lo]) * frac;
}

int TimingWindow::copy(std::span<float> out) const {
  const int n = std::min(count_, static_cast<int>(out.size()));
  // Oldest first: when full, the oldest sample sits where the next one goes.
  const int first = count_ < kCapacity ? 0 : next_;
  for (int i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)] = samples_[static_cast<size_t>((first + i) % kCapacity)];
  }
  return n;
}

double TimingWindow::quantile(double q) const {
  std::array<float, kCapacity> sorted = samples_;
  return sample_quantile(std::span<float>(sorted.data(), static_cast<size_t>(count_)), q);
}

Status check_slowdown(double factor) {
  if (std::isfinite(factor) && factor >= 1.0) return ok_status();
  return invalid_argument(
      fmt::format("--slowdown = {}: must be a finite number >= 1 (1: full speed)", factor));
}

Status lower_timer_slack() {
  if (prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL) != 0) {
    return internal_error(std::string("prctl(PR_SET_TIMERSLACK): ") + std::strerror(errno));
  }
  return ok_status();
}

OpClock::OpClock(int ops, double slowdown)
    : slowdown_(slowdown),
      forward_(static_cast<size_t>(std::max(ops, 0))),
      backward_(static_cast<size_t>(std::max(ops, 0))) {}

double OpClock::finish(Clock::time_point start) {
  const double computed_us =
      std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  if (slowdown_ == 1.0) return computed_us;
  owed_us_ += (slowdown_ - 1.0) * computed_us;
  if (owed_us_ >= kBatchSleepUs) flush();
  return slowdown_ * computed_us;
}

void OpClock::flush() {
  if (owed_us_ <= 0) return;
  const auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(owed_us_));
  owed_us_ -= std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

}  // namespace gp::exec
