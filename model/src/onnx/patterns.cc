// Fused patterns: exporters write GELU and (before opset 17) layer norm as chains of element-wise
// nodes. Each match claims its nodes and is emitted as one operator at its last node, which comes
// after every other node of the pattern in topological order.
#include <algorithm>
#include <cmath>

#include "onnx/importer.h"

namespace gp::model::onnx_detail {
namespace {

// Exporters write these constants in float32: a relative 1e-4 accepts them and nothing else.
bool near(std::optional<double> v, double want) {
  return v && std::fabs(*v - want) <= 1e-4 * std::fabs(want) + 1e-7;
}

// A node with exactly two inputs and an output (a binary element-wise op).
bool binary(const onnx::NodeProto& n) { return n.input_size() == 2 && n.output_size() >= 1; }
bool unary(const onnx::NodeProto& n) { return n.input_size() >= 1 && n.output_size() >= 1; }

// The other input of a binary node that consumes `cur`, or "" when it does not.
std::string other_input(const onnx::NodeProto& n, const std::string& cur) {
  if (n.input_size() != 2) return "";
  if (n.input(0) == cur) return n.input(1);
  if (n.input(1) == cur) return n.input(0);
  return "";
}

constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kTanhGeluC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kTanhGeluA = 0.044715;

}  // namespace

void Importer::find_patterns() {
  for (int i = 0; i < g_.node_size(); ++i) {
    if (done_[static_cast<size_t>(i)]) continue;
    const std::string& t = g_.node(i).op_type();
    if ((t == "Tanh" || t == "Erf") && unary(g_.node(i))) match_gelu(i);
    if (t == "Transpose" && attr_ints(g_.node(i), "perm") == std::vector<int64_t>{1, 0, 2}) {
      match_attention(i);
    }
    if (t == "Loop") match_embedding_bag_loop(i);
    if (t == "GatherND" || t == "Gather") match_row_pick(i);
    if (t == "ScatterND") match_batch_scatter(i);
    if (t == "LSTM" || t == "GRU") claim_recurrent_inputs(i);
    // Layer norm is matched when its first node is converted, when the input's rank is known.
  }
}

void Importer::absorb_shape_math(std::set<int>* nodes, int first, int last) const {
  static const std::set<std::string> kShapeMath = {
      "Shape", "Gather", "Constant", "Unsqueeze", "Squeeze", "Concat",   "Cast", "CastLike", "Div",
      "Mul",   "Add",    "Sub",      "Slice",     "Reshape", "Identity", "Sqrt", "Mod"};
  for (bool grew = true; grew;) {
    grew = false;
    for (int k = last - 1; k > first; --k) {
      if (nodes->count(k) || done_[static_cast<size_t>(k)] ||
          !kShapeMath.count(g_.node(k).op_type())) {
        continue;
      }
      bool feeds_only_pattern = g_.node(k).output_size() > 0;
      for (const auto& o : g_.node(k).output()) {
        feeds_only_pattern = feeds_only_pattern && only_consumers_in(o, *nodes);
      }
      if (feeds_only_pattern) grew = nodes->insert(k).second || grew;
    }
  }
}

bool Importer::stays_inside(const std::set<int>& nodes, int last,
                            const std::set<int>& inside) const {
  for (int k : nodes) {
    if (k == last) continue;
    for (const auto& o : g_.node(k).output()) {
      if (!only_consumers_in(o, inside)) return false;
    }
  }
  return true;
}

void Importer::claim(const std::set<int>& nodes, int last, Fused f) {
  for (int k : nodes) {
    if (k != last) done_[static_cast<size_t>(k)] = true;
  }
  if (f.name.empty()) f.name = g_.node(*nodes.begin()).name();
  fused_[last] = std::move(f);
}

// erf:  x / sqrt(2) (or x * (1/sqrt 2)) -> Erf
// tanh: sqrt(2/pi) * (x + 0.044715 * x^3) -> Tanh, with x^3 as Pow(x, 3) or x * (x * x)
// then  -> + 1 -> times x and 0.5 in any order (including a precomputed 0.5 * x).
bool Importer::match_gelu(int start) {
  const auto& fn = g_.node(start);
  std::set<int> nodes = {start};
  std::string x;
  auto take = [&](int k, const char* type) {
    if (k < 0 || g_.node(k).op_type() != type || done_[static_cast<size_t>(k)] ||
        !binary(g_.node(k))) {
      return false;
    }
    nodes.insert(k);
    return true;
  };
  const int p = producer(fn.input(0));
  if (fn.op_type() == "Erf") {
    if (p < 0 || done_[static_cast<size_t>(p)]) return false;
    const auto& pn = g_.node(p);
    if (!binary(pn)) return false;
    if (pn.op_type() == "Div" && near(scalar(pn.input(1)), kSqrt2)) {
      x = pn.input(0);
    } else if (pn.op_type() == "Mul" && near(scalar(pn.input(1)), 1 / kSqrt2)) {
      x = pn.input(0);
    } else if (pn.op_type() == "Mul" && near(scalar(pn.input(0)), 1 / kSqrt2)) {
      x = pn.input(1);
    } else {
      return false;
    }
    nodes.insert(p);
  } else {
    if (!take(p, "Mul")) return false;
    const auto& pn = g_.node(p);
    const std::string s = near(scalar(pn.input(0)), kTanhGeluC)   ? pn.input(1)
                          : near(scalar(pn.input(1)), kTanhGeluC) ? pn.input(0)
                                                                  : "";
    const int q = s.empty() ? -1 : producer(s);
    if (!take(q, "Add")) return false;
    // x + 0.044715 * cube: find which operand is the scaled cube.
    for (int k = 0; k < 2 && x.empty(); ++k) {
      const std::string cand_x = g_.node(q).input(k);
      const int m = producer(g_.node(q).input(1 - k));
      if (m < 0 || g_.node(m).op_type() != "Mul" || !binary(g_.node(m))) continue;
      const auto& mn = g_.node(m);
      const std::string cube = near(scalar(mn.input(0)), kTanhGeluA)   ? mn.input(1)
                               : near(scalar(mn.input(1)), kTanhGeluA) ? mn.input(0)
                                                                       : "";
      const int c = cube.empty() ? -1 : producer(cube);
      if (c < 0 || !binary(g_.node(c))) continue;
      const auto& cn = g_.node(c);
      bool is_cube = false;
      std::set<int> cube_nodes = {m, c};
      if (cn.op_type() == "Pow" && cn.input(0) == cand_x && near(scalar(cn.input(1)), 3)) {
        is_cube = true;
      } else if (cn.op_type() == "Mul" && cn.input_size() == 2) {
        const std::string sq = other_input(cn, cand_x);
        const int sqn = sq.empty() ? -1 : producer(sq);
        if (sqn >= 0 && g_.node(sqn).op_type() == "Mul" && binary(g_.node(sqn)) &&
            g_.node(sqn).input(0) == cand_x && g_.node(sqn).input(1) == cand_x) {
          is_cube = true;
          cube_nodes.insert(sqn);
        }
      }
      if (!is_cube) continue;
      x = cand_x;
      nodes.insert(cube_nodes.begin(), cube_nodes.end());
    }
    if (x.empty()) return false;
  }
  // (1 + f) times x and 0.5.
  const int a = sole_consumer(fn.output(0));
  if (!take(a, "Add") || !near(scalar(other_input(g_.node(a), fn.output(0))), 1)) return false;
  const std::string one_plus = g_.node(a).output(0);
  const int m1 = sole_consumer(one_plus);
  if (!take(m1, "Mul")) return false;
  const std::string o1 = other_input(g_.node(m1), one_plus);
  int last = m1;
  if (o1 == x || near(scalar(o1), 0.5)) {
    const int m2 = sole_consumer(g_.node(m1).output(0));
    if (!take(m2, "Mul")) return false;
    const std::string o2 = other_input(g_.node(m2), g_.node(m1).output(0));
    if (!(o1 == x ? near(scalar(o2), 0.5) : o2 == x)) return false;
    last = m2;
  } else {
    const int h = producer(o1);  // a precomputed 0.5 * x
    if (!take(h, "Mul") || !near(scalar(other_input(g_.node(h), x)), 0.5)) return false;
  }
  if (!stays_inside(nodes, last, nodes)) return false;
  Fused f;
  f.kind = Fused::Kind::kGelu;
  f.x = x;
  f.exact = fn.op_type() == "Erf";
  claim(nodes, last, std::move(f));
  return true;
}

// mean = ReduceMean(x, last axis); d = x - mean; var = ReduceMean(d^2); y = d / sqrt(var + eps),
// optionally * gamma and + beta (weights of the last dimension's width).
bool Importer::match_layer_norm(int start) {
  const auto& r1 = g_.node(start);
  if (!unary(r1) || done_[static_cast<size_t>(start)]) return false;
  const std::string& x = r1.input(0);
  const auto rank = rank_of(x);
  auto last_axis = [&](const onnx::NodeProto& r) {
    std::vector<int64_t> axes = attr_ints(r, "axes");
    if (axes.empty() && r.input_size() > 1) {
      if (auto v = folded(r.input(1))) {
        for (double a : *v) axes.push_back(to_index(a));
      }
    }
    // The last axis of a tensor with per-sample dimensions (of a [batch] tensor it is the batch).
    return attr_i(r, "keepdims", 1) == 1 && axes.size() == 1 && rank && *rank >= 2 &&
           (axes[0] == -1 || axes[0] == *rank - 1);
  };
  if (!last_axis(r1)) return false;
  std::set<int> nodes = {start};
  auto only = [&](const std::string& name, const char* type) {
    const int k = sole_consumer(name);
    if (k < 0 || g_.node(k).op_type() != type || done_[static_cast<size_t>(k)]) return -1;
    const bool one_input = std::string(type) == "Sqrt" || std::string(type) == "ReduceMean";
    if (!(one_input ? unary(g_.node(k)) : binary(g_.node(k)))) return -1;
    nodes.insert(k);
    return k;
  };
  const int sub = only(r1.output(0), "Sub");
  if (sub < 0 || g_.node(sub).input(0) != x) return false;
  const std::string d = g_.node(sub).output(0);
  int sq = -1, div = -1;
  for (int c : consumers_[d]) {
    const auto& cn = g_.node(c);
    if (!binary(cn) || done_[static_cast<size_t>(c)]) return false;
    if ((cn.op_type() == "Pow" && near(scalar(cn.input(1)), 2)) ||
        (cn.op_type() == "Mul" && cn.input(0) == d && cn.input(1) == d)) {
      sq = c;
    } else if (cn.op_type() == "Div" && cn.input(0) == d) {
      div = c;
    } else {
      return false;
    }
  }
  if (sq < 0 || div < 0) return false;
  nodes.insert({sq, div});
  const int r2 = only(g_.node(sq).output(0), "ReduceMean");
  if (r2 < 0 || !last_axis(g_.node(r2))) return false;
  const int add_eps = only(g_.node(r2).output(0), "Add");
  if (add_eps < 0) return false;
  const auto eps = scalar(other_input(g_.node(add_eps), g_.node(r2).output(0)));
  if (!eps || !(*eps > 0)) return false;
  const int sqrt = only(g_.node(add_eps).output(0), "Sqrt");
  if (sqrt < 0 || g_.node(div).input(1) != g_.node(sqrt).output(0)) return false;
  Fused f;
  f.kind = Fused::Kind::kLayerNorm;
  f.x = x;
  f.epsilon = *eps;
  int last = div;
  auto affine = [&](const char* type, std::string* weight) {
    const std::string cur = g_.node(last).output(0);
    const int k = sole_consumer(cur);
    if (k < 0 || g_.node(k).op_type() != type || done_[static_cast<size_t>(k)] ||
        !binary(g_.node(k))) {
      return;
    }
    const std::string w = other_input(g_.node(k), cur);
    if (w.empty() || !is_weight(w) || weight_dims(w).size() != 1) return;
    *weight = w;
    nodes.insert(k);
    last = k;
  };
  affine("Mul", &f.gamma);
  affine("Add", &f.beta);
  if (!stays_inside(nodes, last, nodes)) return false;
  claim(nodes, last, std::move(f));
  return true;
}

}  // namespace gp::model::onnx_detail

