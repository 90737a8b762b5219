// The rank's heartbeat to the coordinator (a thread): reports its live position, aborts the
// data plane when the job is aborted or the coordinator is lost, passes a stop signal on.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "clock_offset.h"
#include "control/control_client.h"
#include "gp/exec/communicator.h"
#include "gp/exec/rank_runner.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec::daemon {

// Sends heartbeats with the rank's live position; aborts the data plane when the coordinator
// says the job is over or cannot be reached for longer than the timeout; passes a stop signal on.
class Heartbeat {
 public:
  // `coordinator` names it in the reason when it is lost, e.g. "the coordinator (rank 0) at
  // HOST:PORT".
  Heartbeat(ControlClient& client, const RankRunner& runner, const graphpipe::v1::Plan& plan,
            int rank, std::chrono::milliseconds period, std::chrono::milliseconds timeout,
            std::string coordinator)
      : client_(client),
        runner_(runner),
        plan_(plan),
        rank_(rank),
        period_(period),
        timeout_(timeout),
        coordinator_(std::move(coordinator)),
        thread_([this] { loop(); }) {}
  ~Heartbeat() { stop(); }

  // The data plane to abort when the job is aborted (it may be set up after heartbeats start:
  // NCCL's set-up can take longer than the coordinator waits for a silent rank).
  void attach(Communicator& comm) {
    std::lock_guard<std::mutex> lock(mu_);
    comm_ = &comm;
    if (!reason_.empty()) comm.abort(reason_);
  }
  void set_iteration(int64_t it) { iteration_.store(it); }
  void set_samples_per_s(double v) { samples_per_s_.store(v); }
  // The coordinator said a stop was requested (by any rank's signal or the operator).
  bool stop_requested() const { return stop_requested_.load(); }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  std::string abort_reason() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }
  // This rank's steady clock against the coordinator's, from the heartbeats' round trips.
  ClockEstimate clock_offset(double now_us) const { return clock_offset_.estimate(now_us); }

 private:
  void loop();

  ControlClient& client_;
  Communicator* comm_ = nullptr;
  const RankRunner& runner_;
  const graphpipe::v1::Plan& plan_;
  int rank_;
  std::chrono::milliseconds period_, timeout_;
  std::string coordinator_;
  std::atomic<int64_t> iteration_{0};
  std::atomic<double> samples_per_s_{0};
  std::atomic<bool> stop_requested_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::string reason_;
  ClockOffset clock_offset_;
  std::thread thread_;  // last: it starts once every member is there
};

}  // namespace gp::exec::daemon
