// CudaDevice: one CUDA device with a compute stream, cuBLAS (and, per GP_CUDA_KERNELS, cuBLASLt and
// cuDNN) handles bound to it and the stream-ordered allocator (a pool that keeps freed memory, so
// steady-state training allocates nothing from the driver). Every CUDA call is checked; errors
// become Status at this boundary.
#include "cuda/cuda_device.h"

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "cuda/cuda_context.h"
#include "cuda/kernel_libraries.h"
#include "cuda/kernels.h"
#include "cuda/optimizer_launch.h"
#include "device_api/kernel_table.h"
#include "gp/exec/optimizer.h"

namespace gp::exec::cuda {
namespace {

std::string cuda_error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

using Factory = KernelResult (*)(const model::OpNode&, const CudaContext&);
using model::OpType;

// The CUDA kernel of every trainable catalogue type, as the CPU's table (cpu/cpu_kernels.cc).
constexpr KernelTable<Factory> kKernels = kernel_table<Factory>({
    {OpType::kInput, &make_input},
    {OpType::kLinear, &make_linear},
    {OpType::kEmbeddingBag, &make_embedding_bag},
    {OpType::kEmbedding, &make_embedding_bag},  // a bag of one per id
    {OpType::kAttention, &make_attention},
    {OpType::kLayerNorm, &make_layer_norm},
    {OpType::kRelu, &make_relu},
    {OpType::kGelu, &make_gelu},
    {OpType::kSoftmax, &make_softmax},
    {OpType::kSigmoid, &make_sigmoid},
    {OpType::kTanh, &make_tanh},
    {OpType::kClip, &make_clip},
    {OpType::kMul, &make_mul},
    {OpType::kReduce, &make_reduce_axes},
    {OpType::kBiasAdd, &make_bias_add},
    {OpType::kBroadcastParam, &make_broadcast_param},
    {OpType::kAdd, &make_add},
    {OpType::kConcat, &make_concat},
    {OpType::kSlice, &make_slice},
    {OpType::kMatmul, &make_matmul},
    {OpType::kScale, &make_scale},
    {OpType::kTranspose, &make_transpose},
    {OpType::kReshape, &make_reshape},
    {OpType::kConv2d, &make_conv2d},
    {OpType::kMaxPool2d, &make_max_pool2d},
    {OpType::kAvgPool2d, &make_avg_pool2d},
    {OpType::kBatchNorm, &make_batch_norm},
    {OpType::kConvTranspose2d, &make_conv_transpose2d},
    {OpType::kResize, &make_resize},
    {OpType::kMseLoss, &make_mse_loss},
    {OpType::kSoftmaxCrossEntropy, &make_softmax_cross_entropy},
    {OpType::kUnary, &make_unary},
    {OpType::kBinary, &make_binary},
    {OpType::kCompare, &make_compare},
    {OpType::kWhere, &make_where},
    {OpType::kConstant, &make_constant},
    {OpType::kGather, &make_gather},
    {OpType::kCast, &make_cast},
    {OpType::kCumSum, &make_cumsum},
});

// Makes the device current on the calling thread before each call: the CUDA current device is
// per thread, and ranks call kernels from threads the device did not create.
class CurrentDeviceKernel final : public OpKernel {
 public:
  CurrentDeviceKernel(std::unique_ptr<OpKernel> inner, int device)
      : inner_(std::move(inner)), device_(device) {}
  int64_t saved_floats_per_sample() const override { return inner_->saved_floats_per_sample(); }
  int64_t workspace_floats_per_sample() const override {
    return inner_->workspace_floats_per_sample();
  }
  void forward(const OpArgs& args) const override {
    cudaSetDevice(device_);
    inner_->forward(args);
  }
  void backward(const OpArgs& args) const override {
    cudaSetDevice(device_);
    inner_->backward(args);
  }

 private:
  std::unique_ptr<OpKernel> inner_;
  int device_;
};

class CudaDevice final : public Device {
 public:
  ~CudaDevice() override = default;  // never destroyed: devices live until the process exits

