// CPU reference kernels: forward values computed by hand, every gradient against central finite
// differences, gradient accumulation, skipped input gradients and the factory's errors.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../support/kernel_harness.h"
#include "../support/models.h"
#include "../support/op_cases.h"
#include "cpu/vec_math.h"
#include "gp/exec/op_kernel.h"
#include "gp/model/builder.h"
#include "gp/model/graph.h"

namespace {

using gp::exec::OpArgs;
using gp::model::GraphBuilder;
using gp::model::ModelGraph;
using gp::model::TensorRef;
using gp::testing::grad_cases;
using gp::testing::GradCase;
using gp::testing::Harness;
using gp::testing::kInt64;
using gp::testing::make_harness;
using gp::testing::set_op_attr;
using gp::testing::with_loss;

// Max-abs-normalised error of `analytic` against central differences of the objective over
// `values` (an input or parameter buffer of h).
void check_against_fd(Harness& h, std::vector<float>& values, const std::vector<float>& analytic,
                      const std::string& what) {
  constexpr float kEps = 1e-3f;
  REQUIRE(analytic.size() == values.size());
  double scale = 0, err = 0;
  size_t worst = 0;
  for (size_t k = 0; k < values.size(); ++k) {
    const float orig = values[k];
    values[k] = orig + kEps;
    const double up = h.objective();
    const double step_up = static_cast<double>(values[k]);
    values[k] = orig - kEps;
    const double down = h.objective();
    const double step = step_up - static_cast<double>(values[k]);  // the float step taken
    values[k] = orig;
    const double numeric = (up - down) / step;
    scale = std::max(scale, std::abs(numeric));
    const double e = std::abs(numeric - static_cast<double>(analytic[k]));
    if (e > err) err = e, worst = k;
  }
  INFO(what << ": max |numeric grad| " << scale << ", max error " << err << " at element " << worst
            << " (analytic " << analytic[worst] << ")");
  if (scale < 1e-4) {
    // Mathematically zero (e.g. attention's k_bias: softmax ignores a per-row constant score
    // shift): the analytic gradient must vanish too.
    CHECK(err < 1e-4);
  } else {
    CHECK(err <= 1e-2 * scale);
  }
}

// Forward, backward with the objective's weights, then every float input and parameter gradient
// against finite differences.
void check_gradients(Harness& h) {
  h.forward();
  if (!h.int_out) {
    for (float v : h.out) REQUIRE(std::isfinite(v));
  }
  h.zero_grads();
  h.backward();
  const auto gin = h.gin;
  const auto gparams = h.gparams;
  for (size_t i = 0; i < h.fin.size(); ++i) {
    if (!h.fin[i].empty())
      check_against_fd(h, h.fin[i], gin[i], "inputs[" + std::to_string(i) + "]");
  }
  for (size_t p = 0; p < h.params.size(); ++p) {
    check_against_fd(h, h.params[p], gparams[p], "param " + h.op().proto->params(p).name());
  }
}

Harness prepared(const GradCase& c, int64_t batch = 2) {
  Harness h = make_harness(c.model(), batch);
  c.prepare(h);
  return h;
}

// The case's harness after a forward and one backward into zeroed gradients.
Harness backward_once(const GradCase& c) {
  Harness h = prepared(c);
  h.forward();
  h.zero_grads();
  h.backward();
  return h;
}

}  // namespace

TEST_CASE("every catalogue op type except input and opaque has a gradient case") {
  std::set<std::string> covered;
  for (const auto& c : grad_cases()) {
    const ModelGraph model = c.model();
    for (const auto& op : model.ops()) {
      if (op.id() == "op") covered.insert(op.type());
    }
  }
  for (const auto& info : gp::model::op_catalogue()) {
    if (info.is_input || info.type == "opaque") continue;  // opaque has no kernel
    INFO(info.type);
    CHECK(covered.count(std::string(info.type)) == 1);
  }
}

TEST_CASE("every kernel keeps and uses no more bytes per sample than the catalogue plans for") {
  // The planner budgets OpCost::saved_bytes and workspace_bytes; a kernel asking for more would
  // let plans that "fit" run out of memory.
  for (const auto& c : grad_cases()) {
    auto g = gp::model::Graph::build(c.model());
    REQUIRE(g.ok());
    const auto& node = g->op(g->index_of("op"));
    auto kernel = gp::exec::make_cpu_kernel(node);
    REQUIRE(kernel.ok());
    INFO(c.name << ": saved " << (*kernel)->saved_floats_per_sample() << " floats, workspace "
                << (*kernel)->workspace_floats_per_sample() << " floats; catalogue "
                << node.cost.saved_bytes << " and " << node.cost.workspace_bytes << " bytes");
    CHECK(static_cast<double>((*kernel)->saved_floats_per_sample() * 4) <= node.cost.saved_bytes);
    CHECK(static_cast<double>((*kernel)->workspace_floats_per_sample() * 4) <=
          node.cost.workspace_bytes);
  }
}

TEST_CASE("input and parameter gradients match central finite differences") {
  for (const auto& c : grad_cases()) {
    for (int64_t batch : {int64_t{2}, int64_t{3}}) {
      DYNAMIC_SECTION(c.name << ", batch " << batch) {
        Harness h = prepared(c, batch);
        check_gradients(h);
      }
    }
  }
}

TEST_CASE("backward accumulates: a second call doubles every gradient") {
  for (const auto& c : grad_cases()) {
    DYNAMIC_SECTION(c.name) {
      Harness h = backward_once(c);
      const auto once_in = h.gin;
      const auto once_p = h.gparams;
      h.backward();
      double largest = 0;
      auto twice = [&](const std::vector<float>& one, const std::vector<float>& two) {
        REQUIRE(one.size() == two.size());
        for (size_t k = 0; k < one.size(); ++k) {
          largest = std::max(largest, static_cast<double>(std::abs(one[k])));
          CHECK(two[k] == Approx(2.0 * one[k]).margin(1e-6));
        }
      };
      for (size_t i = 0; i < once_in.size(); ++i) twice(once_in[i], h.gin[i]);
      for (size_t p = 0; p < once_p.size(); ++p) twice(once_p[p], h.gparams[p]);
      // compare, constant and cast pass no gradient to their inputs at all.
      const std::string type = h.op().proto->type();
      if (type == "compare" || type == "constant" || type == "cast") {
        CHECK(largest == 0);
      } else {
        CHECK(largest > 1e-3);
      }
    }
  }
}

