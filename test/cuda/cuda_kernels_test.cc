// CUDA kernels against the CPU reference: every op configuration of the CPU gradient cases (at
// batch 1, 2 and 3) and larger shapes that take the kernels' multi-block paths, at each GEMM
// precision. Outputs, input gradients (accumulated onto non-zero values, or skipped when null)
// and parameter gradients must match within a normwise relative error per precision.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../support/op_cases.h"
#include "gp/exec/device.h"

namespace {

using gp::exec::Device;
using gp::exec::DeviceBuffer;
using gp::exec::MatmulPrecision;
using gp::exec::OpArgs;
using gp::exec::TensorView;
using gp::testing::GradCase;
using gp::testing::Harness;

const Device& cuda(MatmulPrecision p) {
  auto d = gp::exec::find_device("cuda:0", p);
  INFO(d.status().to_string());
  REQUIRE(d.ok());
  return **d;
}

// Normwise relative error allowed against the fp32 CPU reference. TF32 keeps 10 mantissa bits
// and bf16 7, so one rounding of a GEMM input is ~5e-4 and ~4e-3 relative; chains of GEMMs
// (attention) compound it a few times over.
double tolerance(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::kTf32:
      return 2e-2;
    case MatmulPrecision::kBf16:
      return 6e-2;
    case MatmulPrecision::kFp32:
      break;
  }
  return 1e-4;
}

DeviceBuffer upload(const Device& dev, const void* data, size_t bytes) {
  auto b = DeviceBuffer::create(dev, bytes);
  REQUIRE(b.ok());
  REQUIRE(dev.copy_from_host(b->data(), data, bytes).ok());
  return std::move(b).value();
}

template <typename T>
DeviceBuffer upload(const Device& dev, const std::vector<T>& v) {
  return upload(dev, v.data(), v.size() * sizeof(T));
}

std::vector<float> download(const Device& dev, const DeviceBuffer& b, size_t n) {
  std::vector<float> v(n);
  const gp::Status s = dev.copy_to_host(v.data(), b.data(), n * sizeof(float));
  INFO(s.to_string());
  REQUIRE(s.ok());
  return v;
}

// ||got - want|| / ||want|| (absolute when want is ~0); NaN stays NaN so that it fails.
double normwise_error(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-6);
}

// `scale` > 0 replaces ||want|| as the denominator (gradients that are zero in exact arithmetic).
void check_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                 const std::string& what, double scale = 0) {
  double err = normwise_error(got, want);
  if (scale > 0) {
    double diff = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double d = static_cast<double>(got[i]) - want[i];
      diff += d * d;
    }
    err = std::sqrt(diff) / scale;
  }
  size_t worst = 0;
  double worst_abs = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(a <= worst_abs)) worst_abs = a, worst = i;
  }
  INFO(what << ": normwise relative error " << err << " (tolerance " << tol << "); worst element "
            << worst << ": " << (got.empty() ? 0.0f : got[worst]) << " vs CPU "
            << (want.empty() ? 0.0f : want[worst]));
  CHECK(err <= tol);
}

