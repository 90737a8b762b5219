// export_trained: checkpoint -> the source ONNX model with trained initializers, or the trained
// tensors by the user's names as .safetensors or .npz.
#include "runtime/export.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <tuple>

#include "gp/exec/reference_trainer.h"
#include "gp/model/onnx_file.h"
#include "gp/model/param_layout.h"
#include "onnx/onnx_pb.h"
#include "runtime/checkpoint.h"
#include "runtime/weights_out.h"

namespace gp::exec {
namespace {

using model::scatter_param;

constexpr int kOnnxFloat = 1;

// Parameter `name` of `op` within the op's trained values (ParamSpec order); empty if absent.
std::span<const float> param_values(const model::OpNode& op, std::span<const float> values,
                                    const std::string& name) {
  size_t offset = 0;
  for (const auto& spec : op.proto->params()) {
    size_t n = 1;
    for (int64_t d : spec.shape()) n *= static_cast<size_t>(d);
    if (spec.name() == name) return values.subspan(offset, n);
    offset += n;
  }
  return {};
}

std::vector<float> float_data(const onnx::TensorProto& t) {
  std::vector<float> v(t.float_data().begin(), t.float_data().end());
  const size_t typed = v.size();
  v.resize(typed + t.raw_data().size() / sizeof(float));
  std::memcpy(v.data() + typed, t.raw_data().data(), t.raw_data().size() / sizeof(float) * 4);
  return v;
}

// The trained parameters written into the source ONNX model, in named steps: read the source,
// collect its float tensors, place every sourced parameter into its tensor, note what could not
// be placed, then write the touched tensors back and the model out. For .safetensors and .npz
// (`by_name`) the placed tensors are the result instead, and tensors of other float types are
// taken too (as float32, which the parameters trained in).
class OnnxExport {
 public:
  OnnxExport(const model::Graph& graph, const StageRunner& runner, const ExportOptions& options,
             std::vector<std::string>* notes, bool by_name = false)
      : graph_(graph),
        runner_(runner),
        options_(options),
        notes_(notes),
        in_(options.onnx.empty() ? graph.model().source() : options.onnx),
        by_name_(by_name) {}

  Status run() {
    GP_RETURN_IF_ERROR(place_all());
    write_tensors();
    // A model whose weights were kept beside it comes back the same way (`<out>.data`).
    return model::write_onnx_file(options_.out, onnx_model_, file_info_.external_data);
  }

  Status place_all() {
    GP_RETURN_IF_ERROR(read_source());
    collect_tensors();
    collect_identities();
    for (const auto& src : graph_.model().param_sources()) {
      GP_RETURN_IF_ERROR(place(src));
      sourced_.insert(src.op() + "." + src.param());
    }
    restore_dropped_biases();
    note_unsourced();
    return ok_status();
  }

  // After place_all: each tensor some parameter was taken from, by name. A parameter's first
  // source is the tensor it was taken from; later ones are transposed copies the exporter folded
  // (not the user's), which are left out.
  std::vector<NamedTensor> user_tensors() {
    std::set<std::pair<std::string, std::string>> seen;
    std::set<std::string> names;
    for (const auto& src : graph_.model().param_sources()) {
      if (seen.insert({src.op(), src.param()}).second) names.insert(src.initializer());
    }
    names.insert(restored_.begin(), restored_.end());
    std::vector<NamedTensor> out;
    for (const auto& name : names) {
      const auto& [dims, values] = tensors_.at(name);
      out.push_back({name, dims, values});
      // torch names the constants its exporter makes "onnx::<op>_<n>": a weight whose transpose
      // it folded (eval-mode export) keeps only that name and the transposed layout.
      if (name.starts_with("onnx::") && notes_ != nullptr) {
        notes_->push_back(
            "'" + name + "' is a tensor torch's exporter made (a parameter's transpose, folded); " +
            in_ + " does not keep the parameter's own name, so " + options_.out +
            " holds it under this one, as the file does (export from torch with "
            "do_constant_folding=False to keep it)");
      }
    }
    return out;
  }

 private:
  // A tensor to write: its dims and float values.
  using Values = std::pair<std::vector<int64_t>, std::vector<float>>;

  Status read_source() {
    if (by_name_) {
      return model::read_onnx_file(in_, &onnx_model_, &file_info_)
          .with_context(
              "--onnx names the file the model was imported from (the names and shapes "
              "of its tensors are written; --names ops writes GraphPipe's)");
    }
    if (graph_.model().param_sources_size() == 0) {
      return invalid_argument("--out " + options_.out +
                              ": the model records no ONNX sources for its parameters (only a "
                              "model imported from ONNX exports as ONNX; use an .npz)");
    }
    GP_RETURN_IF_ERROR(model::read_onnx_file(in_, &onnx_model_, &file_info_)
                           .with_context("--onnx names the file the model was imported from"));
    return ok_status();
  }

