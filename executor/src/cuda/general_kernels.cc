// CUDA kernels of the general element-wise ops (unary, binary, compare, where, constant) and of
// reduce over a set of axes: the attributes, maps and formulas of the CPU reference
// (cpu/general_kernels.cc, through device_api/elementwise_maps.h), queued on the context's
// stream; the __global__ kernels are in general_kernels.cu.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_kernel.h"
#include "cuda/general_launch.h"
#include "cuda/kernels.h"
#include "device_api/elementwise_maps.h"

namespace gp::exec::cuda {
namespace {

class UnaryKernel final : public CudaKernel {
 public:
  UnaryKernel(const model::OpNode& op, const CudaContext& ctx, int fn)
      : CudaKernel(op, ctx), fn_(fn), n_(model::num_elements(op.input_specs[0])) {}
  void forward(const OpArgs& a) const override {
    check_forward(
        launch_unary_forward(fn_, a.inputs[0].f(), a.outputs[0].f(), a.batch * n_, stream()));
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    check_backward(launch_unary_backward(fn_, a.inputs[0].f(), a.outputs[0].f(),
                                         a.grad_outputs[0].f(), dx, a.batch * n_, stream()));
  }

 private:
  int fn_;
  int64_t n_;  // elements per sample
};

class BinaryKernel final : public CudaKernel {
 public:
  BinaryKernel(const model::OpNode& op, const CudaContext& ctx, BroadcastMaps m)
      : CudaKernel(op, ctx), m_(m) {}
  void forward(const OpArgs& a) const override {
    check_forward(launch_binary_forward(m_.fn, with_batch(m_.forward, a.batch), a.inputs[0].f(),
                                        a.inputs[1].f(), a.outputs[0].f(), stream()));
  }
  void backward(const OpArgs& a) const override {
    for (int k = 0; k < 2; ++k) {
      float* dx = a.grad_inputs[k].f();
      if (dx == nullptr) continue;
      check_backward(launch_binary_backward(m_.fn, k, with_batch(m_.grad[k], a.batch),
                                            a.inputs[0].f(), a.inputs[1].f(), a.outputs[0].f(),
                                            a.grad_outputs[0].f(), dx, stream()));
    }
  }

 private:
  BroadcastMaps m_;
};

// A 0/1 mask: no gradient flows through a comparison.
class CompareKernel final : public CudaKernel {
 public:
  CompareKernel(const model::OpNode& op, const CudaContext& ctx, BroadcastMaps m)
      : CudaKernel(op, ctx), m_(m) {}
  void forward(const OpArgs& a) const override {
    check_forward(launch_compare_forward(m_.fn, with_batch(m_.forward, a.batch), a.inputs[0].f(),
                                         a.inputs[1].f(), a.outputs[0].f(), stream()));
  }
  void backward(const OpArgs&) const override {}

 private:
  BroadcastMaps m_;
};

// where(cond, a, b): the condition gets no gradient; a and b get dy where it picked them.
class WhereKernel final : public CudaKernel {
 public:
  WhereKernel(const model::OpNode& op, const CudaContext& ctx, BroadcastMaps m)
      : CudaKernel(op, ctx), m_(m) {}
  void forward(const OpArgs& a) const override {
    check_forward(launch_where_forward(with_batch(m_.forward, a.batch), a.inputs[0].f(),
                                       a.inputs[1].f(), a.inputs[2].f(), a.outputs[0].f(),
                                       stream()));
  }
  void backward(const OpArgs& a) const override {
    for (int k = 1; k < 3; ++k) {
      float* dx = a.grad_inputs[k].f();
      if (dx == nullptr) continue;
      check_backward(launch_where_backward(with_batch(m_.grad[k], a.batch), k == 1, a.inputs[0].f(),
                                           a.grad_outputs[0].f(), dx, stream()));
    }
  }

 private:
  BroadcastMaps m_;
};

// The values live in device memory owned by the kernel, uploaded once: forward only broadcasts
// them. The input only sets the batch and gets no gradient.
class CastKernel final : public CudaKernel {
 public:
  CastKernel(const model::OpNode& op, const CudaContext& ctx, int64_t per_sample, bool int32,
             bool to_int64)
      : CudaKernel(op, ctx), per_sample_(per_sample), int32_(int32), to_int64_(to_int64) {}
  void forward(const OpArgs& a) const override {
    if (to_int64_) {
      check_forward(
          launch_cast_to_int64(a.inputs[0].f(), a.outputs[0].i(), a.batch * per_sample_, stream()));
      return;
    }
    check_forward(launch_cast_forward(a.inputs[0].data, int32_, a.outputs[0].f(),
                                      a.batch * per_sample_, stream()));
  }
  void backward(const OpArgs&) const override {}

