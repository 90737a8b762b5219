// CPU reference kernels of the general element-wise ops (unary, broadcasting binary, compare,
// where), constants, and reductions over a set of axes (the one-axis sum and mean keep their own
// kernel, pointwise_kernels.cc). They walk their tensors through the IndexMaps shared with CUDA
// (device_api/elementwise_maps.h) and take every formula from device_api/elementwise_math.h, so
// both backends compute the same thing. Nothing is saved: backward recomputes from the inputs and
// outputs, which the executor keeps anyway. Every backward accumulates into its gradients.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/kernel_util.h"
#include "device_api/elementwise_maps.h"
#include "device_api/elementwise_math.h"
#include "device_api/gather_index.h"
#include "device_api/index_map.h"

namespace gp::exec::cpu {
namespace {

// Calls visit(j, off) for every target element j of `m` (the streams' positions in `off`),
// walking the innermost kept axis without divisions.
template <class Visit>
void for_each_kept(const IndexMap& m, Visit&& visit) {
  const int64_t n = kept_count(m);
  if (n == 0) return;
  const int last = m.kept_rank - 1;
  const int64_t inner = m.kept_dims[last];
  int64_t base[kMapStreams], off[kMapStreams];
  for (int64_t row = 0; row < n / inner; ++row) {
    kept_offsets(m, row * inner, base);
    for (int64_t i = 0; i < inner; ++i) {
      for (int s = 0; s < kMapStreams; ++s) off[s] = base[s] + i * m.kept_strides[s][last];
      visit(row * inner + i, off);
    }
  }
}

// y = f(x); dx += f'(x) dy, from x and y.
class UnaryKernel final : public OpKernel {
 public:
  UnaryKernel(int fn, int64_t n) : fn_(fn), n_(n) {}
  void forward(const OpArgs& a) const override {
    const float* x = a.inputs[0].f();
    float* y = a.outputs[0].f();
    for (int64_t i = 0; i < a.batch * n_; ++i) y[i] = ew::unary_forward(fn_, x[i]);
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    const float* x = a.inputs[0].f();
    const float* y = a.outputs[0].f();
    const float* dy = a.grad_outputs[0].f();
    if (a.fresh(0)) {
      for (int64_t i = 0; i < a.batch * n_; ++i) dx[i] = ew::unary_backward(fn_, x[i], y[i], dy[i]);
      return;
    }
    for (int64_t i = 0; i < a.batch * n_; ++i) dx[i] += ew::unary_backward(fn_, x[i], y[i], dy[i]);
  }
  bool overwrites_grad_input(size_t) const override { return true; }

 private:
  int fn_;
  int64_t n_;
};

// y = f(a, b), broadcast. Backward towards operand k sums, for each of its elements, the
// gradients of every output element it was broadcast to (in double).
class BinaryKernel final : public OpKernel {
 public:
  explicit BinaryKernel(BroadcastMaps m) : m_(m) {}
  void forward(const OpArgs& a) const override {
    const float* x0 = a.inputs[0].f();
    const float* x1 = a.inputs[1].f();
    float* y = a.outputs[0].f();
    for_each_kept(with_batch(m_.forward, a.batch), [&](int64_t, const int64_t(&off)[kMapStreams]) {
      y[off[0]] = ew::binary_forward(m_.fn, x0[off[1]], x1[off[2]]);
    });
  }
  void backward(const OpArgs& a) const override {
    const float* x0 = a.inputs[0].f();
    const float* x1 = a.inputs[1].f();
    const float* y = a.outputs[0].f();
    const float* dy = a.grad_outputs[0].f();
    for (int k = 0; k < 2; ++k) {
      float* dx = a.grad_inputs[k].f();
      if (dx == nullptr) continue;
      const IndexMap g = with_batch(m_.grad[k], a.batch);
      const int64_t frees = free_count(g);
      const bool fresh = a.fresh(static_cast<size_t>(k));
      for_each_kept(g, [&](int64_t j, const int64_t(&base)[kMapStreams]) {
        int64_t off[kMapStreams];
        double sum = 0;
        for (int64_t f = 0; f < frees; ++f) {
          free_offsets(g, f, base, off);
          sum += ew::binary_backward(m_.fn, k, x0[off[1]], x1[off[2]], y[off[0]], dy[off[0]]);
        }
        dx[j] = fresh ? static_cast<float>(sum) : dx[j] + static_cast<float>(sum);
      });
    }
  }
  // Every element of each operand is visited once (its broadcast targets summed).
  bool overwrites_grad_input(size_t) const override { return true; }

