// How far this process's steady clock is from the coordinator's, estimated NTP-style from the
// heartbeats' round trips, so that rank 0 can pair a send stamped on one host with its receive
// stamped on another (measured_profile.h).
#pragma once

#include <array>
#include <mutex>

namespace gp::exec::daemon {

struct ClockEstimate {
  double offset_us = 0;        // this clock + offset = the coordinator's
  double uncertainty_us = -1;  // half the round trip it came from; < 0: no estimate yet
};

// One round trip gives offset = server - (sent + received) / 2, off by at most half the round
// trip. Of the recent round trips the shortest wins: delays in queues and on the wire only ever
// lengthen one, and widen its bound. Thread-safe (the heartbeat adds, the compute thread reads).
class ClockOffset {
 public:
  static constexpr int kRecent = 16;
  void add(double sent_us, double server_us, double received_us);
  ClockEstimate estimate() const;

 private:
  mutable std::mutex mu_;
  std::array<ClockEstimate, kRecent> recent_{};
  int next_ = 0;
};

}  // namespace gp::exec::daemon
