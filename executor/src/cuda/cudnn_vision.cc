#include "cuda/cudnn_vision.h"

#include <limits>
#include <optional>
#include <utility>
#include <vector>

namespace gp::exec::cuda {
namespace {

bool fits_int(int64_t v) { return v > 0 && v <= std::numeric_limits<int>::max(); }

// A cuDNN descriptor destroyed with its owner; empty when creating or setting it failed.
template <typename T>
class Desc {
 public:
  Desc() = default;
  Desc(T handle, cudnnStatus_t (*destroy)(T)) : handle_(handle), destroy_(destroy) {}
  Desc(Desc&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)), destroy_(o.destroy_) {}
  Desc& operator=(Desc&& o) noexcept {
    std::swap(handle_, o.handle_);
    std::swap(destroy_, o.destroy_);
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() {
    if (handle_ != nullptr) destroy_(handle_);
  }
  T get() const { return handle_; }
  explicit operator bool() const { return handle_ != nullptr; }

 private:
  T handle_ = nullptr;
  cudnnStatus_t (*destroy_)(T) = nullptr;
};

using TensorDesc = Desc<cudnnTensorDescriptor_t>;

// An NCHW float tensor [n, c, h, w].
TensorDesc tensor(const CudnnApi& api, int64_t n, int64_t c, int64_t h, int64_t w) {
  if (!fits_int(n) || !fits_int(c) || !fits_int(h) || !fits_int(w)) return {};
  cudnnTensorDescriptor_t t = nullptr;
  if (api.create_tensor(&t) != CUDNN_STATUS_SUCCESS) return {};
  TensorDesc d(t, api.destroy_tensor);
  if (api.set_tensor_4d(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(n),
                        static_cast<int>(c), static_cast<int>(h),
                        static_cast<int>(w)) != CUDNN_STATUS_SUCCESS) {
    return {};
  }
  return d;
}

// fp32 GEMM precision allows FMA kernels only: cuDNN's default math may use TF32 tensor cores.
cudnnMathType_t math_type(MatmulPrecision p) {
  return p == MatmulPrecision::kFp32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
}

// The first (fastest by cuDNN's heuristic) deterministic algorithm that fits `budget_bytes` and
// keeps the device's precision; none when no result does.
template <typename Perf>
std::optional<Perf> pick(const Perf* results, int count, size_t budget_bytes, MatmulPrecision p) {
  for (int i = 0; i < count; ++i) {
    const Perf& r = results[i];
    // ALLOW_CONVERSION computes in fp16, whose range no GEMM precision here accepts.
    const bool math_ok = p == MatmulPrecision::kFp32
                             ? r.mathType == CUDNN_FMA_MATH
                             : r.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    if (r.status == CUDNN_STATUS_SUCCESS && r.determinism == CUDNN_DETERMINISTIC &&
        r.memory <= budget_bytes && math_ok) {
      return r;
    }
  }
  return std::nullopt;
}

// The convolution descriptor set to the chosen algorithm's math type; false when there is no
// algorithm (or the type cannot be set), so the caller computes by hand.
template <typename Perf>
bool use(const CudnnApi& api, cudnnConvolutionDescriptor_t conv, const std::optional<Perf>& perf) {
  return perf && api.set_conv_math(conv, perf->mathType) == CUDNN_STATUS_SUCCESS;
}

// The plan of `batch` among `plans`, made by `make` on the first call with that batch and kept.
template <typename Plan, typename Make>
const Plan& plan_of(std::vector<std::unique_ptr<Plan>>& plans, int64_t batch, Make make) {
  for (const auto& p : plans) {
    if (p->batch == batch) return *p;
  }
  plans.push_back(make());
  return *plans.back();
}

constexpr int kAlgorithms = 8;  // more than cuDNN 9 has of any convolution direction
const float kOne = 1.0f, kZero = 0.0f;

}  // namespace

// ---- conv2d -------------------------------------------------------------------------------------

struct CudnnConv2d::Shared {
  VisionWindow w;
  int64_t out = 0;
  Desc<cudnnFilterDescriptor_t> filter;
  Desc<cudnnConvolutionDescriptor_t> conv;
};

struct CudnnConv2d::Plan {
  int64_t batch = 0;
  TensorDesc x, y;
  std::optional<cudnnConvolutionFwdAlgoPerf_t> forward;
  std::optional<cudnnConvolutionBwdDataAlgoPerf_t> data;
  std::optional<cudnnConvolutionBwdFilterAlgoPerf_t> filter;
};

CudnnConv2d::CudnnConv2d(const CudaContext& ctx, int64_t workspace_floats_per_sample)
    : ctx_(ctx), workspace_floats_per_sample_(workspace_floats_per_sample) {}
CudnnConv2d::~CudnnConv2d() = default;

std::unique_ptr<CudnnConv2d> CudnnConv2d::create(const CudaContext& ctx, const VisionWindow& w,
                                                 int64_t out, int64_t groups,
                                                 int64_t workspace_floats_per_sample) {
  if (ctx.cudnn == nullptr || groups <= 0 || w.c % groups != 0 || !fits_int(groups)) {
    return nullptr;
  }
  const CudnnApi& api = *ctx.cudnn;
  auto shared = std::make_unique<Shared>();
  shared->w = w;
  shared->out = out;
  cudnnFilterDescriptor_t f = nullptr;
  if (!fits_int(out) || !fits_int(w.c / groups) || !fits_int(w.kh) || !fits_int(w.kw) ||
      api.create_filter(&f) != CUDNN_STATUS_SUCCESS) {
    return nullptr;
  }
  shared->filter = Desc(f, api.destroy_filter);
  cudnnConvolutionDescriptor_t c = nullptr;
  if (api.set_filter_4d(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(out),
                        static_cast<int>(w.c / groups), static_cast<int>(w.kh),
                        static_cast<int>(w.kw)) != CUDNN_STATUS_SUCCESS ||
      api.create_conv(&c) != CUDNN_STATUS_SUCCESS) {
    return nullptr;
  }
  shared->conv = Desc(c, api.destroy_conv);
  if (w.ph < 0 || w.pw < 0 || !fits_int(w.ph + 1) || !fits_int(w.pw + 1) || !fits_int(w.sh) ||
      !fits_int(w.sw) ||
      api.set_conv_2d(c, static_cast<int>(w.ph), static_cast<int>(w.pw), static_cast<int>(w.sh),
                      static_cast<int>(w.sw), 1, 1, CUDNN_CROSS_CORRELATION,
                      CUDNN_DATA_FLOAT) != CUDNN_STATUS_SUCCESS ||
      api.set_conv_groups(c, static_cast<int>(groups)) != CUDNN_STATUS_SUCCESS ||
      api.set_conv_math(c, math_type(ctx.precision)) != CUDNN_STATUS_SUCCESS) {
    return nullptr;
  }
  // The op's output shape must be cuDNN's.
  const TensorDesc x = tensor(api, 1, w.c, w.h, w.w);
  int n = 0, k = 0, ho = 0, wo = 0;
  if (!x || api.conv_output_dim(c, x.get(), f, &n, &k, &ho, &wo) != CUDNN_STATUS_SUCCESS ||
      k != out || ho != w.ho || wo != w.wo) {
    return nullptr;
  }
  std::unique_ptr<CudnnConv2d> conv(new CudnnConv2d(ctx, workspace_floats_per_sample));
  conv->shared_ = std::move(shared);
  return conv;
}

const CudnnConv2d::Plan& CudnnConv2d::plan_for(int64_t batch) const {
  return plan_of(plans_, batch, [&] {
    const CudnnApi& api = *ctx_.cudnn;
    const Shared& s = *shared_;
    auto plan = std::make_unique<Plan>();
    plan->batch = batch;
    plan->x = tensor(api, batch, s.w.c, s.w.h, s.w.w);
    plan->y = tensor(api, batch, s.out, s.w.ho, s.w.wo);
    const size_t budget = static_cast<size_t>(batch * workspace_floats_per_sample_) * sizeof(float);
    // The heuristics search within the descriptor's math type, which the calls change.
    if (!plan->x || !plan->y ||
        api.set_conv_math(s.conv.get(), math_type(ctx_.precision)) != CUDNN_STATUS_SUCCESS) {
      return plan;
    }
    int count = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[kAlgorithms];
    if (api.forward_algorithms(ctx_.dnn, plan->x.get(), s.filter.get(), s.conv.get(), plan->y.get(),
                               kAlgorithms, &count, fwd) == CUDNN_STATUS_SUCCESS) {
      plan->forward = pick(fwd, count, budget, ctx_.precision);
    }
    cudnnConvolutionBwdDataAlgoPerf_t data[kAlgorithms];
    if (api.backward_data_algorithms(ctx_.dnn, s.filter.get(), plan->y.get(), s.conv.get(),
                                     plan->x.get(), kAlgorithms, &count,
                                     data) == CUDNN_STATUS_SUCCESS) {
      plan->data = pick(data, count, budget, ctx_.precision);
    }
    cudnnConvolutionBwdFilterAlgoPerf_t filter[kAlgorithms];
    if (api.backward_filter_algorithms(ctx_.dnn, plan->x.get(), plan->y.get(), s.conv.get(),
                                       s.filter.get(), kAlgorithms, &count,
                                       filter) == CUDNN_STATUS_SUCCESS) {
      plan->filter = pick(filter, count, budget, ctx_.precision);
    }
    return plan;
  });
}

bool CudnnConv2d::forward(int64_t batch, const float* x, const float* w, float* y,
                          float* workspace) const {
  std::lock_guard<std::mutex> lock(ctx_.library_mutex());
  const Plan& p = plan_for(batch);
  const CudnnApi& api = *ctx_.cudnn;
  if (!use(api, shared_->conv.get(), p.forward)) return false;
  ctx_.check(
      api.conv_forward(ctx_.dnn, &kOne, p.x.get(), x, shared_->filter.get(), w, shared_->conv.get(),
                       p.forward->algo, workspace, p.forward->memory, &kZero, p.y.get(), y),
      "conv2d forward (cuDNN)");
  return true;
}

bool CudnnConv2d::backward_data(int64_t batch, const float* w, const float* dy, float* dx,
                                float* workspace) const {
  std::lock_guard<std::mutex> lock(ctx_.library_mutex());
  const Plan& p = plan_for(batch);
  const CudnnApi& api = *ctx_.cudnn;
  if (!use(api, shared_->conv.get(), p.data)) return false;
  ctx_.check(api.conv_backward_data(ctx_.dnn, &kOne, shared_->filter.get(), w, p.y.get(), dy,
                                    shared_->conv.get(), p.data->algo, workspace, p.data->memory,
                                    &kOne, p.x.get(), dx),
             "conv2d backward: input gradient (cuDNN)");
  return true;
}

bool CudnnConv2d::backward_filter(int64_t batch, const float* x, const float* dy, float* dw,
                                  float* workspace) const {
  std::lock_guard<std::mutex> lock(ctx_.library_mutex());
  const Plan& p = plan_for(batch);
  const CudnnApi& api = *ctx_.cudnn;
  if (!use(api, shared_->conv.get(), p.filter)) return false;
  ctx_.check(api.conv_backward_filter(ctx_.dnn, &kOne, p.x.get(), x, p.y.get(), dy,
                                      shared_->conv.get(), p.filter->algo, workspace,
                                      p.filter->memory, &kOne, shared_->filter.get(), dw),
             "conv2d backward: weight gradient (cuDNN)");
  return true;
}

// ---- pooling ------------------------------------------------------------------------------------

struct CudnnAvgPool2d::Shared {
  VisionWindow w;
  Desc<cudnnPoolingDescriptor_t> pool;
};

struct CudnnAvgPool2d::Plan {
  int64_t batch = 0;
  TensorDesc x, y;
};

CudnnAvgPool2d::CudnnAvgPool2d(const CudaContext& ctx) : ctx_(ctx) {}
CudnnAvgPool2d::~CudnnAvgPool2d() = default;

std::unique_ptr<CudnnAvgPool2d> CudnnAvgPool2d::create(const CudaContext& ctx,
                                                       const VisionWindow& w,
                                                       bool count_include_pad) {
  if (ctx.cudnn == nullptr) return nullptr;
  const CudnnApi& api = *ctx.cudnn;
  const cudnnPoolingMode_t mode = count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                    : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  auto shared = std::make_unique<Shared>();
  shared->w = w;
  cudnnPoolingDescriptor_t p = nullptr;
  if (!fits_int(w.kh) || !fits_int(w.kw) || !fits_int(w.ph + 1) || !fits_int(w.pw + 1) ||
      !fits_int(w.sh) || !fits_int(w.sw) || api.create_pool(&p) != CUDNN_STATUS_SUCCESS) {
    return nullptr;
  }
  shared->pool = Desc(p, api.destroy_pool);
  const TensorDesc x = tensor(api, 1, w.c, w.h, w.w);
  int n = 0, c = 0, ho = 0, wo = 0;
  if (api.set_pool_2d(p, mode, CUDNN_NOT_PROPAGATE_NAN, static_cast<int>(w.kh),
                      static_cast<int>(w.kw), static_cast<int>(w.ph), static_cast<int>(w.pw),
                      static_cast<int>(w.sh), static_cast<int>(w.sw)) != CUDNN_STATUS_SUCCESS ||
      !x || api.pool_output_dim(p, x.get(), &n, &c, &ho, &wo) != CUDNN_STATUS_SUCCESS ||
      ho != w.ho || wo != w.wo) {
    return nullptr;  // e.g. ceil_mode: cuDNN rounds the output size down
  }
  std::unique_ptr<CudnnAvgPool2d> pool(new CudnnAvgPool2d(ctx));
  pool->shared_ = std::move(shared);
  return pool;
}

const CudnnAvgPool2d::Plan& CudnnAvgPool2d::plan_for(int64_t batch) const {
  return plan_of(plans_, batch, [&] {
    const VisionWindow& w = shared_->w;
    auto plan = std::make_unique<Plan>();
    plan->batch = batch;
    plan->x = tensor(*ctx_.cudnn, batch, w.c, w.h, w.w);
    plan->y = tensor(*ctx_.cudnn, batch, w.c, w.ho, w.wo);
    return plan;
  });
}

void CudnnAvgPool2d::forward(int64_t batch, const float* x, float* y) const {
  std::lock_guard<std::mutex> lock(ctx_.library_mutex());
  const Plan& p = plan_for(batch);
  if (!ctx_.check(p.x && p.y ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM,
                  "pooling forward (cuDNN): tensor descriptors")) {
    return;
  }
  ctx_.check(ctx_.cudnn->pool_forward(ctx_.dnn, shared_->pool.get(), &kOne, p.x.get(), x, &kZero,
                                      p.y.get(), y),
             "pooling forward (cuDNN)");
}

void CudnnAvgPool2d::backward(int64_t batch, const float* x, const float* y, const float* dy,
                              float* dx) const {
  std::lock_guard<std::mutex> lock(ctx_.library_mutex());
  const Plan& p = plan_for(batch);
  if (!ctx_.check(p.x && p.y ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM,
                  "pooling backward (cuDNN): tensor descriptors")) {
    return;
  }
  ctx_.check(ctx_.cudnn->pool_backward(ctx_.dnn, shared_->pool.get(), &kOne, p.y.get(), y,
                                       p.y.get(), dy, p.x.get(), x, &kOne, p.x.get(), dx),
             "pooling backward (cuDNN)");
}

// ---- batch norm ---------------------------------------------------------------------------------

struct CudnnBatchNorm::Shared {
  TensorDesc params;  // [1, C, 1, 1]: gamma, beta and their gradients
};

struct CudnnBatchNorm::Plan {
  int64_t batch = 0;
  TensorDesc x;  // [batch, C, inner, 1]
};

CudnnBatchNorm::CudnnBatchNorm(const CudaContext& ctx, int64_t channels, int64_t inner, double eps)
    : ctx_(ctx), channels_(channels), inner_(inner), eps_(eps) {}
CudnnBatchNorm::~CudnnBatchNorm() = default;

std::unique_ptr<CudnnBatchNorm> CudnnBatchNorm::create(const CudaContext& ctx, int64_t channels,
                                                       int64_t inner, double eps) {
  if (ctx.cudnn == nullptr || eps < CUDNN_BN_MIN_EPSILON) return nullptr;
  auto shared = std::make_unique<Shared>();
  shared->params = tensor(*ctx.cudnn, 1, channels, 1, 1);
  if (!shared->params || !fits_int(inner)) return nullptr;
  std::unique_ptr<CudnnBatchNorm> bn(new CudnnBatchNorm(ctx, channels, inner, eps));
  bn->shared_ = std::move(shared);
  return bn;
}

const CudnnBatchNorm::Plan& CudnnBatchNorm::plan_for(int64_t batch) const {
  return plan_of(plans_, batch, [&] {
    auto plan = std::make_unique<Plan>();
    plan->batch = batch;
    plan->x = tensor(*ctx_.cudnn, batch, channels_, inner_, 1);
    return plan;
  });
}

bool CudnnBatchNorm::forward(int64_t batch, const float* x, const float* gamma, const float* beta,
                             float* y) const {
  if (batch * inner_ < 2) return false;
  std::lock_guard<std::mutex> lock(ctx_.library_mutex());
  const Plan& p = plan_for(batch);
  if (!ctx_.check(p.x ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM,
                  "batch_norm forward (cuDNN): tensor descriptor")) {
    return true;
  }
  // No running averages (null) and nothing saved: backward recomputes the statistics, as the
  // hand-written kernel does, since saved scratch is per sample and the statistics per call.
  ctx_.check(ctx_.cudnn->batch_norm_forward(
                 ctx_.dnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, p.x.get(), x, p.x.get(), y,
                 shared_->params.get(), gamma, beta, 1.0, nullptr, nullptr, eps_, nullptr, nullptr),
             "batch_norm forward (cuDNN)");
  return true;
}

bool CudnnBatchNorm::backward(int64_t batch, const float* x, const float* dy, const float* gamma,
                              float* dx, float* dgamma, float* dbeta) const {
  if (batch * inner_ < 2) return false;
  std::lock_guard<std::mutex> lock(ctx_.library_mutex());
  const Plan& p = plan_for(batch);
  if (!ctx_.check(p.x ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM,
                  "batch_norm backward (cuDNN): tensor descriptor")) {
    return true;
  }
  ctx_.check(ctx_.cudnn->batch_norm_backward(ctx_.dnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kOne, &kOne,
                                             &kOne, p.x.get(), x, p.x.get(), dy, p.x.get(), dx,
                                             shared_->params.get(), gamma, dgamma, dbeta, eps_,
                                             nullptr, nullptr),
             "batch_norm backward (cuDNN)");
  return true;
}

}  // namespace gp::exec::cuda
