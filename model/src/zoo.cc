#include "gp/model/zoo.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "gp/model/model_io.h"
#include "gp/model/onnx_import.h"
#include "zoo_models.h"

namespace gp::model {
namespace {

const std::vector<ZooEntry>& entries() {
  // Defaults follow the GraphPipe paper's appendix A.2 (see docs/model-zoo.md for sources).
  static const std::vector<ZooEntry> kEntries = {
      {"mmt",
       "multi-modal transformer: branches x layers post-LN transformer layers, "
       "branches concatenated, linear head, MSE loss",
       {{"branches", "4", "parallel modality branches"},
        {"layers", "8", "transformer layers per branch"},
        {"seq", "256", "sequence length"},
        {"hidden", "1024", "hidden size"},
        {"heads", "16", "attention heads"},
        {"ffn", "4096", "feed-forward hidden size"}},
       &zoo::build_mmt},
      {"dlrm",
       "DLRM: dense MLP branches and embedding-bag branches, concatenated, top MLP",
       {{"dense_branches", "7", "dense feature branches"},
        {"sparse_branches", "7", "embedding-bag branches"},
        {"dense_in", "4096", "dense features per branch"},
        {"dense_layers", "4", "linear layers per dense branch"},
        {"width", "4096", "width of every dense and top layer"},
        {"rows", "1000000", "embedding rows per table"},
        {"dim", "64", "embedding dimension"},
        {"bag", "100", "ids per bag"},
        {"top_layers", "2", "hidden top-MLP layers before the 1-wide output"}},
       &zoo::build_dlrm},
      {"candle-uno",
       "CANDLE-Uno: feature branches of linear layers, concatenated with two dose "
       "scalars, top MLP, 1 output, MSE loss",
       {{"branches", "7", "feature branches"},
        {"layers", "4", "linear layers per branch"},
        {"width", "4096", "width of every layer"},
        {"inputs", "942,5270,5270,5270,2048,2048,2048",
         "feature widths (cell rnaseq, drug descriptors x3, drug fingerprints x3), cycled"},
        {"top_layers", "2", "hidden top layers before the 1-wide output"}},
       &zoo::build_candle_uno},
      {"transformer",
       "sequential transformer with the MMT layer configuration (control case)",
       {{"layers", "32", "transformer layers"},
        {"seq", "256", "sequence length"},
        {"hidden", "1024", "hidden size"},
        {"heads", "16", "attention heads"},
        {"ffn", "4096", "feed-forward hidden size"}},
       &zoo::build_transformer},
      {"nbranch",
       "synthetic n-branch model: each branch is layers x (attention, 2 linear), "
       "concatenated (branch-count sweeps; the paper's case study at branches=2)",
       {{"branches", "8", "parallel branches"},
        {"layers", "4", "blocks per branch"},
        {"seq", "128", "sequence length"},
        {"hidden", "1024", "hidden size"},
        {"heads", "16", "attention heads"}},
       &zoo::build_nbranch},
      {"tiny-mmt",
       "tiny multi-modal transformer for CPU tests",
       {{"branches", "2", ""},
        {"layers", "2", ""},
        {"seq", "8", ""},
        {"hidden", "16", ""},
        {"heads", "2", ""},
        {"ffn", "32", ""}},
       &zoo::build_mmt},
      {"tiny-dlrm",
       "tiny DLRM for CPU tests",
       {{"dense_branches", "2", ""},
        {"sparse_branches", "2", ""},
        {"dense_in", "16", ""},
        {"dense_layers", "2", ""},
        {"width", "16", ""},
        {"rows", "50", ""},
        {"dim", "8", ""},
        {"bag", "4", ""},
        {"top_layers", "1", ""}},
       &zoo::build_dlrm},
      {"tiny-candle-uno",
       "tiny CANDLE-Uno for CPU tests",
       {{"branches", "3", ""},
        {"layers", "2", ""},
        {"width", "16", ""},
        {"inputs", "12,20,16", ""},
        {"top_layers", "1", ""}},
       &zoo::build_candle_uno},
      {"tiny-transformer",
       "tiny sequential transformer for CPU tests",
       {{"layers", "4", ""},
        {"seq", "8", ""},
        {"hidden", "16", ""},
        {"heads", "2", ""},
        {"ffn", "32", ""}},
       &zoo::build_transformer},
      {"tiny-nbranch",
       "tiny n-branch model for CPU tests",
       {{"branches", "3", ""},
        {"layers", "2", ""},
        {"seq", "8", ""},
        {"hidden", "16", ""},
        {"heads", "2", ""}},
       &zoo::build_nbranch},
  };
  return kEntries;
}

std::string known_names() {
  std::string s;
  for (const auto& e : entries()) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

}  // namespace

std::span<const ZooEntry> zoo_entries() { return entries(); }

const ZooEntry* find_zoo_entry(std::string_view name) {
  for (const auto& e : entries()) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

Result<graphpipe::v1::ModelGraph> build_zoo_model(std::string_view spec) {
  std::string_view rest = spec;
  if (rest.starts_with("zoo:")) rest.remove_prefix(4);
  const size_t q = rest.find('?');
  const std::string_view name = rest.substr(0, q);
  const ZooEntry* entry = find_zoo_entry(name);
  if (entry == nullptr) {
    return invalid_argument("--model: unknown zoo model '" + std::string(name) +
                            "' (known: " + known_names() + ")");
  }
  ZooParams params;
  for (const auto& p : entry->params) params[std::string(p.name)] = std::string(p.default_value);
  if (q != std::string_view::npos) {
    std::string_view query = rest.substr(q + 1);
    while (!query.empty()) {
      const size_t amp = query.find('&');
      const std::string_view item = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
      if (item.empty()) continue;
      const size_t eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size()) {
        return invalid_argument("--model: zoo parameter '" + std::string(item) +
                                "' is not of the form key=value");
      }
      const std::string key(item.substr(0, eq));
      auto it = params.find(key);
      if (it == params.end()) {
        std::string valid;
        for (const auto& p : entry->params)
          valid += (valid.empty() ? "" : ", ") + std::string(p.name);
        return invalid_argument("--model: zoo model '" + std::string(name) +
                                "' has no parameter '" + key + "' (parameters: " + valid + ")");
      }
      it->second = std::string(item.substr(eq + 1));
    }
  }
  // Counts of branches and layers multiply into operators: their product is bounded before
  // anything is built, so that layers=1000000000 is refused rather than built (the graph's own
  // operator limit, kMaxOps, then bounds what the dimensions cannot).
  constexpr int64_t kMaxStructure = 16384;
  int64_t structure = 1;
  std::string factors;
  for (const char* key :
       {"branches", "dense_branches", "sparse_branches", "layers", "dense_layers", "top_layers"}) {
    const auto it = params.find(key);
    if (it == params.end()) continue;
    char* end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (end == it->second.c_str() || *end != '\0' || v < 1) continue;  // the builder names it
    structure =
        std::min<int64_t>(structure * std::min<long long>(v, kMaxStructure + 1), kMaxStructure + 1);
    factors += (factors.empty() ? "" : " x ") + std::string(key) + " " + it->second;
  }
  if (structure > kMaxStructure) {
    return invalid_argument("--model " + std::string(spec) + ": " + factors + " exceeds " +
                            std::to_string(kMaxStructure) +
                            " (branches and layers multiply into operators)");
  }
  auto model = entry->build(params);
  if (!model.ok()) return model.status().with_context("--model " + std::string(spec));
  model->set_name(std::string(name));
  model->set_source("zoo:" + std::string(rest));
  return model;
}

Result<graphpipe::v1::ModelGraph> load_model(std::string_view spec_or_path) {
  if (spec_or_path.starts_with("zoo:")) return build_zoo_model(spec_or_path);
  if (spec_or_path.ends_with(".onnx")) return import_onnx(std::string(spec_or_path));
  graphpipe::v1::ModelGraph model;
  Status st = read_message(std::string(spec_or_path), &model);
  if (!st.ok()) return st.with_context("--model");
  if (model.source().empty()) model.set_source(std::string(spec_or_path));
  // A weights file named relative to the model file: from here on (plans), by its full path.
  if (!model.weights_file().empty() && std::filesystem::path(model.weights_file()).is_relative()) {
    model.set_weights_file(
        (std::filesystem::absolute(std::filesystem::path(spec_or_path)).parent_path() /
         model.weights_file())
            .lexically_normal()
            .string());
  }
  return model;
}

}  // namespace gp::model
