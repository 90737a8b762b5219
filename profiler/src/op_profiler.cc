// Operator profiling: one bench (every buffer a kernel call touches) per signature, validated
// against the CPU reference, then timed forward and backward at each micro-batch size.
#include "gp/profile/op_profiler.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "gp/cost/cost_model.h"
#include "gp/exec/init.h"
#include "gp/plan/plan_util.h"

namespace gp::profile {
namespace {

bool is_int(const model::TensorSpec& spec) {
  return spec.dtype() == graphpipe::v1::DATA_TYPE_INT64 ||
         spec.dtype() == graphpipe::v1::DATA_TYPE_INT32;
}

// Ids an op accepts on its integer inputs: embedding rows or class count.
int64_t id_range(const model::OpNode& op) {
  if ((op.type() == "embedding_bag" || op.type() == "embedding") && op.proto->params_size() > 0 &&
      op.proto->params(0).shape_size() > 0) {
    return std::max<int64_t>(op.proto->params(0).shape(0), 1);
  }
  if (op.type() == "softmax_cross_entropy" && !op.input_specs.empty()) {
    const auto& logits = op.input_specs[0];
    if (logits.shape_size() > 0) return std::max<int64_t>(logits.shape(logits.shape_size() - 1), 1);
  }
  return 1;
}

// Whether float input `k` of `op` must be positive for a finite result (a logarithm, a root, a
// divisor, a power's base); such inputs are drawn from [0.5, 2] instead.
bool needs_positive(const model::OpNode& op, size_t k) {
  if (const auto* u = std::get_if<model::UnaryAttrs>(&op.attrs)) {
    return u->fn == model::UnaryFn::kLog || u->fn == model::UnaryFn::kSqrt ||
           u->fn == model::UnaryFn::kRsqrt || u->fn == model::UnaryFn::kReciprocal;
  }
  if (const auto* b = std::get_if<model::BinaryAttrs>(&op.attrs)) {
    return (b->fn == model::BinaryFn::kPow && k == 0) || (b->fn == model::BinaryFn::kDiv && k == 1);
  }
  return false;
}

// Float inputs are uniform with unit variance, like activations after a normalisation layer
// (some kernels' cost depends on the values, e.g. tanh in GELU).
constexpr float kUnitRange = 1.7320508f;  // sqrt(3)

int64_t param_elements(const model::ParamSpec& p) {
  int64_t n = 1;
  for (int64_t d : p.shape()) n *= d;
  return n;
}

// Every buffer one kernel call reads or writes, sized for `max_batch` samples. Inputs and
// parameters depend only on (seed, op, sample), so two benches of one op agree on any prefix.
//
// The host vectors are the source of truth: the synthetic data is generated there and results
// are read there. A device without host memory gets a mirror of every buffer in its own memory,
// filled once (inputs, parameters, output gradients) by create(); the kernels see only the
// mirrors, and download() brings the results back. On the CPU the kernels use the host vectors
// and nothing is copied.
class OpBench {
 public:
  static Result<std::unique_ptr<OpBench>> create(const model::OpNode& op,
                                                 const exec::OpKernel& kernel,
                                                 const exec::Device& device, int64_t max_batch,
                                                 uint64_t seed) {
    std::unique_ptr<OpBench> bench(new OpBench(op, kernel, device, max_batch, seed));
    GP_RETURN_IF_ERROR(bench->bind());
    return bench;
  }

  // Queues the call; on an asynchronous device it may still run when these return.
  void forward(int64_t batch) { kernel_.forward(args(batch, false)); }
  void backward(int64_t batch) { kernel_.backward(args(batch, true)); }

  Status zero_grads() {
    if (device_.host_memory()) {
      for (auto& in : inputs_) std::fill(in.grads.begin(), in.grads.end(), 0.0f);
      for (auto& g : param_grads_) std::fill(g.begin(), g.end(), 0.0f);
      return ok_status();
    }
    for (auto& in : inputs_) {
      if (in.d_grads.bytes() > 0) {
        GP_RETURN_IF_ERROR(device_.fill_zero(in.d_grads.data(), in.d_grads.bytes()));
      }
    }
    for (auto& g : d_param_grads_) {
      if (g.bytes() > 0) GP_RETURN_IF_ERROR(device_.fill_zero(g.data(), g.bytes()));
    }
    return ok_status();
  }

