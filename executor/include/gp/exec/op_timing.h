// Measured costs of a running rank and the --slowdown test aid. An OpClock, made once before the
// step loop, times each op's forward and backward of a stage (steady clock) into fixed windows of
// recent samples, and stretches the rank's compute by a factor by sleeping (factor - 1) x each
// op's time (and the optimizer step's), batched into sleeps of at least 50 us: sleeping costs no
// CPU, like a slower device. Nothing here allocates or logs after construction, so the step loop
// may call it.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "gp/common/status.h"

namespace gp::exec {

// The most recent samples of one quantity (microseconds), at most kCapacity; older ones are
// overwritten. Summaries sort a copy on the stack: no allocation.
class TimingWindow {
 public:
  static constexpr int kCapacity = 16;

  void add(float us) {
    samples_[static_cast<size_t>(next_)] = us;
    next_ = (next_ + 1) % kCapacity;
    if (count_ < kCapacity) ++count_;
  }
  int size() const { return count_; }
  // The samples held, oldest first.
  int copy(std::span<float> out) const;
  // Median and the 10th/90th percentiles, interpolating between order statistics (as
  // graphpipe-profile summarises its repetitions); 0 when empty.
  double median() const { return quantile(0.5); }
  double spread() const { return quantile(0.9) - quantile(0.1); }
  double quantile(double q) const;

 private:
  std::array<float, kCapacity> samples_{};
  int next_ = 0;
  int count_ = 0;
};

// The q-quantile of `samples` (any order), interpolating between order statistics; 0 when empty.
// Sorts `samples` in place.
double sample_quantile(std::span<float> samples, double q);

// --slowdown FACTOR: a number >= 1 (and finite); InvalidArgument naming the flag and value.
Status check_slowdown(double factor);

// Lowers this thread's timer slack to 1 ns (Linux prctl), so that the short sleeps of a
// slowdown end when asked rather than up to 50 us later. Per thread: call it on the thread that
// runs the iterations.
Status lower_timer_slack();

class OpClock {
 public:
  using Clock = std::chrono::steady_clock;

  // Windows for `ops` ops (the stage's, in its execution order); `slowdown` >= 1.
  OpClock(int ops, double slowdown);

  double slowdown() const { return slowdown_; }
  // Whether the ops this iteration runs are recorded (a measured iteration).
  void set_recording(bool on) { recording_ = on; }
  bool recording() const { return recording_; }
  // Whether ops need timing at all: slowed down or recording. A device with queued work
  // synchronizes after each op only then.
  bool active() const { return recording_ || slowdown_ != 1.0; }

  // After a compute interval that started at `start`: owes (slowdown - 1) x its length in
  // sleep and returns the interval as the slowed device takes it, slowdown x its length, in
  // microseconds. The sleep is real but batched: it is slept once kBatchSleepUs are owed (a
  // sleep costs a system call, far more than a small op) and at flush(); a sleep that overshoots
  // is paid back by later ones, so the time slept is the time owed.
  double finish(Clock::time_point start);
  // Sleeps what is owed; the stage runner calls it before its work reaches other ranks (the end
  // of a forward, a backward and the optimizer step).
  void flush();
  static constexpr double kBatchSleepUs = 50;

  void record(int op, bool backward, double us) {
    if (!recording_) return;
    (backward ? backward_ : forward_)[static_cast<size_t>(op)].add(static_cast<float>(us));
  }

  int ops() const { return static_cast<int>(forward_.size()); }
  const TimingWindow& forward(int op) const { return forward_[static_cast<size_t>(op)]; }
  const TimingWindow& backward(int op) const { return backward_[static_cast<size_t>(op)]; }

 private:
  double slowdown_ = 1.0;
  bool recording_ = false;
  double owed_us_ = 0;  // sleep still due (negative: overslept, credit)
  std::vector<TimingWindow> forward_, backward_;
};

}  // namespace gp::exec
