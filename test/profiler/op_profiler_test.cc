#include "gp/profile/op_profiler.h"

#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "../support/models.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/profile/device_kind.h"

namespace gp::profile {
namespace {

// Every timed call takes 7 us: the measured numbers are then known exactly.
class ConstantTimer final : public Timer {
 public:
  void start() override {}
  double stop_us() override { return 7; }
};

OpProfileOptions fast_options(ConstantTimer* timer) {
  OpProfileOptions o;
  o.micro_batches = {1, 2, 4};
  o.measure.warmup = 0;
  o.measure.min_repetitions = 2;
  o.measure.max_repetitions = 2;
  o.measure.min_total_us = 0;
  o.device_kind = "cpu-process";
  o.provenance.set_date("2026-11-29T00:00:00Z");
  o.provenance.set_backend("cpu");
  o.timer = timer;
  return o;
}

// A test device with host memory: everything but its kernels is the CPU device's. Counts the
// memory calls (the profiler should make none: its host buffers are the device's).
class HostMemoryDevice : public exec::Device {
 public:
  bool host_memory() const override { return true; }
  Result<void*> allocate(size_t bytes) const override {
    ++memory_calls;
    return exec::cpu_device().allocate(bytes);
  }
  void release(void* p) const override { exec::cpu_device().release(p); }
  Status copy_from_host(void* dst, const void* src, size_t n) const override {
    ++memory_calls;
    return exec::cpu_device().copy_from_host(dst, src, n);
  }
  Status copy_to_host(void* dst, const void* src, size_t n) const override {
    ++memory_calls;
    return exec::cpu_device().copy_to_host(dst, src, n);
  }
  Status fill_zero(void* dst, size_t n) const override {
    ++memory_calls;
    return exec::cpu_device().fill_zero(dst, n);
  }
  Status synchronize() const override { return ok_status(); }
  void apply_optimizer(const exec::Optimizer& optimizer, float* weights, const float* grads,
                       float* state, int64_t n, int64_t step) const override {
    exec::cpu_device().apply_optimizer(optimizer, weights, grads, state, n, step);
  }
  Status copy_on_device(void* dst, const void* src, size_t n) const override {
    return exec::cpu_device().copy_on_device(dst, src, n);
  }
  Status accumulate(float* dst, const float* src, int64_t n) const override {
    return exec::cpu_device().accumulate(dst, src, n);
  }

  mutable int memory_calls = 0;
};

// A device whose kernels are the CPU reference's with a defect applied to the first output.
class DefectiveDevice final : public HostMemoryDevice {
 public:
  enum class Defect { kOffByOnePercent, kNaN };
  explicit DefectiveDevice(Defect defect) : defect_(defect) {}
  std::string_view name() const override { return "defective"; }
  Result<std::unique_ptr<exec::OpKernel>> make_kernel(const model::OpNode& op) const override {
    GP_ASSIGN_OR_RETURN(auto inner, exec::make_cpu_kernel(op));
    return std::unique_ptr<exec::OpKernel>(new Kernel(std::move(inner), defect_));
  }

 private:
  class Kernel final : public exec::OpKernel {
   public:
    Kernel(std::unique_ptr<exec::OpKernel> inner, Defect d) : inner_(std::move(inner)), d_(d) {}
    int64_t saved_floats_per_sample() const override { return inner_->saved_floats_per_sample(); }
    int64_t workspace_floats_per_sample() const override {
      return inner_->workspace_floats_per_sample();
    }
    void forward(const exec::OpArgs& a) const override {
      inner_->forward(a);
      float* y = a.outputs[0].f();
      y[0] = d_ == Defect::kNaN ? std::numeric_limits<float>::quiet_NaN() : y[0] * 1.01f + 0.01f;
    }
    void backward(const exec::OpArgs& a) const override { inner_->backward(a); }

