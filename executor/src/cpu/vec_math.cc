// Vectorised loops of the CPU kernels; see vec_math.h for the contract and the accuracy.
// The vector basics (types, loads, stores, the clones) are in vec_simd.h.
#include "cpu/vec_math.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/vec_simd.h"

namespace gp::exec::cpu::vec {
namespace {

GP_VEC_INLINE float hmax(const V& v) {
  float m = v[0];
  for (int i = 1; i < kW; ++i) m = std::fmax(m, v[i]);
  return m;
}
GP_VEC_INLINE void max_into(V& acc, const V& v) { acc = v > acc ? v : acc; }

// x = exp(x), Cephes expf: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two for an exact
// n ln2), exp(r) by a degree-7 polynomial, 2^n put straight into the exponent bits.
GP_VEC_INLINE void exp_inplace(V& x) {
  const VI underflow = x < GP_SPLAT(-87.33654f);  // exp < FLT_MIN: 0, as a denormal-free exp gives
  x = x > GP_SPLAT(88.3762626647949f) ? GP_SPLAT(88.3762626647949f) : x;
  x = x < GP_SPLAT(-87.33654f) ? GP_SPLAT(-87.33654f) : x;
  // n from a NaN-free copy (converting NaN to int is undefined); r keeps the NaN, so it
  // propagates to the result.
  V fx = (x == x ? x : GP_SPLAT(0.0f)) * 1.44269504088896341f;  // log2(e)
  fx = fx + (fx >= GP_SPLAT(0.0f) ? GP_SPLAT(0.5f) : GP_SPLAT(-0.5f));
  const VI n = __builtin_convertvector(fx, VI);  // rounds half away from zero (truncating +-0.5)
  const V nf = __builtin_convertvector(n, V);
  V r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  V p = GP_SPLAT(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const VI bits = (n + 127) << 23;
  V two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  x = p * two_n;
  x = underflow ? GP_SPLAT(0.0f) : x;
}

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

// y = gelu(x) and, when d is given, d = gelu'(x). With u = sqrt(2/pi) (x + 0.044715 x^3),
// 0.5 (1 + tanh(u)) = sigmoid(2u) = s, so y = x s and, as 1 - tanh(u)^2 = 4 s (1 - s),
// gelu'(x) = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 0.044715 x^2). Written with s, nothing cancels
// where tanh(u) is near -1 (1 + tanh(u) would lose the digits that y keeps).
GP_VEC_INLINE void gelu_chunk(const V& x, V& y, V* d) {
  V e = (2.0f * kGeluC) * (x + kGeluA * x * x * x);
  exp_inplace(e);  // exp(2u): saturates for large x (s = 1), 0 for very negative x (s = 0)
  const V inv = 1.0f / (1.0f + e);
  const V s = e * inv;
  y = x * s;
  if (d != nullptr) *d = s + 2.0f * x * s * inv * kGeluC * (1.0f + 3.0f * kGeluA * x * x);
}

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

// x = erf(x): the odd rational approximation of degree 13/8 used by XLA and Eigen on [-4, 4]
// (beyond it erf is +-1 in float), within 4e-7 of erf everywhere (cpu_kernels_test checks it).
GP_VEC_INLINE void erf_inplace(V& x) {
  x = x > GP_SPLAT(4.0f) ? GP_SPLAT(4.0f) : x;
  x = x < GP_SPLAT(-4.0f) ? GP_SPLAT(-4.0f) : x;
  const V x2 = x * x;
  V p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  V q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  x = x * p / q;
}

// y = erf(x) (forward only: d is never asked for).
GP_VEC_INLINE void erf_chunk(const V& x, V& y, V*) {
  y = x;
  erf_inplace(y);
}

// The exact GELU, 0.5 x (1 + erf(x / sqrt 2)) as torch's CPU kernel orders it, and when d is
// given its derivative cdf + x pdf.
GP_VEC_INLINE void gelu_exact_chunk(const V& x, V& y, V* d) {
  V e = x * kInvSqrt2;
  erf_inplace(e);
  const V cdf = 0.5f * (1.0f + e);
  y = x * cdf;
  if (d != nullptr) {
    V pdf = -0.5f * x * x;
    exp_inplace(pdf);
    *d = cdf + x * (kInvSqrt2Pi * pdf);
  }
}

// y = f(x) and dx (+)= dy f'(x) of an activation computed 8 at a time by Chunk (y, and f' into
// its third argument when given).
using ActivationChunk = void (*)(const V&, V&, V*);

template <ActivationChunk Chunk>
GP_VEC_INLINE void map_activation(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  V out;
  for (; i + kW <= n; i += kW) {
    Chunk(GP_LOAD(x + i), out, nullptr);
    store(y + i, out);
  }
  if (i < n) {
    Chunk(GP_LOAD_PART(x + i, n - i, 0), out, nullptr);
    store_part(y + i, out, n - i);
  }
}

template <ActivationChunk Chunk>
GP_VEC_INLINE void map_activation_backward(const float* x, const float* dy, float* dx, int64_t n,
                                           bool accumulate) {
  int64_t i = 0;
  V y, d;
  for (; i + kW <= n; i += kW) {
    Chunk(GP_LOAD(x + i), y, &d);
    V g = GP_LOAD(dy + i) * d;
    if (accumulate) g += GP_LOAD(dx + i);
    store(dx + i, g);
  }
  if (i < n) {
    const int64_t k = n - i;
    Chunk(GP_LOAD_PART(x + i, k, 0), y, &d);
    V g = GP_LOAD_PART(dy + i, k, 0) * d;
    if (accumulate) g += GP_LOAD_PART(dx + i, k, 0);
    store_part(dx + i, g, k);
  }
}

}  // namespace

GP_VEC_CLONES void gelu(const float* x, float* y, int64_t n) {
  map_activation<gelu_chunk>(x, y, n);
}

GP_VEC_CLONES void gelu_backward(const float* x, const float* dy, float* dx, int64_t n,
                                 bool accumulate) {
  map_activation_backward<gelu_chunk>(x, dy, dx, n, accumulate);
}

GP_VEC_CLONES void erf(const float* x, float* y, int64_t n) { map_activation<erf_chunk>(x, y, n); }

GP_VEC_CLONES void gelu_exact(const float* x, float* y, int64_t n) {
  map_activation<gelu_exact_chunk>(x, y, n);
}

GP_VEC_CLONES void gelu_exact_backward(const float* x, const float* dy, float* dx, int64_t n,
                                       bool accumulate) {
  map_activation_backward<gelu_exact_chunk>(x, dy, dx, n, accumulate);
}

GP_VEC_CLONES void relu(const float* x, float* y, int64_t n) {
  const V zero = GP_SPLAT(0.0f);
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    const V v = GP_LOAD(x + i);
    store(y + i, v > zero ? v : zero);
  }
  if (i < n) {
    const V v = GP_LOAD_PART(x + i, n - i, 0);
    store_part(y + i, v > zero ? v : zero, n - i);
  }
}

GP_VEC_CLONES void relu_backward(const float* y, const float* dy, float* dx, int64_t n,
                                 bool accumulate) {
  const V zero = GP_SPLAT(0.0f);
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    V g = GP_LOAD(y + i) > zero ? GP_LOAD(dy + i) : zero;
    if (accumulate) g += GP_LOAD(dx + i);
    store(dx + i, g);
  }
  if (i < n) {
    const int64_t k = n - i;
    V g = GP_LOAD_PART(y + i, k, 0) > zero ? GP_LOAD_PART(dy + i, k, 0) : zero;
    if (accumulate) g += GP_LOAD_PART(dx + i, k, 0);
    store_part(dx + i, g, k);
  }
}