  // Copies what results(batch) reads to the host (outputs, input and parameter gradients); waits
  // for the queued work. Nothing to do on a device with host memory.
  Status download(int64_t batch) {
    if (device_.host_memory()) return ok_status();
    auto get = [&](std::vector<float>& host, const exec::DeviceBuffer& dev, size_t floats) {
      return floats == 0 ? ok_status()
                         : device_.copy_to_host(host.data(), dev.data(), floats * sizeof(float));
    };
    for (auto& out : outputs_) {
      GP_RETURN_IF_ERROR(get(out.values, out.d_values, floats(out, batch)));
    }
    for (auto& in : inputs_) {
      if (!in.grads.empty()) GP_RETURN_IF_ERROR(get(in.grads, in.d_grads, floats(in, batch)));
    }
    for (size_t i = 0; i < param_grads_.size(); ++i) {
      GP_RETURN_IF_ERROR(get(param_grads_[i], d_param_grads_[i], param_grads_[i].size()));
    }
    return ok_status();
  }

  // The results of a forward + backward of `batch` samples, named for error messages (on the
  // host: after download(batch)).
  std::vector<std::pair<std::string, std::span<const float>>> results(int64_t batch) const {
    std::vector<std::pair<std::string, std::span<const float>>> r;
    ids_as_floats_.resize(outputs_.size());
    for (size_t j = 0; j < outputs_.size(); ++j) {
      const Buffer& out = outputs_[j];
      std::span<const float> values(out.values.data(), floats(out, batch));
      if (out.floats_per_element == 2) {  // int64 ids, compared as numbers
        const auto* ids = reinterpret_cast<const int64_t*>(out.values.data());
        auto& as_floats = ids_as_floats_[j];
        as_floats.assign(static_cast<size_t>(out.per_sample * batch), 0.0f);
        for (size_t e = 0; e < as_floats.size(); ++e) as_floats[e] = static_cast<float>(ids[e]);
        values = as_floats;
      }
      r.emplace_back("output " + std::to_string(j), values);
    }
    for (size_t k = 0; k < inputs_.size(); ++k) {
      if (inputs_[k].grads.empty()) continue;
      r.emplace_back("gradient of input " + std::to_string(k),
                     std::span<const float>(inputs_[k].grads.data(), floats(inputs_[k], batch)));
    }
    for (int i = 0; i < op_.proto->params_size(); ++i) {
      r.emplace_back("gradient of parameter '" + op_.proto->params(i).name() + "'",
                     std::span<const float>(param_grads_[i]));
    }
    return r;
  }

 private:
  struct Buffer {
    int64_t per_sample = 0;          // elements
    int64_t floats_per_element = 1;  // 2 for an int64 output (a cast to ids), held as floats
    std::vector<float> values, grads;
    std::vector<int64_t> ids;
    // Mirrors on a device without host memory (`values` or `ids` in d_values).
    exec::DeviceBuffer d_values, d_grads;
  };

  static size_t floats(const Buffer& b, int64_t batch) {
    return static_cast<size_t>(b.per_sample * batch * b.floats_per_element);
  }

