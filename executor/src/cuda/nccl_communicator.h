// NcclCommunicator: the NCCL data plane of one rank (see gp/exec/nccl.h for the contract).
//
// Each communicator of the rank has its own stream. A transfer waits (on the GPU) for the compute
// stream's work queued before it, and compute queued after a receive or an all-reduce waits for
// it; the host never blocks on a transfer except in wait_all(). Each operation records an event
// from a per-communicator ring, which the watchdog polls: no progress within the timeout, an
// asynchronous NCCL error or abort() aborts every communicator, whose kernels then return, so
// nothing queued behind them (compute included) stays blocked.
//
// Every NCCL call is made under one mutex, except the aborts: the watchdog takes the handles out
// under it and aborts them all at once outside it, so no other call can meet an aborted handle.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cuda/nccl_entry.h"

namespace gp::exec::cuda {

class CudaContext;

class NcclCommunicator final : public Communicator {
 public:
  static Result<std::unique_ptr<Communicator>> create(const NcclOptions& options);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  Status send(int peer, uint64_t tag, std::span<const std::byte> data) override;
  Status recv(int peer, uint64_t tag, std::span<std::byte> data) override;
  Status allreduce_sum(std::span<const int> group, std::span<float> data) override;
  void abort(const std::string& reason) override;
  bool device_memory() const override { return true; }
  Status wait_all() override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Comm {
    std::string name;     // "channel 1->2"
    std::string pending;  // what a stall means, for the timeout's message
    std::vector<int> ranks;
    int rank_in_comm = 0;
    std::string unique_id;
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    enum Role { kSender, kReceiver, kReplicaGroup } role = kSender;
    std::vector<cudaEvent_t> done;  // ring of completion events, one per operation in flight
    // Receives: recorded on the compute stream where compute needs the message; all-reduces: on
    // the communicator's stream once compute has produced the gradients. The stall clock of the
    // oldest operation starts when its event completes (for sends: when wait_all begins), so a
    // transfer posted early is not counted as stalled while its peer is busy as planned.
    std::vector<cudaEvent_t> started;
    int64_t issued = 0;                 // operations queued, ever
    int64_t completed = 0;              // of which the watchdog has seen complete
    bool timing = false;                // the oldest operation's stall clock runs ...
    Clock::time_point waiting_since{};  // ... since then
  };

  NcclCommunicator() = default;
  Status connect();
  // Queues `op` (an NCCL call on c's communicator and stream) after the compute stream's work,
  // and makes the compute stream wait for it when `compute_waits`.
  // after_compute: the transfer starts after the compute stream's queued work.
  template <typename Op>
  Status enqueue(Comm& c, const char* what, bool after_compute, bool compute_waits, Op op);
  // Waits (lock held) until every communicator is connected (and, with `transfers`, its first
  // transfer, event done[0], is complete), failing at `deadline`.
  void poll_connecting_locked(const std::string& where, const char* phase,
                              Clock::time_point deadline, bool transfers);
  std::vector<ncclComm_t> take_handles_locked();
  void abort_all(const std::vector<ncclComm_t>& handles);
  // Waits (lock held) until a call returning ncclInProgress has been taken by NCCL.
  ncclResult_t settle_locked(Comm& c);
  // Advances the completion counters; fails on a stall, a CUDA error or an NCCL error.
  void poll_locked();
  // Records the first failure; the watchdog then aborts every communicator.
  void fail_locked(Status why);
  void watch();
  std::string nccl_error(const char* what, ncclResult_t r) const;

  const CudaContext* ctx_ = nullptr;
  int rank_ = 0;
  std::chrono::milliseconds timeout_{};
  std::function<std::string()> abort_reason_;
  std::vector<Comm> comms_;
  std::vector<int> send_comm_, recv_comm_;  // by peer rank: index into comms_, or -1
  cudaEvent_t ready_ = nullptr;             // the compute stream's progress, before a transfer
  std::mutex mu_;
  std::condition_variable cv_;
  Status failed_;
  bool draining_ = false;  // in wait_all: sends not yet taken are waiting for their peers
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace gp::exec::cuda
