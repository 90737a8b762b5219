// Test fakes: a cost model with fixed per-op times and an idealised cluster (free transfers,
// free optimizer), so simulated schedules can be compared with closed forms.
#pragma once

#include <string>

#include "gp/cost/cost_model.h"
#include "graphpipe/v1/cluster.pb.h"

namespace gp::testing {

// Every non-input op takes forward_us / backward_us, whatever the micro-batch.
class FakeCostModel final : public cost::CostModel {
 public:
  FakeCostModel(double forward_us, double backward_us) : fwd_(forward_us), bwd_(backward_us) {}
  cost::OpTime op_time(const model::OpNode& op, int64_t) const override {
    if (op.info->is_input) return {};
    return {fwd_, bwd_};
  }
  std::string_view name() const override { return "fake"; }

 private:
  double fwd_, bwd_;
};

// One node of `devices` devices; transfers and the optimizer are (practically) free unless the
// link numbers are changed by the caller.
inline graphpipe::v1::Cluster ideal_cluster(int devices, int nodes = 1) {
  graphpipe::v1::Cluster c;
  c.set_name("ideal");
  c.set_num_nodes(nodes);
  c.set_devices_per_node(devices);
  auto* d = c.mutable_device();
  d->set_name("ideal-device");
  d->set_type(graphpipe::v1::DEVICE_TYPE_CPU);
  d->set_peak_fp32_flops(1e12);
  d->set_peak_bf16_flops(1e12);
  d->set_memory_bandwidth_bytes_per_s(1e24);
  d->set_memory_capacity_bytes(int64_t{1} << 40);
  d->set_kernel_launch_overhead_us(0);
  for (auto* link : {c.mutable_intra_node(), c.mutable_inter_node()}) {
    link->set_bandwidth_bytes_per_s(1e24);
    link->set_latency_us(0);
  }
  return c;
}

}  // namespace gp::testing
