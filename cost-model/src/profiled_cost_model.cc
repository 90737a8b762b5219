// Per-op times from a ProfileDB: exact at measured micro-batch sizes, log-log interpolated
// between them, extrapolated outside, and an analytic (or any) fallback for unmeasured ops.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gp/common/logging.h"
#include "gp/cost/cost_model.h"

namespace gp::cost {
namespace {

std::string format_attr(const model::AttrValue& v) {
  char buf[64];
  switch (v.value_case()) {
    case model::AttrValue::kI:
      return std::to_string(v.i());
    case model::AttrValue::kF:
      std::snprintf(buf, sizeof(buf), "%g", v.f());
      return buf;
    case model::AttrValue::kS:
      return v.s();
    case model::AttrValue::kInts: {
      std::string out;
      for (int i = 0; i < v.ints().values_size(); ++i) {
        if (i > 0) out += ':';
        out += std::to_string(v.ints().values(i));
      }
      return out;
    }
    case model::AttrValue::VALUE_NOT_SET:
      break;
  }
  return "";
}

// Extremes of the log-log slope used to extrapolate: time never falls as the micro-batch grows
// (slope >= 0) and grows at most like b^1.5 (steeper fits outside the measured range come from
// noise, not from any operator we know).
constexpr double kMinSlope = 0.0;
constexpr double kMaxSlope = 1.5;

struct Point {
  int64_t micro_batch;
  double forward_us;
  double backward_us;
  int64_t activation_bytes;  // whole micro-batch; 0 when the profile has no memory
  int64_t workspace_bytes;
};

// t at b on the line through (b0, t0) and (b1, t1) in log-log space; `clamp` bounds the slope
// (for extrapolation). A zero time has no logarithm: then linear in b between the points.
double loglog(double b, double b0, double t0, double b1, double t1, bool clamp) {
  if (t0 > 0 && t1 > 0) {
    double slope = std::log(t1 / t0) / std::log(b1 / b0);
    if (clamp) slope = std::clamp(slope, kMinSlope, kMaxSlope);
    return t0 * std::pow(b / b0, slope);
  }
  if (!clamp) return t0 + (t1 - t0) * (b - b0) / (b1 - b0);
  return t0 * b / b0;  // extrapolating from a zero or onto one: scale the nearest point
}

// One of forward/backward at `b` from points sorted by micro-batch (at least one).
double interpolate(const std::vector<Point>& pts, int64_t samples, double Point::*field) {
  const double b = static_cast<double>(samples);
  if (pts.size() == 1) {
    return pts[0].*field * b / static_cast<double>(pts[0].micro_batch);
  }
  auto hi = std::lower_bound(pts.begin(), pts.end(), samples,
                             [](const Point& p, int64_t s) { return p.micro_batch < s; });
  if (hi != pts.end() && hi->micro_batch == samples) return (*hi).*field;
  const Point* p0;
  const Point* p1;
  bool extrapolate = false;
  if (hi == pts.begin()) {  // below the range: the two smallest, anchored at the smallest
    p0 = &pts[0], p1 = &pts[1], extrapolate = true;
  } else if (hi == pts.end()) {  // above the range: the two largest, anchored at the largest
    p0 = &pts[pts.size() - 1], p1 = &pts[pts.size() - 2], extrapolate = true;
  } else {
    p0 = &*(hi - 1), p1 = &*hi;
  }
  return loglog(b, static_cast<double>(p0->micro_batch), p0->*field,
                static_cast<double>(p1->micro_batch), p1->*field, extrapolate);
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// A profile's optimizer record as the cost model prices it: per tensor, and each measured size's
// bandwidth with the per-update latency taken off (sizes ascending; a point no slower than the
// latency alone says nothing about bandwidth).
Result<OptimizerStepCost> step_cost_of(const graphpipe::v1::OptimizerFit& f, int index) {
  if (!(f.alpha_us() >= 0 && f.beta_bytes_per_s() > 0 && std::isfinite(f.beta_bytes_per_s()))) {
    return invalid_argument(
        "profile optimizer_steps[" + std::to_string(index) + "]: alpha_us = " + num(f.alpha_us()) +
        ", beta_bytes_per_s = " + num(f.beta_bytes_per_s()) + ", must be >= 0 and > 0");
  }
  OptimizerStepCost step{0, f.alpha_us(), f.beta_bytes_per_s()};
  std::vector<std::pair<double, double>> points;
  for (const auto& p : f.points()) {
    const double streaming_us = p.time_us() - f.alpha_us();
    if (p.bytes() > 0 && streaming_us > 0) {
      points.emplace_back(static_cast<double>(p.bytes()),
                          static_cast<double>(p.bytes()) / (streaming_us * 1e-6));
    }
  }
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end(),
                           [](const auto& a, const auto& b) { return a.first == b.first; }),
               points.end());
  // The largest sizes kept: they price the states that leave the caches.
  const size_t first = points.size() > OptimizerStepCost::kMaxPoints
                           ? points.size() - OptimizerStepCost::kMaxPoints
                           : 0;
  for (size_t k = first; k < points.size(); ++k) {
    step.point_bytes[step.points] = points[k].first;
    step.point_bytes_per_s[step.points] = points[k].second;
    ++step.points;
  }
  return step;
}

// The optimizer records of `device_kind`, by OptimizerKind.
Result<std::map<int, OptimizerStepCost>> step_costs_of(const graphpipe::v1::ProfileDB& db,
                                                       std::string_view device_kind) {
  std::map<int, OptimizerStepCost> out;
  for (int i = 0; i < db.optimizer_steps_size(); ++i) {
    const auto& f = db.optimizer_steps(i);
    if (f.device_kind() != device_kind) continue;
    GP_ASSIGN_OR_RETURN(out[f.optimizer()], step_cost_of(f, i));
  }
  return out;
}

}  // namespace