TEST_CASE("a kernel that overwrites a fresh input gradient writes it whole, as zero plus it") {
  int overwriting = 0;
  for (const auto& c : grad_cases()) {
    INFO(c.name);
    Harness h = backward_once(c);
    const auto added = h.gin;
    const auto added_p = h.gparams;
    // The buffers it may overwrite hold garbage (NaN): none may survive, and every value must
    // be what adding into zeros gave, bit for bit (the runner relies on it).
    uint64_t fresh = 0;
    h.zero_grads();
    for (size_t i = 0; i < h.gin.size(); ++i) {
      if (h.gin[i].empty() || !h.kernel->overwrites_grad_input(i)) continue;
      fresh |= uint64_t{1} << i;
      std::fill(h.gin[i].begin(), h.gin[i].end(), std::numeric_limits<float>::quiet_NaN());
    }
    overwriting += fresh != 0 ? 1 : 0;
    h.backward(fresh);
    for (size_t i = 0; i < h.gin.size(); ++i) {
      INFO("inputs[" << i << "]");
      REQUIRE(h.gin[i].size() == added[i].size());
      for (size_t k = 0; k < added[i].size(); ++k) {
        CHECK(std::memcmp(&h.gin[i][k], &added[i][k], sizeof(float)) == 0);
      }
    }
    CHECK(h.gparams == added_p);
  }
  CHECK(overwriting >= 10);  // linear, matmul, reshape, transpose, add, gelu, softmax, ...
}

TEST_CASE("the vectorised erf and exact GELU are within 4e-7 of erf and its derivative") {
  std::vector<float> x;
  for (double v = -7.0; v <= 7.0; v += 1.0 / 1024) x.push_back(static_cast<float>(v));
  std::vector<float> erf(x.size()), gelu(x.size()), dgelu(x.size()), ones(x.size(), 1.0f);
  gp::exec::cpu::vec::erf(x.data(), erf.data(), static_cast<int64_t>(x.size()));
  gp::exec::cpu::vec::gelu_exact(x.data(), gelu.data(), static_cast<int64_t>(x.size()));
  gp::exec::cpu::vec::gelu_exact_backward(x.data(), ones.data(), dgelu.data(),
                                          static_cast<int64_t>(x.size()), false);
  double worst_erf = 0, worst_gelu = 0, worst_dgelu = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    const double v = x[k], cdf = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
    worst_erf = std::max(worst_erf, std::abs(erf[k] - std::erf(v)));
    // GELU's error is erf's scaled by |x| / 2, plus rounding of the result.
    worst_gelu = std::max(worst_gelu, std::abs(gelu[k] - v * cdf) / std::max(1.0, std::abs(v)));
    worst_dgelu = std::max(worst_dgelu, std::abs(dgelu[k] - (cdf + v * pdf)));
  }
  CHECK(worst_erf < 4e-7);  // measured 3.2e-7: a few ulp near +-1
  CHECK(worst_gelu < 4e-7);
  CHECK(worst_dgelu < 4e-7);
}

TEST_CASE("a null input gradient is skipped and the other gradients are unchanged") {
  for (const auto& c : grad_cases()) {
    Harness h = prepared(c);
    h.forward();
    h.zero_grads();
    h.backward();
    const auto full_in = h.gin;
    const auto full_p = h.gparams;
    for (size_t skip = 0; skip < h.fin.size(); ++skip) {
      if (h.fin[skip].empty()) continue;
      DYNAMIC_SECTION(c.name << ", inputs[" << skip << "] null") {
        h.zero_grads({skip});
        h.backward();
        CHECK(h.gin[skip].empty());
        for (size_t i = 0; i < h.gin.size(); ++i) {
          if (i != skip) CHECK(h.gin[i] == full_in[i]);
        }
        CHECK(h.gparams == full_p);
      }
    }
  }
}

TEST_CASE("cast to int64 truncates toward zero, NaN to 0 and beyond int64 to its ends") {
  GraphBuilder b("m", "");
  Harness h = make_harness(
      with_loss(b, b.embedding("emb", b.cast("op", b.input("x", {6}), "int64"), 4, 2), {6, 2}), 1);
  REQUIRE(h.int_out);
  const float inf = std::numeric_limits<float>::infinity();
  h.fin[0] = {std::nanf(""), inf, -inf, 1e30f, -2.7f, 3.9f};
  h.forward();
  std::vector<int64_t> ids(6);
  std::memcpy(ids.data(), h.out.data(), sizeof(int64_t) * ids.size());
  const int64_t most = std::numeric_limits<int64_t>::max();
  const int64_t least = std::numeric_limits<int64_t>::min();
  CHECK(ids == std::vector<int64_t>{0, most, least, most, -2, 3});
}

TEST_CASE("linear computes relu(x W^T + b) with weight [out, in]") {
  GraphBuilder b("m", "");
  Harness h = make_harness(with_loss(b, b.linear("op", b.input("x", {2}), 3, true, "relu"), {3}));
  h.fin[0] = {1, 2, -1, 0};              // two samples
  h.params[0] = {1, -1, 2, 0.5f, 0, 1};  // rows: out features
  h.params[1] = {0.5f, 0, 1};
  h.forward();
  // Sample 0: z = [1-2+0.5, 2+1+0, 0+2+1] = [-0.5, 3, 3]; sample 1: [-1+0.5, -2, 1].
  CHECK(h.out == std::vector<float>{0, 3, 3, 0, 0, 1});
  CHECK(h.kernel->saved_floats_per_sample() == 0);      // relu: its output tells the derivative
  CHECK(h.kernel->workspace_floats_per_sample() == 3);  // and backward's dZ is scratch
}

