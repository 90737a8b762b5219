// CUDA kernels of the parameter-free ops: input, element-wise activations, softmax, add, concat,
// slice, the two losses, and the layout ops scale, transpose and reshape. Each mirrors its CPU
// reference (cpu/simple_kernels.cc, cpu/layout_kernels.cc): same attributes and validation, same
// formulas, same accumulate rules; the work is queued on the context's stream.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_kernel.h"
#include "cuda/kernels.h"
#include "cuda/simple_launch.h"

namespace gp::exec::cuda {
namespace {

// y = max(x, 0); dx += dy where x > 0. Saves nothing.
class ReluKernel final : public CudaKernel {
 public:
  ReluKernel(const model::OpNode& op, const CudaContext& ctx, int64_t n)
      : CudaKernel(op, ctx), n_(n) {}
  void forward(const OpArgs& a) const override {
    check_forward(launch_relu_forward(a.inputs[0].f(), a.outputs[0].f(), a.batch * n_, stream()));
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    check_backward(
        launch_relu_backward(a.inputs[0].f(), a.grad_outputs[0].f(), dx, a.batch * n_, stream()));
  }

 private:
  int64_t n_;  // elements per sample
};

// GELU (tanh approximation, or exact); backward differentiates it at the input. Saves nothing.
class GeluKernel final : public CudaKernel {
 public:
  GeluKernel(const model::OpNode& op, const CudaContext& ctx, int64_t n, bool exact)
      : CudaKernel(op, ctx), n_(n), exact_(exact) {}
  void forward(const OpArgs& a) const override {
    check_forward(
        launch_gelu_forward(a.inputs[0].f(), a.outputs[0].f(), a.batch * n_, exact_, stream()));
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    check_backward(launch_gelu_backward(a.inputs[0].f(), a.grad_outputs[0].f(), dx, a.batch * n_,
                                        exact_, stream()));
  }

 private:
  int64_t n_;
  bool exact_;
};

// Softmax over the last dim (max-subtracted); backward uses the output. Saves nothing.
class SoftmaxKernel final : public CudaKernel {
 public:
  SoftmaxKernel(const model::OpNode& op, const CudaContext& ctx, int64_t rows, int64_t cols)
      : CudaKernel(op, ctx), rows_(rows), cols_(cols) {}
  void forward(const OpArgs& a) const override {
    check_forward(launch_softmax_forward(a.inputs[0].f(), a.outputs[0].f(), a.batch * rows_, cols_,
                                         stream()));
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    check_backward(launch_softmax_backward(a.outputs[0].f(), a.grad_outputs[0].f(), dx,
                                           a.batch * rows_, cols_, stream()));
  }

 private:
  int64_t rows_, cols_;  // rows per sample, last dim
};

// y = sum of the inputs, added in input order as the CPU does; every input receives dy.
class AddKernel final : public CudaKernel {
 public:
  AddKernel(const model::OpNode& op, const CudaContext& ctx, int64_t n)
      : CudaKernel(op, ctx), n_(n) {}
  void forward(const OpArgs& a) const override {
    const int64_t n = a.batch * n_;
    float* y = a.outputs[0].f();
    if (!check_forward(copy(y, a.inputs[0].f(), n))) return;
    for (size_t k = 1; k < a.inputs.size(); ++k) {
      if (!check_forward(launch_accumulate(a.inputs[k].f(), y, 1.0f, n, stream()))) return;
    }
  }
  void backward(const OpArgs& a) const override {
    const float* dy = a.grad_outputs[0].f();
    for (const TensorView& g : a.grad_inputs) {
      if (g.data == nullptr) continue;
      check_backward(launch_accumulate(dy, g.f(), 1.0f, a.batch * n_, stream()));
    }
  }

