// Trained weights read through data movement only: `bias.view(1, -1, 1, 1)` added to a feature
// map, timm's `weight[:, None, None] * x`, Swin's relative position bias (a table gathered by a
// constant index buffer, then reshaped and permuted). Every element of such a tensor is one
// element of the weight, so the chain folds at import into an index map of the weight, and the
// tensor becomes the weight (the same for every sample) gathered by that map: its gradient adds
// up in the weight. Elements zeroed by slice assignment (torchvision's Swin V2 zeroes the key
// third of a copy of its qkv bias: ScatterND of zeros) are held as index -1: zeros, which no
// gradient reaches, as in torch.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

bool moves_elements(const std::string& t) {
  static const std::set<std::string> kMoves = {"Identity", "Transpose", "Reshape", "Flatten",
                                               "Squeeze",  "Unsqueeze", "Gather",  "GatherND",
                                               "Slice",    "Expand",    "Concat",  "ScatterND"};
  return kMoves.count(t) > 0;
}

// A step that keeps every element where it is: a Resize to its input's own size (checked with
// its sizes, same_size_resize), or a Cast to float32 (DINOv2's pos_embed.to(torch.float32)
// before its interpolation; weights are float32).
bool keeps_elements(const onnx::NodeProto& n) {
  return n.op_type() == "Resize" || (n.op_type() == "Cast" && attr_i(n, "to", 0) == kOnnxFloat);
}

// Index -1: an element zeroed by a ScatterND of zeros, no element of the weight.
constexpr double kZeroed = -1;

// A Resize to its input's own size moves no element, whatever the mode: the coordinate
// transformations torch writes map each output pixel onto its input pixel at scale 1, where
// linear and cubic kernels weigh that pixel alone (tf_half_pixel_for_nn shifts by half a pixel,
// tf_crop_and_resize crops: not these). BEiT interpolates its relative position table to the
// window it was made for.
bool same_size_resize(const onnx::NodeProto& n, const std::vector<int64_t>& in,
                      const std::map<std::string, EvalValue>& inputs) {
  static const std::set<std::string> kInPlace = {"half_pixel", "pytorch_half_pixel",
                                                 "align_corners", "asymmetric"};
  if (n.op_type() != "Resize" || n.input_size() < 3 ||
      !kInPlace.count(attr_s(n, "coordinate_transformation_mode", "half_pixel")) ||
      !attr_ints(n, "axes").empty()) {
    return false;
  }
  auto given = [&](int k) -> const EvalTensor* {
    if (k >= n.input_size() || n.input(k).empty()) return nullptr;
    const auto it = inputs.find(n.input(k));
    return it == inputs.end() || it->second.sequence ? nullptr : &it->second.tensor;
  };
  if (const EvalTensor* sizes = given(3); sizes && !sizes->values.empty()) {
    if (sizes->values.size() != in.size()) return false;
    for (size_t d = 0; d < in.size(); ++d) {
      if (sizes->values[d] != static_cast<double>(in[d])) return false;
    }
    return true;
  }
  const EvalTensor* scales = given(2);
  return scales && scales->values.size() == in.size() &&
         std::all_of(scales->values.begin(), scales->values.end(),
                     [](double v) { return v == 1.0; });
}

bool has_zeroed(const EvalTensor& index) {
  return std::any_of(index.values.begin(), index.values.end(),
                     [](double v) { return v == kZeroed; });
}

// Where the map reads whole rows of a [rows, width] weight in order (an embedding of constant
// ids, such as position ids): the row of each, else empty.
std::vector<float> row_ids(const EvalTensor& index, const std::vector<int64_t>& weight) {
  if (weight.size() != 2 || index.dims.empty() || index.dims.back() != weight[1]) return {};
  const int64_t width = weight[1];
  std::vector<float> rows;
  for (size_t at = 0; at < index.values.size(); at += static_cast<size_t>(width)) {
    const double first = index.values[at];
    if (std::fmod(first, static_cast<double>(width)) != 0) return {};
    for (int64_t c = 1; c < width; ++c) {
      if (index.values[at + static_cast<size_t>(c)] != first + static_cast<double>(c)) return {};
    }
    rows.push_back(static_cast<float>(first / static_cast<double>(width)));
  }
  return rows;
}

}  // namespace

