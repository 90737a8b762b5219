// nn.MultiheadAttention (batch-first self-attention) as torch 2.x writes it, with either exporter
// (dynamo, optimised or not, dynamic or static batch; TorchScript at opset 17):
//   x [B, S, E] -> Transpose(1, 0, 2) -> MatMul(W_in [E, 3E]) (-> Add(b_in [3E]))
//   -> views to [3, S, B, E] (Reshape, Unsqueeze, Transpose, Squeeze) -> Gather 0, 1, 2
//   -> q, k and v viewed as [B, h, S, d], k as [B, h, d, S] (k's transpose written three ways)
//   -> q and k each scaled by d^-1/4 (a constant, or computed from the Shape of q)
//   -> MatMul -> Softmax -> MatMul v -> views to [S*B, E] -> Gemm(W_out(, b_out))
//   -> views back to [B, S, E].
// The reshape targets are constants, or arithmetic on Shape nodes of the pattern's own tensors.
// Rather than one node sequence per exporter and option, the views are followed symbolically:
// every tensor is a list of dims, each a row-major product of "atoms" (batch, sequence, q/k/v
// index, heads, head dim, ...), with the shape arithmetic evaluated for one concrete batch size.
// A Reshape regroups the atoms in order (splitting one where a target dim takes part of it),
// exactly as row-major reshapes do, so the match holds only if q, k and v really reach the scores
// as [B, h, S, d] and [B, h, d, S], and the output really returns to [B, S, E].
#include <algorithm>
#include <cmath>
#include <deque>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

// The batch size the shape arithmetic of a dynamic export is evaluated with: a prime that no
// model dimension is expected to be a multiple of, small enough that sizes stay exact in doubles.
constexpr int64_t kBatchProbe = 1000003;
// Every extent stays below this, exact in a double (larger ones, from a malformed model or a
// tensor of 2^52 elements, fail the match).
constexpr int64_t kMaxExtent = int64_t{1} << 52;

bool mul_within(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out) && *out <= kMaxExtent && *out >= -kMaxExtent;
}

// A shape-arithmetic value as an integer: finite, integral and within kMaxExtent.
std::optional<int64_t> as_int(double v) {
  if (!(std::fabs(v) <= static_cast<double>(kMaxExtent)) || v != std::trunc(v)) return std::nullopt;
  return static_cast<int64_t>(v);
}

bool is_view(const std::string& t) {
  return t == "Reshape" || t == "Transpose" || t == "Unsqueeze" || t == "Squeeze" ||
         t == "Identity";
}

std::string other_operand(const onnx::NodeProto& n, const std::string& cur) {
  if (n.input_size() != 2) return "";
  if (n.input(0) == cur) return n.input(1);
  if (n.input(1) == cur) return n.input(0);
  return "";
}

}  // namespace

struct Importer::ViewTrace {
  using Atoms = std::vector<int>;
  using Dims = std::vector<Atoms>;

  const Importer& im;
  int64_t batch_size;         // the batch the shape arithmetic is evaluated for
  std::vector<int64_t> size;  // by atom
  std::vector<Atoms> parts;   // an atom split by a reshape: its parts, major first
  std::map<std::string, Dims> views;
  std::map<std::string, FoldedValue> values;  // evaluated shape arithmetic
  std::set<int> nodes;                        // every node the match read

  ViewTrace(const Importer& importer, int64_t batch) : im(importer), batch_size(batch) {}

  int atom(int64_t n) {
    size.push_back(n);
    parts.emplace_back();
    return static_cast<int>(size.size()) - 1;
  }
  // The unsplit atoms an atom list stands for now, without atoms of size 1 (which no layout
  // depends on).
  void leaves(int a, Atoms* out) const {
    if (!parts[static_cast<size_t>(a)].empty()) {
      for (int p : parts[static_cast<size_t>(a)]) leaves(p, out);
    } else if (size[static_cast<size_t>(a)] != 1) {
      out->push_back(a);
    }
  }
  Atoms leaves(const Atoms& atoms) const {
    Atoms out;
    for (int a : atoms) leaves(a, &out);
    return out;
  }
  // The product of the atoms' sizes; -1 past kMaxExtent.
  int64_t extent(const Atoms& atoms) const {
    int64_t n = 1;
    for (int a : leaves(atoms)) {
      if (!mul_within(n, size[static_cast<size_t>(a)], &n)) return -1;
    }
    return n;
  }
  bool same(const Dims& a, const Dims& b) const {
    if (a.size() != b.size()) return false;
    for (size_t k = 0; k < a.size(); ++k) {
      if (leaves(a[k]) != leaves(b[k])) return false;
    }
    return true;
  }

