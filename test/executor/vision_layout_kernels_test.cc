// CPU kernels of the layout ops (matmul, scale, transpose, reshape) and the vision ops (conv2d,
// pooling, batch norm): forward values computed by hand or by naive loops, and the opaque op's
// refusal. Their gradients are checked in cpu_kernels_test.cc with every other op's.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../support/kernel_harness.h"
#include "../support/models.h"
#include "../support/op_cases.h"
#include "cpu/direct_conv_wide.h"
#include "gp/exec/init.h"
#include "gp/exec/op_kernel.h"
#include "gp/exec/stage_runner.h"

namespace {

using gp::model::GraphBuilder;
using gp::testing::Harness;
using gp::testing::make_harness;
using gp::testing::with_loss;

}  // namespace

TEST_CASE("matmul matches a naive loop per sample and leading index, operands transposed or not") {
  const bool ta = GENERATE(false, true);
  const bool tb = GENERATE(false, true);
  const double alpha = ta || tb ? -0.75 : 1.0;
  CAPTURE(ta, tb);
  // op(a) [3, 4], op(b) [4, 5], two matrices per sample.
  GraphBuilder b("m", "");
  auto y = b.matmul(
      "op", b.input("a", ta ? std::vector<int64_t>{2, 4, 3} : std::vector<int64_t>{2, 3, 4}),
      b.input("b", tb ? std::vector<int64_t>{2, 5, 4} : std::vector<int64_t>{2, 4, 5}));
  auto& op = *b.model().mutable_ops(b.model().ops_size() - 1);
  gp::model::set_attr(op, "transpose_a", int64_t{ta});
  gp::model::set_attr(op, "transpose_b", int64_t{tb});
  gp::model::set_attr(op, "alpha", alpha);
  Harness h = make_harness(with_loss(b, y, {2, 3, 5}), 3, 13);
  h.forward();
  for (int s = 0; s < 3; ++s) {
    for (int l = 0; l < 2; ++l) {
      const float* a = h.fin[0].data() + (s * 2 + l) * 12;
      const float* bm = h.fin[1].data() + (s * 2 + l) * 20;
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 5; ++j) {
          double want = 0;
          for (int k = 0; k < 4; ++k) {
            const float aik = ta ? a[k * 3 + i] : a[i * 4 + k];
            const float bkj = tb ? bm[j * 4 + k] : bm[k * 5 + j];
            want += static_cast<double>(aik) * bkj;
          }
          CHECK(h.out[(s * 2 + l) * 15 + i * 5 + j] == Approx(alpha * want).margin(1e-5));
        }
      }
    }
  }
}

TEST_CASE("scale multiplies every element by the factor") {
  GraphBuilder b("m", "");
  Harness h = make_harness(with_loss(b, b.scale("op", b.input("x", {3}), 0.125), {3}));
  h.fin[0] = {8, -16, 1, 0, 2, 4};
  h.forward();
  CHECK(h.out == std::vector<float>{1, -2, 0.125f, 0, 0.25f, 0.5f});
}

TEST_CASE("transpose moves element (i, j, k) to its permuted position") {
  GraphBuilder b("m", "");
  // x [2, 3, 4], perm [2, 0, 1]: y [4, 2, 3] with y[k, i, j] = x[i, j, k].
  Harness h =
      make_harness(with_loss(b, b.transpose("op", b.input("x", {2, 3, 4}), {2, 0, 1}), {4, 2, 3}));
  for (size_t e = 0; e < h.fin[0].size(); ++e) h.fin[0][e] = static_cast<float>(e);
  h.forward();
  for (int s = 0; s < 2; ++s) {
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 3; ++j) {
        for (int k = 0; k < 4; ++k) {
          CHECK(h.out[s * 24 + (k * 2 + i) * 3 + j] == h.fin[0][s * 24 + (i * 3 + j) * 4 + k]);
        }
      }
    }
  }
}

