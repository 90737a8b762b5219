// Per-device compute cost models, looked up by device kind name.
#include "gp/cost/device_costs.h"

#include <utility>

#include "gp/common/logging.h"

namespace gp::cost {

DeviceCostModels::DeviceCostModels(std::shared_ptr<const CostModel> all)
    : reference_(std::move(all)) {
  GP_CHECK(reference_ != nullptr, "DeviceCostModels needs a cost model");
}

Result<DeviceCostModels> DeviceCostModels::create(
    const Cluster& cluster, std::map<std::string, std::shared_ptr<const CostModel>> by_kind_name) {
  GP_RETURN_IF_ERROR(validate_cluster(cluster));
  const std::vector<std::string> kinds = device_kind_names(cluster);
  DeviceCostModels out;
  for (auto& [name, model] : by_kind_name) {
    if (model != nullptr) out.by_kind_.emplace(name, std::move(model));
  }
  for (const std::string& kind : kinds) {
    if (!out.by_kind_.count(kind)) {
      return invalid_argument("device cost models: no model for device kind '" + kind +
                              "' of cluster '" + cluster.name() + "'");
    }
  }
  out.reference_ = out.by_kind_.find(kinds.front())->second;  // the fastest kind's
  out.cluster_ = cluster;
  return out;
}

std::shared_ptr<const CostModel> DeviceCostModels::shared_for_kind(std::string_view name) const {
  if (const auto it = by_kind_.find(name); it != by_kind_.end()) return it->second;
  return reference_;
}

const CostModel& DeviceCostModels::for_kind(std::string_view name) const {
  if (const auto it = by_kind_.find(name); it != by_kind_.end()) return *it->second;
  return *reference_;
}

const CostModel& DeviceCostModels::for_rank(const Cluster& cluster, int rank) const {
  if (uniform()) return *reference_;
  return for_kind(device_of_rank(cluster, rank).name());
}

const CostModel& DeviceCostModels::for_rank(int rank) const { return for_rank(cluster_, rank); }

Status DeviceCostModels::covers(const Cluster& cluster) const {
  if (uniform()) return ok_status();
  for (const std::string& kind : device_kind_names(cluster)) {
    if (!by_kind_.count(kind)) {
      return invalid_argument("cluster '" + cluster.name() + "': device kind '" + kind +
                              "' has no cost model (models for: " +
                              [&] {
                                std::string names;
                                for (const auto& [n, m] : by_kind_) {
                                  names += (names.empty() ? "" : ", ") + n;
                                }
                                return names;
                              }() +
                              ")");
    }
  }
  return ok_status();
}

}  // namespace gp::cost