 private:
  int64_t n_;
};

// Concatenation along a per-sample axis: with outer = the dims before the axis (times the batch)
// and chunk_k = input k's elements from the axis on, output block o is input 0's block o, then
// input 1's block o, ... One strided copy (or accumulate, backward) per input.
class ConcatKernel final : public CudaKernel {
 public:
  ConcatKernel(const model::OpNode& op, const CudaContext& ctx, int64_t outer,
               std::vector<int64_t> chunks)
      : CudaKernel(op, ctx), outer_(outer), chunks_(std::move(chunks)) {
    for (int64_t c : chunks_) out_chunk_ += c;
  }
  void forward(const OpArgs& a) const override {
    float* y = a.outputs[0].f();
    int64_t offset = 0;  // of input k's elements within an output block
    for (size_t k = 0; k < chunks_.size(); ++k) {
      check_forward(launch_copy_blocks(a.inputs[k].f(), chunks_[k], y + offset, out_chunk_,
                                       a.batch * outer_, chunks_[k], false, stream()));
      offset += chunks_[k];
    }
  }
  void backward(const OpArgs& a) const override {
    const float* dy = a.grad_outputs[0].f();
    int64_t offset = 0;
    for (size_t k = 0; k < chunks_.size(); ++k) {
      if (float* dx = a.grad_inputs[k].f(); dx != nullptr) {
        check_backward(launch_copy_blocks(dy + offset, out_chunk_, dx, chunks_[k], a.batch * outer_,
                                          chunks_[k], true, stream()));
      }
      offset += chunks_[k];
    }
  }

 private:
  int64_t outer_;                // blocks per sample
  std::vector<int64_t> chunks_;  // per input: elements per block
  int64_t out_chunk_ = 0;        // output elements per block
};

// x[start:end] along a per-sample axis: input block o (in_chunk elements) contributes its
// elements [offset, offset + out_chunk) as output block o.
class SliceKernel final : public CudaKernel {
 public:
  SliceKernel(const model::OpNode& op, const CudaContext& ctx, int64_t outer, int64_t in_chunk,
              int64_t offset, int64_t out_chunk)
      : CudaKernel(op, ctx),
        outer_(outer),
        in_chunk_(in_chunk),
        offset_(offset),
        out_chunk_(out_chunk) {}
  void forward(const OpArgs& a) const override {
    check_forward(launch_copy_blocks(a.inputs[0].f() + offset_, in_chunk_, a.outputs[0].f(),
                                     out_chunk_, a.batch * outer_, out_chunk_, false, stream()));
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    check_backward(launch_copy_blocks(a.grad_outputs[0].f(), out_chunk_, dx + offset_, in_chunk_,
                                      a.batch * outer_, out_chunk_, true, stream()));
  }

 private:
  int64_t outer_, in_chunk_, offset_, out_chunk_;
};

// loss_s = mean over the sample's n elements of (pred - target)^2. Saves nothing.
class MseLossKernel final : public CudaKernel {
 public:
  MseLossKernel(const model::OpNode& op, const CudaContext& ctx, int64_t n)
      : CudaKernel(op, ctx), n_(n) {}
  void forward(const OpArgs& a) const override {
    check_forward(launch_mse_loss_forward(a.inputs[0].f(), a.inputs[1].f(), a.outputs[0].f(),
                                          a.batch, n_, stream()));
  }
  // d loss_s / d pred = 2 (pred - target) / n = -d loss_s / d target.
  void backward(const OpArgs& a) const override {
    check_backward(launch_mse_loss_backward(a.inputs[0].f(), a.inputs[1].f(), a.grad_outputs[0].f(),
                                            a.grad_inputs[0].f(), a.grad_inputs[1].f(), a.batch, n_,
                                            stream()));
  }

 private:
  int64_t n_;
};

// Logits [..., C] with `positions` rows per sample and one label per row:
//   loss_s = (1 / positions) * sum over rows of (logsumexp(z) - z[label]).
// Saved per sample: the rows' logsumexp (read by backward); workspace: their loss terms (forward's
// scratch, summed per sample in row order).
// No gradient to the labels.
class SoftmaxCrossEntropyKernel final : public CudaKernel {
 public:
  SoftmaxCrossEntropyKernel(const model::OpNode& op, const CudaContext& ctx, int64_t positions,
                            int64_t classes, bool labels32)
      : CudaKernel(op, ctx), positions_(positions), classes_(classes), labels32_(labels32) {}
  int64_t saved_floats_per_sample() const override { return positions_; }
  int64_t workspace_floats_per_sample() const override { return positions_; }

