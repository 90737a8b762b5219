#include "gp/profile_db/comm_fit.h"

#include <string>

namespace gp::profile {

Result<AlphaBeta> fit_alpha_beta(
    const google::protobuf::RepeatedPtrField<graphpipe::v1::CommPoint>& points) {
  // Weighted least squares of t = a + c x with weights w = 1 / t^2; beta = 1e6 / c (x in bytes,
  // t in microseconds).
  double sw = 0, sx = 0, st = 0, sxx = 0, sxt = 0;
  int64_t first_size = -1;
  bool distinct = false;
  for (const auto& p : points) {
    if (!(p.time_us() > 0) || p.bytes() <= 0) {
      return invalid_argument("comm fit: point (" + std::to_string(p.bytes()) + " bytes, " +
                              std::to_string(p.time_us()) +
                              " us) must have positive size and time");
    }
    if (first_size < 0) first_size = p.bytes();
    if (p.bytes() != first_size) distinct = true;
    const double w = 1.0 / (p.time_us() * p.time_us());
    const auto x = static_cast<double>(p.bytes());
    sw += w, sx += w * x, st += w * p.time_us(), sxx += w * x * x, sxt += w * x * p.time_us();
  }
  if (!distinct) return invalid_argument("comm fit: needs at least two distinct sizes");
  const double det = sw * sxx - sx * sx;
  double c = (sw * sxt - sx * st) / det;
  double a = (st - c * sx) / sw;
  if (a < 0) {  // latency cannot be negative: refit through the origin
    a = 0;
    c = sxt / sxx;
  }
  if (!(c > 0)) {
    return invalid_argument("comm fit: time does not grow with size (slope " + std::to_string(c) +
                            " us/byte); measure larger sizes");
  }
  return AlphaBeta{a, 1e6 / c};
}

}  // namespace gp::profile
