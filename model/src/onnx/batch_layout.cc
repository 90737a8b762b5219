// Where the batch axis of each ONNX activation is. GraphPipe tensors are per sample, with the
// batch implicit and first; real models move the ONNX batch axis (x.transpose(0, 1) to sequence
// first, timm's qkv.permute(2, 0, 3, 1, 4)) and fold per-sample dims into it (Swin's windows,
// the heads of nn.MultiheadAttention's [S, B * heads, d] views, the [S * B, E] of its output
// projection). An activation's BatchLayout says where its batch is and what it holds besides
// (outer * batch * inner, row-major); its GraphPipe tensor is the ONNX tensor reindexed per
// sample, with [outer][inner] in place of the batch axis. Transposes move the batch with its
// fold; reshapes are followed as row-major regroupings of the dims for one concrete batch size
// (a prime no model dim is a multiple of, or a static export's traced batch), which says where
// the batch lands and what joins it; every other op keeps it, counted from the last axis as
// ONNX aligns operands.
#include <algorithm>
#include <cmath>
#include <deque>
#include <set>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

// The batch size a dynamic export's views are evaluated for (as attention_views.cc's).
constexpr int64_t kLayoutProbe = 1000003;
// Every extent stays below this, exact in the doubles of folded shape arithmetic.
constexpr int64_t kMaxExtent = int64_t{1} << 52;

bool mul_within(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out) && *out <= kMaxExtent;
}

std::optional<int64_t> product_within(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || !mul_within(n, d, &n)) return std::nullopt;
  }
  return n;
}

// A folded value that holds no unknown (NaN) and not the symbolic batch.
bool resolved(const std::vector<double>& v) {
  return std::none_of(v.begin(), v.end(), [](double x) { return std::isnan(x) || x == kBatchDim; });
}

// Ops that take an activation whatever its batch layout: element-wise ones (and Clip) keep it,
// the others read their axes through sample_axis (which refuses the batch axis) or act on the
// last axes (checked in layout_refusal).
bool any_layout(const std::string& t) {
  static const std::set<std::string> kOnAxes = {"Softmax",    "LogSoftmax", "LayerNormalization",
                                                "Gemm",       "MatMul",     "ReduceSum",
                                                "ReduceMean", "ReduceMax",  "ReduceL2",
                                                "Concat",     "Slice",      "Split",
                                                "Gather",     "GatherND",   "Expand"};
  return elementwise_type(t) || t == "Clip" || kOnAxes.count(t) > 0;
}

bool view_type(const std::string& t) {
  return t == "Transpose" || t == "Reshape" || t == "Flatten" || t == "Squeeze" ||
         t == "Unsqueeze" || t == "Shape" || t == "Size";
}

}  // namespace

std::vector<int64_t> Importer::BatchLayout::fold_dims() const {
  std::vector<int64_t> dims;
  if (outer > 1) dims.push_back(outer);
  if (inner > 1) dims.push_back(inner);
  return dims;
}

std::string Importer::BatchLayout::text() const {
  std::string s = "axis " + std::to_string(pos);
  if (outer > 1 || inner > 1) {
    s += " (" + (outer > 1 ? std::to_string(outer) + " x " : std::string()) + "batch" +
         (inner > 1 ? " x " + std::to_string(inner) : std::string()) + ")";
  }
  return s;
}

int64_t Importer::probe_batch() const { return static_batch_ > 0 ? static_batch_ : kLayoutProbe; }

Importer::BatchLayout Importer::layout_of(const std::string& name) const {
  if (unbatched_.count(name) || !act_.count(name)) return {};
  if (auto it = layouts_.find(name); it != layouts_.end()) return it->second;
  const int k = producer(name);
  if (k < 0) return {};  // a graph input: batch first
  // Kept only once the output's shape is inferred (derive_layout counts its axes).
  if (!sample_rank(name)) return {};
  const BatchLayout l = derive_layout(k, name);
  layouts_[name] = l;
  return l;
}

