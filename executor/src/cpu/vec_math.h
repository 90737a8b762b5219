// Vectorised row and element-wise loops of the CPU kernels (private to gp_cpu).
//
// Each function is compiled twice on x86-64, for AVX2 + FMA (x86-64-v3) and for the baseline,
// and picked once at load time (target_clones), so one binary runs anywhere and uses the wide
// units where they exist. Within a function every element goes through the same 8-wide code (a
// partial last chunk is padded, not looped scalar), so a result does not depend on where an
// element sits in its row. exp is a Cephes-style polynomial (relative error < 2e-7 over the
// float range; arguments below -87.3 give 0, above 88.37 are clamped) and GELU is computed through
// it without cancellation (relative error a few 1e-7): tight enough for the kernels to stay the
// numerical reference that finite differences and the CUDA kernels are checked against. Row
// reductions (sums, maxima) keep 8 partial results and add them at the end.
#pragma once

#include <cstdint>

namespace gp::exec::cpu::vec {

// GELU, tanh approximation: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). y may be x.
void gelu(const float* x, float* y, int64_t n);
// dx = dy * gelu'(x), added to dx when accumulate, else written. dx may be dy unless accumulate.
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate);
// GELU, exact (torch's nn.GELU()): y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)). y may be x.
void gelu_exact(const float* x, float* y, int64_t n);
// y = erf(x), within 4e-7 of the exact value (a rational approximation). y may be x.
void erf(const float* x, float* y, int64_t n);
// dx = dy * (Phi(x) + x phi(x)), added to dx when accumulate, else written.
void gelu_exact_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate);
// y = max(x, 0). y may be x.
void relu(const float* x, float* y, int64_t n);
// dx = (y > 0 ? dy : 0), added when accumulate, else written; y is relu's input or output.
void relu_backward(const float* y, const float* dy, float* dx, int64_t n, bool accumulate);
// y = 1 / (1 + exp(-x)). y may be x.
void sigmoid(const float* x, float* y, int64_t n);
// y[i] += x[i].
void add_into(float* y, const float* x, int64_t n);
// y[i] = a[i] + b[i] (one pass, where a copy then add_into would be two).
void add(const float* a, const float* b, float* y, int64_t n);

// Numerically stable softmax of each of `rows` contiguous rows of n floats, in place.
void softmax_rows(float* x, int64_t rows, int64_t n);
// Per row: dx = y * (dy - sum_j dy[j] y[j]) from softmax's output y, added to dx when
// accumulate, else written (then dx may be dy).
void softmax_rows_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t n,
                           bool accumulate);
// log(sum_j exp(z[j])) of one row, max-subtracted.
float log_sum_exp(const float* z, int64_t n);
// dz[j] += g * exp(z[j] - lse): the softmax part of the cross-entropy gradient of one row.
void add_scaled_softmax(const float* z, float lse, float g, float* dz, int64_t n);

// Layer norm over rows of n: y = (x - mean) * rstd * gamma + beta with the biased variance
// (two passes, so no cancellation for large means); stats[2r] = mean, stats[2r + 1] = rstd.
// A null gamma is 1, a null beta 0.
void layer_norm(const float* x, const float* gamma, const float* beta, float* y, float* stats,
                int64_t rows, int64_t n, float eps);
// Its backward from the saved stats, with xh = (x - mean) rstd and g = dy gamma:
// dx += rstd (g - mean(g) - xh mean(g xh)); dgamma += dy xh; dbeta += dy. Null outputs are
// skipped; a null gamma is 1.
void layer_norm_backward(const float* x, const float* dy, const float* gamma, const float* stats,
                         float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t n);

// m[r, :] += bias for each of `rows` rows of `cols`.
void add_bias_rows(float* m, int64_t rows, int64_t cols, const float* bias);
// out[:] += the column sums of the row-major [rows, cols] matrix m.
void add_column_sums(const float* m, int64_t rows, int64_t cols, float* out);
// The sum of x[0, n), in 8 partial sums added at the end.
float sum(const float* x, int64_t n);

}  // namespace gp::exec::cpu::vec