 private:
  BroadcastMaps m_;
};

// A 0/1 mask of a comparison, broadcast; no gradient towards either operand.
class CompareKernel final : public OpKernel {
 public:
  explicit CompareKernel(BroadcastMaps m) : m_(m) {}
  void forward(const OpArgs& a) const override {
    const float* x0 = a.inputs[0].f();
    const float* x1 = a.inputs[1].f();
    float* y = a.outputs[0].f();
    for_each_kept(with_batch(m_.forward, a.batch), [&](int64_t, const int64_t(&off)[kMapStreams]) {
      y[off[0]] = ew::compare(m_.fn, x0[off[1]], x1[off[2]]);
    });
  }
  void backward(const OpArgs&) const override {}

 private:
  BroadcastMaps m_;
};

// y = cond != 0 ? a : b, broadcast; da gets dy where the condition holds, db elsewhere, and the
// condition nothing.
class WhereKernel final : public OpKernel {
 public:
  explicit WhereKernel(BroadcastMaps m) : m_(m) {}
  void forward(const OpArgs& a) const override {
    const float* cond = a.inputs[0].f();
    const float* x0 = a.inputs[1].f();
    const float* x1 = a.inputs[2].f();
    float* y = a.outputs[0].f();
    for_each_kept(with_batch(m_.forward, a.batch), [&](int64_t, const int64_t(&off)[kMapStreams]) {
      y[off[0]] = cond[off[1]] != 0.0f ? x0[off[2]] : x1[off[3]];
    });
  }
  void backward(const OpArgs& a) const override {
    const float* cond = a.inputs[0].f();
    const float* dy = a.grad_outputs[0].f();
    for (int k = 1; k < 3; ++k) {
      float* dx = a.grad_inputs[k].f();
      if (dx == nullptr) continue;
      const bool when = k == 1;  // a takes the elements where the condition holds
      const IndexMap g = with_batch(m_.grad[k], a.batch);
      const int64_t frees = free_count(g);
      const bool fresh = a.fresh(static_cast<size_t>(k));
      for_each_kept(g, [&](int64_t j, const int64_t(&base)[kMapStreams]) {
        int64_t off[kMapStreams];
        double sum = 0;
        for (int64_t f = 0; f < frees; ++f) {
          free_offsets(g, f, base, off);
          if ((cond[off[1]] != 0.0f) == when) sum += dy[off[0]];
        }
        dx[j] = fresh ? static_cast<float>(sum) : dx[j] + static_cast<float>(sum);
      });
    }
  }
  // Every element of a and b is visited once (its broadcast targets summed); the condition
  // gets no gradient.
  bool overwrites_grad_input(size_t k) const override { return k != 0; }

 private:
  BroadcastMaps m_;
};

// The same values in every sample (int64 when `integer`); the input only sets the batch.
class ConstantKernel final : public OpKernel {
 public:
  ConstantKernel(std::vector<float> values, bool integer)
      : values_(std::move(values)), integer_(integer) {}
  void forward(const OpArgs& a) const override {
    const auto n = static_cast<int64_t>(values_.size());
    for (int64_t b = 0; b < a.batch; ++b) {
      if (integer_) {
        int64_t* y = a.outputs[0].i() + b * n;
        for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int64_t>(values_[i]);
      } else {
        std::memcpy(a.outputs[0].f() + b * n, values_.data(), values_.size() * sizeof(float));
      }
    }
  }
  void backward(const OpArgs&) const override {}

 private:
  std::vector<float> values_;
  bool integer_;
};

// cast: integers (int64, or int32 where the spec says so) as floats; the integers get no gradient.
class CastKernel final : public OpKernel {
 public:
  CastKernel(int64_t per_sample, bool int32, bool to_int64)
      : per_sample_(per_sample), int32_(int32), to_int64_(to_int64) {}
  void forward(const OpArgs& a) const override {
    const int64_t n = a.batch * per_sample_;
    if (to_int64_) {  // truncated toward zero, as ONNX's Cast and torch's .long()
      const float* x = a.inputs[0].f();
      int64_t* y = a.outputs[0].i();
      for (int64_t k = 0; k < n; ++k) y[k] = ew::float_to_id(x[k]);
      return;
    }
    float* y = a.outputs[0].f();
    for (int64_t k = 0; k < n; ++k)
      y[k] = static_cast<float>(load_index(a.inputs[0].data, k, int32_));
  }
  void backward(const OpArgs&) const override {}

