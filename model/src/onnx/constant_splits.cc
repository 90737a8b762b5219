// Constant folding of Split, SplitToSequence and SequenceAt: GPT-J splits a table gathered from
// its sinusoid buffer into sine and cosine (`torch.split(sincos, d // 2, dim=-1)`), constants
// whose pieces feed the rotary multiplications. Splits of activations become slices
// (convert.cc) and splits of trained weights parameters of their own (packed_params.cc).
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {

bool Importer::fold_split(const onnx::NodeProto& n) {
  const std::string& t = n.op_type();
  if ((t != "Split" && t != "SplitToSequence" && t != "SequenceAt") ||
      (!n.domain().empty() && n.domain() != "ai.onnx") || n.input_size() < 1) {
    return false;
  }
  if (t == "SequenceAt") {  // a piece of a folded sequence, at a constant position
    const auto seq = const_sequences_.find(n.input(0));
    const auto at = n.input_size() > 1 ? scalar(n.input(1)) : std::nullopt;
    if (seq == const_sequences_.end() || !at || n.output_size() != 1) return false;
    const auto count = static_cast<int64_t>(seq->second.size());
    if (!(std::fabs(*at) <= static_cast<double>(count))) return false;  // (NaN and huge too)
    auto pos = static_cast<int64_t>(*at);
    if (pos < 0) pos += count;
    if (pos < 0 || pos >= count) return false;  // convert() refuses it, naming the node
    keep(n.output(0), seq->second[static_cast<size_t>(pos)]);
    return true;
  }
  std::map<std::string, EvalValue> inputs;
  for (int k = 0; k < n.input_size(); ++k) {
    const std::string& name = n.input(k);
    if (name.empty() || inputs.count(name)) continue;
    // Pieces of a trained weight train (packed_params.cc); pieces of a value that depends on
    // the batch are not one constant.
    if (act_.count(name) || sample_consts_.count(name) || param_dep_.count(name) ||
        param_like(name)) {
      return false;
    }
    auto v = const_tensor(name);
    if (!v || has_nan(v->values)) {
      return false;
    }
    inputs[name].tensor = std::move(*v);
  }
  auto values = evaluate_outputs(n, inputs);
  if (!values.ok()) {
    for (const auto& out : n.output())
      fold_errors_[out] = "not folded: " + values.status().message();
    return false;
  }
  for (auto& [name, value] : *values) {
    if (value.sequence) {
      const_sequences_[name] = std::move(value.items);
      continue;
    }
    keep(name, std::move(value.tensor));
  }
  return true;
}

void Importer::keep(const std::string& name, EvalTensor v, bool shape_math) {
  if (shape_math && v.dims.size() <= 1 && v.values.size() <= 64 && !has_nan(v.values)) {
    folded_[name] = v.values;
    if (v.ints) folded_int_.insert(name);
  }
  tensors_[name] = std::move(v);
}

}  // namespace gp::model::onnx_detail