  // The tensors to write: existing initializers, or weight graph inputs (export_params=False).
  void collect_tensors() {
    g_ = onnx_model_.mutable_graph();
    std::set<std::string> sourced;
    for (const auto& src : graph_.model().param_sources()) sourced.insert(src.initializer());
    for (const auto& t : g_->initializer()) {
      if (t.data_type() == kOnnxFloat) {
        tensors_[t.name()] = {{t.dims().begin(), t.dims().end()}, float_data(t)};
      } else if (by_name_ && sourced.count(t.name())) {
        // Imported by widening (float16, bfloat16, float64): every element is a parameter's.
        int64_t n = 1;
        for (int64_t d : t.dims()) n *= d;
        tensors_[t.name()] = {{t.dims().begin(), t.dims().end()},
                              std::vector<float>(static_cast<size_t>(n), 0.0f)};
        if (notes_ != nullptr) {
          notes_->push_back("'" + t.name() + "' is ONNX data type " +
                            std::to_string(t.data_type()) + " in " + in_ + "; " + options_.out +
                            " holds it as float32");
        }
      }
    }
    for (const auto& vi : g_->input()) {
      if (tensors_.count(vi.name()) || !vi.type().has_tensor_type()) continue;
      std::vector<int64_t> dims;
      int64_t n = 1;
      bool known = true;
      for (const auto& d : vi.type().tensor_type().shape().dim()) {
        known = known && d.has_dim_value();
        dims.push_back(d.dim_value());
        n *= d.dim_value();
      }
      if (known) tensors_[vi.name()] = {dims, std::vector<float>(static_cast<size_t>(n), 0.0f)};
    }
  }

  // Identity outputs of weights are parameters of their own (torch's de-duplication): they get
  // their own initializer, and their Identity node goes.
  void collect_identities() {
    for (int k = 0; k < g_->node_size(); ++k) {
      const auto& n = g_->node(k);
      if (n.op_type() == "Identity" && n.input_size() == 1 && n.output_size() == 1) {
        identity_of_[n.output(0)] = k;
      }
    }
    for (bool grew = true; grew;) {  // chains of Identity
      grew = false;
      for (const auto& [name, k] : identity_of_) {
        auto src = tensors_.find(g_->node(k).input(0));
        if (src != tensors_.end() && !tensors_.count(name)) {
          tensors_[name] = src->second;
          grew = true;
        }
      }
    }
  }

  // Why a source's tensor is not among the float tensors.
  Status missing_tensor(const graphpipe::v1::ParamSource& src) const {
    for (const auto& t : g_->initializer()) {
      if (t.name() != src.initializer()) continue;
      // Imported by widening (float16, bfloat16, float64): writing float32 values back into
      // it would change the graph's types.
      return invalid_argument(in_ + ": '" + t.name() + "' (" + src.op() + "." + src.param() +
                              ") is stored as ONNX data type " + std::to_string(t.data_type()) +
                              ", not float32; export it with --out FILE.npz");
    }
    return invalid_argument(in_ + ": has no float tensor '" + src.initializer() + "' for " +
                            src.op() + "." + src.param() + " (another source model?)");
  }

  // One parameter's trained values into its place in its tensor. Each place in a tensor is
  // written once; untied copies of one weight (--untie-weights) all map to it, and the first
  // one's values win.
  Status place(const graphpipe::v1::ParamSource& src) {
    const int op = graph_.index_of(src.op());
    if (op < 0) return invalid_argument("param_sources: op '" + src.op() + "' is not in the model");
    auto it = tensors_.find(src.initializer());
    if (it == tensors_.end()) return missing_tensor(src);
    const auto p = param_values(graph_.op(op), runner_.op_params(op), src.param());
    if (p.empty()) {
      return invalid_argument("param_sources: " + src.op() + " has no parameter '" + src.param() +
                              "'");
    }
    const std::string who = src.op() + "." + src.param();
    const auto key =
        std::make_tuple(src.initializer(), static_cast<int>(src.layout()), src.offset());
    if (auto w = placed_.find(key); w != placed_.end()) {
      if (!std::equal(p.begin(), p.end(), w->second.values.begin(), w->second.values.end()) &&
          notes_ != nullptr) {
        notes_->push_back("'" + src.initializer() + "' was trained as independent copies (" +
                          w->second.who + ", " + who + "); the export holds " + w->second.who +
                          "'s values");
      }
      return ok_status();
    }
    placed_[key] = {who, p};
    touched_.insert(src.initializer());
    return scatter_param(p, it->second.first, model::PlacedLayout{src.layout(), src.offset()},
                         it->second.second)
        .with_context(in_ + ": param_sources: " + who + " -> '" + src.initializer() +
                      "' (another source model?)");
  }