std::optional<int64_t> Importer::sample_rank(const std::string& name) const {
  const auto a = act_.find(name);
  if (a == act_.end()) return std::nullopt;
  const auto s = specs_.find(a->second.op());
  if (s == specs_.end() || a->second.output() >= static_cast<int>(s->second.size())) {
    return std::nullopt;
  }
  return s->second[static_cast<size_t>(a->second.output())].shape_size();
}

Importer::BatchLayout Importer::derive_layout(int k, const std::string& name) const {
  const auto& n = g_.node(k);
  // What the output's batch follows: a fused pattern's input, else the first batched input
  // whose batch is not plainly first (inputs whose batches differ were refused).
  std::string base;
  if (auto f = fused_.find(k); f != fused_.end()) {
    base = f->second.x;
  } else {
    for (std::string in : n.input()) {
      // An input some conversion absorbed (a linear's MatMul, written at its bias Add): the
      // activation it read.
      const bool constant = tensors_.count(in) || consts_.count(in) || folded_.count(in);
      if (const int p = producer(in);
          !act_.count(in) && p >= 0 && !constant && g_.node(p).input_size() > 0) {
        in = g_.node(p).input(0);
      }
      if (!act_.count(in) || unbatched_.count(in)) continue;
      if (base.empty() || (layout_of(base).batch_first() && !layout_of(in).batch_first())) {
        base = in;
      }
    }
  }
  if (base.empty()) return {};
  const BatchLayout in = layout_of(base);
  // (General ops that move it set the layout themselves.)
  if (in.batch_first() || !sample_rank(base)) return {};
  const int64_t m = in.folded();
  const int64_t in_rank = *sample_rank(base) + 1 - m;
  const int64_t out_rank = *sample_rank(name) + 1 - m;
  BatchLayout out = in;
  const std::string& t = n.op_type();
  if (fused_.count(k)) {
    // gelu and layer norm keep the shape
  } else if (t == "Gather" && base != n.input(0)) {
    // A lookup: ids [.., batch, ..] -> [.., batch, .., dim], the batch where it was.
  } else if ((t == "Gather" || t.rfind("Reduce", 0) == 0) && out_rank < in_rank) {
    // Axes dropped before the batch move it forward.
    std::vector<int64_t> axes = t == "Gather" ? std::vector<int64_t>{attr_i(n, "axis", 0)}
                                              : axes_of(n).value_or(std::vector<int64_t>{});
    for (int64_t a : axes) {
      if ((a < 0 ? a + in_rank : a) < in.pos) --out.pos;
    }
  } else {
    // Element-wise and same-rank ops, broadcasting aligned on the last axis.
    out.pos = out_rank - (in_rank - in.pos);
  }
  if (out.pos < 0 || out.pos >= out_rank) return {};  // (refused where it is read)
  return out;
}

std::optional<int64_t> Importer::batch_axis(const std::string& name) const {
  if (unbatched_.count(name)) return std::nullopt;
  return layout_of(name).pos;
}

std::optional<std::vector<int64_t>> Importer::dims_at_batch(const std::string& name,
                                                            int64_t batch) const {
  if (is_weight(name)) return weight_dims(name);
  if (auto known = folded_dims(name)) {
    if (sample_consts_.count(name)) known->front() = batch;  // held with a batch of 1
    return known;
  }
  auto dims = onnx_shape(name);
  if (!dims) return std::nullopt;
  std::optional<int64_t> at = act_.count(name) ? batch_axis(name) : std::nullopt;
  if (!act_.count(name) && (is_data_input(name) || batch_vectors_.count(name))) at = 0;
  for (size_t d = 0; d < dims->size(); ++d) {
    int64_t& v = (*dims)[d];
    if (at && static_cast<int64_t>(d) == *at) {
      const BatchLayout l = layout_of(name);
      int64_t folded_batch = 0;
      if (!mul_within(l.outer, batch, &folded_batch) ||
          !mul_within(folded_batch, l.inner, &folded_batch)) {
        return std::nullopt;
      }
      v = folded_batch;
    } else if (v <= 0) {
      return std::nullopt;
    }
  }
  return dims;
}