  // Row-major reshape of `in` to `target` (every dim resolved and positive).
  std::optional<Dims> regroup(const Dims& in, const std::vector<int64_t>& target) {
    std::deque<int> queue;
    for (const auto& d : in) {
      for (int a : leaves(d)) queue.push_back(a);
    }
    Dims out;
    for (int64_t t : target) {
      if (t <= 0) return std::nullopt;
      Atoms dim;
      int64_t have = 1;
      while (have < t) {
        if (queue.empty() || t % have != 0) return std::nullopt;
        const int a = queue.front();
        queue.pop_front();
        const int64_t n = size[static_cast<size_t>(a)];
        int64_t more = 0;
        if (!mul_within(have, n, &more)) return std::nullopt;
        if (t % more == 0) {
          have = more;
          dim.push_back(a);
          continue;
        }
        const int64_t need = t / have;  // the major part of `a` completes this dim
        if (n % need != 0) return std::nullopt;
        const int major = atom(need);
        const int minor = atom(n / need);
        parts[static_cast<size_t>(a)] = {major, minor};
        dim.push_back(major);
        have = t;
        queue.push_front(minor);
      }
      out.push_back(std::move(dim));
    }
    if (!queue.empty()) return std::nullopt;
    return out;
  }

  // The value of shape arithmetic `name`, with Shape of a followed tensor known.
  std::optional<FoldedValue> eval(const std::string& name, int depth = 0) {
    if (auto it = values.find(name); it != values.end()) return it->second;
    if (depth > 64) return std::nullopt;
    std::optional<FoldedValue> v;
    const int p = im.producer(name);
    if (auto c = im.consts_.find(name); c != im.consts_.end()) {
      const onnx::TensorProto& t = *c->second;
      if (t.dims_size() > 1 || (t.dims_size() == 1 && (t.dims(0) < 0 || t.dims(0) > 64))) {
        return std::nullopt;  // shape arithmetic is 0-D and 1-D, and short
      }
      v = FoldedValue{values_of(t), t.data_type() == kOnnxInt64 || t.data_type() == kOnnxInt32};
    } else if (p >= 0) {
      const auto& n = im.g_.node(p);
      const std::string& t = n.op_type();
      if (t == "Constant") {
        v = constant_attr_value(n);
      } else if (t == "Shape") {
        // Of a tensor followed here, or of a converted (batch-first) activation such as the
        // model's input, whose batch is the one evaluated for.
        std::vector<double> dims;
        if (auto it = views.find(n.input(0)); it != views.end()) {
          for (const auto& d : it->second) {
            if (extent(d) < 0) return std::nullopt;
            dims.push_back(static_cast<double>(extent(d)));
          }
        } else if (auto at = im.activation(n.input(0)) ? im.dims_at_batch(n.input(0), batch_size)
                                                       : std::nullopt) {
          dims.assign(at->begin(), at->end());
        } else {
          return std::nullopt;
        }
        v = FoldedValue{shape_range(n, dims), true};
      } else if (t == "CastLike" && n.input_size() == 2) {
        v = eval(n.input(0), depth + 1);
        if (v && views.count(n.input(1))) v->ints = false;  // cast to a float activation's type
      } else {
        v = fold_node(n, [&](const std::string& input) { return eval(input, depth + 1); });
      }
    }
    if (!v) return std::nullopt;
    if (p >= 0) nodes.insert(p);
    values[name] = *v;
    return v;
  }

  // The axes of a Squeeze or Unsqueeze: the attribute (before opset 13) or the input.
  std::optional<std::vector<int64_t>> axes(const onnx::NodeProto& n) {
    if (n.input_size() < 2) return attr_ints(n, "axes");
    auto v = eval(n.input(1));
    if (!v) return std::nullopt;
    std::vector<int64_t> out;
    for (double a : v->values) {
      const auto axis = as_int(a);
      if (!axis) return std::nullopt;
      out.push_back(*axis);
    }
    return out;
  }

