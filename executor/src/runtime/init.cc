#include "gp/exec/init.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace gp::exec {

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

float Rng::uniform(float lo, float hi) {
  const double u = static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
  return static_cast<float>(lo + (hi - lo) * u);
}

int64_t Rng::below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }

uint64_t hash_combine(uint64_t h, std::string_view s) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return Rng(h).next();
}

uint64_t hash_combine(uint64_t h, uint64_t v) {
  return Rng(h ^ (v * 0x9E3779B97F4A7C15ULL)).next();
}

void init_param(const model::OpNode& op, int param_index, uint64_t seed, std::span<float> out) {
  const auto& spec = op.proto->params(param_index);
  const std::string& name = spec.name();
  // Values that came with the model (validated by Graph::build to fit the parameter).
  if (auto it = op.proto->param_values().find(name);
      it != op.proto->param_values().end() && it->second.size() == out.size_bytes()) {
    std::memcpy(out.data(), it->second.data(), out.size_bytes());
    return;
  }
  Rng rng(hash_combine(hash_combine(seed, op.id()), name));
  if (op.type() == "layer_norm" || op.type() == "batch_norm") {
    const float v = name == "gamma" ? 1.0f : 0.0f;
    for (float& x : out) x = v;
    return;
  }
  if (name.find("bias") != std::string::npos) {
    for (float& x : out) x = 0.0f;
    return;
  }
  float bound = 0.05f;  // embeddings (and rank-1 weights)
  if (op.type() != "embedding_bag" && op.type() != "embedding" && spec.shape_size() >= 2) {
    // [out, in] or [out, C, kh, kw]: fan-in = the product of all but the first dim.
    int64_t fan_in = 1;
    for (int d = 1; d < spec.shape_size(); ++d) fan_in *= spec.shape(d);
    bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  }
  for (float& x : out) x = rng.uniform(-bound, bound);
}

namespace {

// The smallest range of the id consumers `op`'s ids reach, through the layout ops that pass ids on
// (ids[:, f] of per-field ids is a slice); 0 when they reach none.
int64_t reached_range(const model::Graph& graph, const model::OpNode& op, int depth) {
  int64_t range = 0;
  auto take = [&range](int64_t r) { range = range == 0 ? r : std::min(range, r); };
  for (int s : op.succs) {
    const auto& consumer = graph.op(s);
    const std::string_view t = consumer.type();
    if (t == "embedding_bag" || t == "embedding") {
      take(consumer.proto->params(0).shape(0));
    } else if (t == "softmax_cross_entropy") {
      const auto& logits = consumer.input_specs[0];
      take(logits.shape(logits.shape_size() - 1));
    } else if (t == "cast") {
      take(kAnyInteger);  // numbers: any value, unless a table reads them too
    } else if ((t == "slice" || t == "reshape" || t == "concat" || t == "transpose") &&
               depth < 64) {
      if (const int64_t r = reached_range(graph, consumer, depth + 1); r > 0) take(r);
    }
  }
  return range;
}

}  // namespace

int64_t id_range(const model::Graph& graph, const model::OpNode& input) {
  // Ids reaching several tables (per-field ids) must fit the smallest of them.
  return std::max<int64_t>(reached_range(graph, input, 0), 1);
}

void fill_input(const model::Graph& graph, const model::OpNode& input, uint64_t seed,
                int64_t iteration, int64_t first_sample, int64_t count, void* out) {
  const auto& spec = input.proto->outputs(0);
  const int64_t per_sample = model::num_elements(spec);
  const bool ids = spec.dtype() == graphpipe::v1::DATA_TYPE_INT64 ||
                   spec.dtype() == graphpipe::v1::DATA_TYPE_INT32;
  int64_t range = ids ? id_range(graph, input) : 1;
  if (range == kAnyInteger) range = 2;  // integers read as numbers: a 0/1 mask
  const uint64_t stream =
      hash_combine(hash_combine(seed, input.id()), static_cast<uint64_t>(iteration));
  for (int64_t s = 0; s < count; ++s) {
    Rng rng(hash_combine(stream, static_cast<uint64_t>(first_sample + s)));
    if (ids) {
      int64_t* dst = static_cast<int64_t*>(out) + s * per_sample;
      for (int64_t e = 0; e < per_sample; ++e) dst[e] = rng.below(range);
    } else {
      float* dst = static_cast<float*>(out) + s * per_sample;
      for (int64_t e = 0; e < per_sample; ++e) dst[e] = rng.uniform(-1.0f, 1.0f);
    }
  }
}

}  // namespace gp::exec
