// AVX-512 variants of the direct convolution's loops (direct_conv.cc), picked at run time where
// the CPU has x86-64-v4: 16-float vectors and the 32 vector registers hold eight filters' sums at
// once, so each load of the input (or of the output gradient) serves eight filters.
#pragma once

#include <cstdint>

namespace gp::exec::cpu {

constexpr int64_t kWideBlock = 8;  // filters per block of the packed weights
constexpr int64_t kWideRun = 32;   // output columns per run (two vectors)

// True where conv_rows_wide may run (an x86-64 CPU with AVX-512 F, BW, CD, DQ and VL).
bool wide_conv_supported();

// The row loop: eight filters and 32 columns in 16 registers. Every output sums its terms in the
// same order as the AVX2 loop, so both give the same bits.
// y [filters, ho, wo] (=, or += when accumulate) sum over (c, i, j) of packed filter
// (o; c, i, j) * xp[c, r + i, col + j], plus bias[o] when given. `packed` is in blocks of
// kWideBlock filters; xp is [channels, rows, stride] with stride >= round_up(wo, kWideRun) + kw - 1
// and rows >= ho + kh - 1.
void conv_rows_wide(const float* xp, int64_t channels, int64_t rows, int64_t stride,
                    const float* packed, int64_t filters, int64_t kh, int64_t kw, const float* bias,
                    float* y, int64_t ho, int64_t wo, bool accumulate);

// dw[o, c, i, j] += sum over (r, col) of dy_rows[o, r, col] * xp[c, r + i, col + j] for 3-wide
// kernels: dy_rows is [round_up(filters, kWideBlock), ho, d_stride] with zeros past wo and past
// the last filter, d_stride a multiple of 16 and xp's stride >= d_stride + 2. The three taps of a
// kernel row share each load of dy. Sums run over 16-float vectors, so the weight gradients'
// last bits differ from the AVX2 loop's (8-float vectors).
void filter_grads_wide3(const float* xp, int64_t channels, int64_t rows, int64_t x_stride,
                        const float* dy_rows, int64_t filters, int64_t ho, int64_t d_stride,
                        int64_t kh, float* dw);

}  // namespace gp::exec::cpu