 private:
  int64_t per_sample_;
  bool int32_;
  bool to_int64_;
};

class CumSumKernel final : public CudaKernel {
 public:
  CumSumKernel(const model::OpNode& op, const CudaContext& ctx, CumSumShape c)
      : CudaKernel(op, ctx), c_(c) {}
  void forward(const OpArgs& a) const override {
    check_forward(launch_cumsum_forward(c_, a.batch, a.inputs[0].f(), a.outputs[0].f(), stream()));
  }
  void backward(const OpArgs& a) const override {
    if (a.grad_inputs[0].f() == nullptr) return;
    check_backward(
        launch_cumsum_backward(c_, a.batch, a.grad_outputs[0].f(), a.grad_inputs[0].f(), stream()));
  }

 private:
  CumSumShape c_;
};

class ConstantKernel final : public CudaKernel {
 public:
  ConstantKernel(const model::OpNode& op, const CudaContext& ctx, float* values, int64_t n,
                 bool integer)
      : CudaKernel(op, ctx), context_(ctx), values_(values), n_(n), integer_(integer) {}
  ~ConstantKernel() override {
    // Kernels may be destroyed on any thread; the memory belongs to the context's device.
    cudaSetDevice(context_.device_index);
    context_.check(cudaFreeAsync(values_, context_.stream), "constant values release");
  }
  void forward(const OpArgs& a) const override {
    check_forward(
        launch_constant_forward(values_, a.outputs[0].data, n_, a.batch, integer_, stream()));
  }
  void backward(const OpArgs&) const override {}

 private:
  const CudaContext& context_;
  float* values_;  // n_ floats of device memory
  int64_t n_;      // elements per sample
  bool integer_;
};

class ReduceAxesKernel final : public CudaKernel {
 public:
  ReduceAxesKernel(const model::OpNode& op, const CudaContext& ctx, ReduceMap r)
      : CudaKernel(op, ctx), r_(r) {}
  void forward(const OpArgs& a) const override {
    check_forward(launch_reduce_axes_forward(r_.mode, with_batch(r_.map, a.batch), r_.count,
                                             a.inputs[0].f(), a.outputs[0].f(), stream()));
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    check_backward(launch_reduce_axes_backward(r_.mode, with_batch(r_.map, a.batch), r_.count,
                                               a.inputs[0].f(), a.outputs[0].f(),
                                               a.grad_outputs[0].f(), dx, stream()));
  }

 private:
  ReduceMap r_;
};

// gather: the indices and their inverse lists (device_api/gather_index.h) live in one block of
// device memory owned by the kernel, uploaded once: [indices | inverse_offsets | inverse].
class GatherKernel final : public CudaKernel {
 public:
  GatherKernel(const model::OpNode& op, const CudaContext& ctx, GatherShape g, int64_t* table)
      : CudaKernel(op, ctx), context_(ctx), g_(g), table_(table) {}
  ~GatherKernel() override {
    cudaSetDevice(context_.device_index);
    context_.check(cudaFreeAsync(table_, context_.stream), "gather indices release");
  }
  void forward(const OpArgs& a) const override {
    check_forward(
        launch_gather_forward(g_, a.batch, table_, a.inputs[0].f(), a.outputs[0].f(), stream()));
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    const int64_t* offsets = table_ + g_.count;
    check_backward(launch_gather_backward(g_, a.batch, offsets, offsets + g_.dim + 1,
                                          a.grad_outputs[0].f(), dx, stream()));
  }

