// Slices of one packed trained weight as parameters of their own. nn.MultiheadAttention keeps its
// q, k and v projections in one in_proj_weight [3E, E] (and in_proj_bias [3E]); for
// cross-attention torch slices it (q = w[:E], k and v = w[E:]) and torch's legacy exporter
// writes those Slice nodes on the initializer, with bounds computed from shapes. A Slice of a
// trained weight whose bounds fold to constants and that selects one contiguous block of it
// becomes a weight view (slice_of_): the operator reading it takes the block as a parameter of
// its own, placed in the packed tensor as a RANGE, so that export writes it back under the
// tensor's own name and shape. SGD, momentum and Adam (weight decay included) update element by
// element and gradient clipping reads the global norm, so disjoint blocks train exactly as the
// packed tensor does. Overlapping blocks, or the tensor read whole beside a slice of it, would be
// separate copies of the same elements: refused.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

int64_t elements_of(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string range_text(int64_t begin, int64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

}  // namespace

// The node that splits weight `n` reads, for a SequenceAt: its SplitToSequence; else `n` itself.
const onnx::NodeProto* Importer::weight_splitter(const onnx::NodeProto& n) const {
  if (n.op_type() != "SequenceAt" || n.input_size() < 2) return &n;
  const int p = producer(n.input(0));
  return p >= 0 && g_.node(p).op_type() == "SplitToSequence" ? &g_.node(p) : nullptr;
}

std::string Importer::sliced_source(const std::string& name) const {
  const int p = producer(name);
  if (p < 0) return "";
  const onnx::NodeProto& n = g_.node(p);
  const std::string& t = n.op_type();
  if (t != "Slice" && t != "Split" && t != "SequenceAt") return "";
  const onnx::NodeProto* splitter = weight_splitter(n);
  if (splitter == nullptr || (t == "SequenceAt" && splitter == &n)) return "";
  return splitter->input_size() > 0 ? splitter->input(0) : "";
}

bool Importer::fold_weight_slice(const onnx::NodeProto& n) {
  const std::string& t = n.op_type();
  if ((t != "Slice" && t != "Split" && t != "SplitToSequence" && t != "SequenceAt") ||
      n.output_size() < 1 || (t != "Split" && n.output_size() != 1) || n.output(0).empty() ||
      slice_of_.count(n.output(0))) {
    return false;
  }
  const onnx::NodeProto* splitter = weight_splitter(n);
  if (splitter == nullptr || splitter->input_size() < 1) return false;
  const std::string& in = splitter->input(0);
  if (!is_weight(in) || !param_like(in)) return false;
  // A sequence of pieces of a weight holds nothing itself: each SequenceAt reading it is a view.
  if (t == "SplitToSequence") {
    const auto readers = consumers_.find(n.output(0));
    return readers != consumers_.end() &&
           only_consumers_in(n.output(0), {readers->second.begin(), readers->second.end()}) &&
           std::all_of(readers->second.begin(), readers->second.end(),
                       [this](int c) { return g_.node(c).op_type() == "SequenceAt"; });
  }
  // A mask made from a weight (nanoGPT's registered tril buffer) folds as a constant instead.
  for (const auto& out : n.output()) {
    if (!out.empty() && feeds_only_masks(out)) return false;
  }
  // A slice whose elements are moved on before element-wise ops read them (BEiT's rows of its
  // relative position table, reshaped, interpolated and joined again) is a weight map instead,
  // where the maps take the weight.
  if (slice_left_to_maps(n) && weight_index(in)) return false;
  // Bounds that read an activation's shape fold once it is converted: fold() comes back then.
  auto blocks = t == "Slice" ? weight_slice_blocks(n) : weight_split_blocks(n);
  if (!blocks.ok()) {
    slice_refusals_[n.output(0)] = blocks.status().message();
    return false;
  }
  for (size_t k = 0; k < blocks->size(); ++k) {
    const auto& f = (*blocks)[k];
    if (f.pieces.size() != 1 || f.pieces[0].count <= 0) {
      slice_refusals_[n.output(0)] = "output " + std::to_string(k) + " selects no element";
      return false;
    }
  }
  for (size_t k = 0; k < blocks->size(); ++k) {
    const std::string& out = n.output(static_cast<int>(k));
    if (out.empty()) continue;
    const auto& piece = (*blocks)[k].pieces[0];
    slice_of_[out] = {piece.tensor, piece.offset, piece.count};
    view_dims_[out] = (*blocks)[k].dims;
  }
  slice_refusals_.erase(n.output(0));
  return true;
}

Result<std::vector<Importer::FlatWeight>> Importer::weight_slice_blocks(
    const onnx::NodeProto& n) const {
  auto f = flat_weight(n.output(0), 0);
  if (!f.ok()) return f.status();
  return std::vector<FlatWeight>{std::move(*f)};
}

// Split (or SplitToSequence, at a SequenceAt: the piece it reads) along an axis with nothing but
// size-1 axes before it: one flat range per piece.
Result<std::vector<Importer::FlatWeight>> Importer::weight_split_blocks(
    const onnx::NodeProto& n) const {
  const onnx::NodeProto& split = *weight_splitter(n);
  const bool sequence = &split != &n;
  auto f = flat_weight(split.input(0), 0);
  if (!f.ok()) return f.status();
  const auto rank = static_cast<int64_t>(f->dims.size());
  int64_t axis = attr_i(split, "axis", 0);
  if (axis < 0) axis += rank;
  const std::string who = where(producer(split.output(0)));
  if (axis < 0 || axis >= rank) {
    return invalid_argument(who + ": a split of a weight along an axis out of range");
  }
  int64_t outer = 1, inner = 1;
  for (int64_t a = 0; a < rank; ++a) {
    if (a < axis) outer *= f->dims[static_cast<size_t>(a)];
    if (a > axis) inner *= f->dims[static_cast<size_t>(a)];
  }
  if (outer != 1) return invalid_argument(who + ": a split of a weight along an inner axis");
  const int64_t dim = f->dims[static_cast<size_t>(axis)];
  std::vector<int64_t> sizes = attr_ints(split, "split");
  const bool given = split.input_size() > 1 && !split.input(1).empty();
  if (sizes.empty() && given) {
    const auto v = static_ints(split.input(1));
    if (!v || v->empty()) {
      return invalid_argument(who + ": the split of a weight has no constant sizes");
    }
    sizes = *v;
    // SplitToSequence's scalar size: pieces of it, the last one shorter.
    const auto c = consts_.find(split.input(1));
    if (sequence && v->size() == 1 && (c == consts_.end() || c->second->dims_size() == 0)) {
      sizes.clear();
      for (int64_t at = 0; (*v)[0] > 0 && at < dim; at += (*v)[0]) {
        sizes.push_back(std::min((*v)[0], dim - at));
      }
    }
  }
  if (sizes.empty()) {
    // Split: equal parts, the last one smaller (opset 18); SplitToSequence: pieces of one.
    const int64_t parts = sequence ? dim : split.output_size();
    const int64_t each = (dim + parts - 1) / std::max<int64_t>(parts, 1);
    for (int64_t k = 0; k < parts; ++k) sizes.push_back(std::min(each, dim - k * each));
  }
  int64_t total = 0;
  for (int64_t v : sizes) total += v;
  if ((!sequence && static_cast<int64_t>(sizes.size()) != split.output_size()) || total != dim) {
    return invalid_argument(who + ": split sizes that do not add up to the axis");
  }
  std::vector<FlatWeight> out;
  int64_t begin = 0;
  for (int64_t size : sizes) {
    FlatWeight b;
    b.dims = f->dims;
    b.dims[static_cast<size_t>(axis)] = size;
    b.pieces = f->range(begin * inner, size * inner);
    out.push_back(std::move(b));
    begin += size;
  }
  if (!sequence) return out;
  // The piece the SequenceAt reads (its axis dropped where pieces of one are not kept as such).
  const auto at = static_ints(n.input(1));
  const auto count = static_cast<int64_t>(out.size());
  int64_t pos = at && at->size() == 1 ? (*at)[0] : count;
  if (pos < 0) pos += count;
  if (pos < 0 || pos >= count) {
    return invalid_argument(where(producer(n.output(0))) +
                            ": the position in a split weight is not a constant in range");
  }
  FlatWeight piece = out[static_cast<size_t>(pos)];
  if (!given && attr_i(split, "keepdims", 1) == 0) {
    piece.dims.erase(piece.dims.begin() + axis);
  }
  return std::vector<FlatWeight>{std::move(piece)};
}

std::optional<std::vector<float>> Importer::slice_values(const SliceView& s) const {
  const ViewOf v = resolve_view(s.base);
  if (v.values_transposed) return std::nullopt;
  auto all = float_values(v.values);
  if (!all || s.offset < 0 || s.count < 0 ||
      s.offset + s.count > static_cast<int64_t>(all->size())) {
    return std::nullopt;
  }
  return std::vector<float>(all->begin() + s.offset, all->begin() + s.offset + s.count);
}

std::optional<PlacedLayout> Importer::place_in_base(PlacedLayout at, const SliceView& s) const {
  using PS = graphpipe::v1::ParamSource;
  // A slice of everything is the tensor itself, in every layout.
  if (s.offset == 0 && s.count == elements_of(weight_dims(s.base))) return at;
  switch (at.layout) {
    case PS::LAYOUT_COPY:
      return PlacedLayout{PS::LAYOUT_RANGE, s.offset};
    case PS::LAYOUT_RANGE:
      return PlacedLayout{PS::LAYOUT_RANGE, s.offset + at.offset};
    default:  // a transpose of a block is no block of the tensor
      return std::nullopt;
  }
}

std::string Importer::slice_source(const std::string& source, const std::string& name,
                                   const std::string& id, const std::string& param,
                                   std::optional<PlacedLayout>* at) {
  const auto s = slice_of_.find(source);
  if (s == slice_of_.end()) return source;
  *at = *at ? place_in_base(**at, s->second) : std::nullopt;
  std::string packed = resolve_view(s->second.base).source;
  if (!*at && current_ >= 0) {
    refuse(current_, "reads '" + name + "', a slice of trained weight '" + packed +
                         "', in a layout that no export placement expresses (as " + param + " of " +
                         id + ")");
  }
  return packed;
}

bool Importer::infinite_mask(const std::string& name) const {
  const auto t = consts_.find(name);
  if (t == consts_.end() || t->second->data_type() != kOnnxFloat) return false;
  int64_t count = 1;
  for (int64_t d : t->second->dims()) count *= d;
  if (count <= 1 || count > kMaxFoldElements) return false;
  const auto v = float_values(name);
  // (-inf, or torch.finfo(float32).min as Hugging Face writes masks: no trained value is so.)
  constexpr float kMaskValue = 1e30f;
  return v && !std::all_of(v->begin(), v->end(),
                           [](float x) { return std::isfinite(x) && std::fabs(x) < kMaskValue; });
}

Status Importer::check_packed_slices() {
  // The slice views operators took, with the nodes and operators that took them.
  std::map<std::string, std::set<int>> readers;
  std::map<std::string, std::set<std::string>> ops;
  for (const auto& t : taken_) {
    if (!slice_of_.count(t.source) || t.node < 0) continue;
    readers[t.source].insert(t.node);
    ops[t.source].insert(t.op);
  }
  if (readers.empty()) return ok_status();
  // Each sliced tensor's blocks in its flat elements: a slice view's (holder: its name, node: its
  // Slice), and those operators take from the tensor itself (holder "", node: the reader).
  struct Block {
    int64_t begin = 0, end = 0;
    std::string holder;
    int node = -1;
  };
  std::map<std::string, std::vector<Block>> blocks;
  for (const auto& [name, nodes] : readers) {
    const SliceView& s = slice_of_.at(name);
    blocks[resolve_view(s.base).source].push_back(
        {s.offset, s.offset + s.count, name, producer(name)});
  }
  using PS = graphpipe::v1::ParamSource;
  for (const auto& t : taken_) {
    auto b = blocks.find(t.source);
    if (b == blocks.end() || t.node < 0) continue;
    const auto dims = weight_dims(t.source);
    const int64_t all = elements_of(dims);
    if (t.at && t.at->layout == PS::LAYOUT_RANGE) {
      b->second.push_back({t.at->offset, t.at->offset + t.count, "", t.node});
    } else if (t.at && t.at->layout == PS::LAYOUT_COLUMNS_TRANSPOSED && dims.size() == 2 &&
               dims[0] > 0) {
      const int64_t width = t.count / dims[0];  // columns [offset, offset + width) of each row
      for (int64_t r = 0; r < dims[0]; ++r) {
        const int64_t lo = r * dims[1] + t.at->offset;
        b->second.push_back({lo, lo + width, "", t.node});
      }
    } else {
      b->second.push_back({0, all, "", t.node});
    }
  }
  auto what = [this](const Block& x) {
    return where(x.node) + (x.holder.empty() ? " reads elements " : " slices elements ") +
           range_text(x.begin, x.end);
  };
  for (const auto& [tensor, list] : blocks) {
    for (const Block& s : list) {
      if (s.holder.empty()) continue;  // (blocks the tensor's own readers take: tie_copies')
      for (const Block& b : list) {
        if (&b == &s || b.begin >= s.end || s.begin >= b.end) continue;
        std::string dims;
        for (int64_t d : weight_dims(tensor)) {
          dims += (dims.empty() ? "" : ", ") + std::to_string(d);
        }
        return invalid_argument(path_ + ": trained weight '" + tensor + "' [" + dims +
                                "] is sliced into parameters of their own, which must be "
                                "disjoint blocks of it: " +
                                what(s) + " and " + what(b) +
                                ", which overlap (separate parameters would not keep the shared "
                                "elements equal in training)");
      }
    }
  }
  // A slice view that several operators read is one tensor: tie_copies ties their copies.
  for (const auto& [name, nodes] : readers) {
    if (ops[name].size() >= 2 && !shared_weights_.count(name)) {
      shared_weights_[name] = {nodes.begin(), nodes.end()};
    }
  }
  return ok_status();
}

}  // namespace gp::model::onnx_detail
