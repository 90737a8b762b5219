// Slice assignment into activations, which torch exports as ScatterND: BART's decoder ids
// (`shifted[:, 1:] = ids[:, :-1]` into a fresh zeros tensor, then `shifted[:, 0] = start`), and
// `y[:, k] = f(x)` of a clone. The legacy exporter indexes every sample, pairing the batch's
// arange with the positions ([batch, ..., 2] indices computed from Range(batch)); dynamo's
// slice_scatter moves the assigned axis first and scatters constant positions along it, then
// replaces the whole tensor, [batch, 1] indices of the batch's arange.
//
// Either way each sample's elements are written from the same sample's updates at the same
// places, which is checked by running the scatter on element codes for three batch sizes. The
// op is then per sample: out = where(written, gather(updates, source of each element), data),
// the gradient reaching only the updates' elements written and the data's elements kept.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

// The most elements one probe's codes may hold.
constexpr int64_t kMaxScatterElements = int64_t{1} << 24;

// An element of an activation: its sample, and its position in that sample's row-major
// elements (the ONNX coordinates without the batch axis).
struct SampleElement {
  int64_t sample = 0, position = 0;
};

SampleElement sample_element(int64_t flat, const std::vector<int64_t>& dims, int64_t batch_axis) {
  SampleElement e;
  int64_t stride = 1;
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    const int64_t size = dims[static_cast<size_t>(d)];
    const int64_t c = flat % size;
    flat /= size;
    if (d == batch_axis) {
      e.sample = c;
    } else {
      e.position += c * stride;
      stride *= size;
    }
  }
  return e;
}

// ScatterND: each index tuple of the last axis addresses a block of `x` (its first q axes), which
// the updates' block of that tuple replaces. An empty string, or why the indices do not fit.
std::string tuple_codes(const EvalTensor& idx, const std::vector<int64_t>& x,
                        const std::vector<int64_t>& u, std::vector<int64_t>* code) {
  const int64_t q = idx.dims.back();
  if (q < 1 || q > static_cast<int64_t>(x.size())) {
    return "indices of shape " + dims_text(idx.dims) + " for data " + dims_text(x);
  }
  const int64_t block = product(x, static_cast<size_t>(q));
  const int64_t tuples = static_cast<int64_t>(idx.values.size()) / q;
  if (tuples * block != product(u)) {
    return "its updates " + dims_text(u) + " do not match indices " + dims_text(idx.dims) +
           " into data " + dims_text(x);
  }
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t offset = 0;
    for (int64_t d = 0; d < q; ++d) {
      const int64_t size = x[static_cast<size_t>(d)];
      int64_t c = to_index(idx.values[static_cast<size_t>(t * q + d)]);
      if (c < 0) c += size;
      if (c < 0 || c >= size) {
        return "an index is out of range for axis " + std::to_string(d) + " of size " +
               std::to_string(size);
      }
      offset = offset * size + c;
    }
    for (int64_t e = 0; e < block; ++e)
      (*code)[static_cast<size_t>(offset * block + e)] = t * block + e;
  }
  return "";
}

// ScatterElements along `axis`: the updates' element at c goes to c with c[axis] replaced by the
// index at c (indices and updates have one shape).
std::string element_codes(const onnx::NodeProto& n, const EvalTensor& idx,
                          const std::vector<int64_t>& x, const std::vector<int64_t>& u,
                          std::vector<int64_t>* code) {
  const auto rank = static_cast<int64_t>(x.size());
  int64_t axis = attr_i(n, "axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank || idx.dims != u || static_cast<int64_t>(u.size()) != rank) {
    return "indices " + dims_text(idx.dims) + " and updates " + dims_text(u) + " along axis " +
           std::to_string(attr_i(n, "axis", 0)) + " of data " + dims_text(x);
  }
  for (int64_t f = 0; f < product(u); ++f) {
    int64_t rest = f, offset = 0, stride = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t size = u[static_cast<size_t>(d)];
      int64_t c = rest % size;
      rest /= size;
      if (d == axis) {
        const int64_t along = x[static_cast<size_t>(d)];
        c = to_index(idx.values[static_cast<size_t>(f)]);
        if (c < 0) c += along;
        if (c < 0 || c >= along) {
          return "an index is out of range for axis " + std::to_string(d) + " of size " +
                 std::to_string(along);
        }
      } else if (c >= x[static_cast<size_t>(d)]) {
        return "its updates " + dims_text(u) + " are larger than its data " + dims_text(x);
      }
      offset += c * stride;
      stride *= x[static_cast<size_t>(d)];
    }
    (*code)[static_cast<size_t>(offset)] = f;
  }
  return "";
}

}  // namespace

