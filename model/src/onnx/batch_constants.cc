// Values computed from the batch size: a model's shape arithmetic evaluated for a given batch
// (tensor_at_batch), constants that are the same for every sample (OPT's position ids, a cumulative
// sum of ones(B, T)), held with a batch of 1, and constants tiled over the batch with the
// attention heads folded into it (BLOOM's ALiBi).
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

bool known(const EvalTensor& t) { return !has_nan(t.values); }

// `t` (for a batch of `batch`) as one row with a batch of 1, where its axis 0 is the batch and
// every row is the same; nullopt otherwise.
std::optional<EvalTensor> batch_row(const EvalTensor& t, int64_t batch) {
  if (t.dims.empty() || t.dims[0] != batch || !known(t)) return std::nullopt;
  const size_t row = t.values.size() / static_cast<size_t>(batch);
  for (size_t e = row; e < t.values.size(); ++e) {
    if (t.values[e] != t.values[e % row]) return std::nullopt;
  }
  EvalTensor out{
      t.dims, {t.values.begin(), t.values.begin() + static_cast<std::ptrdiff_t>(row)}, t.ints};
  out.dims[0] = 1;
  return out;
}

// A row held with a batch of 1, repeated for a batch of `batch`.
EvalTensor rows_for_batch(const EvalTensor& row, int64_t batch) {
  EvalTensor out{row.dims, {}, row.ints};
  out.dims[0] = batch;
  out.values.reserve(row.values.size() * static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    out.values.insert(out.values.end(), row.values.begin(), row.values.end());
  }
  return out;
}

std::string dims_at(const std::vector<EvalTensor>& at, size_t k) {
  return dims_text(at[k].dims) + " for a batch of " + std::to_string(kProbeBatches[k]);
}

// The one axis of `at` (the value for each probe batch) that is the batch times `inner`.
std::string batch_laid_axis(const std::vector<EvalTensor>& at, int64_t* axis, int64_t* inner) {
  const auto rank = static_cast<int64_t>(at[0].dims.size());
  for (int64_t d = 0; d < rank; ++d) {
    if (std::all_of(at.begin(), at.end(), [&](const EvalTensor& t) {
          return t.dims[static_cast<size_t>(d)] == at[0].dims[static_cast<size_t>(d)];
        })) {
      continue;
    }
    if (*axis >= 0) {
      return "axes " + std::to_string(*axis) + " and " + std::to_string(d) +
             " both grow with the batch (" + dims_at(at, 0) + ", " + dims_at(at, 1) + ")";
    }
    *axis = d;
  }
  *inner = *axis < 0 ? 0 : at[0].dims[*axis] / kProbeBatches[0];
  for (size_t k = 0; k < at.size(); ++k) {
    if (*axis < 0 || at[k].dims[*axis] != kProbeBatches[k] * *inner) {
      return "no axis of it is the batch size times a constant (" + dims_at(at, 0) + ", " +
             dims_at(at, k) + ")";
    }
  }
  return "";
}

}  // namespace

std::string one_sample_block(const std::vector<EvalTensor>& at, std::span<const int64_t> batches,
                             int64_t axis, int64_t inner, std::vector<float>* values) {
  const EvalTensor& a = at[0];
  int64_t before = 1, block = inner;
  for (int64_t d = 0; d < axis; ++d) before *= a.dims[d];
  for (size_t d = static_cast<size_t>(axis) + 1; d < a.dims.size(); ++d) block *= a.dims[d];
  for (size_t k = 0; k < at.size(); ++k) {
    const int64_t batch = batches[k];
    for (int64_t o = 0; o < before; ++o) {
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t e = 0; e < block; ++e) {
          const double v = at[k].values[static_cast<size_t>((o * batch + b) * block + e)];
          const double first = a.values[static_cast<size_t>(o * batches[0] * block + e)];
          if (v != first) {
            return "sample " + std::to_string(b) + " of a batch of " + std::to_string(batch) +
                   " differs from sample 0 on axis " + std::to_string(axis) +
                   ": it is not the same for every sample";
          }
          if (k == 0 && b == 0) values->push_back(static_cast<float>(v));
        }
      }
    }
  }
  return "";
}

std::optional<EvalTensor> Importer::tensor_at_batch(const std::string& name, int64_t batch,
                                                    std::map<std::string, EvalTensor>* cache,
                                                    int depth) const {
  if (auto it = cache->find(name); it != cache->end()) return it->second;
  if (depth > 64 || (act_.count(name) && !laid_constants_.count(name)) || param_like(name)) {
    return std::nullopt;
  }
  std::optional<EvalTensor> v;
  if (sample_consts_.count(name) && tensors_.count(name)) {
    v = rows_for_batch(tensors_.at(name), batch);
  } else if (auto c = const_tensor(name);
             c && known(*c) &&
             (tensors_.count(name) || consts_.count(name) || producer(name) < 0)) {
    v = std::move(*c);  // (a list folded flat is evaluated again: its rank is a guess)
  } else if (const int p = producer(name); p >= 0) {
    v = node_at_batch(g_.node(p), name, batch, cache, depth);
  }
  if (!v) return std::nullopt;
  (*cache)[name] = *v;
  return v;
}

