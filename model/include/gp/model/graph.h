// Graph IR over a validated ModelGraph: operators indexed 0..n-1, edges, topological order,
// reachability and per-op costs from the catalogue.
//
// A Graph is built once (Graph::build validates and runs shape inference) and is immutable
// afterwards; const methods are safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gp/common/status.h"
#include "gp/model/ops.h"

namespace gp::model {

struct OpNode {
  int index = 0;
  const Operator* proto = nullptr;  // owned by the Graph; outputs and params filled in
  const OpTypeInfo* info = nullptr;
  std::vector<TensorSpec> input_specs;
  std::vector<int> preds;  // distinct producer op indices, ascending
  std::vector<int> succs;  // distinct consumer op indices, ascending
  OpCost cost;
  OpAttrs attrs;             // typed attributes from shape inference: kernels read these
  int64_t output_bytes = 0;  // per sample, all outputs

  const std::string& id() const { return proto->id(); }
  std::string_view type() const { return info->type; }
  OpType op_type() const { return info->id; }  // resolved once, by Graph::build
  // Output 0 holds input 0's elements in the same order (a reshape): inside a stage it can be
  // the same memory, values and gradients (gp::exec::layout_stage decides it and
  // gp::cost::stage_memory counts it, under one rule).
  bool is_view() const { return info->id == OpType::kReshape; }
};

class Graph {
 public:
  // The most operators a model may have (its reachability table, built on first use, takes
  // n^2 / 8 bytes).
  static constexpr int kMaxOps = 100000;

  // Validates `model` (ids, op types, references, acyclicity, attributes, shapes, losses) and
  // infers output shapes, parameters and costs. Errors name the op and the field:
  //   ops[3] 'b0.ffn1' (linear): attrs.out_features = 0, must be > 0
  static Result<Graph> build(const ModelGraph& model);

  Graph(Graph&&) noexcept = default;
  Graph& operator=(Graph&&) noexcept = default;

  // The model with inferred outputs and params filled in.
  const ModelGraph& model() const { return *model_; }
  int num_ops() const { return static_cast<int>(nodes_.size()); }
  const OpNode& op(int index) const { return nodes_[index]; }
  const std::vector<OpNode>& ops() const { return nodes_; }
  // -1 when no op has this id.
  int index_of(std::string_view id) const;

  // Ops in a topological order (producers first; ties broken by declaration order).
  const std::vector<int>& topo_order() const { return topo_; }
  std::vector<int> sources() const;  // ops without predecessors
  std::vector<int> sinks() const;    // ops without successors
  // Indices of the loss ops named by model().losses().
  const std::vector<int>& loss_ops() const { return loss_ops_; }
  // True when a path of one or more edges leads from `from` to `to`. The first call builds a
  // table of every pair (n^2 / 8 bytes: 312 MB at 50,000 ops), which max_parallel_branches
  // needs; the planner does not ask, so planning a large graph never pays for it.
  bool reaches(int from, int to) const;
  // model::model_hash(model()), computed on first use: every plan built from this graph carries
  // it, and hashing serialises the whole model.
  const std::string& model_hash() const;

  // One parameter of one op, by indices.
  struct ParamAt {
    int op = -1;
    int param = -1;
  };
  // model().param_ties() resolved and checked (members exist, share one shape, each parameter in
  // at most one tie), in model order.
  const std::vector<std::vector<ParamAt>>& ties() const { return ties_; }
  // The tie's first member when (op, param) is a later member of a tie (it starts as a copy of
  // that one), else nullptr.
  const ParamAt* tie_source(int op, int param) const;

  // Trainable elements of the model, a tied tensor counted once (ops' copies: OpCost::param_count).
  int64_t total_params() const;
  // Number of independent branches: the widest set of ops no two of which lie on a common path
  // (the maximum antichain, by Dilworth's theorem through bipartite matching), inputs,
  // constants and parameterless ops computed from constants alone left out.
  int max_parallel_branches() const;

 private:
  Graph() = default;
  // The steps of build, in order; each names the op and the field it refuses.
  Status index_ops();      // ids and op types, input counts
  Status link_ops();       // references and edges
  Status order_ops();      // topological order; names a cycle
  Status infer_op(int i);  // shape inference of one op whose producers are done
  Status find_losses();
  Status resolve_ties();
  void build_reachability() const;

  std::unique_ptr<ModelGraph> model_;
  std::vector<OpNode> nodes_;
  std::unordered_map<std::string, int> index_;
  std::vector<int> topo_;
  std::vector<int> loss_ops_;
  std::vector<std::vector<ParamAt>> ties_;
  // What is computed on first use (const methods may be called from any thread).
  struct Lazy {
    std::once_flag reach_once;
    std::vector<std::vector<uint64_t>> reach;  // reach[a] bit b: a reaches b
    std::once_flag hash_once;
    std::string model_hash;
  };
  std::unique_ptr<Lazy> lazy_ = std::make_unique<Lazy>();
};

// Output `ref` of the graph, or an error naming `field` when it does not exist.
Result<TensorSpec> resolve_ref(const Graph& graph, const TensorRef& ref, std::string_view field);

}  // namespace gp::model
