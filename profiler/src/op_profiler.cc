// Operator profiling: one bench (every buffer a kernel call touches) per signature, validated
// against the CPU reference, then timed forward and backward at each micro-batch size.
#include "gp/profile/op_profiler.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "gp/cost/cost_model.h"
#include "gp/exec/init.h"

namespace gp::profile {
namespace {

bool is_int(const graph::TensorSpec& spec) {
  return spec.dtype() == graphpipe::v1::DATA_TYPE_INT64 ||
         spec.dtype() == graphpipe::v1::DATA_TYPE_INT32;
}

// Ids an op accepts on its integer inputs: embedding rows or class count.
int64_t id_range(const graph::OpNode& op) {
  if (op.type() == "embedding_bag" && op.proto->params_size() > 0 &&
      op.proto->params(0).shape_size() > 0) {
    return std::max<int64_t>(op.proto->params(0).shape(0), 1);
  }
  if (op.type() == "softmax_cross_entropy" && !op.input_specs.empty()) {
    const auto& logits = op.input_specs[0];
    if (logits.shape_size() > 0) return std::max<int64_t>(logits.shape(logits.shape_size() - 1), 1);
  }
  return 1;
}

// Float inputs are uniform with unit variance, like activations after a normalisation layer
// (some kernels' cost depends on the values, e.g. tanh in GELU).
constexpr float kUnitRange = 1.7320508f;  // sqrt(3)

int64_t param_elements(const graph::ParamSpec& p) {
  int64_t n = 1;
  for (int64_t d : p.shape()) n *= d;
  return n;
}

// Every buffer one kernel call reads or writes, sized for `max_batch` samples. Inputs and
// parameters depend only on (seed, op, sample), so two benches of one op agree on any prefix.
class OpBench {
 public:
  OpBench(const graph::OpNode& op, const exec::OpKernel& kernel, int64_t max_batch, uint64_t seed)
      : op_(op), kernel_(kernel) {
    const uint64_t base = exec::hash_combine(seed, op.id());
    for (size_t k = 0; k < op.input_specs.size(); ++k) {
      const auto& spec = op.input_specs[k];
      Buffer in;
      in.per_sample = graph::num_elements(spec);
      in.int32 = spec.dtype() == graphpipe::v1::DATA_TYPE_INT32;
      const bool ids = is_int(spec);
      const int64_t n = in.per_sample * max_batch;
      if (ids) {
        in.ids.resize(static_cast<size_t>(n));
        const int64_t range = id_range(op);
        for (int64_t s = 0; s < max_batch; ++s) {
          exec::Rng rng(exec::hash_combine(exec::hash_combine(base, k), static_cast<uint64_t>(s)));
          for (int64_t e = 0; e < in.per_sample; ++e) {
            const int64_t id = rng.below(range);
            if (in.int32) {
              reinterpret_cast<int32_t*>(in.ids.data())[s * in.per_sample + e] =
                  static_cast<int32_t>(id);
            } else {
              in.ids[s * in.per_sample + e] = id;
            }
          }
        }
      } else {
        in.values.resize(static_cast<size_t>(n));
        for (int64_t s = 0; s < max_batch; ++s) {
          exec::Rng rng(exec::hash_combine(exec::hash_combine(base, k), static_cast<uint64_t>(s)));
          for (int64_t e = 0; e < in.per_sample; ++e) {
            in.values[s * in.per_sample + e] = rng.uniform(-kUnitRange, kUnitRange);
          }
        }
        in.grads.resize(static_cast<size_t>(n));
      }
      inputs_.push_back(std::move(in));
    }
    const bool loss = op.info->is_loss;
    for (int j = 0; j < op.proto->outputs_size(); ++j) {
      Buffer out;
      out.per_sample = graph::num_elements(op.proto->outputs(j));
      const auto n = static_cast<size_t>(out.per_sample * max_batch);
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
    for (auto& p : params_) param_ptrs_.push_back(p.data());
    for (auto& g : param_grads_) grad_ptrs_.push_back(g.data());
    for (auto& in : inputs_) {
      in_views_.push_back({in.ids.empty() ? static_cast<void*>(in.values.data())
                                          : static_cast<void*>(in.ids.data()),
                           in.per_sample});
      gin_views_.push_back({in.grads.empty() ? nullptr : in.grads.data(), in.per_sample});
    }
    for (auto& out : outputs_) {
      out_views_.push_back({out.values.data(), out.per_sample});
      gout_views_.push_back({out.grads.data(), out.per_sample});
    }
  }

  void forward(int64_t batch) { kernel_.forward(args(batch, false)); }
  void backward(int64_t batch) { kernel_.backward(args(batch, true)); }
  void zero_grads() {
    for (auto& in : inputs_) std::fill(in.grads.begin(), in.grads.end(), 0.0f);
    for (auto& g : param_grads_) std::fill(g.begin(), g.end(), 0.0f);
  }

  // The results of a forward + backward of `batch` samples, named for error messages.
  std::vector<std::pair<std::string, std::span<const float>>> results(int64_t batch) const {
    std::vector<std::pair<std::string, std::span<const float>>> r;
    for (size_t j = 0; j < outputs_.size(); ++j) {
      r.emplace_back("output " + std::to_string(j),
                     std::span<const float>(outputs_[j].values.data(),
                                            static_cast<size_t>(outputs_[j].per_sample * batch)));
    }
    for (size_t k = 0; k < inputs_.size(); ++k) {
      if (inputs_[k].grads.empty()) continue;
      r.emplace_back("gradient of input " + std::to_string(k),
                     std::span<const float>(inputs_[k].grads.data(),
                                            static_cast<size_t>(inputs_[k].per_sample * batch)));
    }
    for (int i = 0; i < op_.proto->params_size(); ++i) {
      r.emplace_back("gradient of parameter '" + op_.proto->params(i).name() + "'",
                     std::span<const float>(param_grads_[i]));
    }
    return r;
  }

 private:
  struct Buffer {
    int64_t per_sample = 0;
    bool int32 = false;
    std::vector<float> values, grads;
    std::vector<int64_t> ids;  // int64 ids, or int32 ids packed from the start
  };

  exec::OpArgs args(int64_t batch, bool backward) {
    exec::OpArgs a;
    a.batch = batch;
    a.inputs = in_views_;
    a.outputs = out_views_;
    a.params = param_ptrs_;
    a.saved = saved_.empty() ? nullptr : saved_.data();
    if (backward) {
      a.grad_outputs = gout_views_;
      a.grad_inputs = gin_views_;
      a.param_grads = grad_ptrs_;
    }
    return a;
  }

  const graph::OpNode& op_;
  const exec::OpKernel& kernel_;
  std::vector<Buffer> inputs_, outputs_;
  std::vector<std::vector<float>> params_, param_grads_;
  std::vector<float> saved_;
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

}  // namespace

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

std::vector<std::pair<std::string, int>> distinct_signatures(const graph::Graph& graph) {
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

int64_t kept_bytes(const graph::OpNode& op, const exec::OpKernel& kernel, int64_t samples) {
  int64_t per_sample = kernel.saved_floats_per_sample() * static_cast<int64_t>(sizeof(float));
  for (const auto& out : op.proto->outputs()) per_sample += graph::size_bytes(out);
  return per_sample * samples;
}

Result<OpProfileResult> profile_ops(const graph::Graph& graph, const exec::Device& device,
                                    const OpProfileOptions& options,
                                    const std::function<void(const OpProfileProgress&)>& progress) {
  if (options.micro_batches.empty()) return invalid_argument("--micro-batches: empty list");
  for (int64_t b : options.micro_batches) {
    if (b <= 0) {
      return invalid_argument("--micro-batches: " + std::to_string(b) + ", must be > 0");
    }
  }
  if (options.device_kind.empty()) return invalid_argument("device kind: empty name");
  if (options.measure.min_repetitions < 1) {
    return invalid_argument("--repetitions = " + std::to_string(options.measure.min_repetitions) +
                            ", must be >= 1");
  }
  if (!(options.tolerance > 0)) {
    return invalid_argument("--tolerance = " + std::to_string(options.tolerance) + ", must be > 0");
  }
  std::vector<int64_t> sizes = options.micro_batches;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const int64_t max_batch = sizes.back();
  const bool is_reference = &device == &exec::cpu_device();
  if (options.cache_flush_bytes < 0) {
    return invalid_argument("--flush-cache-mib: " + std::to_string(options.cache_flush_bytes) +
                            " bytes, must be >= 0");
  }
  CacheFlusher flusher(options.cache_flush_bytes);
  std::function<void()> before;
  if (flusher.enabled()) before = [&flusher] { flusher.flush(); };
  SteadyTimer steady;
  Timer& timer = options.timer != nullptr ? *options.timer : steady;

  OpProfileResult result;
  const auto signatures = distinct_signatures(graph);
  result.signatures = static_cast<int>(signatures.size());
  if (options.passes < 1) {
    return invalid_argument("--passes = " + std::to_string(options.passes) + ", must be >= 1");
  }
  OpProfileProgress step;
  step.total = static_cast<int>(signatures.size() * sizes.size()) * options.passes;
  auto advance = [&](const std::string& sig, int64_t b) {
    ++step.done;
    step.signature = &sig;
    step.micro_batch = b;
    if (progress) progress(step);
  };

  // Each pass measures everything again; a measurement keeps its fastest pass, so that a few
  // seconds of interference on the host (another process, the hypervisor) skew one pass, not the
  // profile.
  std::map<std::pair<std::string, int64_t>, size_t> measured;  // -> index in measurements
  std::set<std::string> rejected;
  for (int pass = 0; pass < options.passes; ++pass) {
    for (const auto& [sig, index] : signatures) {
      if (rejected.count(sig)) {
        for (int64_t b : sizes) advance(sig, b);
        continue;
      }
      const auto& op = graph.op(index);
      auto kernel = device.make_kernel(op);
      std::unique_ptr<exec::OpKernel> reference;
      std::string unusable;
      if (!kernel.ok()) {
        unusable = std::string(device.name()) + " has no kernel: " + kernel.status().message();
      } else if (!is_reference) {
        auto ref = exec::make_cpu_kernel(op);
        if (ref.ok()) {
          reference = std::move(ref).value();
        } else {
          unusable = "no CPU reference kernel to check against: " + ref.status().message();
        }
      }
      if (!unusable.empty()) {
        rejected.insert(sig);
        for (int64_t b : sizes) {
          result.rejected.push_back({sig, op.id(), b, unusable});
          advance(sig, b);
        }
        continue;
      }
      OpBench bench(op, **kernel, max_batch, options.seed);
      for (int64_t b : sizes) {
        const auto key = std::make_pair(sig, b);
        if (pass > 0 && !measured.count(key)) {  // rejected in the first pass
          advance(sig, b);
          continue;
        }
        bench.zero_grads();
        bench.forward(b);
        bench.backward(b);
        std::string problem = pass > 0 ? "" : check_finite(bench, b);
        if (problem.empty() && reference != nullptr && pass == 0) {
          OpBench ref(op, *reference, b, options.seed);
          ref.forward(b);
          ref.backward(b);
          problem = compare(bench, ref, b, options.tolerance);
        }
        if (!problem.empty()) {
          result.rejected.push_back({sig, op.id(), b, problem});
          advance(sig, b);
          continue;
        }
        const Stats fwd = measure(
            timer, options.measure, [&] { bench.forward(b); }, before);
        bench.forward(b);  // the saved scratch backward reads
        const Stats bwd = measure(
            timer, options.measure, [&] { bench.backward(b); }, before);
        graphpipe::v1::OpMeasurement m;
        m.set_signature(sig);
        m.set_device_kind(options.device_kind);
        m.set_micro_batch(b);
        m.set_forward_time_us(fwd.median_us);
        m.set_backward_time_us(bwd.median_us);
        m.set_forward_spread_us(fwd.spread_us());
        m.set_backward_spread_us(bwd.spread_us());
        m.set_activation_bytes(kept_bytes(op, **kernel, b));
        // The kernel contract: kernels allocate nothing, so there is no workspace beyond the
        // buffers the executor owns (an accelerator backend measures its own).
        m.set_workspace_bytes(0);
        m.set_repetitions(std::min(fwd.repetitions, bwd.repetitions));
        *m.mutable_provenance() = options.provenance;
        if (auto it = measured.find(key); it != measured.end()) {
          auto& best = result.measurements[it->second];
          if (m.forward_time_us() + m.backward_time_us() <
              best.forward_time_us() + best.backward_time_us()) {
            best = std::move(m);
          }
        } else {
          measured[key] = result.measurements.size();
          result.measurements.push_back(std::move(m));
        }
        advance(sig, b);
      }
    }
  }
  return result;
}

}  // namespace gp::profile