TEST_CASE("softmax rows sum to one, match exp(x)/sum exp(x) and survive large logits") {
  GraphBuilder b("m", "");
  Harness h = make_harness(with_loss(b, b.softmax("op", b.input("x", {2, 2})), {2, 2}));
  const float ln3 = std::log(3.0f);
  h.fin[0] = {0, ln3, 1000, 1000 + ln3, 5, 5, -3, 2};
  h.forward();
  for (int r = 0; r < 4; ++r) CHECK(h.out[2 * r] + h.out[2 * r + 1] == Approx(1.0f));
  CHECK(h.out[0] == Approx(0.25f));
  CHECK(h.out[1] == Approx(0.75f));
  CHECK(h.out[2] == Approx(0.25f).epsilon(1e-3));  // no overflow at 1000
  CHECK(h.out[4] == Approx(0.5f));
  CHECK(h.out[7] == Approx(1.0 / (1.0 + std::exp(-5.0))));
}

TEST_CASE("layer_norm gives zero mean and unit variance, then applies gamma and beta") {
  GraphBuilder b("m", "");
  Harness h = make_harness(with_loss(b, b.layer_norm("op", b.input("x", {8})), {8}));
  for (float& x : h.fin[0]) x = 10 + 4 * x;  // a large mean and spread
  h.params[0].assign(8, 1.0f);
  h.params[1].assign(8, 0.0f);
  h.forward();
  for (int s = 0; s < 2; ++s) {
    double mean = 0, var = 0;
    for (int j = 0; j < 8; ++j) mean += h.out[s * 8 + j] / 8.0;
    for (int j = 0; j < 8; ++j) var += (h.out[s * 8 + j] - mean) * (h.out[s * 8 + j] - mean) / 8;
    CHECK(mean == Approx(0).margin(1e-5));
    CHECK(var == Approx(1).epsilon(1e-4));
  }
  const auto normalised = h.out;
  h.params[0].assign(8, 2.0f);
  h.params[1].assign(8, 3.0f);
  h.forward();
  for (size_t k = 0; k < h.out.size(); ++k) CHECK(h.out[k] == Approx(2 * normalised[k] + 3));
}

// The element-wise and row kernels run 8 floats at a time with a padded last chunk and their own
// exp: every row length up to two chunks and then some, and the whole argument range, against
// double precision.
// gelu (exact or not) of 2 x 1003 inputs evenly from -12 to 12 (1003: not a multiple of the vector
// width), run forward and backward with dy = 1.
Harness gelu_from_minus_12_to_12(bool exact) {
  constexpr int64_t kN = 1003;
  GraphBuilder b("m", "");
  Harness h = make_harness(with_loss(b, b.gelu("op", b.input("x", {kN}), exact), {kN}), 2);
  for (size_t k = 0; k < h.fin[0].size(); ++k) {
    h.fin[0][k] = -12.0f + 24.0f * static_cast<float>(k) / static_cast<float>(h.fin[0].size());
  }
  h.forward();
  h.zero_grads();
  h.gout.assign(h.out.size(), 1.0f);
  h.backward();
  return h;
}

TEST_CASE("gelu and its gradient match the double-precision tanh formula from -12 to 12") {
  Harness h = gelu_from_minus_12_to_12(/*exact=*/false);
  double worst_y = 0, worst_d = 0;
  for (size_t k = 0; k < h.out.size(); ++k) {
    // 0.5 (1 + tanh(u)) written as 1 / (1 + exp(-2u)), which in double too keeps the digits that
    // 1 + tanh(u) cancels where tanh(u) is near -1; 1 - tanh(u)^2 = 4 s (1 - s).
    const double x = h.fin[0][k];
    const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    const double sg = 1 / (1 + std::exp(-2 * u));
    const double y = x * sg;
    const double d = sg + 2 * x * sg * (1 - sg) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
    // Relative in y down to where float's exp underflows (2u < -87.3 gives 0), loosened by the
    // float rounding of u, which exp turns into a relative error of 2^-24 |2u| in the tail;
    // absolute in the O(1) derivative.
    const double tol = 1e-6 + 1.2e-7 * std::max(0.0, -2 * u);
    if (2 * u > -87) worst_y = std::max(worst_y, std::abs(h.out[k] - y) / std::abs(y) / tol);
    if (2 * u < -88) CHECK(h.out[k] == 0.0f);
    worst_d = std::max(worst_d, std::abs(h.gin[0][k] - d));
  }
  CHECK(worst_y <= 1);  // in units of tol
  CHECK(worst_d < 1e-6);
}

TEST_CASE("exact gelu (approximate = none) and its gradient match x Phi(x) in double precision") {
  Harness h = gelu_from_minus_12_to_12(/*exact=*/true);
  double worst_y = 0, worst_d = 0, worst_tanh = 0;
  for (size_t k = 0; k < h.out.size(); ++k) {
    const double x = h.fin[0][k];
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    const double y = x * cdf;
    const double d = cdf + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    // Absolute: for x below about -5 torch's float formula (1 + erf) cancels to 0 as ours does.
    worst_y = std::max(worst_y, std::abs(h.out[k] - y) / std::max(1.0, std::abs(y)));
    worst_d = std::max(worst_d, std::abs(h.gin[0][k] - d));
    const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    worst_tanh = std::max(worst_tanh, std::abs(x / (1 + std::exp(-2 * u)) - y));
  }
  CHECK(worst_y < 1e-6);
  CHECK(worst_d < 1e-6);
  CHECK(worst_tanh > 1e-4);  // the approximation is a different function: this test can tell
}

TEST_CASE("sigmoid matches 1 / (1 + exp(-x)) in double precision from -80 to 80") {
  GraphBuilder b("m", "");
  Harness h = make_harness(with_loss(b, b.sigmoid("op", b.input("x", {1001})), {1001}), 1);
  for (size_t k = 0; k < h.fin[0].size(); ++k) h.fin[0][k] = -80.0f + 0.16f * static_cast<float>(k);
  h.forward();
  for (size_t k = 0; k < h.out.size(); ++k) {
    const double want = 1 / (1 + std::exp(-static_cast<double>(h.fin[0][k])));
    CHECK(h.out[k] == Approx(want).epsilon(1e-6).margin(1e-37));
  }
}