  void forward(const OpArgs& a) const override {
    float* lse = a.saved;
    check_forward(launch_cross_entropy_forward(a.inputs[0].f(), a.inputs[1].data, labels32_, lse,
                                               a.workspace, a.outputs[0].f(), a.batch, positions_,
                                               classes_, stream()));
  }
  // d loss_s / d z[j] = (softmax(z)[j] - [j == label]) / positions.
  void backward(const OpArgs& a) const override {
    float* dz = a.grad_inputs[0].f();
    if (dz == nullptr) return;
    check_backward(launch_cross_entropy_backward(a.inputs[0].f(), a.inputs[1].data, labels32_,
                                                 a.saved, a.grad_outputs[0].f(), dz, a.batch,
                                                 positions_, classes_, stream()));
  }

 private:
  int64_t positions_, classes_;
  bool labels32_;
};

// y = factor * x; dx += factor * dy.
class ScaleKernel final : public CudaKernel {
 public:
  ScaleKernel(const model::OpNode& op, const CudaContext& ctx, int64_t n, float factor)
      : CudaKernel(op, ctx), n_(n), factor_(factor) {}
  void forward(const OpArgs& a) const override {
    check_forward(launch_scale(a.inputs[0].f(), a.outputs[0].f(), factor_, a.batch * n_, stream()));
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    check_backward(launch_accumulate(a.grad_outputs[0].f(), dx, factor_, a.batch * n_, stream()));
  }

 private:
  int64_t n_;
  float factor_;
};

// y[i_0, ..., i_{r-1}] = x at index j with j[perm[d]] = i_d, per sample; strides as built by
// make_transpose (dims merged where the permutation keeps them adjacent).
class TransposeKernel final : public CudaKernel {
 public:
  TransposeKernel(const model::OpNode& op, const CudaContext& ctx, int64_t n_in, int64_t n_out,
                  const TransposeStrides& strides)
      : CudaKernel(op, ctx), n_in_(n_in), n_out_(n_out), strides_(strides) {}
  void forward(const OpArgs& a) const override {
    check_forward(launch_transpose_forward(a.inputs[0].f(), a.outputs[0].f(), strides_, a.batch,
                                           n_in_, n_out_, stream()));
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    check_backward(launch_transpose_backward(a.grad_outputs[0].f(), dx, strides_, a.batch, n_in_,
                                             n_out_, stream()));
  }

 private:
  int64_t n_in_, n_out_;  // elements per sample
  TransposeStrides strides_;
};

// The same elements in the same order: a copy.
class ReshapeKernel final : public CudaKernel {
 public:
  ReshapeKernel(const model::OpNode& op, const CudaContext& ctx, int64_t n)
      : CudaKernel(op, ctx), n_(n) {}
  void forward(const OpArgs& a) const override {
    check_forward(copy(a.outputs[0].f(), a.inputs[0].f(), a.batch * n_));
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    check_backward(launch_accumulate(a.grad_outputs[0].f(), dx, 1.0f, a.batch * n_, stream()));
  }