  OpBench(const model::OpNode& op, const exec::OpKernel& kernel, const exec::Device& device,
          int64_t max_batch, uint64_t seed)
      : op_(op), kernel_(kernel), device_(device) {
    const uint64_t base = exec::hash_combine(seed, op.id());
    for (size_t k = 0; k < op.input_specs.size(); ++k) {
      const auto& spec = op.input_specs[k];
      Buffer in;
      in.per_sample = model::num_elements(spec);
      const bool ids = is_int(spec);
      const int64_t n = in.per_sample * max_batch;
      if (ids) {
        in.ids.resize(static_cast<size_t>(n));
        const int64_t range = id_range(op);
        for (int64_t s = 0; s < max_batch; ++s) {
          exec::Rng rng(exec::hash_combine(exec::hash_combine(base, k), static_cast<uint64_t>(s)));
          for (int64_t e = 0; e < in.per_sample; ++e) {
            const int64_t id = rng.below(range);
            in.ids[s * in.per_sample + e] = id;  // int64, as the executor holds every id
          }
        }
      } else {
        in.values.resize(static_cast<size_t>(n));
        for (int64_t s = 0; s < max_batch; ++s) {
          exec::Rng rng(exec::hash_combine(exec::hash_combine(base, k), static_cast<uint64_t>(s)));
          const bool positive = needs_positive(op, k);
          for (int64_t e = 0; e < in.per_sample; ++e) {
            in.values[s * in.per_sample + e] =
                positive ? rng.uniform(0.5f, 2.0f) : rng.uniform(-kUnitRange, kUnitRange);
          }
        }
        in.grads.resize(static_cast<size_t>(n));
      }
      inputs_.push_back(std::move(in));
    }
    const bool loss = op.info->is_loss;
    for (int j = 0; j < op.proto->outputs_size(); ++j) {
      Buffer out;
      out.per_sample = model::num_elements(op.proto->outputs(j));
      out.floats_per_element = is_int(op.proto->outputs(j)) ? 2 : 1;
      const auto n = floats(out, max_batch);
      out.values.resize(n);
      out.grads.resize(n);
      exec::Rng rng(exec::hash_combine(exec::hash_combine(base, "grad"), static_cast<uint64_t>(j)));
      // A loss gets d(objective)/d(loss_s) = 1 / mini-batch in training; a fixed mini-batch of
      // 16 here, so that benches of any size agree.
      for (auto& g : out.grads) g = loss ? 1.0f / 16 : rng.uniform(-1.0f, 1.0f);
      outputs_.push_back(std::move(out));
    }
    for (int i = 0; i < op.proto->params_size(); ++i) {
      std::vector<float> p(static_cast<size_t>(param_elements(op.proto->params(i))));
      exec::init_param(op, i, seed, p);
      params_.push_back(std::move(p));
      param_grads_.emplace_back(params_.back().size());
    }
    saved_.resize(static_cast<size_t>(kernel.saved_floats_per_sample() * max_batch));
    workspace_.resize(static_cast<size_t>(kernel.workspace_floats_per_sample() * max_batch));
  }

  // Device memory holding a copy of host[0, bytes) (`upload`) or zeros.
  Result<exec::DeviceBuffer> mirror(const void* host, size_t bytes, bool upload) const {
    GP_ASSIGN_OR_RETURN(auto buffer, exec::DeviceBuffer::create(device_, bytes));
    if (bytes > 0) {
      GP_RETURN_IF_ERROR(upload ? device_.copy_from_host(buffer.data(), host, bytes)
                                : device_.fill_zero(buffer.data(), bytes));
    }
    return buffer;
  }
  template <typename T>
  Result<exec::DeviceBuffer> mirror(const std::vector<T>& host, bool upload) const {
    return mirror(host.data(), host.size() * sizeof(T), upload);
  }