 private:
  const CudaContext& context_;
  GatherShape g_;
  int64_t* table_;  // count + dim + 1 + count int64 of device memory
};

}  // namespace

KernelResult make_gather(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(const model::GatherAttrs a, op_attrs<model::GatherAttrs>(op));
  const model::TensorSpec& x = op.input_specs[0];
  const GatherShape g{dims_product(x, 0, a.axis), x.shape(a.axis),
                      static_cast<int64_t>(a.indices.size()),
                      dims_product(x, a.axis + 1, x.shape_size())};
  std::vector<int64_t> table = a.indices;
  table.insert(table.end(), a.inverse_offsets.begin(), a.inverse_offsets.end());
  table.insert(table.end(), a.inverse.begin(), a.inverse.end());
  const size_t bytes = table.size() * sizeof(int64_t);
  void* p = nullptr;
  if (cudaError_t e = cudaMallocAsync(&p, bytes, ctx.stream); e != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it
    return op_error(op, "cannot allocate " + std::to_string(bytes) +
                            " bytes of device memory for the indices: " + cudaGetErrorString(e));
  }
  // The kernel owns the memory from here, so that a failed copy frees it. From pageable memory
  // the copy returns once `table` is staged.
  auto kernel = std::make_unique<GatherKernel>(op, ctx, g, static_cast<int64_t*>(p));
  if (cudaError_t e = cudaMemcpyAsync(p, table.data(), bytes, cudaMemcpyHostToDevice, ctx.stream);
      e != cudaSuccess) {
    cudaGetLastError();
    return op_error(op,
                    "cannot copy the indices to the device: " + std::string(cudaGetErrorString(e)));
  }
  return KernelResult(std::move(kernel));
}

KernelResult make_unary(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(const int fn, read_unary(op));
  return KernelResult(std::make_unique<UnaryKernel>(op, ctx, fn));
}

KernelResult make_binary(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(BroadcastMaps m, read_binary(op));
  return KernelResult(std::make_unique<BinaryKernel>(op, ctx, m));
}

KernelResult make_compare(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(BroadcastMaps m, read_compare(op));
  return KernelResult(std::make_unique<CompareKernel>(op, ctx, m));
}

KernelResult make_where(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(BroadcastMaps m, read_where(op));
  return KernelResult(std::make_unique<WhereKernel>(op, ctx, m));
}

KernelResult make_constant(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(const model::ConstantAttrs c, op_attrs<model::ConstantAttrs>(op));
  const int64_t n = model::num_elements(op.proto->outputs(0));
  const auto& values = op.proto->param_values();
  const auto it = values.find("value");
  if (it == values.end()) {
    return op_error(op, "param_values['value'] is missing: a constant needs its values");
  }
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (it->second.size() != bytes) {
    return op_error(op, "param_values['value'] holds " + std::to_string(it->second.size()) +
                            " bytes, expected " + std::to_string(bytes) + " (" + std::to_string(n) +
                            " float32 values)");
  }
  void* p = nullptr;
  if (cudaError_t e = cudaMallocAsync(&p, bytes, ctx.stream); e != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it
    return op_error(op, "cannot allocate " + std::to_string(bytes) +
                            " bytes of device memory for the values: " + cudaGetErrorString(e));
  }
  // Build the kernel first so that its destructor frees the memory should the copy fail. From
  // pageable memory the copy returns once the source is staged.
  auto kernel = std::make_unique<ConstantKernel>(op, ctx, static_cast<float*>(p), n, c.integer);
  if (cudaError_t e =
          cudaMemcpyAsync(p, it->second.data(), bytes, cudaMemcpyHostToDevice, ctx.stream);
      e != cudaSuccess) {
    cudaGetLastError();
    return op_error(op,
                    "cannot copy the values to the device: " + std::string(cudaGetErrorString(e)));
  }
  return KernelResult(std::move(kernel));
}

KernelResult make_cast(const model::OpNode& op, const CudaContext& ctx) {
  const model::TensorSpec& x = op.input_specs[0];
  GP_ASSIGN_OR_RETURN(const model::CastAttrs c, op_attrs<model::CastAttrs>(op));
  return KernelResult(
      std::make_unique<CastKernel>(op, ctx, model::num_elements(x), is_int32(x), c.to_int64));
}

KernelResult make_cumsum(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(const CumSumShape c, read_cumsum(op));
  return KernelResult(std::make_unique<CumSumKernel>(op, ctx, c));
}

KernelResult make_reduce_axes(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(const model::ReduceAttrs a, op_attrs<model::ReduceAttrs>(op));
  // One axis summed or averaged: the existing kernel (pointwise_kernels.cc) takes it.
  if (a.axes.size() == 1 &&
      (a.mode == model::ReduceMode::kSum || a.mode == model::ReduceMode::kMean)) {
    return make_reduce(op, ctx);
  }
  GP_ASSIGN_OR_RETURN(ReduceMap r, read_reduce_map(op));
  return KernelResult(std::make_unique<ReduceAxesKernel>(op, ctx, r));
}

}  // namespace gp::exec::cuda
