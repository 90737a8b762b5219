// How far this process's steady clock is from the coordinator's, estimated NTP-style from the
// heartbeats' round trips, so that rank 0 can pair a send stamped on one host with its receive
// stamped on another (measured_profile.h).
#pragma once

#include <array>
#include <mutex>

namespace gp::exec::daemon {

struct ClockEstimate {
  double offset_us = 0;        // this clock + offset = the coordinator's
  double uncertainty_us = -1;  // half its round trip, plus drift since; < 0: no estimate yet
  double at_us = 0;            // when it was made, on this clock
};

// One round trip gives offset = server - (sent + received) / 2, off by at most half the round
// trip. Of the recent round trips the one with the tightest bound wins: delays in queues and on
// the wire only ever lengthen one, and widen its bound; and as it ages, the two clocks may drift
// apart by up to kDriftPerUs of the time since (100 ppm: an undisciplined quartz clock), which
// the bound includes. Thread-safe (the heartbeat adds, the compute thread reads).
class ClockOffset {
 public:
  static constexpr int kRecent = 16;
  static constexpr double kDriftPerUs = 100e-6;
  void add(double sent_us, double server_us, double received_us);
  // As of `now_us` (this clock).
  ClockEstimate estimate(double now_us) const;

 private:
  mutable std::mutex mu_;
  std::array<ClockEstimate, kRecent> recent_{};
  int next_ = 0;
};

}  // namespace gp::exec::daemon