  // Points the kernel views at the host vectors, or at device mirrors made here.
  Status bind() {
    const bool host = device_.host_memory();
    auto ptr = [host](std::vector<float>& v, const exec::DeviceBuffer& d) -> float* {
      if (v.empty()) return nullptr;
      return host ? v.data() : d.f();
    };
    if (!host) {
      for (auto& in : inputs_) {
        if (in.ids.empty()) {
          GP_ASSIGN_OR_RETURN(in.d_values, mirror(in.values, true));
        } else {
          GP_ASSIGN_OR_RETURN(in.d_values, mirror(in.ids, true));
        }
        GP_ASSIGN_OR_RETURN(in.d_grads, mirror(in.grads, false));
      }
      for (auto& out : outputs_) {
        GP_ASSIGN_OR_RETURN(out.d_values, mirror(out.values, false));
        GP_ASSIGN_OR_RETURN(out.d_grads, mirror(out.grads, true));
      }
      for (size_t i = 0; i < params_.size(); ++i) {
        GP_ASSIGN_OR_RETURN(auto p, mirror(params_[i], true));
        d_params_.push_back(std::move(p));
        GP_ASSIGN_OR_RETURN(auto g, mirror(param_grads_[i], false));
        d_param_grads_.push_back(std::move(g));
      }
      GP_ASSIGN_OR_RETURN(d_saved_, mirror(saved_, false));
      GP_ASSIGN_OR_RETURN(d_workspace_, mirror(workspace_, false));
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      param_ptrs_.push_back(host ? params_[i].data() : d_params_[i].f());
      grad_ptrs_.push_back(host ? param_grads_[i].data() : d_param_grads_[i].f());
    }
    for (auto& in : inputs_) {
      void* data =
          in.ids.empty() ? static_cast<void*>(in.values.data()) : static_cast<void*>(in.ids.data());
      in_views_.push_back({host ? data : in.d_values.data(), in.per_sample});
      gin_views_.push_back({ptr(in.grads, in.d_grads), in.per_sample});
    }
    for (auto& out : outputs_) {
      out_views_.push_back({ptr(out.values, out.d_values), out.per_sample});
      gout_views_.push_back({ptr(out.grads, out.d_grads), out.per_sample});
    }
    saved_ptr_ = ptr(saved_, d_saved_);
    workspace_ptr_ = ptr(workspace_, d_workspace_);
    return ok_status();
  }

  exec::OpArgs args(int64_t batch, bool backward) {
    exec::OpArgs a;
    a.batch = batch;
    a.inputs = in_views_;
    a.outputs = out_views_;
    a.params = param_ptrs_;
    a.saved = saved_ptr_;
    a.workspace = workspace_ptr_;
    if (backward) {
      a.grad_outputs = gout_views_;
      a.grad_inputs = gin_views_;
      a.param_grads = grad_ptrs_;
    }
    return a;
  }

  const model::OpNode& op_;
  const exec::OpKernel& kernel_;
  const exec::Device& device_;
  std::vector<Buffer> inputs_, outputs_;
  std::vector<std::vector<float>> params_, param_grads_;
  std::vector<float> saved_, workspace_;
  mutable std::vector<std::vector<float>> ids_as_floats_;  // results() of int64 outputs
  std::vector<exec::DeviceBuffer> d_params_, d_param_grads_;
  exec::DeviceBuffer d_saved_, d_workspace_;
  float* saved_ptr_ = nullptr;
  float* workspace_ptr_ = nullptr;
  std::vector<float*> param_ptrs_, grad_ptrs_;
  std::vector<exec::TensorView> in_views_, gin_views_, out_views_, gout_views_;
};

// Empty when every value is finite, else what is not.
std::string check_finite(const OpBench& bench, int64_t batch) {
  for (const auto& [name, values] : bench.results(batch)) {
    for (size_t e = 0; e < values.size(); ++e) {
      if (!std::isfinite(values[e])) {
        return name + " element " + std::to_string(e) + " is " + std::to_string(values[e]);
      }
    }
  }
  return "";
}

// Empty when the device's results match the reference's within `tolerance` of each tensor's
// largest reference magnitude, else the worst mismatch.
std::string compare(const OpBench& device, const OpBench& reference, int64_t batch,
                    double tolerance) {
  const auto got = device.results(batch);
  const auto want = reference.results(batch);
  for (size_t t = 0; t < want.size(); ++t) {
    const auto& [name, ref] = want[t];
    const auto& dev = got[t].second;
    double scale = 1e-6;
    for (float v : ref) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (size_t e = 0; e < ref.size(); ++e) {
      const double err = std::fabs(static_cast<double>(dev[e]) - ref[e]) / scale;
      if (!(err <= tolerance)) {
        return name + " element " + std::to_string(e) + ": " + std::to_string(dev[e]) +
               ", the CPU reference gives " + std::to_string(ref[e]) + " (relative error " +
               std::to_string(err) + " > tolerance " + std::to_string(tolerance) + ")";
      }
    }
  }
  return "";
}

// Streams through a buffer larger than the private caches, writing every cache line.
class CacheFlusher {
 public:
  explicit CacheFlusher(int64_t bytes)
      : lines_(static_cast<size_t>(std::max<int64_t>(bytes, 0) / 64)) {}
  void flush() {
    for (auto& line : lines_) line.value[0] += 1.0f;
  }
  bool enabled() const { return !lines_.empty(); }