   private:
    std::unique_ptr<exec::OpKernel> inner_;
    Defect d_;
  };
  Defect defect_;
};

// A device that runs the CPU reference kernels but is not the CPU device itself, so the profiler
// checks it against the reference (as it will a CUDA device).
class ReferenceCopyDevice final : public HostMemoryDevice {
 public:
  std::string_view name() const override { return "copy"; }
  Result<std::unique_ptr<exec::OpKernel>> make_kernel(const model::OpNode& op) const override {
    return exec::make_cpu_kernel(op);
  }
};

TEST_CASE("a profile of a tiny model on the CPU has every operator at every micro-batch size") {
  for (const char* spec : {"tiny-mmt", "tiny-dlrm", "tiny-candle-uno"}) {
    INFO(spec);
    const auto g = testing::zoo_graph(spec);
    ConstantTimer timer;
    auto r = profile_ops(g, exec::cpu_device(), fast_options(&timer));
    REQUIRE(r.ok());
    CHECK(r->rejected.empty());
    std::set<std::string> wanted;
    for (const auto& op : g.ops()) {
      if (!op.info->is_input) wanted.insert(cost::op_signature(op));
    }
    CHECK(r->signatures == static_cast<int>(wanted.size()));
    REQUIRE(r->measurements.size() == wanted.size() * 3);
    std::set<std::string> got;
    for (const auto& m : r->measurements) {
      got.insert(m.signature());
      CHECK(m.device_kind() == "cpu-process");
      CHECK(m.forward_time_us() == Approx(7));
      CHECK(m.backward_time_us() == Approx(7));
      CHECK(m.repetitions() == 2);
      CHECK(m.provenance().date() == "2026-11-29T00:00:00Z");
    }
    CHECK(got == wanted);
  }
}

TEST_CASE("kept bytes are the op's outputs plus its saved scratch, per sample times the batch") {
  const auto g = testing::zoo_graph("tiny-mmt");
  ConstantTimer timer;
  auto r = profile_ops(g, exec::cpu_device(), fast_options(&timer));
  REQUIRE(r.ok());
  for (const auto& [sig, index] : distinct_signatures(g)) {
    const auto& op = g.op(index);
    auto kernel = exec::make_cpu_kernel(op);
    REQUIRE(kernel.ok());
    int64_t per_sample = (*kernel)->saved_floats_per_sample() * 4;
    for (const auto& out : op.proto->outputs()) per_sample += model::size_bytes(out);
    for (const auto& m : r->measurements) {
      if (m.signature() == sig) CHECK(m.activation_bytes() == per_sample * m.micro_batch());
    }
    if (op.type() == "multi_head_attention") CHECK((*kernel)->saved_floats_per_sample() > 0);
  }
}

TEST_CASE("real timings are positive and grow with the micro-batch for a GEMM") {
  model::GraphBuilder b("wide", "");
  auto x = b.input("x", {64});
  x = b.linear("fc", x, 256);
  b.add_loss(b.mse_loss("loss", x, b.input("t", {256})));
  const auto g = testing::build_graph(b.finish());
  OpProfileOptions o;
  o.micro_batches = {1, 64};
  o.device_kind = "cpu-process";
  o.provenance.set_date("now");
  auto r = profile_ops(g, exec::cpu_device(), o);
  REQUIRE(r.ok());
  double t1 = 0, t64 = 0;
  for (const auto& m : r->measurements) {
    CHECK(m.forward_time_us() > 0);
    CHECK(m.backward_time_us() > 0);
    CHECK(m.repetitions() >= o.measure.min_repetitions);
    if (m.signature().starts_with("linear") && m.micro_batch() == 1) t1 = m.forward_time_us();
    if (m.signature().starts_with("linear") && m.micro_batch() == 64) t64 = m.forward_time_us();
  }
  CHECK(t64 > t1);
}

TEST_CASE("a kernel that disagrees with the CPU reference is reported and not recorded") {
  const auto g = testing::chain_graph(2);
  ConstantTimer timer;
  const DefectiveDevice device(DefectiveDevice::Defect::kOffByOnePercent);
  auto r = profile_ops(g, device, fast_options(&timer));
  REQUIRE(r.ok());
  // Every op's first output is perturbed: nothing is recorded, every (op, size) is reported.
  CHECK(r->measurements.empty());
  REQUIRE(r->rejected.size() == static_cast<size_t>(r->signatures) * 3);
  CHECK_THAT(r->rejected[0].reason, Catch::Contains("CPU reference"));
  CHECK_THAT(r->rejected[0].reason, Catch::Contains("output 0"));
}

TEST_CASE("a kernel with non-finite output is reported and not recorded") {
  const auto g = testing::chain_graph(1);
  ConstantTimer timer;
  const DefectiveDevice device(DefectiveDevice::Defect::kNaN);
  auto r = profile_ops(g, device, fast_options(&timer));
  REQUIRE(r.ok());
  CHECK(r->measurements.empty());
  REQUIRE_FALSE(r->rejected.empty());
  CHECK_THAT(r->rejected[0].reason, Catch::Contains("nan"));
}

TEST_CASE("a device running the reference kernels passes the check and is recorded") {
  const auto g = testing::zoo_graph("tiny-mmt");
  ConstantTimer timer;
  const ReferenceCopyDevice device;
  auto r = profile_ops(g, device, fast_options(&timer));
  REQUIRE(r.ok());
  for (const auto& rej : r->rejected)
    FAIL_CHECK(rej.signature << " b=" << rej.micro_batch << ": " << rej.reason);
  CHECK(r->measurements.size() == static_cast<size_t>(r->signatures) * 3);
  CHECK(device.memory_calls == 0);  // host memory: no mirrors, no copies
}

// Every general element-wise op and reduction, with the functions whose domain is not all floats
// (log, roots, reciprocals, divisors, powers).
model::Graph general_ops_graph() {
  model::GraphBuilder b("general", "");
  const auto x = b.input("x", {2, 3});
  const auto w = b.input("w", {3});
  std::vector<model::TensorRef> terms;
  for (const char* fn : {"neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "abs", "erf", "sin",
                         "cos", "softplus"}) {
    terms.push_back(b.unary(std::string("u_") + fn, x, fn));
  }
  for (const char* fn : {"add", "sub", "mul", "div", "pow", "max", "min"}) {
    terms.push_back(b.binary(std::string("b_") + fn, x, w, fn));
  }
  terms.push_back(b.cumsum("running", x, 1));
  // Numbers to ids and back (position ids computed from ids).
  terms.push_back(b.cast("back", b.cast("ids", x, "int64")));
  const auto zero = b.constant("zero", x, {1}, {0.0f});
  const auto mask = b.compare("mask", x, zero, "gt");
  terms.push_back(b.where("where", mask, x, w));
  auto sum = terms[0];
  for (size_t k = 1; k < terms.size(); ++k) {
    sum = b.binary("sum" + std::to_string(k), sum, terms[k], "add");
  }
  const auto peak = b.reduce_axes("peak", sum, {0, 1}, "max", false);
  const auto norm = b.reduce_axes("norm", sum, {1}, "l2", false);
  const auto both = b.binary("both", norm, peak, "mul");
  b.add_loss(b.mse_loss("loss", both, b.input("target", {2})));
  auto g = model::Graph::build(b.finish());
  REQUIRE(g.ok());
  return std::move(*g);
}

TEST_CASE("the general element-wise ops profile with finite results and pass the reference check") {
  const auto g = general_ops_graph();
  ConstantTimer timer;
  const ReferenceCopyDevice device;
  auto r = profile_ops(g, device, fast_options(&timer));
  REQUIRE(r.ok());
  for (const auto& rej : r->rejected)
    FAIL_CHECK(rej.signature << " b=" << rej.micro_batch << ": " << rej.reason);
  CHECK(r->measurements.size() == static_cast<size_t>(r->signatures) * 3);
  std::set<std::string> types;
  for (const auto& m : r->measurements)
    types.insert(m.signature().substr(0, m.signature().find('|')));
  for (const char* t :
       {"unary", "binary", "compare", "where", "constant", "reduce", "cumsum", "cast"}) {
    CHECK(types.count(t) == 1);
  }
}

// A device without host memory, emulated on the host like a CUDA device:
// - allocate() maps pages with no access at all except while the device itself works on them (a
//   kernel or a copy runs), so a profiler that read or wrote device memory directly would crash;
// - kernels are queued and run at the next synchronize() or copy (ordered after them, as on one
//   stream), and check that every pointer they get is device memory (an error otherwise, reported
//   at synchronize(), as CUDA reports an illegal address);
// - copy_from_host/copy_to_host/fill_zero are the only way data moves.
class EmulatedDevice final : public exec::Device {
 public:
  struct Options {
    bool perturb_output = false;  // every forward's first output element is off by 1%
    int fail_from_sync = 0;       // > 0: that synchronize() and every later one fail (sticky)
    size_t max_allocation = 0;    // > 0: larger allocations fail
    double* clock_us = nullptr;   // advanced when a kernel runs: forward 40 us, backward 60 us
  };
  explicit EmulatedDevice(Options o) : o_(o) {}
  ~EmulatedDevice() override {
    for (const auto& [p, n] : regions_) munmap(p, n);
  }

