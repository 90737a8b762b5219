// __global__ kernels of the simple and layout ops (see simple_launch.h). They mirror the CPU
// reference formulas operation by operation; products that the CPU rounds before an addition use
// __fmul_rn so that nvcc does not contract them into FMAs (which would round differently).
#include <cuda_runtime.h>

#include "cuda/simple_launch.h"

namespace gp::exec::cuda {
namespace {

constexpr int kBlock = 256;  // threads per block
constexpr int kWarp = 32;
constexpr int64_t kMaxBlocks = 65535 * 8;  // grid-stride loops cover the rest
// Rows up to this long get one warp each; longer ones a whole block.
constexpr int64_t kWarpRowLimit = 512;

unsigned grid_for(int64_t items, int64_t per_block) {
  const int64_t b = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

// Grid-stride index over [0, n).
#define GP_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// Reduces v over the kTpr consecutive threads that share a row (a warp, or the whole block when
// kTpr == kBlock, in which case every thread of the block must call it); all of them get the
// result. smem holds kBlock / kWarp floats.
template <int kTpr, class Op>
__device__ float row_reduce(float v, Op op, float* smem) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (kTpr > kWarp) {
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    __syncthreads();  // the previous reduction's readers are done with smem
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    v = smem[0];
    for (int w = 1; w < kTpr / kWarp; ++w) v = op(v, smem[w]);
  }
  return v;
}

// Loops row r over [0, rows) with kTpr threads per row; t is the thread's index within its row.
// With kTpr == kBlock all threads of a block see the same trip count (row_reduce syncs).
#define GP_ROW_LOOP(kTpr, r, t, rows)                                                           \
  const int t = threadIdx.x % (kTpr);                                                           \
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (kBlock / (kTpr)) + threadIdx.x / (kTpr); \
       r < (rows); r += static_cast<int64_t>(gridDim.x) * (kBlock / (kTpr)))

// GELU, tanh approximation, evaluated in the CPU reference's order (cpu/kernel_util.h).
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

__device__ float gelu_tanh(float x) {
  // tanh(kGeluC * (x + kGeluA * x * x * x)), without contraction.
  const float cube = __fmul_rn(__fmul_rn(__fmul_rn(kGeluA, x), x), x);
  return tanhf(__fmul_rn(kGeluC, __fadd_rn(x, cube)));
}

__device__ float gelu(float x) { return __fmul_rn(__fmul_rn(0.5f, x), 1.0f + gelu_tanh(x)); }

__device__ float gelu_grad(float x) {
  const float t = gelu_tanh(x);
  const float left = __fmul_rn(0.5f, 1.0f + t);
  const float sech2 = __fsub_rn(1.0f, __fmul_rn(t, t));
  const float poly = __fadd_rn(1.0f, __fmul_rn(__fmul_rn(3.0f * kGeluA, x), x));
  const float right = __fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(0.5f, x), sech2), kGeluC), poly);
  return __fadd_rn(left, right);
}

// GELU, exact, in the CPU reference's order (cpu/vec_math.cc): 0.5 x (1 + erf(x / sqrt 2)).
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

__device__ float gelu_exact(float x) {
  return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, erff(__fmul_rn(x, kInvSqrt2))));
}

__device__ float gelu_exact_grad(float x) {
  const float cdf = __fmul_rn(0.5f, __fadd_rn(1.0f, erff(__fmul_rn(x, kInvSqrt2))));
  const float pdf = __fmul_rn(kInvSqrt2Pi, expf(__fmul_rn(__fmul_rn(-0.5f, x), x)));
  return __fadd_rn(cdf, __fmul_rn(x, pdf));
}

__device__ int64_t load_label(const void* labels, int64_t r, bool labels32) {
  return labels32 ? static_cast<int64_t>(static_cast<const int32_t*>(labels)[r])
                  : static_cast<const int64_t*>(labels)[r];
}

// Label r, trapping when it is outside [0, classes): the CPU reference aborts on such a label
// and a kernel has no better way to fail (the error surfaces at the next synchronize).
__device__ int64_t checked_label(const void* labels, int64_t r, bool labels32, int64_t classes) {
  const int64_t l = load_label(labels, r, labels32);
  if (l < 0 || l >= classes) __trap();
  return l;
}

// ---- Element-wise ----

__global__ void relu_forward_kernel(const float* x, float* y, int64_t n) {
  GP_GRID_STRIDE(i, n) { y[i] = x[i] > 0 ? x[i] : 0.0f; }
}

__global__ void relu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n) {
  GP_GRID_STRIDE(i, n) { dx[i] += x[i] > 0 ? dy[i] : 0.0f; }
}