 private:
  struct alignas(64) Line {
    float value[16] = {};
  };
  std::vector<Line> lines_;
};

using Signatures = std::vector<std::pair<std::string, int>>;

// The options profile_ops checks first, in the order of its errors.
Status check_options(const OpProfileOptions& options) {
  if (options.micro_batches.empty()) return invalid_argument("--micro-batches: empty list");
  for (int64_t b : options.micro_batches) {
    if (b <= 0 || b > plan::kMaxMiniBatch) {
      return invalid_argument("--micro-batches: " + std::to_string(b) + ", must be in [1, " +
                              std::to_string(plan::kMaxMiniBatch) + "]");
    }
  }
  if (options.device_kind.empty()) return invalid_argument("device kind: empty name");
  if (options.measure.min_repetitions < 1 || options.measure.min_repetitions > kMaxRepetitions) {
    return invalid_argument("--repetitions = " + std::to_string(options.measure.min_repetitions) +
                            ", must be in [1, " + std::to_string(kMaxRepetitions) + "]");
  }
  if (options.measure.warmup < 0 || options.measure.warmup > kMaxRepetitions) {
    return invalid_argument("--warmup = " + std::to_string(options.measure.warmup) +
                            ", must be in [0, " + std::to_string(kMaxRepetitions) + "]");
  }
  if (!(options.tolerance > 0)) {
    return invalid_argument("--tolerance = " + std::to_string(options.tolerance) + ", must be > 0");
  }
  return ok_status();
}

// Refused before anything is measured: an operator whose buffers at the largest micro-batch
// cannot fit in memory (a lower bound: values and gradients of its inputs, outputs and
// parameters) would otherwise end the run in an allocation failure. No limit: 0.
Status check_memory_limit(const model::Graph& graph, const Signatures& signatures,
                          int64_t max_batch, int64_t memory_limit_bytes) {
  if (memory_limit_bytes <= 0) return ok_status();
  for (const auto& [sig, index] : signatures) {
    const auto& op = graph.op(index);
    double per_sample = static_cast<double>(op.output_bytes);
    for (const auto& spec : op.input_specs) {
      per_sample += static_cast<double>(model::size_bytes(spec));
    }
    const double need = 2 * (per_sample * static_cast<double>(max_batch) +
                             static_cast<double>(op.cost.param_count) * sizeof(float));
    if (need > static_cast<double>(memory_limit_bytes)) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "%.1f GiB, more than this host's %.1f GiB of memory",
                    need / (1 << 30), static_cast<double>(memory_limit_bytes) / (1 << 30));
      return invalid_argument("--micro-batches: " + std::to_string(max_batch) + " samples of op '" +
                              op.id() + "' need at least " + buf);
    }
  }
  return ok_status();
}

// One profiling run over checked options: every pass measures each (signature, micro-batch)
// again and a measurement keeps its fastest pass, so that a few seconds of interference on the
// host (another process, the hypervisor) skew one pass, not the profile. A signature without a
// kernel, or a (signature, micro-batch) that fails once, is rejected for the whole run.
class OpProfiler {
 public:
  OpProfiler(const model::Graph& graph, const exec::Device& device, const OpProfileOptions& options,
             std::vector<int64_t> sizes, Timer& timer, std::function<void()> before,
             const std::function<void(const OpProfileProgress&)>& progress)
      : graph_(graph),
        device_(device),
        options_(options),
        sizes_(std::move(sizes)),
        timer_(timer),
        before_(std::move(before)),
        progress_(progress) {}