TEST_CASE(
    "a windowed transpose takes its slice of the permuted input, and its three windows' "
    "gradients, the first fresh, make the whole transpose's") {
  // x [4, 3, 2, 5] as timm's qkv [N, 3, H, D], perm [1, 2, 0, 3]: window w of axis 0 is
  // y[h, n, d] = x[n, w, h, d], q, k or v [H, N, D].
  const std::vector<int64_t> shape{4, 3, 2, 5};
  std::vector<Harness> windows;
  for (int64_t w = 0; w < 3; ++w) {
    GraphBuilder b("m", "");
    windows.push_back(make_harness(with_loss(
        b, gp::testing::transpose_window(b, b.input("x", shape), {1, 2, 0, 3}, 0, w, w + 1),
        {1, 2, 4, 5})));
  }
  const size_t per_sample = 120;
  std::vector<float> dx(2 * per_sample, std::numeric_limits<float>::quiet_NaN());
  for (int64_t w = 0; w < 3; ++w) {
    Harness& h = windows[static_cast<size_t>(w)];
    for (size_t e = 0; e < h.fin[0].size(); ++e) h.fin[0][e] = static_cast<float>(e);
    h.forward();
    for (int s = 0; s < 2; ++s) {
      for (int hd = 0; hd < 2; ++hd) {
        for (int n = 0; n < 4; ++n) {
          for (int d = 0; d < 5; ++d) {
            CHECK(h.out[s * 40 + (hd * 4 + n) * 5 + d] ==
                  h.fin[0][s * per_sample + ((n * 3 + w) * 2 + hd) * 5 + d]);
          }
        }
      }
    }
    // dy = 1000 (w + 1) + its position: dx at x's position must say which window and where.
    for (size_t e = 0; e < h.gout.size(); ++e) {
      h.gout[e] = static_cast<float>(1000 * (w + 1) + static_cast<int64_t>(e));
    }
    h.gin = {dx};
    h.backward(w == 0 ? 1 : 0);  // the first reader's gradient is fresh, over NaNs
    dx = h.gin[0];
  }
  for (int s = 0; s < 2; ++s) {
    for (int n = 0; n < 4; ++n) {
      for (int w = 0; w < 3; ++w) {
        for (int hd = 0; hd < 2; ++hd) {
          for (int d = 0; d < 5; ++d) {
            CHECK(dx[s * per_sample + ((n * 3 + w) * 2 + hd) * 5 + d] ==
                  static_cast<float>(1000 * (w + 1) + s * 40 + (hd * 4 + n) * 5 + d));
          }
        }
      }
    }
  }
}

TEST_CASE("reshape keeps the elements in order") {
  GraphBuilder b("m", "");
  Harness h =
      make_harness(with_loss(b, b.reshape("op", b.input("x", {2, 3}), {3, 1, 2}), {3, 1, 2}));
  h.fin[0] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  h.forward();
  CHECK(h.out == h.fin[0]);
}

TEST_CASE("conv2d of a known 3x3 image, with stride and padding") {
  // One channel x = [[1, 2, 3], [4, 5, 6], [7, 8, 9]], 2x2 kernel [[1, 0], [0, -1]], bias 0.5:
  // y[i, j] = x[i, j] - x[i + 1, j + 1] + 0.5 = -3.5 everywhere.
  GraphBuilder b("m", "");
  Harness h =
      make_harness(with_loss(b, b.conv2d("op", b.input("x", {1, 3, 3}), 1, {2, 2}), {1, 2, 2}), 1);
  h.fin[0] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  h.params[0] = {1, 0, 0, -1};
  h.params[1] = {0.5f};
  h.forward();
  CHECK(h.out == std::vector<float>{-3.5f, -3.5f, -3.5f, -3.5f});

  // Two output channels, 3x3 kernel of ones (channel 0) and a centre tap (channel 1), stride 2,
  // padding 1: windows centred on (0, 0), (0, 2), (2, 0), (2, 2).
  GraphBuilder b2("m", "");
  auto y = b2.conv2d("op", b2.input("x", {1, 3, 3}), 2, {3, 3}, {2, 2}, {1, 1}, false);
  Harness c = make_harness(with_loss(b2, y, {2, 2, 2}), 1);
  REQUIRE(c.params.size() == 1);
  c.fin[0] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  c.params[0].assign(18, 0.0f);
  for (int k = 0; k < 9; ++k) c.params[0][k] = 1;
  c.params[0][9 + 4] = 1;
  c.forward();
  CHECK(c.out == std::vector<float>{1 + 2 + 4 + 5, 2 + 3 + 5 + 6, 4 + 5 + 7 + 8, 5 + 6 + 8 + 9,  //
                                    1, 3, 7, 9});
}

