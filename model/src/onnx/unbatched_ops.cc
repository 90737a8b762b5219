// Layout ops on tensors without the batch axis: values computed from trained weights and
// constants alone (torchvision's Swin V2 feeds a constant table of coordinates through an MLP,
// views the result per head, gathers it at the relative position index and permutes it into an
// attention bias). Such a tensor's per-sample shape is its whole ONNX shape, the same for every
// sample, so each op maps with its ONNX axes as they are.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {

namespace {
// Whether op type t moves or picks elements without the batch (handled below).
bool unbatched_layout_op(const std::string& t) {
  return t == "Reshape" || t == "Flatten" || t == "Squeeze" || t == "Unsqueeze" ||
         t == "Transpose" || t == "Gather" || t == "GatherND";
}

bool all_known(const std::vector<int64_t>& dims) {
  return !dims.empty() && std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d > 0; });
}
}  // namespace

bool Importer::maps_unbatched(const onnx::NodeProto& n) const {
  if (unbatched_layout_op(n.op_type())) return true;
  // A linear layer over the last axis (an MLP over a table) is the same for every sample.
  return n.op_type() == "MatMul" && n.input_size() == 2 && !act_.count(n.input(1)) &&
         is_weight(n.input(1));
}

void Importer::unbatched_op(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const std::string& t = n.op_type();
  if (t == "MatMul") {
    matmul(i, id);
    return;
  }
  const auto x = activation(n.input(0));
  if (!x || !unbatched_.count(n.input(0))) {
    return refuse(i, "its input '" + n.input(0) + "' is not a tensor without the batch axis");
  }
  const auto in = onnx_shape(n.input(0));
  if (!in) return refuse(i, "the shape of its input '" + n.input(0) + "' is not known");
  // (Axes are ONNX's: a tensor held in another shape than ONNX infers would move the wrong ones.)
  if (const auto s = shapes_.find(n.input(0));
      s != shapes_.end() && all_known(s->second) && s->second != *in) {
    return refuse(i, "its input '" + n.input(0) + "' is held as " + dims_text(*in) +
                         ", not in its ONNX shape " + dims_text(s->second));
  }
  const auto rank = static_cast<int64_t>(in->size());
  std::vector<int64_t> perm = attr_ints(n, "perm");
  if (t == "Transpose" && perm.empty()) {
    for (auto d = rank; d-- > 0;) perm.push_back(d);  // reversed
  }
  // Gather's indices and axis; GatherND's index rows address its first `depth` axes.
  const bool gather = t == "Gather" || t == "GatherND";
  std::optional<EvalTensor> idx;
  int64_t axis = 0, depth = 1;
  if (gather) {
    idx = const_tensor(n.input(1));
    if (!idx || idx->values.empty()) return refuse(i, "its indices are empty or not constant");
    if (t == "Gather") {
      axis = attr_i(n, "axis", 0);
      if (axis < 0) axis += rank;
      if (axis < 0 || axis >= rank) return refuse(i, "axis out of range");
    } else {
      if (const int64_t b = attr_i(n, "batch_dims", 0); b != 0) {
        return refuse(i, "batch_dims = " + std::to_string(b) + ": only 0 maps");
      }
      if (idx->dims.empty()) return refuse(i, "scalar indices");
      depth = idx->dims.back();
      if (depth < 1 || depth > rank) return refuse(i, "index rows of " + std::to_string(depth));
    }
  }
  // The output's shape: what shape inference found, else (values it could not follow, such as
  // dynamo's computed Reshape targets) computed here.
  std::vector<int64_t> out;
  if (const auto s = shapes_.find(n.output(0)); s != shapes_.end() && all_known(s->second)) {
    out = s->second;
  } else if (t == "Transpose") {
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(in->size())) return refuse(i, "perm out of range");
      out.push_back((*in)[static_cast<size_t>(p)]);
    }
  } else if (t == "Reshape") {
    const auto target = folded(n.input(1));
    if (!target) return refuse(i, "its target shape is not constant");
    int64_t known = 1, unknown = -1;
    for (size_t d = 0; d < target->size(); ++d) {
      int64_t v = to_index((*target)[d]);
      if (v == 0 && attr_i(n, "allowzero", 0) == 0 && d < in->size()) v = (*in)[d];
      if (v == -1) unknown = static_cast<int64_t>(d);
      out.push_back(v);
      if (v != -1) known *= v;
    }
    if (unknown >= 0 && known > 0) out[static_cast<size_t>(unknown)] = product(*in) / known;
  } else if (t == "Unsqueeze" || t == "Squeeze") {
    std::vector<int64_t> axes = attr_ints(n, "axes");
    if (n.input_size() > 1 && !n.input(1).empty()) {
      const auto given = folded(n.input(1));
      if (!given) return refuse(i, "its axes are not constant");
      axes.clear();
      for (double a : *given) axes.push_back(to_index(a));
    }
    const auto out_rank = rank + (t == "Unsqueeze" ? static_cast<int64_t>(axes.size()) : 0);
    for (int64_t& a : axes) {
      a = a < 0 ? a + out_rank : a;
      if (a < 0 || a >= out_rank)
        return refuse(i, "axes out of range for rank " + std::to_string(out_rank));
    }
    if (t == "Unsqueeze") {
      size_t next = 0;
      for (int64_t d = 0; d < out_rank; ++d) {
        const bool added = std::find(axes.begin(), axes.end(), d) != axes.end();
        if (!added && next >= in->size()) return refuse(i, "axes out of range");
        out.push_back(added ? 1 : (*in)[next++]);
      }
    } else {
      for (int64_t d = 0; d < out_rank; ++d) {
        const int64_t size = (*in)[static_cast<size_t>(d)];
        const bool dropped =
            axes.empty() ? size == 1 : std::find(axes.begin(), axes.end(), d) != axes.end();
        if (!dropped) out.push_back(size);
      }
    }
  } else if (t == "Flatten") {
    int64_t at = attr_i(n, "axis", 1);
    if (at < 0) at += rank;
    if (at < 0 || at > rank) return refuse(i, "axis out of range");
    out = {product(std::vector<int64_t>(in->begin(), in->begin() + at)),
           product(std::vector<int64_t>(in->begin() + at, in->end()))};
  } else if (t == "Gather") {
    out.assign(in->begin(), in->begin() + axis);
    out.insert(out.end(), idx->dims.begin(), idx->dims.end());
    out.insert(out.end(), in->begin() + axis + 1, in->end());
  } else if (t == "GatherND") {
    out.assign(idx->dims.begin(), idx->dims.end() - 1);
    out.insert(out.end(), in->begin() + depth, in->end());
  }
  if (std::any_of(out.begin(), out.end(), [](int64_t d) { return d <= 0; }) ||
      (out.empty() && product(*in) != 1 && !(t == "Gather" && in->size() == 1))) {
    return refuse(i, "the shape of its output '" + n.output(0) + "' is not known");
  }
  if (out.empty()) out.push_back(1);
  TensorRef y = *x;
  if (t == "Transpose") {
    if (perm.size() != in->size())
      return refuse(i, "perm " + dims_text(perm) + " of rank " + std::to_string(in->size()));
    y = b_.transpose(id, *x, perm);
  } else if (gather) {
    const std::vector<int64_t>& dims = *in;
    // GatherND's rows address the first `depth` axes: one flat axis of their product.
    std::vector<int64_t> flat_dims(dims.begin() + depth, dims.end());
    const int64_t rows = product(std::vector<int64_t>(dims.begin(), dims.begin() + depth));
    flat_dims.insert(flat_dims.begin(), rows);
    std::vector<int64_t> picks;
    for (size_t k = 0; k < idx->values.size(); k += static_cast<size_t>(depth)) {
      int64_t flat = 0;
      for (int64_t d = 0; d < depth; ++d) {
        const int64_t size = dims[static_cast<size_t>(axis + d)];
        const int64_t given = to_index(idx->values[k + static_cast<size_t>(d)]);
        const int64_t v = given < 0 ? given + size : given;
        if (v < 0 || v >= size) {
          return refuse(
              i, "index " + std::to_string(given) + " out of range for " + std::to_string(size));
        }
        flat = flat * size + v;
      }
      picks.push_back(flat);
    }
    if (static_cast<int64_t>(picks.size()) * (product(flat_dims) / rows) != product(out)) {
      return refuse(i, "picks " + std::to_string(picks.size()) + " rows of " +
                           dims_text(flat_dims) + ", not the " + dims_text(out) + " inferred");
    }
    TensorRef src = *x;
    if (depth > 1) src = b_.reshape(unique_id(id + ".rows", id), *x, flat_dims);
    y = b_.gather(unique_id(id + ".gather", id), src, axis, std::move(picks));
    y = b_.reshape(id, y, out);
  } else {
    // Reshape, Flatten, Squeeze, Unsqueeze: the same elements in the inferred shape.
    if (product(*in) != product(out)) {
      return refuse(i, "reshapes " + dims_text(*in) + " into " + dims_text(out));
    }
    y = b_.reshape(id, *x, out);
  }
  act_[n.output(0)] = y;
  unbatched_.insert(n.output(0));
}

}  // namespace gp::model::onnx_detail