std::optional<FoldedValue> Importer::eval_at_batch(const std::string& name, int64_t batch,
                                                   std::map<std::string, FoldedValue>* cache,
                                                   int depth) const {
  if (auto it = cache->find(name); it != cache->end()) return it->second;
  if (depth > 64) return std::nullopt;
  std::optional<FoldedValue> v;
  const int p = producer(name);
  if (auto f = folded(name); f && resolved(*f)) {
    v = FoldedValue{*f, folded_int_.count(name) > 0};
  } else if (auto c = consts_.find(name); c != consts_.end()) {
    const onnx::TensorProto& t = *c->second;
    if (t.dims_size() > 1 || (t.dims_size() == 1 && (t.dims(0) < 0 || t.dims(0) > 64))) {
      return std::nullopt;  // shape arithmetic is 0-D and 1-D, and short
    }
    v = FoldedValue{values_of(t), t.data_type() == kOnnxInt64 || t.data_type() == kOnnxInt32};
  } else if (p >= 0) {
    const auto& n = g_.node(p);
    const std::string& t = n.op_type();
    if (t == "Constant") {
      v = constant_attr_value(n);
    } else if (t == "Shape") {
      const auto dims = dims_at_batch(n.input(0), batch);
      if (!dims) return std::nullopt;
      v = FoldedValue{shape_range(n, std::vector<double>(dims->begin(), dims->end())), true};
    } else if (t == "CastLike" && n.input_size() == 2) {
      v = eval_at_batch(n.input(0), batch, cache, depth + 1);
    } else {
      v = fold_node(
          n, [&](const std::string& in) { return eval_at_batch(in, batch, cache, depth + 1); });
    }
  }
  if (!v) return std::nullopt;
  (*cache)[name] = *v;
  return v;
}

Result<std::vector<int64_t>> Importer::view_target(int i, const std::vector<int64_t>& in,
                                                   const BatchLayout& layout) const {
  const auto& n = g_.node(i);
  const std::string& t = n.op_type();
  const auto rank = static_cast<int64_t>(in.size());
  const auto total = product_within(in);
  if (!total) return invalid_argument("its input has more elements than shapes are counted in");
  if (t == "Flatten") {
    int64_t axis = attr_i(n, "axis", 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis > rank) return invalid_argument("axis out of range");
    const auto lead = product_within({in.begin(), in.begin() + axis});
    return std::vector<int64_t>{*lead, *total / std::max<int64_t>(*lead, 1)};
  }
  if (t == "Squeeze" || t == "Unsqueeze") {
    const auto axes = axes_of(n);
    if (!axes) return invalid_argument("axes are not constant");
    const bool un = t == "Unsqueeze";
    const int64_t out_rank = rank + (un ? static_cast<int64_t>(axes->size()) : 0);
    std::set<int64_t> at;
    for (int64_t a : *axes) {
      const int64_t k = a < 0 ? a + out_rank : a;
      if (k < 0 || k >= out_rank)
        return invalid_argument("axes " + dims_text(*axes) + " are out of range");
      if (!un && k == layout.pos) {
        return invalid_argument("axes " + dims_text(*axes) + " squeeze the batch axis");
      }
      at.insert(k);
    }
    std::vector<int64_t> out;
    for (int64_t k = 0, src = 0; k < (un ? out_rank : rank); ++k) {
      if (un) {
        out.push_back(at.count(k) ? 1 : in[static_cast<size_t>(src++)]);
        continue;
      }
      const int64_t d = in[static_cast<size_t>(k)];
      const bool drop = axes->empty() ? (k != layout.pos && d == 1) : at.count(k) > 0;
      if (drop && d != 1) return invalid_argument("squeezes an axis of size " + std::to_string(d));
      if (!drop) out.push_back(d);
    }
    return out;
  }
  // Reshape: the target evaluated for the probe batch, else as folded (the batch symbolic, one
  // unknown dim inferred), else the output's shape information.
  if (n.input_size() < 2) return invalid_argument("no target shape");
  std::map<std::string, FoldedValue> cache;
  std::vector<double> target;
  if (auto v = eval_at_batch(n.input(1), probe_batch(), &cache)) {
    target = v->values;
  } else if (auto f = folded(n.input(1))) {
    target = *f;
  } else if (auto s = shapes_.find(n.output(0)); s != shapes_.end() && !s->second.empty()) {
    target.assign(s->second.begin(), s->second.end());
  } else {
    return invalid_argument("its target shape is not constant");
  }
  return reshape_dims(target, in, attr_i(n, "allowzero", 0) != 0);
}

