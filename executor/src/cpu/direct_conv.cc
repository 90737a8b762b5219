#include "cpu/direct_conv.h"

#include <algorithm>

#include "cpu/direct_conv_wide.h"
#include "cpu/vec_simd.h"

namespace gp::exec::cpu {
namespace {

using vec::kW;
using vec::V;

constexpr int64_t kBlock = 4;     // output channels accumulated together (four named accumulators)
constexpr int64_t kRun = 2 * kW;  // output columns accumulated together (two vectors)
// The padded copies' rows are long enough for either loop's runs (the AVX-512 one's are longer).
constexpr int64_t kStrideRun = std::max(kRun, kWideRun);

int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

// dst [channels, rows, stride] = zeros, with src [channels, h, w] at row `top`, column `left`.
void pad_image(const float* src, int64_t channels, int64_t h, int64_t w, int64_t top, int64_t left,
               int64_t rows, int64_t stride, float* dst) {
  std::fill(dst, dst + channels * rows * stride, 0.0f);
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t y = 0; y < h; ++y) {
      const float* from = src + (c * h + y) * w;
      std::copy(from, from + w, dst + (c * rows + top + y) * stride + left);
    }
  }
}

// The filters as the row loops read them: per block of `block` filters, per tap (c, i, j), the
// block's weights side by side (zero past the last filter). Filter o, tap (c, i, j) is
// w[o, c, i, j] of w [filters, channels, kh, kw], or, `transposed`, w[c, o, kh-1-i, kw-1-j] of
// w [channels, filters, kh, kw]: the filters of the input gradient.
void pack_filters(const float* w, int64_t filters, int64_t channels, int64_t kh, int64_t kw,
                  bool transposed, int64_t block_size, float* packed) {
  const int64_t taps = channels * kh * kw;
  std::fill(packed, packed + round_up(filters, block_size) * taps, 0.0f);
  for (int64_t o = 0; o < filters; ++o) {
    float* block = packed + (o / block_size) * taps * block_size + o % block_size;
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t i = 0; i < kh; ++i) {
        for (int64_t j = 0; j < kw; ++j) {
          const int64_t tap = (c * kh + i) * kw + j;
          block[tap * block_size] = transposed
                                        ? w[((c * filters + o) * kh + kh - 1 - i) * kw + kw - 1 - j]
                                        : w[((o * channels + c) * kh + i) * kw + j];
        }
      }
    }
  }
}

// y [filters, ho, wo] (=, or += when accumulate) sum over (c, i, j) of
// packed filter (o; c, i, j) * xp[c, r + i, col + j], plus bias[o] when given. xp is
// [channels, rows, stride] with stride >= round_up(wo, kRun) + kw - 1 and rows >= ho + kh - 1.
// (The packed filters are in blocks of kBlock; conv_rows_wide is the AVX-512 twin.)
GP_VEC_CLONES void conv_rows(const float* xp, int64_t channels, int64_t rows, int64_t stride,
                             const float* packed, int64_t filters, int64_t kh, int64_t kw,
                             const float* bias, float* y, int64_t ho, int64_t wo, bool accumulate) {
  const int64_t taps = channels * kh * kw;
  for (int64_t o0 = 0; o0 < filters; o0 += kBlock) {
    const int64_t in_block = std::min(kBlock, filters - o0);
    const float* block = packed + o0 * taps;
    for (int64_t r = 0; r < ho; ++r) {
      for (int64_t col = 0; col < wo; col += kRun) {
        // Eight named accumulators stay in registers (an array indexed in a loop would not).
        V lo0{}, lo1{}, lo2{}, lo3{}, hi0{}, hi1{}, hi2{}, hi3{};
        const float* tap = block;
        for (int64_t c = 0; c < channels; ++c) {
          for (int64_t i = 0; i < kh; ++i) {
            const float* x = xp + (c * rows + r + i) * stride + col;
            for (int64_t j = 0; j < kw; ++j, tap += kBlock) {
              const V x_lo = GP_LOAD(x + j), x_hi = GP_LOAD(x + j + kW);
              const V f0 = GP_SPLAT(tap[0]), f1 = GP_SPLAT(tap[1]);
              const V f2 = GP_SPLAT(tap[2]), f3 = GP_SPLAT(tap[3]);
              lo0 += f0 * x_lo;
              hi0 += f0 * x_hi;
              lo1 += f1 * x_lo;
              hi1 += f1 * x_hi;
              lo2 += f2 * x_lo;
              hi2 += f2 * x_hi;
              lo3 += f3 * x_lo;
              hi3 += f3 * x_hi;
            }
          }
        }
        const V* const lo[kBlock] = {&lo0, &lo1, &lo2, &lo3};
        const V* const hi[kBlock] = {&hi0, &hi1, &hi2, &hi3};
        const int64_t n = std::min(kRun, wo - col);
        for (int64_t b = 0; b < in_block; ++b) {
          float* out = y + ((o0 + b) * ho + r) * wo + col;
          const V bias_v = GP_SPLAT(bias != nullptr ? bias[o0 + b] : 0.0f);
          V v_lo = *lo[b] + bias_v, v_hi = *hi[b] + bias_v;
          if (n == kRun) {
            if (accumulate) {
              v_lo += GP_LOAD(out);
              v_hi += GP_LOAD(out + kW);
            }
            vec::store(out, v_lo);
            vec::store(out + kW, v_hi);
            continue;
          }
          // The last, partial run of the row: its lanes past wo are dropped.
          const int64_t n_lo = std::min(n, kW), n_hi = n - n_lo;
          if (accumulate) v_lo += GP_LOAD_PART(out, n_lo, 0.0f);
          vec::store_part(out, v_lo, n_lo);
          if (n_hi > 0) {
            if (accumulate) v_hi += GP_LOAD_PART(out + kW, n_hi, 0.0f);
            vec::store_part(out + kW, v_hi, n_hi);
          }
        }
      }
    }
  }
}