  OpProfileResult run(const Signatures& signatures) {
    result_.signatures = static_cast<int>(signatures.size());
    step_.total = static_cast<int>(signatures.size() * sizes_.size()) * options_.passes;
    for (int pass = 0; pass < options_.passes; ++pass) {
      for (const auto& [sig, index] : signatures) profile_signature(pass, sig, graph_.op(index));
    }
    // A measurement whose later pass failed is not recorded either.
    std::erase_if(result_.measurements, [&](const graphpipe::v1::OpMeasurement& m) {
      return failed_.count({m.signature(), m.micro_batch()}) > 0;
    });
    return std::move(result_);
  }

 private:
  using Key = std::pair<std::string, int64_t>;  // (signature, micro-batch)

  // One pass over one signature's micro-batch sizes, on one bench.
  void profile_signature(int pass, const std::string& sig, const model::OpNode& op) {
    if (rejected_.count(sig)) {
      for (int64_t b : sizes_) advance(sig, b);
      return;
    }
    auto kernel = device_.make_kernel(op);
    std::unique_ptr<exec::OpKernel> reference;
    const std::string unusable = find_kernels(op, kernel, &reference);
    if (!unusable.empty()) {
      rejected_.insert(sig);
      for (int64_t b : sizes_) {
        result_.rejected.push_back({sig, op.id(), b, unusable});
        advance(sig, b);
      }
      return;
    }
    auto bench_or = OpBench::create(op, **kernel, device_, sizes_.back(), options_.seed);
    if (!bench_or.ok()) {
      for (int64_t b : sizes_) {
        if (failed_.insert({sig, b}).second) {
          result_.rejected.push_back({sig, op.id(), b,
                                      "cannot set up the buffers on " +
                                          std::string(device_.name()) + ": " +
                                          bench_or.status().message()});
        }
        advance(sig, b);
      }
      return;
    }
    for (int64_t b : sizes_) {
      const Key key{sig, b};
      if (failed_.count(key) || (pass > 0 && !measured_.count(key))) {
        advance(sig, b);
        continue;
      }
      measure_size(pass, sig, b, op, **kernel, reference.get(), **bench_or);
    }
  }

  // Sets *reference to the CPU reference kernel when the device is not the CPU itself; empty
  // when the op has the kernels it needs, else why not.
  std::string find_kernels(const model::OpNode& op,
                           const Result<std::unique_ptr<exec::OpKernel>>& kernel,
                           std::unique_ptr<exec::OpKernel>* reference) const {
    if (!kernel.ok()) {
      return std::string(device_.name()) + " has no kernel: " + kernel.status().message();
    }
    if (&device_ == &exec::cpu_device()) return "";
    auto ref = exec::make_cpu_kernel(op);
    if (!ref.ok()) return "no CPU reference kernel to check against: " + ref.status().message();
    *reference = std::move(ref).value();
    return "";
  }

  // Checks (first pass only), then times, one micro-batch size; records or rejects it.
  void measure_size(int pass, const std::string& sig, int64_t b, const model::OpNode& op,
                    const exec::OpKernel& kernel, const exec::OpKernel* reference, OpBench& bench) {
    if (const std::string problem = run_and_check(pass, op, reference, bench, b);
        !problem.empty()) {
      reject(sig, b, op, problem);
      return;
    }
    Stats fwd, bwd;
    if (const Status timing = time_kernel(bench, b, &fwd, &bwd); !timing.ok()) {
      reject(sig, b, op, std::string(device_.name()) + " failed while timing: " + timing.message());
      return;
    }
    keep_fastest(Key{sig, b}, measurement(sig, op, kernel, b, fwd, bwd));
    advance(sig, b);
  }