TEST_CASE("softmax and layer_norm match double precision at every row length from 1 to 19") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t n = 1; n <= 19; ++n) {
    DYNAMIC_SECTION("rows of " << n) {
      GraphBuilder b("m", "");
      b.add_loss(b.mse_loss("l1", b.softmax("op", b.input("x", {3, n})), b.input("t", {3, n})));
      Harness sm = make_harness(b.finish(), 2, 11);
      for (float& x : sm.fin[0]) x *= 30;  // scores spread wide enough to exercise exp
      sm.forward();
      sm.zero_grads();
      sm.gout.resize(sm.out.size());
      for (float& g : sm.gout) g = u(rng);
      sm.backward();
      for (int64_t r = 0; r < 6; ++r) {
        const float* x = sm.fin[0].data() + r * n;
        double mx = x[0], sum = 0, dot = 0;
        for (int64_t j = 1; j < n; ++j) mx = std::max(mx, static_cast<double>(x[j]));
        for (int64_t j = 0; j < n; ++j) sum += std::exp(x[j] - mx);
        std::vector<double> y(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) y[j] = std::exp(x[j] - mx) / sum;
        for (int64_t j = 0; j < n; ++j) dot += y[j] * sm.gout[r * n + j];
        for (int64_t j = 0; j < n; ++j) {
          // Float rounds x - max to within 2^-24 |x - max|, which exp turns into that relative
          // error: the tolerance grows with the distance from the row's maximum.
          const double tol = (1e-6 + 1.2e-7 * (mx - x[j])) * y[j];
          CHECK(std::abs(sm.out[r * n + j] - y[j]) <= tol);
          CHECK(sm.gin[0][r * n + j] ==
                Approx(y[j] * (sm.gout[r * n + j] - dot)).epsilon(1e-5).margin(1e-6));
        }
      }

      GraphBuilder b2("m", "");
      b2.add_loss(
          b2.mse_loss("l1", b2.layer_norm("op", b2.input("x", {3, n})), b2.input("t", {3, n})));
      const ModelGraph ln_model = b2.finish();
      Harness ln = make_harness(ln_model, 2, 13);
      for (float& x : ln.fin[0]) x = 50 + 3 * x;  // a large mean: two passes keep the variance
      ln.forward();
      for (int64_t r = 0; r < 6; ++r) {
        const float* x = ln.fin[0].data() + r * n;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < n; ++j) mean += x[j] / static_cast<double>(n);
        for (int64_t j = 0; j < n; ++j) var += (x[j] - mean) * (x[j] - mean) / n;
        for (int64_t j = 0; j < n; ++j) {
          const double want =
              (x[j] - mean) / std::sqrt(var + 1e-5) * ln.params[0][j] + ln.params[1][j];
          CHECK(ln.out[r * n + j] == Approx(want).epsilon(1e-4).margin(1e-4));
        }
      }
      // Its backward (the padded lanes feed the row sums and dgamma, dbeta) against differences;
      // not for rows of 1 or 2, whose normalised values are 0 or +-1 whatever x is (the
      // gradient to x vanishes and differences see only rounding).
      if (n > 2) {
        Harness ln_fd = make_harness(ln_model, 2, 17);
        check_gradients(ln_fd);
      }
    }
  }
}

TEST_CASE("concat and slice copy elements exactly") {
  GraphBuilder b("m", "");
  auto y = b.concat("op", {b.input("a", {2, 1}), b.input("b", {2, 2})}, 1);
  Harness h = make_harness(with_loss(b, y, {2, 3}));
  h.fin[0] = {1, 2, 10, 20};                // per sample [[1], [2]]
  h.fin[1] = {3, 4, 5, 6, 30, 40, 50, 60};  // per sample [[3, 4], [5, 6]]
  h.forward();
  CHECK(h.out == std::vector<float>{1, 3, 4, 2, 5, 6, 10, 30, 40, 20, 50, 60});

  GraphBuilder b2("m", "");
  Harness s = make_harness(with_loss(b2, b2.slice("op", b2.input("x", {2, 4}), 1, 1, 3), {2, 2}));
  s.fin[0] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  s.forward();
  CHECK(s.out == std::vector<float>{1, 2, 5, 6, 9, 10, 13, 14});
}

TEST_CASE("slice and concat move int64 ids exactly (ids[:, f] of a per-field input)") {
  GraphBuilder b("m", "");
  auto ids = b.input("ids", {3, 2}, gp::testing::kInt64);
  auto col = b.slice("col", ids, 1, 1, 2);       // [3, 1]
  auto both = b.concat("both", {col, ids}, 1);   // [3, 3]
  auto emb = b.embedding("emb", both, 1000, 2);  // [3, 3, 2]
  b.add_loss(b.mse_loss("loss", emb, b.input("t", {3, 3, 2})));
  const auto g = gp::testing::build_graph(b.finish());
  auto run = [&](const std::string& id, std::vector<std::vector<int64_t>*> in, int64_t out_n) {
    const auto& node = g.op(g.index_of(id));
    auto k = gp::exec::make_cpu_kernel(node);
    REQUIRE(k.ok());
    std::vector<int64_t> out(static_cast<size_t>(2 * out_n), -7);
    std::vector<gp::exec::TensorView> ins, outs{{out.data(), out_n}};
    for (size_t i = 0; i < in.size(); ++i) {
      ins.push_back({in[i]->data(), gp::model::num_elements(node.input_specs[i])});
    }
    OpArgs a;
    a.batch = 2;
    a.inputs = ins;
    a.outputs = outs;
    (*k)->forward(a);
    return out;
  };
  // Two samples of [3, 2] ids, values far above 2^24 so that a float copy would change them.
  std::vector<int64_t> x = {100000001, 100000002, 100000003, 100000004, 100000005, 100000006,
                            200000001, 200000002, 200000003, 200000004, 200000005, 200000006};
  auto c = run("col", {&x}, 3);
  CHECK(c ==
        std::vector<int64_t>{100000002, 100000004, 100000006, 200000002, 200000004, 200000006});
  auto j = run("both", {&c, &x}, 9);
  CHECK(j == std::vector<int64_t>{100000002, 100000001, 100000002, 100000004, 100000003, 100000004,
                                  100000006, 100000005, 100000006, 200000002, 200000001, 200000002,
                                  200000004, 200000003, 200000004, 200000006, 200000005,
                                  200000006});
}