namespace gp::model::onnx_detail {

// One match of the pattern from its first node, step by step along it; each step is false where
// the graph leaves the pattern.
struct Importer::AttentionMatch {
  Importer& im;
  const int start;
  const onnx::NodeProto& t0;  // the Transpose of the input
  std::set<int> nodes;        // the pattern's nodes found so far
  int64_t e = 0;              // the embedding size
  int in_mm = -1;             // the packed input projection
  int in_add = -1;            // and its bias
  std::string b_in;
  std::array<int, 3> heads_layout = {-1, -1, -1};  // the Transpose of q, k, v
  int scale = -1;                                  // q's scale
  int64_t head_dim = 0;
  int context = -1;  // the MatMul by v
  int proj = -1;     // the output projection
  int last = -1;     // the pattern's last node

  AttentionMatch(Importer& importer, int first)
      : im(importer), start(first), t0(importer.g_.node(first)), nodes{first} {}

  // The one consumer of `name` of type `type` besides Shape nodes, added to the pattern; -1 when
  // there is not exactly one consumer, or it has another type or is already taken.
  int next(const std::string& name, const char* type) {
    int found = -1;
    if (name.empty()) return -1;
    auto it = im.consumers_.find(name);
    if (it == im.consumers_.end()) return -1;
    for (int c : it->second) {
      if (im.g_.node(c).op_type() == "Shape") continue;
      if (found >= 0 || im.g_.node(c).op_type() != type || im.done_[static_cast<size_t>(c)]) {
        return -1;
      }
      found = c;
    }
    for (const auto& o : im.g_.output()) {
      if (o.name() == name) return -1;
    }
    if (found >= 0) nodes.insert(found);
    return found;
  }
  // A node without outputs has no consumer: the empty name leads `next` nowhere.
  std::string out(int k) const {
    return im.g_.node(k).output_size() > 0 ? im.g_.node(k).output(0) : std::string();
  }
  bool perm_is(int k, std::vector<int64_t> p) const {
    return attr_ints(im.g_.node(k), "perm") == p;
  }

