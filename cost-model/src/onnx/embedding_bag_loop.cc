// nn.EmbeddingBag over [batch, bag] ids. torch 1.13 wrote fixed-size bags as Gather + ReduceSum
// (mapped in convert.cc); torch 2.x writes every EmbeddingBag as a Loop over the bags: the ids
// flattened, offsets arange(0, batch * bag, bag), and per bag a Slice of the ids or of the
// gathered rows, reduced, with Ifs for empty bags and the mode, and sequences or scan outputs,
// each differently by exporter (dynamo, TorchScript) and option (optimised or not, static or
// dynamic batch). Instead of matching each node sequence, the matcher takes the loop with
// everything that feeds it from one [batch, bag] integer input and one [rows, dim] table, runs
// it on probe ids and probe table values for two batch sizes (graph_eval.h), and maps it when
// the result is the per-bag sum (or mean) of the table's rows, exactly.
#include <cmath>

#include "onnx/graph_eval.h"
#include "onnx/importer.h"

namespace gp::graph::onnx_detail {
namespace {

constexpr int kMaxPatternNodes = 256;
constexpr int64_t kMaxProbeRows = 97;  // probe tables are at most this many rows
constexpr int64_t kMaxProbeConstant = 4096;

// Names a graph's nodes read that it does not define (nor take as inputs or initializers).
void free_names(const onnx::GraphProto& g, std::set<std::string>* out, int depth = 0);

void node_reads(const onnx::NodeProto& n, std::set<std::string>* out, int depth) {
  for (const auto& in : n.input()) {
    if (!in.empty()) out->insert(in);
  }
  if (depth > 32) return;
  for (const auto& a : n.attribute()) {
    if (a.has_g()) free_names(a.g(), out, depth + 1);
  }
}

void free_names(const onnx::GraphProto& g, std::set<std::string>* out, int depth) {
  std::set<std::string> defined, read;
  for (const auto& in : g.input()) defined.insert(in.name());
  for (const auto& t : g.initializer()) defined.insert(t.name());
  for (const auto& n : g.node()) {
    node_reads(n, &read, depth);
    for (const auto& o : n.output()) defined.insert(o);
  }
  for (const auto& o : g.output()) read.insert(o.name());
  for (const auto& r : read) {
    if (!defined.count(r)) out->insert(r);
  }
}

// Every Gather's data input, in `n` and its subgraphs.
void gathered(const onnx::NodeProto& n, std::set<std::string>* out, int depth = 0) {
  if (n.op_type() == "Gather" && n.input_size() > 0) out->insert(n.input(0));
  if (depth > 32) return;
  for (const auto& a : n.attribute()) {
    if (!a.has_g()) continue;
    for (const auto& inner : a.g().node()) gathered(inner, out, depth + 1);
  }
}

}  // namespace

std::set<std::string> subgraph_reads(const onnx::NodeProto& n) {
  std::set<std::string> out;
  for (const auto& a : n.attribute()) {
    if (a.has_g()) free_names(a.g(), &out, 1);
  }
  return out;
}

// The loop, everything it depends on back to graph inputs and weights, and the nodes its result
// passes through. A data input read only by Shape nodes gives the batch size (torch.export reads
// every bag's batch from one input); the ids are the data input whose values are read.
struct Importer::LoopRegion {
  std::set<int> region;
  std::set<int> claimed;  // the region's unfolded nodes and dead nodes left around them
  std::set<std::string> value_reads, shape_reads;
  int last = -1;       // the node that gives the bags' output
  std::string result;  // and that output
};

std::optional<Importer::LoopRegion> Importer::loop_region(int loop) const {
  LoopRegion r;
  r.region = {loop};
  std::vector<int> stack = {loop};
  while (!stack.empty()) {
    const int k = stack.back();
    stack.pop_back();
    std::set<std::string> reads;
    node_reads(g_.node(k), &reads, 0);
    for (const auto& name : reads) {
      const int p = producer(name);
      if (p < 0) {
        if (act_.count(name)) {
          (g_.node(k).op_type() == "Shape" ? r.shape_reads : r.value_reads).insert(name);
        } else if (!is_weight(name)) {
          return std::nullopt;
        }
      } else if (r.region.insert(p).second) {
        if (static_cast<int>(r.region.size()) > kMaxPatternNodes) return std::nullopt;
        stack.push_back(p);
      }
    }
  }
  // What the loop's one used output passes through to become the bags' [batch, dim] output.
  r.last = loop;
  for (const auto& o : g_.node(loop).output()) {
    if (o.empty() || only_consumers_in(o, {})) continue;
    if (!r.result.empty()) return std::nullopt;
    r.result = o;
  }
  if (r.result.empty()) return std::nullopt;
  for (;;) {
    const int c = sole_consumer(r.result);
    if (c < 0 || done_[static_cast<size_t>(c)]) break;
    const std::string& t = g_.node(c).op_type();
    if (t != "ConcatFromSequence" && t != "Cast" && t != "CastLike" && t != "Identity") break;
    if (g_.node(c).input(0) != r.result) break;
    r.region.insert(c);
    r.last = c, r.result = g_.node(c).output(0);
  }
  // Nodes that read only the pattern's tensors and whose outputs nobody reads (the exporter
  // leaves such Identity nodes behind) belong to it too.
  for (int k : r.region) {
    if (!done_[static_cast<size_t>(k)]) r.claimed.insert(k);
  }
  for (int k = 0; k < g_.node_size(); ++k) {
    if (r.claimed.count(k) || done_[static_cast<size_t>(k)]) continue;
    const auto& n = g_.node(k);
    bool dead = n.input_size() > 0;
    for (const auto& in : n.input()) dead = dead && r.claimed.count(producer(in)) > 0;
    for (const auto& o : n.output()) dead = dead && only_consumers_in(o, {});
    if (dead) r.claimed.insert(k);
  }
  return r;
}

bool Importer::match_embedding_bag_loop(int loop) {
  const auto r = loop_region(loop);
  if (!r) return false;
  Fused f;
  if (bag_loop(*r, &f)) {
    // Name the operator after the module that owns the table ("bag.weight" -> "bag").
    const std::string source = resolve_view(f.table).source;
    f.name =
        source.ends_with(".weight") ? source.substr(0, source.size() - 7) : g_.node(loop).name();
    claim(r->claimed, r->last, std::move(f));
    return true;
  }
  // Refused: the loop is the cause, so the nodes that only serve it (its index arithmetic, the
  // sequence ops after it) are refused with it instead of each being listed.
  if (options_.allow_opaque) return false;
  std::set<int> inside = r->claimed;
  inside.insert(r->region.begin(), r->region.end());
  int helpers = 0;
  for (int k : r->claimed) {
    if (k == loop) continue;
    bool serves = true;
    for (const auto& o : g_.node(k).output()) {
      serves = serves && (k == r->last || only_consumers_in(o, inside));
    }
    if (!serves) continue;
    done_[static_cast<size_t>(k)] = true;
    for (const auto& o : g_.node(k).output()) poisoned_.insert(o);
    ++helpers;
  }
  loop_helpers_[loop] = helpers;
  return false;
}

bool Importer::bag_loop(const LoopRegion& r, Fused* f) const {
  if (r.value_reads.size() != 1) return false;
  const std::string ids = *r.value_reads.begin();
  const auto ids_type = elem_types_.find(ids);
  const auto bag_shape = sample_shape(ids);
  if (ids_type == elem_types_.end() ||
      (ids_type->second != kOnnxInt64 && ids_type->second != kOnnxInt32) || !bag_shape ||
      bag_shape->size() != 1 || (*bag_shape)[0] < 1) {
    return false;
  }
  const int64_t bag = (*bag_shape)[0];
  // The table: the one [rows, dim] weight that is gathered from.
  std::set<std::string> tables;
  for (int k : r.region) {
    std::set<std::string> g;
    gathered(g_.node(k), &g);
    for (const auto& name : g) {
      if (is_weight(name) && weight_dims(name).size() == 2)
        tables.insert(resolve_view(name).values);
    }
  }
  if (tables.size() != 1) return false;
  const std::string table = *tables.begin();
  const std::vector<int64_t> table_dims = weight_dims(table);
  if (table_dims[0] < 1 || table_dims[1] < 1 || table_dims[1] > kMaxEvalElements / kMaxProbeRows) {
    return false;
  }
  // The nodes that carry the ids' or the table's values must feed nothing else. The index
  // arithmetic on the batch size (the offsets, the bag count, the empty sequence) may be shared
  // with the other bags' loops, as torch.export writes it once for all of them. (Folded shape
  // reads of the pattern's tensors are in the region but not claimed: they read no values.)
  std::set<int> carries_values = {r.last};
  for (int k : r.claimed) {
    if (g_.node(k).op_type() == "Shape") continue;
    std::set<std::string> reads;
    node_reads(g_.node(k), &reads, 0);
    for (const auto& name : reads) {
      if (name == ids || carries_values.count(producer(name)) ||
          (is_weight(name) && resolve_view(name).values == table)) {
        carries_values.insert(k);
        break;
      }
    }
  }
  std::set<int> inside = r.claimed;
  inside.insert(r.region.begin(), r.region.end());
  if (!stays_inside(carries_values, r.last, inside)) return false;
  const auto mean = probe_bag_loop(r, ids, bag, table);
  if (!mean) return false;
  f->kind = Fused::Kind::kEmbeddingBag;
  f->x = ids;
  f->table = table;
  f->mean = *mean;
  return true;
}

// Runs the region on probe values (ids that visit many rows, a table whose rows all differ):
// whether it averages the bags (else sums them), or nullopt when it computes anything else.
std::optional<bool> Importer::probe_bag_loop(const LoopRegion& r, const std::string& ids,
                                             int64_t bag, const std::string& table) const {
  const std::vector<int64_t> table_dims = weight_dims(table);
  const int64_t rows = std::min(table_dims[0], kMaxProbeRows), dim = table_dims[1];
  EvalTensor probe_table{{rows, dim}, {}, false};
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t c = 0; c < dim; ++c) {
      probe_table.values.push_back(1.0 + static_cast<double>(row) + 0.001 * static_cast<double>(c));
    }
  }
  std::vector<const onnx::NodeProto*> nodes;
  for (int k : r.region) nodes.push_back(&g_.node(k));  // std::set: in graph (topological) order
  std::optional<bool> mean;
  const std::vector<int64_t> batches =
      static_batch_ > 0 ? std::vector<int64_t>{static_batch_} : std::vector<int64_t>{2, 5};
  for (const int64_t batch : batches) {
    EvalTensor probe_ids{{batch, bag}, {}, true};
    for (int64_t s = 0; s < batch; ++s) {
      for (int64_t j = 0; j < bag; ++j) {
        probe_ids.values.push_back(static_cast<double>((s * 7 + j * 13 + 3) % rows));
      }
    }
    const EvalLookup lookup = [&](const std::string& name) -> std::optional<EvalValue> {
      EvalValue v;
      if (name == ids) {
        v.tensor = probe_ids;
      } else if (r.shape_reads.count(name)) {  // only its shape is read: zeros of the batch
        const auto dims = sample_shape(name);
        if (!dims) return std::nullopt;
        v.tensor.dims = {batch};
        v.tensor.dims.insert(v.tensor.dims.end(), dims->begin(), dims->end());
        int64_t count = 1;
        for (int64_t d : v.tensor.dims) count = count <= kMaxEvalElements ? count * d : count;
        if (count > kMaxEvalElements) return std::nullopt;
        v.tensor.values.assign(static_cast<size_t>(count), 0.0);
      } else if (is_weight(name) && resolve_view(name).values == table) {
        if (view_of_.count(name) && resolve_view(name).values_transposed) return std::nullopt;
        v.tensor = probe_table;
      } else if (auto c = consts_.find(name); c != consts_.end()) {
        int64_t count = 1;
        for (int64_t d : c->second->dims()) {
          count = d >= 0 && count <= kMaxProbeConstant ? count * d : -1;
        }
        if (count < 0 || count > kMaxProbeConstant) return std::nullopt;
        auto t = eval_tensor_of(*c->second);
        if (!t.ok()) return std::nullopt;
        v.tensor = std::move(*t);
      } else {
        return std::nullopt;
      }
      return v;
    };
    auto values = evaluate_nodes(nodes, opset_, lookup);
    if (!values.ok()) return std::nullopt;
    const auto it = values->find(r.result);
    if (it == values->end() || it->second.sequence ||
        it->second.tensor.dims != std::vector<int64_t>{batch, dim}) {
      return std::nullopt;
    }
    const auto& got = it->second.tensor.values;
    bool is_sum = true, is_mean = true;
    for (int64_t s = 0; s < batch; ++s) {
      for (int64_t c = 0; c < dim; ++c) {
        double sum = 0;
        for (int64_t j = 0; j < bag; ++j) {
          const auto row = static_cast<int64_t>(probe_ids.values[static_cast<size_t>(s * bag + j)]);
          sum += probe_table.values[static_cast<size_t>(row * dim + c)];
        }
        const double v = got[static_cast<size_t>(s * dim + c)];
        const double mean_v = sum / static_cast<double>(bag);
        is_sum = is_sum && std::fabs(v - sum) <= 1e-9 * std::fabs(sum);
        is_mean = is_mean && std::fabs(v - mean_v) <= 1e-9 * std::fabs(mean_v);
      }
    }
    // (With one id per bag the sum is the mean: sum.)
    if (!is_sum && !is_mean) return std::nullopt;
    if (mean && *mean != !is_sum) return std::nullopt;
    mean = !is_sum;
  }
  return mean;
}

}  // namespace gp::graph::onnx_detail