std::optional<EvalTensor> Importer::node_at_batch(const onnx::NodeProto& n, const std::string& name,
                                                  int64_t batch,
                                                  std::map<std::string, EvalTensor>* cache,
                                                  int depth) const {
  const std::string& t = n.op_type();
  if (t == "Constant") {  // with its rank: a value_ints list is 1-D, a value_int a scalar
    auto v = evaluate_node(n, {});
    return v.ok() ? std::move(*v) : std::nullopt;
  }
  if (t == "Shape") {
    // An activation's dims for the batch; else those of the value computed here (a folded mask
    // let go once its readers folded).
    auto dims = dims_at_batch(n.input(0), batch);
    if (!dims) {
      if (auto in = tensor_at_batch(n.input(0), batch, cache, depth + 1)) dims = in->dims;
    }
    if (!dims) return std::nullopt;
    std::vector<double> range = shape_range(n, std::vector<double>(dims->begin(), dims->end()));
    const auto length = static_cast<int64_t>(range.size());
    return EvalTensor{{length}, std::move(range), true};
  }
  if (t == "CastLike" && n.input_size() == 2) {  // input 1 gives only the type
    auto v = tensor_at_batch(n.input(0), batch, cache, depth + 1);
    const auto type = elem_types_.find(name);
    if (v && type != elem_types_.end()) {
      v->ints = type->second == kOnnxInt64 || type->second == kOnnxInt32;
    }
    return v;
  }
  std::map<std::string, EvalValue> inputs;
  for (const auto& in : n.input()) {
    if (in.empty() || inputs.count(in)) continue;
    auto value = tensor_at_batch(in, batch, cache, depth + 1);
    if (!value) return std::nullopt;
    inputs[in].tensor = std::move(*value);
  }
  auto r = evaluate_node(n, inputs);
  if (!r.ok() || !r->has_value()) return std::nullopt;
  return std::move(**r);
}

std::optional<std::vector<EvalTensor>> Importer::at_probe_batches(const std::string& name) const {
  std::vector<EvalTensor> at;
  for (const int64_t batch : kProbeBatches) {
    std::map<std::string, EvalTensor> cache;
    auto t = tensor_at_batch(name, batch, &cache);
    if (!t || !known(*t)) return std::nullopt;
    at.push_back(std::move(*t));
  }
  return at;
}

bool Importer::fold_per_sample(const onnx::NodeProto& n) {
  if (static_batch_ > 0 || n.output_size() != 1) return false;
  auto probed = at_probe_batches(n.output(0));
  if (!probed) return false;
  std::vector<EvalTensor>& at = *probed;
  // The same at every batch (mask[0] of a per-sample mask): a constant.
  if (std::all_of(at.begin(), at.end(), [&](const EvalTensor& t) {
        return t.dims == at[0].dims && t.values == at[0].values;
      })) {
    tensors_[n.output(0)] = std::move(at[0]);
    return true;
  }
  std::optional<EvalTensor> row;
  for (size_t k = 0; k < at.size(); ++k) {
    auto r = batch_row(at[k], kProbeBatches[k]);
    if (!r || (row && (r->dims != row->dims || r->values != row->values))) return false;
    row = std::move(r);
  }
  tensors_[n.output(0)] = std::move(*row);
  sample_consts_.insert(n.output(0));
  return true;
}

std::string Importer::sample_const_refusal(int i) {
  const auto& n = g_.node(i);
  const std::string& t = n.op_type();
  const auto held = std::find_if(n.input().begin(), n.input().end(), [this](const std::string& in) {
    return sample_consts_.count(in);
  });
  if (held == n.input().end()) return "";
  if ((t == "Expand" && n.input(0) == *held) ||
      (t == "Gather" && n.input_size() == 2 && n.input(1) == *held && is_weight(n.input(0)))) {
    return "";
  }
  if (elementwise_type(t)) {
    bool batched = false;
    if (std::string why = misaligned_sample_const(i, &batched); !why.empty()) return why;
    if (batched) return "";
  }
  // Any other reader takes it as what it is: a batched constant, the same row for every sample.
  // (A scatter's indices are read as values, and stay one: scatter.cc.)
  const int first = b_.model().ops_size();
  const bool scatter = t == "ScatterND" || t == "ScatterElements";
  for (int k = 0; k < n.input_size(); ++k) {
    const std::string& in = n.input(k);
    if (!sample_consts_.count(in) || (scatter && k == 1)) continue;
    const EvalTensor row = tensors_.at(in);
    const auto anchor = anchor_for(in);
    if (!anchor) {
      return "reads '" + in +
             "', computed from the batch size, with no activation to take the batch from";
    }
    std::vector<int64_t> sample(row.dims.begin() + 1, row.dims.end());
    if (sample.empty()) sample.push_back(1);
    act_[in] = b_.constant(unique_id(in, "batch_constant"), *anchor, sample,
                           std::vector<float>(row.values.begin(), row.values.end()),
                           row.ints && t == "Gather");  // (ids stay integers; else floats)
    layouts_[in] = BatchLayout{};
    sample_consts_.erase(in);
    tensors_.erase(in);
  }
  infer_new_ops(first);  // (the reader, converted next, reads its shape)
  return "";
}

