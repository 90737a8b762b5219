#include "clock_offset.h"

#include <algorithm>

namespace gp::exec::daemon {

void ClockOffset::add(double sent_us, double server_us, double received_us) {
  if (!(received_us >= sent_us) || !(server_us > 0)) return;  // a clock that went backwards
  std::lock_guard lock(mu_);
  recent_[static_cast<size_t>(next_)] = {server_us - (sent_us + received_us) / 2,
                                         (received_us - sent_us) / 2, received_us};
  next_ = (next_ + 1) % kRecent;
}

ClockEstimate ClockOffset::estimate(double now_us) const {
  std::lock_guard lock(mu_);
  ClockEstimate best;
  for (ClockEstimate e : recent_) {
    if (e.uncertainty_us < 0) continue;
    e.uncertainty_us += std::max(0.0, now_us - e.at_us) * kDriftPerUs;
    if (best.uncertainty_us < 0 || e.uncertainty_us < best.uncertainty_us) best = e;
  }
  return best;
}

}  // namespace gp::exec::daemon