bool Importer::feeds_only_elementwise(const std::string& name) const {
  return readers_only(
      name,
      // (A Shape reads no values: BEiT sizes its interpolation from one.)
      [](const onnx::NodeProto& n, const std::string&) {
        return elementwise_type(n.op_type()) || n.op_type() == "Shape";
      },
      // (A moved weight is the data, not an index or a shape; Concat reads several.)
      [](const onnx::NodeProto& n, const std::string& in) {
        return (moves_elements(n.op_type()) || keeps_elements(n)) &&
               (n.op_type() == "Concat" || n.input(0) == in) && n.output_size() == 1;
      });
}

std::optional<Importer::WeightMap> Importer::weight_index(const std::string& name) const {
  if (auto m = weight_maps_.find(name); m != weight_maps_.end()) return m->second;
  // (A slice of a packed weight keeps its own path: slice_folds and packed_params.)
  if (activation(name) || slice_of_.count(name) || !param_like(name)) return std::nullopt;
  // A weight other nodes read too would train as untied copies: only a weight this chain alone
  // reads becomes a map.
  const auto readers = consumers_.find(name);
  // Readers of its values. A Shape reads none, nor a CastLike its second input (the type), nor
  // a slice only they read: the exports of Swin V2's zeroing take the zeros' length and type
  // from one.
  auto no_values = [&](int r, const std::string& in) {
    const auto& rn = g_.node(r);
    return rn.op_type() == "Shape" || (rn.op_type() == "CastLike" && rn.input_size() > 1 &&
                                       rn.input(1) == in && rn.input(0) != in);
  };
  auto values_reader = [&](int k) {
    const auto& kn = g_.node(k);
    if (no_values(k, name)) return false;
    for (const auto& out : kn.output()) {
      const auto c = consumers_.find(out);
      if (c == consumers_.end() || c->second.empty() ||
          std::any_of(c->second.begin(), c->second.end(),
                      [&](int r) { return !no_values(r, out); })) {
        return true;
      }
    }
    return false;
  };
  if (folded_transposes_.count(name) || readers == consumers_.end()) return std::nullopt;
  const auto values_readers =
      std::count_if(readers->second.begin(), readers->second.end(), values_reader);
  // (Several chains may read it where each is a map: materialize_weight_map ties their copies.)
  if (values_readers == 0 || (values_readers > 1 && map_chain_readers(name).empty())) {
    return std::nullopt;
  }
  // A view of a weight (torch's clone() before a slice assignment, an Identity; a Transpose
  // before dynamo's GatherND of LeViT's attention_biases.T) is its node's move of the weight's
  // map, where the view is the weight's only reader of values (so nothing else reads it). An
  // Identity whose weight is read elsewhere too is a parameter of its own, as everywhere in the
  // importer (the legacy exporter's de-duplicated parameters).
  if (view_of_.count(name)) {
    const int p = producer(name);
    if (p < 0 || !moves_elements(g_.node(p).op_type()) || g_.node(p).output_size() != 1) {
      return std::nullopt;
    }
    std::map<std::string, EvalValue> inputs;
    if (const std::string source = weight_map_inputs(p, &inputs); !source.empty()) {
      auto r = evaluate_node(g_.node(p), inputs);
      if (r.ok() && r->has_value()) return WeightMap{source, std::move(**r)};
    }
    if (g_.node(p).op_type() != "Identity") return std::nullopt;
  }
  WeightMap map{name, {weight_dims(name), {}, true}};
  int64_t elements = 1;
  for (int64_t d : map.index.dims) elements *= d;
  if (elements <= 0 || elements > kMaxFoldElements) return std::nullopt;
  map.index.values.resize(static_cast<size_t>(elements));
  for (int64_t k = 0; k < elements; ++k) map.index.values[static_cast<size_t>(k)] = k;
  return map;
}

std::vector<int> Importer::map_chain_readers(const std::string& name) const {
  const auto readers = consumers_.find(name);
  if (readers == consumers_.end() || !param_like(name)) return {};
  std::vector<int> chain;
  for (int r : readers->second) {
    const auto& rn = g_.node(r);
    if (rn.op_type() == "Shape") continue;  // reads no value
    // (Each a step of a map: not a view, a row lookup or a slice other paths take.)
    if (rn.input(0) != name || !weight_map_candidate(r) ||
        (rn.op_type() == "Slice" && !slice_left_to_maps(rn))) {
      return {};
    }
    chain.push_back(r);
  }
  return chain;
}