GP_VEC_CLONES void sigmoid(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kW <= n; i += kW) {
    V e = -GP_LOAD(x + i);
    exp_inplace(e);
    store(y + i, 1.0f / (1.0f + e));
  }
  if (i < n) {
    V e = -GP_LOAD_PART(x + i, n - i, 0);
    exp_inplace(e);
    store_part(y + i, 1.0f / (1.0f + e), n - i);
  }
}

GP_VEC_CLONES void add_into(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + kW <= n; i += kW) store(y + i, GP_LOAD(y + i) + GP_LOAD(x + i));
  for (; i < n; ++i) y[i] += x[i];  // a sum is exact per element: no need to pad
}

GP_VEC_CLONES void add(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kW <= n; i += kW) store(y + i, GP_LOAD(a + i) + GP_LOAD(b + i));
  for (; i < n; ++i) y[i] = a[i] + b[i];
}

// The largest of x[0..n), the partial tail padded with -inf.
GP_VEC_INLINE float row_max(const float* x, int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t full = n - n % kW, k = n - full;
  V m = GP_SPLAT(kNegInf);
  for (int64_t i = 0; i < full; i += kW) max_into(m, GP_LOAD(x + i));
  if (k > 0) max_into(m, GP_LOAD_PART(x + full, k, kNegInf));
  return hmax(m);
}