  std::string_view name() const override { return "emulated:0"; }
  bool host_memory() const override { return false; }

  Result<std::unique_ptr<exec::OpKernel>> make_kernel(const model::OpNode& op) const override {
    GP_ASSIGN_OR_RETURN(auto inner, exec::make_cpu_kernel(op));
    return std::unique_ptr<exec::OpKernel>(new Kernel(*this, std::move(inner)));
  }

  Result<void*> allocate(size_t bytes) const override {
    if (bytes == 0) return nullptr;
    if (o_.max_allocation > 0 && bytes > o_.max_allocation) {
      return resource_exhausted("emulated device: out of memory allocating " +
                                std::to_string(bytes) + " bytes");
    }
    const size_t n = (bytes + kPage - 1) / kPage * kPage;
    void* p = mmap(nullptr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return resource_exhausted("emulated device: mmap failed");
    regions_[static_cast<char*>(p)] = n;
    ++allocations;
    return p;
  }
  void release(void* p) const override {
    if (p == nullptr) return;
    run_queue();  // ordered after the work queued before it
    auto it = regions_.find(static_cast<char*>(p));
    CHECK(it != regions_.end());  // not REQUIRE: called from destructors
    if (it == regions_.end()) return;
    munmap(it->first, it->second);
    regions_.erase(it);
  }
  Status copy_from_host(void* dst, const void* src, size_t n) const override {
    run_queue();
    REQUIRE(is_device(dst, n));
    REQUIRE_FALSE(is_device(src, 1));
    Access access(*this);
    std::memcpy(dst, src, n);
    return ok_status();
  }
  Status copy_to_host(void* dst, const void* src, size_t n) const override {
    run_queue();
    REQUIRE(is_device(src, n));
    REQUIRE_FALSE(is_device(dst, 1));
    Access access(*this);
    std::memcpy(dst, src, n);
    ++copies_to_host;
    return ok_status();
  }
  Status fill_zero(void* dst, size_t n) const override {
    run_queue();
    REQUIRE(is_device(dst, n));
    Access access(*this);
    std::memset(dst, 0, n);
    return ok_status();
  }
  Status synchronize() const override {
    run_queue();
    ++syncs;
    if (o_.fail_from_sync > 0 && syncs >= o_.fail_from_sync) {
      return internal_error("emulated: an illegal memory access was encountered");
    }
    Status e = error_;
    error_ = ok_status();
    return e;
  }
  // The profiler neither steps optimizers nor moves memory between buffers of a device.
  void apply_optimizer(const exec::Optimizer&, float*, const float*, float*, int64_t,
                       int64_t) const override {
    FAIL_CHECK("the profiler called apply_optimizer");
  }
  Status copy_on_device(void*, const void*, size_t) const override {
    FAIL_CHECK("the profiler called copy_on_device");
    return internal_error("emulated: copy_on_device");
  }
  Status accumulate(float*, const float*, int64_t) const override {
    FAIL_CHECK("the profiler called accumulate");
    return internal_error("emulated: accumulate");
  }

  size_t live_allocations() const { return regions_.size(); }
  mutable int allocations = 0;
  mutable int copies_to_host = 0;
  mutable int syncs = 0;

 private:
  static constexpr size_t kPage = 4096;

  // Device memory is readable and writable while one of these lives.
  class Access {
   public:
    explicit Access(const EmulatedDevice& d) : d_(d) { d_.protect(PROT_READ | PROT_WRITE); }
    ~Access() { d_.protect(PROT_NONE); }
    Access(const Access&) = delete;
    Access& operator=(const Access&) = delete;

   private:
    const EmulatedDevice& d_;
  };

  class Kernel final : public exec::OpKernel {
   public:
    Kernel(const EmulatedDevice& d, std::unique_ptr<exec::OpKernel> inner)
        : d_(d), inner_(std::move(inner)) {}
    int64_t saved_floats_per_sample() const override { return inner_->saved_floats_per_sample(); }
    int64_t workspace_floats_per_sample() const override {
      return inner_->workspace_floats_per_sample();
    }
    void forward(const exec::OpArgs& a) const override {
      d_.queue_.push_back([this, a] {
        if (!d_.check_args(a)) return;
        inner_->forward(a);
        if (d_.o_.perturb_output) a.outputs[0].f()[0] = a.outputs[0].f()[0] * 1.01f + 0.01f;
        if (d_.o_.clock_us != nullptr) *d_.o_.clock_us += 40;
      });
    }
    void backward(const exec::OpArgs& a) const override {
      d_.queue_.push_back([this, a] {
        if (!d_.check_args(a)) return;
        inner_->backward(a);
        if (d_.o_.clock_us != nullptr) *d_.o_.clock_us += 60;
      });
    }

   private:
    const EmulatedDevice& d_;
    std::unique_ptr<exec::OpKernel> inner_;
  };

  // Whether [p, p + n) lies in one allocation.
  bool is_device(const void* p, size_t n) const {
    const char* c = static_cast<const char*>(p);
    auto it = regions_.upper_bound(const_cast<char*>(c));
    if (it == regions_.begin()) return false;
    --it;
    return c >= it->first && c + n <= it->first + it->second;
  }
  // False (and an error for synchronize()) when a kernel argument is not device memory.
  bool check_args(const exec::OpArgs& a) const {
    bool ok = true;
    auto check = [&](const void* p, const char* what) {
      if (p != nullptr && !is_device(p, 1)) {
        ok = false;
        if (error_.ok()) error_ = internal_error(std::string("kernel got host memory as ") + what);
      }
    };
    for (const auto& v : a.inputs) check(v.data, "an input");
    for (const auto& v : a.outputs) check(v.data, "an output");
    for (const auto& v : a.grad_outputs) check(v.data, "an output gradient");
    for (const auto& v : a.grad_inputs) check(v.data, "an input gradient");
    for (const float* p : a.params) check(p, "a parameter");
    for (const float* p : a.param_grads) check(p, "a parameter gradient");
    check(a.saved, "the saved scratch");
    return ok;
  }
  void protect(int prot) const {
    for (const auto& [p, n] : regions_) CHECK(mprotect(p, n, prot) == 0);
  }
  void run_queue() const {
    Access access(*this);
    for (auto& work : queue_) work();
    queue_.clear();
  }

  Options o_;
  mutable std::map<char*, size_t> regions_;
  mutable std::vector<std::function<void()>> queue_;
  mutable Status error_;
};

// Reads a fake clock that the emulated device's kernels advance when they run.
class ClockTimer final : public Timer {
 public:
  explicit ClockTimer(const double* clock_us) : clock_us_(clock_us) {}
  void start() override { start_us_ = *clock_us_; }
  double stop_us() override { return *clock_us_ - start_us_; }