// Runs the harness's op on the CPU and on `dev` from the same inputs and the same non-zero
// starting gradients (backward accumulates), skipping the input gradients in `null_grads`, and
// compares everything the kernels write.
void compare_with_cpu(Harness& h, const Device& dev, double tol,
                      const std::set<size_t>& null_grads = {}) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  h.zero_grads(null_grads);
  for (auto& g : h.gin) {
    for (float& v : g) v = u(rng);
  }
  for (auto& g : h.gparams) {
    for (float& v : g) v = u(rng);
  }
  const auto gin0 = h.gin;
  const auto gparams0 = h.gparams;

  auto kernel = dev.make_kernel(h.op());
  INFO(kernel.status().to_string());
  REQUIRE(kernel.ok());
  std::vector<DeviceBuffer> in, gin, params, gparams;
  std::vector<TensorView> in_views, gin_views;
  std::vector<float*> param_ptrs, grad_ptrs;
  for (size_t i = 0; i < h.fin.size(); ++i) {
    const auto per_sample = gp::model::num_elements(h.op().input_specs[i]);
    in.push_back(h.fin[i].empty() ? upload(dev, h.iin[i]) : upload(dev, h.fin[i]));
    in_views.push_back({in.back().data(), per_sample});
    gin.push_back(gin0[i].empty() ? DeviceBuffer() : upload(dev, gin0[i]));
    gin_views.push_back({gin.back().data(), per_sample});
  }
  for (size_t p = 0; p < h.params.size(); ++p) {
    params.push_back(upload(dev, h.params[p]));
    param_ptrs.push_back(params.back().f());
    gparams.push_back(upload(dev, gparams0[p]));
    grad_ptrs.push_back(gparams.back().f());
  }
  // NaN-filled output and scratch: a kernel that reads what it never wrote shows up as NaN.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  DeviceBuffer out = upload(dev, std::vector<float>(h.out.size(), nan));
  DeviceBuffer saved = upload(
      dev,
      std::vector<float>(static_cast<size_t>(h.batch * (*kernel)->saved_floats_per_sample()), nan));
  const std::vector<float> nan_workspace(
      static_cast<size_t>(h.batch * (*kernel)->workspace_floats_per_sample()), nan);
  DeviceBuffer workspace = upload(dev, nan_workspace);
  DeviceBuffer gout = upload(dev, h.gout);
  const std::vector<TensorView> out_views = {
      {out.data(), static_cast<int64_t>(h.gout.size()) / h.batch}};
  const std::vector<TensorView> gout_views = {{gout.data(), out_views[0].per_sample}};
  OpArgs a;
  a.batch = h.batch;
  a.inputs = in_views;
  a.outputs = out_views;
  a.params = param_ptrs;
  a.saved = saved.f();
  a.workspace = workspace.f();
  (*kernel)->forward(a);
  // Nothing survives in the workspace from forward to backward.
  if (!nan_workspace.empty()) {
    REQUIRE(dev.copy_from_host(workspace.data(), nan_workspace.data(),
                               nan_workspace.size() * sizeof(float))
                .ok());
  }
  a.grad_outputs = gout_views;
  a.grad_inputs = gin_views;
  a.param_grads = grad_ptrs;
  (*kernel)->backward(a);
  const gp::Status synced = dev.synchronize();
  INFO(synced.to_string());
  REQUIRE(synced.ok());

  h.forward();
  h.backward();
  check_close(download(dev, out, h.out.size()), h.out, tol, "output");
  for (size_t i = 0; i < h.gin.size(); ++i) {
    if (h.gin[i].empty()) continue;
    check_close(download(dev, gin[i], h.gin[i].size()), h.gin[i], tol,
                "gradient of input " + std::to_string(i));
  }
  // Attention's key bias shifts each row of scores by a constant, which softmax ignores: its
  // gradient is zero but for rounding noise of the large terms that cancel, so it is measured
  // against the size of the op's other parameter gradients.
  double grad_scale = 0;
  for (size_t p = 0; p < h.gparams.size(); ++p) {
    double n = 0;
    for (size_t i = 0; i < h.gparams[p].size(); ++i) {
      const double d = static_cast<double>(h.gparams[p][i]) - gparams0[p][i];
      n += d * d;
    }
    grad_scale = std::max(grad_scale, std::sqrt(n));
  }
  for (size_t p = 0; p < h.gparams.size(); ++p) {
    const std::string& name = h.op().proto->params(p).name();
    const bool zero_in_exact_arithmetic =
        h.op().type() == "multi_head_attention" && name == "k_bias";
    check_close(download(dev, gparams[p], h.gparams[p].size()), h.gparams[p], tol,
                "gradient of parameter " + name, zero_in_exact_arithmetic ? grad_scale : 0);
  }
}

