// Vision operators over per-sample [C, H, W] images: conv2d, max and average pooling, and batch
// normalisation (any rank, channels first).
#include <string>
#include <vector>

#include "ops_internal.h"

namespace gp::model::detail {
namespace {

double bytes_of(const TensorSpec& spec) { return static_cast<double>(size_bytes(spec)); }
double elems_of(const TensorSpec& spec) { return static_cast<double>(num_elements(spec)); }

// attrs.<name> as [h, w], every value >= min_value; `fallback` when absent (empty: required).
Result<std::vector<int64_t>> pair_attr(const Operator& op, std::string_view name,
                                       std::vector<int64_t> fallback, int64_t min_value) {
  const bool present = op.attrs().count(std::string(name)) > 0;
  if (!present && !fallback.empty()) return fallback;
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> v, attr_ints(op, name));
  const std::string label = "attrs." + std::string(name) + " = " + ints_string(v);
  if (v.size() != 2) return invalid_argument(label + ": expected 2 values [h, w]");
  if (v[0] < min_value || v[1] < min_value) {
    return invalid_argument(label + ": values must be >= " + std::to_string(min_value));
  }
  return v;
}

// A sliding window over the spatial dims of x [C, H, W] and the output size it gives.
using Window = Window2d;

// Reads and checks kernel, stride and padding. Pooling defaults the stride to the kernel and
// needs padding < kernel (so that no window holds only padding).
Result<Window> read_window(const Operator& op, const TensorSpec& x, bool pool) {
  GP_RETURN_IF_ERROR(require_float(x, 0));
  if (x.shape_size() != 3) {
    return invalid_argument("inputs[0]: expected per-sample [channels, height, width], got " +
                            shape_string(x));
  }
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> k, pair_attr(op, "kernel", {}, 1));
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> s,
                      pair_attr(op, "stride", pool ? k : std::vector<int64_t>{1, 1}, 1));
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> p, pair_attr(op, "padding", {0, 0}, 0));
  if (pool && (p[0] >= k[0] || p[1] >= k[1])) {
    return invalid_argument("attrs.padding = " + ints_string(p) +
                            ": must be smaller than attrs.kernel = " + ints_string(k) +
                            " (a window would hold only padding)");
  }
  Window win{x.shape(0), x.shape(1), x.shape(2), k[0], k[1], s[0], s[1], p[0], p[1]};
  if (win.h + 2 * win.ph < win.kh || win.w + 2 * win.pw < win.kw) {
    return invalid_argument("attrs.kernel = " + ints_string(k) + " does not fit the input " +
                            shape_string(x) + " padded by attrs.padding = " + ints_string(p));
  }
  win.ho = (win.h + 2 * win.ph - win.kh) / win.sh + 1;
  win.wo = (win.w + 2 * win.pw - win.kw) / win.sw + 1;
  if (pool) {
    GP_ASSIGN_OR_RETURN(int64_t ceil_mode, attr_int_or(op, "ceil_mode", 0));
    GP_RETURN_IF_ERROR(boolean("ceil_mode", ceil_mode));
    if (ceil_mode) {
      // Rounds the window count up, as PyTorch: one more window where the last would start
      // inside the image or its left padding (never in the right padding alone).
      auto up = [](int64_t size, int64_t kernel, int64_t stride, int64_t pad) {
        int64_t n = (size + 2 * pad - kernel + stride - 1) / stride + 1;
        if ((n - 1) * stride >= size + pad) --n;
        return n;
      };
      win.ho = up(win.h, win.kh, win.sh, win.ph);
      win.wo = up(win.w, win.kw, win.sw, win.pw);
    }
  }
  return win;
}

}  // namespace

Status infer_conv2d(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];
  GP_ASSIGN_OR_RETURN(Window win, read_window(op, x, false));
  GP_ASSIGN_OR_RETURN(int64_t out_channels, attr_int(op, "out_channels"));
  GP_RETURN_IF_ERROR(positive("out_channels", out_channels));
  GP_ASSIGN_OR_RETURN(int64_t bias, attr_int_or(op, "bias", 1));
  GP_RETURN_IF_ERROR(boolean("bias", bias));
  GP_ASSIGN_OR_RETURN(int64_t groups, attr_int_or(op, "groups", 1));
  GP_RETURN_IF_ERROR(positive("groups", groups));
  if (win.c % groups != 0 || out_channels % groups != 0) {
    return invalid_argument("attrs.groups = " + std::to_string(groups) +
                            " must divide the input channels (" + std::to_string(win.c) +
                            ") and attrs.out_channels (" + std::to_string(out_channels) + ")");
  }
  out->attrs = ConvAttrs{win, out_channels, bias != 0, groups};
  const TensorSpec y = make_spec({out_channels, win.ho, win.wo}, x.dtype());
  out->outputs = {y};
  out->params.push_back(
      make_param("weight", {out_channels, win.c / groups, win.kh, win.kw}, x.dtype()));
  if (bias) out->params.push_back(make_param("bias", {out_channels}, x.dtype()));
  sum_params(out);

  // As im2col + GEMM: cols [C*kh*kw, Ho*Wo] per sample; per group, Y_g [out/G, Ho*Wo] =
  // W_g [out/G, C/G*kh*kw] cols_g.
  const double elt = static_cast<double>(dtype_size_bytes(x.dtype()));
  const double patch = static_cast<double>(win.c * win.kh * win.kw);
  const double positions = static_cast<double>(win.ho * win.wo);
  const double n_out = elems_of(y);
  const double gemm = 2.0 * patch / static_cast<double>(groups) * n_out;
  const double cols_bytes = patch * positions * elt;
  const double param_bytes = static_cast<double>(out->cost.param_count) * elt;
  OpCost& c = out->cost;
  c.forward_flops = gemm + (bias ? n_out : 0);
  c.backward_flops = 2 * gemm + (bias ? n_out : 0);  // dW and dcols GEMMs, bias reduction
  c.forward_bytes = bytes_of(x) + 2 * cols_bytes + bytes_of(y);
  // im2col again for dW, dcols written and read, col2im into dx (read and written), dy read.
  c.backward_bytes = bytes_of(x) + 4 * cols_bytes + 2 * bytes_of(x) + bytes_of(y);
  c.forward_fixed_bytes = param_bytes;
  c.backward_fixed_bytes = 2 * param_bytes;
  c.workspace_bytes = patch * positions * 4;  // im2col columns, rebuilt by backward
  c.forward_kernels = 2 + (bias ? 1 : 0);
  c.backward_kernels = 4 + (bias ? 1 : 0);
  return ok_status();
}

