// One row per sample at a position computed per sample: CLIP's text tower pools
// `h[torch.arange(B), ids.argmax(-1)]`. The index pairs every sample with itself, so the pick
// is per sample: the row of h [B, T, ...] at the sample's own position v. Both exporters write
// the batch's arange, which no per-sample op holds:
//   dynamo:  GatherND(h, Concat([arange(B) as [B, 1], v as [B, 1]], -1))
//   legacy:  Gather(Flatten(h, 2) [B*T, ...], v + arange(B) * T)
// matched before conversion (the arange's nodes are claimed), and emitted as
// sum_t h[t] * (t == v): the row, and its gradient into that row only.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

// Nodes that only move or broadcast the index (and their shape arguments).
bool index_plumbing(const std::string& type) {
  static const std::set<std::string> kTypes = {"Unsqueeze", "Squeeze", "Expand",  "Reshape",
                                               "Identity",  "Cast",    "CastLike"};
  return kTypes.count(type) > 0;
}

}  // namespace

std::string Importer::strip_index_plumbing(std::string name, std::set<int>* nodes) const {
  for (int k = producer(name); k >= 0 && index_plumbing(g_.node(k).op_type()); k = producer(name)) {
    nodes->insert(k);
    name = g_.node(k).input(0);
  }
  return name;
}

bool Importer::batch_arange(const std::string& name) const {
  const int r = producer(name);
  if (r < 0 || g_.node(r).op_type() != "Range") return false;
  const auto probes = at_probe_batches(name);  // for batches 2, 3 and 5
  if (!probes || probes->size() != 3) return false;
  const int64_t batches[] = {2, 3, 5};
  for (size_t p = 0; p < 3; ++p) {
    const auto& values = (*probes)[p].values;
    if (static_cast<int64_t>(values.size()) != batches[p] || !counts_up(values)) return false;
  }
  return true;
}

bool Importer::range_from_zero(const std::string& name) const {
  const int r = producer(name);
  if (r < 0 || g_.node(r).op_type() != "Range") return false;
  const auto start = folded(g_.node(r).input(0)), delta = folded(g_.node(r).input(2));
  return start && delta && start->size() == 1 && delta->size() == 1 && (*start)[0] == 0 &&
         (*delta)[0] == 1;
}

bool Importer::static_arange(const std::string& name) const {
  const auto t = const_tensor(name);
  return static_batch_ > 0 && t && !t->dims.empty() && t->dims[0] == static_batch_ &&
         static_cast<int64_t>(t->values.size()) == static_batch_ && counts_up(t->values);
}

