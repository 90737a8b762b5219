// Launch functions of the general element-wise kernels and reductions (general_kernels.cu) in
// plain types, shared by the C++20 host code (general_kernels.cc) and the C++17 CUDA code.
// Function codes are those of device_api/elementwise_math.h; maps (device_api/index_map.h) come
// with the call's batch set (with_batch). Pointers are device pointers; each function queues its
// work on `stream` and returns cudaGetLastError() (cudaSuccess without launching when there is
// nothing to do). Backward kernels accumulate, one thread per gradient element (no atomics).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "device_api/cumsum_line.h"
#include "device_api/gather_index.h"
#include "device_api/index_map.h"

namespace gp::exec::cuda {

// Over n floats: y = f(x); dx += f'(x) dy (from x and y).
cudaError_t launch_unary_forward(int fn, const float* x, float* y, int64_t n, cudaStream_t stream);
cudaError_t launch_unary_backward(int fn, const float* x, const float* y, const float* dy,
                                  float* dx, int64_t n, cudaStream_t stream);

// `map` targets the output (streams: 0 y, 1 a, 2 b): y = fn(a, b), or the 0/1 mask of a
// comparison.
cudaError_t launch_binary_forward(int fn, const IndexMap& map, const float* a, const float* b,
                                  float* y, cudaStream_t stream);
cudaError_t launch_compare_forward(int fn, const IndexMap& map, const float* a, const float* b,
                                   float* y, cudaStream_t stream);
// `map` targets operand k (0: a, 1: b) with the axes it is broadcast over free: dx[j] += the sum
// over them of the gradient towards operand k (in double).
cudaError_t launch_binary_backward(int fn, int k, const IndexMap& map, const float* a,
                                   const float* b, const float* y, const float* dy, float* dx,
                                   cudaStream_t stream);

// where: `map` targets the output (streams: 0 y, 1 cond, 2 a, 3 b).
cudaError_t launch_where_forward(const IndexMap& map, const float* cond, const float* a,
                                 const float* b, float* y, cudaStream_t stream);
// `map` targets a (take_true) or b: dx[j] += the sum of dy over its free axes where the
// condition is non-zero (take_true) or zero.
cudaError_t launch_where_backward(const IndexMap& map, bool take_true, const float* cond,
                                  const float* dy, float* dx, cudaStream_t stream);

// y[i] = x[i] as a float for n integers, int32 or int64.
cudaError_t launch_cast_forward(const void* x, bool int32, float* y, int64_t n,
                                cudaStream_t stream);
// y[i] = x[i] as int64, truncated toward zero.
cudaError_t launch_cast_to_int64(const float* x, int64_t* y, int64_t n, cudaStream_t stream);

// cumsum over `batch` samples, one thread per line (device_api/cumsum_line.h): y = cumsum(x);
// backward dx += the sum of dy from the other end.
cudaError_t launch_cumsum_forward(const CumSumShape& c, int64_t batch, const float* x, float* y,
                                  cudaStream_t stream);
cudaError_t launch_cumsum_backward(const CumSumShape& c, int64_t batch, const float* dy, float* dx,
                                   cudaStream_t stream);

// y[s * n + i] = values[i] for `batch` samples, as int64 when `integer` (else float).
cudaError_t launch_constant_forward(const float* values, void* y, int64_t n, int64_t batch,
                                    bool integer, cudaStream_t stream);

// A reduction (ew::Reduce `mode`): `map` targets the output, stream 0 the input, the reduced axes
// free; `count` elements reduce into each output.
cudaError_t launch_reduce_axes_forward(int mode, const IndexMap& map, int64_t count, const float* x,
                                       float* y, cudaStream_t stream);
cudaError_t launch_reduce_axes_backward(int mode, const IndexMap& map, int64_t count,
                                        const float* x, const float* y, const float* dy, float* dx,
                                        cudaStream_t stream);

// gather over `batch` samples (device_api/gather_index.h); index arrays are device int64.
cudaError_t launch_gather_forward(const GatherShape& g, int64_t batch, const int64_t* indices,
                                  const float* x, float* y, cudaStream_t stream);
// One thread per input element: dx += the sum of dy over the outputs that read it.
cudaError_t launch_gather_backward(const GatherShape& g, int64_t batch,
                                   const int64_t* inverse_offsets, const int64_t* inverse,
                                   const float* dy, float* dx, cudaStream_t stream);

}  // namespace gp::exec::cuda