GP_VEC_CLONES void softmax_rows(float* x, int64_t rows, int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * n;
    const int64_t full = n - n % kW, k = n - full;
    const float mx = row_max(row, n);
    V sum = GP_SPLAT(0.0f);
    for (int64_t i = 0; i < full; i += kW) {
      V e = GP_LOAD(row + i) - mx;
      exp_inplace(e);
      store(row + i, e);
      sum += e;
    }
    if (k > 0) {
      V e = GP_LOAD_PART(row + full, k, kNegInf) - mx;  // padding: exp(-inf) = 0
      exp_inplace(e);
      store_part(row + full, e, k);
      sum += e;
    }
    const float inv = 1.0f / hsum(sum);
    for (int64_t i = 0; i < full; i += kW) store(row + i, GP_LOAD(row + i) * inv);
    for (int64_t i = full; i < n; ++i) row[i] *= inv;
  }
}

GP_VEC_CLONES void softmax_rows_backward(const float* y, const float* dy, float* dx, int64_t rows,
                                         int64_t n, bool accumulate) {
  const int64_t full = n - n % kW, k = n - full;
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * n;
    const float* dyr = dy + r * n;
    float* dxr = dx + r * n;
    V acc = GP_SPLAT(0.0f);
    for (int64_t i = 0; i < full; i += kW) acc += GP_LOAD(dyr + i) * GP_LOAD(yr + i);
    if (k > 0) acc += GP_LOAD_PART(dyr + full, k, 0) * GP_LOAD_PART(yr + full, k, 0);
    const float dot = hsum(acc);
    for (int64_t i = 0; i < full; i += kW) {
      V g = GP_LOAD(yr + i) * (GP_LOAD(dyr + i) - dot);
      if (accumulate) g += GP_LOAD(dxr + i);
      store(dxr + i, g);
    }
    if (k > 0) {
      V g = GP_LOAD_PART(yr + full, k, 0) * (GP_LOAD_PART(dyr + full, k, 0) - dot);
      if (accumulate) g += GP_LOAD_PART(dxr + full, k, 0);
      store_part(dxr + full, g, k);
    }
  }
}

GP_VEC_CLONES float log_sum_exp(const float* z, int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t full = n - n % kW, k = n - full;
  const float mx = row_max(z, n);
  V sum = GP_SPLAT(0.0f);
  for (int64_t i = 0; i < full; i += kW) {
    V e = GP_LOAD(z + i) - mx;
    exp_inplace(e);
    sum += e;
  }
  if (k > 0) {
    V e = GP_LOAD_PART(z + full, k, kNegInf) - mx;
    exp_inplace(e);
    sum += e;
  }
  return mx + std::log(hsum(sum));
}

GP_VEC_CLONES void add_scaled_softmax(const float* z, float lse, float g, float* dz, int64_t n) {
  const int64_t full = n - n % kW, k = n - full;
  for (int64_t i = 0; i < full; i += kW) {
    V e = GP_LOAD(z + i) - lse;
    exp_inplace(e);
    store(dz + i, GP_LOAD(dz + i) + g * e);
  }
  if (k > 0) {
    V e = GP_LOAD_PART(z + full, k, 0) - lse;
    exp_inplace(e);
    store_part(dz + full, GP_LOAD_PART(dz + full, k, 0) + g * e, k);
  }
}

GP_VEC_CLONES void layer_norm(const float* x, const float* gamma, const float* beta, float* y,
                              float* stats, int64_t rows, int64_t n, float eps) {
  const int64_t full = n - n % kW, k = n - full;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    V acc = GP_SPLAT(0.0f);
    for (int64_t i = 0; i < full; i += kW) acc += GP_LOAD(xr + i);
    if (k > 0) acc += GP_LOAD_PART(xr + full, k, 0);
    const float mean = hsum(acc) * inv_n;
    acc = GP_SPLAT(0.0f);
    for (int64_t i = 0; i < full; i += kW) {
      const V c = GP_LOAD(xr + i) - mean;
      acc += c * c;
    }
    if (k > 0) {
      const V c = GP_LOAD_PART(xr + full, k, mean) - mean;  // padding: zero deviation
      acc += c * c;
    }
    const float rstd = 1.0f / std::sqrt(hsum(acc) * inv_n + eps);
    // A null gamma is 1 and a null beta 0 (a LayerNorm without them). No lambdas here: they would
    // not get this function's target clones.
    for (int64_t i = 0; i < full; i += kW) {
      const V g = gamma == nullptr ? GP_SPLAT(1.0f) : GP_LOAD(gamma + i);
      const V sh = beta == nullptr ? GP_SPLAT(0.0f) : GP_LOAD(beta + i);
      store(yr + i, (GP_LOAD(xr + i) - mean) * rstd * g + sh);
    }
    if (k > 0) {
      const V g = gamma == nullptr ? GP_SPLAT(1.0f) : GP_LOAD_PART(gamma + full, k, 0);
      const V sh = beta == nullptr ? GP_SPLAT(0.0f) : GP_LOAD_PART(beta + full, k, 0);
      store_part(yr + full, (GP_LOAD_PART(xr + full, k, 0) - mean) * rstd * g + sh, k);
    }
    stats[2 * r] = mean;
    stats[2 * r + 1] = rstd;
  }
}