  // A Gemm's, Conv's or ConvTranspose's bias that torch's optimiser dropped (all zeros) trained
  // as the op's "bias" (a linear's) or "out_bias" (an attention's output projection): it goes
  // back into the node that reads the op's matching weight, as its bias input, named as the
  // module names it where the file's graph signature says.
  void restore_dropped_biases() {
    std::map<std::string, std::string> weight_of;  // "<op>.<param>" -> its tensor
    for (const auto& src : graph_.model().param_sources()) {
      weight_of.emplace(src.op() + "." + src.param(), src.initializer());
    }
    for (int i = 0; i < graph_.num_ops(); ++i) {
      const auto& op = graph_.op(i);
      for (const auto& spec : op.proto->params()) {
        const std::string& param = spec.name();
        if (!param.ends_with("bias") || sourced_.count(op.id() + "." + param)) continue;
        const auto weight =
            weight_of.find(op.id() + "." + param.substr(0, param.size() - 4) + "weight");
        if (weight == weight_of.end()) continue;
        onnx::NodeProto* n = biasless_reader(weight->second, op.id());
        const auto values = param_values(op, runner_.op_params(i), param);
        if (n == nullptr || values.empty()) continue;
        std::string name = model::dropped_bias_target(*g_, *n);
        if (name.empty() || tensors_.count(name)) name = op.id() + "." + param;
        if (tensors_.count(name)) continue;
        tensors_[name] = {{static_cast<int64_t>(values.size())}, {values.begin(), values.end()}};
        touched_.insert(name);
        restored_.push_back(name);
        n->add_input(name);
        sourced_.insert(op.id() + "." + param);
      }
    }
  }

  // The one Gemm (beta 1), Conv or ConvTranspose without a bias that reads `weight`; of several,
  // the one named `op`; nullptr when none or unclear.
  onnx::NodeProto* biasless_reader(const std::string& weight, const std::string& op) {
    std::vector<onnx::NodeProto*> found;
    for (auto& n : *g_->mutable_node()) {
      const bool gemm = n.op_type() == "Gemm";
      if ((gemm || n.op_type() == "Conv" || n.op_type() == "ConvTranspose") &&
          n.input_size() == 2 && n.input(1) == weight && (!gemm || gemm_beta(n) == 1.0f)) {
        if (n.name() == op) return &n;
        found.push_back(&n);
      }
    }
    return found.size() == 1 ? found[0] : nullptr;
  }

  static float gemm_beta(const onnx::NodeProto& n) {
    for (const auto& a : n.attribute()) {
      if (a.name() == "beta") return a.f();
    }
    return 1.0f;
  }

  // A parameter the ONNX model has no tensor for was trained all the same: say where its values
  // are.
  void note_unsourced() {
    for (int i = 0; i < graph_.num_ops() && notes_ != nullptr; ++i) {
      for (const auto& spec : graph_.op(i).proto->params()) {
        const std::string who = graph_.op(i).id() + "." + spec.name();
        if (sourced_.count(who)) continue;
        notes_->push_back(who + " has no tensor in " + in_ +
                          " (the exporter left it out); its trained values are not in " +
                          options_.out +
                          ", only in a .safetensors or .npz export with --names ops");
      }
    }
  }

  void set_values(onnx::TensorProto& t) {
    const auto& v = tensors_[t.name()].second;
    t.clear_float_data();
    t.set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  }

  // The touched tensors into the model: initializers rewritten, the others added (a weight input
  // of a graph-only export, an Identity's output, whose node goes).
  void write_tensors() {
    std::set<std::string> written;
    for (auto& t : *g_->mutable_initializer()) {
      if (!touched_.count(t.name())) continue;  // untrained tensors stay byte for byte
      set_values(t);
      written.insert(t.name());
    }
    for (const auto& tensor : touched_) {
      if (written.count(tensor)) continue;
      if (auto id = identity_of_.find(tensor); id != identity_of_.end()) {
        g_->mutable_node(id->second)->set_op_type("");  // removed below
      }
      auto* t = g_->add_initializer();
      t->set_name(tensor);
      t->set_data_type(kOnnxFloat);
      for (int64_t d : tensors_[tensor].first) t->add_dims(d);
      set_values(*t);
    }
    auto* nodes = g_->mutable_node();
    nodes->erase(std::remove_if(nodes->begin(), nodes->end(),
                                [](const onnx::NodeProto& n) { return n.op_type().empty(); }),
                 nodes->end());
  }

