// A harness for one CPU kernel of a built graph: host buffers for everything the kernel touches,
// forward, backward and the objective sum(output * gout). Shared by the kernel tests.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gp/exec/op_kernel.h"
#include "gp/model/builder.h"
#include "gp/model/graph.h"
#include "models.h"

namespace gp::testing {

using exec::OpArgs;
using exec::TensorView;
using model::GraphBuilder;
using model::ModelGraph;
using model::TensorRef;
using model::TensorSpec;

inline constexpr auto kInt64 = graphpipe::v1::DATA_TYPE_INT64;

inline bool is_int(const TensorSpec& s) {
  return s.dtype() == graphpipe::v1::DATA_TYPE_INT64 || s.dtype() == graphpipe::v1::DATA_TYPE_INT32;
}

// One op of a built graph with host buffers for everything its kernel touches. The op under test
// has id "op"; float inputs and parameters start uniform in [-1, 1], id inputs at 0.
struct Harness {
  explicit Harness(gp::model::Graph g) : graph(std::move(g)) {}

  gp::model::Graph graph;
  int index = -1;
  std::unique_ptr<gp::exec::OpKernel> kernel;
  int64_t batch = 0;
  std::vector<std::vector<float>> fin;    // float inputs (empty for id inputs)
  std::vector<std::vector<int64_t>> iin;  // id inputs (empty for float inputs)
  std::vector<std::vector<float>> params;
  std::vector<float> out, saved, workspace;  // an int64 output takes two floats per element
  bool int_out = false;
  std::vector<std::vector<float>> gin;  // empty: pass a null gradient
  std::vector<std::vector<float>> gparams;
  std::vector<float> gout;

  const gp::model::OpNode& op() const { return graph.op(index); }
  bool is_loss() const { return op().info->is_loss; }

  OpArgs args(std::vector<TensorView>& in, std::vector<TensorView>& outs, std::vector<float*>& ps) {
    in.clear();
    ps.clear();
    for (size_t i = 0; i < fin.size(); ++i) {
      void* data = fin[i].empty() ? static_cast<void*>(iin[i].data()) : fin[i].data();
      in.push_back({data, gp::model::num_elements(op().input_specs[i])});
    }
    outs = {{out.data(), static_cast<int64_t>(gout.size()) / batch}};
    for (auto& p : params) ps.push_back(p.data());
    OpArgs a;
    a.batch = batch;
    a.inputs = in;
    a.outputs = outs;
    a.params = ps;
    a.saved = saved.data();
    // Workspace holds nothing between calls: each call gets it full of NaNs.
    std::fill(workspace.begin(), workspace.end(), std::numeric_limits<float>::quiet_NaN());
    a.workspace = workspace.data();
    return a;
  }

  void forward() {
    std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());
    std::vector<TensorView> in, outs;
    std::vector<float*> ps;
    kernel->forward(args(in, outs, ps));
  }

  // `fresh`: OpArgs::fresh_grad_inputs (the kernel overwrites those input gradients).
  void backward(uint64_t fresh = 0) {
    std::vector<TensorView> in, outs, gi, go;
    std::vector<float*> ps, gp;
    OpArgs a = args(in, outs, ps);
    for (size_t i = 0; i < gin.size(); ++i) {
      gi.push_back({gin[i].empty() ? nullptr : gin[i].data(), in[i].per_sample});
    }
    go = {{gout.data(), outs[0].per_sample}};
    for (auto& g : gparams) gp.push_back(g.data());
    a.grad_inputs = gi;
    a.grad_outputs = go;
    a.param_grads = gp;
    a.fresh_grad_inputs = fresh;
    kernel->backward(a);
  }

  // Zeroed gradient buffers for every float input (except those in `skip`) and parameter.
  void zero_grads(const std::set<size_t>& skip = {}) {
    gin.assign(fin.size(), {});
    for (size_t i = 0; i < fin.size(); ++i) {
      if (!fin[i].empty() && skip.count(i) == 0) gin[i].assign(fin[i].size(), 0.0f);
    }
    gparams.clear();
    for (const auto& p : params) gparams.emplace_back(p.size(), 0.0f);
  }

  // The objective: sum of output * gout, in double.
  double objective() {
    forward();
    double j = 0;
    const auto* ids = reinterpret_cast<const int64_t*>(out.data());
    for (size_t k = 0; k < gout.size(); ++k) {
      j += (int_out ? static_cast<double>(ids[k]) : static_cast<double>(out[k])) * gout[k];
    }
    return j;
  }
};

inline Harness make_harness(const ModelGraph& model, int64_t batch = 2, unsigned seed = 7) {
  Harness h(build_graph(model));
  h.index = h.graph.index_of("op");
  REQUIRE(h.index >= 0);
  auto k = gp::exec::make_cpu_kernel(h.op());
  INFO(k.status().to_string());
  REQUIRE(k.ok());
  h.kernel = std::move(k).value();
  h.batch = batch;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const TensorSpec& spec : h.op().input_specs) {
    const auto n = static_cast<size_t>(batch * gp::model::num_elements(spec));
    h.fin.emplace_back();
    h.iin.emplace_back();
    if (is_int(spec)) {
      h.iin.back().assign(n, 0);
    } else {
      for (size_t i = 0; i < n; ++i) h.fin.back().push_back(u(rng));
    }
  }
  for (const auto& p : h.op().proto->params()) {
    int64_t n = 1;
    for (int64_t d : p.shape()) n *= d;
    h.params.emplace_back();
    for (int64_t i = 0; i < n; ++i) h.params.back().push_back(u(rng));
  }
  const auto out_elems =
      static_cast<size_t>(batch * gp::model::num_elements(h.op().proto->outputs(0)));
  h.int_out = is_int(h.op().proto->outputs(0));
  h.out.resize(h.int_out ? 2 * out_elems : out_elems);
  // Garbage scratch: a kernel reading saved values it never wrote produces NaNs.
  h.saved.assign(static_cast<size_t>(batch * h.kernel->saved_floats_per_sample()),
                 std::numeric_limits<float>::quiet_NaN());
  h.workspace.resize(static_cast<size_t>(batch * h.kernel->workspace_floats_per_sample()));
  h.gout.resize(out_elems);
  for (float& g : h.gout) g = h.is_loss() ? 1.0f : u(rng);
  h.zero_grads();
  return h;
}

// Sets attribute `name` of op `id` in a builder's model.
template <typename T>
void set_op_attr(GraphBuilder& b, const std::string& id, const std::string& name, T value) {
  for (auto& op : *b.model().mutable_ops()) {
    if (op.id() == id) gp::model::set_attr(op, name, value);
  }
}

// Finishes a model whose op "op" is not a loss: mse_loss against a target of `shape`.
inline ModelGraph with_loss(GraphBuilder& b, const TensorRef& y, std::vector<int64_t> shape) {
  b.add_loss(b.mse_loss("loss", y, b.input("target", std::move(shape))));
  return b.finish();
}

}  // namespace gp::testing
