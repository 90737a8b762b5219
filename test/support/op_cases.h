// The catalogue's op configurations as test cases: each builds a model around an op "op" and
// prepares its random inputs (away from kinks, distinct pooling windows, valid ids). Shared by
// the CPU kernel tests (finite differences) and the CUDA kernel tests (against the CPU).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernel_harness.h"

namespace gp::testing {

// A model builder and input preparation for one op configuration.
struct GradCase {
  std::string name;
  std::function<ModelGraph()> model;
  std::function<void(Harness&)> prepare = [](Harness&) {};
};

using Build = std::function<TensorRef(GraphBuilder&)>;
using Prepare = std::function<void(Harness&)>;

// A non-loss op "op" made by `build`, whose output (per-sample shape `out`) feeds an mse_loss;
// `prepare` adjusts the random inputs.
inline GradCase op_case(std::string name, std::vector<int64_t> out, Prepare prepare, Build build) {
  return {std::move(name),
          [build, out] {
            GraphBuilder b("m", "");
            TensorRef y = build(b);
            return with_loss(b, y, out);
          },
          std::move(prepare)};
}
inline GradCase op_case(std::string name, std::vector<int64_t> out, Build build) {
  return op_case(
      std::move(name), std::move(out), [](Harness&) {}, std::move(build));
}

// A loss op "op" made by `build`.
inline GradCase loss_case(std::string name, Prepare prepare, Build build) {
  return {std::move(name),
          [build] {
            GraphBuilder b("m", "");
            b.add_loss(build(b));
            return b.finish();
          },
          std::move(prepare)};
}

// Keeps every pre-activation of a fused-relu linear (x [batch * 2 rows, 4], W [3, 4]) at least
// 0.1 away from the kink by shifting its feature's bias.
inline void away_from_kink(Harness& h) {
  for (size_t j = 0; j < 3; ++j) {
    for (bool near = true; near;) {
      near = false;
      for (size_t r = 0; r < static_cast<size_t>(h.batch) * 2; ++r) {
        float z = h.params[1][j];
        for (size_t k = 0; k < 4; ++k) z += h.fin[0][r * 4 + k] * h.params[0][j * 4 + k];
        near = near || std::abs(z) < 0.1f;
      }
      if (near) h.params[1][j] += 0.13f;
    }
  }
}

// Pushes input 0 away from 0 (relu's kink) to magnitudes in [0.2, 1].
inline void away_from_zero(Harness& h) {
  for (float& v : h.fin[0]) v = (v < 0 ? -1.0f : 1.0f) * (0.2f + 0.8f * std::abs(v));
}

// Widens input 0 to [-3, 3] (gelu's tails).
inline void widen(Harness& h) {
  for (float& v : h.fin[0]) v *= 3;
}

// Keeps input 0 at least 0.1 away from clip's bounds -0.5 and 0.5 (its kinks).
inline void away_from_half(Harness& h) {
  for (float& v : h.fin[0]) {
    if (std::abs(std::abs(v) - 0.5f) < 0.1f) v = v < 0 ? v - 0.2f : v + 0.2f;
  }
}

// Input 0 as a shuffle of distinct values 0.01 apart (finite differences never swap a window's
// maximum).
inline void distinct(Harness& h) {
  std::vector<float>& v = h.fin[0];
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * (static_cast<float>(i) - v.size() / 2.0f);
  std::shuffle(v.begin(), v.end(), std::mt19937(5));
}

// Random ids in [0, range) for id input `input`.
inline Prepare ids_below(size_t input, int64_t range) {
  return [input, range](Harness& h) {
    std::mt19937 rng(static_cast<unsigned>(11 + range));
    std::uniform_int_distribution<int64_t> u(0, range - 1);
    for (auto& id : h.iin[input]) id = u(rng);
  };
}

// A float graph input.
inline TensorRef x(GraphBuilder& b, std::vector<int64_t> shape, const std::string& id = "x") {
  return b.input(id, std::move(shape));
}

inline TensorRef ids(GraphBuilder& b, std::vector<int64_t> shape, const std::string& id = "ids") {
  return b.input(id, std::move(shape), kInt64);
}

// matmul of a and b as stored, with op(a) = a^T, op(b) = b^T where asked, times alpha.
inline TensorRef matmul_t(GraphBuilder& b, TensorRef a, TensorRef bm, bool transpose_a,
                          bool transpose_b, double alpha) {
  TensorRef y = b.matmul("op", a, bm);
  auto& op = *b.model().mutable_ops(b.model().ops_size() - 1);
  model::set_attr(op, "transpose_a", int64_t{transpose_a});
  model::set_attr(op, "transpose_b", int64_t{transpose_b});
  model::set_attr(op, "alpha", alpha);
  return y;
}

// [start, end) along `axis` of x permuted by perm: the importer's fold of a transpose's slices.
inline TensorRef transpose_window(GraphBuilder& b, TensorRef x, std::vector<int64_t> perm,
                                  int64_t axis, int64_t start, int64_t end) {
  TensorRef y = b.transpose("op", x, std::move(perm));
  auto& op = *b.model().mutable_ops(b.model().ops_size() - 1);
  model::set_attr(op, "axis", axis);
  model::set_attr(op, "start", start);
  model::set_attr(op, "end", end);
  return y;
}

// Every float input mapped into [0.5, 2] (log, sqrt, division, pow's base).
inline void positive(Harness& h) {
  for (auto& in : h.fin) {
    for (float& v : in) v = 1.25f + 0.75f * std::tanh(v);
  }
}

// Every float input as distinct values 0.01 apart across all inputs (no ties for max, min and
// comparisons; finite differences never cross one), shuffled.
inline void all_distinct(Harness& h) {
  std::vector<float*> cells;
  for (auto& in : h.fin) {
    for (float& v : in) cells.push_back(&v);
  }
  std::vector<float> values(cells.size());
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = 0.01f * (static_cast<float>(i) - values.size() / 2.0f) + 0.005f;
  }
  std::shuffle(values.begin(), values.end(), std::mt19937(9));
  for (size_t i = 0; i < cells.size(); ++i) *cells[i] = values[i];
}