  struct Placed {
    std::string who;
    std::span<const float> values;
  };

  const model::Graph& graph_;
  const StageRunner& runner_;
  const ExportOptions& options_;
  std::vector<std::string>* notes_;
  const std::string in_;  // the source ONNX file
  const bool by_name_;
  onnx::ModelProto onnx_model_;
  model::OnnxFileInfo file_info_;
  onnx::GraphProto* g_ = nullptr;
  std::map<std::string, Values> tensors_;
  std::map<std::string, int> identity_of_;  // node index of each Identity, by its output
  std::map<std::tuple<std::string, int, int64_t>, Placed> placed_;
  std::set<std::string> touched_;
  std::set<std::string> sourced_;      // "<op>.<param>" of every parameter with a tensor
  std::vector<std::string> restored_;  // dropped biases put back (restore_dropped_biases)
};

// Every parameter as "<op id>.<param>" in GraphPipe's layout; of tied copies (one tensor the
// model reads in several places) the first member's only.
std::vector<NamedTensor> op_tensors(const model::Graph& graph, const StageRunner& runner) {
  std::set<std::pair<std::string, std::string>> followers;
  for (const auto& tie : graph.model().param_ties()) {
    for (int k = 1; k < tie.members_size(); ++k) {
      followers.insert({tie.members(k).op(), tie.members(k).param()});
    }
  }
  std::vector<NamedTensor> out;
  for (int i = 0; i < graph.num_ops(); ++i) {
    const auto& op = graph.op(i);
    const auto values = runner.op_params(i);
    size_t offset = 0;
    for (const auto& spec : op.proto->params()) {
      std::vector<int64_t> shape(spec.shape().begin(), spec.shape().end());
      size_t n = 1;
      for (int64_t d : shape) n *= static_cast<size_t>(d);
      if (!followers.count({op.id(), spec.name()})) {
        out.push_back({op.id() + "." + spec.name(), shape, values.subspan(offset, n)});
      }
      offset += n;
    }
  }
  return out;
}

}  // namespace

Status export_trained(const graphpipe::v1::ModelGraph& model, const ExportOptions& options,
                      std::vector<std::string>* notes) {
  const std::string ext = std::filesystem::path(options.out).extension().string();
  if (ext != ".onnx" && ext != ".npz" && ext != ".safetensors") {
    return invalid_argument("--out " + options.out +
                            ": expected a .onnx, .safetensors or .npz file");
  }
  if (options.names != "source" && options.names != "ops") {
    return invalid_argument("--names " + options.names + ": expected source or ops");
  }
  GP_ASSIGN_OR_RETURN(auto manifest, latest_checkpoint(options.checkpoint, notes));
  auto graph = model::Graph::build(model);
  if (!graph.ok()) return graph.status().with_context("model");
  graphpipe::v1::TrainingConfig training;  // only the state layout matters for loading
  training.set_optimizer(manifest.optimizer());
  training.set_learning_rate(1);
  if (manifest.optimizer() == graphpipe::v1::OPTIMIZER_KIND_MOMENTUM) training.set_momentum(0.9);
  GP_ASSIGN_OR_RETURN(auto trainer, ReferenceTrainer::create(*graph, 1, 0, training));
  GP_RETURN_IF_ERROR(load_stage_checkpoint(options.checkpoint, manifest, *graph, training,
                                           trainer->mutable_runner()));
  if (ext == ".onnx") return OnnxExport(*graph, trainer->runner(), options, notes).run();
  // The tensors point into the runner's parameters or the source's tensors: both live until
  // the file is written.
  OnnxExport source(*graph, trainer->runner(), options, notes, /*by_name=*/true);
  std::vector<NamedTensor> tensors;
  if (options.names == "source" && model.param_sources_size() > 0) {
    GP_RETURN_IF_ERROR(source.place_all());
    tensors = source.user_tensors();
  } else {
    tensors = op_tensors(*graph, trainer->runner());
  }
  if (ext == ".npz") return write_npz(options.out, tensors);
  // "format": "pt" is what transformers' loaders check; torch's load_file reads any.
  return write_safetensors(options.out, tensors, {{"format", "pt"}});
}

}  // namespace gp::exec
