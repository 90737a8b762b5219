// CUDA kernels of the vision family: im2col, bias and input gradients of conv2d, max and average
// pooling, and batch normalisation. Mirrors executor/src/cpu/vision_kernels.cc. Every reduction
// has a fixed order (a thread or block owns its output and loops), so results are deterministic;
// gradients into inputs are gathered (each input cell sums its own contributions, in the order the
// CPU adds them) instead of scattered with atomics.
#include <cstdint>

#include "cuda/vision_launch.h"

namespace gp::exec::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kReduceThreads = 512;  // a multiple of 32 (block_sum works per warp)

unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

__device__ __forceinline__ int64_t grid_start() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_step() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// The sum of v over the block, returned to every thread; all threads must call it. `scratch`
// holds 32 values. Shuffle trees have a fixed order, so the result is deterministic.
template <typename T>
__device__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  __syncthreads();  // a previous call's readers are done with scratch
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = (blockDim.x + 31) >> 5;
    v = lane < warps ? scratch[lane] : T(0);
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

// The output cells [lo, hi] of one axis whose windows contain input coordinate `in`: those o
// with o*stride - pad <= in < o*stride - pad + kernel. Empty when lo > hi.
__device__ __forceinline__ void windows_containing(int64_t in, int64_t kernel, int64_t stride,
                                                   int64_t pad, int64_t out, int64_t* lo,
                                                   int64_t* hi) {
  const int64_t first = in + pad - kernel + 1;
  *lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  const int64_t last = (in + pad) / stride;
  *hi = last < out - 1 ? last : out - 1;
}

// ---- conv2d ------------------------------------------------------------------------------------

__global__ void im2col_kernel(const float* __restrict__ x, float* __restrict__ cols, VisionWindow w,
                              int64_t total) {
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    // e = ((((s*C + c)*kh + i)*kw + j)*Ho + oh)*Wo + ow
    int64_t t = e;
    const int64_t ow = t % w.wo;
    t /= w.wo;
    const int64_t oh = t % w.ho;
    t /= w.ho;
    const int64_t j = t % w.kw;
    t /= w.kw;
    const int64_t i = t % w.kh;
    t /= w.kh;  // t = s*C + c
    const int64_t ih = oh * w.sh - w.ph + i, iw = ow * w.sw - w.pw + j;
    cols[e] = ih >= 0 && ih < w.h && iw >= 0 && iw < w.w ? x[(t * w.h + ih) * w.w + iw] : 0.0f;
  }
}

__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ bias,
                                int64_t channels, int64_t plane, int64_t total) {
  for (int64_t e = grid_start(); e < total; e += grid_step()) y[e] += bias[(e / plane) % channels];
}

// One block per channel; like the CPU, each sample's sum is added into db in sample order.
__global__ void bias_grad_kernel(const float* __restrict__ dy, float* __restrict__ db,
                                 int64_t batch, int64_t channels, int64_t plane) {
  __shared__ float scratch[32];
  for (int64_t o = blockIdx.x; o < channels; o += gridDim.x) {
    float acc = db[o];
    for (int64_t s = 0; s < batch; ++s) {
      const float* row = dy + (s * channels + o) * plane;
      float sum = 0.0f;
      for (int64_t p = threadIdx.x; p < plane; p += blockDim.x) sum += row[p];
      acc += block_sum(sum, scratch);
    }
    if (threadIdx.x == 0) db[o] = acc;
  }
}

// One thread per input cell (s, c, ih, iw): for each kernel tap (i, j), in the CPU's col2im order,
// the one output position that read this cell through the tap contributes sum_o W[o,c,i,j] dy.
__global__ void conv_input_grad_kernel(const float* __restrict__ weight,
                                       const float* __restrict__ dy, float* __restrict__ dx,
                                       VisionWindow w, int64_t out, int64_t groups, int64_t total) {
  const int64_t taps = w.kh * w.kw, out_plane = w.ho * w.wo;
  const int64_t group_c = w.c / groups, group_out = out / groups, patch = group_c * taps;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    int64_t t = e;
    const int64_t iw = t % w.w;
    t /= w.w;
    const int64_t ih = t % w.h;
    t /= w.h;
    const int64_t c = t % w.c;
    const int64_t s = t / w.c;
    const int64_t g = c / group_c;
    const float* dy_s = dy + s * out * out_plane + g * group_out * out_plane;
    const float* weight_g = weight + g * group_out * patch + (c % group_c) * taps;
    float acc = dx[e];
    for (int64_t i = 0; i < w.kh; ++i) {
      const int64_t th = ih + w.ph - i;  // oh * sh
      if (th < 0) break;                 // decreases with i
      if (th % w.sh != 0 || th / w.sh >= w.ho) continue;
      const int64_t oh = th / w.sh;
      for (int64_t j = 0; j < w.kw; ++j) {
        const int64_t tw = iw + w.pw - j;  // ow * sw
        if (tw < 0) break;
        if (tw % w.sw != 0 || tw / w.sw >= w.wo) continue;
        const float* wt = weight_g + i * w.kw + j;
        const float* gy = dy_s + oh * w.wo + tw / w.sw;
        float sum = 0.0f;
        for (int64_t o = 0; o < group_out; ++o) sum += wt[o * patch] * gy[o * out_plane];
        acc += sum;
      }
    }
    dx[e] = acc;
  }
}