using gp::model::GraphBuilder;
using gp::model::TensorRef;
using gp::testing::ids;
using gp::testing::ids_below;
using gp::testing::op_case;
using gp::testing::x;

// Weights scaled by 1 / sqrt(fan-in) as an initialiser would: uniform [-1, 1] weights on wide
// inputs saturate attention's softmax, leaving only rounding noise to compare.
void unsaturated(Harness& h) {
  const auto fan_in =
      static_cast<float>(h.op().input_specs[0].shape(h.op().input_specs[0].shape_size() - 1));
  for (auto& p : h.params) {
    for (float& v : p) v /= std::sqrt(fan_in);
  }
}

// Shapes past one block, one warp's row or one GEMM tile.
std::vector<GradCase> large_cases() {
  using gp::testing::distinct;
  using gp::testing::loss_case;
  return {
      op_case("linear 512 -> 384 on 16 rows, fused gelu", {16, 384},
              [](GraphBuilder& b) {
                return b.linear("op", x(b, {16, 512}), 384, true, "gelu");
              }),
      op_case("linear 300 -> 37, fused relu", {37},
              [](GraphBuilder& b) { return b.linear("op", x(b, {300}), 37, true, "relu"); }),
      op_case("multi_head_attention, 64 positions, 128 wide, 4 heads", {64, 128}, unsaturated,
              [](GraphBuilder& b) {
                return b.attention("op", x(b, {64, 128}), 4);
              }),
      op_case("multi_head_attention, 300 positions, 32 wide, 2 heads", {300, 32}, unsaturated,
              [](GraphBuilder& b) {
                return b.attention("op", x(b, {300, 32}), 2);
              }),
      op_case("layer_norm of 1000-wide rows", {32, 1000},
              [](GraphBuilder& b) {
                return b.layer_norm("op", x(b, {32, 1000}));
              }),
      op_case("softmax of 2000-wide rows", {8, 2000},
              [](GraphBuilder& b) {
                return b.softmax("op", x(b, {8, 2000}));
              }),
      op_case("softmax of 513-wide rows", {3, 513},
              [](GraphBuilder& b) {
                return b.softmax("op", x(b, {3, 513}));
              }),
      op_case("embedding_bag of 1000 rows, 64 wide, 8 bags of 4", {8, 64}, ids_below(0, 1000),
              [](GraphBuilder& b) {
                return b.embedding_bag("op", ids(b, {8, 4}), 1000, 64);
              }),
      op_case("embedding of 300 rows, 32 wide, padding_idx 7 (read, never trained)", {16, 32},
              ids_below(0, 300),
              [](GraphBuilder& b) {
                auto y = b.embedding("op", ids(b, {16}), 300, 32);
                gp::testing::set_op_attr(b, "op", "padding_idx", int64_t{7});
                return y;
              }),
      op_case("matmul [4, 64, 32] x [4, 32, 48]", {4, 64, 48},
              [](GraphBuilder& b) {
                return b.matmul("op", x(b, {4, 64, 32}, "a"), x(b, {4, 32, 48}, "b"));
              }),
      op_case("transpose [8, 16, 32] -> [32, 8, 16]", {32, 8, 16},
              [](GraphBuilder& b) {
                return b.transpose("op", x(b, {8, 16, 32}), {2, 0, 1});
              }),
      op_case("conv2d 8 -> 16 channels, 3x3, padding 1, on 16x16", {16, 16, 16},
              [](GraphBuilder& b) {
                return b.conv2d("op", x(b, {8, 16, 16}), 16, {3, 3}, {1, 1}, {1, 1});
              }),
      op_case("max_pool2d 3x3, stride 2, padding 1, on 8x15x15", {8, 8, 8}, distinct,
              [](GraphBuilder& b) {
                return b.max_pool2d("op", x(b, {8, 15, 15}), {3, 3}, {2, 2}, {1, 1});
              }),
      op_case("avg_pool2d 3x3, stride 1, padding 1, on 8x15x15", {8, 15, 15},
              [](GraphBuilder& b) {
                return b.avg_pool2d("op", x(b, {8, 15, 15}), {3, 3}, {1, 1}, {1, 1}, false);
              }),
      op_case("batch_norm on [16, 8, 8]", {16, 8, 8},
              [](GraphBuilder& b) {
                return b.batch_norm("op", x(b, {16, 8, 8}));
              }),
      loss_case(
          "softmax_cross_entropy over 1000 classes, 16 positions", ids_below(1, 1000),
          [](GraphBuilder& b) {
            return b.softmax_cross_entropy("op", x(b, {16, 1000}, "z"), ids(b, {16}, "labels"));
          }),
      loss_case(
          "mse_loss of 600 values", [](Harness&) {},
          [](GraphBuilder& b) { return b.mse_loss("op", x(b, {600}, "p"), x(b, {600}, "t")); }),
  };
}