__global__ void gelu_forward_kernel(const float* x, float* y, int64_t n, bool exact) {
  GP_GRID_STRIDE(i, n) { y[i] = exact ? gelu_exact(x[i]) : gelu(x[i]); }
}

__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n,
                                     bool exact) {
  GP_GRID_STRIDE(i, n) {
    dx[i] += __fmul_rn(dy[i], exact ? gelu_exact_grad(x[i]) : gelu_grad(x[i]));
  }
}

__global__ void scale_kernel(const float* x, float* y, float factor, int64_t n) {
  GP_GRID_STRIDE(i, n) { y[i] = factor * x[i]; }
}

__global__ void accumulate_kernel(const float* x, float* y, float alpha, int64_t n) {
  GP_GRID_STRIDE(i, n) { y[i] += __fmul_rn(alpha, x[i]); }
}

template <bool kAccumulate>
__global__ void copy_blocks_kernel(const float* src, int64_t src_pitch, float* dst,
                                   int64_t dst_pitch, int64_t width, int64_t n) {
  GP_GRID_STRIDE(i, n) {
    const int64_t b = i / width, c = i - b * width;
    const float v = src[b * src_pitch + c];
    if constexpr (kAccumulate) {
      dst[b * dst_pitch + c] += v;
    } else {
      dst[b * dst_pitch + c] = v;
    }
  }
}

// ---- Per-row reductions ----

// Like the CPU's softmax_row: max (fmax, seeded with the row's first element), exponentials
// written to y and summed, then y scaled by 1 / sum.
template <int kTpr>
__global__ void softmax_forward_kernel(const float* x, float* y, int64_t rows, int64_t cols) {
  __shared__ float smem[kBlock / kWarp];
  GP_ROW_LOOP(kTpr, r, t, rows) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float mx = xr[0];
    for (int64_t j = t; j < cols; j += kTpr) mx = fmaxf(mx, xr[j]);
    mx = row_reduce<kTpr>(mx, MaxOp{}, smem);
    float sum = 0;
    for (int64_t j = t; j < cols; j += kTpr) {
      const float e = expf(xr[j] - mx);
      yr[j] = e;
      sum += e;
    }
    sum = row_reduce<kTpr>(sum, SumOp{}, smem);
    const float inv = 1.0f / sum;
    for (int64_t j = t; j < cols; j += kTpr) yr[j] *= inv;  // this thread's own writes
  }
}

template <int kTpr>
__global__ void softmax_backward_kernel(const float* y, const float* dy, float* dx, int64_t rows,
                                        int64_t cols) {
  __shared__ float smem[kBlock / kWarp];
  GP_ROW_LOOP(kTpr, r, t, rows) {
    const float* yr = y + r * cols;
    const float* dyr = dy + r * cols;
    float* dxr = dx + r * cols;
    float dot = 0;
    for (int64_t j = t; j < cols; j += kTpr) dot += __fmul_rn(dyr[j], yr[j]);
    dot = row_reduce<kTpr>(dot, SumOp{}, smem);
    for (int64_t j = t; j < cols; j += kTpr) dxr[j] += __fmul_rn(yr[j], dyr[j] - dot);
  }
}

template <int kTpr>
__global__ void mse_loss_forward_kernel(const float* pred, const float* target, float* loss,
                                        int64_t batch, int64_t n) {
  __shared__ float smem[kBlock / kWarp];
  GP_ROW_LOOP(kTpr, s, t, batch) {
    const float* p = pred + s * n;
    const float* q = target + s * n;
    // Each thread's share in double (as the CPU), the few partial sums then in float.
    double part = 0;
    for (int64_t i = t; i < n; i += kTpr) {
      const double d = static_cast<double>(p[i]) - static_cast<double>(q[i]);
      part += d * d;
    }
    const float sum = row_reduce<kTpr>(static_cast<float>(part), SumOp{}, smem);
    if (t == 0) loss[s] = sum / static_cast<float>(n);
  }
}

__global__ void mse_loss_backward_kernel(const float* pred, const float* target, const float* dloss,
                                         float* dpred, float* dtarget, int64_t batch, int64_t n) {
  GP_GRID_STRIDE(i, batch * n) {
    const float scale = 2.0f * dloss[i / n] / static_cast<float>(n);
    const float g = __fmul_rn(scale, pred[i] - target[i]);
    if (dpred != nullptr) dpred[i] += g;
    if (dtarget != nullptr) dtarget[i] -= g;
  }
}