// ---- pooling -----------------------------------------------------------------------------------

// Window (oh, ow) clipped to the image: [h0, h1) x [w0, w1).
struct Clipped {
  int64_t h0, h1, w0, w1;
};
__device__ __forceinline__ Clipped clip(const VisionWindow& w, int64_t oh, int64_t ow) {
  const int64_t top = oh * w.sh - w.ph, left = ow * w.sw - w.pw;
  return {top > 0 ? top : 0, top + w.kh < w.h ? top + w.kh : w.h, left > 0 ? left : 0,
          left + w.kw < w.w ? left + w.kw : w.w};
}

// The CPU's scan: row-major over the clipped window, a later cell wins only if strictly greater
// (first maximum; NaN never replaces and is never replaced unless first).
__global__ void max_pool_forward_kernel(const float* __restrict__ x, float* __restrict__ y,
                                        float* __restrict__ idx, VisionWindow w, int64_t total) {
  const int64_t plane = w.h * w.w, out_plane = w.ho * w.wo;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t ow = e % w.wo, oh = (e / w.wo) % w.ho, sc = e / out_plane;
    const float* xp = x + sc * plane;
    const Clipped k = clip(w, oh, ow);
    int64_t best = k.h0 * w.w + k.w0;
    for (int64_t ih = k.h0; ih < k.h1; ++ih) {
      for (int64_t iw = k.w0; iw < k.w1; ++iw) {
        if (xp[ih * w.w + iw] > xp[best]) best = ih * w.w + iw;
      }
    }
    y[e] = xp[best];
    idx[e] = __int_as_float(static_cast<int>(best));
  }
}

// One thread per input cell: adds dy of every window that chose it, in output order (as the CPU).
__global__ void max_pool_backward_kernel(const float* __restrict__ dy,
                                         const float* __restrict__ idx, float* __restrict__ dx,
                                         VisionWindow w, int64_t total) {
  const int64_t plane = w.h * w.w, out_plane = w.ho * w.wo;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t cell = e % plane, ih = cell / w.w, iw = cell % w.w, sc = e / plane;
    int64_t oh0, oh1, ow0, ow1;
    windows_containing(ih, w.kh, w.sh, w.ph, w.ho, &oh0, &oh1);
    windows_containing(iw, w.kw, w.sw, w.pw, w.wo, &ow0, &ow1);
    const float* g = dy + sc * out_plane;
    const float* win = idx + sc * out_plane;
    float acc = dx[e];
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t o = oh * w.wo + ow;
        if (__float_as_int(win[o]) == static_cast<int>(cell)) acc += g[o];
      }
    }
    dx[e] = acc;
  }
}

// With count_include_pad: the window's cells inside the padded image (kh * kw unless a ceil-mode
// window hangs over its far edge), as PyTorch divides; else its image cells.
__device__ __forceinline__ float avg_divisor(const VisionWindow& w, const Clipped& k, int64_t oh,
                                             int64_t ow, bool include_pad) {
  if (!include_pad) return static_cast<float>((k.h1 - k.h0) * (k.w1 - k.w0));
  const int64_t top = oh * w.sh - w.ph, left = ow * w.sw - w.pw;
  const int64_t bottom = top + w.kh < w.h + w.ph ? top + w.kh : w.h + w.ph;
  const int64_t right = left + w.kw < w.w + w.pw ? left + w.kw : w.w + w.pw;
  return static_cast<float>((bottom - top) * (right - left));
}

