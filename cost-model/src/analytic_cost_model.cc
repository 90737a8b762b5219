// Analytic per-op cost: roofline with a work-size dependent compute efficiency and a per-kernel
// launch overhead, from datasheet peaks of a DeviceKind.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "gp/cost/cost_model.h"

namespace gp::cost {

double OptimizerStepCost::bandwidth(double bytes) const {
  if (points <= 0) return bytes_per_s;
  if (points == 1 || bytes <= point_bytes[0]) return point_bytes_per_s[0];
  for (int i = 1; i < points; ++i) {
    if (bytes <= point_bytes[i]) {
      const double f =
          std::log(bytes / point_bytes[i - 1]) / std::log(point_bytes[i] / point_bytes[i - 1]);
      return std::exp(std::log(point_bytes_per_s[i - 1]) +
                      f * std::log(point_bytes_per_s[i] / point_bytes_per_s[i - 1]));
    }
  }
  return point_bytes_per_s[points - 1];
}

OptimizerStepCost analytic_optimizer_step_cost(const graphpipe::v1::DeviceKind& device) {
  return {device.kernel_launch_overhead_us(), 0,
          std::max(device.memory_bandwidth_bytes_per_s(), 1.0)};
}
namespace {

using graphpipe::v1::Precision;

bool is_bf16(Precision p) { return p == graphpipe::v1::PRECISION_BF16_FP32_MASTER; }

// The peak FLOP/s the op's arithmetic runs at.
//  * FP32 (and UNSPECIFIED): TF32 tensor cores where the device has them (peak_tf32_flops > 0),
//    else plain fp32. Frameworks training in fp32 on Ampere and newer run their GEMMs on TF32
//    tensor cores when allowed (cuBLAS CUBLAS_TF32_TENSOR_OP_MATH; PyTorch's allow_tf32, on by
//    default in NVIDIA's containers), and GEMMs dominate the FLOPs. This is optimistic for an
//    executor that keeps strict fp32 math: a cluster file with peak_tf32_flops = 0 plans with
//    the fp32 peak instead. Element-wise FLOPs never reach either peak, but those ops are
//    memory-bound, so the roofline's memory term decides them anyway.
//  * BF16_FP32_MASTER: the bf16 tensor-core peak; devices without one (0, e.g. CPUs) fall back
//    to the fp32 peak.
double peak_for(const graphpipe::v1::DeviceKind& d, Precision p) {
  if (is_bf16(p)) return d.peak_bf16_flops() > 0 ? d.peak_bf16_flops() : d.peak_fp32_flops();
  return d.peak_tf32_flops() > 0 ? d.peak_tf32_flops() : d.peak_fp32_flops();
}

}  // namespace

// Defaults of Params (declared in the header), and why:
//  * max_efficiency = 0.75: large cuBLAS GEMMs (thousands in every dimension) sustain about
//    70-80% of the datasheet tensor-core peak; the datasheet peak assumes boost clocks that
//    power limits do not hold under sustained load.
//  * half-efficiency work = what the device does at peak in half_efficiency_us = 1 us. With
//    eff(w) = eff_max w / (w + w_half) a kernel's compute time is (w + w_half) / (peak eff_max):
//    w_half adds a fixed w_half / (peak eff_max) per kernel on top of the launch overhead, so
//    w_half must scale with the peak. A fixed 2e9 FLOPs would be 2.7 us per kernel on an H100
//    in bf16 but 170 us on a V100 in fp32 and 53 ms on a 50 GFLOP/s CPU rank. 1 us gives
//    ~1 GFLOP on an H100 in bf16 (a GEMM of about 1 GFLOP cannot fill 132 SMs with enough
//    waves to hide its prologue and tail, and reaches roughly half of what large GEMMs reach),
//    16 MFLOP on a V100 in fp32 and 50 kFLOP on a CPU rank, and a floor of 1.3 us per kernel
//    beyond the launch overhead. A profile DB replaces all of this with measurements.
//  * memory_efficiency = 0.8: streaming kernels (copy, element-wise, BabelStream-style)
//    sustain about 80-90% of the HBM datasheet bandwidth; 0.8 leaves room for the imperfect
//    access patterns of real operators.
AnalyticCostModel::AnalyticCostModel(const graphpipe::v1::DeviceKind& device,
                                     graphpipe::v1::Precision precision)
    : AnalyticCostModel(device, precision, Params{}) {}

AnalyticCostModel::AnalyticCostModel(const graphpipe::v1::DeviceKind& device,
                                     graphpipe::v1::Precision precision, Params params)
    : device_(device), peak_flops_(peak_for(device, precision)), params_(params) {
  // Programmer errors: clusters are validated when they are loaded (validate_cluster).
  GP_CHECK(peak_flops_ > 0, "device kind without a positive peak_fp32_flops");
  GP_CHECK(device_.memory_bandwidth_bytes_per_s() > 0,
           "device kind without a positive memory_bandwidth_bytes_per_s");
  GP_CHECK(params_.max_efficiency > 0 && params_.max_efficiency <= 1,
           "max_efficiency must be in (0, 1]");
  GP_CHECK(params_.half_efficiency_flops >= 0, "half_efficiency_flops must be >= 0");
  GP_CHECK(params_.half_efficiency_us >= 0, "half_efficiency_us must be >= 0");
  if (params_.half_efficiency_flops == 0) {
    params_.half_efficiency_flops = peak_flops_ * params_.half_efficiency_us * 1e-6;
  }
  GP_CHECK(params_.memory_efficiency > 0 && params_.memory_efficiency <= 1,
           "memory_efficiency must be in (0, 1]");
  // With bf16 training every float tensor is half as wide; ids and other integer tensors are
  // not, but they are a small share of the traffic, so all byte counts are halved.
  if (is_bf16(precision)) byte_scale_ = 0.5;
}

double AnalyticCostModel::efficiency(double flops) const {
  if (!(flops > 0)) return 0;
  return params_.max_efficiency * flops / (flops + params_.half_efficiency_flops);
}

double AnalyticCostModel::kernel_time_us(double flops, double bytes, int kernels) const {
  const double launch = std::max(kernels, 0) * device_.kernel_launch_overhead_us();
  const double per_kernel = flops / std::max(kernels, 1);
  const double compute = flops > 0 ? flops / (peak_flops_ * efficiency(per_kernel)) * 1e6 : 0;
  const double memory =
      bytes > 0 ? bytes / (device_.memory_bandwidth_bytes_per_s() * params_.memory_efficiency) * 1e6
                : 0;
  return launch + std::max(compute, memory);
}

OpTime AnalyticCostModel::op_time(const model::OpNode& op, int64_t samples) const {
  GP_CHECK(samples >= 1, "op_time needs at least one sample");
  if (op.info != nullptr && op.info->is_input) return {};
  const model::OpCost& c = op.cost;
  const double s = static_cast<double>(samples);
  OpTime t;
  t.forward_us = kernel_time_us(c.forward_flops * s,
                                (c.forward_bytes * s + c.forward_fixed_bytes) * byte_scale_,
                                c.forward_kernels);
  t.backward_us = kernel_time_us(c.backward_flops * s,
                                 (c.backward_bytes * s + c.backward_fixed_bytes) * byte_scale_,
                                 c.backward_kernels);
  return t;
}

}  // namespace gp::cost