// Per row: lse = max + log(sum exp(z - max)) (as the CPU: fmax seeded with z[0]) and the row's
// loss term lse - z[label].
template <int kTpr>
__global__ void cross_entropy_rows_kernel(const float* z, const void* labels, bool labels32,
                                          float* lse, float* terms, int64_t rows, int64_t classes) {
  __shared__ float smem[kBlock / kWarp];
  GP_ROW_LOOP(kTpr, r, t, rows) {
    const float* zr = z + r * classes;
    float mx = zr[0];
    for (int64_t j = t; j < classes; j += kTpr) mx = fmaxf(mx, zr[j]);
    mx = row_reduce<kTpr>(mx, MaxOp{}, smem);
    float e = 0;
    for (int64_t j = t; j < classes; j += kTpr) e += expf(zr[j] - mx);
    e = row_reduce<kTpr>(e, SumOp{}, smem);
    if (t == 0) {
      const float l = mx + logf(e);
      lse[r] = l;
      terms[r] = l - zr[checked_label(labels, r, labels32, classes)];
    }
  }
}

// loss[s] = (sum of the sample's terms, in position order as the CPU) / positions.
__global__ void cross_entropy_loss_kernel(const float* terms, float* loss, int64_t batch,
                                          int64_t positions) {
  GP_GRID_STRIDE(s, batch) {
    double sum = 0;
    for (int64_t p = 0; p < positions; ++p) sum += static_cast<double>(terms[s * positions + p]);
    loss[s] = static_cast<float>(sum / static_cast<double>(positions));
  }
}

// dz[j] += g * exp(z[j] - lse), then dz[label] -= g, with g = dloss[s] / positions; one thread
// per element does both steps for its element, in the CPU's order.
__global__ void cross_entropy_backward_kernel(const float* z, const void* labels, bool labels32,
                                              const float* lse, const float* dloss, float* dz,
                                              int64_t positions, int64_t classes, int64_t n) {
  GP_GRID_STRIDE(i, n) {
    const int64_t r = i / classes, j = i - r * classes;
    const float g = dloss[r / positions] / static_cast<float>(positions);
    float v = dz[i] + __fmul_rn(g, expf(z[i] - lse[r]));
    if (j == checked_label(labels, r, labels32, classes)) v -= g;
    dz[i] = v;
  }
}

// ---- Transpose ----

__device__ int64_t transpose_source(const TransposeStrides& st, int64_t o) {
  int64_t src = 0;
  for (int d = 0; d < st.rank; ++d) {
    src += (o / st.out[d]) * st.src[d];
    o %= st.out[d];
  }
  return src;
}

__global__ void transpose_forward_kernel(const float* x, float* y, TransposeStrides st,
                                         int64_t n_in, int64_t n_out, int64_t total) {
  GP_GRID_STRIDE(i, total) {
    const int64_t s = i / n_out;
    y[i] = x[s * n_in + st.base + transpose_source(st, i - s * n_out)];
  }
}

// A permutation: every input element has at most one writer, so no atomics are needed.
__global__ void transpose_backward_kernel(const float* dy, float* dx, TransposeStrides st,
                                          int64_t n_in, int64_t n_out, int64_t total) {
  GP_GRID_STRIDE(i, total) {
    const int64_t s = i / n_out;
    dx[s * n_in + st.base + transpose_source(st, i - s * n_out)] += dy[i];
  }
}

}  // namespace

