// graphpipe-profile ops: measure every distinct operator of a model on one device.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "commands.h"
#include "gp/common/logging.h"
#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/exec/device.h"
#include "gp/exec/device_info.h"
#include "gp/graph/zoo.h"
#include "gp/profile/device_kind.h"
#include "gp/profile/op_profiler.h"
#include "gp/profile/profile_db.h"
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

}  // namespace

Status run_ops(const OpsOptions& o) {
  auto log = log::get("profile");
  GP_ASSIGN_OR_RETURN(auto model, graph::load_model(o.model));
  auto built = graph::Graph::build(model);
  if (!built.ok()) return built.status().with_context("--model '" + o.model + "'");
  const graph::Graph& graph = *built;
  GP_ASSIGN_OR_RETURN(const exec::MatmulPrecision precision, exec::parse_precision(o.precision));
  GP_ASSIGN_OR_RETURN(const exec::Device* device, exec::find_device(o.device, precision));
  const bool cpu = device == &exec::cpu_device();
  if (cpu && precision != exec::MatmulPrecision::kFp32) {
    // A CPU profile labelled tf32/bf16 would claim a speed-up the CPU kernels do not have.
    return invalid_argument("--precision " + o.precision +
                            ": the CPU kernels compute in fp32 only; use it with --device cuda:N");
  }
  const CudaDescription cuda = cpu ? CudaDescription{} : describe_cuda(device->name());

  // The device kind recorded is the cluster's, so that the planner finds these records when it
  // plans for that cluster.
  std::string cluster_name = o.cluster;
  if (cluster_name.empty() && cpu) cluster_name = "cpu-local";
  std::string device_kind = o.device_kind;
  if (!cpu && cluster_name.empty() && device_kind.empty() && !cuda.gpu_name.empty()) {
    const auto kind = gpu_device_kind(cuda.gpu_name, preset_clusters());
    if (!kind.cluster.empty()) {
      cluster_name = kind.cluster;
      log->info(
          "{} ({}): recording device kind '{}' of cluster preset '{}' (--device-kind or "
          "--cluster overrides)",
          device->name(), cuda.gpu_name, kind.device_kind, kind.cluster);
    } else {
      device_kind = kind.device_kind;
      log->warn(
          "no cluster preset has a device kind for {} ({}): recording device kind '{}'; plan "
          "with a cluster whose device is named so, or give --device-kind or --cluster",
          device->name(), cuda.gpu_name, device_kind);
    }
  }
  graphpipe::v1::Cluster cluster;
  if (!cluster_name.empty()) {
    auto loaded = cost::load_cluster(cluster_name);
    if (!loaded.ok()) return loaded.status().with_context("--cluster");
    cluster = *loaded;
    if (device_kind.empty()) device_kind = cluster.device().name();
  }
  if (device_kind.empty()) {
    return invalid_argument("--device-kind: give the device kind name (or --cluster) for " +
                            o.device);
  }
  if (o.cpu_threads < 1) {
    return invalid_argument("--cpu-threads = " + std::to_string(o.cpu_threads) + ", must be >= 1");
  }
  if (!(o.min_time_ms >= 0)) {
    return invalid_argument("--min-time-ms = " + std::to_string(o.min_time_ms) + ", must be >= 0");
  }
  if (o.warmup < 0) {
    return invalid_argument("--warmup = " + std::to_string(o.warmup) + ", must be >= 0");
  }
  // Buffers and the cache flusher live in host memory on every device.
  const int64_t host_memory = exec::query_host().memory_bytes;
  const double max_flush_mib = static_cast<double>(host_memory) / 2 / (1 << 20);
  if (!(o.flush_cache_mib < 0) && !(o.flush_cache_mib <= max_flush_mib)) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "--flush-cache-mib = %g, must be at most %.0f",
                  o.flush_cache_mib, max_flush_mib);
    return invalid_argument(std::string(buf) + " (half this host's memory)");
  }
  exec::set_cpu_threads(o.cpu_threads);

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
        make_provenance("cuda", cuda.gpu_name.empty() ? std::string(device->name()) : cuda.gpu_name,
                        cuda.driver_version,
                        "cuda runtime " + cuda.runtime_version + ", gemm inputs " + o.precision +
                            " (fp32 accumulation), kernels: " + cuda.kernel_libraries);
  }
  const auto signatures = distinct_signatures(graph);
  int opaque = 0;
  for (const auto& op : graph.ops()) opaque += op.type() == "opaque" ? 1 : 0;
  if (opaque > 0) {
    log->warn(
        "{} opaque op(s) (imported with --allow-opaque) have no kernel and are not measured; "
        "the planner estimates them from FLOPs",
        opaque);
  }
  log->info("profiling {} operator signatures of '{}' on {} ({} GEMMs) as device kind '{}'",
            signatures.size(), o.model, device->name(), o.precision, device_kind);
  ProgressBar bar("ops");
  auto result = profile_ops(graph, *device, opts, [&](const OpProfileProgress& p) {
    bar.update(p.done, p.total, *p.signature + " b=" + std::to_string(p.micro_batch));
  });
  bar.finish();
  if (!result.ok()) return result.status();

  // Measured against the analytic estimate for the same device kind: where they disagree is
  // where the planner's unprofiled answers would have been wrong.
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
  for (const auto& m : result->measurements) {
    const auto& op = graph.op(op_of[m.signature()]);
    const std::string label = op.id() + " (" + std::string(op.type()) + ")";
    const double spread =
        m.forward_time_us() > 0 ? 100.0 * m.forward_spread_us() / m.forward_time_us() : 0.0;
    std::string ratio = "-";
    if (analytic) {
      const auto est = analytic->op_time(op, m.micro_batch());
      const double total = est.forward_us + est.backward_us;
      if (total > 0) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.2fx",
                      (m.forward_time_us() + m.backward_time_us()) / total);
        ratio = buf;
      }
    }
    std::printf("%-28.28s %6lld %12.1f %12.1f %8.1f%% %12lld %10s\n", label.c_str(),
                static_cast<long long>(m.micro_batch()), m.forward_time_us(), m.backward_time_us(),
                spread, static_cast<long long>(m.activation_bytes()), ratio.c_str());
  }
  std::printf(
      "(spread: p90 - p10 of forward, as a share of the median; analytic: measured / "
      "the analytic model's estimate for '%s')\n",
      device_kind.c_str());
  for (const auto& r : result->rejected) {
    log->error("not recorded: {} ('{}') at micro-batch {}: {}", r.signature, r.op_id, r.micro_batch,
               r.reason);
  }

  graphpipe::v1::ProfileDB db;
  db.set_format_version(kProfileFormatVersion);
  for (auto& m : result->measurements) *db.add_ops() = std::move(m);
  GP_RETURN_IF_ERROR(write_profile(o.out, db).with_context("--out " + o.out));
  log->info("wrote {} measurements of {} signatures to {}", db.ops_size(), result->signatures,
            o.out);
  if (!result->rejected.empty()) {
    return internal_error(std::to_string(result->rejected.size()) +
                          " kernel measurement(s) failed validation and were not recorded (see "
                          "above); the others are in " +
                          o.out);
  }
  return ok_status();
}

}  // namespace gp::profile::cli