__global__ void avg_pool_forward_kernel(const float* __restrict__ x, float* __restrict__ y,
                                        VisionWindow w, bool include_pad, int64_t total) {
  const int64_t plane = w.h * w.w, out_plane = w.ho * w.wo;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t ow = e % w.wo, oh = (e / w.wo) % w.ho, sc = e / out_plane;
    const float* xp = x + sc * plane;
    const Clipped k = clip(w, oh, ow);
    float sum = 0.0f;
    for (int64_t ih = k.h0; ih < k.h1; ++ih) {
      for (int64_t iw = k.w0; iw < k.w1; ++iw) sum += xp[ih * w.w + iw];
    }
    y[e] = sum / avg_divisor(w, k, oh, ow, include_pad);
  }
}

__global__ void avg_pool_backward_kernel(const float* __restrict__ dy, float* __restrict__ dx,
                                         VisionWindow w, bool include_pad, int64_t total) {
  const int64_t plane = w.h * w.w, out_plane = w.ho * w.wo;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t cell = e % plane, ih = cell / w.w, iw = cell % w.w, sc = e / plane;
    int64_t oh0, oh1, ow0, ow1;
    windows_containing(ih, w.kh, w.sh, w.ph, w.ho, &oh0, &oh1);
    windows_containing(iw, w.kw, w.sw, w.pw, w.wo, &ow0, &ow1);
    const float* g = dy + sc * out_plane;
    float acc = dx[e];
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        acc += g[oh * w.wo + ow] / avg_divisor(w, clip(w, oh, ow), oh, ow, include_pad);
      }
    }
    dx[e] = acc;
  }
}

// ---- batch norm --------------------------------------------------------------------------------

// Element e of channel c's batch * inner values: sample e / inner, position e % inner.
__device__ __forceinline__ int64_t bn_offset(int64_t e, int64_t c, int64_t channels,
                                             int64_t inner) {
  const int64_t s = e / inner;
  return (s * channels + c) * inner + (e - s * inner);
}

struct BnStats {
  double mean, rstd;
};

// The CPU's two-pass statistics in double (no cancellation for large means); block-wide.
__device__ BnStats bn_stats(const float* __restrict__ x, int64_t c, int64_t channels, int64_t inner,
                            int64_t m, double eps, double* scratch) {
  double sum = 0;
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
    sum += x[bn_offset(e, c, channels, inner)];
  }
  const double mean = block_sum(sum, scratch) / static_cast<double>(m);
  double var = 0;
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
    const double d = x[bn_offset(e, c, channels, inner)] - mean;
    var += d * d;
  }
  var = block_sum(var, scratch);
  return {mean, 1.0 / sqrt(var / static_cast<double>(m) + eps)};
}

// One block per channel: the statistics are over the whole call, so the block sees all of them.
__global__ void batch_norm_forward_kernel(const float* __restrict__ x,
                                          const float* __restrict__ gamma,
                                          const float* __restrict__ beta, float* __restrict__ y,
                                          int64_t batch, int64_t channels, int64_t inner,
                                          double eps) {
  __shared__ double scratch[32];
  const int64_t m = batch * inner;
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    const BnStats st = bn_stats(x, c, channels, inner, m, eps, scratch);
    const double g = gamma[c], b = beta[c];
    for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
      const int64_t off = bn_offset(e, c, channels, inner);
      y[off] = static_cast<float>((x[off] - st.mean) * st.rstd * g + b);
    }
  }
}

// With M = batch * inner and xh = (x - mean) * rstd:
//   dx += gamma * rstd * (dy - sum(dy) / M - xh * sum(dy * xh) / M);
//   dgamma += sum(dy * xh); dbeta += sum(dy).
__global__ void batch_norm_backward_kernel(const float* __restrict__ x,
                                           const float* __restrict__ dy,
                                           const float* __restrict__ gamma, float* __restrict__ dx,
                                           float* __restrict__ dgamma, float* __restrict__ dbeta,
                                           int64_t batch, int64_t channels, int64_t inner,
                                           double eps) {
  __shared__ double scratch[32];
  const int64_t m = batch * inner;
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    const BnStats st = bn_stats(x, c, channels, inner, m, eps, scratch);
    double sum_dy = 0, sum_dy_xh = 0;
    for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
      const int64_t off = bn_offset(e, c, channels, inner);
      sum_dy += dy[off];
      sum_dy_xh += dy[off] * ((x[off] - st.mean) * st.rstd);
    }
    sum_dy = block_sum(sum_dy, scratch);
    sum_dy_xh = block_sum(sum_dy_xh, scratch);
    if (threadIdx.x == 0) {
      if (dgamma != nullptr) dgamma[c] += static_cast<float>(sum_dy_xh);
      if (dbeta != nullptr) dbeta[c] += static_cast<float>(sum_dy);
    }
    if (dx == nullptr) continue;
    const double k = gamma[c] * st.rstd;
    const double mean_dy = sum_dy / static_cast<double>(m);
    const double mean_dy_xh = sum_dy_xh / static_cast<double>(m);
    for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
      const int64_t off = bn_offset(e, c, channels, inner);
      const double xh = (x[off] - st.mean) * st.rstd;
      dx[off] += static_cast<float>(k * (dy[off] - mean_dy - xh * mean_dy_xh));
    }
  }
}

}  // namespace