Status infer_conv_transpose2d(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];
  GP_RETURN_IF_ERROR(require_float(x, 0));
  if (x.shape_size() != 3) {
    return invalid_argument("inputs[0]: expected per-sample [channels, height, width], got " +
                            shape_string(x));
  }
  GP_ASSIGN_OR_RETURN(int64_t out_channels, attr_int(op, "out_channels"));
  GP_RETURN_IF_ERROR(positive("out_channels", out_channels));
  GP_ASSIGN_OR_RETURN(int64_t bias, attr_int_or(op, "bias", 1));
  GP_RETURN_IF_ERROR(boolean("bias", bias));
  GP_ASSIGN_OR_RETURN(int64_t groups, attr_int_or(op, "groups", 1));
  if (groups != 1) {
    return invalid_argument("attrs.groups = " + std::to_string(groups) +
                            ": conv_transpose2d supports groups 1 only");
  }
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> k, pair_attr(op, "kernel", {}, 1));
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> s, pair_attr(op, "stride", {1, 1}, 1));
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> p, pair_attr(op, "padding", {0, 0}, 0));
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> op_pad, pair_attr(op, "output_padding", {0, 0}, 0));
  if (op_pad[0] >= s[0] || op_pad[1] >= s[1]) {
    return invalid_argument("attrs.output_padding = " + ints_string(op_pad) +
                            ": each must be smaller than attrs.stride = " + ints_string(s));
  }
  Window2d win{x.shape(0), x.shape(1), x.shape(2), k[0], k[1], s[0], s[1], p[0], p[1]};
  win.ho = (win.h - 1) * win.sh - 2 * win.ph + win.kh + op_pad[0];
  win.wo = (win.w - 1) * win.sw - 2 * win.pw + win.kw + op_pad[1];
  if (win.ho <= 0 || win.wo <= 0) {
    return invalid_argument("attrs.padding = " + ints_string(p) +
                            " leaves no output for the input " + shape_string(x) +
                            " and attrs.kernel = " + ints_string(k));
  }
  out->attrs = ConvTransposeAttrs{win, out_channels, bias != 0};
  const TensorSpec y = make_spec({out_channels, win.ho, win.wo}, x.dtype());
  out->outputs = {y};
  out->params.push_back(make_param("weight", {win.c, out_channels, win.kh, win.kw}, x.dtype()));
  if (bias) out->params.push_back(make_param("bias", {out_channels}, x.dtype()));
  sum_params(out);
  // Every input element meets every kernel tap of every output channel once.
  const double gemm = 2.0 * elems_of(x) * static_cast<double>(out_channels * win.kh * win.kw);
  const double param_bytes = static_cast<double>(out->cost.param_count) * 4;
  OpCost& c = out->cost;
  c.forward_flops = gemm + (bias ? elems_of(y) : 0);
  c.backward_flops = 2 * gemm + (bias ? elems_of(y) : 0);  // dx and dW
  c.forward_bytes = bytes_of(x) + bytes_of(y);
  c.backward_bytes = 2 * bytes_of(x) + bytes_of(y);
  c.forward_fixed_bytes = param_bytes;
  c.backward_fixed_bytes = 2 * param_bytes;
  // As GEMM + col2im: cols [out*kh*kw, H*W] per sample, rebuilt by backward (im2col of dy).
  c.workspace_bytes = static_cast<double>(out_channels * win.kh * win.kw * win.h * win.w) * 4;
  c.forward_bytes += 2 * c.workspace_bytes;
  c.backward_bytes += 2 * c.workspace_bytes;
  c.forward_kernels = 2 + (bias ? 1 : 0);
  c.backward_kernels = 3 + (bias ? 1 : 0);
  return ok_status();
}