bool Importer::match_batch_scatter(int i) {
  const auto& n = g_.node(i);
  if (n.input_size() != 3 || attr_s(n, "reduction", "none") != "none") return false;
  const std::string& indices = n.input(1);
  if (const auto c = const_tensor(indices); c && !has_nan(c->values)) return false;  // constant
  const int p = producer(indices);
  if (p < 0 || done_[static_cast<size_t>(p)]) return false;
  // The nodes computing the indices from shapes (the batch's arange and the positions) are never
  // converted (they have no GraphPipe operator) but evaluated when the scatter is (scatter_nd),
  // for each probe batch: the indices' ancestors up to Shape nodes, all shape arithmetic (indices
  // computed from values, an argmax of scores, are no slice assignment), read by nothing else but
  // each other, this scatter's indices and Shape nodes (which fold from index_value_dims).
  static const std::set<std::string> kShapeMath = {"Range",
                                                   "Shape",
                                                   "Size",
                                                   "Gather",
                                                   "Cast",
                                                   "CastLike",
                                                   "Unsqueeze",
                                                   "Squeeze",
                                                   "Reshape",
                                                   "Expand",
                                                   "Concat",
                                                   "Slice",
                                                   "ConstantOfShape",
                                                   "Constant",
                                                   "Identity",
                                                   "Add",
                                                   "Sub",
                                                   "Mul",
                                                   "Div",
                                                   "Mod",
                                                   "Neg",
                                                   "Min",
                                                   "Max",
                                                   "Equal",
                                                   "Less",
                                                   "Greater",
                                                   "Not",
                                                   "And",
                                                   "Or",
                                                   "Where",
                                                   "Tile",
                                                   "Transpose",
                                                   "Flatten"};
  std::set<int> nodes;
  std::vector<int> stack = {p};
  while (!stack.empty()) {
    const int k = stack.back();
    stack.pop_back();
    if (nodes.count(k) || done_[static_cast<size_t>(k)]) continue;
    const auto& kn = g_.node(k);
    if (!kShapeMath.count(kn.op_type())) return false;
    nodes.insert(k);
    if (kn.op_type() == "Shape" || kn.op_type() == "Size") continue;  // (dims, not values)
    for (const auto& in : kn.input()) {
      if (in.empty() || consts_.count(in) || folded(in)) continue;
      const int q = producer(in);
      if (q < 0) return false;  // values of a graph input
      stack.push_back(q);
    }
  }
  // Shape arithmetic computed from them and read only through Shape nodes (legacy's
  // Shape(arange + positions), which another reshape of the updates reads) goes with them.
  const auto computable = [&](int k) {
    const auto& kn = g_.node(k);
    return kShapeMath.count(kn.op_type()) > 0 &&
           std::all_of(kn.input().begin(), kn.input().end(), [&](const std::string& in) {
             return in.empty() || consts_.count(in) || folded(in) || nodes.count(producer(in));
           });
  };
  const auto read_as_shape = [&](int k) {
    for (const auto& o : g_.node(k).output()) {
      const auto readers = consumers_.find(o);
      if (readers == consumers_.end()) continue;
      for (int c : readers->second) {
        if (!nodes.count(c) && g_.node(c).op_type() != "Shape") return false;
      }
    }
    return true;
  };
  for (bool grew = true; grew;) {
    grew = false;
    for (int k = 0; k < i; ++k) {
      if (nodes.count(k) || done_[static_cast<size_t>(k)] || !computable(k) || !read_as_shape(k)) {
        continue;
      }
      nodes.insert(k);
      grew = true;
    }
  }
  const auto read_outside = [&](int k) {
    for (const auto& o : g_.node(k).output()) {
      if (o.empty()) continue;
      if (std::any_of(g_.output().begin(), g_.output().end(),
                      [&](const onnx::ValueInfoProto& out) { return out.name() == o; })) {
        return true;
      }
      const auto readers = consumers_.find(o);
      if (readers == consumers_.end()) continue;
      for (int c : readers->second) {
        const auto& cn = g_.node(c);
        const bool as_indices = c == i && o == indices && cn.input(0) != o && cn.input(2) != o;
        if (!nodes.count(c) && !as_indices && cn.op_type() != "Shape") return true;
      }
    }
    return false;
  };
  for (bool shrank = true; shrank;) {
    shrank = false;
    for (auto it = nodes.begin(); it != nodes.end();) {
      if (read_outside(*it)) {
        it = nodes.erase(it);
        shrank = true;
      } else {
        ++it;
      }
    }
  }
  if (!nodes.count(p)) return false;
  // (They still fold where they turn out constant: the shapes of activations are known only
  // as they are converted, Swin's shifted-window mask is sized by one.)
  deferred_.insert(nodes.begin(), nodes.end());
  return true;
}