  // The packed MatMul by W_in [E, 3E] and the Add of b_in [3E].
  bool input_projection() {
    if (t0.input_size() != 1 || t0.output_size() < 1) return false;
    in_mm = next(out(start), "MatMul");
    if (in_mm < 0 || im.g_.node(in_mm).input(0) != out(start) ||
        !im.is_weight(im.g_.node(in_mm).input(1))) {
      return false;
    }
    const auto w_in = im.weight_dims(im.g_.node(in_mm).input(1));
    if (w_in.size() != 2 || w_in[1] != 3 * w_in[0]) return false;
    e = w_in[0];
    in_add = next(out(in_mm), "Add");
    if (in_add < 0) return false;
    b_in = other_input(im.g_.node(in_add), out(in_mm));
    return im.is_weight(b_in) && im.weight_dims(b_in) == std::vector<int64_t>{3 * e};
  }

  // The three slices, in node order, must be q, k and v by where they lead: each a Reshape and a
  // Transpose to the heads' layout.
  bool heads() {
    std::vector<int> slices;
    for (int c : im.consumers_[out(in_add)]) {
      if (im.g_.node(c).op_type() == "Slice") slices.push_back(c);
    }
    std::sort(slices.begin(), slices.end());
    if (slices.size() != 3) return false;
    for (int k = 0; k < 3; ++k) {
      nodes.insert(slices[static_cast<size_t>(k)]);
      const int r = next(out(slices[static_cast<size_t>(k)]), "Reshape");
      const int t = r < 0 ? -1 : next(out(r), "Transpose");
      if (t < 0 ||
          !perm_is(t, k == 1 ? std::vector<int64_t>{1, 2, 0} : std::vector<int64_t>{1, 0, 2})) {
        return false;
      }
      heads_layout[static_cast<size_t>(k)] = t;
    }
    return true;
  }

