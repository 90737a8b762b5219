// graphpipe-profile ops: measure every distinct operator of a model on one device.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "gp/common/logging.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/exec/device.h"
#include "gp/exec/device_info.h"
#include "gp/model/zoo.h"
#include "gp/profile/device_kind.h"
#include "gp/profile/op_profiler.h"
#include "gp/profile/optimizer_profiler.h"
#include "gp/profile_db/profile_db.h"
#include "progress.h"

namespace gp::profile::cli {
namespace {

// "13020" -> "13.2": CUDA runtime and driver versions are 1000 * major + 10 * minor.
std::string cuda_version(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string(v / 10 % 100);
}

struct CudaDescription {
  std::string gpu_name;  // e.g. "NVIDIA H200"; empty when the query does not list the device
  std::string driver_version;
  std::string runtime_version;
  std::string kernel_libraries;  // which kernels are measured: cuBLASLt/cuDNN or hand-written
};

// What the CUDA runtime says about the device named `device` ("cuda:N").
CudaDescription describe_cuda(std::string_view device) {
  const auto info = exec::query_cuda();
  CudaDescription d;
  d.driver_version = cuda_version(info.driver_version);
  d.runtime_version = cuda_version(info.runtime_version);
  d.kernel_libraries = info.kernel_libraries;
  for (const auto& dev : info.devices) {
    if (device == "cuda:" + std::to_string(dev.index)) d.gpu_name = dev.name;
  }
  return d;
}

// The shipped cluster presets that load; one that does not is skipped (the user did not ask
// for it, and gpu_device_kind falls back to the GPU's name).
std::vector<graphpipe::v1::Cluster> preset_clusters() {
  std::vector<graphpipe::v1::Cluster> out;
  for (const auto& name : cost::cluster_preset_names()) {
    if (auto c = cost::load_cluster(name); c.ok()) out.push_back(std::move(c).value());
  }
  return out;
}

// The device kind the records are for, and the cluster it was taken from (none when given by
// --device-kind alone): the cluster's, so that the planner finds these records when it plans for
// that cluster.
struct RecordedKind {
  graphpipe::v1::Cluster cluster;
  std::string device_kind;
};

Result<RecordedKind> resolve_device_kind(const OpsOptions& o, const exec::Device& device, bool cpu,
                                         const CudaDescription& cuda) {
  auto log = log::get("profile");
  std::string cluster_name = o.cluster;
  if (cluster_name.empty() && cpu) cluster_name = "cpu-local";
  RecordedKind out;
  out.device_kind = o.device_kind;
  if (!cpu && cluster_name.empty() && out.device_kind.empty() && !cuda.gpu_name.empty()) {
    const auto kind = gpu_device_kind(cuda.gpu_name, preset_clusters());
    if (!kind.cluster.empty()) {
      cluster_name = kind.cluster;
      log->info(
          "{} ({}): recording device kind '{}' of cluster preset '{}' (--device-kind or "
          "--cluster overrides)",
          device.name(), cuda.gpu_name, kind.device_kind, kind.cluster);
    } else {
      out.device_kind = kind.device_kind;
      log->warn(
          "no cluster preset has a device kind for {} ({}): recording device kind '{}'; plan "
          "with a cluster whose device is named so, or give --device-kind or --cluster",
          device.name(), cuda.gpu_name, out.device_kind);
    }
  }
  if (!cluster_name.empty()) {
    auto loaded = cost::load_cluster(cluster_name);
    if (!loaded.ok()) return loaded.status().with_context("--cluster");
    out.cluster = *loaded;
    if (out.device_kind.empty()) out.device_kind = out.cluster.device().name();
  }
  if (out.device_kind.empty()) {
    return invalid_argument("--device-kind: give the device kind name (or --cluster) for " +
                            o.device);
  }
  return out;
}

// The measurement flags profile_ops does not check itself.
Status check_measure_flags(const OpsOptions& o, int64_t host_memory) {
  GP_RETURN_IF_ERROR(exec::check_cpu_threads("--cpu-threads", o.cpu_threads));
  if (!(o.min_time_ms >= 0)) {
    return invalid_argument("--min-time-ms = " + std::to_string(o.min_time_ms) + ", must be >= 0");
  }
  if (o.warmup < 0) {
    return invalid_argument("--warmup = " + std::to_string(o.warmup) + ", must be >= 0");
  }
  // Buffers and the cache flusher live in host memory on every device.
  const double max_flush_mib = static_cast<double>(host_memory) / 2 / (1 << 20);
  if (!(o.flush_cache_mib < 0) && !(o.flush_cache_mib <= max_flush_mib)) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "--flush-cache-mib = %g, must be at most %.0f",
                  o.flush_cache_mib, max_flush_mib);
    return invalid_argument(std::string(buf) + " (half this host's memory)");
  }
  return ok_status();
}

