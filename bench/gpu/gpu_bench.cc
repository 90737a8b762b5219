// GPU benchmarks: GEMM throughput through the linear kernel against the device's peak, and one
// training step of a zoo model through the reference trainer. Both run on any device (the CPU
// too, to try them without a GPU). bench/gpu/run.sh puts them beside PyTorch eager.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "gp/exec/device.h"
#include "gp/exec/device_info.h"
#include "gp/exec/reference_trainer.h"
#include "gp/model/builder.h"
#include "gp/model/zoo.h"

namespace {

using gp::exec::Device;
using gp::exec::DeviceBuffer;
using gp::exec::MatmulPrecision;
using Clock = std::chrono::steady_clock;

// Dense tensor-core peaks (TFLOP/s) of the GPUs we run on, from NVIDIA's datasheets (SXM parts).
double peak_tflops(const std::string& device_name, MatmulPrecision p) {
  struct Peak {
    const char* name;
    double fp32, tf32, bf16;
  };
  static const Peak kPeaks[] = {
      {"H200", 67, 494.7, 989.4}, {"H100", 67, 494.7, 989.4}, {"A100", 19.5, 156, 312}};
  for (const auto& k : kPeaks) {
    if (device_name.find(k.name) == std::string::npos) continue;
    return p == MatmulPrecision::kFp32 ? k.fp32 : p == MatmulPrecision::kTf32 ? k.tf32 : k.bf16;
  }
  return 0;
}

std::string device_model(const std::string& device) {
  if (!device.starts_with("cuda:")) return "cpu";
  const int index = std::stoi(device.substr(5));
  for (const auto& d : gp::exec::query_cuda().devices) {
    if (d.index == index) return d.name;
  }
  return device;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

gp::Status fill(const Device& dev, const DeviceBuffer& b, float value) {
  std::vector<float> host(b.bytes() / sizeof(float), value);
  return dev.copy_from_host(b.data(), host.data(), b.bytes());
}

// y[m, n] = x[m, k] W[n, k]^T through the linear kernel: 2 m n k flops per call.
gp::Status bench_gemm(const std::string& device, MatmulPrecision p, int64_t size, int reps) {
  GP_ASSIGN_OR_RETURN(const Device* dev, gp::exec::find_device(device, p));
  gp::model::GraphBuilder b("gemm", "");
  auto y = b.linear("fc", b.input("x", {size}), size, /*bias=*/false);
  b.add_loss(b.mse_loss("loss", y, b.input("t", {size})));
  GP_ASSIGN_OR_RETURN(auto graph, gp::model::Graph::build(b.finish()));
  const auto& op = graph.op(graph.index_of("fc"));
  GP_ASSIGN_OR_RETURN(auto kernel, dev->make_kernel(op));
  const auto bytes = static_cast<size_t>(size * size) * sizeof(float);
  GP_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::create(*dev, bytes));
  GP_ASSIGN_OR_RETURN(DeviceBuffer w, DeviceBuffer::create(*dev, bytes));
  GP_ASSIGN_OR_RETURN(DeviceBuffer out, DeviceBuffer::create(*dev, bytes));
  GP_RETURN_IF_ERROR(fill(*dev, x, 0.5f));
  GP_RETURN_IF_ERROR(fill(*dev, w, 0.25f));
  const std::vector<gp::exec::TensorView> in = {{x.data(), size}}, outs = {{out.data(), size}};
  const std::vector<float*> params = {w.f()};
  gp::exec::OpArgs a;
  a.batch = size;
  a.inputs = in;
  a.outputs = outs;
  a.params = params;
  std::vector<double> times;
  for (int r = 0; r < reps + 3; ++r) {
    const auto t0 = Clock::now();
    kernel->forward(a);
    GP_RETURN_IF_ERROR(dev->synchronize());
    if (r >= 3) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double tflops = 2.0 * size * size * size / median(times) / 1e12;
  const double peak = peak_tflops(device_model(device), p);
  std::printf("gemm %s %s m=n=k=%lld: %.1f TFLOP/s", device.c_str(),
              std::string(gp::exec::precision_name(p)).c_str(), static_cast<long long>(size),
              tflops);
  if (peak > 0) {
    std::printf(" = %.0f%% of the %.0f TFLOP/s peak\n", 100 * tflops / peak, peak);
  } else {
    std::printf(" (peak unknown for %s)\n", device_model(device).c_str());
  }
  return gp::ok_status();
}

gp::Status bench_step(const std::string& device, MatmulPrecision p, const std::string& model,
                      int64_t batch, int steps) {
  GP_ASSIGN_OR_RETURN(const Device* dev, gp::exec::find_device(device, p));
  GP_ASSIGN_OR_RETURN(auto model_graph, gp::model::load_model(model));
  GP_ASSIGN_OR_RETURN(auto graph, gp::model::Graph::build(model_graph));
  graphpipe::v1::TrainingConfig training;
  training.set_learning_rate(0.01);
  GP_ASSIGN_OR_RETURN(auto trainer,
                      gp::exec::ReferenceTrainer::create(graph, batch, 0, training, *dev));
  std::vector<double> times;
  for (int s = 0; s < steps + 2; ++s) {
    GP_ASSIGN_OR_RETURN(const auto m, trainer->run_iteration(s));
    if (s >= 2) times.push_back(m.time_s);
  }
  const double ms = 1000 * median(times);
  std::printf("step %s %s model=%s batch=%lld: %.2f ms, %.1f samples/s\n", device.c_str(),
              std::string(gp::exec::precision_name(p)).c_str(), model.c_str(),
              static_cast<long long>(batch), ms, 1000.0 * static_cast<double>(batch) / ms);
  return gp::ok_status();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "GPU benchmarks: GEMM throughput against the device's peak, and one training "
      "step of a zoo model (compare with bench/gpu/torch_step.py)"};
  std::string device = "cuda:0", precision = "fp32", model = "zoo:mmt?branches=1";
  int64_t size = 8192, batch = 8;
  int reps = 10;
  app.add_option("--device", device, "cpu or cuda:N")->capture_default_str();
  app.add_option("--precision", precision, "GEMM input precision: fp32, tf32 or bf16")
      ->capture_default_str();
  auto* gemm = app.add_subcommand("gemm", "square GEMM through the linear kernel");
  gemm->add_option("--size", size, "m = n = k")->capture_default_str()->check(CLI::Range(1, 65536));
  gemm->add_option("--repetitions", reps, "timed calls (median)")->capture_default_str();
  auto* step = app.add_subcommand("step", "one training step (forward, backward, SGD) of a model");
  step->add_option("--model", model, "zoo:NAME[?k=v&...] or a model file")->capture_default_str();
  step->add_option("--batch", batch, "mini-batch")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  step->add_option("--steps", reps, "timed steps (median)")->capture_default_str();
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  if (reps < 1) {
    std::fprintf(stderr, "gp_gpu_bench: --repetitions/--steps = %d, must be >= 1\n", reps);
    return 2;
  }
  auto p = gp::exec::parse_precision(precision);
  if (!p.ok()) {
    std::fprintf(stderr, "gp_gpu_bench: %s\n", p.status().message().c_str());
    return 2;
  }
  const gp::Status s = gemm->parsed() ? bench_gemm(device, *p, size, reps)
                                      : bench_step(device, *p, model, batch, reps);
  if (!s.ok()) {
    std::fprintf(stderr, "gp_gpu_bench: %s\n", s.to_string().c_str());
    return gp::exit_code_for(s);
  }
  return 0;
}