  // Runs a forward and a backward; on the first pass also checks the results (finite, and as
  // the CPU reference's). Empty when all is well, else the problem.
  std::string run_and_check(int pass, const model::OpNode& op, const exec::OpKernel* reference,
                            OpBench& bench, int64_t b) {
    // An asynchronous device reports the errors of queued kernels at synchronize().
    Status st = bench.zero_grads();
    if (st.ok()) {
      bench.forward(b);
      bench.backward(b);
      st = device_.synchronize();
    }
    if (st.ok() && pass == 0) st = bench.download(b);
    if (!st.ok()) {
      return std::string(device_.name()) + " failed running forward and backward: " + st.message();
    }
    std::string problem = pass > 0 ? "" : check_finite(bench, b);
    if (problem.empty() && reference != nullptr && pass == 0) {
      auto ref = OpBench::create(op, *reference, exec::cpu_device(), b, options_.seed);
      if (ref.ok()) {
        (*ref)->forward(b);
        (*ref)->backward(b);
        problem = compare(bench, **ref, b, options_.tolerance);
      } else {
        problem = "cannot set up the CPU reference: " + ref.status().message();
      }
    }
    return problem;
  }

  // Times the forward, then the backward; the first device error while timing, if any.
  // Each timed call waits for the device, so that an asynchronous device's time is the kernel's
  // and not just its launch. That adds the launch and synchronisation overhead (~5-10 us on
  // CUDA) to every call; CUDA events would exclude it. On the CPU synchronize() is a no-op.
  Status time_kernel(OpBench& bench, int64_t b, Stats* fwd, Stats* bwd) {
    Status timing;
    auto timed = [&](void (OpBench::*call)(int64_t)) {
      return [&, call] {
        (bench.*call)(b);
        if (Status s = device_.synchronize(); !s.ok() && timing.ok()) timing = s;
      };
    };
    *fwd = measure(timer_, options_.measure, timed(&OpBench::forward), before_);
    bench.forward(b);  // the saved scratch backward reads; finished before timing starts
    if (Status s = device_.synchronize(); !s.ok() && timing.ok()) timing = s;
    *bwd = measure(timer_, options_.measure, timed(&OpBench::backward), before_);
    return timing;
  }

  graphpipe::v1::OpMeasurement measurement(const std::string& sig, const model::OpNode& op,
                                           const exec::OpKernel& kernel, int64_t b,
                                           const Stats& fwd, const Stats& bwd) const {
    graphpipe::v1::OpMeasurement m;
    m.set_signature(sig);
    m.set_device_kind(options_.device_kind);
    m.set_micro_batch(b);
    m.set_forward_time_us(fwd.median_us);
    m.set_backward_time_us(bwd.median_us);
    m.set_forward_spread_us(fwd.spread_us());
    m.set_backward_spread_us(bwd.spread_us());
    m.set_activation_bytes(kept_bytes(op, kernel, b));
    // The kernel contract: kernels allocate nothing; what they use during a call only is the
    // workspace they declare, which the executor owns.
    m.set_workspace_bytes(kernel.workspace_floats_per_sample() *
                          static_cast<int64_t>(sizeof(float)) * b);
    m.set_repetitions(std::min(fwd.repetitions, bwd.repetitions));
    *m.mutable_provenance() = options_.provenance;
    return m;
  }

  // The first pass's measurement, or a later one that is faster in forward + backward.
  void keep_fastest(const Key& key, graphpipe::v1::OpMeasurement m) {
    if (auto it = measured_.find(key); it != measured_.end()) {
      auto& best = result_.measurements[it->second];
      if (m.forward_time_us() + m.backward_time_us() <
          best.forward_time_us() + best.backward_time_us()) {
        best = std::move(m);
      }
    } else {
      measured_[key] = result_.measurements.size();
      result_.measurements.push_back(std::move(m));
    }
  }

  void reject(const std::string& sig, int64_t b, const model::OpNode& op,
              const std::string& problem) {
    failed_.insert({sig, b});
    result_.rejected.push_back({sig, op.id(), b, problem});
    advance(sig, b);
  }