// The general element-wise ops and reductions: every function, broadcasting both ways.
inline std::vector<GradCase> general_cases() {
  std::vector<GradCase> cases;
  const std::pair<const char*, Prepare> unary[] = {
      {"neg", [](Harness&) {}}, {"exp", [](Harness&) {}}, {"log", positive},
      {"sqrt", positive},       {"rsqrt", positive},      {"reciprocal", positive},
      {"abs", away_from_zero},  {"erf", widen},           {"sin", widen},
      {"cos", widen},           {"softplus", widen}};
  for (const auto& [fn, prepare] : unary) {
    std::string f = fn;
    cases.push_back(op_case("unary " + f, {2, 3}, prepare, [f](GraphBuilder& b) {
      return b.unary("op", x(b, {2, 3}), f);
    }));
  }
  cases.push_back(op_case("binary add of [2, 1, 3] and [4, 1] (both broadcast)", {2, 4, 3},
                          [](GraphBuilder& b) {
                            return b.binary("op", x(b, {2, 1, 3}, "a"), x(b, {4, 1}, "b"), "add");
                          }));
  cases.push_back(op_case("binary sub of [3] from [2, 3]", {2, 3}, [](GraphBuilder& b) {
    return b.binary("op", x(b, {2, 3}, "a"), x(b, {3}, "b"), "sub");
  }));
  cases.push_back(op_case("binary mul of [2, 3, 1] and [2, 1, 4]", {2, 3, 4}, [](GraphBuilder& b) {
    return b.binary("op", x(b, {2, 3, 1}, "a"), x(b, {2, 1, 4}, "b"), "mul");
  }));
  cases.push_back(op_case("binary div of [2, 3] by [2, 1]", {2, 3}, positive, [](GraphBuilder& b) {
    return b.binary("op", x(b, {2, 3}, "a"), x(b, {2, 1}, "b"), "div");
  }));
  cases.push_back(op_case("binary pow of [2, 3] to [3]", {2, 3}, positive, [](GraphBuilder& b) {
    return b.binary("op", x(b, {2, 3}, "a"), x(b, {3}, "b"), "pow");
  }));
  for (const char* fn : {"max", "min"}) {
    std::string f = fn;
    cases.push_back(
        op_case("binary " + f + " of [2, 3] and [1]", {2, 3}, all_distinct, [f](GraphBuilder& b) {
          return b.binary("op", x(b, {2, 3}, "a"), x(b, {1}, "b"), f);
        }));
  }
  cases.push_back(op_case("compare lt of [2, 3] and [3] (a mask, no gradient)", {2, 3},
                          all_distinct, [](GraphBuilder& b) {
                            return b.compare("op", x(b, {2, 3}, "a"), x(b, {3}, "b"), "lt");
                          }));
  // The condition as the op sees it: a 0/1 mask (from compare), both branches taken.
  cases.push_back(op_case(
      "where of a mask [2, 3], a [3] and b [2, 1]", {2, 3},
      [](Harness& h) {
        for (size_t i = 0; i < h.fin[0].size(); ++i) {
          h.fin[0][i] = i % 3 == 1 ? 0.0f : 1.0f;
        }
      },
      [](GraphBuilder& b) {
        return b.where("op", x(b, {2, 3}, "m"), x(b, {3}, "a"), x(b, {2, 1}, "b"));
      }));
  cases.push_back(op_case("cast of int64 ids [2, 3] (no gradient to integers)", {2, 3},
                          ids_below(0, 7), [](GraphBuilder& b) {
                            return b.cast("op", ids(b, {2, 3}));
                          }));
  // Numbers k + 0.5 and -0.7 read as ids: truncated toward zero (-0.7 -> 0, as torch's .long()),
  // then looked up; no gradient reaches the numbers.
  cases.push_back(op_case(
      "cast of float32 numbers [3] to int64 ids, looked up", {3, 4},
      [](Harness& h) {
        for (size_t i = 0; i < h.fin[0].size(); ++i) {
          h.fin[0][i] = i % 4 == 3 ? -0.7f : static_cast<float>(i % 5) + 0.5f;
        }
      },
      [](GraphBuilder& b) { return b.embedding("emb", b.cast("op", x(b, {3}), "int64"), 5, 4); }));
  cases.push_back(op_case("cumsum along a middle axis", {2, 4, 3}, [](GraphBuilder& b) {
    return b.cumsum("op", x(b, {2, 4, 3}), 1);
  }));
  cases.push_back(
      op_case("cumsum exclusive and reversed along the last axis", {3, 5}, [](GraphBuilder& b) {
        return b.cumsum("op", x(b, {3, 5}), -1, true, true);
      }));
  cases.push_back(op_case("constant [2, 3] added to x", {2, 3}, [](GraphBuilder& b) {
    auto c = b.constant("op", x(b, {1}, "batch"), {2, 3}, {1, -2, 3, 0.5f, 0.25f, -1});
    return b.binary("sum", x(b, {2, 3}), c, "add");
  }));
  cases.push_back(op_case("reduce sum over axes 0 and 2", {1, 3, 1}, [](GraphBuilder& b) {
    return b.reduce_axes("op", x(b, {2, 3, 4}), {0, 2});
  }));
  cases.push_back(op_case("reduce mean over the last two axes, dropped", {2}, [](GraphBuilder& b) {
    return b.reduce_axes("op", x(b, {2, 3, 4}), {-1, -2}, "mean", false);
  }));
  cases.push_back(op_case("reduce max over axis 1", {2, 4}, all_distinct, [](GraphBuilder& b) {
    return b.reduce_axes("op", x(b, {2, 3, 4}), {1}, "max", false);
  }));
  cases.push_back(
      op_case("reduce l2 over the last axis", {3, 1}, away_from_zero, [](GraphBuilder& b) {
        return b.reduce_axes("op", x(b, {3, 4}), {-1}, "l2");
      }));
  // Repeats and an index never read: backward sums the repeats and leaves a zero.
  cases.push_back(op_case("gather of a middle axis with repeats", {2, 4, 3}, [](GraphBuilder& b) {
    return b.gather("op", x(b, {2, 5, 3}), 1, {4, 0, 4, 2});
  }));
  // DLRM's interaction: the strict lower triangle of [n * n], flattened, from the last axis.
  cases.push_back(
      op_case("gather of the last axis (a lower triangle)", {3, 3}, [](GraphBuilder& b) {
        return b.gather("op", x(b, {3, 9}), -1, {3, 6, 7});
      }));
  return cases;
}

