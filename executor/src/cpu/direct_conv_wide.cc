#include "cpu/direct_conv_wide.h"

#include <algorithm>
#include <cstring>

namespace gp::exec::cpu {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

namespace {

using V16 = float __attribute__((vector_size(64)));
constexpr int64_t kL = 16;  // floats per vector

#define GP_WIDE_TARGET __attribute__((target("arch=x86-64-v4")))

// Adds `bias` (and, when accumulating, what y holds) to one run's accumulator and stores the
// first n <= kL lanes at `out`.
GP_WIDE_TARGET inline void finish(float* out, V16 v, float bias, int64_t n, bool accumulate) {
  v += bias;
  if (n == kL) {
    if (accumulate) {
      V16 old;
      std::memcpy(&old, out, sizeof old);
      v += old;
    }
    std::memcpy(out, &v, sizeof v);
    return;
  }
  float lanes[kL];
  std::memcpy(lanes, &v, sizeof v);
  for (int64_t k = 0; k < n; ++k) out[k] = accumulate ? out[k] + lanes[k] : lanes[k];
}

}  // namespace

bool wide_conv_supported() {
  // x86-64-v4's features one by one (clang 14 knows no level names); they are set only where
  // the OS saves the AVX-512 registers.
  static const bool supported = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
  }();
  return supported;
}

GP_WIDE_TARGET void conv_rows_wide(const float* xp, int64_t channels, int64_t rows, int64_t stride,
                                   const float* packed, int64_t filters, int64_t kh, int64_t kw,
                                   const float* bias, float* y, int64_t ho, int64_t wo,
                                   bool accumulate) {
  const int64_t taps = channels * kh * kw;
  for (int64_t o0 = 0; o0 < filters; o0 += kWideBlock) {
    const int64_t in_block = std::min(kWideBlock, filters - o0);
    const float* block = packed + o0 * taps;
    for (int64_t r = 0; r < ho; ++r) {
      for (int64_t col = 0; col < wo; col += kWideRun) {
        // Sixteen named accumulators stay in registers (an array indexed in a loop would not).
        V16 l0{}, l1{}, l2{}, l3{}, l4{}, l5{}, l6{}, l7{};
        V16 h0{}, h1{}, h2{}, h3{}, h4{}, h5{}, h6{}, h7{};
        const float* tap = block;
        for (int64_t c = 0; c < channels; ++c) {
          for (int64_t i = 0; i < kh; ++i) {
            const float* x = xp + (c * rows + r + i) * stride + col;
            for (int64_t j = 0; j < kw; ++j, tap += kWideBlock) {
              V16 xl, xh;
              std::memcpy(&xl, x + j, sizeof xl);
              std::memcpy(&xh, x + j + kL, sizeof xh);
              l0 += tap[0] * xl;
              h0 += tap[0] * xh;
              l1 += tap[1] * xl;
              h1 += tap[1] * xh;
              l2 += tap[2] * xl;
              h2 += tap[2] * xh;
              l3 += tap[3] * xl;
              h3 += tap[3] * xh;
              l4 += tap[4] * xl;
              h4 += tap[4] * xh;
              l5 += tap[5] * xl;
              h5 += tap[5] * xh;
              l6 += tap[6] * xl;
              h6 += tap[6] * xh;
              l7 += tap[7] * xl;
              h7 += tap[7] * xh;
            }
          }
        }
        const V16 lo[kWideBlock] = {l0, l1, l2, l3, l4, l5, l6, l7};
        const V16 hi[kWideBlock] = {h0, h1, h2, h3, h4, h5, h6, h7};
        const int64_t n = std::min(kWideRun, wo - col);
        const int64_t n_lo = std::min(n, kL), n_hi = n - n_lo;
        for (int64_t b = 0; b < in_block; ++b) {
          float* out = y + ((o0 + b) * ho + r) * wo + col;
          const float bias_b = bias != nullptr ? bias[o0 + b] : 0.0f;
          finish(out, lo[b], bias_b, n_lo, accumulate);
          if (n_hi > 0) finish(out + kL, hi[b], bias_b, n_hi, accumulate);
        }
      }
    }
  }
}

GP_WIDE_TARGET void filter_grads_wide3(const float* xp, int64_t channels, int64_t rows,
                                       int64_t x_stride, const float* dy_rows, int64_t filters,
                                       int64_t ho, int64_t d_stride, int64_t kh, float* dw) {
  constexpr int64_t kw = 3;
  const int64_t plane = ho * d_stride;
  for (int64_t o0 = 0; o0 < filters; o0 += kWideBlock) {
    const int64_t in_block = std::min(kWideBlock, filters - o0);
    const float* dy = dy_rows + o0 * plane;
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t i = 0; i < kh; ++i) {
        // Filter b, tap j: a<b><j>; 24 named accumulators in registers.
        V16 a00{}, a01{}, a02{}, a10{}, a11{}, a12{}, a20{}, a21{}, a22{}, a30{}, a31{}, a32{};
        V16 a40{}, a41{}, a42{}, a50{}, a51{}, a52{}, a60{}, a61{}, a62{}, a70{}, a71{}, a72{};
        for (int64_t r = 0; r < ho; ++r) {
          const float* x = xp + (c * rows + r + i) * x_stride;
          const float* d = dy + r * d_stride;
          for (int64_t col = 0; col < d_stride; col += kL) {
            V16 x0, x1, x2;
            std::memcpy(&x0, x + col, sizeof x0);
            std::memcpy(&x1, x + col + 1, sizeof x1);
            std::memcpy(&x2, x + col + 2, sizeof x2);
#define GP_FILTER(b)                                \
  {                                                 \
    V16 g;                                          \
    std::memcpy(&g, d + (b)*plane + col, sizeof g); \
    a##b##0 += g * x0;                              \
    a##b##1 += g * x1;                              \
    a##b##2 += g * x2;                              \
  }
            GP_FILTER(0)
            GP_FILTER(1)
            GP_FILTER(2) GP_FILTER(3) GP_FILTER(4) GP_FILTER(5) GP_FILTER(6) GP_FILTER(7)
#undef GP_FILTER
          }
        }
        const V16 sums[kWideBlock][kw] = {{a00, a01, a02}, {a10, a11, a12}, {a20, a21, a22},
                                          {a30, a31, a32}, {a40, a41, a42}, {a50, a51, a52},
                                          {a60, a61, a62}, {a70, a71, a72}};
        for (int64_t b = 0; b < in_block; ++b) {
          for (int64_t j = 0; j < kw; ++j) {
            float lanes[kL];
            std::memcpy(lanes, &sums[b][j], sizeof lanes);
            float total = 0.0f;
            for (float v : lanes) total += v;
            dw[(((o0 + b) * channels + c) * kh + i) * kw + j] += total;
          }
        }
      }
    }
  }
}

#undef GP_WIDE_TARGET

#else  // not x86-64: the AVX2/baseline loop serves every call

bool wide_conv_supported() { return false; }

void conv_rows_wide(const float*, int64_t, int64_t, int64_t, const float*, int64_t, int64_t,
                    int64_t, const float*, float*, int64_t, int64_t, bool) {}
void filter_grads_wide3(const float*, int64_t, int64_t, int64_t, const float*, int64_t, int64_t,
                        int64_t, int64_t, float*) {}

#endif

}  // namespace gp::exec::cpu
