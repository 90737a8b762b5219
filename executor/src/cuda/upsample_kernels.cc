// CUDA kernels of the upsampling ops: conv_transpose2d (conv2d's input gradient, on the vision
// family's launches and cuBLAS) and resize (nearest or bilinear, separable taps). Same attributes,
// layout and formulas as the CPU reference (executor/src/cpu/upsample_kernels.cc); resize's
// __global__ kernels are in upsample_kernels.cu.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_kernel.h"
#include "cuda/kernels.h"
#include "cuda/upsample_launch.h"
#include "cuda/vision_launch.h"

namespace gp::exec::cuda {
namespace {

// ---- conv_transpose2d --------------------------------------------------------------------------

// `u` is the window of the conv2d this op is the transpose of, from y-space [out, Ho, Wo] to
// x-space [C, H, W]; the weight [C, out, kh, kw] is that conv2d's weight [C, out*kh*kw]. Forward:
// y = 0, then y += conv2d's input gradient of x (gathered per output cell), + b. Backward: cols
// [out*kh*kw, H*W] = im2col(dy) per sample in the workspace; dx += W cols, dW += x cols^T.
class ConvTranspose2dKernel final : public CudaKernel {
 public:
  ConvTranspose2dKernel(const model::OpNode& op, const CudaContext& ctx, const VisionWindow& u,
                        int64_t in_channels, bool bias)
      : CudaKernel(op, ctx),
        context_(ctx),
        u_(u),
        in_channels_(in_channels),
        bias_(bias),
        taps_(u.c * u.kh * u.kw),
        pixels_(u.ho * u.wo) {}

  int64_t workspace_floats_per_sample() const override { return taps_ * pixels_; }

  void forward(const OpArgs& a) const override {
    float* y = a.outputs[0].f();
    const int64_t out_n = u_.c * u_.h * u_.w;
    check_forward(
        cudaMemsetAsync(y, 0, static_cast<size_t>(a.batch * out_n) * sizeof(float), stream()));
    check_forward(launch_conv2d_input_grad(a.params[0], a.inputs[0].f(), y, u_, in_channels_,
                                           /*groups=*/1, a.batch, stream()));
    if (bias_) {
      check_forward(launch_conv2d_add_bias(y, a.params[1], a.batch, u_.c, u_.h * u_.w, stream()));
    }
  }

  void backward(const OpArgs& a) const override {
    const int64_t in_n = in_channels_ * pixels_;
    const float* dy = a.grad_outputs[0].f();
    float* dx = a.grad_inputs[0].f();
    float* dw = a.param_grads[0];
    float* db = bias_ ? a.param_grads[1] : nullptr;
    if (db != nullptr) {
      check_backward(launch_conv2d_bias_grad(dy, db, a.batch, u_.c, u_.h * u_.w, stream()));
    }
    if (dx == nullptr && dw == nullptr) return;
    check_backward(launch_conv2d_im2col(dy, a.workspace, u_, a.batch, stream()));
    if (dx != nullptr) {
      // W is shared by every sample: stride 0.
      gemm_batched(context_, "conv_transpose2d backward: input gradient", false, false,
                   in_channels_, pixels_, taps_, 1.0f, a.params[0], taps_, 0, a.workspace, pixels_,
                   taps_ * pixels_, 1.0f, dx, pixels_, in_n, a.batch);
    }
    if (dw != nullptr) {
      // The sum over samples is not one strided GEMM: sample by sample in the CPU's order.
      for (int64_t s = 0; s < a.batch; ++s) {
        gemm(context_, "conv_transpose2d backward: weight gradient", false, true, in_channels_,
             taps_, pixels_, 1.0f, a.inputs[0].f() + s * in_n, pixels_,
             a.workspace + s * taps_ * pixels_, pixels_, 1.0f, dw, taps_);
      }
    }
  }

 private:
  const CudaContext& context_;
  VisionWindow u_;
  int64_t in_channels_;  // C: rows of the weight [C, out*kh*kw]
  bool bias_;
  int64_t taps_, pixels_;  // out*kh*kw, H*W
};

// ---- resize ------------------------------------------------------------------------------------

// Both axes' tap tables, built on the host once (as the CPU's) and held in one block of device
// memory owned by the kernel: forward sums each output's 2x2 taps, backward gathers each input's
// transposed lists.
class ResizeKernel final : public CudaKernel {
 public:
  ResizeKernel(const model::OpNode& op, const CudaContext& ctx, const model::ResizeAttrs& r,
               void* tables, ResizeAxisTable rows, ResizeAxisTable cols)
      : CudaKernel(op, ctx), context_(ctx), r_(r), tables_(tables), rows_(rows), cols_(cols) {}
  ~ResizeKernel() override {
    // Kernels may be destroyed on any thread; the memory belongs to the context's device.
    cudaSetDevice(context_.device_index);
    context_.check(cudaFreeAsync(tables_, context_.stream), "resize tap tables release");
  }