// The upsampling ops (U-Net's decoder).
inline std::vector<GradCase> upsample_cases() {
  return {
      op_case("conv_transpose2d 2x2 stride 2", {3, 4, 6},
              [](GraphBuilder& b) {
                return b.conv_transpose2d("op", x(b, {2, 2, 3}), 3, {2, 2}, {2, 2});
              }),
      op_case("conv_transpose2d 3x3, stride 2, padding 1, output_padding 1, no bias", {2, 4, 6},
              [](GraphBuilder& b) {
                return b.conv_transpose2d("op", x(b, {3, 2, 3}), 2, {3, 3}, {2, 2}, {1, 1}, {1, 1},
                                          false);
              }),
      op_case("conv_transpose2d 3x2, stride [1, 2], padding [1, 0]", {2, 3, 6},
              [](GraphBuilder& b) {
                return b.conv_transpose2d("op", x(b, {2, 3, 3}), 2, {3, 2}, {1, 2}, {1, 0});
              }),
      op_case("resize nearest 2x3 to 4x7", {2, 4, 7},
              [](GraphBuilder& b) {
                return b.resize("op", x(b, {2, 2, 3}), {4, 7});
              }),
      op_case("resize bilinear 3x3 to 6x5", {2, 6, 5},
              [](GraphBuilder& b) {
                return b.resize("op", x(b, {2, 3, 3}), {6, 5}, "bilinear");
              }),
      op_case("resize bilinear, align_corners, 3x2 to 5x4", {1, 5, 4},
              [](GraphBuilder& b) {
                return b.resize("op", x(b, {1, 3, 2}), {5, 4}, "bilinear", true);
              }),
  };
}