TEST_CASE("mse_loss and softmax_cross_entropy give per-sample losses computed by hand") {
  GraphBuilder b("m", "");
  b.add_loss(b.mse_loss("op", b.input("p", {3}), b.input("t", {3})));
  Harness m = make_harness(b.finish());
  m.fin[0] = {1, 2, 3, 0, 0, 0};
  m.fin[1] = {1, 0, 0, 0, 0, 0.5f};
  m.forward();
  CHECK(m.out[0] == Approx(13.0 / 3));
  CHECK(m.out[1] == Approx(0.25 / 3));

  GraphBuilder b2("m", "");
  auto labels = b2.input("labels", {2}, kInt64);
  b2.add_loss(b2.softmax_cross_entropy("op", b2.input("z", {2, 2}), labels));
  Harness x = make_harness(b2.finish());
  const float ln3 = std::log(3.0f);
  x.fin[0] = {0, ln3, 0, ln3, 7, 7, 0, 0};  // softmax rows [1/4, 3/4] twice, then [1/2, 1/2]
  x.iin[1] = {1, 0, 0, 1};
  x.forward();
  CHECK(x.out[0] == Approx((-std::log(0.75) - std::log(0.25)) / 2));  // mean over positions
  CHECK(x.out[1] == Approx(std::log(2.0)));
}

TEST_CASE("mse_loss over ~98k outputs per sample is within 1e-7 of the float64 loss") {
  constexpr int64_t n = 98304;  // an image-sized output, where a float sum drifts ~1e-5
  GraphBuilder b("m", "");
  b.add_loss(b.mse_loss("op", b.input("p", {n}), b.input("t", {n})));
  Harness m = make_harness(b.finish(), 1);
  double exact = 0;
  for (int64_t i = 0; i < n; ++i) {
    m.fin[0][i] = 0.5f + 0.001f * static_cast<float>(i % 997);
    m.fin[1][i] = -0.25f;
    const double d = static_cast<double>(m.fin[0][i]) - static_cast<double>(m.fin[1][i]);
    exact += d * d;
  }
  exact /= static_cast<double>(n);
  m.forward();
  CHECK(std::abs(m.out[0] - exact) / exact < 1e-7);
}

TEST_CASE("embedding_bag sums (or averages) the rows its ids name") {
  for (bool mean : {false, true}) {
    GraphBuilder b("m", "");
    auto y = b.embedding_bag("op", b.input("ids", {3}, kInt64), 4, 2);
    if (mean) set_op_attr(b, "op", "mode", std::string_view("mean"));
    Harness h = make_harness(with_loss(b, y, {2}));
    h.params[0] = {1, 2, 10, 20, 100, 200, 1000, 2000};
    h.iin[0] = {0, 2, 2, 3, 1, 3};
    h.forward();
    const float k = mean ? 1.0f / 3 : 1.0f;
    CHECK(h.out[0] == Approx(201 * k));
    CHECK(h.out[1] == Approx(402 * k));
    CHECK(h.out[2] == Approx(2010 * k));
    CHECK(h.out[3] == Approx(4020 * k));
  }
}

TEST_CASE("embedding_bag skips padding ids and averages over the others only") {
  GraphBuilder b("m", "");
  auto y = b.embedding_bag("op", b.input("ids", {2, 3}, kInt64), 4, 2);
  set_op_attr(b, "op", "mode", std::string_view("mean"));
  set_op_attr(b, "op", "padding_idx", int64_t{-1});
  Harness h = make_harness(with_loss(b, y, {2, 2}));
  h.params[0] = {1, 2, 10, 20, 100, 200, 1000, 2000};
  h.iin[0] = {2, -1, 3, -1, -1, -1, 1, 1, 1, 0, -1, -1};  // bags of 2, 0, 3 and 1 ids
  h.forward();
  const std::vector<float> want = {550, 1100, 0, 0, 10, 20, 1, 2};
  for (size_t k = 0; k < want.size(); ++k) CHECK(h.out[k] == Approx(want[k]));
  h.gout.assign(h.out.size(), 1.0f);
  h.backward();
  // Row 1 gets 3 x 1/3 from the third bag, rows 2 and 3 1/2 each, row 0 1: padding gets nothing.
  const std::vector<float> grad = {1, 1, 1, 1, 0.5f, 0.5f, 0.5f, 0.5f};
  for (size_t k = 0; k < grad.size(); ++k) CHECK(h.gparams[0][k] == Approx(grad[k]));
}

TEST_CASE("an embedding's padding_idx row is looked up as any other but gets no gradient") {
  GraphBuilder b("m", "");
  auto y = b.embedding("op", b.input("ids", {4}, kInt64), 3, 2);
  set_op_attr(b, "op", "padding_idx", int64_t{-3});  // row 0, counted from the end as torch does
  Harness h = make_harness(with_loss(b, y, {4, 2}));
  h.params[0] = {1, 2, 10, 20, 100, 200};
  h.iin[0] = {0, 2, 0, 1};
  h.forward();
  const std::vector<float> want = {1, 2, 100, 200, 1, 2, 10, 20};
  for (size_t k = 0; k < want.size(); ++k) CHECK(h.out[k] == Approx(want[k]));
  h.gout.assign(h.out.size(), 1.0f);
  h.backward();
  const std::vector<float> grad = {0, 0, 1, 1, 1, 1};  // row 0 read twice, trained never
  for (size_t k = 0; k < grad.size(); ++k) CHECK(h.gparams[0][k] == Approx(grad[k]));
}

namespace {

// Naive double-precision self-attention for one sample, params as in the catalogue.
std::vector<double> naive_attention(const float* x, int64_t s, int64_t hid, int64_t heads,
                                    const std::vector<std::vector<float>>& p, bool bias) {
  auto project = [&](const auto* in, int w) {
    std::vector<double> r(static_cast<size_t>(s * hid));
    for (int64_t i = 0; i < s; ++i) {
      for (int64_t o = 0; o < hid; ++o) {
        double acc = bias ? p[4 + w][o] : 0.0;
        for (int64_t k = 0; k < hid; ++k)
          acc += in[i * hid + k] * static_cast<double>(p[w][o * hid + k]);
        r[i * hid + o] = acc;
      }
    }
    return r;
  };
  const auto q = project(x, 0), k = project(x, 1), v = project(x, 2);
  const int64_t d = hid / heads;
  std::vector<double> c(static_cast<size_t>(s * hid));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < s; ++i) {
      std::vector<double> sc(static_cast<size_t>(s));
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < s; ++j) {
        double dot = 0;
        for (int64_t t = 0; t < d; ++t) dot += q[i * hid + h * d + t] * k[j * hid + h * d + t];
        sc[j] = dot / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, sc[j]);
      }
      for (auto& e : sc) sum += (e = std::exp(e - mx));
      for (int64_t t = 0; t < d; ++t) {
        double acc = 0;
        for (int64_t j = 0; j < s; ++j) acc += sc[j] / sum * v[j * hid + h * d + t];
        c[i * hid + h * d + t] = acc;
      }
    }
  }
  return project(c.data(), 3);
}

}  // namespace