bool Importer::match_row_pick(int i) {
  const auto& n = g_.node(i);
  std::set<int> nodes = {i};
  // The batch's arange (and the legacy export's arange * T), which several picks may share:
  // claimed once every reader is.
  std::set<int> shared;
  Fused f;
  f.kind = Fused::Kind::kRowPick;
  if (n.op_type() == "GatherND") {
    if (n.input_size() < 2 || attr_i(n, "batch_dims", 0) != 0) return false;
    const int c = producer(n.input(1));
    if (c < 0 || g_.node(c).op_type() != "Concat" || g_.node(c).input_size() != 2) return false;
    const auto rank = rank_of(n.input(1));  // pairs along the last axis: [..., 2]
    const int64_t axis = attr_i(g_.node(c), "axis", 0);
    if (axis != -1 && (!rank || axis != *rank - 1)) return false;
    nodes.insert(c);
    const std::string first = strip_index_plumbing(g_.node(c).input(0), &shared);
    f.index = strip_index_plumbing(g_.node(c).input(1), &nodes);
    if (range_from_zero(first)) {
      shared.insert(producer(first));
      f.arange = first;
    } else if (!static_arange(first)) {
      return false;
    } else if (const int k = producer(first); k >= 0) {
      shared.insert(k);
    }
    f.x = n.input(0);
  } else {  // Gather axis 0 of a flattened [B*T, ...] at v + arange(B) * T
    if (n.input_size() < 2 || attr_i(n, "axis", 0) != 0) return false;
    const int flat = producer(n.input(0));
    const int add = producer(n.input(1));
    if (flat < 0 || add < 0 || g_.node(add).op_type() != "Add") return false;
    const auto& fn = g_.node(flat);
    if (!(fn.op_type() == "Flatten" && attr_i(fn, "axis", 1) == 2)) return false;
    for (int side = 0; side < 2; ++side) {
      const int mul = producer(g_.node(add).input(side));
      if (mul < 0 || g_.node(mul).op_type() != "Mul") continue;
      for (int k = 0; k < 2; ++k) {
        if (!range_from_zero(g_.node(mul).input(k))) continue;
        f.arange = g_.node(mul).input(k);
        nodes.insert({flat, add});
        shared.insert({mul, producer(g_.node(mul).input(k))});
        f.row_stride = g_.node(mul).input(1 - k);
        f.index = g_.node(add).input(1 - side);
        f.x = fn.input(0);
      }
    }
    if (f.index.empty()) return false;
  }
  // The shape arithmetic that only these nodes read (dynamo's Max(arange, v) -> Shape, which
  // broadcasts the two) belongs to the pick; the index v and the rows stay outside.
  const int v = producer(f.index);
  for (bool grew = true; grew;) {
    grew = false;
    for (int k = i - 1; k >= 0; --k) {
      if (nodes.count(k) || k == v || done_[static_cast<size_t>(k)]) continue;
      const auto& kn = g_.node(k);
      const bool math = kn.op_type() == "Shape" || kn.op_type() == "Max" ||
                        kn.op_type() == "Constant" || index_plumbing(kn.op_type());
      if (!math || kn.output_size() != 1 || !only_consumers_in(kn.output(0), nodes)) continue;
      if (std::find(kn.input().begin(), kn.input().end(), f.x) != kn.input().end() &&
          kn.op_type() != "Shape") {
        continue;
      }
      nodes.insert(k);
      grew = true;
    }
  }
  // The legacy export also reads the Shape of the flat index (one value per sample): [batch].
  std::string flat_index;
  if (!f.row_stride.empty()) flat_index = n.input(1);
  for (int k : nodes) {
    if (k == i) continue;
    for (const auto& o : g_.node(k).output()) {
      if (only_consumers_in(o, nodes)) continue;
      if (o != flat_index) return false;
      for (int c : consumers_.at(o)) {
        if (!nodes.count(c) && g_.node(c).op_type() != "Shape") return false;
      }
    }
  }
  if (!flat_index.empty()) {
    batch_vectors_.insert(flat_index);
    shapes_[flat_index] = {-1};  // [batch]
  }
  f.name = n.name();  // the op is the pick, named after its Gather
  claim(nodes, i, std::move(f));
  for (bool grew = true; grew;) {  // (the Mul first frees the Range)
    grew = false;
    for (int k : shared) {
      if (done_[static_cast<size_t>(k)]) continue;
      const auto& readers = consumers_[g_.node(k).output(0)];
      if (std::all_of(readers.begin(), readers.end(),
                      [&](int c) { return c == i || done_[static_cast<size_t>(c)]; })) {
        done_[static_cast<size_t>(k)] = true;
        grew = true;
      }
    }
  }
  return true;
}

void Importer::emit_row_pick(int i, const Fused& f, const TensorRef& x) {
  const std::string& id = current_id_;
  const auto v = activation(f.index);
  const auto shape = sample_shape(f.x);
  const auto v_shape = sample_shape(f.index);
  if (!v || !shape || shape->empty() || !v_shape ||
      std::any_of(v_shape->begin(), v_shape->end(), [](int64_t d) { return d != 1; })) {
    return refuse(i, "picks rows of '" + f.x + "' at '" + f.index +
                         "', which is not one position per sample of a tensor of known shape");
  }
  // (Its limit is the batch size where the rows' shape is known: at conversion.)
  if (!f.arange.empty() && !batch_arange(f.arange)) {
    return refuse(i, "picks rows of '" + f.x + "' at positions paired with '" + f.arange +
                         "', which is not arange(batch size)");
  }
  const int64_t rows = (*shape)[0];
  if (!f.row_stride.empty()) {
    const auto stride = scalar(f.row_stride);
    if (!stride || *stride != static_cast<double>(rows)) {
      return refuse(i, "the flattened rows of '" + f.x + "' are indexed with a stride other than " +
                           "its " + std::to_string(rows) + " rows per sample");
    }
  }
  auto part = [&](const std::string& what) { return unique_id(id + "." + what, id); };
  const std::vector<int64_t> ones(shape->size(), 1);
  TensorRef at =
      dtype_of(f.index) == graphpipe::v1::DATA_TYPE_FLOAT32 ? *v : as_float(f.index, *v, id);
  at = b_.reshape(part("position"), at, ones);
  at = wrap_negative(id, at, x, ones, rows);
  std::vector<int64_t> column = ones;  // [rows, 1, ...]
  column[0] = rows;
  std::vector<float> positions(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) positions[static_cast<size_t>(r)] = static_cast<float>(r);
  const TensorRef mask =
      b_.compare(part("is_row"), b_.constant(part("rows"), x, column, positions), at, "eq");
  const TensorRef picked = b_.binary(part("picked"), x, mask, "mul");
  const bool flat = !f.row_stride.empty() && shape->size() > 2;
  TensorRef out = b_.reduce_axes(flat ? part("row") : id, picked, {0}, "sum", false);
  if (flat) {  // Flatten(h, 2) merged the dims after the rows: the Gather's row is flat
    int64_t width = 1;
    for (size_t d = 1; d < shape->size(); ++d) width *= (*shape)[d];
    out = b_.reshape(id, out, {width});
  }
  act_[g_.node(i).output(0)] = out;
}