  void forward(const OpArgs& a) const override {
    check_forward(launch_resize_forward(a.inputs[0].f(), a.outputs[0].f(), rows_, cols_,
                                        a.batch * r_.c, r_.h, r_.w, r_.ho, r_.wo, stream()));
  }

  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    check_backward(launch_resize_backward(a.grad_outputs[0].f(), dx, rows_, cols_, a.batch * r_.c,
                                          r_.h, r_.w, r_.ho, r_.wo, stream()));
  }

 private:
  const CudaContext& context_;
  model::ResizeAttrs r_;
  void* tables_;  // device memory behind rows_ and cols_
  ResizeAxisTable rows_, cols_;
};

// Appends `v`'s bytes to `blob` (8-byte aligned, as every element of the tables is) and returns
// their offset.
template <typename T>
size_t append(std::vector<char>& blob, const std::vector<T>& v) {
  static_assert(alignof(T) <= 8 && sizeof(T) % alignof(T) == 0);
  const size_t at = blob.size();
  const auto* p = reinterpret_cast<const char*>(v.data());
  blob.insert(blob.end(), p, p + v.size() * sizeof(T));
  blob.resize((blob.size() + 7) / 8 * 8);
  return at;
}

}  // namespace

KernelResult make_conv_transpose2d(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(const model::ConvTransposeAttrs a, op_attrs<model::ConvTransposeAttrs>(op));
  const model::Window2d& w = a.window;
  // The conv2d this is the transpose of, from y-space [out, Ho, Wo] to x-space [C, H, W].
  const VisionWindow u{a.out_channels, w.ho, w.wo, w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, w.h, w.w};
  return KernelResult(std::make_unique<ConvTranspose2dKernel>(op, ctx, u, w.c, a.bias));
}

KernelResult make_resize(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(const model::ResizeAttrs r, op_attrs<model::ResizeAttrs>(op));
  const ResizeAxis rows = resize_axis(r.h, r.ho, r.bilinear, r.align_corners);
  const ResizeAxis cols = resize_axis(r.w, r.wo, r.bilinear, r.align_corners);
  std::vector<char> blob;
  const size_t rows_forward = append(blob, rows.forward), rows_offsets = append(blob, rows.offsets),
               rows_backward = append(blob, rows.backward);
  const size_t cols_forward = append(blob, cols.forward), cols_offsets = append(blob, cols.offsets),
               cols_backward = append(blob, cols.backward);
  void* p = nullptr;
  if (cudaError_t e = cudaMallocAsync(&p, blob.size(), ctx.stream); e != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it
    return op_error(op, "cannot allocate " + std::to_string(blob.size()) +
                            " bytes of device memory for the tap tables: " + cudaGetErrorString(e));
  }
  char* base = static_cast<char*>(p);
  auto table = [base](size_t forward, size_t offsets, size_t backward) {
    return ResizeAxisTable{reinterpret_cast<const ResizeTap*>(base + forward),
                           reinterpret_cast<const int64_t*>(base + offsets),
                           reinterpret_cast<const ResizeTap*>(base + backward)};
  };
  // Build the kernel first so that its destructor frees the memory should the copy fail. From
  // pageable memory the copy returns once the source is staged.
  auto kernel = std::make_unique<ResizeKernel>(op, ctx, r, p,
                                               table(rows_forward, rows_offsets, rows_backward),
                                               table(cols_forward, cols_offsets, cols_backward));
  if (cudaError_t e =
          cudaMemcpyAsync(p, blob.data(), blob.size(), cudaMemcpyHostToDevice, ctx.stream);
      e != cudaSuccess) {
    cudaGetLastError();
    return op_error(
        op, "cannot copy the tap tables to the device: " + std::string(cudaGetErrorString(e)));
  }
  return KernelResult(std::move(kernel));
}

}  // namespace gp::exec::cuda