TEST_CASE("attention with identity weights and one head is softmax(x x^T / sqrt(H)) x") {
  GraphBuilder b("m", "");
  auto y = b.attention("op", b.input("x", {2, 2}), 1);
  set_op_attr(b, "op", "bias", int64_t{0});
  Harness h = make_harness(with_loss(b, y, {2, 2}), 1);
  for (int w = 0; w < 4; ++w) h.params[w] = {1, 0, 0, 1};
  h.fin[0] = {1, 0, 0, 1};
  h.forward();
  // Scores [[a, 0], [0, a]] with a = 1/sqrt(2): row 0 attends p = e^a / (e^a + 1) to itself.
  const double a = 1 / std::sqrt(2.0), p = std::exp(a) / (std::exp(a) + 1);
  CHECK(h.out[0] == Approx(p));
  CHECK(h.out[1] == Approx(1 - p));
  CHECK(h.out[2] == Approx(1 - p));
  CHECK(h.out[3] == Approx(p));
}

TEST_CASE("attention matches a naive double-precision implementation") {
  for (int64_t heads : {1, 2, 4}) {
    DYNAMIC_SECTION(heads << " heads") {
      GraphBuilder b("m", "");
      Harness h =
          make_harness(with_loss(b, b.attention("op", b.input("x", {5, 8}), heads), {5, 8}), 3, 21);
      CHECK(h.kernel->saved_floats_per_sample() == 4 * 5 * 8 + heads * 25);  // Q, K, V, C, P
      CHECK(h.kernel->workspace_floats_per_sample() == 4 * 5 * 8 + 25);      // dC, dQ, dK, dV, dP
      h.forward();
      for (int64_t s = 0; s < h.batch; ++s) {
        const auto want = naive_attention(h.fin[0].data() + s * 40, 5, 8, heads, h.params, true);
        for (size_t k = 0; k < want.size(); ++k) {
          CHECK(h.out[static_cast<size_t>(s * 40) + k] == Approx(want[k]).margin(1e-5));
        }
      }
    }
  }
}

TEST_CASE("the input op's kernel is a no-op with no scratch") {
  GraphBuilder b("m", "");
  auto x = b.input("x", {3});
  b.add_loss(b.mse_loss("loss", x, b.input("t", {3})));
  gp::model::Graph g = gp::testing::build_graph(b.finish());
  auto k = gp::exec::make_cpu_kernel(g.op(g.index_of("x")));
  REQUIRE(k.ok());
  CHECK((*k)->saved_floats_per_sample() == 0);
  (*k)->forward(OpArgs{});
  (*k)->backward(OpArgs{});
}

TEST_CASE("make_cpu_kernel rejects an unknown op type, naming the op") {
  gp::model::Operator proto;
  proto.set_id("enc.lstm3");
  proto.set_type("lstm");
  gp::model::OpNode node;
  node.index = 4;
  node.proto = &proto;
  auto k = gp::exec::make_cpu_kernel(node);
  REQUIRE_FALSE(k.ok());
  CHECK(k.status().code() == gp::StatusCode::kInvalidArgument);
  CHECK_THAT(k.status().message(), Catch::Contains("enc.lstm3") && Catch::Contains("lstm"));

  // A known type that never went through shape inference is refused too, not read blindly.
  proto.set_type("linear");
  auto unvalidated = gp::exec::make_cpu_kernel(node);
  REQUIRE_FALSE(unvalidated.ok());
  CHECK_THAT(unvalidated.status().message(), Catch::Contains("enc.lstm3"));
}

namespace {

// The op "op" of a one-op model: binary `fn` of a [3] and b [3], batch 1, with values a and b.
Harness binary_of(const std::string& fn, std::vector<float> a, std::vector<float> b) {
  GraphBuilder g("m", "");
  Harness h =
      make_harness(with_loss(g, g.binary("op", g.input("a", {3}), g.input("b", {3}), fn), {3}), 1);
  h.fin[0] = std::move(a);
  h.fin[1] = std::move(b);
  return h;
}

}  // namespace

TEST_CASE("binary max and min split a tie's gradient equally between the operands, as PyTorch") {
  // Element 0 ties; elsewhere one operand wins and takes all of dy.
  Harness mx = binary_of("max", {1, 2, 3}, {1, 5, 0});
  mx.gout = {2, 3, 4};
  mx.forward();
  CHECK(mx.out == std::vector<float>{1, 5, 3});
  mx.zero_grads();
  mx.backward();
  CHECK(mx.gin[0] == std::vector<float>{1, 0, 4});
  CHECK(mx.gin[1] == std::vector<float>{1, 3, 0});

  Harness mn = binary_of("min", {1, 2, 3}, {1, 5, 0});
  mn.gout = {2, 3, 4};
  mn.forward();
  CHECK(mn.out == std::vector<float>{1, 2, 0});
  mn.zero_grads();
  mn.backward();
  CHECK(mn.gin[0] == std::vector<float>{1, 3, 0});
  CHECK(mn.gin[1] == std::vector<float>{1, 0, 4});
}

