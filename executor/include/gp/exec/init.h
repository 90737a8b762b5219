// Deterministic parameters and synthetic data. Every value depends only on the seed and on
// stable names (op id, parameter name, input op id, sample index), never on the plan, so any
// plan of a model starts from identical weights and sees identical data.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

#include "gp/model/graph.h"

namespace gp::exec {

// splitmix64-based stream keyed by a 64-bit seed.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  // Uniform in [lo, hi).
  float uniform(float lo, float hi);
  // Uniform integer in [0, n).
  int64_t below(int64_t n);

 private:
  uint64_t state_;
};

uint64_t hash_combine(uint64_t h, std::string_view s);
uint64_t hash_combine(uint64_t h, uint64_t v);

// Fills parameter `param_index` of op `op` (its ParamSpec order): weights uniform in
// ±1/sqrt(fan_in) (fan_in: the product of all dims but the first, e.g. C*kh*kw for a conv2d
// weight [out, C, kh, kw]), biases and layer/batch-norm beta 0, layer/batch-norm gamma 1,
// embeddings and other rank-1 weights uniform ±0.05.
void init_param(const model::OpNode& op, int param_index, uint64_t seed, std::span<float> out);

// The ids an int input op's consumers accept, [0, range): embedding rows or class count, through
// the layout ops that pass ids on (slice, reshape, concat, transpose); the smallest when they
// reach several (per-field ids into tables of different sizes must fit the smallest);
// kAnyInteger when only `cast` reads them (numbers, such as an attention mask, not ids); 1 when
// no consumer bounds them.
inline constexpr int64_t kAnyInteger = std::numeric_limits<int64_t>::max();
int64_t id_range(const model::Graph& graph, const model::OpNode& input);

// Fills `count` samples of input op `input`, starting at mini-batch sample `first_sample` of
// iteration `iteration`: floats uniform in [-1, 1); int64 ids uniform over the range their
// consumer accepts (embedding rows, class count). `out` is float* or int64_t* by the dtype.
void fill_input(const model::Graph& graph, const model::OpNode& input, uint64_t seed,
                int64_t iteration, int64_t first_sample, int64_t count, void* out);

}  // namespace gp::exec