// dw[o, c, i, j] += sum over (r, col) of dy_rows[o, r, col] * xp[c, r + i, col + j]: dy_rows is
// [round_up(filters, kBlock), ho, d_stride] with zeros past wo and past the last filter.
GP_VEC_CLONES void filter_grads(const float* xp, int64_t channels, int64_t rows, int64_t x_stride,
                                const float* dy_rows, int64_t filters, int64_t ho, int64_t d_stride,
                                int64_t kh, int64_t kw, float* dw) {
  for (int64_t o0 = 0; o0 < filters; o0 += kBlock) {
    const int64_t in_block = std::min(kBlock, filters - o0);
    const float* dy = dy_rows + o0 * ho * d_stride;
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t i = 0; i < kh; ++i) {
        for (int64_t j = 0; j < kw; ++j) {
          V acc0{}, acc1{}, acc2{}, acc3{};
          const int64_t plane = ho * d_stride;
          for (int64_t r = 0; r < ho; ++r) {
            const float* x = xp + (c * rows + r + i) * x_stride + j;
            const float* d = dy + r * d_stride;
            for (int64_t col = 0; col < d_stride; col += kW) {
              const V xv = GP_LOAD(x + col);
              acc0 += GP_LOAD(d + col) * xv;
              acc1 += GP_LOAD(d + plane + col) * xv;
              acc2 += GP_LOAD(d + 2 * plane + col) * xv;
              acc3 += GP_LOAD(d + 3 * plane + col) * xv;
            }
          }
          const V* const acc[kBlock] = {&acc0, &acc1, &acc2, &acc3};
          for (int64_t b = 0; b < in_block; ++b) {
            dw[(((o0 + b) * channels + c) * kh + i) * kw + j] += vec::hsum(*acc[b]);
          }
        }
      }
    }
  }
}

// The AVX-512 row loop's runs are 32 columns: rows of 16 or fewer fill the AVX2 loop's instead.
bool wide_rows(int64_t width) { return width > kRun && wide_conv_supported(); }

}  // namespace