  // View node k applied to its followed input; false when it is not a view this trace knows.
  bool step(int k) {
    const auto& n = im.g_.node(k);
    auto it = views.find(n.input(0));
    if (it == views.end() || n.output_size() < 1) return false;
    const Dims in = it->second;
    const auto rank = static_cast<int64_t>(in.size());
    const std::string& t = n.op_type();
    Dims out;
    if (t == "Identity" || t == "Dropout") {
      out = in;
    } else if (t == "Transpose") {
      auto perm = attr_ints(n, "perm");
      if (perm.empty()) {
        for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
      }
      std::vector<int64_t> sorted = perm;
      std::sort(sorted.begin(), sorted.end());
      for (int64_t d = 0; d < static_cast<int64_t>(sorted.size()); ++d) {
        if (sorted[static_cast<size_t>(d)] != d) return false;
      }
      if (static_cast<int64_t>(perm.size()) != rank) return false;
      for (int64_t p : perm) out.push_back(in[static_cast<size_t>(p)]);
    } else if (t == "Unsqueeze" || t == "Squeeze") {
      auto ax = axes(n);
      if (!ax) return false;
      const int64_t out_rank = t == "Unsqueeze" ? rank + static_cast<int64_t>(ax->size()) : rank;
      std::set<int64_t> at;
      for (int64_t a : *ax) {
        if (a < -out_rank || a >= out_rank) return false;
        at.insert(a < 0 ? a + out_rank : a);
      }
      if (at.size() != ax->size()) return false;
      if (t == "Unsqueeze") {
        for (int64_t d = 0, from = 0; d < out_rank; ++d) {
          out.push_back(at.count(d) ? Atoms{} : in[static_cast<size_t>(from++)]);
        }
      } else {
        for (int64_t d = 0; d < rank; ++d) {
          const bool drop = at.empty() ? extent(in[static_cast<size_t>(d)]) == 1 : at.count(d) > 0;
          if (drop && extent(in[static_cast<size_t>(d)]) != 1) return false;
          if (!drop) out.push_back(in[static_cast<size_t>(d)]);
        }
      }
    } else if (t == "Reshape" && n.input_size() >= 2) {
      auto target = eval(n.input(1));
      if (!target || target->values.empty()) return false;
      int64_t total = 1;
      for (const auto& d : in) {
        if (extent(d) < 0 || !mul_within(total, extent(d), &total)) return false;
      }
      std::vector<int64_t> dims;
      int infer = -1;
      int64_t known = 1;
      for (size_t d = 0; d < target->values.size(); ++d) {
        const auto value = as_int(target->values[d]);
        if (!value) return false;
        int64_t v = *value;
        if (v == 0 && attr_i(n, "allowzero", 0) == 0) {
          if (d >= in.size()) return false;
          v = extent(in[d]);
        }
        if (v == -1) {
          if (infer >= 0) return false;
          infer = static_cast<int>(d);
        } else if (v <= 0) {
          return false;
        } else if (!mul_within(known, v, &known)) {
          return false;
        }
        dims.push_back(v);
      }
      if (infer >= 0) {
        if (total % known != 0) return false;
        dims[static_cast<size_t>(infer)] = total / known;
      }
      auto regrouped = regroup(in, dims);
      if (!regrouped) return false;
      out = std::move(*regrouped);
    } else {
      return false;
    }
    views[n.output(0)] = std::move(out);
    nodes.insert(k);
    return true;
  }

  // The one consumer of `name` besides the shape arithmetic that reads its dims or type, or -1;
  // a graph output is never inside the pattern.
  int next(const std::string& name) const {
    auto it = im.consumers_.find(name);
    if (it == im.consumers_.end()) return -1;
    for (const auto& o : im.g_.output()) {
      if (o.name() == name) return -1;
    }
    int found = -1;
    for (int c : it->second) {
      const auto& n = im.g_.node(c);
      // Shape reads only the dims, CastLike's second input only the element type.
      if (n.op_type() == "Shape" || (n.op_type() == "CastLike" && n.input(0) != name)) continue;
      if (found >= 0 || im.done_[static_cast<size_t>(c)]) return -1;
      found = c;
    }
    return found;
  }
  // Follows the views of `name` while its one consumer is one; the last tensor reached.
  std::string follow(std::string name) {
    for (int guard = 0; guard < 32; ++guard) {
      const int c = next(name);
      if (c < 0 || !is_view(im.g_.node(c).op_type()) || im.g_.node(c).input(0) != name ||
          !step(c)) {
        break;
      }
      name = im.g_.node(c).output(0);
    }
    return name;
  }
};