  void advance(const std::string& sig, int64_t b) {
    ++step_.done;
    step_.signature = &sig;
    step_.micro_batch = b;
    if (progress_) progress_(step_);
  }

  const model::Graph& graph_;
  const exec::Device& device_;
  const OpProfileOptions& options_;
  const std::vector<int64_t> sizes_;  // sorted, distinct
  Timer& timer_;
  const std::function<void()> before_;  // before every timed call: the cache flush
  const std::function<void(const OpProfileProgress&)>& progress_;

  OpProfileResult result_;
  OpProfileProgress step_;
  std::map<Key, size_t> measured_;  // -> index in result_.measurements
  std::set<std::string> rejected_;  // signatures without a kernel
  std::set<Key> failed_;            // rejected (signature, micro-batch)
};

}  // namespace

double default_tolerance(exec::MatmulPrecision precision) {
  switch (precision) {
    case exec::MatmulPrecision::kTf32:
      return 2e-2;
    case exec::MatmulPrecision::kBf16:
      return 6e-2;
    case exec::MatmulPrecision::kFp32:
      break;
  }
  return 1e-4;
}

int64_t default_cache_flush_bytes() {
  // Twice the last-level cache when the host reports a plausible one, else 64 MiB: during
  // training the in-flight activations of a stage rarely fit in cache, so each operator starts
  // from memory. Measured on a 2-vCPU EPYC VM, warm-cache timings were 20-40% below the same
  // kernels inside the executor; cold ones agreed within noise.
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const int64_t fallback = int64_t{64} << 20;
  if (l3 <= 0 || l3 > (int64_t{256} << 20)) return fallback;
  return std::max<int64_t>(2 * static_cast<int64_t>(l3), int64_t{8} << 20);
}

std::vector<std::pair<std::string, int>> distinct_signatures(const model::Graph& graph) {
  std::vector<std::pair<std::string, int>> out;
  std::set<std::string> seen;
  for (int i : graph.topo_order()) {
    const auto& op = graph.op(i);
    if (op.info->is_input || op.type() == "opaque") continue;
    std::string sig = cost::op_signature(op);
    if (seen.insert(sig).second) out.emplace_back(std::move(sig), i);
  }
  return out;
}

int64_t kept_bytes(const model::OpNode& op, const exec::OpKernel& kernel, int64_t samples) {
  int64_t per_sample = kernel.saved_floats_per_sample() * static_cast<int64_t>(sizeof(float));
  for (const auto& out : op.proto->outputs()) per_sample += model::stored_size_bytes(out);
  return per_sample * samples;
}

Result<OpProfileResult> profile_ops(const model::Graph& graph, const exec::Device& device,
                                    const OpProfileOptions& options,
                                    const std::function<void(const OpProfileProgress&)>& progress) {
  GP_RETURN_IF_ERROR(check_options(options));
  std::vector<int64_t> sizes = options.micro_batches;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  if (options.cache_flush_bytes < 0) {
    return invalid_argument("--flush-cache-mib: " + std::to_string(options.cache_flush_bytes) +
                            " bytes, must be >= 0");
  }
  // The flusher evicts host caches only: it is of no use for a device with its own memory, whose
  // kernels start from device memory either way (flushing the device's L2 is future work).
  CacheFlusher flusher(device.host_memory() ? options.cache_flush_bytes : 0);
  std::function<void()> before;
  if (flusher.enabled()) before = [&flusher] { flusher.flush(); };
  SteadyTimer steady;
  Timer& timer = options.timer != nullptr ? *options.timer : steady;

  const Signatures signatures = distinct_signatures(graph);
  GP_RETURN_IF_ERROR(
      check_memory_limit(graph, signatures, sizes.back(), options.memory_limit_bytes));
  if (options.passes < 1) {
    return invalid_argument("--passes = " + std::to_string(options.passes) + ", must be >= 1");
  }
  OpProfiler profiler(graph, device, options, std::move(sizes), timer, std::move(before), progress);
  return profiler.run(signatures);
}

}  // namespace gp::profile