TensorRef Importer::wrap_negative(const std::string& id, const TensorRef& at,
                                  const TensorRef& anchor, const std::vector<int64_t>& shape,
                                  int64_t count) {
  auto part = [&](const std::string& what) { return unique_id(id + "." + what, id); };
  const TensorRef zero = b_.constant(part("zero"), anchor, shape, {0.0f});
  const TensorRef wrap =
      b_.binary(part("wrap"), b_.compare(part("negative"), at, zero, "lt"),
                b_.constant(part("count"), anchor, shape, {static_cast<float>(count)}), "mul");
  return b_.binary(part("wrapped"), at, wrap, "add");
}

void Importer::gather_elements_picked(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const std::string& data = n.input(0);
  const std::string& index = n.input(1);
  const auto x = activation(data);
  const auto v = activation(index);
  const auto shape = sample_shape(data);
  auto v_shape = sample_shape(index);
  // ONNX gives both one rank; a [batch] tensor is [1] per sample here, so an Unsqueeze of one
  // is [1, 1]: such leading ones are dropped.
  while (shape && v_shape && v_shape->size() > shape->size() && v_shape->front() == 1) {
    v_shape->erase(v_shape->begin());
  }
  const auto rank = rank_of(data);
  if (!x || !v || !shape || !v_shape || !rank || *rank != static_cast<int64_t>(shape->size()) + 1 ||
      !layout_of(data).batch_first() || !layout_of(index).batch_first()) {
    return refuse(i, "gathers from '" + data + "' at '" + index +
                         "', which are not both batch-first tensors of known shape");
  }
  int64_t axis = attr_i(n, "axis", 0);
  if (axis < 0) axis += *rank;
  if (axis <= 0 || axis >= *rank) {
    return refuse(
        i, "axis = " + std::to_string(attr_i(n, "axis", 0)) + " is the batch axis or out of range");
  }
  const auto at = static_cast<size_t>(axis - 1);  // per sample
  bool fits = v_shape->size() == shape->size();
  for (size_t d = 0; fits && d < shape->size(); ++d) fits = d == at || (*v_shape)[d] == (*shape)[d];
  if (!fits) {
    return refuse(i, "its indices " + dims_text(*v_shape) + " and data " + dims_text(*shape) +
                         " differ off the gathered axis");
  }
  const int64_t positions = (*shape)[at];
  auto part = [&](const std::string& what) { return unique_id(id + "." + what, id); };
  // The data with the gathered axis last, and a 1 where the indices have theirs: [..., 1, ..., T].
  TensorRef values =
      dtype_of(data) == graphpipe::v1::DATA_TYPE_FLOAT32 ? *x : as_float(data, *x, id);
  std::vector<int64_t> spread = *shape;
  spread[at] = 1;
  spread.push_back(positions);
  if (at + 1 != shape->size()) {
    std::vector<int64_t> perm;
    for (size_t d = 0; d < shape->size(); ++d) {
      if (d != at) perm.push_back(static_cast<int64_t>(d));
    }
    perm.push_back(static_cast<int64_t>(at));
    values = b_.transpose(part("to_last"), values, perm);
  }
  values = b_.reshape(part("spread"), values, spread);
  // Each index against every position (a negative index counts from the end, as in torch).
  TensorRef where_to =
      dtype_of(index) == graphpipe::v1::DATA_TYPE_FLOAT32 ? *v : as_float(index, *v, id);
  std::vector<int64_t> column = *v_shape;
  column.push_back(1);
  const std::vector<int64_t> ones(column.size(), 1);
  where_to = wrap_negative(id, b_.reshape(part("column"), where_to, column), *x, ones, positions);
  std::vector<float> counting(static_cast<size_t>(positions));
  for (int64_t t = 0; t < positions; ++t) counting[static_cast<size_t>(t)] = static_cast<float>(t);
  const TensorRef mask = b_.compare(
      part("hit"), where_to, b_.constant(part("positions"), *x, {positions}, counting), "eq");
  // (A where, not a product with the mask: an infinity elsewhere in the row stays out.)
  const TensorRef picked =
      b_.where(part("picked"), mask, values, b_.constant(part("none"), *x, ones, {0.0f}));
  act_[n.output(0)] = b_.reduce_axes(id, picked, {static_cast<int64_t>(v_shape->size())}, "sum",
                                     /*keepdims=*/false);
  if (integer_valued(data)) int_valued_.insert(n.output(0));
}

}  // namespace gp::model::onnx_detail
