#include <cstring>
#include <tuple>

#include "gp/exec/communicator.h"

namespace gp::exec {

class LoopbackCommunicator final : public Communicator {
 public:
  LoopbackCommunicator(LoopbackHub* hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }

  Status send(int peer, uint64_t tag, std::span<const std::byte> data) override {
    std::unique_lock<std::mutex> lock(hub_->mu_);
    const LoopbackHub::Key key{rank_, peer, tag};
    // A rank that receives nothing (a source stage whose outputs carry no gradient) can run
    // iterations ahead and reach a tag again before the peer took its last message: it waits
    // for it to be taken, as a rendezvous transport's send does, so messages stay in order.
    const bool free = hub_->cv_.wait_for(lock, hub_->timeout_, [&] {
      return !hub_->aborted_.empty() || hub_->mailbox_.count(key) == 0;
    });
    if (!hub_->aborted_.empty()) return Status(StatusCode::kAborted, hub_->aborted_);
    if (!free) {
      return Status(StatusCode::kDeadlineExceeded,
                    "rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                        " did not take the previous message with tag " + std::to_string(tag) +
                        " within " + std::to_string(hub_->timeout_.count()) + " ms");
    }
    hub_->mailbox_.emplace(key, std::vector<std::byte>(data.begin(), data.end()));
    hub_->cv_.notify_all();
    return ok_status();
  }

  Status recv(int peer, uint64_t tag, std::span<std::byte> data) override {
    std::unique_lock<std::mutex> lock(hub_->mu_);
    const LoopbackHub::Key key{peer, rank_, tag};
    const bool ready = hub_->cv_.wait_for(lock, hub_->timeout_, [&] {
      return !hub_->aborted_.empty() || hub_->mailbox_.count(key) > 0;
    });
    if (!hub_->aborted_.empty()) return Status(StatusCode::kAborted, hub_->aborted_);
    if (!ready) {
      return Status(StatusCode::kDeadlineExceeded,
                    "rank " + std::to_string(rank_) + ": no message from rank " +
                        std::to_string(peer) + " (tag " + std::to_string(tag) + ") within " +
                        std::to_string(hub_->timeout_.count()) + " ms");
    }
    auto it = hub_->mailbox_.find(key);
    if (it->second.size() != data.size()) {
      return internal_error("rank " + std::to_string(rank_) + ": message from rank " +
                            std::to_string(peer) + " has " + std::to_string(it->second.size()) +
                            " bytes, expected " + std::to_string(data.size()));
    }
    std::memcpy(data.data(), it->second.data(), data.size());
    hub_->mailbox_.erase(it);
    hub_->cv_.notify_all();  // (a sender may wait for this tag to be free)
    return ok_status();
  }

  Status allreduce_sum(std::span<const int> group, std::span<float> data) override {
    std::unique_lock<std::mutex> lock(hub_->mu_);
    const std::vector<int> key(group.begin(), group.end());
    auto& red = hub_->reductions_[key];
    const int n = static_cast<int>(group.size());
    // Wait until the previous reduction of this group has been collected by everyone.
    if (!hub_->cv_.wait_for(lock, hub_->timeout_, [&] {
          return !hub_->aborted_.empty() || red.collected == 0 || red.collected == n;
        })) {
      return Status(StatusCode::kDeadlineExceeded, "all-reduce: previous round never finished");
    }
    if (!hub_->aborted_.empty()) return Status(StatusCode::kAborted, hub_->aborted_);
    if (red.collected == n) red = LoopbackHub::Reduction{{}, 0, 0, red.generation + 1};
    if (red.sum.empty()) red.sum.assign(data.size(), 0.0);
    if (red.sum.size() != data.size()) return internal_error("all-reduce: mismatched sizes");
    // Sum in rank order within the group for determinism: accumulate in double.
    for (size_t i = 0; i < data.size(); ++i) red.sum[i] += data[i];
    const uint64_t generation = red.generation;
    ++red.arrived;
    hub_->cv_.notify_all();
    const bool done = hub_->cv_.wait_for(lock, hub_->timeout_, [&] {
      return !hub_->aborted_.empty() || (red.generation == generation && red.arrived == n);
    });
    if (!hub_->aborted_.empty()) return Status(StatusCode::kAborted, hub_->aborted_);
    if (!done) {
      return Status(StatusCode::kDeadlineExceeded,
                    "rank " + std::to_string(rank_) + ": all-reduce over " + std::to_string(n) +
                        " ranks timed out (" + std::to_string(red.arrived) + " arrived)");
    }
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(red.sum[i]);
    ++red.collected;
    hub_->cv_.notify_all();
    return ok_status();
  }

  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(hub_->mu_);
    if (hub_->aborted_.empty()) hub_->aborted_ = reason;
    hub_->cv_.notify_all();
  }

 private:
  LoopbackHub* hub_;
  int rank_;
};

LoopbackHub::LoopbackHub(int world_size, std::chrono::milliseconds timeout)
    : world_size_(world_size), timeout_(timeout) {}

std::unique_ptr<Communicator> LoopbackHub::communicator(int rank) {
  return std::make_unique<LoopbackCommunicator>(this, rank);
}

}  // namespace gp::exec