 private:
  int64_t n_;
};

KernelResult wrap(std::unique_ptr<OpKernel> k) { return KernelResult(std::move(k)); }

}  // namespace

KernelResult make_input(const model::OpNode&, const CudaContext&) {
  return wrap(std::make_unique<InputKernel>());
}

KernelResult make_relu(const model::OpNode& op, const CudaContext& ctx) {
  return wrap(std::make_unique<ReluKernel>(op, ctx, model::num_elements(op.input_specs[0])));
}

KernelResult make_gelu(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(const model::GeluAttrs a, op_attrs<model::GeluAttrs>(op));
  const bool exact = a.exact;
  return wrap(std::make_unique<GeluKernel>(op, ctx, model::num_elements(op.input_specs[0]), exact));
}

KernelResult make_softmax(const model::OpNode& op, const CudaContext& ctx) {
  const model::TensorSpec& x = op.input_specs[0];
  const int64_t cols = last_dim(x);
  return wrap(std::make_unique<SoftmaxKernel>(op, ctx, model::num_elements(x) / cols, cols));
}

KernelResult make_add(const model::OpNode& op, const CudaContext& ctx) {
  return wrap(std::make_unique<AddKernel>(op, ctx, model::num_elements(op.input_specs[0])));
}

KernelResult make_concat(const model::OpNode& op, const CudaContext& ctx) {
  const int rank = op.input_specs[0].shape_size();
  GP_ASSIGN_OR_RETURN(const model::AxisAttrs a, op_attrs<model::AxisAttrs>(op));
  const int axis = a.axis;
  std::vector<int64_t> chunks;
  // Integer tensors (ids) move as twice as many floats; they carry no gradient.
  for (const auto& spec : op.input_specs) {
    chunks.push_back(dims_product(spec, axis, rank) * float_units(spec));
  }
  return wrap(std::make_unique<ConcatKernel>(op, ctx, dims_product(op.input_specs[0], 0, axis),
                                             std::move(chunks)));
}

KernelResult make_slice(const model::OpNode& op, const CudaContext& ctx) {
  const model::TensorSpec& x = op.input_specs[0];
  const int rank = x.shape_size();
  GP_ASSIGN_OR_RETURN(const model::SliceAttrs a, op_attrs<model::SliceAttrs>(op));
  const int axis = a.axis;
  const int64_t start = a.start, end = a.end;
  const int64_t inner = dims_product(x, axis + 1, rank) * float_units(x);  // ids: 2 floats each
  return wrap(std::make_unique<SliceKernel>(op, ctx, dims_product(x, 0, axis),
                                            x.shape(axis) * inner, start * inner,
                                            (end - start) * inner));
}

KernelResult make_mse_loss(const model::OpNode& op, const CudaContext& ctx) {
  return wrap(std::make_unique<MseLossKernel>(op, ctx, model::num_elements(op.input_specs[0])));
}

KernelResult make_softmax_cross_entropy(const model::OpNode& op, const CudaContext& ctx) {
  const model::TensorSpec& logits = op.input_specs[0];
  const int64_t classes = last_dim(logits);
  return wrap(std::make_unique<SoftmaxCrossEntropyKernel>(
      op, ctx, model::num_elements(logits) / classes, classes, is_int32(op.input_specs[1])));
}

KernelResult make_scale(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(const model::ScaleAttrs a, op_attrs<model::ScaleAttrs>(op));
  return wrap(std::make_unique<ScaleKernel>(op, ctx, model::num_elements(op.input_specs[0]),
                                            static_cast<float>(a.factor)));
}

// Validates perm as the CPU does, then describes the permutation by (size, input stride) per
// output dim, dropping size-1 dims and merging output dims that stay adjacent in the input, so
// that the kernel walks few dims (at most kMaxTransposeRank). A window narrows its output dim
// and starts the walk at `base`.
KernelResult make_transpose(const model::OpNode& op, const CudaContext& ctx) {
  GP_ASSIGN_OR_RETURN(TransposeShape t, read_transpose(op));
  std::vector<int64_t> sizes, src;  // per merged output dim, outermost first
  int64_t n_out = 1;
  for (size_t d = 0; d < t.out_sizes.size(); ++d) {
    const int64_t size = t.out_sizes[d], stride = t.src_strides[d];
    n_out *= size;
    if (size == 1) continue;  // contributes index 0 only
    if (!sizes.empty() && src.back() == stride * size) {
      // The previous output dim steps over whole runs of this one in the input: one dim.
      sizes.back() *= size;
      src.back() = stride;
      continue;
    }
    sizes.push_back(size);
    src.push_back(stride);
  }
  if (sizes.size() > static_cast<size_t>(kMaxTransposeRank)) {
    return op_error(op, "attrs.perm: the CUDA kernel supports at most " +
                            std::to_string(kMaxTransposeRank) + " non-mergeable dims");
  }
  TransposeStrides strides;
  strides.rank = static_cast<int>(sizes.size());
  strides.base = t.base;
  int64_t out_stride = 1;
  for (int d = strides.rank - 1; d >= 0; --d) {
    strides.out[d] = out_stride;
    strides.src[d] = src[d];
    out_stride *= sizes[d];
  }
  return wrap(std::make_unique<TransposeKernel>(op, ctx, model::num_elements(op.input_specs[0]),
                                                n_out, strides));
}

KernelResult make_reshape(const model::OpNode& op, const CudaContext& ctx) {
  // Ids (int64) move as twice as many floats.
  return wrap(std::make_unique<ReshapeKernel>(
      op, ctx, model::num_elements(op.input_specs[0]) * float_units(op.input_specs[0])));
}

}  // namespace gp::exec::cuda
