// __global__ kernels of the general element-wise ops and reductions (see general_launch.h): the
// formulas of device_api/elementwise_math.h over the IndexMaps of device_api/index_map.h, as the
// CPU reference walks them. Gradients towards a broadcast operand and reductions take one thread
// per target element looping its free combinations, so every element is written by one thread
// (deterministic, no atomics); sums run in double.
#include <cuda_runtime.h>

#include "cuda/general_launch.h"
#include "device_api/elementwise_math.h"

namespace gp::exec::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int64_t kMaxBlocks = 65535 * 8;  // grid-stride loops cover the rest

unsigned grid_for(int64_t items) {
  const int64_t b = (items + kBlock - 1) / kBlock;
  return static_cast<unsigned>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

#define GP_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void unary_forward_kernel(int fn, const float* x, float* y, int64_t n) {
  GP_GRID_STRIDE(i, n) { y[i] = ew::unary_forward(fn, x[i]); }
}
__global__ void unary_backward_kernel(int fn, const float* x, const float* y, const float* dy,
                                      float* dx, int64_t n) {
  GP_GRID_STRIDE(i, n) { dx[i] += ew::unary_backward(fn, x[i], y[i], dy[i]); }
}

// The forward maps have no free axes: each output element reads one element of each operand.
__global__ void binary_forward_kernel(int fn, IndexMap m, const float* a, const float* b,
                                      float* y) {
  GP_GRID_STRIDE(j, kept_count(m)) {
    int64_t off[kMapStreams];
    kept_offsets(m, j, off);
    y[off[0]] = ew::binary_forward(fn, a[off[1]], b[off[2]]);
  }
}
__global__ void compare_forward_kernel(int fn, IndexMap m, const float* a, const float* b,
                                       float* y) {
  GP_GRID_STRIDE(j, kept_count(m)) {
    int64_t off[kMapStreams];
    kept_offsets(m, j, off);
    y[off[0]] = ew::compare(fn, a[off[1]], b[off[2]]);
  }
}
__global__ void binary_backward_kernel(int fn, int k, IndexMap m, const float* a, const float* b,
                                       const float* y, const float* dy, float* dx) {
  const int64_t combos = free_count(m);
  GP_GRID_STRIDE(j, kept_count(m)) {
    int64_t base[kMapStreams], off[kMapStreams];
    kept_offsets(m, j, base);
    double s = 0;
    for (int64_t f = 0; f < combos; ++f) {
      free_offsets(m, f, base, off);
      s += ew::binary_backward(fn, k, a[off[1]], b[off[2]], y[off[0]], dy[off[0]]);
    }
    dx[j] += static_cast<float>(s);
  }
}

__global__ void where_forward_kernel(IndexMap m, const float* cond, const float* a, const float* b,
                                     float* y) {
  GP_GRID_STRIDE(j, kept_count(m)) {
    int64_t off[kMapStreams];
    kept_offsets(m, j, off);
    y[off[0]] = cond[off[1]] != 0.0f ? a[off[2]] : b[off[3]];
  }
}
__global__ void where_backward_kernel(IndexMap m, bool take_true, const float* cond,
                                      const float* dy, float* dx) {
  const int64_t combos = free_count(m);
  GP_GRID_STRIDE(j, kept_count(m)) {
    int64_t base[kMapStreams], off[kMapStreams];
    kept_offsets(m, j, base);
    double s = 0;
    for (int64_t f = 0; f < combos; ++f) {
      free_offsets(m, f, base, off);
      if ((cond[off[1]] != 0.0f) == take_true) s += dy[off[0]];
    }
    dx[j] += static_cast<float>(s);
  }
}

__global__ void constant_forward_kernel(const float* values, float* y, int64_t n, int64_t total) {
  GP_GRID_STRIDE(i, total) { y[i] = values[i % n]; }
}
__global__ void constant_forward_int_kernel(const float* values, int64_t* y, int64_t n,
                                            int64_t total) {
  GP_GRID_STRIDE(i, total) { y[i] = static_cast<int64_t>(values[i % n]); }
}

__global__ void cast_forward_kernel(const void* x, bool int32, float* y, int64_t n) {
  GP_GRID_STRIDE(i, n) {
    y[i] = int32 ? static_cast<float>(static_cast<const int32_t*>(x)[i])
                 : static_cast<float>(static_cast<const int64_t*>(x)[i]);
  }
}

__global__ void cast_to_int64_kernel(const float* x, int64_t* y, int64_t n) {
  GP_GRID_STRIDE(i, n) { y[i] = ew::float_to_id(x[i]); }
}

