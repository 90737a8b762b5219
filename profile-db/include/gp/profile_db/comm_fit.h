// The alpha-beta fit of measured transfer times (t = alpha + bytes / beta): what `graphpipe-profile
// comm` makes of its sweeps, and rank 0 of a running job of the messages it measured.
#pragma once

#include "gp/common/status.h"
#include "graphpipe/v1/profile.pb.h"

namespace gp::profile {

struct AlphaBeta {
  double alpha_us = 0;
  double beta_bytes_per_s = 0;
};

// Least squares in relative error (each point weighted by 1 / time^2, so small transfers count
// as much as large ones); alpha is clamped at 0. InvalidArgument when fewer than two distinct
// sizes or when time does not grow with size.
Result<AlphaBeta> fit_alpha_beta(
    const google::protobuf::RepeatedPtrField<graphpipe::v1::CommPoint>& points);

}  // namespace gp::profile