OpProfileOptions profile_options(const OpsOptions& o, const std::string& device_kind,
                                 exec::MatmulPrecision precision, int64_t host_memory,
                                 const exec::Device& device, bool cpu,
                                 const CudaDescription& cuda) {
  OpProfileOptions opts;
  opts.micro_batches = o.micro_batches;
  opts.measure.warmup = o.warmup;
  opts.measure.min_repetitions = o.repetitions;
  opts.measure.max_repetitions = std::max(o.repetitions, 200);
  opts.measure.min_total_us = o.min_time_ms * 1000;
  opts.device_kind = device_kind;
  opts.tolerance = o.tolerance_given ? o.tolerance : default_tolerance(precision);
  opts.seed = o.seed;
  opts.passes = o.passes;
  opts.memory_limit_bytes = host_memory;
  opts.cache_flush_bytes = o.flush_cache_mib < 0
                               ? default_cache_flush_bytes()
                               : static_cast<int64_t>(o.flush_cache_mib * (1 << 20));
  if (cpu) {
    opts.provenance = make_provenance(
        "cpu", exec::query_host().cpu_model, "",
        exec::cpu_blas_version() + ", " + std::to_string(o.cpu_threads) + " thread(s)");
  } else {
    // The GEMM precision goes with the libraries: a bf16 profile is told apart from an fp32 one.
    opts.provenance =
        make_provenance("cuda", cuda.gpu_name.empty() ? std::string(device.name()) : cuda.gpu_name,
                        cuda.driver_version,
                        "cuda runtime " + cuda.runtime_version + ", gemm inputs " + o.precision +
                            " (fp32 accumulation), kernels: " + cuda.kernel_libraries);
  }
  return opts;
}

void warn_opaque_ops(const model::Graph& graph) {
  int opaque = 0;
  for (const auto& op : graph.ops()) opaque += op.type() == "opaque" ? 1 : 0;
  if (opaque > 0) {
    log::get("profile")->warn(
        "{} opaque op(s) (imported with --allow-opaque) have no kernel and are not measured; "
        "the planner estimates them from FLOPs",
        opaque);
  }
}

// measured / analytic estimate, "1.25x"; "-" without an estimate.
std::string analytic_ratio(const cost::AnalyticCostModel* analytic, const model::OpNode& op,
                           const graphpipe::v1::OpMeasurement& m) {
  if (!analytic) return "-";
  const auto est = analytic->op_time(op, m.micro_batch());
  const double total = est.forward_us + est.backward_us;
  if (!(total > 0)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2fx", (m.forward_time_us() + m.backward_time_us()) / total);
  return buf;
}

// The measurements as a table, each against the analytic estimate for the same device kind:
// where they disagree is where the planner's unprofiled answers would have been wrong.
void print_measurements(const model::Graph& graph,
                        const std::vector<std::pair<std::string, int>>& signatures,
                        const OpProfileResult& result, const graphpipe::v1::Cluster& cluster,
                        exec::MatmulPrecision precision, const std::string& device_kind) {
  std::unique_ptr<cost::AnalyticCostModel> analytic;
  if (cluster.has_device()) {
    analytic = std::make_unique<cost::AnalyticCostModel>(
        cluster.device(), precision == exec::MatmulPrecision::kBf16
                              ? graphpipe::v1::PRECISION_BF16_FP32_MASTER
                              : graphpipe::v1::PRECISION_FP32);
  }
  std::map<std::string, int> op_of;
  for (const auto& [sig, index] : signatures) op_of[sig] = index;
  std::printf("%-28s %6s %12s %12s %9s %12s %10s\n", "op (first of its signature)", "batch",
              "forward_us", "backward_us", "spread", "kept_bytes", "analytic");
  for (const auto& m : result.measurements) {
    const auto& op = graph.op(op_of[m.signature()]);
    const std::string label = op.id() + " (" + std::string(op.type()) + ")";
    const double spread =
        m.forward_time_us() > 0 ? 100.0 * m.forward_spread_us() / m.forward_time_us() : 0.0;
    const std::string ratio = analytic_ratio(analytic.get(), op, m);
    std::printf("%-28.28s %6lld %12.1f %12.1f %8.1f%% %12lld %10s\n", label.c_str(),
                static_cast<long long>(m.micro_batch()), m.forward_time_us(), m.backward_time_us(),
                spread, static_cast<long long>(m.activation_bytes()), ratio.c_str());
  }
  std::printf(
      "(spread: p90 - p10 of forward, as a share of the median; analytic: measured / "
      "the analytic model's estimate for '%s')\n",
      device_kind.c_str());
}

// The optimizer fits beside the analytic step of the same device kind: per tensor, and the
// bandwidth against the kind's memory bandwidth.
void print_optimizer_fits(const std::vector<graphpipe::v1::OptimizerFit>& fits,
                          const graphpipe::v1::Cluster& cluster) {
  std::printf("%-10s %14s %12s %12s\n", "optimizer", "per tensor_us", "GB/s", "analytic");
  for (const auto& f : fits) {
    std::string ratio = "-";
    if (cluster.has_device() && cluster.device().memory_bandwidth_bytes_per_s() > 0) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.2fx",
                    cluster.device().memory_bandwidth_bytes_per_s() / f.beta_bytes_per_s());
      ratio = buf;
    }
    std::printf("%-10s %14.2f %12.2f %12s\n", optimizer_name(f.optimizer()), f.alpha_us(),
                f.beta_bytes_per_s() / 1e9, ratio.c_str());
  }
  std::printf(
      "(one update of one parameter tensor: t = per tensor + bytes / GB/s, the fit over the sizes; "
      "analytic: measured / the analytic model's time (the device kind's memory bandwidth) for "
      "large tensors; a step is priced at the bandwidth measured at its whole state's size)\n");
}