Result<std::vector<int64_t>> Importer::reshape_dims(const std::vector<double>& target,
                                                    const std::vector<int64_t>& in,
                                                    bool allowzero) const {
  const auto total = product_within(in);
  if (!total) return invalid_argument("its input has more elements than shapes are counted in");
  if (target.empty()) return invalid_argument("reshapes to a scalar");
  std::vector<int64_t> out;
  int infer = -1;
  int64_t known = 1;
  for (size_t k = 0; k < target.size(); ++k) {
    double v = target[k];
    if (v == kBatchDim) v = static_cast<double>(probe_batch());
    if (v == 0 && allowzero) return invalid_argument("allowzero = 1 with a zero-size dimension");
    if (v == 0) {
      if (k >= in.size())
        return invalid_argument("target dim " + std::to_string(k) +
                                " copies an input dim it does not have");
      v = static_cast<double>(in[k]);
    }
    if (v == -1 || std::isnan(v)) {
      if (infer >= 0) {
        return invalid_argument(
            "target shape has two dims that depend on the batch size or are "
            "-1 (elements " +
            std::to_string(infer) + " and " + std::to_string(k) + ")");
      }
      infer = static_cast<int>(k);
      out.push_back(1);
      continue;
    }
    if (!(v >= 1 && v == std::floor(v) && v <= static_cast<double>(kMaxExtent)) ||
        !mul_within(known, static_cast<int64_t>(v), &known)) {
      return invalid_argument("target dim " + std::to_string(k) + " = " + std::to_string(v) +
                              " is not a size");
    }
    out.push_back(static_cast<int64_t>(v));
  }
  if (infer >= 0) {
    if (*total % known != 0) {
      return invalid_argument("target " + dims_text(out) + " (with -1 at " + std::to_string(infer) +
                              ") does not fit the input " + dims_text(in) +
                              ": the other dims do not divide its elements");
    }
    out[static_cast<size_t>(infer)] = *total / known;
  }
  return out;
}