// One match of the pattern from its first node, step by step along it; each step is false where
// the graph leaves the pattern.
struct Importer::AttentionViewMatch {
  using Atoms = ViewTrace::Atoms;
  using Dims = ViewTrace::Dims;
  // q, k or v from its Gather up to the MatMul that reads it, through an optional scalar scale.
  struct Path {
    std::string tensor;  // what reaches the MatMul
    int matmul = -1;
    double scale = 1;
  };

  Importer& im;
  const int start;
  const onnx::NodeProto& t0;  // the Transpose of the input
  ViewTrace v;
  int64_t e = 0;             // the embedding size
  int batch = -1, seq = -1;  // atoms of the input
  int mm = -1;               // the packed input projection
  int packed = -1;           // its [3E] atom
  int embed = -1;            // the [E] part of it that q, k and v each are
  std::string proj;          // the projection's output, after the bias where it has one
  std::string in_bias;
  std::array<std::string, 3> qkv;  // the gathered tensors, by index
  std::optional<Path> q, key, val;
  Atoms hd;  // the embedding as [h, d] (one atom: a single head)
  int64_t head_size = 0;
  Dims bhsd;
  int gemm = -1;  // the output projection
  std::string out_bias;
  int embed_out = -1;  // the atom of its output
  int last = -1;       // the pattern's last node
  std::set<int> claimed;

  AttentionViewMatch(Importer& importer, int first)
      : im(importer),
        start(first),
        t0(importer.g_.node(first)),
        v(importer, importer.static_batch_ > 0 ? importer.static_batch_ : kBatchProbe) {}

  const std::string& type(int k) const { return im.g_.node(k).op_type(); }
  const std::string& out(int k) const { return im.g_.node(k).output(0); }

  // The Transpose of x [B, S, E] to [S, B, E].
  bool input() {
    if (t0.op_type() != "Transpose" || t0.input_size() != 1 ||
        attr_ints(t0, "perm") != std::vector<int64_t>{1, 0, 2} || !im.activation(t0.input(0)) ||
        !im.layout_of(t0.input(0)).batch_first()) {
      return false;  // (windows folded into the batch: the nodes convert one by one)
    }
    const auto x_shape = im.sample_shape(t0.input(0));
    if (!x_shape || x_shape->size() != 2) return false;
    e = (*x_shape)[1];
    if (e < 2 || e > kMaxExtent / 3 || (*x_shape)[0] < 1 || (*x_shape)[0] > kMaxExtent) {
      return false;
    }
    batch = v.atom(v.batch_size);
    seq = v.atom((*x_shape)[0]);
    v.views[t0.input(0)] = {{batch}, {seq}, {v.atom(e)}};
    return v.step(start);
  }

  // The packed projection: [S, B, 3E], its last dim one atom until the split names its parts.
  bool packed_projection() {
    mm = v.next(out(start));
    if (mm < 0 || type(mm) != "MatMul" || im.g_.node(mm).input(0) != out(start) ||
        !im.is_weight(im.g_.node(mm).input(1)) ||
        im.weight_dims(im.g_.node(mm).input(1)) != std::vector<int64_t>{e, 3 * e}) {
      return false;
    }
    v.nodes.insert(mm);
    packed = v.atom(3 * e);
    proj = out(mm);
    if (const int add = v.next(proj); add >= 0 && type(add) == "Add") {
      const std::string b = other_operand(im.g_.node(add), proj);
      if (!im.is_weight(b) || im.weight_dims(b) != std::vector<int64_t>{3 * e}) return false;
      in_bias = b;
      v.nodes.insert(add);
      proj = out(add);
    }
    auto dims = v.views[out(start)];
    dims.back() = {packed};
    v.views[proj] = dims;
    return true;
  }

  // q, k and v: a Gather of index 0, 1 or 2 along the 3 that the views split off the packed dim.
  bool split_qkv() {
    const std::string split = v.follow(proj);
    std::vector<int> gathers;
    for (int c : im.consumers_[split]) {
      if (type(c) != "Shape" && !(type(c) == "CastLike" && im.g_.node(c).input(0) != split)) {
        gathers.push_back(c);
      }
    }
    if (gathers.size() != 3) return false;
    for (int gk : gathers) {
      if (!gather(split, gk)) return false;
    }
    embed = v.parts[static_cast<size_t>(packed)][1];
    return true;
  }

