#include "gp/profile/optimizer_profiler.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "gp/cost/memory_model.h"
#include "gp/exec/optimizer.h"
#include "gp/profile_db/comm_fit.h"
#include "gp/profile_db/profile_db.h"

namespace gp::profile {
namespace {

namespace pb = graphpipe::v1;

// Elements per tensor the sweep accepts: up to 2^28 (1 GiB of fp32 weights).
constexpr int64_t kMaxElements = int64_t{1} << 28;
// Updates of fewer elements are batched up to this many elements per timed call.
constexpr int64_t kBatchElements = int64_t{1} << 18;

Status check_options(const OptimizerProfileOptions& o) {
  std::set<int64_t> distinct;
  for (int64_t n : o.sizes) {
    if (n <= 0 || n > kMaxElements) {
      return invalid_argument("optimizer sizes: " + std::to_string(n) +
                              " elements, must be in [1, 2^28]");
    }
    distinct.insert(n);
  }
  if (distinct.size() < 2) {
    return invalid_argument("optimizer sizes: " + std::to_string(distinct.size()) +
                            " distinct size(s), a fit needs at least 2");
  }
  for (auto k : o.kinds) {
    if (k == pb::OPTIMIZER_KIND_UNSPECIFIED || !pb::OptimizerKind_IsValid(k)) {
      return invalid_argument("optimizer kinds: " + std::to_string(k) +
                              " is not SGD, momentum or Adam");
    }
  }
  return ok_status();
}

// Weights and gradients in the ranges training sees, state zero: finite updates throughout.
Status fill(const exec::Device& device, const exec::DeviceBuffer& weights,
            const exec::DeviceBuffer& grads, const exec::DeviceBuffer& state) {
  const size_t n = weights.bytes() / sizeof(float);
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i)
    host[i] = 0.02f * static_cast<float>(static_cast<int>(i % 97) - 48);
  GP_RETURN_IF_ERROR(device.copy_from_host(weights.data(), host.data(), weights.bytes()));
  for (size_t i = 0; i < n; ++i) host[i] = 1e-3f * static_cast<float>(static_cast<int>(i % 13) - 6);
  GP_RETURN_IF_ERROR(device.copy_from_host(grads.data(), host.data(), grads.bytes()));
  GP_RETURN_IF_ERROR(device.fill_zero(state.data(), state.bytes()));
  return device.synchronize();
}

Status check_finite(const exec::Device& device, const exec::DeviceBuffer& weights,
                    const std::string& what) {
  std::vector<float> host(weights.bytes() / sizeof(float));
  GP_RETURN_IF_ERROR(device.copy_to_host(host.data(), weights.data(), weights.bytes()));
  const auto bad =
      std::find_if(host.begin(), host.end(), [](float v) { return !std::isfinite(v); });
  if (bad == host.end()) return ok_status();
  return internal_error(what + ": weight " + std::to_string(bad - host.begin()) +
                        " is not finite after the timed updates");
}

}  // namespace

Result<std::vector<pb::OptimizerFit>> profile_optimizers(const exec::Device& device,
                                                         const OptimizerProfileOptions& options) {
  GP_RETURN_IF_ERROR(check_options(options));
  const int64_t largest = *std::max_element(options.sizes.begin(), options.sizes.end());
  const size_t bytes = static_cast<size_t>(largest) * sizeof(float);
  GP_ASSIGN_OR_RETURN(auto weights, exec::DeviceBuffer::create(device, bytes));
  GP_ASSIGN_OR_RETURN(auto grads, exec::DeviceBuffer::create(device, bytes));
  GP_ASSIGN_OR_RETURN(auto state, exec::DeviceBuffer::create(device, 2 * bytes));
  SteadyTimer steady;
  Timer& timer = options.timer != nullptr ? *options.timer : steady;

  std::vector<pb::OptimizerFit> fits;
  for (const auto kind : options.kinds) {
    const std::string what =
        std::string("optimizer ") + optimizer_name(kind) + " on " + std::string(device.name());
    pb::TrainingConfig config;
    config.set_optimizer(kind);
    config.set_learning_rate(1e-3);
    if (kind == pb::OPTIMIZER_KIND_MOMENTUM) config.set_momentum(0.9);
    GP_ASSIGN_OR_RETURN(const exec::Optimizer optimizer, exec::Optimizer::create(config));
    GP_RETURN_IF_ERROR(fill(device, weights, grads, state).with_context(what));
    pb::OptimizerFit fit;
    fit.set_device_kind(options.device_kind);
    fit.set_optimizer(kind);
    for (const int64_t n : options.sizes) {
      // Small tensors are updated several times per timed call, with one synchronize at the end,
      // as a stage's step queues its updates back to back: a wait per update would count the
      // device's synchronisation latency once per tensor.
      const int batch = static_cast<int>(std::clamp<int64_t>(kBatchElements / n, 1, 64));
      int64_t step = 0;
      Status failed;
      const Stats stats = measure(timer, options.measure, [&] {
        for (int k = 0; k < batch; ++k) {
          device.apply_optimizer(optimizer, weights.f(), grads.f(), state.f(), n, ++step);
        }
        if (Status st = device.synchronize(); !st.ok() && failed.ok()) failed = st;
      });
      GP_RETURN_IF_ERROR(failed.with_context(what + ", " + std::to_string(n) + " elements"));
      cost::MemoryBreakdown touched;
      touched.weight_bytes = n * 4;
      touched.gradient_bytes = n * 4;
      touched.optimizer_bytes = n * 4 * optimizer.state_floats();
      auto* point = fit.add_points();
      point->set_bytes(static_cast<int64_t>(cost::optimizer_step_bytes(touched)));
      point->set_time_us(stats.median_us / batch);
    }
    GP_RETURN_IF_ERROR(check_finite(device, weights, what));
    auto ab = fit_alpha_beta(fit.points());
    if (!ab.ok()) return ab.status().with_context(what);
    fit.set_alpha_us(ab->alpha_us);
    fit.set_beta_bytes_per_s(ab->beta_bytes_per_s);
    *fit.mutable_provenance() = options.provenance;
    fits.push_back(std::move(fit));
  }
  return fits;
}

}  // namespace gp::profile