cudaError_t launch_conv2d_im2col(const float* x, float* cols, const VisionWindow& w, int64_t batch,
                                 cudaStream_t stream) {
  const int64_t total = batch * w.c * w.kh * w.kw * w.ho * w.wo;
  im2col_kernel<<<blocks_for(total), kThreads, 0, stream>>>(x, cols, w, total);
  return cudaGetLastError();
}

cudaError_t launch_conv2d_add_bias(float* y, const float* bias, int64_t batch, int64_t channels,
                                   int64_t plane, cudaStream_t stream) {
  const int64_t total = batch * channels * plane;
  add_bias_kernel<<<blocks_for(total), kThreads, 0, stream>>>(y, bias, channels, plane, total);
  return cudaGetLastError();
}

cudaError_t launch_conv2d_bias_grad(const float* dy, float* db, int64_t batch, int64_t channels,
                                    int64_t plane, cudaStream_t stream) {
  bias_grad_kernel<<<blocks_for(channels, 1), kReduceThreads, 0, stream>>>(dy, db, batch, channels,
                                                                           plane);
  return cudaGetLastError();
}

cudaError_t launch_conv2d_input_grad(const float* weight, const float* dy, float* dx,
                                     const VisionWindow& w, int64_t out, int64_t groups,
                                     int64_t batch, cudaStream_t stream) {
  const int64_t total = batch * w.c * w.h * w.w;
  conv_input_grad_kernel<<<blocks_for(total), kThreads, 0, stream>>>(weight, dy, dx, w, out, groups,
                                                                     total);
  return cudaGetLastError();
}

cudaError_t launch_max_pool2d_forward(const float* x, float* y, float* idx, const VisionWindow& w,
                                      int64_t batch, cudaStream_t stream) {
  const int64_t total = batch * w.c * w.ho * w.wo;
  max_pool_forward_kernel<<<blocks_for(total), kThreads, 0, stream>>>(x, y, idx, w, total);
  return cudaGetLastError();
}

cudaError_t launch_max_pool2d_backward(const float* dy, const float* idx, float* dx,
                                       const VisionWindow& w, int64_t batch, cudaStream_t stream) {
  const int64_t total = batch * w.c * w.h * w.w;
  max_pool_backward_kernel<<<blocks_for(total), kThreads, 0, stream>>>(dy, idx, dx, w, total);
  return cudaGetLastError();
}

cudaError_t launch_avg_pool2d_forward(const float* x, float* y, const VisionWindow& w,
                                      bool include_pad, int64_t batch, cudaStream_t stream) {
  const int64_t total = batch * w.c * w.ho * w.wo;
  avg_pool_forward_kernel<<<blocks_for(total), kThreads, 0, stream>>>(x, y, w, include_pad, total);
  return cudaGetLastError();
}

cudaError_t launch_avg_pool2d_backward(const float* dy, float* dx, const VisionWindow& w,
                                       bool include_pad, int64_t batch, cudaStream_t stream) {
  const int64_t total = batch * w.c * w.h * w.w;
  avg_pool_backward_kernel<<<blocks_for(total), kThreads, 0, stream>>>(dy, dx, w, include_pad,
                                                                       total);
  return cudaGetLastError();
}

cudaError_t launch_batch_norm_forward(const float* x, const float* gamma, const float* beta,
                                      float* y, int64_t batch, int64_t channels, int64_t inner,
                                      double eps, cudaStream_t stream) {
  batch_norm_forward_kernel<<<blocks_for(channels, 1), kReduceThreads, 0, stream>>>(
      x, gamma, beta, y, batch, channels, inner, eps);
  return cudaGetLastError();
}

cudaError_t launch_batch_norm_backward(const float* x, const float* dy, const float* gamma,
                                       float* dx, float* dgamma, float* dbeta, int64_t batch,
                                       int64_t channels, int64_t inner, double eps,
                                       cudaStream_t stream) {
  batch_norm_backward_kernel<<<blocks_for(channels, 1), kReduceThreads, 0, stream>>>(
      x, dy, gamma, dx, dgamma, dbeta, batch, channels, inner, eps);
  return cudaGetLastError();
}

}  // namespace gp::exec::cuda