Status infer_resize(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];
  GP_RETURN_IF_ERROR(require_float(x, 0));
  if (x.shape_size() != 3) {
    return invalid_argument("inputs[0]: expected per-sample [channels, height, width], got " +
                            shape_string(x));
  }
  GP_ASSIGN_OR_RETURN(std::vector<int64_t> size, pair_attr(op, "size", {}, 1));
  const auto mode = attr_string_or(op, "mode", "nearest");
  if (!mode.ok()) return mode.status();
  if (*mode != "nearest" && *mode != "bilinear") {
    return invalid_argument("attrs.mode = '" + *mode + "', expected nearest or bilinear");
  }
  GP_ASSIGN_OR_RETURN(int64_t align, attr_int_or(op, "align_corners", 0));
  GP_RETURN_IF_ERROR(boolean("align_corners", align));
  if (align != 0 && *mode != "bilinear") {
    return invalid_argument("attrs.align_corners = 1: only bilinear resizing has corners to align");
  }
  out->attrs = ResizeAttrs{x.shape(0), x.shape(1),          x.shape(2), size[0],
                           size[1],    *mode == "bilinear", align != 0};
  const TensorSpec y = make_spec({x.shape(0), size[0], size[1]}, x.dtype());
  out->outputs = {y};
  const double taps = *mode == "bilinear" ? 4 : 1;
  OpCost& c = out->cost;
  c.forward_flops = 2 * taps * elems_of(y);
  c.backward_flops = 2 * taps * elems_of(y);
  c.forward_bytes = bytes_of(x) + bytes_of(y);
  c.backward_bytes = 2 * bytes_of(x) + bytes_of(y);
  c.forward_kernels = 1;
  c.backward_kernels = 1;
  return ok_status();
}

Status infer_max_pool2d(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];
  GP_ASSIGN_OR_RETURN(Window win, read_window(op, x, true));
  out->attrs = PoolAttrs{win};
  const TensorSpec y = make_spec({win.c, win.ho, win.wo}, x.dtype());
  out->outputs = {y};
  const double n_out = elems_of(y);
  const double index_bytes = 4 * n_out;  // the argmax of every window, kept for backward
  OpCost& c = out->cost;
  c.forward_flops = static_cast<double>(win.kh * win.kw) * n_out;  // comparisons
  c.backward_flops = n_out;                                        // scatter-add
  c.forward_bytes = bytes_of(x) + bytes_of(y) + index_bytes;
  c.backward_bytes = bytes_of(y) + index_bytes + 2 * bytes_of(x);
  c.saved_bytes = index_bytes;
  c.forward_kernels = 1;
  c.backward_kernels = 1;
  return ok_status();
}

Status infer_avg_pool2d(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];
  GP_ASSIGN_OR_RETURN(Window win, read_window(op, x, true));
  GP_ASSIGN_OR_RETURN(int64_t include_pad, attr_int_or(op, "count_include_pad", 1));
  GP_RETURN_IF_ERROR(boolean("count_include_pad", include_pad));
  out->attrs = PoolAttrs{win, include_pad != 0};
  const TensorSpec y = make_spec({win.c, win.ho, win.wo}, x.dtype());
  out->outputs = {y};
  const double window = static_cast<double>(win.kh * win.kw) * elems_of(y);
  OpCost& c = out->cost;
  c.forward_flops = window + elems_of(y);  // sums, then one division per window
  c.backward_flops = window;
  c.forward_bytes = bytes_of(x) + bytes_of(y);
  c.backward_bytes = bytes_of(y) + 2 * bytes_of(x);
  c.forward_kernels = 1;  // backward needs only the shapes: nothing kept
  c.backward_kernels = 1;
  return ok_status();
}

Status infer_batch_norm(const Operator& op, std::span<const TensorSpec> in, InferredOp* out) {
  const TensorSpec& x = in[0];
  GP_RETURN_IF_ERROR(require_float(x, 0));
  GP_RETURN_IF_ERROR(require_rank_at_least(x, 1, 0));
  GP_ASSIGN_OR_RETURN(const double eps, positive_epsilon(op));
  out->attrs = NormAttrs{eps};
  const int64_t channels = x.shape(0);
  out->outputs = {x};
  out->params.push_back(make_param("gamma", {channels}, x.dtype()));
  out->params.push_back(make_param("beta", {channels}, x.dtype()));
  sum_params(out);
  const double n = elems_of(x), b = bytes_of(x);
  OpCost& c = out->cost;
  c.forward_flops = 8 * n;
  c.backward_flops = 13 * n;  // the statistics again, two reductions, the input gradient
  c.forward_bytes = 3 * b;    // statistics pass, then normalise (read and write)
  c.backward_bytes = 6 * b;   // statistics pass, reductions over x and dy, dx from x and dy
  c.forward_fixed_bytes = static_cast<double>(2 * channels * dtype_size_bytes(x.dtype()));
  c.backward_fixed_bytes = 2 * c.forward_fixed_bytes;
  c.forward_kernels = 2;
  c.backward_kernels = 3;
  return ok_status();
}

}  // namespace gp::model::detail
