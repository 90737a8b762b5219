// StagingDevice: a device WITHOUT host memory, emulated on the host, so that the executor's
// non-host code path (the one CUDA takes) runs and is checked on a machine without a GPU.
//
// Its memory is an arena that the host cannot touch: the pages are PROT_NONE except while one of
// the device's own operations runs (a kernel, a copy, a fill, the optimizer update), so a host
// dereference of device memory anywhere else in the executor faults at once. Every operation
// checks its pointers: device pointers must lie inside one live allocation, for the bytes the
// operation touches, and host pointers of copies must lie outside the arena. A violation is
// counted, recorded as the device's error (returned by synchronize()) and the operation skipped.
// New and released memory is poisoned (0xFF bytes: NaN floats, -1 ids), so a buffer the executor
// forgot to zero shows. Kernels are the CPU reference's, so results must be the CPU's bit for bit.
//
// Operations are serialised by a mutex (ranks of one process may share the device).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "gp/exec/device.h"
#include "gp/exec/optimizer.h"

namespace gp::testing {

class StagingDevice final : public exec::Device {
 public:
  explicit StagingDevice(size_t arena_bytes = size_t{1} << 30) : capacity_(arena_bytes) {
    void* p =
        mmap(nullptr, capacity_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
  }
  ~StagingDevice() override {
    if (base_ != nullptr) munmap(base_, capacity_);
  }
  StagingDevice(const StagingDevice&) = delete;
  StagingDevice& operator=(const StagingDevice&) = delete;

  std::string_view name() const override { return "staging"; }
  bool host_memory() const override { return false; }

  Result<std::unique_ptr<exec::OpKernel>> make_kernel(const model::OpNode& op) const override {
    GP_ASSIGN_OR_RETURN(auto inner, exec::make_cpu_kernel(op));
    return std::unique_ptr<exec::OpKernel>(new Kernel(std::move(inner), *this, op.id()));
  }

  Result<void*> allocate(size_t bytes) const override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t rounded = (bytes + 63) / 64 * 64;
    if (base_ == nullptr || used_ + rounded > capacity_) {
      return resource_exhausted("staging: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    std::byte* p = base_ + used_;
    used_ += rounded;  // never reused: a stale pointer stays outside every live allocation
    live_[p] = bytes;
    Access access(*this);
    std::memset(p, 0xFF, bytes);
    return static_cast<void*>(p);
  }

  void release(void* ptr) const override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(static_cast<std::byte*>(ptr));
    if (it == live_.end()) {
      violation("release of a pointer that is not a live allocation");
      return;
    }
    {
      Access access(*this);
      std::memset(it->first, 0xFF, it->second);
    }
    live_.erase(it);
  }

  Status copy_from_host(void* dst, const void* src, size_t bytes) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!in_device(dst, bytes, "copy_from_host destination") ||
        !on_host(src, bytes, "copy_from_host source")) {
      return error_status();
    }
    Access access(*this);
    if (bytes > 0) std::memcpy(dst, src, bytes);
    ++copies_;
    return ok_status();
  }

