// What torch's ONNX optimiser (torch.onnx.export(dynamo=True) runs it unless optimize=False)
// does to parameters, which it takes for constants, undone from the nodes' fx_node metadata so
// that the model trains as torch's: a linear's transposed weight folded into an initializer of
// its own becomes a view of the weight; a linear's or convolution's bias of zeros that it
// dropped trains from zero. (Parameters of equal values that it merged are split when the file
// loads: onnx_file.cc.)
#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gp/model/onnx_file.h"
#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

// The parameters a node's torch call reads, by torch.export's placeholder names (p_<name>).
std::set<std::string> named_parameters(const onnx::NodeProto& n) {
  std::set<std::string> named;
  for (auto& name : fx_names(model::onnx_node_metadata(n, "pkg.torch.onnx.fx_node"))) {
    if (name.rfind("p_", 0) == 0) named.insert(std::move(name));
  }
  return named;
}

}  // namespace

void Importer::find_folded_transposes() {
  // torch names a parameter FQN "lm_head.weight" in fx_node as "%p_lm_head_weight".
  std::map<std::string, std::string> by_fx_name;
  for (const auto& t : g_.initializer()) by_fx_name[fx_name("p_", t.name())] = t.name();
  auto transposes = [this](const std::string& folded, const std::string& param) {
    const auto fd = weight_dims(folded), pd = weight_dims(param);
    if (fd.size() != 2 || pd.size() != 2 || fd[0] != pd[1] || fd[1] != pd[0]) return false;
    const auto f = float_values(folded), p = float_values(param);
    if (!f || !p || f->size() != p->size()) return false;
    for (int64_t r = 0; r < fd[0]; ++r) {
      for (int64_t c = 0; c < fd[1]; ++c) {
        if ((*f)[static_cast<size_t>(r * fd[1] + c)] != (*p)[static_cast<size_t>(c * fd[0] + r)]) {
          return false;
        }
      }
    }
    // A constant matrix (zeros, ones) is the transpose of any other of its size: not evidence.
    return std::adjacent_find(f->begin(), f->end(), std::not_equal_to<>()) != f->end();
  };
  auto view = [this](const std::string& folded, const std::string& param) {
    view_of_[folded] = {param, true};
    folded_transposes_.insert(folded);
  };
  for (const auto& n : g_.node()) {
    const std::set<std::string> named = named_parameters(n);
    for (int k : weight_positions(n)) {
      if (k >= n.input_size() || !consts_.count(n.input(k)) || view_of_.count(n.input(k))) continue;
      const std::string& folded = n.input(k);
      if (named.count(fx_name("p_", folded))) continue;  // a named parameter itself
      for (const auto& fx : named) {
        const auto param = by_fx_name.find(fx);
        if (param != by_fx_name.end() && param->second != folded &&
            transposes(folded, param->second)) {
          view(folded, param->second);
          break;
        }
      }
      // The TorchScript exporter's constant folding names what it makes "onnx::<Op>_<n>" and
      // records no parameter: the one parameter whose exact transpose it is.
      if (!named.empty() || folded.rfind("onnx::", 0) != 0) continue;
      std::vector<std::string> matches;
      for (const auto& t : g_.initializer()) {
        if (t.name().rfind("onnx::", 0) != 0 && transposes(folded, t.name())) {
          matches.push_back(t.name());
        }
      }
      if (matches.size() == 1) view(folded, matches[0]);
    }
  }
}

void Importer::find_held_parameters() {
  // Initializers, and graph inputs of a graph-only export (merged ones were split on loading).
  for (const auto& t : g_.initializer()) held_params_.insert(fx_name("p_", t.name()));
  for (const auto& in : g_.input()) held_params_.insert(fx_name("p_", in.name()));
}

bool Importer::dropped_bias(int i) const {
  const auto& n = g_.node(i);
  const std::string fx = model::onnx_node_metadata(n, "pkg.torch.onnx.fx_node");
  static const char* const kCalls[] = {"aten.linear", "aten.addmm", "aten.conv", "aten._conv"};
  if (std::none_of(std::begin(kCalls), std::end(kCalls),
                   [&](const char* c) { return fx.find(c) != std::string::npos; })) {
    return false;
  }
  const auto named = named_parameters(n);
  return std::any_of(named.begin(), named.end(), [this](const std::string& p) {
    return p.ends_with("_bias") && !held_params_.count(p);
  });
}

void Importer::train_dropped_bias(const std::string& missing, const std::string& id,
                                  const std::string& param, int64_t width) {
  set_values(id, param, std::vector<float>(static_cast<size_t>(width), 0.0f));
  if (options_.warnings == nullptr) return;
  options_.warnings->push_back(
      missing +
      " (torch's ONNX optimiser drops an all-zero one); it trains from zero, as in torch, but "
      "`export` cannot write it into the ONNX model (only into a .safetensors or .npz export "
      "with --names ops). Export from torch with optimize=False to keep it.");
}

}  // namespace gp::model::onnx_detail
