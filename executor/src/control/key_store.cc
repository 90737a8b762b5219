#include "control/key_store.h"

#include <algorithm>
#include <thread>

namespace gp::exec {

KeyTable::KeyTable(int world_size)
    : max_value_bytes_(std::max(kMaxValueBytes, size_t{256} * std::max(world_size, 1))),
      max_keys_(std::max(kMaxKeys, size_t{8} * std::max(world_size, 1))),
      max_total_bytes_(std::max(kMaxTotalBytes,
                                size_t{512} * std::max(world_size, 1) * std::max(world_size, 1))) {}

Status KeyTable::set(const std::string& key, std::string value) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return invalid_argument("key of " + std::to_string(key.size()) + " bytes, must be 1 to " +
                            std::to_string(kMaxKeyBytes));
  }
  if (value.size() > max_value_bytes_) {
    return Status(StatusCode::kResourceExhausted,
                  "value of key '" + key + "' has " + std::to_string(value.size()) +
                      " bytes, more than " + std::to_string(max_value_bytes_));
  }
  std::lock_guard lock(mu_);
  auto it = values_.find(key);
  const size_t old = it == values_.end() ? 0 : key.size() + it->second.size();
  const size_t total = total_bytes_ - old + key.size() + value.size();
  if ((it == values_.end() && values_.size() >= max_keys_) || total > max_total_bytes_) {
    return Status(StatusCode::kResourceExhausted, "the rendezvous store is full (" +
                                                      std::to_string(values_.size()) + " keys, " +
                                                      std::to_string(total_bytes_) + " bytes)");
  }
  total_bytes_ = total;
  values_[key] = std::move(value);
  return ok_status();
}

std::optional<std::string> KeyTable::get(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

Status CoordinatorStore::set(const std::string& key, const std::string& value) {
  return client_.store_set(rank_, key, value);
}

Result<std::string> CoordinatorStore::get(const std::string& key,
                                          std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    GP_ASSIGN_OR_RETURN(std::optional<std::string> value, client_.store_get(rank_, key));
    if (value) return std::move(*value);
    if (Clock::now() >= deadline) {
      return Status(StatusCode::kDeadlineExceeded,
                    "rendezvous key '" + key + "' was not set at the coordinator " +
                        client_.address() + " within " + std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace gp::exec