__global__ void cumsum_kernel(CumSumShape c, int64_t lines, const float* x, float* y, bool reverse,
                              bool accumulate) {
  GP_GRID_STRIDE(l, lines) { cumsum_line(c, l, x, y, reverse, accumulate); }
}

// One thread per output element (the target, contiguous), over the reduced elements in order.
__global__ void reduce_axes_forward_kernel(int mode, IndexMap m, int64_t count, const float* x,
                                           float* y) {
  const int64_t combos = free_count(m);
  GP_GRID_STRIDE(j, kept_count(m)) {
    int64_t base[kMapStreams], off[kMapStreams];
    kept_offsets(m, j, base);
    if (mode == ew::kMaxReduce) {
      float best = x[base[0]];
      for (int64_t f = 1; f < combos; ++f) {
        free_offsets(m, f, base, off);
        const float v = x[off[0]];
        if (v > best || v != v) best = v;  // a NaN wins and stays (v > NaN is false)
      }
      y[j] = best;
      continue;
    }
    double s = 0;
    for (int64_t f = 0; f < combos; ++f) {
      free_offsets(m, f, base, off);
      const double v = x[off[0]];
      s += mode == ew::kL2 ? v * v : v;
    }
    if (mode == ew::kMean) s /= static_cast<double>(count);
    if (mode == ew::kL2) s = sqrt(s);
    y[j] = static_cast<float>(s);
  }
}
// Each input element belongs to one output element: its thread writes all of them.
__global__ void reduce_axes_backward_kernel(int mode, IndexMap m, int64_t count, const float* x,
                                            const float* y, const float* dy, float* dx) {
  const int64_t combos = free_count(m);
  GP_GRID_STRIDE(j, kept_count(m)) {
    int64_t base[kMapStreams], off[kMapStreams];
    kept_offsets(m, j, base);
    const float g = dy[j];
    if (mode == ew::kSum || mode == ew::kMean) {
      const float share = mode == ew::kMean ? g * (1.0f / static_cast<float>(count)) : g;
      for (int64_t f = 0; f < combos; ++f) {
        free_offsets(m, f, base, off);
        dx[off[0]] += share;
      }
    } else if (mode == ew::kMaxReduce) {
      // Ties split the gradient equally (PyTorch's amax): count them first.
      int64_t ties = 0;
      for (int64_t f = 0; f < combos; ++f) {
        free_offsets(m, f, base, off);
        if (x[off[0]] == y[j]) ++ties;
      }
      if (ties == 0) continue;  // a NaN maximum: no element equals it
      const float share = g / static_cast<float>(ties);
      for (int64_t f = 0; f < combos; ++f) {
        free_offsets(m, f, base, off);
        if (x[off[0]] == y[j]) dx[off[0]] += share;
      }
    } else {  // kL2: d||x|| / dx = x / ||x||, 0 at the origin
      if (y[j] == 0.0f) continue;
      const float scale = g / y[j];
      for (int64_t f = 0; f < combos; ++f) {
        free_offsets(m, f, base, off);
        dx[off[0]] += scale * x[off[0]];
      }
    }
  }
}

// One thread per output element (forward) or per input element (backward: its inverse list).
__global__ void gather_forward_kernel(GatherShape g, int64_t n, const int64_t* indices,
                                      const float* x, float* y) {
  GP_GRID_STRIDE(e, n) { y[e] = x[gather_source(g, indices, e)]; }
}
__global__ void gather_backward_kernel(GatherShape g, int64_t n, const int64_t* inverse_offsets,
                                       const int64_t* inverse, const float* dy, float* dx) {
  GP_GRID_STRIDE(e, n) {
    dx[e] += static_cast<float>(gather_grad(g, inverse_offsets, inverse, dy, e));
  }
}

}  // namespace