DirectConv::DirectConv(const VisionWindow& w, int64_t out)
    : w_(w),
      out_(out),
      x_stride_(round_up(w.wo, kStrideRun) + w.kw - 1),
      dy_stride_(round_up(w.w, kStrideRun) + w.kw - 1),
      dy_rows_stride_(round_up(w.wo, 2 * kW)) {  // whole vectors of either loop
  const int64_t padded_x = w.c * (w.h + 2 * w.ph) * x_stride_;
  const int64_t padded_dy = std::max(out * (w.h + w.kh - 1) * dy_stride_,
                                     round_up(out, kWideBlock) * w.ho * dy_rows_stride_);
  const int64_t taps = w.kh * w.kw;
  const int64_t blocks = std::max(kBlock, kWideBlock);
  const int64_t packed = std::max(round_up(out, blocks) * w.c, round_up(w.c, blocks) * out) * taps;
  padded_x_.resize(static_cast<size_t>(padded_x));
  padded_dy_.resize(static_cast<size_t>(padded_dy));
  packed_weight_.resize(static_cast<size_t>(packed));
}

void DirectConv::forward(int64_t batch, const float* x, const float* weight, const float* bias,
                         float* y) const {
  const int64_t rows = w_.h + 2 * w_.ph;
  const bool wide = wide_rows(w_.wo);
  pack_filters(weight, out_, w_.c, w_.kh, w_.kw, /*transposed=*/false, wide ? kWideBlock : kBlock,
               packed_weight_.data());
  const auto rows_of = wide ? conv_rows_wide : conv_rows;
  for (int64_t s = 0; s < batch; ++s) {
    pad_image(x + s * in_n(), w_.c, w_.h, w_.w, w_.ph, w_.pw, rows, x_stride_, padded_x_.data());
    rows_of(padded_x_.data(), w_.c, rows, x_stride_, packed_weight_.data(), out_, w_.kh, w_.kw,
            bias, y + s * out_n(), w_.ho, w_.wo, /*accumulate=*/false);
  }
}

void DirectConv::backward_data(int64_t batch, const float* dy, const float* weight, float* dx,
                               bool accumulate) const {
  // The full correlation: dy padded by kernel - 1 - padding on each side gives [h, w] back.
  const int64_t top = w_.kh - 1 - w_.ph, left = w_.kw - 1 - w_.pw;
  const int64_t rows = w_.h + w_.kh - 1;
  const bool wide = wide_rows(w_.w);
  pack_filters(weight, w_.c, out_, w_.kh, w_.kw, /*transposed=*/true, wide ? kWideBlock : kBlock,
               packed_weight_.data());
  const auto rows_of = wide ? conv_rows_wide : conv_rows;
  for (int64_t s = 0; s < batch; ++s) {
    pad_image(dy + s * out_n(), out_, w_.ho, w_.wo, top, left, rows, dy_stride_, padded_dy_.data());
    rows_of(padded_dy_.data(), out_, rows, dy_stride_, packed_weight_.data(), w_.c, w_.kh, w_.kw,
            nullptr, dx + s * in_n(), w_.h, w_.w, accumulate);
  }
}

void DirectConv::backward_weights(int64_t batch, const float* x, const float* dy,
                                  float* dweight) const {
  const int64_t rows = w_.h + 2 * w_.ph;
  float* dy_rows = padded_dy_.data();
  // The AVX-512 loop serves 3-wide kernels (U-Net's, ResNet's), eight filters at a time.
  const bool wide = w_.kw == 3 && wide_conv_supported();
  // Both loops read whole blocks of filters: the rows past the last filter are zeros.
  std::fill(dy_rows + out_ * w_.ho * dy_rows_stride_,
            dy_rows + round_up(out_, wide ? kWideBlock : kBlock) * w_.ho * dy_rows_stride_, 0.0f);
  for (int64_t s = 0; s < batch; ++s) {
    pad_image(x + s * in_n(), w_.c, w_.h, w_.w, w_.ph, w_.pw, rows, x_stride_, padded_x_.data());
    pad_image(dy + s * out_n(), out_, w_.ho, w_.wo, 0, 0, w_.ho, dy_rows_stride_, dy_rows);
    if (wide) {
      filter_grads_wide3(padded_x_.data(), w_.c, rows, x_stride_, dy_rows, out_, w_.ho,
                         dy_rows_stride_, w_.kh, dweight);
    } else {
      filter_grads(padded_x_.data(), w_.c, rows, x_stride_, dy_rows, out_, w_.ho, dy_rows_stride_,
                   w_.kh, w_.kw, dweight);
    }
  }
}

}  // namespace gp::exec::cpu