  Status copy_to_host(void* dst, const void* src, size_t bytes) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!in_device(src, bytes, "copy_to_host source") ||
        !on_host(dst, bytes, "copy_to_host destination")) {
      return error_status();
    }
    Access access(*this);
    if (bytes > 0) std::memcpy(dst, src, bytes);
    ++copies_;
    return ok_status();
  }

  Status fill_zero(void* dst, size_t bytes) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!in_device(dst, bytes, "fill_zero")) return error_status();
    Access access(*this);
    if (bytes > 0) std::memset(dst, 0, bytes);
    return ok_status();
  }

  Status synchronize() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++synchronizations_;
    if (first_error_.empty()) return ok_status();
    Status s = internal_error("staging: " + first_error_);
    first_error_.clear();
    return s;
  }

  void apply_optimizer(const exec::Optimizer& optimizer, float* weights, const float* grads,
                       float* state, int64_t n, int64_t step) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t count = static_cast<size_t>(n);
    const size_t state_count = count * static_cast<size_t>(optimizer.state_floats());
    if (!in_device(weights, count * 4, "optimizer weights") ||
        !in_device(grads, count * 4, "optimizer gradients") ||
        !in_device(state, state_count * 4, "optimizer state")) {
      return;
    }
    Access access(*this);
    optimizer.apply({weights, count}, {grads, count}, {state, state_count}, step);
    ++optimizer_updates_;
  }

  Status copy_on_device(void* dst, const void* src, size_t bytes) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!in_device(dst, bytes, "copy_on_device destination") ||
        !in_device(src, bytes, "copy_on_device source")) {
      return error_status();
    }
    Access access(*this);
    if (bytes > 0) std::memmove(dst, src, bytes);
    return ok_status();
  }

  Status accumulate(float* dst, const float* src, int64_t n) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t bytes = static_cast<size_t>(n) * 4;
    if (!in_device(dst, bytes, "accumulate destination") ||
        !in_device(src, bytes, "accumulate source")) {
      return error_status();
    }
    Access access(*this);
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
    ++accumulations_;
    return ok_status();
  }

  // The kernel call `calls` calls from now fails as an asynchronous CUDA failure would: it runs,
  // and its error is reported by the next synchronize() (not a violation).
  void inject_kernel_failure(long calls) const {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_at_call_ = kernel_calls_ + calls;
  }

  // Violations of the memory contract so far (0 for a correct executor), the first one's text.
  long violations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return violations_;
  }
  std::string first_violation() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return first_violation_;
  }
  long copies() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return copies_;
  }
  long kernel_calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return kernel_calls_;
  }
  long optimizer_updates() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return optimizer_updates_;
  }
  long accumulations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return accumulations_;
  }
  long synchronizations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return synchronizations_;
  }
  size_t live_allocations() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.size();
  }
  bool contains(const void* p) const {
    const auto* b = static_cast<const std::byte*>(p);
    return base_ != nullptr && b >= base_ && b < base_ + capacity_;
  }

 private:
  // Opens the used part of the arena to the host for one operation (the mutex is held).
  class Access {
   public:
    explicit Access(const StagingDevice& d) : d_(d), bytes_(round_to_page(d.used_)) {
      if (bytes_ > 0) mprotect(d_.base_, bytes_, PROT_READ | PROT_WRITE);
    }
    ~Access() {
      if (bytes_ > 0) mprotect(d_.base_, bytes_, PROT_NONE);
    }
    Access(const Access&) = delete;
    Access& operator=(const Access&) = delete;

   private:
    static size_t round_to_page(size_t n) {
      const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
      return (n + page - 1) / page * page;
    }
    const StagingDevice& d_;
    size_t bytes_;
  };

  // Checks the device pointers of a kernel call, then runs the CPU kernel with the arena open.
  class Kernel final : public exec::OpKernel {
   public:
    Kernel(std::unique_ptr<exec::OpKernel> inner, const StagingDevice& d, std::string op)
        : inner_(std::move(inner)), d_(d), op_(std::move(op)) {}
    int64_t saved_floats_per_sample() const override { return inner_->saved_floats_per_sample(); }
    int64_t workspace_floats_per_sample() const override {
      return inner_->workspace_floats_per_sample();
    }
    void forward(const exec::OpArgs& a) const override { run(a, false); }
    void backward(const exec::OpArgs& a) const override { run(a, true); }

   private:
    void run(const exec::OpArgs& a, bool backward) const {
      std::lock_guard<std::mutex> lock(d_.mutex_);
      const std::string what = op_ + (backward ? " backward" : " forward");
      // Each view holds batch * per_sample elements of at least 4 bytes.
      auto views_ok = [&](std::span<const exec::TensorView> views, bool may_be_null) {
        for (const auto& v : views) {
          if (v.data == nullptr && may_be_null) continue;
          const size_t bytes = static_cast<size_t>(a.batch * v.per_sample) * 4;
          if (!d_.in_device(v.data, bytes, (what + ": tensor").c_str())) return false;
        }
        return true;
      };
      bool ok = views_ok(a.inputs, false) && views_ok(a.outputs, false);
      for (float* p : a.params) ok = ok && d_.in_device(p, 4, (what + ": parameter").c_str());
      const size_t saved = static_cast<size_t>(a.batch * inner_->saved_floats_per_sample()) * 4;
      if (saved > 0) ok = ok && d_.in_device(a.saved, saved, (what + ": saved").c_str());
      const size_t work = static_cast<size_t>(a.batch * inner_->workspace_floats_per_sample()) * 4;
      if (work > 0) ok = ok && d_.in_device(a.workspace, work, (what + ": workspace").c_str());
      if (backward) {
        ok = ok && views_ok(a.grad_outputs, true) && views_ok(a.grad_inputs, true);
        for (float* p : a.param_grads) {
          ok = ok && d_.in_device(p, 4, (what + ": parameter gradient").c_str());
        }
      }
      if (!ok) return;
      Access access(d_);
      if (backward) {
        inner_->backward(a);
      } else {
        inner_->forward(a);
      }
      if (d_.kernel_calls_ == d_.fail_at_call_ && d_.first_error_.empty()) {
        d_.first_error_ = "injected failure of " + what;
      }
      ++d_.kernel_calls_;
    }

    std::unique_ptr<exec::OpKernel> inner_;
    const StagingDevice& d_;
    std::string op_;
  };

  // [p, p + bytes) inside one live allocation (mutex held). Zero bytes: any pointer.
  bool in_device(const void* p, size_t bytes, const char* what) const {
    if (bytes == 0) return true;
    const auto* b = static_cast<const std::byte*>(p);
    auto it = live_.upper_bound(const_cast<std::byte*>(b));
    if (it != live_.begin()) {
      --it;
      if (b >= it->first && b + bytes <= it->first + it->second) return true;
    }
    violation(std::string(what) + ": [" + std::to_string(reinterpret_cast<uintptr_t>(p)) + ", +" +
              std::to_string(bytes) + ") is not inside one device allocation");
    return false;
  }

  // A host pointer: [p, p + bytes) outside the arena (mutex held).
  bool on_host(const void* p, size_t bytes, const char* what) const {
    if (bytes == 0) return true;
    const auto* b = static_cast<const std::byte*>(p);
    if (b + bytes <= base_ || b >= base_ + capacity_) return true;
    violation(std::string(what) + ": a device pointer where host memory was expected");
    return false;
  }

  void violation(const std::string& text) const {
    ++violations_;
    if (first_violation_.empty()) first_violation_ = text;
    if (first_error_.empty()) first_error_ = text;
  }

  Status error_status() const { return internal_error("staging: " + first_violation_); }

  size_t capacity_;
  std::byte* base_ = nullptr;
  mutable std::mutex mutex_;
  mutable size_t used_ = 0;
  mutable std::map<std::byte*, size_t> live_;
  mutable long violations_ = 0, copies_ = 0, kernel_calls_ = 0, optimizer_updates_ = 0;
  mutable long synchronizations_ = 0, accumulations_ = 0;
  mutable long fail_at_call_ = -1;
  mutable std::string first_violation_, first_error_;
};

}  // namespace gp::testing