TEST_CASE("reduce max splits dy equally among tied maxima, and an l2 of a zero row gets none") {
  GraphBuilder b("m", "");
  Harness mx = make_harness(
      with_loss(b, b.reduce_axes("op", b.input("x", {2, 4}), {-1}, "max", false), {2}), 1);
  mx.fin[0] = {1, 3, 3, 0, 2, 2, 2, 2};  // row 0: two maxima; row 1: four
  mx.gout = {2, 4};
  mx.forward();
  CHECK(mx.out == std::vector<float>{3, 2});
  mx.zero_grads();
  mx.backward();
  CHECK(mx.gin[0] == std::vector<float>{0, 1, 1, 0, 1, 1, 1, 1});

  GraphBuilder b2("m", "");
  Harness l2 = make_harness(
      with_loss(b2, b2.reduce_axes("op", b2.input("x", {2, 3}), {-1}, "l2"), {2, 1}), 1);
  l2.fin[0] = {0, 0, 0, 3, 0, 4};
  l2.gout = {1, 2};
  l2.forward();
  CHECK(l2.out == std::vector<float>{0, 5});
  l2.zero_grads();
  l2.backward();
  CHECK(l2.gin[0][0] == 0.0f);
  CHECK(l2.gin[0][1] == 0.0f);
  CHECK(l2.gin[0][2] == 0.0f);
  CHECK(l2.gin[0][3] == Approx(2 * 3 / 5.0));
  CHECK(l2.gin[0][4] == 0.0f);
  CHECK(l2.gin[0][5] == Approx(2 * 4 / 5.0));
}

TEST_CASE("reduce over axes 0 and 2 of [2, 3, 4] matches a hand loop for sum, mean, max and l2") {
  for (const char* mode : {"sum", "mean", "max", "l2"}) {
    DYNAMIC_SECTION(mode) {
      GraphBuilder b("m", "");
      Harness h = make_harness(
          with_loss(b, b.reduce_axes("op", b.input("x", {2, 3, 4}), {0, 2}, mode, false), {3}), 3);
      h.forward();
      h.zero_grads();
      h.backward();
      const std::string m = mode;
      for (int s = 0; s < 3; ++s) {
        for (int j = 0; j < 3; ++j) {
          double sum = 0, sq = 0, best = -1e30;
          for (int i = 0; i < 2; ++i) {
            for (int k = 0; k < 4; ++k) {
              const double v = h.fin[0][s * 24 + i * 12 + j * 4 + k];
              sum += v, sq += v * v, best = std::max(best, v);
            }
          }
          const double want = m == "sum"    ? sum
                              : m == "mean" ? sum / 8
                              : m == "max"  ? best
                                            : std::sqrt(sq);
          CHECK(h.out[s * 3 + j] == Approx(want).epsilon(1e-6));
          // Every reduced element gets its share of dy (random inputs: no ties for max).
          const double dy = h.gout[s * 3 + j];
          for (int i = 0; i < 2; ++i) {
            for (int k = 0; k < 4; ++k) {
              const int at = s * 24 + i * 12 + j * 4 + k;
              const double v = h.fin[0][at];
              const double d = m == "sum"    ? dy
                               : m == "mean" ? dy / 8
                               : m == "max"  ? (v == best ? dy : 0)
                                             : dy * v / std::sqrt(sq);
              CHECK(h.gin[0][at] == Approx(d).epsilon(1e-5).margin(1e-7));
            }
          }
        }
      }
    }
  }
}

TEST_CASE(
    "binary add broadcasts [2, 1, 3] with [4, 1] and sums the gradients over broadcast axes") {
  GraphBuilder b("m", "");
  Harness h = make_harness(
      with_loss(b, b.binary("op", b.input("a", {2, 1, 3}), b.input("b", {4, 1}), "add"), {2, 4, 3}),
      3);
  h.forward();
  h.zero_grads();
  h.backward();
  for (int s = 0; s < 3; ++s) {
    const float* a = h.fin[0].data() + s * 6;
    const float* bb = h.fin[1].data() + s * 4;
    const float* y = h.out.data() + s * 24;
    const float* dy = h.gout.data() + s * 24;
    double da[6] = {}, db[4] = {};
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 4; ++j) {
        for (int k = 0; k < 3; ++k) {
          CHECK(y[i * 12 + j * 3 + k] == a[i * 3 + k] + bb[j]);
          da[i * 3 + k] += dy[i * 12 + j * 3 + k];
          db[j] += dy[i * 12 + j * 3 + k];
        }
      }
    }
    for (int e = 0; e < 6; ++e) CHECK(h.gin[0][s * 6 + e] == Approx(da[e]).epsilon(1e-6));
    for (int e = 0; e < 4; ++e) CHECK(h.gin[1][s * 4 + e] == Approx(db[e]).epsilon(1e-6));
  }
}

TEST_CASE("cast reads int64 integers as floats, negative and large ones exactly") {
  GraphBuilder b("m", "");
  Harness h = make_harness(with_loss(b, b.cast("op", b.input("m", {4}, kInt64)), {4}), 2);
  h.iin[0] = {1, 0, -3, int64_t{1} << 24, 7, -1, 0, 1};
  h.forward();
  CHECK(h.out == std::vector<float>{1, 0, -3, 16777216.0f, 7, -1, 0, 1});
}

TEST_CASE("where routes dy to a where the condition is non-zero and to b elsewhere, none to it") {
  GraphBuilder b("m", "");
  Harness h = make_harness(
      with_loss(b, b.where("op", b.input("c", {3}), b.input("a", {2, 3}), b.input("b", {1})),
                {2, 3}),
      1);
  h.fin[0] = {1, 0, -2};  // any non-zero value selects a
  h.fin[1] = {10, 11, 12, 13, 14, 15};
  h.fin[2] = {7};
  h.gout = {1, 2, 3, 4, 5, 6};
  h.forward();
  CHECK(h.out == std::vector<float>{10, 7, 12, 13, 7, 15});
  h.zero_grads();
  h.backward();
  CHECK(h.gin[0] == std::vector<float>{0, 0, 0});
  CHECK(h.gin[1] == std::vector<float>{1, 0, 3, 4, 0, 6});
  CHECK(h.gin[2] == std::vector<float>{2 + 5});
}