 private:
  int64_t per_sample_;
  bool int32_;
  bool to_int64_;
};

class CumSumKernel final : public OpKernel {
 public:
  explicit CumSumKernel(CumSumShape c) : c_(c) {}
  void forward(const OpArgs& a) const override {
    const int64_t lines = a.batch * c_.outer * c_.inner;
    for (int64_t l = 0; l < lines; ++l) {
      cumsum_line(c_, l, a.inputs[0].f(), a.outputs[0].f(), c_.reverse, false);
    }
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    const int64_t lines = a.batch * c_.outer * c_.inner;
    for (int64_t l = 0; l < lines; ++l) {
      cumsum_line(c_, l, a.grad_outputs[0].f(), dx, !c_.reverse, true);
    }
  }

 private:
  CumSumShape c_;
};

// Reduction of the free axes into each output element: sum, mean, max (PyTorch's amax: a tie
// shares the gradient equally) or L2 norm. Stream 0 is the input; the output is the target.
class GeneralReduceKernel final : public OpKernel {
 public:
  explicit GeneralReduceKernel(ReduceMap r) : r_(r) {}
  void forward(const OpArgs& a) const override {
    const float* x = a.inputs[0].f();
    float* y = a.outputs[0].f();
    const IndexMap m = with_batch(r_.map, a.batch);
    const int64_t frees = free_count(m);
    for_each_kept(m, [&](int64_t j, const int64_t(&base)[kMapStreams]) {
      int64_t off[kMapStreams];
      if (r_.mode == ew::kMaxReduce) {
        free_offsets(m, 0, base, off);
        float mx = x[off[0]];
        for (int64_t f = 1; f < frees; ++f) {
          free_offsets(m, f, base, off);
          const float v = x[off[0]];
          if (v > mx || std::isnan(v)) mx = v;  // NaN propagates, as torch.amax
        }
        y[j] = mx;
        return;
      }
      double sum = 0;
      for (int64_t f = 0; f < frees; ++f) {
        free_offsets(m, f, base, off);
        const double v = x[off[0]];
        sum += r_.mode == ew::kL2 ? v * v : v;
      }
      if (r_.mode == ew::kMean) sum /= static_cast<double>(r_.count);
      y[j] = static_cast<float>(r_.mode == ew::kL2 ? std::sqrt(sum) : sum);
    });
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    const float* x = a.inputs[0].f();
    const float* y = a.outputs[0].f();
    const float* dy = a.grad_outputs[0].f();
    const IndexMap m = with_batch(r_.map, a.batch);
    const int64_t frees = free_count(m);
    const float mean_scale = 1.0f / static_cast<float>(r_.count);
    for_each_kept(m, [&](int64_t j, const int64_t(&base)[kMapStreams]) {
      int64_t off[kMapStreams];
      switch (r_.mode) {
        case ew::kSum:
        case ew::kMean: {
          const float g = r_.mode == ew::kMean ? dy[j] * mean_scale : dy[j];
          for (int64_t f = 0; f < frees; ++f) {
            free_offsets(m, f, base, off);
            dx[off[0]] += g;
          }
          break;
        }
        case ew::kMaxReduce: {
          int64_t ties = 0;
          for (int64_t f = 0; f < frees; ++f) {
            free_offsets(m, f, base, off);
            ties += x[off[0]] == y[j] ? 1 : 0;
          }
          if (ties == 0) break;  // a NaN maximum: no element equals it
          const float g = dy[j] / static_cast<float>(ties);
          for (int64_t f = 0; f < frees; ++f) {
            free_offsets(m, f, base, off);
            if (x[off[0]] == y[j]) dx[off[0]] += g;
          }
          break;
        }
        default: {  // ew::kL2: d|x|/dx = x / |x|, taken as 0 at the origin
          if (y[j] == 0.0f) break;
          const float g = dy[j] / y[j];
          for (int64_t f = 0; f < frees; ++f) {
            free_offsets(m, f, base, off);
            dx[off[0]] += g * x[off[0]];
          }
          break;
        }
      }
    });
  }