Result<Importer::ViewResult> Importer::regroup(const std::vector<int64_t>& in,
                                               const BatchLayout& layout,
                                               const std::vector<int64_t>& target) const {
  struct Piece {
    int64_t size;
    bool batch;
  };
  std::deque<Piece> queue;  // the input's dims row-major; size-1 dims carry nothing
  for (size_t k = 0; k < in.size(); ++k) {
    if (static_cast<int64_t>(k) != layout.pos) {
      if (in[k] != 1) queue.push_back({in[k], false});
      continue;
    }
    if (layout.outer > 1) queue.push_back({layout.outer, false});
    queue.push_back({in[k] / (layout.outer * layout.inner), true});
    if (layout.inner > 1) queue.push_back({layout.inner, false});
  }
  ViewResult r;
  bool placed = false;
  for (size_t j = 0; j < target.size(); ++j) {
    const int64_t t = target[j];
    int64_t have = 1, before = 1, after = 1;
    bool has_batch = false;
    auto take = [&](const Piece& p) {
      if (p.batch) {
        has_batch = true;
      } else {
        (has_batch ? after : before) *= p.size;
      }
      have *= p.size;
    };
    while (true) {
      // A batch of 1 (a static export's) joins the dim it reaches first.
      if (!queue.empty() && queue.front().batch && queue.front().size == 1) {
        take(queue.front());
        queue.pop_front();
        continue;
      }
      if (have >= t) break;
      if (queue.empty()) return invalid_argument("the target has more elements than the input");
      const Piece p = queue.front();
      queue.pop_front();
      int64_t more = 0;
      if (!mul_within(have, p.size, &more)) return invalid_argument("sizes overflow");
      if (t % more == 0) {
        take(p);
        continue;
      }
      if (p.batch) {
        return invalid_argument("target dim " + std::to_string(j) + " = " + std::to_string(t) +
                                " splits the batch axis");
      }
      // The major part of the dim completes this target dim, the rest goes on.
      const int64_t need = t % have == 0 ? t / have : 0;
      if (need == 0 || p.size % need != 0) {
        return invalid_argument("target " + dims_text(target) +
                                " is not a row-major view of the input");
      }
      take({need, false});
      queue.push_front({p.size / need, false});
    }
    if (have != t) {
      return invalid_argument("target " + dims_text(target) +
                              " is not a row-major view of the input");
    }
    if (has_batch) {
      placed = true;
      r.layout = BatchLayout{static_cast<int64_t>(j), before, after};
      for (int64_t d : r.layout.fold_dims()) r.sample.push_back(d);
    } else {
      r.sample.push_back(t);
    }
  }
  if (!queue.empty() || !placed) {
    return invalid_argument("target " + dims_text(target) + " does not hold the batch axis");
  }
  if (r.sample.empty()) r.sample.push_back(1);  // [batch]: per sample [1]
  return r;
}

Result<Importer::TracedBatchView> Importer::traced_batch_view(const std::vector<double>& target,
                                                              const std::vector<int64_t>& in,
                                                              const BatchLayout& layout,
                                                              bool allowzero) const {
  // Each dim that could be the traced batch is tried as the batch; the view must then hold it,
  // unfolded, in that dim. At most one dim can: the dims before it must multiply to what
  // precedes the batch in the input, and every candidate is at least 2.
  for (size_t k = 0; k < target.size(); ++k) {
    if (!(target[k] >= 2)) continue;
    std::vector<double> as_batch = target;
    as_batch[k] = kBatchDim;
    const auto dims = reshape_dims(as_batch, in, allowzero);
    if (!dims.ok()) continue;
    auto view = regroup(in, layout, *dims);
    if (view.ok() && view->layout.pos == static_cast<int64_t>(k) && view->layout.outer == 1 &&
        view->layout.inner == 1) {
      return TracedBatchView{std::move(*view), k};
    }
  }
  return invalid_argument("no target dim read as the batch fits the input");
}

