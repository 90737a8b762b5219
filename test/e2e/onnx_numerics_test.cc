// Imported ONNX models compute what their ONNX graphs define: the forward pass of the imported
// graph on the CPU kernels, with the imported weights, against the outputs make_models.py's
// reference interpreter computed from the ONNX graph for the same input (ONNX test-data layout).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "../support/onnx_tensors.h"
#include "gp/exec/init.h"
#include "gp/exec/op_kernel.h"
#include "gp/model/graph.h"
#include "gp/model/model_io.h"
#include "gp/model/onnx_import.h"
#include "onnx/onnx_pb.h"

namespace gp {
namespace {

using testing::floats;
using testing::load_tensor;

std::string data(const std::string& name) {
  return std::string(GP_TEST_DATA_DIR) + "/onnx/" + name;
}

// Forward pass of every op except the losses over `batch` samples, inputs by op id; returns the
// values of the tensor the first loss reads (the ONNX graph's output).
std::vector<float> forward(const model::Graph& g,
                           const std::map<std::string, std::vector<float>>& inputs, int64_t batch) {
  std::vector<std::vector<float>> values(static_cast<size_t>(g.num_ops()));
  int output = -1;
  for (int i : g.topo_order()) {
    const auto& op = g.op(i);
    if (op.info->is_loss) {
      if (output < 0) output = g.index_of(op.proto->inputs(0).op());
      continue;
    }
    if (op.info->is_input) {
      if (auto it = inputs.find(op.id()); it != inputs.end())
        values[static_cast<size_t>(i)] = it->second;
      continue;
    }
    auto kernel = exec::make_cpu_kernel(op);
    INFO(kernel.status().to_string());
    REQUIRE(kernel.ok());
    std::vector<std::vector<float>> params(static_cast<size_t>(op.proto->params_size()));
    std::vector<float*> param_ptrs;
    for (int p = 0; p < op.proto->params_size(); ++p) {
      int64_t n = 1;
      for (int64_t d : op.proto->params(p).shape()) n *= d;
      params[static_cast<size_t>(p)].resize(static_cast<size_t>(n));
      exec::init_param(op, p, 1, params[static_cast<size_t>(p)]);
      param_ptrs.push_back(params[static_cast<size_t>(p)].data());
    }
    std::vector<exec::TensorView> in;
    for (int k = 0; k < op.proto->inputs_size(); ++k) {
      auto& producer = values[static_cast<size_t>(g.index_of(op.proto->inputs(k).op()))];
      in.push_back({producer.data(), model::num_elements(op.input_specs[static_cast<size_t>(k)])});
    }
    const int64_t per_sample = model::num_elements(op.proto->outputs(0));
    auto& out_values = values[static_cast<size_t>(i)];
    out_values.assign(static_cast<size_t>(batch * per_sample),
                      std::numeric_limits<float>::quiet_NaN());
    std::vector<float> saved(static_cast<size_t>(batch * (*kernel)->saved_floats_per_sample()));
    std::vector<float> workspace(
        static_cast<size_t>(batch * (*kernel)->workspace_floats_per_sample()));
    const exec::TensorView out{out_values.data(), per_sample};
    exec::OpArgs a;
    a.batch = batch;
    a.inputs = in;
    a.outputs = {&out, 1};
    a.params = param_ptrs;
    a.saved = saved.data();
    a.workspace = workspace.data();
    (*kernel)->forward(a);
  }
  REQUIRE(output >= 0);
  return values[static_cast<size_t>(output)];
}

}  // namespace

TEST_CASE("imported ONNX models compute the outputs their ONNX graphs define") {
  for (const char* name : {"transformer_block", "inception_block"}) {
    INFO(name);
    auto model = model::import_onnx(data(std::string(name) + ".onnx"));
    INFO(model.status().to_string());
    REQUIRE(model.ok());
    auto g = model::Graph::build(*model);
    REQUIRE(g.ok());
    const std::string dir = data(std::string(name) + "/test_data_set_0/");
    const auto x = load_tensor(dir + "input_0.pb");
    const auto y = load_tensor(dir + "output_0.pb");
    const int64_t batch = x.dims(0);
    const auto got = forward(*g, {{x.name(), floats(x)}}, batch);
    testing::check_close(got, floats(y), 1e-4, /*min_abs=*/0.1);
  }
}

}  // namespace gp

namespace gp {

// The recurrent forms torch does not export (make_recurrent_models.py; torch's own LSTM and GRU
// exports are checked with their training step in onnx_torch_test.cc): GRU without
// linear_before_reset, reading Y and Y_h; a reverse LSTM over batch-first tensors (layout 1)
// whose initial h and c are activations, reading Y and Y_c.
TEST_CASE("unrolled GRU and LSTM compute what ONNX defines for their other attribute values") {
  for (const char* name : {"recurrent/gru_lbr0", "recurrent/lstm_reverse_h0"}) {
    INFO(name);
    auto model = model::import_onnx(data(std::string(name) + ".onnx"));
    INFO(model.status().to_string());
    REQUIRE(model.ok());
    auto g = model::Graph::build(*model);
    REQUIRE(g.ok());
    const std::string dir = data(std::string(name) + "/test_data_set_0/");
    const auto x = load_tensor(dir + "input_0.pb");
    const auto y = load_tensor(dir + "output_0.pb");
    const auto got = forward(*g, {{x.name(), floats(x)}}, x.dims(0));
    testing::check_close(got, floats(y), 1e-5, /*min_abs=*/0.1);
  }
}

}  // namespace gp
