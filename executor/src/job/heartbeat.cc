#include "heartbeat.h"

#include <algorithm>
#include <chrono>

#include "gp/common/steady_clock.h"
#include "gp/plan/plan_util.h"
#include "stop_signals.h"

namespace gp::exec::daemon {
namespace {

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void Heartbeat::loop() {
  using Clock = std::chrono::steady_clock;
  auto last_ok = Clock::now();
  bool stop_sent = false;
  const int program = [&] {
    for (int p = 0; p < plan_.programs_size(); ++p) {
      if (plan_.programs(p).rank() == rank_) return p;
    }
    return -1;
  }();
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [&] { return stopping_; })) {
    lock.unlock();
    if (const int sig = stop_signal(); sig != 0 && !stop_sent) {
      stop_sent = client_.request_stop(rank_, sig, stop_reason(sig)).ok();
    }
    graphpipe::v1::RankStatus st;
    st.set_rank(rank_);
    st.set_state(graphpipe::v1::RANK_STATE_RUNNING);
    st.set_iteration(iteration_.load());
    st.set_samples_per_s(samples_per_s_.load());
    const int k = runner_.current_instruction();
    st.set_instruction_index(k);
    if (k >= 0 && program >= 0 && k < plan_.programs(program).instructions_size()) {
      st.set_instruction(
          plan::describe_instruction(plan_, plan_.programs(program).instructions(k)));
    }
    st.set_unix_time_ms(unix_ms());
    // Each call waits only until the coordinator counts as lost, so that a frozen one is
    // noticed within the timeout rather than the control client's default deadline.
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(last_ok + timeout_ - Clock::now());
    const double sent_us = steady_us();
    auto resp =
        client_.heartbeat(st, std::max(std::chrono::milliseconds(200), std::min(left, timeout_)));
    std::string reason;
    if (resp.ok()) {
      clock_offset_.add(sent_us, resp->coordinator_steady_us(), steady_us());
      last_ok = Clock::now();
      if (resp->abort()) reason = "job aborted: " + resp->abort_reason();
      if (resp->stop_requested()) stop_requested_.store(true);
    } else if (Clock::now() - last_ok > timeout_) {
      reason = "lost " + coordinator_ + ": " + resp.status().message();
    }
    lock.lock();
    if (!reason.empty() && reason_.empty()) {
      reason_ = reason;
      if (comm_ != nullptr) comm_->abort(reason);
    }
  }
}

}  // namespace gp::exec::daemon