  // q / sqrt(d): Div by the scalar, or Mul by its inverse; d must divide the embedding.
  bool query_scale() {
    scale = next(out(heads_layout[0]), "Div");
    double d = 0;
    if (scale >= 0) {
      if (im.g_.node(scale).input_size() < 2) return false;  // malformed Div (found by fuzz_onnx)
      const auto c = im.scalar(im.g_.node(scale).input(1));
      if (!c || *c <= 0) return false;
      d = *c * *c;
    } else {
      scale = next(out(heads_layout[0]), "Mul");
      if (scale < 0) return false;
      const auto c = im.scalar(other_input(im.g_.node(scale), out(heads_layout[0])));
      if (!c || *c <= 0) return false;
      d = 1 / (*c * *c);
    }
    if (!(d < 1e15)) return false;
    head_dim = static_cast<int64_t>(std::llround(d));
    return head_dim > 0 && std::fabs(d - static_cast<double>(head_dim)) <= 1e-3 * d &&
           e % head_dim == 0;
  }

  // q times k, the Softmax (then an optional Dropout), and the MatMul by v.
  bool scores_and_context() {
    const int scores = next(out(scale), "MatMul");
    if (scores < 0 || im.g_.node(scores).input(0) != out(scale) ||
        im.g_.node(scores).input(1) != out(heads_layout[1])) {
      return false;
    }
    nodes.insert(heads_layout[1]);
    const int softmax = next(out(scores), "Softmax");
    if (softmax < 0 || attr_i(im.g_.node(softmax), "axis", -1) != -1) return false;
    std::string probs = out(softmax);
    if (const int drop = next(probs, "Dropout"); drop >= 0) probs = out(drop);
    context = next(probs, "MatMul");
    if (context < 0 || im.g_.node(context).input(1) != out(heads_layout[2])) return false;
    nodes.insert(heads_layout[2]);
    return true;
  }

