// __global__ kernels of the dense family (linear, embedding bag, attention, layer norm) behind the
// launch functions of dense_launch.h. GEMMs are not here: the host code calls cuBLAS through
// gemm()/gemm_batched(). Element-wise kernels use grid-stride loops; per-row reductions use one
// block per row; reductions over the batch into parameter gradients use a fixed order (no float
// atomics) except the embedding-bag scatter.
#include <cmath>
#include <cstdio>

#include "cuda/dense_launch.h"

namespace gp::exec::cuda {
namespace {

constexpr int kThreads = 256;
// Column-sum blocks: 32 columns (one warp, coalesced rows) by kColRows row lanes.
constexpr int kColRows = 32;

unsigned grid_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

// One block per row (grid-stride over rows beyond the cap); threads sized to the row so short
// rows (attention over short sequences) do not idle most of a 256-thread block.
unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(rows > (1 << 20) ? (1 << 20) : rows);
}
int row_threads(int64_t cols) {
  return cols <= 32 ? 32 : cols <= 64 ? 64 : cols <= 128 ? 128 : 256;
}

// Same constants and function as the CPU reference (cpu/vec_math.cc, which evaluates it as
// x * sigmoid(2u) to keep the digits 1 + tanh(u) loses where tanh(u) is near -1; there the two
// differ in relative, not absolute, terms, well inside the CUDA-vs-CPU tolerances).
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;
__device__ float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluC * (x + kGeluA * x * x * x)));
}
__device__ float gelu_grad(float x) {
  const float t = tanhf(kGeluC * (x + kGeluA * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * x * x);
}

// Block-wide sum / max (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// The leading barrier lets consecutive calls reuse `shm` safely.
__device__ float block_sum(float v, float* shm) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) shm[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) t += shm[w];
  return t;
}
__device__ float block_max(float v, float* shm) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) shm[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = shm[0];
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) t = fmaxf(t, shm[w]);
  return t;
}

__device__ int64_t load_id(const void* ids, int64_t k, bool ids32) {
  return ids32 ? static_cast<int64_t>(static_cast<const int32_t*>(ids)[k])
               : static_cast<const int64_t*>(ids)[k];
}

// The CPU reference aborts on an out-of-range id; trapping is the device equivalent (the error
// surfaces at the next synchronization) rather than reading or writing out of bounds.
__device__ int64_t checked_row(const void* ids, int64_t k, bool ids32, int64_t num_rows) {
  const int64_t id = load_id(ids, k, ids32);
  if (id < 0 || id >= num_rows) {
    printf("embedding_bag: id %lld out of range [0, %lld)\n", static_cast<long long>(id),
           static_cast<long long>(num_rows));
    __trap();
  }
  return id;
}

// ---- linear ------------------------------------------------------------------------------------

__global__ void linear_bias_act_kernel(float* z, float* y, const float* bias, int64_t n,
                                       int64_t cols, int act) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = z[i];
    if (bias != nullptr) v += bias[i % cols];
    if (act == kDenseActRelu) {
      y[i] = v > 0 ? v : 0.0f;
    } else if (act == kDenseActGelu) {
      z[i] = v;
      y[i] = gelu(v);
    } else {
      y[i] = v;
    }
  }
}

__global__ void linear_act_backward_kernel(const float* dy, const float* y, const float* z,
                                           float* dz, int64_t n, int act) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dz[i] = act == kDenseActRelu ? (y[i] > 0 ? dy[i] : 0.0f) : dy[i] * gelu_grad(z[i]);
  }
}

__global__ void add_bias_rows_kernel(float* m, const float* bias, int64_t n, int64_t cols) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    m[i] += bias[i % cols];
  }
}

// Block (32, kColRows) owns 32 columns: lane y sums rows y, y + kColRows, ... in order, then lane
// 0 adds the kColRows partials in order, so the result does not depend on scheduling.
__global__ void add_column_sums_kernel(const float* m, int64_t rows, int64_t cols, float* out) {
  __shared__ float part[kColRows][33];
  const int64_t j = blockIdx.x * 32LL + threadIdx.x;
  float s = 0;
  if (j < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kColRows) s += m[r * cols + j];
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    float t = 0;
    for (int y = 0; y < kColRows; ++y) t += part[y][threadIdx.x];
    out[j] += t;
  }
}

// ---- embedding bag -----------------------------------------------------------------------------

// 1 for a sum; for a mean 1 / the bag's ids that are not padding (0 when none), as the CPU.
__device__ float bag_scale(const void* ids, bool ids32, int64_t g, int64_t bag_size, bool mean,
                           int64_t padding) {
  if (!mean) return 1.0f;
  int64_t count = 0;
  for (int64_t k = 0; k < bag_size; ++k) count += load_id(ids, g * bag_size + k, ids32) != padding;
  return count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
}