 private:
  ReduceMap r_;
};

// y = x with a per-sample axis replaced by its constant indices; dx gets, for each input element,
// the sum of dy over the outputs that read it (device_api/gather_index.h).
class GatherKernel final : public OpKernel {
 public:
  GatherKernel(GatherShape g, model::GatherAttrs a) : g_(g), a_(std::move(a)) {}
  void forward(const OpArgs& a) const override {
    const float* x = a.inputs[0].f();
    float* y = a.outputs[0].f();
    const int64_t n = a.batch * g_.outer * g_.count * g_.inner;
    for (int64_t e = 0; e < n; ++e) y[e] = x[gather_source(g_, a_.indices.data(), e)];
  }
  void backward(const OpArgs& a) const override {
    float* dx = a.grad_inputs[0].f();
    if (dx == nullptr) return;
    const float* dy = a.grad_outputs[0].f();
    const int64_t n = a.batch * g_.outer * g_.dim * g_.inner;
    for (int64_t e = 0; e < n; ++e) {
      dx[e] +=
          static_cast<float>(gather_grad(g_, a_.inverse_offsets.data(), a_.inverse.data(), dy, e));
    }
  }

 private:
  GatherShape g_;
  model::GatherAttrs a_;
};

}  // namespace

KernelResult make_gather(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(model::GatherAttrs a, op_attrs<model::GatherAttrs>(op));
  const model::TensorSpec& x = op.input_specs[0];
  const GatherShape g{dims_product(x, 0, a.axis), x.shape(a.axis),
                      static_cast<int64_t>(a.indices.size()),
                      dims_product(x, a.axis + 1, x.shape_size())};
  return std::unique_ptr<OpKernel>(std::make_unique<GatherKernel>(g, std::move(a)));
}

KernelResult make_cast(const model::OpNode& op) {
  const model::TensorSpec& x = op.input_specs[0];
  GP_ASSIGN_OR_RETURN(const model::CastAttrs c, op_attrs<model::CastAttrs>(op));
  return std::unique_ptr<OpKernel>(
      std::make_unique<CastKernel>(model::num_elements(x), is_int32(x), c.to_int64));
}

KernelResult make_cumsum(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const CumSumShape c, read_cumsum(op));
  return std::unique_ptr<OpKernel>(std::make_unique<CumSumKernel>(c));
}

KernelResult make_unary(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const int fn, read_unary(op));
  return std::unique_ptr<OpKernel>(
      std::make_unique<UnaryKernel>(fn, model::num_elements(op.input_specs[0])));
}

KernelResult make_binary(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(BroadcastMaps m, read_binary(op));
  return std::unique_ptr<OpKernel>(std::make_unique<BinaryKernel>(m));
}

KernelResult make_compare(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(BroadcastMaps m, read_compare(op));
  return std::unique_ptr<OpKernel>(std::make_unique<CompareKernel>(m));
}

KernelResult make_where(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(BroadcastMaps m, read_where(op));
  return std::unique_ptr<OpKernel>(std::make_unique<WhereKernel>(m));
}

KernelResult make_constant(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(const model::ConstantAttrs c, op_attrs<model::ConstantAttrs>(op));
  const int64_t n = model::num_elements(op.proto->outputs(0));
  const auto& values = op.proto->param_values();
  const auto it = values.find("value");
  if (it == values.end()) {
    return op_error(op, "param_values['value']: missing; a constant needs its " +
                            std::to_string(n) + " float32 values");
  }
  if (static_cast<int64_t>(it->second.size()) != n * 4) {
    return op_error(op, "param_values['value']: " + std::to_string(it->second.size()) +
                            " bytes, expected " + std::to_string(n * 4) + " (" + std::to_string(n) +
                            " float32 values)");
  }
  std::vector<float> v(static_cast<size_t>(n));
  std::memcpy(v.data(), it->second.data(), it->second.size());
  return std::unique_ptr<OpKernel>(std::make_unique<ConstantKernel>(std::move(v), c.integer));
}

KernelResult make_general_reduce(const model::OpNode& op) {
  GP_ASSIGN_OR_RETURN(ReduceMap r, read_reduce_map(op));
  return std::unique_ptr<OpKernel>(std::make_unique<GeneralReduceKernel>(r));
}

}  // namespace gp::exec::cpu