std::optional<std::vector<double>> Importer::index_value_dims(const std::string& name) const {
  const auto at = at_probe_batches(name);
  if (!at) return std::nullopt;
  std::vector<double> dims;
  const size_t rank = (*at)[0].dims.size();
  for (size_t d = 0; d < rank; ++d) {
    bool same = true, batch = true;
    for (size_t k = 0; k < at->size(); ++k) {
      if ((*at)[k].dims.size() != rank) return std::nullopt;
      same = same && (*at)[k].dims[d] == (*at)[0].dims[d];
      batch = batch && (*at)[k].dims[d] == kProbeBatches[k];
    }
    dims.push_back(same ? static_cast<double>((*at)[0].dims[d]) : batch ? kBatchDim : NAN);
  }
  return dims;
}

void Importer::scatter_nd(int i, const std::string& id) {
  const auto& n = g_.node(i);
  if (attr_s(n, "reduction", "none") != "none") {
    return refuse(i, "reduction = '" + attr_s(n, "reduction", "none") +
                         "' into an activation (only plain assignment maps)");
  }
  // The indices for each probe batch, read before a per-sample constant among them becomes an op.
  const bool elements = n.op_type() == "ScatterElements";
  std::vector<EvalTensor> indices;
  // (A static export runs at the batch it traced, which its indices may hold.)
  const std::vector<int64_t> probes =
      static_batch_ > 0 ? std::vector<int64_t>{static_batch_}
                        : std::vector<int64_t>(std::begin(kProbeBatches), std::end(kProbeBatches));
  for (const int64_t batch : probes) {
    // (A per-sample constant is held as one row: tensor_at_batch repeats it.)
    std::optional<EvalTensor> idx =
        sample_consts_.count(n.input(1)) ? std::nullopt : const_tensor(n.input(1));
    if (!idx || has_nan(idx->values)) {
      std::map<std::string, EvalTensor> cache;
      idx = tensor_at_batch(n.input(1), batch, &cache);
    }
    if (!idx || has_nan(idx->values) || idx->dims.empty()) {
      return refuse(i, "its indices are not computed from constants and shapes alone");
    }
    indices.push_back(std::move(*idx));
  }
  if (const std::string why = sample_const_refusal(i); !why.empty()) return refuse(i, why);
  const std::string& data = n.input(0);
  const std::string& updates = n.input(2);
  // A static export's constant of the traced batch (a fresh zeros tensor, the value assigned)
  // beside an activation, its batch where the activation has it: the same for every sample.
  for (const auto& [name, other] : {std::pair{data, updates}, std::pair{updates, data}}) {
    const auto c = const_tensor(name);
    if (!c || act_.count(name) || !act_.count(other) || static_batch_ <= 0 || has_nan(c->values)) {
      continue;
    }
    const auto rank = static_cast<int64_t>(c->dims.size());
    const int64_t pos = rank_of(other) == rank ? layout_of(other).pos : 0;
    if (pos >= rank || c->dims[static_cast<size_t>(pos)] != static_batch_) {
      return refuse(i, "reads the constant '" + name + "' " + dims_text(c->dims) +
                           ", whose batch axis (" + std::to_string(pos) + ") is not the traced " +
                           std::to_string(static_batch_));
    }
    std::vector<float> sample_values;
    const int64_t traced[] = {static_batch_};
    if (const std::string why = one_sample_block({*c}, traced, pos, 1, &sample_values);
        !why.empty()) {
      return refuse(i, "reads the constant '" + name + "' of the traced batch (" +
                           std::to_string(static_batch_) + "): " + why);
    }
    std::vector<int64_t> sample = c->dims;
    sample.erase(sample.begin() + pos);
    if (sample.empty()) sample.push_back(1);
    act_[name] =
        b_.constant(unique_id(name, id + ".constant"), act_.at(other), sample, sample_values);
    layouts_[name] = BatchLayout{pos, 1, 1};
    infer_new_ops(b_.model().ops_size() - 1);
    break;
  }
  const auto x = activation(data);
  const auto u = activation(updates);
  if (!x || !u) {
    return refuse(i, "assigns into '" + (x ? updates : data) +
                         "', which is neither an activation nor computed from the batch size");
  }
  for (const std::string& t : {data, updates}) {
    if (!layout_of(t).batch_first() && (layout_of(t).outer != 1 || layout_of(t).inner != 1)) {
      return refuse(i, "reads '" + t + "' with per-sample axes folded into the batch (" +
                           layout_of(t).text() + ")");
    }
  }
  const auto x_shape = sample_shape(data);
  const auto u_shape = sample_shape(updates);
  if (!x_shape || !u_shape) return refuse(i, "the shapes of its data and updates are unknown");
  const int64_t positions = product(*x_shape), sources = product(*u_shape);
  // Each position of a sample: the position of the same sample's updates written there, or -1
  // where the data is kept; the same for every sample and batch size.
  std::vector<int64_t> source;
  for (size_t probe = 0; probe < probes.size(); ++probe) {
    const int64_t batch = probes[probe];
    const auto x_dims = dims_at_batch(data, batch);
    const auto u_dims = dims_at_batch(updates, batch);
    if (!x_dims || !u_dims) return refuse(i, "the shapes of its data and updates are unknown");
    const int64_t x_count = product(*x_dims), u_count = product(*u_dims);
    if (x_count != batch * positions || u_count != batch * sources ||
        x_count > kMaxScatterElements || u_count > kMaxScatterElements) {
      return refuse(i, "its data " + dims_text(*x_dims) + " and updates " + dims_text(*u_dims) +
                           " do not hold " + std::to_string(batch) + " samples of " +
                           dims_text(*x_shape) + " and " + dims_text(*u_shape) +
                           " (or are too large to check)");
    }
    // Codes: -1 keeps the data's element; k >= 0 is the updates' element k.
    std::vector<int64_t> code(static_cast<size_t>(x_count), -1);
    const std::string why = elements ? element_codes(n, indices[probe], *x_dims, *u_dims, &code)
                                     : tuple_codes(indices[probe], *x_dims, *u_dims, &code);
    if (!why.empty()) return refuse(i, why + " (a batch of " + std::to_string(batch) + ")");
    const int64_t x_axis = layout_of(data).pos, u_axis = layout_of(updates).pos;
    std::vector<int64_t> seen(static_cast<size_t>(positions), -2);
    for (int64_t o = 0; o < x_count; ++o) {
      const SampleElement at = sample_element(o, *x_dims, x_axis);
      int64_t from = -1;
      if (const int64_t c = code[static_cast<size_t>(o)]; c >= 0) {
        const SampleElement src = sample_element(c, *u_dims, u_axis);
        if (src.sample != at.sample) {
          return refuse(i,
                        "writes one sample's elements from another sample's updates (its "
                        "indices do not pair each sample with itself)");
        }
        from = src.position;
      }
      int64_t& s = seen[static_cast<size_t>(at.position)];
      if (s != -2 && s != from) {
        return refuse(i, "writes the samples of a batch of " + std::to_string(batch) +
                             " at different places");
      }
      s = from;
    }
    if (probe > 0 && seen != source) {
      return refuse(i, "writes other places for a batch of " + std::to_string(batch) +
                           " than for a batch of " + std::to_string(probes[0]));
    }
    source = std::move(seen);
  }
  const auto as_stored = [&](const std::string& name, const TensorRef& t) {
    return dtype_of(name) == graphpipe::v1::DATA_TYPE_FLOAT32 ? t : as_float(name, t, id);
  };
  const bool keeps_all = std::all_of(source.begin(), source.end(), [](int64_t s) { return s < 0; });
  bool replaces_all = *u_shape == *x_shape;
  for (int64_t e = 0; e < positions && replaces_all; ++e) {
    replaces_all = source[static_cast<size_t>(e)] == e;
  }
  // Integers are held as float32 where they mix with the other input's elements; ONNX's type
  // decides where known (a zeros tensor of int64 ids became a float32 constant).
  const auto type = elem_types_.find(n.output(0));
  const bool integer = type != elem_types_.end()
                           ? type->second == kOnnxInt64 || type->second == kOnnxInt32
                           : integer_valued(data) && integer_valued(updates);
  if (keeps_all || replaces_all) {
    const std::string& kept = keeps_all ? data : updates;
    act_[n.output(0)] = keeps_all ? *x : *u;
    layouts_[n.output(0)] = layout_of(data);  // (the output has the data's ONNX shape)
    if (integer && dtype_of(kept) == graphpipe::v1::DATA_TYPE_FLOAT32) {
      int_valued_.insert(n.output(0));
    }
    return;
  }
  const auto flat = [&](const std::string& name, const TensorRef& t,
                        const std::vector<int64_t>& shape, const std::string& what) {
    const TensorRef stored = as_stored(name, t);
    return shape.size() == 1 ? stored
                             : b_.reshape(unique_id(id + what, id), stored, {product(shape)});
  };
  const TensorRef flat_x = flat(data, *x, *x_shape, ".data");
  const TensorRef flat_u = flat(updates, *u, *u_shape, ".updates");
  std::vector<int64_t> picked(source.size());
  std::vector<float> written(source.size());
  for (size_t e = 0; e < source.size(); ++e) {
    picked[e] = std::max<int64_t>(source[e], 0);
    written[e] = source[e] >= 0 ? 1.0f : 0.0f;
  }
  const TensorRef gathered = b_.gather(unique_id(id + ".gather", id), flat_u, 0, picked);
  const TensorRef mask = b_.constant(unique_id(id + ".written", id), *x, {positions}, written);
  const TensorRef out = b_.where(unique_id(id + ".where", id), mask, gathered, flat_x);
  act_[n.output(0)] = x_shape->size() == 1 ? out : b_.reshape(id, out, *x_shape);
  layouts_[n.output(0)] = layout_of(data);
  if (integer) int_valued_.insert(n.output(0));
}

}  // namespace gp::model::onnx_detail