std::string op_signature(const model::OpNode& op) {
  std::string sig(op.type());
  sig += '|';
  std::vector<std::pair<std::string, std::string>> attrs;
  for (const auto& [key, value] : op.proto->attrs()) attrs.emplace_back(key, format_attr(value));
  std::sort(attrs.begin(), attrs.end());
  for (size_t i = 0; i < attrs.size(); ++i) {
    if (i > 0) sig += ',';
    sig += attrs[i].first + '=' + attrs[i].second;
  }
  sig += '|';
  for (size_t i = 0; i < op.input_specs.size(); ++i) {
    if (i > 0) sig += ';';
    sig += model::shape_string(op.input_specs[i]);
  }
  return sig;
}

struct ProfiledCostModel::Impl {
  std::string device_kind;
  std::map<std::string, std::vector<Point>, std::less<>> points;  // by signature, sorted by b
  std::shared_ptr<const CostModel> fallback;
  std::map<int, OptimizerStepCost> optimizer_steps;  // by OptimizerKind, this device kind's
  mutable std::mutex mutex;
  mutable std::set<std::string, std::less<>> fallback_signatures;
};

Result<std::unique_ptr<ProfiledCostModel>> ProfiledCostModel::create(
    const graphpipe::v1::ProfileDB& db, std::string_view device_kind,
    std::shared_ptr<const CostModel> fallback) {
  if (fallback == nullptr) {
    return invalid_argument("profiled cost model: the fallback cost model is null");
  }
  auto impl = std::make_unique<Impl>();
  impl->device_kind = std::string(device_kind);
  impl->fallback = std::move(fallback);
  for (int i = 0; i < db.ops_size(); ++i) {
    const auto& m = db.ops(i);
    const std::string where = "profile ops[" + std::to_string(i) + "] ('" + m.signature() + "')";
    if (m.micro_batch() <= 0) {
      return invalid_argument(where + ": micro_batch = " + std::to_string(m.micro_batch()) +
                              ", must be > 0");
    }
    if (!(m.forward_time_us() >= 0)) {
      return invalid_argument(where + ": forward_time_us = " + num(m.forward_time_us()) +
                              ", must be >= 0");
    }
    if (!(m.backward_time_us() >= 0)) {
      return invalid_argument(where + ": backward_time_us = " + num(m.backward_time_us()) +
                              ", must be >= 0");
    }
    if (m.device_kind() != device_kind) continue;
    auto& pts = impl->points[m.signature()];
    // 2^50 bytes (a petabyte) is beyond any device; larger values would overflow the memory
    // model's sums into small ones.
    constexpr int64_t kMaxOpBytes = int64_t{1} << 50;
    if (m.activation_bytes() < 0 || m.workspace_bytes() < 0 || m.activation_bytes() > kMaxOpBytes ||
        m.workspace_bytes() > kMaxOpBytes) {
      return invalid_argument(
          where + ": activation_bytes = " + std::to_string(m.activation_bytes()) +
          ", workspace_bytes = " + std::to_string(m.workspace_bytes()) + ", must be in [0, 2^50]");
    }
    Point p{m.micro_batch(), m.forward_time_us(), m.backward_time_us(), m.activation_bytes(),
            m.workspace_bytes()};
    auto it = std::lower_bound(pts.begin(), pts.end(), p.micro_batch,
                               [](const Point& q, int64_t b) { return q.micro_batch < b; });
    if (it != pts.end() && it->micro_batch == p.micro_batch) {
      *it = p;  // a later measurement of the same point replaces the earlier one
    } else {
      pts.insert(it, p);
    }
  }
  GP_ASSIGN_OR_RETURN(impl->optimizer_steps, step_costs_of(db, device_kind));
  auto log = gp::log::get("cost");
  if (impl->points.empty() && db.ops_size() > 0) {
    log->warn(
        "profile DB has {} op measurements but none for device kind '{}'; every op uses the {} "
        "model",
        db.ops_size(), impl->device_kind, impl->fallback->name());
  } else {
    log->debug("profiled cost model: {} op signatures measured on '{}'", impl->points.size(),
               impl->device_kind);
  }
  return std::unique_ptr<ProfiledCostModel>(new ProfiledCostModel(std::move(impl)));
}