std::string Importer::misaligned_sample_const(int i, bool* batched) const {
  // ONNX aligns operands on their last axes: a value's batch (axis 0) must meet the activations'
  // batch, not a per-sample axis of theirs.
  const auto& n = g_.node(i);
  for (const auto& in : n.input()) {
    if (in.empty() || !act_.count(in) || unbatched_.count(in)) continue;
    const BatchLayout l = layout_of(in);
    const auto rank = rank_of(in);
    for (const auto& c : n.input()) {
      if (!sample_consts_.count(c)) continue;
      const auto& dims = tensors_.at(c).dims;
      if (!rank || l.outer != 1 || l.inner != 1 ||
          *rank - l.pos != static_cast<int64_t>(dims.size())) {
        return "reads '" + c + "' (" + std::to_string(dims.size()) +
               " axes, the batch first; computed from the batch size), whose batch axis does not "
               "line up with the batch of '" +
               in + "' (at " + l.text() + " of " +
               (rank ? std::to_string(*rank) : std::string("?")) + " axes)";
      }
    }
    *batched = true;
  }
  return "";
}

// Tile of a constant over the batch (BLOOM's ALiBi: alibi.repeat(batch, 1, 1) of per-head
// biases, added to attention scores with the heads folded into the batch).
void Importer::tile(int i, const std::string& id) {
  const auto& n = g_.node(i);
  if (act_.count(n.input(0))) return refuse(i, "tiles an activation (no GraphPipe operator)");
  if (param_like(n.input(0))) {
    return refuse(i, "tiles '" + n.input(0) +
                         "', which trains as a weight (Tile of a weight has no GraphPipe "
                         "operator)" +
                         (dynamo_metadata_ ? "; torch's ONNX optimiser folds values computed "
                                             "from constants into initializers such as this "
                                             "one: export with optimize=False"
                                           : ""));
  }
  laid_constant(i, id);
}

void Importer::laid_constant(int i, const std::string& id) {
  const auto& n = g_.node(i);
  const auto probed = at_probe_batches(n.output(0));
  if (!probed) return refuse(i, "its value is not computed from constants and shapes alone");
  const std::vector<EvalTensor>& at = *probed;
  for (const auto& t : at) {
    if (t.dims.size() != at[0].dims.size()) {
      return refuse(i, "its rank changes with the batch size");
    }
  }
  int64_t axis = -1, inner = 0;
  if (std::string why = batch_laid_axis(at, &axis, &inner); !why.empty()) return refuse(i, why);
  std::vector<float> values;
  if (std::string why = one_sample_block(at, kProbeBatches, axis, inner, &values); !why.empty()) {
    return refuse(i, why);
  }
  const EvalTensor& a = at[0];
  std::vector<int64_t> sample(a.dims.begin(), a.dims.begin() + axis);
  if (inner > 1) sample.push_back(inner);
  sample.insert(sample.end(), a.dims.begin() + axis + 1, a.dims.end());
  if (sample.empty()) sample.push_back(1);
  const auto anchor = anchor_for(n.output(0));
  if (!anchor) return refuse(i, "no activation to take the batch from");
  // (Integers stay int64 only as table lookup ids; other readers take floats, as for Expand.)
  act_[n.output(0)] =
      b_.constant(id, *anchor, sample, std::move(values), a.ints && expands_lookup_ids(n));
  layouts_[n.output(0)] = BatchLayout{axis, 1, inner};
  laid_constants_.insert(n.output(0));
}

void drop_unread_ops(ModelGraph* model) {
  static const std::set<std::string> kParameterless = {"constant", "slice",  "reshape", "transpose",
                                                       "gather",   "binary", "unary",   "cast",
                                                       "compare",  "where",  "concat"};
  for (;;) {
    std::set<std::string> read;
    for (const auto& op : model->ops()) {
      for (const auto& in : op.inputs()) read.insert(in.op());
    }
    for (const auto& loss : model->losses()) read.insert(loss.op());
    std::set<std::string> unread;
    for (const auto& op : model->ops()) {
      if (!read.count(op.id()) && kParameterless.count(op.type())) unread.insert(op.id());
    }
    if (unread.empty()) return;
    remove_ops(model, unread);
  }
}

}  // namespace gp::model::onnx_detail