  bool gather(const std::string& split, int gk) {
    const auto& gn = im.g_.node(gk);
    if (type(gk) != "Gather" || gn.input_size() != 2 || gn.input(0) != split ||
        im.done_[static_cast<size_t>(gk)]) {
      return false;
    }
    const auto& in = v.views[split];
    int64_t axis = attr_i(gn, "axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(in.size());
    // A 0-d index drops the axis (a [1] index would keep it).
    const auto index = v.eval(gn.input(1));
    const int ip = im.producer(gn.input(1));
    const bool scalar_index =
        im.consts_.count(gn.input(1))
            ? im.consts_.at(gn.input(1))->dims_size() == 0
            : ip >= 0 && type(ip) == "Constant" && attr(im.g_.node(ip), "value_int") != nullptr;
    if (axis < 0 || axis >= static_cast<int64_t>(in.size()) || !index ||
        index->values.size() != 1 || !scalar_index) {
      return false;
    }
    const auto& parts = v.parts[static_cast<size_t>(packed)];
    if (parts.size() != 2 || v.leaves(in[static_cast<size_t>(axis)]) != Atoms{parts[0]} ||
        v.size[static_cast<size_t>(parts[0])] != 3) {
      return false;
    }
    const auto which = as_int(index->values[0]).value_or(-1);
    if (which < 0 || which > 2 || !qkv[static_cast<size_t>(which)].empty()) return false;
    auto picked = in;
    picked.erase(picked.begin() + axis);
    v.views[gn.output(0)] = picked;
    v.nodes.insert(gk);
    qkv[static_cast<size_t>(which)] = gn.output(0);
    return true;
  }

  std::optional<Path> to_matmul(const std::string& from, bool scaled) {
    Path p;
    p.tensor = v.follow(from);
    int c = v.next(p.tensor);
    if (scaled && c >= 0 && (type(c) == "Mul" || type(c) == "Div")) {
      const std::string s = other_operand(im.g_.node(c), p.tensor);
      if (s.empty() || (type(c) == "Div" && im.g_.node(c).input(0) != p.tensor)) {
        return std::nullopt;
      }
      const auto value = v.eval(s);
      if (!value || value->values.size() != 1 || !(value->values[0] > 0)) return std::nullopt;
      p.scale = type(c) == "Mul" ? value->values[0] : 1 / value->values[0];
      v.views[out(c)] = v.views[p.tensor];
      v.nodes.insert(c);
      p.tensor = v.follow(out(c));
      c = v.next(p.tensor);
    }
    if (c < 0 || type(c) != "MatMul" || im.g_.node(c).input_size() != 2) return std::nullopt;
    p.matmul = c;
    return p;
  }

  // Each of q, k and v up to the scores, q and k through an optional positive scalar scale; the
  // layouts: q and v [B, h, S, d], k [B, h, d, S], with the embedding split as [h, d].
  bool scores() {
    q = to_matmul(qkv[0], true);
    key = to_matmul(qkv[1], true);
    val = to_matmul(qkv[2], false);
    if (!q || !key || !val || q->matmul != key->matmul || q->matmul == val->matmul ||
        im.g_.node(q->matmul).input(0) != q->tensor ||
        im.g_.node(q->matmul).input(1) != key->tensor ||
        im.g_.node(val->matmul).input(1) != val->tensor) {
      return false;
    }
    hd = v.leaves(Atoms{embed});
    if (hd.empty() || hd.size() > 2) return false;
    const Atoms heads_atoms = hd.size() == 2 ? Atoms{hd[0]} : Atoms{};
    const Atoms head_dim = {hd.back()};
    head_size = v.size[static_cast<size_t>(hd.back())];
    bhsd = {{batch}, heads_atoms, {seq}, head_dim};
    const Dims bhds = {{batch}, heads_atoms, head_dim, {seq}};
    if (!v.same(v.views[q->tensor], bhsd) || !v.same(v.views[key->tensor], bhds) ||
        !v.same(v.views[val->tensor], bhsd)) {
      return false;
    }
    const double want = 1 / std::sqrt(static_cast<double>(head_size));
    if (std::fabs(q->scale * key->scale - want) > 1e-4 * want) return false;
    v.nodes.insert(q->matmul);
    return true;
  }

  // Softmax over the keys (then an optional Dropout), and the MatMul by v.
  bool attend() {
    const int softmax = v.next(out(q->matmul));
    if (softmax < 0 || type(softmax) != "Softmax") return false;
    const int64_t axis =
        attr_i(im.g_.node(softmax), "axis", im.opset_ > 0 && im.opset_ < 13 ? 1 : -1);
    if (axis != -1 && axis != 3) return false;
    v.nodes.insert(softmax);
    std::string probs = out(softmax);
    if (const int drop = v.next(probs); drop >= 0 && type(drop) == "Dropout") {
      v.nodes.insert(drop);
      probs = out(drop);
    }
    if (v.next(probs) != val->matmul || im.g_.node(val->matmul).input(0) != probs) return false;
    v.nodes.insert(val->matmul);
    v.views[out(val->matmul)] = bhsd;
    return true;
  }

  // The heads merged back and the output projection: a Gemm (bias optional), or without biases
  // (bias=False) a MatMul by the transposed weight.
  bool output_projection() {
    const std::string flat = v.follow(out(val->matmul));
    gemm = v.next(flat);
    const auto& flat_dims = v.views[flat];
    if (gemm < 0 || (type(gemm) != "Gemm" && type(gemm) != "MatMul") ||
        im.g_.node(gemm).input(0) != flat || flat_dims.size() != 2 ||
        v.leaves(flat_dims[1]) != hd) {
      return false;
    }
    const auto& gn = im.g_.node(gemm);
    if (!im.is_weight(gn.input(1)) || im.weight_dims(gn.input(1)) != std::vector<int64_t>{e, e} ||
        attr_i(gn, "transA", 0) != 0 || attr_f(gn, "alpha", 1) != 1 || attr_f(gn, "beta", 1) != 1) {
      return false;
    }
    if (type(gemm) == "Gemm" && gn.input_size() > 2 && !gn.input(2).empty()) {
      out_bias = gn.input(2);
      if (!im.is_weight(out_bias) || im.weight_dims(out_bias) != std::vector<int64_t>{e}) {
        return false;
      }
      if (in_bias.empty()) return false;  // no module has an output bias without an input one
    }
    v.nodes.insert(gemm);
    embed_out = v.atom(e);
    v.views[out(gemm)] = {flat_dims[0], {embed_out}};
    return true;
  }

  // The views back to [B, S, E].
  bool back_to_input_layout() {
    const Dims bse = {{batch}, {seq}, {embed_out}};
    std::string result = out(gemm);
    for (int guard = 0; guard < 8 && !v.same(v.views[result], bse); ++guard) {
      const int c = v.next(result);
      if (c < 0 || !is_view(type(c)) || im.g_.node(c).input(0) != result || !v.step(c)) {
        return false;
      }
      result = out(c);
    }
    if (!v.same(v.views[result], bse)) return false;
    last = im.producer(result);
    return true;
  }

  // Claimed: the nodes read that nothing converted or folded yet, and the shape arithmetic that
  // feeds only them; every tensor inside must stay inside.
  bool claimable() {
    for (int k : v.nodes) {
      if (k >= start && !im.done_[static_cast<size_t>(k)]) claimed.insert(k);
    }
    im.absorb_shape_math(&claimed, start, last);
    // (Shape nodes folded already, from the model's shape information, read nothing at run time.)
    std::set<int> inside = claimed;
    for (int k = 0; k < im.g_.node_size(); ++k) {
      if (im.done_[static_cast<size_t>(k)]) inside.insert(k);
    }
    return im.stays_inside(claimed, last, inside);
  }

  Fused fused() const {
    const auto& gn = im.g_.node(gemm);
    Fused f;
    f.kind = Fused::Kind::kAttention;
    f.x = t0.input(0);
    f.in_weight = im.g_.node(mm).input(1);
    f.in_bias = in_bias;
    f.out_weight = gn.input(1);
    f.out_bias = out_bias;
    f.out_trans_b = attr_i(gn, "transB", 0) != 0;
    f.heads = e / head_size;
    // Named after the module (`attn.in_proj_bias` -> `attn`) where the exporter kept its names.
    const std::string suffix = ".in_proj_bias";
    f.name = in_bias.size() > suffix.size() && in_bias.ends_with(suffix)
                 ? in_bias.substr(0, in_bias.size() - suffix.size())
                 : t0.name();
    return f;
  }
};

bool Importer::match_attention_views(int start) {
  AttentionViewMatch m(*this, start);
  if (!m.input() || !m.packed_projection() || !m.split_qkv() || !m.scores() || !m.attend() ||
      !m.output_projection() || !m.back_to_input_layout() || !m.claimable()) {
    return false;
  }
  claim(m.claimed, m.last, m.fused());
  return true;
}

}  // namespace gp::model::onnx_detail