TEST_CASE("conv2d matches a naive loop over channels") {
  GraphBuilder b("m", "");
  auto y = b.conv2d("op", b.input("x", {3, 5, 6}), 4, {3, 2}, {2, 1}, {1, 0});
  Harness h = make_harness(with_loss(b, y, {4, 3, 5}), 2, 17);
  h.forward();
  for (int s = 0; s < 2; ++s) {
    for (int o = 0; o < 4; ++o) {
      for (int oh = 0; oh < 3; ++oh) {
        for (int ow = 0; ow < 5; ++ow) {
          double want = h.params[1][o];
          for (int c = 0; c < 3; ++c) {
            for (int i = 0; i < 3; ++i) {
              for (int j = 0; j < 2; ++j) {
                const int ih = oh * 2 - 1 + i, iw = ow + j;
                if (ih < 0 || ih >= 5) continue;
                want += static_cast<double>(h.params[0][((o * 3 + c) * 3 + i) * 2 + j]) *
                        h.fin[0][s * 90 + (c * 5 + ih) * 6 + iw];
              }
            }
          }
          CHECK(h.out[s * 60 + (o * 3 + oh) * 5 + ow] == Approx(want).margin(1e-5));
        }
      }
    }
  }
}

TEST_CASE("conv2d with stride 1 matches naive loops forward and backward at every width") {
  // Stride 1, one group: the direct path. Widths that are and are not multiples of its 16- and
  // 32-column runs, filter counts that do and do not fill its blocks of 4 and 8 (AVX-512),
  // kernels from 1x1 to 5x3 with
  // padding from none to kernel - 1; the input gradient written whole (fresh) and added.
  struct Shape {
    int64_t c, h, w, out, kh, kw, ph, pw;
  };
  for (const Shape& sh : {Shape{3, 5, 19, 6, 3, 3, 1, 1}, Shape{2, 4, 33, 5, 5, 3, 2, 1},
                          Shape{1, 3, 1, 1, 1, 1, 0, 0}, Shape{4, 7, 16, 4, 2, 2, 1, 1},
                          Shape{5, 6, 17, 9, 3, 1, 0, 0}, Shape{2, 2, 40, 3, 2, 3, 0, 2},
                          Shape{3, 3, 48, 17, 3, 3, 1, 1}, Shape{8, 2, 65, 8, 3, 3, 1, 1}}) {
    const int64_t ho = sh.h + 2 * sh.ph - sh.kh + 1, wo = sh.w + 2 * sh.pw - sh.kw + 1;
    INFO("x [" << sh.c << ", " << sh.h << ", " << sh.w << "], " << sh.out << " filters " << sh.kh
               << "x" << sh.kw << ", padding " << sh.ph << ", " << sh.pw);
    GraphBuilder b("m", "");
    auto y = b.conv2d("op", b.input("x", {sh.c, sh.h, sh.w}), sh.out, {sh.kh, sh.kw}, {1, 1},
                      {sh.ph, sh.pw});
    Harness h = make_harness(with_loss(b, y, {sh.out, ho, wo}), 2, 23);
    const auto& x = h.fin[0];
    const auto& wt = h.params[0];
    const int64_t in_n = sh.c * sh.h * sh.w, out_n = sh.out * ho * wo;
    // Calls f(s, o, oh, ow, c, ih, iw, weight index) for every term of every output.
    auto each_term = [&](auto&& f) {
      for (int64_t s = 0; s < 2; ++s) {
        for (int64_t o = 0; o < sh.out; ++o) {
          for (int64_t oh = 0; oh < ho; ++oh) {
            for (int64_t ow = 0; ow < wo; ++ow) {
              for (int64_t c = 0; c < sh.c; ++c) {
                for (int64_t i = 0; i < sh.kh; ++i) {
                  for (int64_t j = 0; j < sh.kw; ++j) {
                    const int64_t ih = oh - sh.ph + i, iw = ow - sh.pw + j;
                    if (ih < 0 || ih >= sh.h || iw < 0 || iw >= sh.w) continue;
                    f(s, o, oh, ow, c, ih, iw, ((o * sh.c + c) * sh.kh + i) * sh.kw + j);
                  }
                }
              }
            }
          }
        }
      }
    };
    std::vector<double> want_y(h.out.size()), want_dx(x.size()), want_dw(wt.size());
    std::vector<double> want_db(static_cast<size_t>(sh.out));
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t k = 0; k < out_n; ++k) {
        want_y[static_cast<size_t>(s * out_n + k)] =
            h.params[1][static_cast<size_t>(k / (ho * wo))];
        want_db[static_cast<size_t>(k / (ho * wo))] += h.gout[static_cast<size_t>(s * out_n + k)];
      }
    }
    each_term([&](int64_t s, int64_t o, int64_t oh, int64_t ow, int64_t c, int64_t ih, int64_t iw,
                  int64_t wi) {
      const size_t yi = static_cast<size_t>(s * out_n + (o * ho + oh) * wo + ow);
      const size_t xi = static_cast<size_t>(s * in_n + (c * sh.h + ih) * sh.w + iw);
      want_y[yi] += static_cast<double>(wt[static_cast<size_t>(wi)]) * x[xi];
      want_dx[xi] += static_cast<double>(wt[static_cast<size_t>(wi)]) * h.gout[yi];
      want_dw[static_cast<size_t>(wi)] += static_cast<double>(x[xi]) * h.gout[yi];
    });
    h.forward();
    for (size_t k = 0; k < want_y.size(); ++k) CHECK(h.out[k] == Approx(want_y[k]).margin(1e-5));
    for (const bool fresh : {true, false}) {
      h.zero_grads();
      // Written whole when fresh (NaNs must all go), else added to what is there (ones).
      std::fill(h.gin[0].begin(), h.gin[0].end(),
                fresh ? std::numeric_limits<float>::quiet_NaN() : 1.0f);
      REQUIRE(h.kernel->overwrites_grad_input(0));
      h.backward(fresh ? 1 : 0);
      for (size_t k = 0; k < want_dx.size(); ++k) {
        CHECK(h.gin[0][k] == Approx(want_dx[k] + (fresh ? 0.0 : 1.0)).margin(1e-5));
      }
      for (size_t k = 0; k < want_dw.size(); ++k) {
        CHECK(h.gparams[0][k] == Approx(want_dw[k]).margin(1e-4));
      }
      for (size_t k = 0; k < want_db.size(); ++k) {
        CHECK(h.gparams[1][k] == Approx(want_db[k]).margin(1e-4));
      }
    }
  }
}