  // The heads merged back, the Gemm by W_out [E, E] with b_out, and the views back to [B, S, E].
  bool output_projection() {
    const int back = next(out(context), "Transpose");
    if (back < 0 || !perm_is(back, {1, 0, 2})) return false;
    const int flat = next(out(back), "Reshape");
    proj = flat < 0 ? -1 : next(out(flat), "Gemm");
    if (proj < 0 || im.g_.node(proj).input_size() < 3) return false;
    const auto& gp = im.g_.node(proj);
    if (!im.is_weight(gp.input(1)) || !im.is_weight(gp.input(2)) ||
        im.weight_dims(gp.input(1)) != std::vector<int64_t>{e, e} || attr_i(gp, "transA", 0) != 0 ||
        attr_f(gp, "alpha", 1) != 1 || attr_f(gp, "beta", 1) != 1) {
      return false;
    }
    const int unflat = next(out(proj), "Reshape");
    last = unflat < 0 ? -1 : next(out(unflat), "Transpose");
    return last >= 0 && perm_is(last, {1, 0, 2});
  }

  Fused fused() const {
    const auto& gp = im.g_.node(proj);
    Fused f;
    f.kind = Fused::Kind::kAttention;
    f.x = t0.input(0);
    f.in_weight = im.g_.node(in_mm).input(1);
    f.in_bias = b_in;
    f.out_weight = gp.input(1);
    f.out_bias = gp.input(2);
    f.out_trans_b = attr_i(gp, "transB", 0) != 0;
    f.heads = e / head_dim;
    f.name = t0.name();
    return f;
  }
};

// nn.MultiheadAttention(batch_first=True) self-attention, as torch.onnx.export (1.13) writes it:
//   x [B, S, E] -> Transpose(1, 0, 2) -> MatMul(W_in [E, 3E]) -> Add(b_in [3E]) -> three Slices
//   q, k, v; each Reshape [S, B*heads, d] and Transpose to [B*heads, S, d] (k to [B*heads, d, S]);
//   q Div sqrt(d) (or Mul 1/sqrt(d)) -> MatMul k -> Softmax (-> Dropout) -> MatMul v ->
//   Transpose(1, 0, 2) -> Reshape [S*B, E] -> Gemm(W_out, b_out) -> Reshape [S, B, E] ->
//   Transpose(1, 0, 2) -> [B, S, E];
// plus the Shape/Gather/Concat arithmetic of the reshapes. All of it is one multi_head_attention.
bool Importer::match_attention(int start) {
  AttentionMatch m(*this, start);
  if (!m.input_projection() || !m.heads() || !m.query_scale() || !m.scores_and_context() ||
      !m.output_projection()) {
    return false;
  }
  absorb_shape_math(&m.nodes, -1, m.last);
  claim(m.nodes, m.last, m.fused());
  return true;
}

}  // namespace gp::model::onnx_detail
