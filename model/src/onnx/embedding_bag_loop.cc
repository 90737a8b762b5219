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
#include <map>

#include "onnx/graph_eval.h"
#include "onnx/importer.h"

namespace gp::model::onnx_detail {
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

void visit_nested_at(const onnx::NodeProto& n,
                     const std::function<void(const onnx::NodeProto&)>& visit, int depth) {
  visit(n);
  if (depth > 32) return;
  for (const auto& a : n.attribute()) {
    if (!a.has_g()) continue;
    for (const auto& inner : a.g().node()) visit_nested_at(inner, visit, depth + 1);
  }
}

}  // namespace

void visit_nested(const onnx::NodeProto& n,
                  const std::function<void(const onnx::NodeProto&)>& visit) {
  visit_nested_at(n, visit, 0);
}

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
      if (p < 0 || is_sliced_ids(name)) {
        if (p >= 0 || is_data_input(name)) {
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

bool Importer::is_data_input(const std::string& name) const {
  if (consts_.count(name) || weight_inputs_.count(name)) return false;
  for (const auto& in : g_.input()) {
    if (in.name() == name) return true;
  }
  return false;
}

std::optional<std::vector<int64_t>> Importer::constant_ints(const onnx::NodeProto& n,
                                                            int input) const {
  if (n.input_size() <= input || n.input(input).empty()) return std::nullopt;
  const auto t = const_tensor(n.input(input));
  if (!t) return std::nullopt;
  std::vector<int64_t> out;
  for (double v : t->values) out.push_back(to_index(v));
  return out;
}

std::optional<std::vector<int64_t>> Importer::sliced_ids_shape(const std::string& name) const {
  // Up the chain to the data input, then its per-sample shape forward through each node.
  std::vector<int> chain;
  std::string at = name;
  while (producer(at) >= 0) {
    if (chain.size() == 8) return std::nullopt;
    chain.push_back(producer(at));
    if (g_.node(chain.back()).input_size() == 0) return std::nullopt;  // a Constant
    at = g_.node(chain.back()).input(0);
  }
  // An integer graph input (never a weight, even when a static export fixes all its dims).
  const auto type = elem_types_.find(at);
  const bool graph_input = !consts_.count(at) && std::any_of(g_.input().begin(), g_.input().end(),
                                                             [&](const onnx::ValueInfoProto& in) {
                                                               return in.name() == at;
                                                             });
  if (chain.empty() || !graph_input || type == elem_types_.end() ||
      (type->second != kOnnxInt64 && type->second != kOnnxInt32)) {
    return std::nullopt;
  }
  auto shape = sample_shape(at);
  if (!shape) return std::nullopt;
  const auto axis_of = [&](int64_t a) -> std::optional<size_t> {
    const auto rank = static_cast<int64_t>(shape->size()) + 1;  // with the batch axis
    if (a < 0) a += rank;
    if (a < 1 || a >= rank) return std::nullopt;  // the batch axis, or out of range
    return static_cast<size_t>(a - 1);
  };
  for (auto k = chain.rbegin(); k != chain.rend(); ++k) {
    const auto& n = g_.node(*k);
    const std::string& t = n.op_type();
    if (t == "Gather") {
      const auto axis = axis_of(attr_i(n, "axis", 0));
      const auto index = constant_ints(n, 1);
      if (!axis || !index) return std::nullopt;
      if (const_tensor(n.input(1))->dims.empty()) {
        shape->erase(shape->begin() + static_cast<std::ptrdiff_t>(*axis));
      } else {
        (*shape)[*axis] = static_cast<int64_t>(index->size());
      }
    } else if (t == "Slice") {
      const auto starts = constant_ints(n, 1), ends = constant_ints(n, 2);
      const auto axes = n.input_size() > 3 ? constant_ints(n, 3) : std::nullopt;
      const auto steps = n.input_size() > 4 ? constant_ints(n, 4) : std::nullopt;
      if (!starts || !ends || (n.input_size() > 3 && !axes) || (n.input_size() > 4 && !steps)) {
        return std::nullopt;
      }
      for (size_t j = 0; j < starts->size(); ++j) {
        const int64_t a = axes ? (*axes)[j] : static_cast<int64_t>(j);
        if (steps && (*steps)[j] != 1) return std::nullopt;
        if (a == 0) {  // the batch axis: kept whole only (`ids[:, k]`)
          if ((*starts)[j] != 0 || (*ends)[j] < (int64_t{1} << 62)) return std::nullopt;
          continue;
        }
        const auto axis = axis_of(a);
        if (!axis) return std::nullopt;
        const int64_t dim = (*shape)[*axis];
        auto clamp = [dim](int64_t v) { return std::clamp(v < 0 ? v + dim : v, int64_t{0}, dim); };
        (*shape)[*axis] = std::max<int64_t>(0, clamp((*ends)[j]) - clamp((*starts)[j]));
      }
    } else if (t == "Squeeze") {
      const auto axes = constant_ints(n, 1);
      if (!axes) return std::nullopt;
      std::vector<size_t> drop;
      for (int64_t a : *axes) {
        const auto axis = axis_of(a);
        if (!axis || (*shape)[*axis] != 1) return std::nullopt;
        drop.push_back(*axis);
      }
      std::sort(drop.rbegin(), drop.rend());
      for (size_t d : drop) shape->erase(shape->begin() + static_cast<std::ptrdiff_t>(d));
    } else if (t == "Cast") {
      const int64_t to = attr_i(n, "to", 0);
      if (to != kOnnxInt64 && to != kOnnxInt32) return std::nullopt;
    } else if (t != "Identity") {
      return std::nullopt;
    }
  }
  return shape;
}

bool Importer::is_sliced_ids(const std::string& name) const {
  return sliced_ids_shape(name).has_value();
}

const Importer::RaggedBag* Importer::ragged_by_input(const std::string& name, bool offsets) const {
  for (const auto& [loop, bag] : ragged_) {
    if ((offsets ? bag.offsets : bag.ids) == name) return &bag;
  }
  return nullptr;
}

void Importer::find_ragged_bags() {
  for (int loop = 0; loop < g_.node_size(); ++loop) {
    if (done_[static_cast<size_t>(loop)] || g_.node(loop).op_type() != "Loop") continue;
    const auto r = loop_region(loop);
    if (!r || r->value_reads.size() != 2) continue;
    const auto table = bag_table(*r);
    if (!table) continue;
    std::vector<std::string> in(r->value_reads.begin(), r->value_reads.end());
    bool one_dim_ints = true;
    for (const auto& name : in) {
      const auto type = elem_types_.find(name);
      const auto shape = shapes_.find(name);
      one_dim_ints = one_dim_ints && type != elem_types_.end() &&
                     (type->second == kOnnxInt64 || type->second == kOnnxInt32) &&
                     shape != shapes_.end() && shape->second.size() == 1;
    }
    if (!one_dim_ints || !values_stay_inside(*r, r->value_reads, *table)) continue;
    for (int order = 0; order < 2; ++order) {
      const std::string& ids = in[static_cast<size_t>(order)];
      const std::string& offsets = in[static_cast<size_t>(1 - order)];
      // The offsets must be read by the loop's pattern only: the input goes away.
      if (!only_consumers_in(offsets, r->region) || !only_consumers_in(ids, r->region)) continue;
      const auto mean = probe_bag_loop(*r, ids, 0, offsets, *table);
      if (!mean) continue;
      if (options_.max_bag > 0) {
        ragged_[loop] = RaggedBag{ids, offsets, *table, *mean};
      } else {
        ragged_refusals_[loop] =
            "nn.EmbeddingBag over ids '" + ids + "' split into bags by offsets '" + offsets +
            "' (bags of varying length): every GraphPipe input is per sample, so import with "
            "--max-bag N to give each sample N ids padded with -1 (--data then reads " +
            ids + ".npy and " + offsets + ".npy as torch takes them, and refuses a longer bag)";
      }
      break;
    }
  }
}

bool Importer::match_embedding_bag_loop(int loop) {
  const auto r = loop_region(loop);
  if (!r) return false;
  Fused f;
  if (const auto bag = ragged_.find(loop); bag != ragged_.end()) {
    f.kind = Fused::Kind::kEmbeddingBag;
    f.x = bag->second.ids;
    f.table = bag->second.table;
    f.mean = bag->second.mean;
    f.padded = true;
  }
  if (f.padded || bag_loop(*r, &f)) {
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

std::optional<std::string> Importer::bag_table(const LoopRegion& r) const {
  std::set<std::string> tables;
  for (int k : r.region) {
    visit_nested(g_.node(k), [&](const onnx::NodeProto& n) {
      if (n.op_type() != "Gather" || n.input_size() == 0) return;
      const std::string& name = n.input(0);
      if (is_weight(name) && weight_dims(name).size() == 2) {
        tables.insert(resolve_view(name).values);
      }
    });
  }
  if (tables.size() != 1) return std::nullopt;
  const std::vector<int64_t> dims = weight_dims(*tables.begin());
  if (dims[0] < 1 || dims[1] < 1 || dims[1] > kMaxEvalElements / kMaxProbeRows) {
    return std::nullopt;
  }
  return *tables.begin();
}

// The index arithmetic on the batch size (the offsets, the bag count, the empty sequence) may be
// shared with the other bags' loops, as torch.export writes it once for all of them. (Folded
// shape reads of the pattern's tensors are in the region but not claimed: they read no values.)
bool Importer::values_stay_inside(const LoopRegion& r, const std::set<std::string>& values,
                                  const std::string& table) const {
  std::set<int> carries_values = {r.last};
  for (int k : r.claimed) {
    if (g_.node(k).op_type() == "Shape") continue;
    std::set<std::string> reads;
    node_reads(g_.node(k), &reads, 0);
    for (const auto& name : reads) {
      if (values.count(name) || carries_values.count(producer(name)) ||
          (is_weight(name) && resolve_view(name).values == table)) {
        carries_values.insert(k);
        break;
      }
    }
  }
  std::set<int> inside = r.claimed;
  inside.insert(r.region.begin(), r.region.end());
  return stays_inside(carries_values, r.last, inside);
}

bool Importer::bag_loop(const LoopRegion& r, Fused* f) const {
  if (r.value_reads.size() != 1) return false;
  const std::string ids = *r.value_reads.begin();
  const auto ids_type = elem_types_.find(ids);
  const bool int_input = ids_type != elem_types_.end() &&
                         (ids_type->second == kOnnxInt64 || ids_type->second == kOnnxInt32);
  const auto bag_shape = int_input ? sample_shape(ids) : sliced_ids_shape(ids);
  if (!bag_shape || bag_shape->size() != 1 || (*bag_shape)[0] < 1) return false;
  const auto table = bag_table(r);
  if (!table || !values_stay_inside(r, {ids}, *table)) return false;
  const auto mean = probe_bag_loop(r, ids, (*bag_shape)[0], "", *table);
  if (!mean) return false;
  f->kind = Fused::Kind::kEmbeddingBag;
  f->x = ids;
  f->table = *table;
  f->mean = *mean;
  return true;
}

namespace {

// Probe bag lengths for `batch` bags: uneven, some empty (an offsets input), adding up to `total`
// when it is given (a static export's traced number of ids).
std::vector<int64_t> probe_lengths(int64_t batch, int64_t total) {
  std::vector<int64_t> lengths(static_cast<size_t>(batch));
  for (int64_t s = 0; s < batch; ++s) lengths[static_cast<size_t>(s)] = (s * 3 + 2) % 5;
  if (total < 0) return lengths;
  int64_t sum = 0;
  for (int64_t l : lengths) sum += l;
  for (size_t s = 0; sum != total && batch > 0; s = (s + 1) % lengths.size()) {
    if (sum < total)
      ++lengths[s], ++sum;
    else if (lengths[s] > 0)
      --lengths[s], --sum;
  }
  return lengths;
}

}  // namespace

std::optional<bool> Importer::probe_bag_loop(const LoopRegion& r, const std::string& ids,
                                             int64_t bag, const std::string& offsets,
                                             const std::string& table) const {
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
  // Fixed bags: two batch sizes, or a static export's traced batch. Offsets: uneven bags for two
  // batch sizes, or the traced numbers of bags and ids when both inputs are static.
  std::vector<int64_t> batches = {2, 5};
  int64_t total_ids = -1;
  if (offsets.empty() && static_batch_ > 0) batches = {static_batch_};
  if (!offsets.empty()) {
    const auto off = shapes_.find(offsets), flat = shapes_.find(ids);
    if (off != shapes_.end() && flat != shapes_.end() && off->second[0] > 0 &&
        flat->second[0] >= 0) {
      batches = {off->second[0]};
      total_ids = flat->second[0];
    }
  }
  // The table and constants, the same for every probe (a loop body reads them on every trip).
  std::map<std::string, std::optional<EvalValue>> fixed;
  auto fixed_value = [&](const std::string& name) -> std::optional<EvalValue> {
    if (const auto it = fixed.find(name); it != fixed.end()) return it->second;
    std::optional<EvalValue>& v = fixed[name];
    if (is_weight(name) && resolve_view(name).values == table) {
      if (view_of_.count(name) && resolve_view(name).values_transposed) return v;
      v.emplace().tensor = probe_table;
    } else if (auto c = consts_.find(name); c != consts_.end()) {
      int64_t count = 1;
      for (int64_t d : c->second->dims()) {
        count = d >= 0 && count <= kMaxProbeConstant ? count * d : -1;
      }
      if (count < 0 || count > kMaxProbeConstant) return v;
      auto t = eval_tensor_of(*c->second);
      if (t.ok()) v.emplace().tensor = std::move(*t);
    }
    return v;
  };
  std::optional<bool> mean;
  for (const int64_t batch : batches) {
    // The bags: [batch, bag] ids, or flat ids with the offset of each bag.
    std::vector<int64_t> starts, lengths;
    if (offsets.empty()) {
      lengths.assign(static_cast<size_t>(batch), bag);
    } else {
      lengths = probe_lengths(batch, total_ids);
    }
    EvalTensor probe_ids{{0}, {}, true}, probe_offsets{{batch}, {}, true};
    for (int64_t s = 0; s < batch; ++s) {
      starts.push_back(probe_ids.dims[0]);
      probe_offsets.values.push_back(static_cast<double>(probe_ids.dims[0]));
      for (int64_t j = 0; j < lengths[static_cast<size_t>(s)]; ++j) {
        probe_ids.values.push_back(static_cast<double>((s * 7 + j * 13 + 3) % rows));
        ++probe_ids.dims[0];
      }
    }
    if (offsets.empty()) probe_ids.dims = {batch, bag};
    const EvalLookup lookup = [&](const std::string& name) -> std::optional<EvalValue> {
      EvalValue v;
      if (name == ids) {
        v.tensor = probe_ids;
      } else if (!offsets.empty() && name == offsets) {
        v.tensor = probe_offsets;
      } else if (r.shape_reads.count(name)) {  // only its shape is read: zeros of the batch
        const auto dims = sample_shape(name);
        if (!dims) return std::nullopt;
        v.tensor.dims = {batch};
        v.tensor.dims.insert(v.tensor.dims.end(), dims->begin(), dims->end());
        int64_t count = 1;
        for (int64_t d : v.tensor.dims) count = count <= kMaxEvalElements ? count * d : count;
        if (count > kMaxEvalElements) return std::nullopt;
        v.tensor.values.assign(static_cast<size_t>(count), 0.0);
      } else {
        return fixed_value(name);
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
      const int64_t len = lengths[static_cast<size_t>(s)];
      for (int64_t c = 0; c < dim; ++c) {
        double sum = 0;
        for (int64_t j = 0; j < len; ++j) {
          const auto row = static_cast<int64_t>(
              probe_ids.values[static_cast<size_t>(starts[static_cast<size_t>(s)] + j)]);
          sum += probe_table.values[static_cast<size_t>(row * dim + c)];
        }
        const double v = got[static_cast<size_t>(s * dim + c)];
        const double mean_v = len > 0 ? sum / static_cast<double>(len) : 0.0;  // torch: empty 0
        is_sum = is_sum && std::fabs(v - sum) <= 1e-9 * std::fabs(sum);
        is_mean = is_mean && std::fabs(v - mean_v) <= 1e-9 * std::fabs(mean_v);
      }
    }
    // (Bags of one id each: the sum is the mean; sum.)
    if (!is_sum && !is_mean) return std::nullopt;
    if (mean && *mean != !is_sum) return std::nullopt;
    mean = !is_sum;
  }
  return mean;
}

}  // namespace gp::model::onnx_detail