ProfiledCostModel::ProfiledCostModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProfiledCostModel::~ProfiledCostModel() = default;

OpTime ProfiledCostModel::op_time(const model::OpNode& op, int64_t samples) const {
  GP_CHECK(samples >= 1, "op_time needs at least one sample");
  // Graph inputs run no kernel; the profiler does not measure them.
  if (op.info != nullptr && op.info->is_input) return {};
  const std::string sig = op_signature(op);
  auto it = impl_->points.find(sig);
  if (it != impl_->points.end()) {
    return {interpolate(it->second, samples, &Point::forward_us),
            interpolate(it->second, samples, &Point::backward_us)};
  }
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    first = impl_->fallback_signatures.insert(sig).second;
  }
  if (first) {
    gp::log::get("cost")->warn(
        "op '{}': signature '{}' not in the profile DB for '{}'; using the {} model", op.id(), sig,
        impl_->device_kind, impl_->fallback->name());
  }
  return impl_->fallback->op_time(op, samples);
}

std::optional<OpMemory> ProfiledCostModel::op_memory(const model::OpNode& op) const {
  if (op.info != nullptr && op.info->is_input) return std::nullopt;
  auto it = impl_->points.find(op_signature(op));
  if (it == impl_->points.end()) return std::nullopt;
  OpMemory most;
  for (const Point& p : it->second) {
    const double b = static_cast<double>(p.micro_batch);
    most.activation_bytes =
        std::max(most.activation_bytes, static_cast<double>(p.activation_bytes) / b);
    most.workspace_bytes =
        std::max(most.workspace_bytes, static_cast<double>(p.workspace_bytes) / b);
  }
  // Every op keeps its outputs: zero kept bytes means the profile did not measure memory.
  if (most.activation_bytes <= 0) return std::nullopt;
  return most;
}

OptimizerStepCost ProfiledCostModel::optimizer_step_cost(const graphpipe::v1::DeviceKind& device,
                                                         graphpipe::v1::OptimizerKind kind) const {
  if (kind == graphpipe::v1::OPTIMIZER_KIND_UNSPECIFIED) kind = graphpipe::v1::OPTIMIZER_KIND_ADAM;
  auto it = impl_->optimizer_steps.find(kind);
  if (it != impl_->optimizer_steps.end()) return it->second;
  return impl_->fallback->optimizer_step_cost(device, kind);
}

int ProfiledCostModel::fallback_count() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return static_cast<int>(impl_->fallback_signatures.size());
}

}  // namespace gp::cost
