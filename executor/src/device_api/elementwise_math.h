// The formulas of the general element-wise ops (unary, binary, compare) and of reductions, one
// definition for the CPU reference and the CUDA kernels (host and device). Function codes are
// the values of model::UnaryFn, BinaryFn, CompareFn and ReduceMode (static_asserts in
// elementwise_maps.h keep them in step). Gradients follow PyTorch's derivatives.
#pragma once

#include <math.h>  // NOLINT: expf, erff, ... on host and device alike

#include "device_api/index_map.h"

namespace gp::exec::ew {

enum Unary : int {
  kNeg,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kReciprocal,
  kAbs,
  kErf,
  kSin,
  kCos,
  kSoftplus
};
enum Binary : int { kAdd, kSub, kMul, kDiv, kPow, kMax, kMin };
enum Compare : int { kEq, kNe, kLt, kLe, kGt, kGe };
enum Reduce : int { kSum, kMean, kMaxReduce, kL2 };

// torch.nn.Softplus(beta=1, threshold=20): linear above the threshold.
constexpr float kSoftplusThreshold = 20.0f;

// cast to int64: truncated toward zero (ONNX's Cast, torch's .long()); NaN gives 0 and values
// beyond int64 the nearest end, the same on both backends (a plain conversion is undefined).
GP_HD int64_t float_to_id(float x) {
  if (!(x == x)) return 0;
  if (x >= 9.2233720368547758e18f) return INT64_MAX;
  if (x <= -9.2233720368547758e18f) return INT64_MIN;
  return static_cast<int64_t>(x);
}

GP_HD float unary_forward(int fn, float x) {
  switch (fn) {
    case kNeg:
      return -x;
    case kExp:
      return expf(x);
    case kLog:
      return logf(x);
    case kSqrt:
      return sqrtf(x);
    case kRsqrt:
      return 1.0f / sqrtf(x);
    case kReciprocal:
      return 1.0f / x;
    case kAbs:
      return fabsf(x);
    case kErf:
      return erff(x);
    case kSin:
      return sinf(x);
    case kCos:
      return cosf(x);
    default:
      return x > kSoftplusThreshold ? x : log1pf(expf(x));  // kSoftplus
  }
}

// d(unary)/dx times dy, from the input x and the output y.
GP_HD float unary_backward(int fn, float x, float y, float dy) {
  switch (fn) {
    case kNeg:
      return -dy;
    case kExp:
      return dy * y;
    case kLog:
      return dy / x;
    case kSqrt:
      return dy / (2.0f * y);
    case kRsqrt:
      return -0.5f * dy * y * y * y;
    case kReciprocal:
      return -dy * y * y;
    case kAbs:
      return x > 0 ? dy : (x < 0 ? -dy : 0.0f);
    case kErf:
      return dy * 1.1283791670955126f * expf(-x * x);  // 2 / sqrt(pi)
    case kSin:
      return dy * cosf(x);
    case kCos:
      return -dy * sinf(x);
    default:
      return x > kSoftplusThreshold ? dy : dy / (1.0f + expf(-x));  // kSoftplus
  }
}

GP_HD float binary_forward(int fn, float a, float b) {
  switch (fn) {
    case kAdd:
      return a + b;
    case kSub:
      return a - b;
    case kMul:
      return a * b;
    case kDiv:
      return a / b;
    case kPow:
      return powf(a, b);
    case kMax:
      return a > b ? a : (b > a ? b : a + 0.0f * b);  // NaN propagates through 0 * NaN
    default:
      return a < b ? a : (b < a ? b : a + 0.0f * b);  // kMin
  }
}

// The gradient towards operand `k` (0: a, 1: b) at one output element, from a, b, y and dy.
GP_HD float binary_backward(int fn, int k, float a, float b, float y, float dy) {
  switch (fn) {
    case kAdd:
      return dy;
    case kSub:
      return k == 0 ? dy : -dy;
    case kMul:
      return k == 0 ? dy * b : dy * a;
    case kDiv:
      return k == 0 ? dy / b : -dy * a / (b * b);
    case kPow:
      if (k == 0) return b == 0.0f ? 0.0f : dy * b * powf(a, b - 1.0f);
      return (a == 0.0f && b >= 0.0f) ? 0.0f : dy * y * logf(a);
    case kMax: {
      const float mine = k == 0 ? a : b, other = k == 0 ? b : a;
      return mine == other ? 0.5f * dy : (mine > other ? dy : 0.0f);
    }
    default: {  // kMin
      const float mine = k == 0 ? a : b, other = k == 0 ? b : a;
      return mine == other ? 0.5f * dy : (mine < other ? dy : 0.0f);
    }
  }
}

GP_HD float compare(int fn, float a, float b) {
  bool r;
  switch (fn) {
    case kEq:
      r = a == b;
      break;
    case kNe:
      r = a != b;
      break;
    case kLt:
      r = a < b;
      break;
    case kLe:
      r = a <= b;
      break;
    case kGt:
      r = a > b;
      break;
    default:
      r = a >= b;
      break;  // kGe
  }
  return r ? 1.0f : 0.0f;
}

}  // namespace gp::exec::ew
