// A data plane that takes device memory, as NCCL does (Communicator::device_memory()), built on
// the in-process LoopbackHub: each call copies between the device and the host around the hub's
// message. It lets the RankRunner's device-memory path (messages packed and unpacked on the
// device, gradients accumulated there, the all-reduce on device memory, wait_all at iteration
// end) run against StagingDevice, whose memory the host cannot touch.
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <vector>

#include "gp/exec/communicator.h"
#include "gp/exec/device.h"

namespace gp::testing {

class DeviceLoopback final : public exec::Communicator {
 public:
  DeviceLoopback(std::unique_ptr<exec::Communicator> host, const exec::Device& device)
      : host_(std::move(host)), device_(device) {}

  int rank() const override { return host_->rank(); }
  bool device_memory() const override { return true; }

  Status send(int peer, uint64_t tag, std::span<const std::byte> data) override {
    std::vector<std::byte> message(data.size());
    GP_RETURN_IF_ERROR(device_.copy_to_host(message.data(), data.data(), data.size()));
    return host_->send(peer, tag, message);
  }
  Status recv(int peer, uint64_t tag, std::span<std::byte> data) override {
    std::vector<std::byte> message(data.size());
    GP_RETURN_IF_ERROR(host_->recv(peer, tag, message));
    return device_.copy_from_host(data.data(), message.data(), data.size());
  }
  Status allreduce_sum(std::span<const int> group, std::span<float> data) override {
    ++allreduces_;
    std::vector<float> sum(data.size());
    GP_RETURN_IF_ERROR(device_.copy_to_host(sum.data(), data.data(), data.size_bytes()));
    GP_RETURN_IF_ERROR(host_->allreduce_sum(group, sum));
    return device_.copy_from_host(data.data(), sum.data(), data.size_bytes());
  }
  void abort(const std::string& reason) override { host_->abort(reason); }
  Status wait_all() override {
    ++waits_;
    return fail_wait_ ? Status(StatusCode::kDeadlineExceeded, "injected wait_all failure")
                      : ok_status();
  }

  int waits() const { return waits_; }
  int allreduces() const { return allreduces_; }
  void fail_next_wait() { fail_wait_ = true; }

 private:
  std::unique_ptr<exec::Communicator> host_;
  const exec::Device& device_;
  std::atomic<int> waits_{0}, allreduces_{0};
  bool fail_wait_ = false;
};

}  // namespace gp::testing