cudaError_t launch_unary_forward(int fn, const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  unary_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(fn, x, y, n);
  return cudaGetLastError();
}
cudaError_t launch_unary_backward(int fn, const float* x, const float* y, const float* dy,
                                  float* dx, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  unary_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(fn, x, y, dy, dx, n);
  return cudaGetLastError();
}
cudaError_t launch_binary_forward(int fn, const IndexMap& map, const float* a, const float* b,
                                  float* y, cudaStream_t stream) {
  const int64_t n = kept_count(map);
  if (n <= 0) return cudaSuccess;
  binary_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(fn, map, a, b, y);
  return cudaGetLastError();
}
cudaError_t launch_compare_forward(int fn, const IndexMap& map, const float* a, const float* b,
                                   float* y, cudaStream_t stream) {
  const int64_t n = kept_count(map);
  if (n <= 0) return cudaSuccess;
  compare_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(fn, map, a, b, y);
  return cudaGetLastError();
}
cudaError_t launch_binary_backward(int fn, int k, const IndexMap& map, const float* a,
                                   const float* b, const float* y, const float* dy, float* dx,
                                   cudaStream_t stream) {
  const int64_t n = kept_count(map);
  if (n <= 0) return cudaSuccess;
  binary_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(fn, k, map, a, b, y, dy, dx);
  return cudaGetLastError();
}
cudaError_t launch_where_forward(const IndexMap& map, const float* cond, const float* a,
                                 const float* b, float* y, cudaStream_t stream) {
  const int64_t n = kept_count(map);
  if (n <= 0) return cudaSuccess;
  where_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(map, cond, a, b, y);
  return cudaGetLastError();
}
cudaError_t launch_where_backward(const IndexMap& map, bool take_true, const float* cond,
                                  const float* dy, float* dx, cudaStream_t stream) {
  const int64_t n = kept_count(map);
  if (n <= 0) return cudaSuccess;
  where_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(map, take_true, cond, dy, dx);
  return cudaGetLastError();
}
cudaError_t launch_cast_forward(const void* x, bool int32, float* y, int64_t n,
                                cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  cast_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, int32, y, n);
  return cudaGetLastError();
}
cudaError_t launch_cast_to_int64(const float* x, int64_t* y, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  cast_to_int64_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}
cudaError_t launch_cumsum_forward(const CumSumShape& c, int64_t batch, const float* x, float* y,
                                  cudaStream_t stream) {
  const int64_t lines = batch * c.outer * c.inner;
  if (lines <= 0 || c.len <= 0) return cudaSuccess;
  cumsum_kernel<<<grid_for(lines), kBlock, 0, stream>>>(c, lines, x, y, c.reverse, false);
  return cudaGetLastError();
}
cudaError_t launch_cumsum_backward(const CumSumShape& c, int64_t batch, const float* dy, float* dx,
                                   cudaStream_t stream) {
  const int64_t lines = batch * c.outer * c.inner;
  if (lines <= 0 || c.len <= 0) return cudaSuccess;
  cumsum_kernel<<<grid_for(lines), kBlock, 0, stream>>>(c, lines, dy, dx, !c.reverse, true);
  return cudaGetLastError();
}
cudaError_t launch_constant_forward(const float* values, void* y, int64_t n, int64_t batch,
                                    bool integer, cudaStream_t stream) {
  const int64_t total = n * batch;
  if (total <= 0) return cudaSuccess;
  if (integer) {
    constant_forward_int_kernel<<<grid_for(total), kBlock, 0, stream>>>(
        values, static_cast<int64_t*>(y), n, total);
  } else {
    constant_forward_kernel<<<grid_for(total), kBlock, 0, stream>>>(values, static_cast<float*>(y),
                                                                    n, total);
  }
  return cudaGetLastError();
}
cudaError_t launch_reduce_axes_forward(int mode, const IndexMap& map, int64_t count, const float* x,
                                       float* y, cudaStream_t stream) {
  const int64_t n = kept_count(map);
  if (n <= 0) return cudaSuccess;
  reduce_axes_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(mode, map, count, x, y);
  return cudaGetLastError();
}
cudaError_t launch_reduce_axes_backward(int mode, const IndexMap& map, int64_t count,
                                        const float* x, const float* y, const float* dy, float* dx,
                                        cudaStream_t stream) {
  const int64_t n = kept_count(map);
  if (n <= 0) return cudaSuccess;
  reduce_axes_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(mode, map, count, x, y, dy, dx);
  return cudaGetLastError();
}

cudaError_t launch_gather_forward(const GatherShape& g, int64_t batch, const int64_t* indices,
                                  const float* x, float* y, cudaStream_t stream) {
  const int64_t n = batch * g.outer * g.count * g.inner;
  if (n <= 0) return cudaSuccess;
  gather_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(g, n, indices, x, y);
  return cudaGetLastError();
}
cudaError_t launch_gather_backward(const GatherShape& g, int64_t batch,
                                   const int64_t* inverse_offsets, const int64_t* inverse,
                                   const float* dy, float* dx, cudaStream_t stream) {
  const int64_t n = batch * g.outer * g.dim * g.inner;
  if (n <= 0) return cudaSuccess;
  gather_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(g, n, inverse_offsets, inverse, dy,
                                                             dx);
  return cudaGetLastError();
}

}  // namespace gp::exec::cuda