constexpr MatmulPrecision kPrecisions[] = {MatmulPrecision::kFp32, MatmulPrecision::kTf32,
                                           MatmulPrecision::kBf16};

}  // namespace

TEST_CASE("every catalogue op matches the CPU reference at batch 1, 2 and 3") {
  // GP_OP_CASES=a,b runs only the cases whose names contain one of the words (the emulator is
  // slow; see scripts/cuda-emu-test.sh).
  const char* only = std::getenv("GP_OP_CASES");
  auto selected = [only](const std::string& name) {
    if (only == nullptr || *only == 0) return true;
    std::string list = only;
    for (size_t start = 0; start <= list.size();) {
      const size_t end = std::min(list.find(',', start), list.size());
      const std::string word = list.substr(start, end - start);
      if (!word.empty() && name.find(word) != std::string::npos) return true;
      start = end + 1;
    }
    return false;
  };
  int ran = 0;
  for (MatmulPrecision p : kPrecisions) {
    const Device& dev = cuda(p);
    for (const GradCase& c : gp::testing::grad_cases()) {
      if (!selected(c.name)) continue;
      ++ran;
      for (int64_t batch : {1, 2, 3}) {
        INFO(c.name << ", batch " << batch << ", " << gp::exec::precision_name(p));
        Harness h = gp::testing::make_harness(c.model(), batch);
        c.prepare(h);
        compare_with_cpu(h, dev, tolerance(p));
      }
    }
  }
  CHECK(ran > 0);
}

// Defined by the CUDA emulator only (tools/cuda-emu/): library calls that computed something.
extern "C" long emu_cublaslt_matmul_calls() __attribute__((weak));
extern "C" long emu_cudnn_calls() __attribute__((weak));