bool Importer::slice_left_to_maps(const onnx::NodeProto& n) const {
  if (n.op_type() != "Slice" || n.output_size() != 1 || !feeds_only_elementwise(n.output(0))) {
    return false;
  }
  const auto readers = consumers_.find(n.output(0));
  return readers != consumers_.end() &&
         std::any_of(readers->second.begin(), readers->second.end(), [this](int r) {
           const std::string& t = g_.node(r).op_type();
           return !elementwise_type(t) && t != "Shape";
         });
}

bool Importer::weight_map_candidate(int i) const {
  const auto& n = g_.node(i);
  const std::string& t = n.op_type();
  if (!(moves_elements(t) || keeps_elements(n)) || n.output_size() != 1 || n.output(0).empty()) {
    return false;
  }
  const std::string& out = n.output(0);
  if (view_of_.count(out) || slice_of_.count(out) || act_.count(out)) return false;
  // Only where element-wise ops take the result: other readers of a moved weight (a matmul of a
  // packed projection's slice, a conv) have their own paths and refusals.
  if (!feeds_only_elementwise(out)) return false;
  // A lookup of constant ids in a table that element-wise ops read directly (position
  // embeddings) stays an embedding (constant_lookup).
  // (A Gather along another axis, LeViT's attention_biases[:, idxs], is no row lookup: a map.)
  if (t == "Gather" && !weight_maps_.count(n.input(0)) && attr_i(n, "axis", 0) == 0) {
    for (int k : consumers_.at(out)) {
      if (!elementwise_type(g_.node(k).op_type())) return true;
    }
    return false;
  }
  return true;
}

// Whether constant input k of node n is an index, a shape or an axis list a map can take.
bool Importer::constant_fits_map(const onnx::NodeProto& n, int k, const EvalTensor& c) const {
  if (n.op_type() == "Concat") return false;  // (a constant piece would read as indices)
  // ScatterND's updates: zeros written in place only (other values would be constants beside
  // the weight's; a reduction would combine them with its elements).
  if (n.op_type() == "ScatterND" && k == 2) {
    return attr_s(n, "reduction", "none") == "none" &&
           std::all_of(c.values.begin(), c.values.end(), [](double x) { return x == 0; });
  }
  // An Expand to a static export's traced batch size is a weight per sample (convert.cc).
  if (n.op_type() == "Expand" && k == 1 && !c.values.empty() && static_batch_ > 1 &&
      c.values[0] == static_cast<double>(static_batch_)) {
    return false;
  }
  // (A size read from the batch is NaN: it depends on the batch size.)
  return k == 0 ||
         std::none_of(c.values.begin(), c.values.end(), [](double x) { return std::isnan(x); });
}

std::string Importer::weight_map_inputs(int i, std::map<std::string, EvalValue>* inputs) const {
  const auto& n = g_.node(i);
  std::string source;
  for (int k = 0; k < n.input_size(); ++k) {
    const std::string& in = n.input(k);
    if (in.empty() || inputs->count(in)) continue;
    // (A value held with a batch of 1 for every sample would be read as a batch of 1.)
    if (activation(in) || sample_consts_.count(in)) return "";
    EvalValue ev;
    if (weight_maps_.count(in) || param_like(in)) {
      // (Only data moves: a weight as indices, a shape or a second Concat source is refused.)
      if (k > 0 && n.op_type() != "Concat") return "";
      auto w = weight_index(in);
      if (!w || (!source.empty() && source != w->source)) return "";
      source = w->source;
      ev.tensor = std::move(w->index);
    } else if (auto c = const_tensor(in)) {
      if (!constant_fits_map(n, k, *c)) return "";
      ev.tensor = std::move(*c);
      if (n.op_type() == "ScatterND" && k == 2) {
        std::fill(ev.tensor.values.begin(), ev.tensor.values.end(), kZeroed);
      }
    } else {
      return "";
    }
    (*inputs)[in] = std::move(ev);
  }
  return source;
}