// One thread per output element; the ids of its bag are summed in order, then scaled, exactly as
// the CPU reference does.
__global__ void embedding_bag_forward_kernel(const void* ids, bool ids32, const float* w, float* y,
                                             int64_t n, int64_t bag_size, int64_t num_rows,
                                             int64_t dim, bool mean, int64_t padding) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t g = i / dim, j = i % dim;
    float acc = 0;
    for (int64_t k = 0; k < bag_size; ++k) {
      if (load_id(ids, g * bag_size + k, ids32) == padding) continue;
      acc += w[checked_row(ids, g * bag_size + k, ids32, num_rows) * dim + j];
    }
    y[i] = acc * bag_scale(ids, ids32, g, bag_size, mean, padding);
  }
}

// One thread per (bag, id, column). Ids repeat across bags, so the scatter needs atomics (the
// gradient is correct but its float summation order, hence its last bits, is not deterministic).
__global__ void embedding_bag_backward_kernel(const void* ids, bool ids32, const float* dy,
                                              float* dw, int64_t n, int64_t bag_size,
                                              int64_t num_rows, int64_t dim, bool mean,
                                              int64_t padding) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t gk = i / dim, j = i % dim, g = gk / bag_size;
    if (load_id(ids, gk, ids32) == padding) continue;
    const float scale = bag_scale(ids, ids32, g, bag_size, mean, padding);
    atomicAdd(dw + checked_row(ids, gk, ids32, num_rows) * dim + j, scale * dy[g * dim + j]);
  }
}

// ---- softmax rows (attention) ------------------------------------------------------------------

__global__ void softmax_rows_kernel(float* p, int64_t rows, int64_t cols) {
  __shared__ float shm[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* row = p + r * cols;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) mx = fmaxf(mx, row[j]);
    mx = block_max(mx, shm);
    float sum = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float e = expf(row[j] - mx);
      row[j] = e;
      sum += e;
    }
    const float inv = 1.0f / block_sum(sum, shm);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) row[j] *= inv;
  }
}

__global__ void softmax_rows_backward_kernel(const float* p, float* dp, int64_t rows,
                                             int64_t cols) {
  __shared__ float shm[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* pr = p + r * cols;
    float* dr = dp + r * cols;
    float dot = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dot += dr[j] * pr[j];
    dot = block_sum(dot, shm);  // its barriers order every read of dr before the writes below
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dr[j] = pr[j] * (dr[j] - dot);
  }
}

// ---- layer norm --------------------------------------------------------------------------------

// Two passes over the row (mean, then the centred variance) like the CPU reference, so large means
// do not cancel. A null gamma is 1 and a null beta 0 (a LayerNorm without them).
__global__ void layer_norm_forward_kernel(const float* x, const float* gamma, const float* beta,
                                          float* y, float* stats, int64_t rows, int64_t cols,
                                          float eps) {
  __shared__ float shm[32];
  const float inv_n = 1.0f / static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float s = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += xr[j];
    const float mean = block_sum(s, shm) * inv_n;
    float v = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float c = xr[j] - mean;
      v += c * c;
    }
    const float rstd = 1.0f / sqrtf(block_sum(v, shm) * inv_n + eps);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      yr[j] = (xr[j] - mean) * rstd * (gamma != nullptr ? gamma[j] : 1.0f) +
              (beta != nullptr ? beta[j] : 0.0f);
    }
    if (threadIdx.x == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = rstd;
    }
  }
}

__global__ void layer_norm_backward_input_kernel(const float* x, const float* dy,
                                                 const float* gamma, const float* stats, float* dx,
                                                 int64_t rows, int64_t cols) {
  __shared__ float shm[32];
  const float inv_n = 1.0f / static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    float* dxr = dx + r * cols;
    const float mean = stats[2 * r], rstd = stats[2 * r + 1];
    float sg = 0, sgx = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float xh = (xr[j] - mean) * rstd;
      const float g = dyr[j] * (gamma != nullptr ? gamma[j] : 1.0f);
      sg += g;
      sgx += g * xh;
    }
    const float mean_g = block_sum(sg, shm) * inv_n;
    const float mean_gx = block_sum(sgx, shm) * inv_n;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float xh = (xr[j] - mean) * rstd;
      dxr[j] += rstd * (dyr[j] * (gamma != nullptr ? gamma[j] : 1.0f) - mean_g - xh * mean_gx);
    }
  }
}