  static Result<std::unique_ptr<CudaDevice>> open(int index, MatmulPrecision precision,
                                                  KernelSource kernels) {
    const std::string flag = "--device cuda:" + std::to_string(index);
    int count = 0;
    if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
      // Without a driver the runtime says the driver is "insufficient"; say what is missing.
      int driver = 0;
      if (cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0) {
        return unavailable(flag + ": no usable CUDA device: no NVIDIA driver is installed");
      }
      return unavailable(flag + ": no usable CUDA device: " + cuda_error_text(e));
    }
    if (index >= count) {
      return unavailable(flag + ": this machine has " + std::to_string(count) +
                         " CUDA device(s), numbered from 0");
    }
    std::unique_ptr<CudaDevice> d(new CudaDevice());
    d->name_ = "cuda:" + std::to_string(index);
    d->ctx_.device_index = index;
    d->ctx_.precision = precision;
    if (cudaError_t e = cudaSetDevice(index); e != cudaSuccess) {
      return unavailable(flag + ": cannot make the device current: " + cuda_error_text(e));
    }
    if (cudaError_t e = cudaStreamCreateWithFlags(&d->ctx_.stream, cudaStreamNonBlocking);
        e != cudaSuccess) {
      return unavailable(flag + ": cannot create the compute stream: " + cuda_error_text(e));
    }
    // Keep freed blocks in the pool instead of returning them to the driver at each sync.
    cudaMemPool_t pool = nullptr;
    if (cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, index); e != cudaSuccess) {
      return unavailable(flag +
                         ": the device has no stream-ordered allocator: " + cuda_error_text(e));
    }
    uint64_t keep_all = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all);
    auto cublas = load_cublas();
    if (!cublas.ok()) return cublas.status().with_context(flag);
    d->ctx_.cublas = *cublas;
    const CublasApi& api = **cublas;
    if (cublasStatus_t s = api.create(&d->ctx_.blas); s != CUBLAS_STATUS_SUCCESS) {
      return unavailable(flag + ": cannot create a cuBLAS handle: " + api.status_string(s));
    }
    if (cublasStatus_t s = api.set_stream(d->ctx_.blas, d->ctx_.stream);
        s != CUBLAS_STATUS_SUCCESS) {
      return unavailable(flag + ": cannot bind cuBLAS to the stream: " + api.status_string(s));
    }
    if (Status st = open_kernel_libraries(kernels, &d->ctx_); !st.ok()) {
      return st.with_context(flag);
    }
    return d;
  }

  std::string_view name() const override { return name_; }

  Result<std::unique_ptr<OpKernel>> make_kernel(const model::OpNode& op) const override {
    if (op.proto == nullptr) return invalid_argument("make_kernel: op has no proto");
    const model::OpTypeInfo* info = catalogue_entry(op);
    if (info != nullptr && info->id == OpType::kOpaque) {
      return op_error(op,
                      "imported as opaque (--allow-opaque) for planning only; it has no "
                      "kernel and cannot be trained or profiled");
    }
    if (op.info == nullptr || static_cast<int>(op.input_specs.size()) != op.proto->inputs_size() ||
        op.proto->outputs_size() != 1) {
      return op_error(op, "not a validated graph op (build it with model::Graph::build)");
    }
    const Factory make = kKernels[model::op_type_index(op.op_type())];
    if (make == nullptr) {
      return op_error(op, "no CUDA kernel for op type '" + op.proto->type() + "'");
    }
    cudaSetDevice(ctx_.device_index);
    auto kernel = make(op, ctx_);
    if (!kernel.ok()) return kernel.status();
    return std::unique_ptr<OpKernel>(
        new CurrentDeviceKernel(std::move(*kernel), ctx_.device_index));
  }

  bool host_memory() const override { return false; }

  Result<void*> allocate(size_t bytes) const override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    cudaSetDevice(ctx_.device_index);
    void* p = nullptr;
    if (cudaError_t e = cudaMallocAsync(&p, bytes, ctx_.stream); e != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky; clear it
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      return resource_exhausted(name_ + ": cannot allocate " + std::to_string(bytes) + " bytes (" +
                                std::to_string(free_bytes) + " of " + std::to_string(total_bytes) +
                                " free): " + cuda_error_text(e));
    }
    return p;
  }

  void release(void* ptr) const override {
    if (ptr == nullptr) return;
    cudaSetDevice(ctx_.device_index);
    ctx_.check(cudaFreeAsync(ptr, ctx_.stream), "release");
  }

  Status copy_from_host(void* dst, const void* src, size_t bytes) const override {
    if (bytes == 0) return ok_status();
    cudaSetDevice(ctx_.device_index);
    // From pageable memory the call returns once `src` has been staged, so the caller may reuse it.
    return status_of(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx_.stream),
                     "copy of " + std::to_string(bytes) + " bytes to the device");
  }

  Status copy_to_host(void* dst, const void* src, size_t bytes) const override {
    if (bytes == 0) return ok_status();
    cudaSetDevice(ctx_.device_index);
    const std::string what = "copy of " + std::to_string(bytes) + " bytes to the host";
    GP_RETURN_IF_ERROR(
        status_of(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx_.stream), what));
    return synchronize();
  }

  Status fill_zero(void* dst, size_t bytes) const override {
    if (bytes == 0) return ok_status();
    cudaSetDevice(ctx_.device_index);
    return status_of(cudaMemsetAsync(dst, 0, bytes, ctx_.stream), "fill_zero");
  }

  Status synchronize() const override {
    cudaSetDevice(ctx_.device_index);
    const cudaError_t e = cudaStreamSynchronize(ctx_.stream);
    // A kernel's own recorded failure comes first: it names the op that caused a later fault.
    GP_RETURN_IF_ERROR(ctx_.take_error());
    return status_of(e, "work queued on the compute stream");
  }

  Status copy_on_device(void* dst, const void* src, size_t bytes) const override {
    if (bytes == 0) return ok_status();
    cudaSetDevice(ctx_.device_index);
    return status_of(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx_.stream),
                     "copy of " + std::to_string(bytes) + " bytes on the device");
  }

  Status accumulate(float* dst, const float* src, int64_t n) const override {
    cudaSetDevice(ctx_.device_index);
    return status_of(launch_accumulate(dst, src, n, ctx_.stream), "gradient accumulation");
  }

  const CudaContext& context() const { return ctx_; }

  void apply_optimizer(const Optimizer& optimizer, float* weights, const float* grads, float* state,
                       int64_t n, int64_t step) const override {
    if (n <= 0) return;
    // The scalars come from the CPU's own computation (Adam's bias corrections in double).
    const Optimizer::StepConstants c = optimizer.step_constants(step);
    OptimizerScalars k;
    k.update = c.kind == graphpipe::v1::OPTIMIZER_KIND_ADAM       ? OptimizerUpdate::kAdam
               : c.kind == graphpipe::v1::OPTIMIZER_KIND_MOMENTUM ? OptimizerUpdate::kMomentum
                                                                  : OptimizerUpdate::kSgd;
    k.lr = c.lr;
    k.momentum = c.momentum;
    k.beta1 = c.beta1;
    k.beta2 = c.beta2;
    k.eps = c.eps;
    k.one_minus_beta1 = c.one_minus_beta1;
    k.one_minus_beta2 = c.one_minus_beta2;
    k.c1 = c.c1;
    k.c2 = c.c2;
    k.weight_decay = c.weight_decay;
    cudaSetDevice(ctx_.device_index);
    ctx_.check(launch_optimizer_update(k, weights, grads, state, n, ctx_.stream), "optimizer step");
  }

 private:
  CudaDevice() = default;

  Status status_of(cudaError_t e, const std::string& what) const {
    if (e == cudaSuccess) return ok_status();
    cudaGetLastError();  // reported here; the next kernel's launch check must not report it again
    return internal_error(name_ + ": " + what + " failed: " + cuda_error_text(e));
  }

  std::string name_;
  CudaContext ctx_;
};

}  // namespace

bool has_kernel(model::OpType type) { return kKernels[model::op_type_index(type)] != nullptr; }

const CudaContext* context_of(const Device& device) {
  const auto* d = dynamic_cast<const CudaDevice*>(&device);
  return d == nullptr ? nullptr : &d->context();
}

Result<const Device*> open_cuda_device(int index, MatmulPrecision precision) {
  // Leaked on purpose: destroying CUDA objects after the runtime has shut down at exit crashes.
  static auto* devices =
      new std::map<std::tuple<int, MatmulPrecision, KernelSource>, CudaDevice*>();
  static std::mutex mutex;
  GP_ASSIGN_OR_RETURN(const KernelSource kernels, kernel_source_from_env());
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(index, precision, kernels);
  if (auto it = devices->find(key); it != devices->end()) return it->second;
  auto device = CudaDevice::open(index, precision, kernels);
  if (!device.ok()) return device.status();
  CudaDevice* d = device->release();
  devices->emplace(key, d);
  return d;
}

}  // namespace gp::exec::cuda