bool Importer::fold_weight_map(int i) {
  if (!weight_map_candidate(i)) return false;
  std::map<std::string, EvalValue> inputs;
  const std::string source = weight_map_inputs(i, &inputs);
  if (source.empty()) return false;
  const auto& n = g_.node(i);
  if (keeps_elements(n)) {
    const EvalValue& x = inputs.at(n.input(0));
    if (x.sequence || (n.op_type() == "Resize" && !same_size_resize(n, x.tensor.dims, inputs))) {
      return false;
    }
    weight_maps_[n.output(0)] = WeightMap{source, x.tensor};
    return true;
  }
  auto r = evaluate_node(n, inputs);
  if (!r.ok() || !r->has_value()) return false;
  weight_maps_[n.output(0)] = WeightMap{source, std::move(**r)};
  return true;
}

bool Importer::materialize_weight_map(int i, const std::string& name) {
  const WeightMap& map = weight_maps_.at(name);
  const auto anchor = anchor_for(name);
  if (!anchor) {
    refuse(i, "no activation to take the batch from for '" + name + "'");
    return false;
  }
  const std::string id = unique_id(sanitize(name), "weight_map");
  std::vector<int64_t> dims = map.index.dims;
  if (dims.empty()) dims.push_back(1);
  const std::vector<int64_t> weight = weight_dims(map.source);
  const int first = b_.model().ops_size();
  TensorRef out;
  int64_t elements = 1;
  for (int64_t d : weight) elements *= d;
  const bool zeroed = has_zeroed(map.index);
  // Several maps of one weight (BEiT's two slices of its table, a map read directly and moved
  // on) read the one tensor of it the first made: one parameter, however many maps.
  const std::string& source = map.source;
  const bool made = whole_weight_.count(source) || flat_weight_.count(source);
  if (looked_up_weights_.count(source) && !options_.untie_weights) {
    refuse(i, "reads '" + name + "', a map of the trained weight '" + source +
                  "', whose rows another map looks up (an embedding of them): GraphPipe holds "
                  "no one tensor of it for both; import with --untie-weights to give each its "
                  "own copy (trained separately)");
    return false;
  }
  auto flat_whole = [&]() {
    if (const auto f = flat_weight_.find(source); f != flat_weight_.end()) return f->second;
    TensorRef whole;
    if (const auto w = whole_weight_.find(source); w != whole_weight_.end()) {
      whole = b_.reshape(unique_id(id + ".flat", id), w->second, {elements});
    } else {
      whole = b_.broadcast_param(id, *anchor, {elements});
      take(id, "value", source);
    }
    flat_weight_[source] = whole;
    return whole;
  };
  if (!zeroed && counts_up(map.index.values) &&
      static_cast<int64_t>(map.index.values.size()) == elements) {
    // The whole weight in its order: only its shape changes.
    if (made) {
      out = b_.reshape(id, flat_whole(), dims);
    } else {
      out = b_.broadcast_param(id, *anchor, dims);
      take(id, "value", source);
      whole_weight_[source] = out;
    }
  } else if (auto rows = zeroed || made || map_chain_readers(source).size() > 1
                             ? std::vector<float>{}
                             : row_ids(map.index, weight);
             !rows.empty()) {
    std::vector<int64_t> shape(dims.begin(), dims.end() - 1);
    if (shape.empty()) shape.push_back(1);
    const TensorRef ids = b_.constant(unique_id(id + ".ids", id), *anchor, shape, rows, true);
    out = b_.embedding(id, ids, weight[0], weight[1]);
    take(id, "weight", source);
    looked_up_weights_.insert(source);
    if (map.index.dims.size() < 2) out = b_.reshape(unique_id(id + ".reshape", id), out, dims);
  } else {
    const TensorRef whole = flat_whole();
    std::vector<int64_t> flat;
    std::vector<float> kept;  // 0 where zeroed
    flat.reserve(map.index.values.size());
    for (double v : map.index.values) {
      flat.push_back(v == kZeroed ? 0 : static_cast<int64_t>(v));
      kept.push_back(v == kZeroed ? 0.0f : 1.0f);
    }
    TensorRef picked = b_.gather(unique_id(id + ".gather", id), whole, 0, std::move(flat));
    if (zeroed) {
      const auto count = static_cast<int64_t>(kept.size());
      picked = b_.binary(unique_id(id + ".zeroed", id), picked,
                         b_.constant(unique_id(id + ".kept", id), *anchor, {count}, kept), "mul");
    }
    out = b_.reshape(unique_id(id + ".reshape", id), picked, dims);
  }
  act_[name] = out;
  unbatched_.insert(name);
  infer_new_ops(first);  // its shape, for the node that reads it
  return true;
}

}  // namespace gp::model::onnx_detail