TEST_CASE(
    "ops with a library form run on cuBLASLt or cuDNN by default and by hand with "
    "GP_CUDA_KERNELS=hand, both like the CPU") {
  // Case name -> whether the library can take it (cuDNN rounds pooled sizes down: no ceil_mode).
  const std::pair<const char*, bool> cases[] = {
      {"linear with bias", true},
      {"linear with bias, fused gelu, 8 outputs", true},
      {"linear with bias, fused relu", true},
      {"linear without bias, fused gelu", false},  // 3 outputs: gelu's aux needs a multiple of 8
      {"conv2d stride 2, padding 1", true},
      {"conv2d 3x3, 2 groups, padding 1", true},
      {"conv2d 2x3 kernel, stride [1, 2], padding [0, 1], no bias", true},
      {"max_pool2d 3x3, stride 2, padding 1", false},  // ties: the CPU's first maximum
      {"avg_pool2d 3x3, stride 2, padding 1, count_include_pad 1", true},
      {"avg_pool2d 3x3, stride 2, padding 1, count_include_pad 0", true},
      {"max_pool2d 2x2, stride 2, ceil_mode 1 on 5x5", false},
      {"batch_norm on [C, H, W]", true},
      {"batch_norm on [C], epsilon 0.1", true}};
  auto library_calls = [] {
    return (emu_cublaslt_matmul_calls ? emu_cublaslt_matmul_calls() : 0) +
           (emu_cudnn_calls ? emu_cudnn_calls() : 0);
  };
  const char* before = std::getenv("GP_CUDA_KERNELS");
  const std::string saved_env = before != nullptr ? before : "";
  const std::vector<GradCase> all = gp::testing::grad_cases();
  for (const char* mode : {"auto", "library", "hand"}) {
    setenv("GP_CUDA_KERNELS", mode, 1);
    for (MatmulPrecision p : kPrecisions) {
      const Device& dev = cuda(p);
      for (const auto& [name, has_library_form] : cases) {
        const auto c =
            std::find_if(all.begin(), all.end(), [&](const GradCase& g) { return g.name == name; });
        REQUIRE(c != all.end());
        INFO(mode << " kernels, " << name << ", " << gp::exec::precision_name(p));
        Harness h = gp::testing::make_harness(c->model(), 2);
        c->prepare(h);
        const long calls = library_calls();
        compare_with_cpu(h, dev, tolerance(p));
        // Under the emulator: the library ran exactly when it was asked for and can do the op.
        if (emu_cublaslt_matmul_calls && emu_cudnn_calls) {
          const bool library = std::string(mode) != "hand" && has_library_form;
          CHECK((library_calls() > calls) == library);
        }
      }
    }
  }
  setenv("GP_CUDA_KERNELS", "fast", 1);
  auto refused = gp::exec::find_device("cuda:0", MatmulPrecision::kFp32);
  if (saved_env.empty()) {
    unsetenv("GP_CUDA_KERNELS");
  } else {
    setenv("GP_CUDA_KERNELS", saved_env.c_str(), 1);
  }
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("GP_CUDA_KERNELS = 'fast'") != std::string::npos);
}

TEST_CASE("every CUDA kernel keeps and uses no more bytes per sample than the catalogue") {
  std::vector<GradCase> cases = gp::testing::grad_cases();
  for (GradCase& c : large_cases()) cases.push_back(std::move(c));
  for (const GradCase& c : cases) {
    auto g = gp::model::Graph::build(c.model());
    REQUIRE(g.ok());
    const auto& node = g->op(g->index_of("op"));
    for (MatmulPrecision p : kPrecisions) {
      auto kernel = cuda(p).make_kernel(node);
      REQUIRE(kernel.ok());
      INFO(c.name << ", " << gp::exec::precision_name(p) << ": saved "
                  << (*kernel)->saved_floats_per_sample() << " floats, workspace "
                  << (*kernel)->workspace_floats_per_sample() << " floats; catalogue "
                  << node.cost.saved_bytes << " and " << node.cost.workspace_bytes << " bytes");
      CHECK(static_cast<double>((*kernel)->saved_floats_per_sample() * 4) <= node.cost.saved_bytes);
      CHECK(static_cast<double>((*kernel)->workspace_floats_per_sample() * 4) <=
            node.cost.workspace_bytes);
    }
  }
}

TEST_CASE("large shapes match the CPU reference") {
  for (MatmulPrecision p : kPrecisions) {
    const Device& dev = cuda(p);
    for (const GradCase& c : large_cases()) {
      for (int64_t batch : {1, 4}) {
        INFO(c.name << ", batch " << batch << ", " << gp::exec::precision_name(p));
        Harness h = gp::testing::make_harness(c.model(), batch);
        c.prepare(h);
        compare_with_cpu(h, dev, tolerance(p));
      }
    }
  }
}