// Writes the measurements to --out; an error when some kernel failed validation.
Status write_ops_profile(const std::string& out, OpProfileResult result,
                         std::vector<graphpipe::v1::OptimizerFit> optimizer_fits) {
  auto log = log::get("profile");
  for (const auto& r : result.rejected) {
    log->error("not recorded: {} ('{}') at micro-batch {}: {}", r.signature, r.op_id, r.micro_batch,
               r.reason);
  }
  graphpipe::v1::ProfileDB db;
  db.set_format_version(kProfileFormatVersion);
  for (auto& m : result.measurements) *db.add_ops() = std::move(m);
  for (auto& f : optimizer_fits) *db.add_optimizer_steps() = std::move(f);
  GP_RETURN_IF_ERROR(write_profile(out, db).with_context("--out " + out));
  log->info("wrote {} measurements of {} signatures and {} optimizer fits to {}", db.ops_size(),
            result.signatures, db.optimizer_steps_size(), out);
  if (!result.rejected.empty()) {
    return internal_error(std::to_string(result.rejected.size()) +
                          " kernel measurement(s) failed validation and were not recorded (see "
                          "above); the others are in " +
                          out);
  }
  return ok_status();
}

}  // namespace

Status run_ops(const OpsOptions& o) {
  GP_ASSIGN_OR_RETURN(auto model, model::load_model(o.model));
  auto built = model::Graph::build(model);
  if (!built.ok()) return built.status().with_context("--model '" + o.model + "'");
  const model::Graph& graph = *built;
  GP_ASSIGN_OR_RETURN(const exec::MatmulPrecision precision, exec::parse_precision(o.precision));
  GP_ASSIGN_OR_RETURN(const exec::Device* device, exec::find_device(o.device, precision));
  const bool cpu = device == &exec::cpu_device();
  if (cpu && precision != exec::MatmulPrecision::kFp32) {
    // A CPU profile labelled tf32/bf16 would claim a speed-up the CPU kernels do not have.
    return invalid_argument("--precision " + o.precision +
                            ": the CPU kernels compute in fp32 only; use it with --device cuda:N");
  }
  const CudaDescription cuda = cpu ? CudaDescription{} : describe_cuda(device->name());
  GP_ASSIGN_OR_RETURN(const RecordedKind kind, resolve_device_kind(o, *device, cpu, cuda));
  const int64_t host_memory = exec::query_host().memory_bytes;
  GP_RETURN_IF_ERROR(check_measure_flags(o, host_memory));
  exec::set_cpu_threads(o.cpu_threads);
  if (const auto& blas = exec::use_best_blas_kernels(); blas.changed) {
    log::get("profile")->info("OpenBLAS loaded its {} kernels for this CPU; measuring with {}",
                              blas.loaded, blas.running);
  }
  const OpProfileOptions opts =
      profile_options(o, kind.device_kind, precision, host_memory, *device, cpu, cuda);

  const auto signatures = distinct_signatures(graph);
  warn_opaque_ops(graph);
  log::get("profile")->info(
      "profiling {} operator signatures of '{}' on {} ({} GEMMs) as device kind '{}'",
      signatures.size(), o.model, device->name(), o.precision, kind.device_kind);
  ProgressBar bar("ops");
  auto result = profile_ops(graph, *device, opts, [&](const OpProfileProgress& p) {
    bar.update(p.done, p.total, *p.signature + " b=" + std::to_string(p.micro_batch));
  });
  bar.finish();
  if (!result.ok()) return result.status();
  print_measurements(graph, signatures, *result, kind.cluster, precision, kind.device_kind);
  // The step the executor takes after every iteration, once per parameter tensor.
  OptimizerProfileOptions step_opts;
  step_opts.measure = opts.measure;
  step_opts.device_kind = kind.device_kind;
  step_opts.provenance = opts.provenance;
  step_opts.timer = opts.timer;
  log::get("profile")->info("profiling the optimizer steps (SGD, momentum, Adam)");
  std::vector<graphpipe::v1::OptimizerFit> fits;
  if (auto measured = profile_optimizers(*device, step_opts); measured.ok()) {
    fits = std::move(measured).value();
    print_optimizer_fits(fits, kind.cluster);
  } else {
    // The operators' records are the long part of the work: they are written regardless.
    log::get("profile")->warn("no optimizer records (the planner prices the step analytically): {}",
                              measured.status().message());
  }
  return write_ops_profile(o.out, std::move(result).value(), std::move(fits));
}

}  // namespace gp::profile::cli