std::string Importer::layout_refusal(int i) const {
  const auto& n = g_.node(i);
  const std::string& t = n.op_type();
  if (auto f = fused_.find(i); f != fused_.end()) {
    const BatchLayout l = layout_of(f->second.x);
    const auto rank = rank_of(f->second.x);
    if (l.batch_first() || f->second.kind == Fused::Kind::kGelu) return "";
    if (f->second.kind == Fused::Kind::kLayerNorm) {
      if (!rank || l.pos != *rank - 1) return "";
      return "its layer norm normalises '" + f->second.x + "' over its last axis, the batch axis";
    }
    return "its pattern reads '" + f->second.x + "' with the batch at " + l.text() +
           ", and the fused operator takes only batch-first [batch, ...] inputs";
  }
  if (view_type(t)) return "";  // transpose() and reshape() follow the batch
  // The batched activations read, and the first whose batch is not plainly first.
  std::vector<std::string> batched;
  std::string moved;
  for (const auto& in : n.input()) {
    if (in.empty() || !act_.count(in) || unbatched_.count(in)) continue;
    batched.push_back(in);
    if (moved.empty() && !layout_of(in).batch_first()) moved = in;
  }
  if (moved.empty()) return "";
  const BatchLayout l = layout_of(moved);
  const std::string reads = "reads '" + moved + "' with the batch at " + l.text();
  // BatchNorm1d over tokens folded into the batch (LeViT's bn(x.flatten(0, 1))): the channels
  // right after the folded batch (batch_norm transposes them first).
  if (t == "BatchNormalization" && l.pos == 0 && l.outer == 1) return "";
  if (!any_layout(t)) return reads + ": " + t + " maps only batch-first tensors";
  const auto rank = rank_of(moved);
  if (!rank) return reads + ", of unknown rank";
  // ONNX aligns operands on their last axes: every batch must be the same axis from the end,
  // folded alike.
  for (const auto& in : batched) {
    const BatchLayout o = layout_of(in);
    const auto r = rank_of(in);
    if (!r || *r - o.pos != *rank - l.pos || o.outer != l.outer || o.inner != l.inner) {
      return "its inputs' batch axes do not line up: '" + moved + "' has it at " + l.text() +
             " of " + std::to_string(*rank) + " axes, '" + in + "' at " + o.text() + " of " +
             (r ? std::to_string(*r) : std::string("?")) + " axes";
    }
  }
  const int64_t last = *rank - 1;
  if (t == "Gemm" && l.pos != 0) return reads + ": the product contracts the batch axis";
  if (t == "MatMul") {
    const bool weight = n.input_size() > 1 && !act_.count(n.input(1));
    if (l.pos == last || (!weight && l.pos == last - 1)) {
      return reads + ": the product multiplies along the batch axis (one of its last two)";
    }
  }
  // Layer norm normalises the axes from `axis` on, a Softmax before opset 13 too (one axis
  // since, which sample_axis places).
  const bool coerced = t != "LayerNormalization" && opset_ > 0 && opset_ < 13;
  if (t == "LayerNormalization" || ((t == "Softmax" || t == "LogSoftmax") && coerced)) {
    int64_t axis = attr_i(n, "axis", coerced ? 1 : -1);
    if (axis < 0) axis += *rank;
    if (l.pos >= axis) {
      return reads + ": it normalises over axes from " + std::to_string(axis) +
             ", the batch axis among them";
    }
  }
  if (t == "Gather" && n.input_size() > 1 && n.input(1) == moved && *rank == 1) {
    return reads + ": a lookup of ids that hold only the folded batch";
  }
  return "";
}

Status Importer::check_output_layout(const std::string& name) {
  const BatchLayout l = layout_of(name);
  if (l.batch_first()) return ok_status();
  if (l.folded() > 0) {
    return invalid_argument(path_ + ": graph output '" + name + "' has the batch at " + l.text() +
                            ", folded with per-sample dims; GraphPipe's outputs are per sample: "
                            "view it as [batch, ...] in the model (e.g. .view(B, -1, ...))");
  }
  if (options_.warnings != nullptr) {
    options_.warnings->push_back("graph output '" + name + "' has the batch at " + l.text() +
                                 "; it is imported batch first (its targets or labels are given "
                                 "per sample, the ONNX output with that axis moved first)");
  }
  return ok_status();
}