inline std::vector<GradCase> grad_cases() {
  std::vector<GradCase> cases = {
      op_case("linear with bias", {2, 3},
              [](GraphBuilder& b) {
                return b.linear("op", x(b, {2, 5}), 3);
              }),
      op_case("linear without bias, fused gelu", {3},
              [](GraphBuilder& b) { return b.linear("op", x(b, {4}), 3, false, "gelu"); }),
      // 8 outputs: the width at which CUDA's cuBLASLt form can keep gelu's pre-activation.
      op_case("linear with bias, fused gelu, 8 outputs", {2, 8},
              [](GraphBuilder& b) {
                return b.linear("op", x(b, {2, 3}), 8, true, "gelu");
              }),
      op_case("linear with bias, fused relu", {2, 3}, away_from_kink,
              [](GraphBuilder& b) {
                return b.linear("op", x(b, {2, 4}), 3, true, "relu");
              }),
      op_case("embedding_bag sum", {2, 4}, ids_below(0, 5),
              [](GraphBuilder& b) {
                return b.embedding_bag("op", ids(b, {2, 3}), 5, 4);
              }),
      op_case("embedding_bag mean", {2}, ids_below(0, 4),
              [](GraphBuilder& b) {
                auto y = b.embedding_bag("op", ids(b, {3}), 4, 2);
                set_op_attr(b, "op", "mode", std::string_view("mean"));
                return y;
              }),
      op_case(
          "embedding_bag mean with -1 padding, every other bag padding only", {2, 2},
          [](Harness& h) {
            for (size_t k = 0; k < h.iin[0].size(); ++k) {
              const size_t bag = k / 3;
              h.iin[0][k] = bag % 2 == 1 || k % 3 == 1 ? -1 : static_cast<int64_t>(k * 7 % 4);
            }
          },
          [](GraphBuilder& b) {
            auto y = b.embedding_bag("op", ids(b, {2, 3}), 4, 2);
            set_op_attr(b, "op", "mode", std::string_view("mean"));
            set_op_attr(b, "op", "padding_idx", int64_t{-1});
            return y;
          }),
      op_case("multi_head_attention, 2 heads with bias", {3, 4},
              [](GraphBuilder& b) {
                return b.attention("op", x(b, {3, 4}), 2);
              }),
      op_case("multi_head_attention, 1 head without bias", {4, 3},
              [](GraphBuilder& b) {
                auto y = b.attention("op", x(b, {4, 3}), 1);
                set_op_attr(b, "op", "bias", int64_t{0});
                return y;
              }),
      op_case("layer_norm", {2, 5},
              [](GraphBuilder& b) {
                return b.layer_norm("op", x(b, {2, 5}));
              }),
      op_case("layer_norm without shift", {3, 9},
              [](GraphBuilder& b) {
                auto y = b.layer_norm("op", x(b, {3, 9}));
                set_op_attr(b, "op", "shift", int64_t{0});
                return y;
              }),
      op_case("layer_norm without scale", {2, 6},
              [](GraphBuilder& b) {
                auto y = b.layer_norm("op", x(b, {2, 6}));
                set_op_attr(b, "op", "scale", int64_t{0});
                return y;
              }),
      op_case("layer_norm without scale or shift", {2, 5},
              [](GraphBuilder& b) {
                auto y = b.layer_norm("op", x(b, {2, 5}));
                set_op_attr(b, "op", "scale", int64_t{0});
                set_op_attr(b, "op", "shift", int64_t{0});
                return y;
              }),
      op_case("relu", {2, 3}, away_from_zero,
              [](GraphBuilder& b) {
                return b.relu("op", x(b, {2, 3}));
              }),
      op_case("gelu", {6}, widen, [](GraphBuilder& b) { return b.gelu("op", x(b, {6})); }),
      op_case("gelu, exact", {6}, widen,
              [](GraphBuilder& b) { return b.gelu("op", x(b, {6}), /*exact=*/true); }),
      op_case("softmax", {2, 4},
              [](GraphBuilder& b) {
                return b.softmax("op", x(b, {2, 4}));
              }),
      op_case("add of three", {2, 3},
              [](GraphBuilder& b) {
                return b.add("op", {x(b, {2, 3}, "a"), x(b, {2, 3}, "b"), x(b, {2, 3}, "c")});
              }),
      op_case("concat along the last axis", {2, 4},
              [](GraphBuilder& b) {
                return b.concat("op", {x(b, {2, 3}, "a"), x(b, {2, 1}, "b")});
              }),
      op_case("concat along a middle axis", {2, 3, 3},
              [](GraphBuilder& b) {
                return b.concat("op", {x(b, {2, 1, 3}, "a"), x(b, {2, 2, 3}, "b")}, 1);
              }),
      op_case("slice along axis 0", {2, 2},
              [](GraphBuilder& b) {
                return b.slice("op", x(b, {4, 2}), 0, 1, 3);
              }),
      op_case("slice along the last axis", {2, 3},
              [](GraphBuilder& b) {
                return b.slice("op", x(b, {2, 5}), -1, 2, 5);
              }),
      op_case("matmul of [3, 4] and [4, 2]", {3, 2},
              [](GraphBuilder& b) {
                return b.matmul("op", x(b, {3, 4}, "a"), x(b, {4, 2}, "b"));
              }),
      op_case("matmul with a leading dim", {2, 3, 4},
              [](GraphBuilder& b) {
                return b.matmul("op", x(b, {2, 3, 5}, "a"), x(b, {2, 5, 4}, "b"));
              }),
      op_case("matmul with b transposed and alpha", {2, 3, 4},
              [](GraphBuilder& b) {
                return matmul_t(b, x(b, {2, 3, 5}, "a"), x(b, {2, 4, 5}, "b"), false, true, 0.5);
              }),
      op_case("matmul with a transposed", {3, 2},
              [](GraphBuilder& b) {
                return matmul_t(b, x(b, {4, 3}, "a"), x(b, {4, 2}, "b"), true, false, 1.0);
              }),
      op_case("matmul with both transposed and a negative alpha", {2, 3, 4},
              [](GraphBuilder& b) {
                return matmul_t(b, x(b, {2, 5, 3}, "a"), x(b, {2, 4, 5}, "b"), true, true, -1.5);
              }),
      op_case("scale", {2, 3},
              [](GraphBuilder& b) {
                return b.scale("op", x(b, {2, 3}), -1.5);
              }),
      op_case("transpose of a matrix", {3, 2},
              [](GraphBuilder& b) {
                return b.transpose("op", x(b, {2, 3}), {1, 0});
              }),
      op_case("transpose, perm [2, 0, 1]", {4, 2, 3},
              [](GraphBuilder& b) {
                return b.transpose("op", x(b, {2, 3, 4}), {2, 0, 1});
              }),
      op_case("transpose with a window: q of timm's qkv permute", {1, 2, 4, 5},
              [](GraphBuilder& b) {
                return transpose_window(b, x(b, {4, 3, 2, 5}), {1, 2, 0, 3}, 0, 1, 2);
              }),
      op_case("transpose with a window on its last axis", {4, 2, 2},
              [](GraphBuilder& b) {
                return transpose_window(b, x(b, {2, 3, 4}), {2, 0, 1}, 2, 1, 3);
              }),
      op_case("reshape", {3, 4},
              [](GraphBuilder& b) {
                return b.reshape("op", x(b, {2, 6}), {3, 4});
              }),
      op_case("conv2d 3x3 with bias", {3, 2, 2},
              [](GraphBuilder& b) {
                return b.conv2d("op", x(b, {2, 4, 4}), 3, {3, 3});
              }),
      op_case("conv2d stride 2, padding 1", {3, 3, 3},
              [](GraphBuilder& b) {
                return b.conv2d("op", x(b, {2, 5, 5}), 3, {3, 3}, {2, 2}, {1, 1});
              }),
      op_case("conv2d 2x3 kernel, stride [1, 2], padding [0, 1], no bias", {2, 3, 3},
              [](GraphBuilder& b) {
                return b.conv2d("op", x(b, {1, 4, 5}), 2, {2, 3}, {1, 2}, {0, 1}, false);
              }),
      op_case("conv2d 3x3, 2 groups, padding 1", {4, 3, 3},
              [](GraphBuilder& b) {
                auto y = b.conv2d("op", x(b, {4, 3, 3}), 4, {3, 3}, {1, 1}, {1, 1});
                set_op_attr(b, "op", "groups", int64_t{2});
                return y;
              }),
      op_case("conv2d depthwise 2x2, stride 2, no bias", {3, 2, 2},
              [](GraphBuilder& b) {
                auto y = b.conv2d("op", x(b, {3, 4, 4}), 3, {2, 2}, {2, 2}, {0, 0}, false);
                set_op_attr(b, "op", "groups", int64_t{3});
                return y;
              }),
      op_case("max_pool2d 2x2", {2, 2, 2}, distinct,
              [](GraphBuilder& b) {
                return b.max_pool2d("op", x(b, {2, 4, 4}), {2, 2});
              }),
      op_case("max_pool2d 3x3, stride 2, padding 1", {2, 2, 3}, distinct,
              [](GraphBuilder& b) {
                return b.max_pool2d("op", x(b, {2, 4, 5}), {3, 3}, {2, 2}, {1, 1});
              }),
      op_case("avg_pool2d 3x3, stride 2, padding 1, count_include_pad 1", {2, 2, 3},
              [](GraphBuilder& b) {
                return b.avg_pool2d("op", x(b, {2, 4, 5}), {3, 3}, {2, 2}, {1, 1});
              }),
      op_case("avg_pool2d 3x3, stride 2, padding 1, count_include_pad 0", {2, 2, 3},
              [](GraphBuilder& b) {
                return b.avg_pool2d("op", x(b, {2, 4, 5}), {3, 3}, {2, 2}, {1, 1}, false);
              }),
      op_case("max_pool2d 2x2, stride 2, ceil_mode 1 on 5x5", {2, 3, 3}, distinct,
              [](GraphBuilder& b) {
                auto y = b.max_pool2d("op", x(b, {2, 5, 5}), {2, 2});
                set_op_attr(b, "op", "ceil_mode", int64_t{1});
                return y;
              }),
      op_case("avg_pool2d 3x3, stride 2, padding 1, ceil_mode 1 on 6x6", {2, 4, 4},
              [](GraphBuilder& b) {
                auto y = b.avg_pool2d("op", x(b, {2, 6, 6}), {3, 3}, {2, 2}, {1, 1});
                set_op_attr(b, "op", "ceil_mode", int64_t{1});
                return y;
              }),
      op_case("batch_norm on [C, H, W]", {3, 2, 2},
              [](GraphBuilder& b) {
                return b.batch_norm("op", x(b, {3, 2, 2}));
              }),
      // Two samples normalise each channel to about +-1 whatever x is (the input gradient is
      // only epsilon's effect): a larger epsilon keeps it measurable.
      op_case("batch_norm on [C], epsilon 0.1", {4},
              [](GraphBuilder& b) { return b.batch_norm("op", x(b, {4}), 0.1); }),
      op_case("sigmoid", {2, 3}, widen,
              [](GraphBuilder& b) {
                return b.sigmoid("op", x(b, {2, 3}));
              }),
      op_case("tanh", {2, 3}, widen,
              [](GraphBuilder& b) {
                return b.tanh("op", x(b, {2, 3}));
              }),
      op_case("clip to [-0.5, 0.5]", {2, 4}, away_from_half,
              [](GraphBuilder& b) {
                return b.clip("op", x(b, {2, 4}), -0.5, 0.5);
              }),
      op_case("mul of two activations", {2, 3},
              [](GraphBuilder& b) {
                return b.mul("op", x(b, {2, 3}, "a"), x(b, {2, 3}, "b"));
              }),
      op_case("reduce sum over the last axis", {2, 1},
              [](GraphBuilder& b) {
                return b.reduce("op", x(b, {2, 5}), -1);
              }),
      op_case("reduce mean over a middle axis", {2, 1, 3},
              [](GraphBuilder& b) {
                return b.reduce("op", x(b, {2, 4, 3}), 1, true);
              }),
      op_case("bias_add of a [3, 2] bias to [2, 3, 2]", {2, 3, 2},
              [](GraphBuilder& b) {
                return b.bias_add("op", x(b, {2, 3, 2}), {3, 2});
              }),
      op_case("broadcast_param of [2, 3] for the batch of x", {2, 3},
              [](GraphBuilder& b) {
                return b.broadcast_param("op", x(b, {5}), {2, 3});
              }),
      op_case("embedding of [3] ids", {3, 4}, ids_below(0, 5),
              [](GraphBuilder& b) { return b.embedding("op", ids(b, {3}), 5, 4); }),
      loss_case(
          "mse_loss", [](Harness&) {},
          [](GraphBuilder& b) {
            return b.mse_loss("op", x(b, {2, 3}, "p"), x(b, {2, 3}, "t"));
          }),
      loss_case("softmax_cross_entropy over positions", ids_below(1, 5),
                [](GraphBuilder& b) {
                  return b.softmax_cross_entropy("op", x(b, {3, 5}, "z"), ids(b, {3}, "labels"));
                }),
      loss_case("softmax_cross_entropy, one position", ids_below(1, 4),
                [](GraphBuilder& b) {
                  return b.softmax_cross_entropy("op", x(b, {4}, "z"), ids(b, {1}, "labels"));
                }),
  };
  for (GradCase& c : general_cases()) cases.push_back(std::move(c));
  for (GradCase& c : upsample_cases()) cases.push_back(std::move(c));
  return cases;
}

}  // namespace gp::testing