TEST_CASE("a null input gradient is skipped and the other gradients still match") {
  const Device& dev = cuda(MatmulPrecision::kFp32);
  for (const GradCase& c : gp::testing::grad_cases()) {
    Harness h = gp::testing::make_harness(c.model(), 2);
    c.prepare(h);
    for (size_t i = 0; i < h.fin.size(); ++i) {
      if (h.fin[i].empty()) continue;
      INFO(c.name << ", input " << i << " without gradient");
      compare_with_cpu(h, dev, tolerance(MatmulPrecision::kFp32), {i});
      break;
    }
  }
}

TEST_CASE("device memory round-trips through copies and fill_zero") {
  const Device& dev = cuda(MatmulPrecision::kFp32);
  CHECK_FALSE(dev.host_memory());
  CHECK(dev.name() == "cuda:0");
  std::vector<float> v(1 << 20);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  DeviceBuffer b = upload(dev, v);
  CHECK(download(dev, b, v.size()) == v);
  REQUIRE(dev.fill_zero(b.data(), b.bytes() / 2).ok());
  const auto back = download(dev, b, v.size());
  CHECK(back[v.size() / 2 - 1] == 0.0f);
  CHECK(back[v.size() / 2] == v[v.size() / 2]);
  auto empty = DeviceBuffer::create(dev, 0);
  REQUIRE(empty.ok());
  CHECK(empty->data() == nullptr);
}

TEST_CASE("on-device copies and gradient accumulation give the CPU's floats") {
  const Device& dev = cuda(MatmulPrecision::kFp32);
  const size_t n = 300000;  // more than one grid-stride pass of small grids
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = 1.0f / static_cast<float>(i + 1);
    b[i] = static_cast<float>(i % 97) * 0.37f - 11.0f;
  }
  DeviceBuffer da = upload(dev, a), db = upload(dev, b);
  REQUIRE(dev.accumulate(da.f(), db.f(), static_cast<int64_t>(n)).ok());
  std::vector<float> expected = a;
  REQUIRE(
      gp::exec::cpu_device().accumulate(expected.data(), b.data(), static_cast<int64_t>(n)).ok());
  CHECK(download(dev, da, n) == expected);
  // A copy between two device buffers, offset inside both.
  REQUIRE(dev.copy_on_device(db.f() + 10, da.f() + 20, 1000 * sizeof(float)).ok());
  const auto copied = download(dev, db, n);
  CHECK(copied[9] == b[9]);
  CHECK(std::equal(copied.begin() + 10, copied.begin() + 1010, expected.begin() + 20));
  CHECK(copied[1010] == b[1010]);
  REQUIRE(dev.synchronize().ok());
}

TEST_CASE("an allocation larger than the device fails with the size and leaves it usable") {
  const Device& dev = cuda(MatmulPrecision::kFp32);
  const size_t huge = size_t{1} << 50;
  auto b = DeviceBuffer::create(dev, huge);
  REQUIRE_FALSE(b.ok());
  CHECK(b.status().code() == gp::StatusCode::kResourceExhausted);
  CHECK_THAT(b.status().message(), Catch::Contains(std::to_string(huge)));
  auto ok = DeviceBuffer::create(dev, 1 << 20);
  CHECK(ok.ok());
  CHECK(dev.synchronize().ok());
}

TEST_CASE("a device index past the last GPU is refused with the number of GPUs") {
  auto d = gp::exec::find_device("cuda:99");
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().code() == gp::StatusCode::kUnavailable);
  CHECK_THAT(d.status().message(), Catch::Contains("CUDA device(s)"));
  auto bad = gp::exec::find_device("cuda:x");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == gp::StatusCode::kInvalidArgument);
}

TEST_CASE("each precision is its own device and the same one is returned again") {
  const Device& fp32 = cuda(MatmulPrecision::kFp32);
  const Device& bf16 = cuda(MatmulPrecision::kBf16);
  CHECK(&fp32 != &bf16);
  CHECK(&cuda(MatmulPrecision::kFp32) == &fp32);
}
