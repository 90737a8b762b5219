// Folds slices of a transpose into the transpose: when every reader of a transpose is a slice,
// each slice becomes a transpose of the same input with the slice as its window (axis, start,
// end). timm's attention writes q, k, v = qkv.reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4)
// .unbind(0): the permuted whole was copied, then each third copied again, forward and backward.
// Folded, each of q, k and v is read from qkv once, and the permuted whole is never held.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

bool is_plain_transpose(const Operator& op) {
  return op.type() == "transpose" && op.inputs_size() == 1 && op.attrs().count("perm") == 1 &&
         op.attrs().count("axis") == 0;
}

bool is_slice(const Operator& op) { return op.type() == "slice" && op.inputs_size() == 1; }

// The builder's slices always say axis, start and end; a slice that did not is left alone.
bool window_known(const Operator& slice) {
  return attr_int_or(slice, "axis", -1).ok() && attr_int(slice, "start").ok() &&
         attr_int(slice, "end").ok();
}

// Per plain transpose (by id), the indices of the slices reading it, for those that nothing
// else reads (no other op, no loss).
std::map<std::string, std::vector<int>> sliced_only(const ModelGraph& model) {
  std::map<std::string, std::vector<int>> slices;
  std::set<std::string> transposes, other_readers;
  for (const auto& op : model.ops()) {
    if (is_plain_transpose(op)) transposes.insert(op.id());
  }
  for (int i = 0; i < model.ops_size(); ++i) {
    const Operator& op = model.ops(i);
    for (const auto& in : op.inputs()) {
      if (!transposes.count(in.op())) continue;
      if (is_slice(op) && window_known(op)) {
        slices[in.op()].push_back(i);
      } else {
        other_readers.insert(in.op());
      }
    }
  }
  for (const auto& loss : model.losses()) other_readers.insert(loss.op());
  for (const auto& id : other_readers) slices.erase(id);
  return slices;
}

// The slice becomes `transpose` of the transpose's input, windowed where it sliced.
void make_window(const Operator& transpose, Operator* slice) {
  const auto rank = static_cast<int64_t>(transpose.attrs().at("perm").ints().values_size());
  const int64_t axis = *attr_int_or(*slice, "axis", -1);
  set_attr(*slice, "axis", axis < 0 ? axis + rank : axis);
  slice->set_type("transpose");
  (*slice->mutable_attrs())["perm"] = transpose.attrs().at("perm");
  *slice->mutable_inputs(0) = transpose.inputs(0);
}

}  // namespace

void fold_slices_into_transposes(ModelGraph* model) {
  const auto slices = sliced_only(*model);
  if (slices.empty()) return;
  std::map<std::string, int> index;
  for (int i = 0; i < model->ops_size(); ++i) index[model->ops(i).id()] = i;
  std::set<std::string> removed;
  for (const auto& [id, readers] : slices) {
    const Operator& transpose = model->ops(index.at(id));
    for (int r : readers) make_window(transpose, model->mutable_ops(r));
    removed.insert(id);
  }
  remove_ops(model, removed);
}

}  // namespace gp::model::onnx_detail