GP_VEC_CLONES void layer_norm_backward(const float* x, const float* dy, const float* gamma,
                                       const float* stats, float* dx, float* dgamma, float* dbeta,
                                       int64_t rows, int64_t n) {
  const int64_t full = n - n % kW, k = n - full;
  const float inv_n = 1.0f / static_cast<float>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float* dyr = dy + r * n;
    const float mean = stats[2 * r], rstd = stats[2 * r + 1];
    V sg = GP_SPLAT(0.0f), sgx = GP_SPLAT(0.0f);
    // The padded lanes have dy = 0, so they add nothing to the sums or the parameter gradients.
    for (int64_t i = 0; i <= full; i += kW) {
      const bool part = i == full;
      if (part && k == 0) break;
      const V xv = part ? GP_LOAD_PART(xr + i, k, 0) : GP_LOAD(xr + i);
      const V dyv = part ? GP_LOAD_PART(dyr + i, k, 0) : GP_LOAD(dyr + i);
      const V gv = gamma == nullptr ? GP_SPLAT(1.0f)
                   : part           ? GP_LOAD_PART(gamma + i, k, 0)
                                    : GP_LOAD(gamma + i);
      const V xh = (xv - mean) * rstd;
      const V g = dyv * gv;
      sg += g;
      sgx += g * xh;
      if (dgamma != nullptr) {
        const V v = (part ? GP_LOAD_PART(dgamma + i, k, 0) : GP_LOAD(dgamma + i)) + dyv * xh;
        part ? store_part(dgamma + i, v, k) : store(dgamma + i, v);
      }
      if (dbeta != nullptr) {
        const V v = (part ? GP_LOAD_PART(dbeta + i, k, 0) : GP_LOAD(dbeta + i)) + dyv;
        part ? store_part(dbeta + i, v, k) : store(dbeta + i, v);
      }
    }
    if (dx == nullptr) continue;
    const float mean_g = hsum(sg) * inv_n, mean_gx = hsum(sgx) * inv_n;
    float* dxr = dx + r * n;
    for (int64_t i = 0; i <= full; i += kW) {
      const bool part = i == full;
      if (part && k == 0) break;
      const V xv = part ? GP_LOAD_PART(xr + i, k, 0) : GP_LOAD(xr + i);
      const V dyv = part ? GP_LOAD_PART(dyr + i, k, 0) : GP_LOAD(dyr + i);
      const V gv = gamma == nullptr ? GP_SPLAT(1.0f)
                   : part           ? GP_LOAD_PART(gamma + i, k, 0)
                                    : GP_LOAD(gamma + i);
      const V xh = (xv - mean) * rstd;
      const V v = (part ? GP_LOAD_PART(dxr + i, k, 0) : GP_LOAD(dxr + i)) +
                  rstd * (dyv * gv - mean_g - xh * mean_gx);
      part ? store_part(dxr + i, v, k) : store(dxr + i, v);
    }
  }
}

GP_VEC_CLONES void add_bias_rows(float* m, int64_t rows, int64_t cols, const float* bias) {
  const int64_t full = cols - cols % kW;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = m + r * cols;
    for (int64_t j = 0; j < full; j += kW) store(row + j, GP_LOAD(row + j) + GP_LOAD(bias + j));
    for (int64_t j = full; j < cols; ++j) row[j] += bias[j];
  }
}

GP_VEC_CLONES void add_column_sums(const float* m, int64_t rows, int64_t cols, float* out) {
  const int64_t full = cols - cols % kW;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = m + r * cols;
    for (int64_t j = 0; j < full; j += kW) store(out + j, GP_LOAD(out + j) + GP_LOAD(row + j));
    for (int64_t j = full; j < cols; ++j) out[j] += row[j];
  }
}

GP_VEC_CLONES float sum(const float* x, int64_t n) {
  V acc = GP_SPLAT(0.0f);
  int64_t i = 0;
  for (; i + kW <= n; i += kW) acc += GP_LOAD(x + i);
  if (i < n) acc += GP_LOAD_PART(x + i, n - i, 0.0f);
  return hsum(acc);
}

}  // namespace gp::exec::cpu::vec