TEST_CASE("unary functions and their gradients match double-precision formulas over a range") {
  struct Fn {
    const char* name;
    double lo, hi;
    std::function<double(double)> f, df;
  };
  const double two_over_sqrt_pi = 2 / std::sqrt(M_PI);
  const std::vector<Fn> fns = {
      {"neg", -10, 10, [](double x) { return -x; }, [](double) { return -1.0; }},
      {"exp", -20, 20, [](double x) { return std::exp(x); }, [](double x) { return std::exp(x); }},
      {"log", 0.01, 100, [](double x) { return std::log(x); }, [](double x) { return 1 / x; }},
      {"sqrt", 0.01, 100, [](double x) { return std::sqrt(x); },
       [](double x) { return 0.5 / std::sqrt(x); }},
      {"rsqrt", 0.01, 100, [](double x) { return 1 / std::sqrt(x); },
       [](double x) { return -0.5 * std::pow(x, -1.5); }},
      {"reciprocal", 0.01, 100, [](double x) { return 1 / x; },
       [](double x) { return -1 / (x * x); }},
      {"abs", -10, 10, [](double x) { return std::abs(x); },
       [](double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }},
      {"erf", -6, 6, [](double x) { return std::erf(x); },
       [two_over_sqrt_pi](double x) { return two_over_sqrt_pi * std::exp(-x * x); }},
      {"sin", -10, 10, [](double x) { return std::sin(x); }, [](double x) { return std::cos(x); }},
      {"cos", -10, 10, [](double x) { return std::cos(x); }, [](double x) { return -std::sin(x); }},
      {"softplus", -30, 19.9, [](double x) { return std::log1p(std::exp(x)); },
       [](double x) { return 1 / (1 + std::exp(-x)); }},
  };
  constexpr int kN = 1001;  // includes 0 where the range is symmetric (abs: gradient 0 there)
  for (const Fn& fn : fns) {
    DYNAMIC_SECTION(fn.name) {
      GraphBuilder b("m", "");
      Harness h = make_harness(with_loss(b, b.unary("op", b.input("x", {kN}), fn.name), {kN}), 1);
      for (int k = 0; k < kN; ++k) {
        h.fin[0][k] = static_cast<float>(fn.lo + (fn.hi - fn.lo) * k / (kN - 1));
      }
      std::fill(h.gout.begin(), h.gout.end(), 1.0f);
      h.forward();
      h.zero_grads();
      h.backward();
      double worst_y = 0, worst_d = 0;
      for (int k = 0; k < kN; ++k) {
        const double x = h.fin[0][k];
        const double y = fn.f(x), d = fn.df(x);
        worst_y = std::max(worst_y, std::abs(h.out[k] - y) / std::max(1.0, std::abs(y)));
        worst_d = std::max(worst_d, std::abs(h.gin[0][k] - d) / std::max(1.0, std::abs(d)));
      }
      CHECK(worst_y < 2e-6);
      CHECK(worst_d < 2e-6);
    }
  }
}

TEST_CASE("softplus is linear above 20, as torch.nn.Softplus's threshold") {
  GraphBuilder b("m", "");
  Harness h = make_harness(with_loss(b, b.unary("op", b.input("x", {4}), "softplus"), {4}), 1);
  h.fin[0] = {20.5f, 30, 100, 1000};  // log1p(exp(1000)) would overflow to inf
  h.gout = {1, 2, 3, 4};
  h.forward();
  CHECK(h.out == h.fin[0]);
  h.zero_grads();
  h.backward();
  CHECK(h.gin[0] == h.gout);
}

TEST_CASE("constant fills every sample with its values, as float32 or int64") {
  const std::vector<float> values = {1, -2, 3, 0.5f, 0.25f, -1};
  GraphBuilder b("m", "");
  auto c = b.constant("op", b.input("batch", {1}), {2, 3}, values);
  Harness h =
      make_harness(with_loss(b, b.binary("sum", b.input("x", {2, 3}), c, "add"), {2, 3}), 3);
  h.forward();
  for (size_t k = 0; k < h.out.size(); ++k) CHECK(h.out[k] == values[k % values.size()]);
  h.zero_grads();
  h.backward();
  CHECK(h.gin[0] == std::vector<float>(3, 0.0f));  // the batch input gets no gradient

  GraphBuilder bi("m", "");
  auto ids = bi.constant("ids", bi.input("batch", {1}), {4}, {0, 3, 7, 9}, /*integer=*/true);
  bi.add_loss(bi.mse_loss("loss", bi.embedding_bag("bag", ids, 10, 2), bi.input("t", {2})));
  gp::model::Graph g = gp::testing::build_graph(bi.finish());
  auto k = gp::exec::make_cpu_kernel(g.op(g.index_of("ids")));
  REQUIRE(k.ok());
  std::vector<int64_t> out(3 * 4, -1);
  std::vector<float> batch(3, 0.0f);
  const gp::exec::TensorView in[] = {{batch.data(), 1}};
  const gp::exec::TensorView outs[] = {{out.data(), 4}};
  OpArgs a;
  a.batch = 3;
  a.inputs = in;
  a.outputs = outs;
  (*k)->forward(a);
  CHECK(out == std::vector<int64_t>{0, 3, 7, 9, 0, 3, 7, 9, 0, 3, 7, 9});
}

TEST_CASE("a constant without its values is refused, naming the op and param_values['value']") {
  GraphBuilder b("m", "");
  auto c = b.constant("causal_mask", b.input("batch", {1}), {3}, {0, 1, 2});
  for (auto& op : *b.model().mutable_ops()) {
    if (op.id() == "causal_mask") op.mutable_param_values()->erase("value");
  }
  gp::model::Graph g =
      gp::testing::build_graph(with_loss(b, b.binary("sum", b.input("x", {3}), c, "add"), {3}));
  auto k = gp::exec::make_cpu_kernel(g.op(g.index_of("causal_mask")));
  REQUIRE_FALSE(k.ok());
  CHECK(k.status().code() == gp::StatusCode::kInvalidArgument);
  CHECK_THAT(k.status().message(), Catch::Contains("'causal_mask' (constant)") &&
                                       Catch::Contains("param_values['value']"));
}

TEST_CASE(
    "a reduction over more per-sample axes than the index maps hold is refused, naming the op") {
  GraphBuilder b("m", "");
  auto r = b.reduce_axes("wide_max", b.input("x", {1, 2, 1, 2, 1, 2, 1, 2}), {0, 7}, "max", false);
  gp::model::Graph g = gp::testing::build_graph(with_loss(b, r, {2, 1, 2, 1, 2, 1}));
  auto k = gp::exec::make_cpu_kernel(g.op(g.index_of("wide_max")));
  REQUIRE_FALSE(k.ok());
  CHECK_THAT(k.status().message(), Catch::Contains("'wide_max' (reduce): inputs[0]: 8 per-sample "
                                                   "axes, at most 7"));
}