 private:
  const double* clock_us_;
  double start_us_ = 0;
};

TEST_CASE("a device without host memory is profiled through copies and matches the reference") {
  for (const char* spec : {"tiny-mmt", "tiny-dlrm", "tiny-candle-uno"}) {
    INFO(spec);
    const auto g = testing::zoo_graph(spec);
    ConstantTimer timer;
    auto o = fast_options(&timer);
    o.cache_flush_bytes = 1 << 20;  // host caches: skipped for this device
    const EmulatedDevice device({});
    auto r = profile_ops(g, device, o);
    REQUIRE(r.ok());
    for (const auto& rej : r->rejected)
      FAIL_CHECK(rej.signature << " b=" << rej.micro_batch << ": " << rej.reason);
    CHECK(r->measurements.size() == static_cast<size_t>(r->signatures) * 3);
    CHECK(device.allocations > 0);
    CHECK(device.copies_to_host > 0);
    CHECK(device.live_allocations() == 0);  // every mirror released
  }
}

TEST_CASE("a defective kernel on a device without host memory is rejected naming the op") {
  const auto g = testing::chain_graph(2);
  ConstantTimer timer;
  EmulatedDevice::Options eo;
  eo.perturb_output = true;
  const EmulatedDevice device(eo);
  auto r = profile_ops(g, device, fast_options(&timer));
  REQUIRE(r.ok());
  CHECK(r->measurements.empty());
  REQUIRE(r->rejected.size() == static_cast<size_t>(r->signatures) * 3);
  CHECK(r->rejected[0].op_id == "fc0");
  CHECK_THAT(r->rejected[0].reason, Catch::Contains("output 0"));
  CHECK_THAT(r->rejected[0].reason, Catch::Contains("CPU reference"));
}

TEST_CASE("an asynchronous device error rejects the op with the error, without a crash") {
  const auto g = testing::chain_graph(1);
  ConstantTimer timer;
  SECTION("after the validation forward and backward") {
    EmulatedDevice::Options eo;
    eo.fail_from_sync = 1;
    const EmulatedDevice device(eo);
    auto r = profile_ops(g, device, fast_options(&timer));
    REQUIRE(r.ok());
    CHECK(r->measurements.empty());
    REQUIRE(r->rejected.size() == static_cast<size_t>(r->signatures) * 3);
    CHECK(r->rejected[0].op_id == "fc0");
    CHECK_THAT(r->rejected[0].reason, Catch::Contains("emulated:0 failed running forward"));
    CHECK_THAT(r->rejected[0].reason, Catch::Contains("illegal memory access"));
  }
  SECTION("while timing, in a later pass: the earlier pass's measurement is dropped too") {
    auto o = fast_options(&timer);
    o.micro_batches = {1};
    o.passes = 2;
    // Pass 1 of the first signature: 1 validation + 2 forward + 2 backward synchronize() calls,
    // then the second signature's; pass 2 fails in the first signature's timed forward.
    auto one_pass = o;
    one_pass.passes = 1;
    const EmulatedDevice probe({});
    REQUIRE(profile_ops(g, probe, one_pass).ok());
    EmulatedDevice::Options eo;
    eo.fail_from_sync = probe.syncs + 2;
    const EmulatedDevice device(eo);
    auto r = profile_ops(g, device, o);
    REQUIRE(r.ok());
    CHECK(r->measurements.empty());
    REQUIRE(r->rejected.size() == 2);
    CHECK(r->rejected[0].op_id == "fc0");
    CHECK_THAT(r->rejected[0].reason, Catch::Contains("emulated:0 failed while timing"));
    CHECK_THAT(r->rejected[0].reason, Catch::Contains("illegal memory access"));
  }
  SECTION("when the buffers cannot be allocated") {
    EmulatedDevice::Options eo;
    eo.max_allocation = 16;
    const EmulatedDevice device(eo);
    auto r = profile_ops(g, device, fast_options(&timer));
    REQUIRE(r.ok());
    CHECK(r->measurements.empty());
    REQUIRE_FALSE(r->rejected.empty());
    CHECK_THAT(r->rejected[0].reason, Catch::Contains("cannot set up the buffers on emulated:0"));
    CHECK_THAT(r->rejected[0].reason, Catch::Contains("out of memory"));
    CHECK(device.live_allocations() == 0);
  }
}

TEST_CASE("timings on an asynchronous device include the wait for the kernel") {
  // The kernels advance the clock only when they run, at synchronize(): a timed call that did not
  // wait would measure 0 us.
  const auto g = testing::chain_graph(1);
  double clock_us = 0;
  ClockTimer timer(&clock_us);
  EmulatedDevice::Options eo;
  eo.clock_us = &clock_us;
  const EmulatedDevice device(eo);
  auto o = fast_options(nullptr);
  o.timer = &timer;
  auto r = profile_ops(g, device, o);
  REQUIRE(r.ok());
  CHECK(r->rejected.empty());
  REQUIRE(r->measurements.size() == static_cast<size_t>(r->signatures) * 3);
  for (const auto& m : r->measurements) {
    CHECK(m.forward_time_us() == 40);
    CHECK(m.backward_time_us() == 60);
  }
}

TEST_CASE("bad profiling options are rejected naming the option") {
  const auto g = testing::chain_graph(1);
  ConstantTimer timer;
  auto o = fast_options(&timer);
  o.micro_batches = {2, 0};
  auto r = profile_ops(g, exec::cpu_device(), o);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("--micro-batches"));
  o = fast_options(&timer);
  o.micro_batches.clear();
  CHECK_FALSE(profile_ops(g, exec::cpu_device(), o).ok());
  o = fast_options(&timer);
  o.device_kind.clear();
  CHECK_FALSE(profile_ops(g, exec::cpu_device(), o).ok());
  o = fast_options(&timer);
  o.cache_flush_bytes = -1;
  CHECK_FALSE(profile_ops(g, exec::cpu_device(), o).ok());
}

// The first `slow_calls` timed calls take 50 us (interference), the rest 7 us.
class BurstTimer final : public Timer {
 public:
  explicit BurstTimer(int slow_calls) : slow_(slow_calls) {}
  void start() override {}
  double stop_us() override { return calls_++ < slow_ ? 50 : 7; }
  int calls() const { return calls_; }

