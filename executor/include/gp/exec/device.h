// A device the executor runs a stage on: it names itself, creates the kernels for graph ops and
// owns the memory they read and write. The CPU device is the reference (executor/src/cpu/); an
// accelerated device is checked against it kernel by kernel. No backend type appears here.
//
// Memory: kernels of a device take pointers from its allocate(). On the CPU that is host memory;
// on CUDA it is device memory, allocated stream-ordered, and work is queued asynchronously on the
// device's compute stream: errors of queued work surface at the next synchronize().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "gp/common/status.h"
#include "gp/exec/op_kernel.h"
#include "gp/model/graph.h"

namespace gp::exec {

class Optimizer;

// Input precision of the GEMMs (linear, attention, matmul, conv); accumulation is always fp32.
// The CPU computes fp32 whatever is asked.
enum class MatmulPrecision { kFp32, kTf32, kBf16 };
std::string_view precision_name(MatmulPrecision p);  // "fp32", "tf32", "bf16"
// "fp32" | "tf32" | "bf16"; InvalidArgument naming the value otherwise.
Result<MatmulPrecision> parse_precision(std::string_view name);

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string_view name() const = 0;  // "cpu", "cuda:0"
  // The kernel of a validated graph op on this device; InvalidArgument naming the op when the
  // device cannot run it.
  virtual Result<std::unique_ptr<OpKernel>> make_kernel(const model::OpNode& op) const = 0;

  // True when this device's memory is host memory (pointers may be dereferenced on the host).
  virtual bool host_memory() const = 0;
  // `bytes` of device memory (64-byte aligned at least); ResourceExhausted naming the size when
  // the device is out of memory. Zero bytes gives nullptr.
  virtual Result<void*> allocate(size_t bytes) const = 0;
  // Returns memory from allocate(); nullptr is ignored. Ordered after work queued before it.
  virtual void release(void* ptr) const = 0;
  // Host -> device and device -> host copies; copy_to_host waits until the bytes have arrived.
  virtual Status copy_from_host(void* dst, const void* src, size_t bytes) const = 0;
  virtual Status copy_to_host(void* dst, const void* src, size_t bytes) const = 0;
  virtual Status fill_zero(void* dst, size_t bytes) const = 0;
  // Waits for all queued work; the first error of any queued kernel, copy or library call since
  // the last synchronize(), naming what failed.
  virtual Status synchronize() const = 0;
  // One optimizer update of `n` parameters (`weights`, `grads` and `optimizer.state_floats() * n`
  // floats of `state`, all this device's memory), queued like a kernel: failures surface at the
  // next synchronize(). `step` counts from 1. Every device gives optimizer.apply()'s floats.
  virtual void apply_optimizer(const Optimizer& optimizer, float* weights, const float* grads,
                               float* state, int64_t n, int64_t step) const = 0;
  // A copy between two buffers of this device, and dst[i] += src[i] over `n` floats (this
  // device's memory), queued like kernels (used with a device-memory data plane).
  virtual Status copy_on_device(void* dst, const void* src, size_t bytes) const = 0;
  virtual Status accumulate(float* dst, const float* src, int64_t n) const = 0;
};

// Device memory owned by one object; released on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Result<DeviceBuffer> create(const Device& device, size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  float* f() const { return static_cast<float*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  const Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// The host CPU (OpenBLAS GEMMs, plain loops elsewhere).
const Device& cpu_device();

// Threads the CPU kernels' GEMMs may use (OpenBLAS, process-wide). Executor ranks and the
// profiler set it (default 1: ranks sharing a host each get a core, and a profile measured with
// one thread predicts such a rank); values < 1 are treated as 1.
// It first calls use_best_blas_kernels().
void set_cpu_threads(int threads);
// OpenBLAS's kernel set: the one it chose when it loaded and the one running. A DYNAMIC_ARCH
// OpenBLAS that fell back to kernels without AVX2 on a CPU it does not know (Debian 12's 0.3.21
// on Emerald Rapids: Prescott, 3-5x slower GEMMs) is switched to its AVX2 (Haswell) or AVX-512
// (SkylakeX) set where the CPU has them, unless $OPENBLAS_CORETYPE is set. Once per process, and
// no BLAS call may run meanwhile: make_cpu_kernel() and set_cpu_threads() call it first.
struct BlasKernelChoice {
  std::string loaded;
  std::string running;
  bool changed = false;
};
const BlasKernelChoice& use_best_blas_kernels();
int cpu_threads();
// The CPUs this process may run on (its affinity mask), at least 1.
int usable_cpus();
// Subnormal floats flushed to zero (x86 FTZ and DAZ, Arm FZ) for this thread and the threads it
// starts from now on. Without it a CPU run slows as training goes on: weights, gradients and Adam
// state drift into the subnormal range, where each operation costs tens of cycles (a 4-branch
// candle-uno step went from 17.7 to 23.5 ms over 1500 iterations; flushed it stays at 16.5-17.0
// ms, with bit-identical losses). The executor and the profiler call it first thing in main.
void flush_subnormals();
// OK for 1..usable_cpus() threads, else INVALID_ARGUMENT naming `flag`, the value and the bound:
// more threads only contend for the cores, and OpenBLAS reserves a buffer per thread, which
// fails under a memory limit long before a count like 4096.
Status check_cpu_threads(std::string_view flag, int threads);
// The CPU kernels' BLAS, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64".
std::string cpu_blas_version();

// "cpu" -> the CPU device; "cuda:N" -> CUDA device N with GEMMs at `precision` (Unimplemented in
// a build without CUDA, Unavailable when the device cannot be opened, naming the reason);
// anything else -> InvalidArgument naming the flag. Devices live until the process exits.
// Defined by the backend table (executor/src/backends/backends.cc).
Result<const Device*> find_device(std::string_view name,
                                  MatmulPrecision precision = MatmulPrecision::kFp32);

}  // namespace gp::exec