cudaError_t launch_relu_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  relu_forward_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_relu_backward(const float* x, const float* dy, float* dx, int64_t n,
                                 cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  relu_backward_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(x, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t launch_gelu_forward(const float* x, float* y, int64_t n, bool exact,
                                cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  gelu_forward_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(x, y, n, exact);
  return cudaGetLastError();
}

cudaError_t launch_gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool exact,
                                 cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  gelu_backward_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(x, dy, dx, n, exact);
  return cudaGetLastError();
}

cudaError_t launch_scale(const float* x, float* y, float factor, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  scale_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(x, y, factor, n);
  return cudaGetLastError();
}

cudaError_t launch_accumulate(const float* x, float* y, float alpha, int64_t n,
                              cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  accumulate_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(x, y, alpha, n);
  return cudaGetLastError();
}

cudaError_t launch_softmax_forward(const float* x, float* y, int64_t rows, int64_t cols,
                                   cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (cols <= kWarpRowLimit) {
    softmax_forward_kernel<kWarp>
        <<<grid_for(rows, kBlock / kWarp), kBlock, 0, stream>>>(x, y, rows, cols);
  } else {
    softmax_forward_kernel<kBlock><<<grid_for(rows, 1), kBlock, 0, stream>>>(x, y, rows, cols);
  }
  return cudaGetLastError();
}

cudaError_t launch_softmax_backward(const float* y, const float* dy, float* dx, int64_t rows,
                                    int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (cols <= kWarpRowLimit) {
    softmax_backward_kernel<kWarp>
        <<<grid_for(rows, kBlock / kWarp), kBlock, 0, stream>>>(y, dy, dx, rows, cols);
  } else {
    softmax_backward_kernel<kBlock>
        <<<grid_for(rows, 1), kBlock, 0, stream>>>(y, dy, dx, rows, cols);
  }
  return cudaGetLastError();
}

cudaError_t launch_copy_blocks(const float* src, int64_t src_pitch, float* dst, int64_t dst_pitch,
                               int64_t blocks, int64_t width, bool accumulate,
                               cudaStream_t stream) {
  const int64_t n = blocks * width;
  if (blocks <= 0 || width <= 0) return cudaSuccess;
  if (accumulate) {
    copy_blocks_kernel<true>
        <<<grid_for(n, kBlock), kBlock, 0, stream>>>(src, src_pitch, dst, dst_pitch, width, n);
  } else {
    copy_blocks_kernel<false>
        <<<grid_for(n, kBlock), kBlock, 0, stream>>>(src, src_pitch, dst, dst_pitch, width, n);
  }
  return cudaGetLastError();
}

cudaError_t launch_mse_loss_forward(const float* pred, const float* target, float* loss,
                                    int64_t batch, int64_t n, cudaStream_t stream) {
  if (batch <= 0) return cudaSuccess;
  if (n <= kWarpRowLimit) {
    mse_loss_forward_kernel<kWarp>
        <<<grid_for(batch, kBlock / kWarp), kBlock, 0, stream>>>(pred, target, loss, batch, n);
  } else {
    mse_loss_forward_kernel<kBlock>
        <<<grid_for(batch, 1), kBlock, 0, stream>>>(pred, target, loss, batch, n);
  }
  return cudaGetLastError();
}

cudaError_t launch_mse_loss_backward(const float* pred, const float* target, const float* dloss,
                                     float* dpred, float* dtarget, int64_t batch, int64_t n,
                                     cudaStream_t stream) {
  if (batch <= 0 || n <= 0 || (dpred == nullptr && dtarget == nullptr)) return cudaSuccess;
  mse_loss_backward_kernel<<<grid_for(batch * n, kBlock), kBlock, 0, stream>>>(
      pred, target, dloss, dpred, dtarget, batch, n);
  return cudaGetLastError();
}

cudaError_t launch_cross_entropy_forward(const float* z, const void* labels, bool labels32,
                                         float* lse, float* terms, float* loss, int64_t batch,
                                         int64_t positions, int64_t classes, cudaStream_t stream) {
  const int64_t rows = batch * positions;
  if (batch <= 0) return cudaSuccess;
  if (rows > 0 && classes > 0) {
    if (classes <= kWarpRowLimit) {
      cross_entropy_rows_kernel<kWarp><<<grid_for(rows, kBlock / kWarp), kBlock, 0, stream>>>(
          z, labels, labels32, lse, terms, rows, classes);
    } else {
      cross_entropy_rows_kernel<kBlock><<<grid_for(rows, 1), kBlock, 0, stream>>>(
          z, labels, labels32, lse, terms, rows, classes);
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  cross_entropy_loss_kernel<<<grid_for(batch, kBlock), kBlock, 0, stream>>>(terms, loss, batch,
                                                                            positions);
  return cudaGetLastError();
}

cudaError_t launch_cross_entropy_backward(const float* z, const void* labels, bool labels32,
                                          const float* lse, const float* dloss, float* dz,
                                          int64_t batch, int64_t positions, int64_t classes,
                                          cudaStream_t stream) {
  const int64_t n = batch * positions * classes;
  if (n <= 0) return cudaSuccess;
  cross_entropy_backward_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(
      z, labels, labels32, lse, dloss, dz, positions, classes, n);
  return cudaGetLastError();
}

cudaError_t launch_transpose_forward(const float* x, float* y, const TransposeStrides& strides,
                                     int64_t batch, int64_t n_in, int64_t n_out,
                                     cudaStream_t stream) {
  const int64_t total = batch * n_out;
  if (total <= 0) return cudaSuccess;
  transpose_forward_kernel<<<grid_for(total, kBlock), kBlock, 0, stream>>>(x, y, strides, n_in,
                                                                           n_out, total);
  return cudaGetLastError();
}

cudaError_t launch_transpose_backward(const float* dy, float* dx, const TransposeStrides& strides,
                                      int64_t batch, int64_t n_in, int64_t n_out,
                                      cudaStream_t stream) {
  const int64_t total = batch * n_out;
  if (total <= 0) return cudaSuccess;
  transpose_backward_kernel<<<grid_for(total, kBlock), kBlock, 0, stream>>>(dy, dx, strides, n_in,
                                                                            n_out, total);
  return cudaGetLastError();
}

}  // namespace gp::exec::cuda