TEST_CASE("max_pool2d picks each window's maximum and padding never wins") {
  GraphBuilder b("m", "");
  Harness h =
      make_harness(with_loss(b, b.max_pool2d("op", b.input("x", {1, 4, 4}), {2, 2}), {1, 2, 2}), 1);
  h.fin[0] = {1, 5, 2, 0,  //
              3, 4, 8, 1,  //
              9, 0, 6, 6,  //
              2, 1, 7, 3};
  h.forward();
  CHECK(h.out == std::vector<float>{5, 8, 9, 7});
  // The gradient goes to the winners only.
  h.zero_grads();
  h.gout = {1, 2, 3, 4};
  h.backward();
  CHECK(h.gin[0] == std::vector<float>{0, 1, 0, 0, 0, 0, 2, 0, 3, 0, 0, 0, 0, 0, 4, 0});

  // All negative with padding 1: a zero-padded cell would win if it counted.
  GraphBuilder b2("m", "");
  auto y = b2.max_pool2d("op", b2.input("x", {1, 3, 3}), {3, 3}, {2, 2}, {1, 1});
  Harness p = make_harness(with_loss(b2, y, {1, 2, 2}), 1);
  p.fin[0] = {-1, -2, -3, -4, -5, -6, -7, -8, -9};
  p.forward();
  CHECK(p.out == std::vector<float>{-1, -2, -4, -5});
}