// Same fixed-order column reduction as add_column_sums_kernel, for dgamma and dbeta at once.
__global__ void layer_norm_backward_params_kernel(const float* x, const float* dy,
                                                  const float* stats, float* dgamma, float* dbeta,
                                                  int64_t rows, int64_t cols) {
  __shared__ float part_g[kColRows][33];
  __shared__ float part_b[kColRows][33];
  const int64_t j = blockIdx.x * 32LL + threadIdx.x;
  float sg = 0, sb = 0;
  if (j < cols) {
    for (int64_t r = threadIdx.y; r < rows; r += kColRows) {
      const float d = dy[r * cols + j];
      sg += d * ((x[r * cols + j] - stats[2 * r]) * stats[2 * r + 1]);
      sb += d;
    }
  }
  part_g[threadIdx.y][threadIdx.x] = sg;
  part_b[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    float tg = 0, tb = 0;
    for (int y = 0; y < kColRows; ++y) {
      tg += part_g[y][threadIdx.x];
      tb += part_b[y][threadIdx.x];
    }
    if (dgamma != nullptr) dgamma[j] += tg;
    if (dbeta != nullptr) dbeta[j] += tb;
  }
}

dim3 column_grid(int64_t cols) { return dim3(static_cast<unsigned>((cols + 31) / 32)); }

}  // namespace

cudaError_t launch_linear_bias_act(float* z, float* y, const float* bias, int64_t rows,
                                   int64_t cols, int act, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  linear_bias_act_kernel<<<grid_for(n), kThreads, 0, stream>>>(z, y, bias, n, cols, act);
  return cudaGetLastError();
}

cudaError_t launch_linear_act_backward(const float* dy, const float* y, const float* z, float* dz,
                                       int64_t n, int act, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  linear_act_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(dy, y, z, dz, n, act);
  return cudaGetLastError();
}

cudaError_t launch_add_bias_rows(float* m, const float* bias, int64_t rows, int64_t cols,
                                 cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  add_bias_rows_kernel<<<grid_for(n), kThreads, 0, stream>>>(m, bias, n, cols);
  return cudaGetLastError();
}

cudaError_t launch_add_column_sums(const float* m, int64_t rows, int64_t cols, float* out,
                                   cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  add_column_sums_kernel<<<column_grid(cols), dim3(32, kColRows), 0, stream>>>(m, rows, cols, out);
  return cudaGetLastError();
}

cudaError_t launch_embedding_bag_forward(const void* ids, bool ids32, const float* w, float* y,
                                         int64_t groups, int64_t bag_size, int64_t num_rows,
                                         int64_t dim, bool mean, int64_t padding,
                                         cudaStream_t stream) {
  const int64_t n = groups * dim;
  if (n == 0) return cudaSuccess;
  embedding_bag_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(ids, ids32, w, y, n, bag_size,
                                                                     num_rows, dim, mean, padding);
  return cudaGetLastError();
}

cudaError_t launch_embedding_bag_backward(const void* ids, bool ids32, const float* dy, float* dw,
                                          int64_t groups, int64_t bag_size, int64_t num_rows,
                                          int64_t dim, bool mean, int64_t padding,
                                          cudaStream_t stream) {
  const int64_t n = groups * bag_size * dim;
  if (n == 0) return cudaSuccess;
  embedding_bag_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(
      ids, ids32, dy, dw, n, bag_size, num_rows, dim, mean, padding);
  return cudaGetLastError();
}

cudaError_t launch_softmax_rows(float* p, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  softmax_rows_kernel<<<row_grid(rows), row_threads(cols), 0, stream>>>(p, rows, cols);
  return cudaGetLastError();
}

cudaError_t launch_softmax_rows_backward(const float* p, float* dp, int64_t rows, int64_t cols,
                                         cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  softmax_rows_backward_kernel<<<row_grid(rows), row_threads(cols), 0, stream>>>(p, dp, rows, cols);
  return cudaGetLastError();
}

cudaError_t launch_layer_norm_forward(const float* x, const float* gamma, const float* beta,
                                      float* y, float* stats, int64_t rows, int64_t cols, float eps,
                                      cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  layer_norm_forward_kernel<<<row_grid(rows), row_threads(cols), 0, stream>>>(
      x, gamma, beta, y, stats, rows, cols, eps);
  return cudaGetLastError();
}

cudaError_t launch_layer_norm_backward_input(const float* x, const float* dy, const float* gamma,
                                             const float* stats, float* dx, int64_t rows,
                                             int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  layer_norm_backward_input_kernel<<<row_grid(rows), row_threads(cols), 0, stream>>>(
      x, dy, gamma, stats, dx, rows, cols);
  return cudaGetLastError();
}

cudaError_t launch_layer_norm_backward_params(const float* x, const float* dy, const float* stats,
                                              float* dgamma, float* dbeta, int64_t rows,
                                              int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0 || (dgamma == nullptr && dbeta == nullptr)) return cudaSuccess;
  layer_norm_backward_params_kernel<<<column_grid(cols), dim3(32, kColRows), 0, stream>>>(
      x, dy, stats, dgamma, dbeta, rows, cols);
  return cudaGetLastError();
}

}  // namespace gp::exec::cuda