void Importer::transpose(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  const auto rank = rank_of(n.input(0));
  if (!rank) return refuse(i, "its input's rank is unknown");
  auto perm = attr_ints(n, "perm");
  if (perm.empty()) {
    for (int64_t d = *rank - 1; d >= 0; --d) perm.push_back(d);  // ONNX's default reverses
  }
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t d = 0; d < static_cast<int64_t>(sorted.size()); ++d) {
    if (sorted[static_cast<size_t>(d)] != d || static_cast<int64_t>(perm.size()) != *rank) {
      return refuse(i, "perm " + dims_text(perm) + " is not a permutation of the " +
                           std::to_string(*rank) + " axes");
    }
  }
  // The batch moves to where perm takes it from, its folded dims with it.
  const BatchLayout in = layout_of(n.input(0));
  BatchLayout out = in;
  std::vector<int64_t> sample_perm;
  for (int64_t j = 0; j < *rank; ++j) {
    const int64_t k = perm[static_cast<size_t>(j)];
    if (k == in.pos) {
      out.pos = j;
      for (int64_t f = 0; f < in.folded(); ++f) sample_perm.push_back(in.pos + f);
    } else {
      sample_perm.push_back(k < in.pos ? k : k - 1 + in.folded());
    }
  }
  bool identity = true;
  for (size_t k = 0; k < sample_perm.size(); ++k) {
    identity = identity && sample_perm[k] == static_cast<int64_t>(k);
  }
  act_[n.output(0)] = identity ? *x : b_.transpose(id, *x, sample_perm);
  layouts_[n.output(0)] = out;
}

// Reshape, Flatten, Squeeze and Unsqueeze: a row-major regrouping of the ONNX dims (the batch
// axis one of them, with its fold), as a per-sample reshape and the batch's new place.
void Importer::reshape(int i, const std::string& id) {
  const auto& n = g_.node(i);
  auto x = activation(n.input(0));
  if (!x) return refuse(i, "its input is not an activation");
  const BatchLayout layout = layout_of(n.input(0));
  const auto in = dims_at_batch(n.input(0), probe_batch());
  if (!in) return refuse(i, "the shape of its input '" + n.input(0) + "' is not known");
  const auto target = view_target(i, *in, layout);
  const auto view =
      target.ok() ? regroup(*in, layout, *target) : Result<ViewResult>(target.status());
  if (!view.ok()) {
    // A constant target of a dynamic export where the batch belongs: torch's tracer bakes a
    // size computed in Python (int(x.shape[0] / k)) into the graph.
    const auto constant = n.op_type() == "Reshape" && n.input_size() > 1
                              ? folded(n.input(1))
                              : std::optional<std::vector<double>>();
    const bool traced = static_batch_ == 0 && constant && resolved(*constant);
    if (traced) {
      auto reading = traced_batch_view(*constant, *in, layout, attr_i(n, "allowzero", 0) != 0);
      if (reading.ok()) {
        if (options_.warnings != nullptr) {
          options_.warnings->push_back(
              "node " + std::to_string(i) + " '" + n.name() + "' (Reshape): target dim " +
              std::to_string(reading->dim) + " = " +
              std::to_string(static_cast<int64_t>((*constant)[reading->dim])) +
              " is read as the batch (the exporter traced the batch size into a constant, "
              "e.g. by int() of a tensor's shape; the ONNX file itself runs only at that batch)");
        }
        return emit_view(n, id, *x, reading->view);
      }
    }
    return refuse(i, view.status().message() +
                         (traced ? " (its target is a constant: the batch size was traced into "
                                   "the export, e.g. by int() of a tensor's shape; export with "
                                   "dynamo=True, or keep such sizes tensors)"
                                 : ""));
  }
  // One value per sample ([batch], held as [1] per sample): its ONNX rank is kept for what
  // broadcasts it (an Expand back to [batch]) where the file has no shape for it.
  if (target->size() == 1 && view->layout.batch_first()) shapes_[n.output(0)] = {-1};
  emit_view(n, id, *x, *view);
}

void Importer::emit_view(const onnx::NodeProto& n, const std::string& id, const TensorRef& x,
                         const ViewResult& view) {
  const auto shape = sample_shape(n.input(0));
  act_[n.output(0)] = shape && *shape == view.sample ? x : b_.reshape(id, x, view.sample);
  layouts_[n.output(0)] = view.layout;
}

}  // namespace gp::model::onnx_detail