TEST_CASE("avg_pool2d divides by kh*kw or by the unpadded cells") {
  for (bool include_pad : {true, false}) {
    DYNAMIC_SECTION("count_include_pad " << include_pad) {
      GraphBuilder b("m", "");
      auto y = b.avg_pool2d("op", b.input("x", {1, 3, 3}), {2, 2}, {2, 2}, {1, 1}, include_pad);
      Harness h = make_harness(with_loss(b, y, {1, 2, 2}), 1);
      h.fin[0] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
      h.forward();
      // Windows (padded by 1): {1}, {2, 3}, {4, 7}, {5, 6, 8, 9}.
      if (include_pad) {
        CHECK(h.out == std::vector<float>{0.25f, 1.25f, 2.75f, 7});
      } else {
        CHECK(h.out == std::vector<float>{1, 2.5f, 5.5f, 7});
      }
    }
  }
}

TEST_CASE("batch_norm gives every channel mean 0 and variance 1 over the batch, then gamma/beta") {
  GraphBuilder b("m", "");
  Harness h =
      make_harness(with_loss(b, b.batch_norm("op", b.input("x", {3, 2, 2})), {3, 2, 2}), 4, 23);
  for (size_t e = 0; e < h.fin[0].size(); ++e) {
    h.fin[0][e] = 10 * static_cast<float>((e / 4) % 3) + 3 * h.fin[0][e];  // per-channel means
  }
  h.params[0].assign(3, 1.0f);
  h.params[1].assign(3, 0.0f);
  h.forward();
  for (int c = 0; c < 3; ++c) {
    double mean = 0, var = 0;
    for (int s = 0; s < 4; ++s) {
      for (int i = 0; i < 4; ++i) mean += h.out[(s * 3 + c) * 4 + i] / 16.0;
    }
    for (int s = 0; s < 4; ++s) {
      for (int i = 0; i < 4; ++i) {
        const double d = h.out[(s * 3 + c) * 4 + i] - mean;
        var += d * d / 16;
      }
    }
    CHECK(mean == Approx(0).margin(1e-5));
    CHECK(var == Approx(1).epsilon(1e-3));  // eps 1e-5 against variances of about 3
  }
  const auto normalised = h.out;
  h.params[0] = {2, -1, 0.5f};
  h.params[1] = {3, 0, -1};
  h.forward();
  for (size_t k = 0; k < h.out.size(); ++k) {
    const size_t c = (k / 4) % 3;
    CHECK(h.out[k] == Approx(h.params[0][c] * normalised[k] + h.params[1][c]).margin(1e-5));
  }
}

TEST_CASE("make_cpu_kernel refuses an opaque op, naming it and its ONNX type") {
  GraphBuilder b("m", "");
  auto x = b.input("x", {4});
  auto y = b.opaque("odd", {x}, gp::model::make_spec({4}), "Mul", 4.0);
  b.add_loss(b.mse_loss("loss", y, b.input("t", {4})));
  gp::model::Graph g = gp::testing::build_graph(b.finish());
  auto k = gp::exec::make_cpu_kernel(g.op(g.index_of("odd")));
  REQUIRE_FALSE(k.ok());
  CHECK(k.status().code() == gp::StatusCode::kInvalidArgument);
  CHECK(k.status().message() ==
        "ops[1] 'odd' (opaque): ONNX operator Mul was imported as opaque (--allow-opaque) for "
        "planning only; it has no kernel and cannot be trained or profiled");
}

TEST_CASE("a small CNN of the new ops fits one mini-batch") {
  gp::model::Graph g = gp::testing::small_cnn(6, 4, 0.1);
  std::vector<int> ops(g.num_ops());
  for (int i = 0; i < g.num_ops(); ++i) ops[i] = i;
  graphpipe::v1::TrainingConfig adam;
  adam.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  adam.set_learning_rate(0.01);
  adam.set_seed(3);
  auto layout = gp::exec::layout_stage(g, ops);
  REQUIRE(layout.ok());
  auto runner =
      gp::exec::StageRunner::create(g, *layout, {.max_batch = 16, .slots = 1, .training = adam});
  REQUIRE(runner.ok());
  gp::exec::StageRunner& r = **runner;
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    r.zero_param_grads();
    r.forward(0, 16, /*iteration=*/0, 0);
    last = r.loss_sum(0) / 16;
    if (step == 0) first = last;
    r.begin_backward(0);
    r.backward(0, 1.0f / 16);
    r.optimizer_step(step + 1);
  }
  INFO("loss " << first << " -> " << last);
  CHECK(std::isfinite(last));
  CHECK(last < 0.2 * first);
}