 private:
  int slow_;
  int calls_ = 0;
};

TEST_CASE("with several passes every measurement keeps its fastest pass") {
  const auto g = testing::chain_graph(1);
  auto o = fast_options(nullptr);
  o.micro_batches = {1, 2};
  // A burst of interference covering the whole first pass.
  BurstTimer one_pass(1 << 20);
  o.timer = &one_pass;
  auto single = profile_ops(g, exec::cpu_device(), o);
  REQUIRE(single.ok());
  const int calls_per_pass = one_pass.calls();
  BurstTimer burst(calls_per_pass);
  o.timer = &burst;
  o.passes = 3;
  int last_done = 0, total = 0;
  auto r = profile_ops(g, exec::cpu_device(), o, [&](const OpProfileProgress& p) {
    last_done = p.done;
    total = p.total;
  });
  REQUIRE(r.ok());
  CHECK(burst.calls() == 3 * calls_per_pass);
  CHECK(r->measurements.size() == single->measurements.size());  // one record per (op, size)
  for (const auto& m : single->measurements) CHECK(m.forward_time_us() == 50);
  for (const auto& m : r->measurements) {
    CHECK(m.forward_time_us() == 7);
    CHECK(m.backward_time_us() == 7);
  }
  CHECK(last_done == total);
  o.passes = 0;
  CHECK_THAT(profile_ops(g, exec::cpu_device(), o).status().message(), Catch::Contains("--passes"));
}

TEST_CASE("the default tolerance loosens with the GEMM input precision") {
  CHECK(default_tolerance(exec::MatmulPrecision::kFp32) == 1e-4);
  CHECK(default_tolerance(exec::MatmulPrecision::kTf32) == 2e-2);
  CHECK(default_tolerance(exec::MatmulPrecision::kBf16) == 6e-2);
}

TEST_CASE("a GPU is recorded as the device kind of the cluster preset with its model") {
  std::vector<graphpipe::v1::Cluster> presets;
  for (const auto& name : cost::cluster_preset_names()) {
    auto c = cost::load_cluster(name);
    REQUIRE(c.ok());
    presets.push_back(*c);
  }
  auto kind = gpu_device_kind("NVIDIA H200", presets);
  CHECK(kind.device_kind == "H200-SXM-141GB");
  CHECK(kind.cluster == "h200");
  kind = gpu_device_kind("NVIDIA H100 80GB HBM3", presets);
  CHECK(kind.device_kind == "H100-SXM5-80GB");
  CHECK(kind.cluster == "dgx-h100");
  CHECK(gpu_device_kind("NVIDIA A100-SXM4-80GB", presets).device_kind == "A100-SXM4-80GB");
  CHECK(gpu_device_kind("Tesla V100-SXM2-16GB", presets).device_kind == "V100-SXM2-16GB");
  // No preset: a name made from the GPU's; a PCIe card is not the SXM preset's device.
  kind = gpu_device_kind("NVIDIA GeForce RTX 4090", presets);
  CHECK(kind.device_kind == "nvidia-geforce-rtx-4090");
  CHECK(kind.cluster.empty());
  CHECK(gpu_device_kind("NVIDIA H100 PCIe", presets).device_kind == "nvidia-h100-pcie");
  // Two presets with different device kinds of one model: ambiguous, so the GPU's name.
  auto other = presets;
  for (auto& c : other) {
    if (c.name() == "h200") {
      auto copy = c;
      copy.set_name("h200-nvl");
      copy.mutable_device()->set_name("H200-NVL-141GB");
      other.push_back(copy);
      break;
    }
  }
  CHECK(gpu_device_kind("NVIDIA H200", other).device_kind == "nvidia-h200");
}

TEST_CASE("distinct signatures skip graph inputs and repeated layers") {
  const auto g = testing::chain_graph(3);  // three identical 8->8 linears
  const auto sigs = distinct_signatures(g);
  REQUIRE(sigs.size() == 2);  // linear, mse_loss
  CHECK(sigs[0].first.starts_with("linear|"));
  CHECK(g.op(sigs[0].second).id() == "fc0");
  CHECK(sigs[1].first.starts_with("mse_loss|"));
}

}  // namespace
}  // namespace gp::profile