TEST_CASE("conv2d weights start uniform in +-1/sqrt(C*kh*kw), batch_norm at gamma 1, beta 0") {
  GraphBuilder b("m", "");
  auto y = b.batch_norm("bn", b.conv2d("conv", b.input("x", {3, 6, 6}), 8, {3, 3}));
  b.add_loss(b.mse_loss("loss", y, b.input("t", {8, 4, 4})));
  gp::model::Graph g = gp::testing::build_graph(b.finish());
  const auto& conv = g.op(g.index_of("conv"));
  std::vector<float> w(8 * 27), bias(8, 1.0f);
  gp::exec::init_param(conv, 0, 5, w);
  gp::exec::init_param(conv, 1, 5, bias);
  float largest = 0;
  for (float v : w) largest = std::max(largest, std::abs(v));
  const float bound = 1.0f / std::sqrt(27.0f);
  CHECK(largest <= bound);
  CHECK(largest > 0.9f * bound);
  CHECK(bias == std::vector<float>(8, 0.0f));
  const auto& bn = g.op(g.index_of("bn"));
  std::vector<float> gamma(8), beta(8, 1.0f);
  gp::exec::init_param(bn, 0, 5, gamma);
  gp::exec::init_param(bn, 1, 5, beta);
  CHECK(gamma == std::vector<float>(8, 1.0f));
  CHECK(beta == std::vector<float>(8, 0.0f));
}

TEST_CASE("the AVX-512 row loop of the direct convolution sums each output in the fixed order") {
  // Each output is fma(w, x, acc) over (c, i, j) from zero, then + bias, then + what y held:
  // the order of the AVX2 loop, so a model gives the same bits on either kind of CPU.
  if (!gp::exec::cpu::wide_conv_supported()) {
    WARN("this CPU has no AVX-512: the AVX2 loop serves every convolution here");
    return;
  }
  using gp::exec::cpu::kWideBlock;
  const int64_t channels = 3, kh = 3, kw = 2, filters = 11, ho = 3, wo = 57;  // a 25-column tail
  const int64_t rows = ho + kh - 1, stride = 64 + kw - 1;  // >= round_up(wo, 32) + kw - 1
  const int64_t blocks = (filters + kWideBlock - 1) / kWideBlock;
  std::vector<float> xp(static_cast<size_t>(channels * rows * stride));
  std::vector<float> packed(static_cast<size_t>(blocks * kWideBlock * channels * kh * kw));
  std::vector<float> bias(static_cast<size_t>(filters));
  for (size_t k = 0; k < xp.size(); ++k) xp[k] = std::sin(0.7f * static_cast<float>(k));
  for (size_t k = 0; k < packed.size(); ++k) packed[k] = std::cos(1.3f * static_cast<float>(k));
  for (size_t k = 0; k < bias.size(); ++k) bias[k] = 0.1f * static_cast<float>(k);
  for (bool accumulate : {false, true}) {
    std::vector<float> y(static_cast<size_t>(filters * ho * wo), 0.25f);
    std::vector<float> want = y;
    gp::exec::cpu::conv_rows_wide(xp.data(), channels, rows, stride, packed.data(), filters, kh, kw,
                                  bias.data(), y.data(), ho, wo, accumulate);
    for (int64_t o = 0; o < filters; ++o) {
      for (int64_t r = 0; r < ho; ++r) {
        for (int64_t col = 0; col < wo; ++col) {
          float acc = 0.0f;
          for (int64_t c = 0; c < channels; ++c) {
            for (int64_t i = 0; i < kh; ++i) {
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t tap = (c * kh + i) * kw + j;
                const float w = packed[static_cast<size_t>(
                    ((o / kWideBlock) * channels * kh * kw + tap) * kWideBlock + o % kWideBlock)];
                acc = std::fma(w, xp[static_cast<size_t>((c * rows + r + i) * stride + col + j)],
                               acc);
              }
            }
          }
          float& out = want[static_cast<size_t>((o * ho + r) * wo + col)];
          out = accumulate ? out + (acc + bias[static_cast<size_t>(o)])
                           : acc + bias[static_cast<size_t>(o)];
        }
      }
    }
    INFO("accumulate " << accumulate);
    CHECK(y == want);
  }
}
