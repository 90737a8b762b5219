// The neighbourhood of the improvement search (improve.h): every plan one move away.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gp/planner/improve.h"
#include "gp/planner/search.h"

namespace gp::planner {
namespace {

// The plan's stages cut along the planning units: each atom is the ops one unit has in one
// stage (a hand-made stage may hold part of a unit), and moves carry whole atoms.
struct Atoms {
  std::vector<std::vector<int>> ops;       // per atom
  std::vector<int> stage;                  // per atom
  UnitGraph graph;                         // the atoms' DAG (group_units)
  std::vector<std::vector<int>> of_stage;  // per stage, its atoms in topological order
};

Atoms make_atoms(const MoveSpace& space, const StagePlan& plan) {
  const model::Graph& graph = *space.graph;
  std::vector<int> stage_of_op(graph.num_ops(), -1);
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    for (int op : plan.stages[s].ops) stage_of_op[op] = static_cast<int>(s);
  }
  Atoms atoms;
  std::vector<int> atom_of_stage(plan.stages.size(), -1);
  for (const auto& unit : space.units->unit_ops) {
    std::fill(atom_of_stage.begin(), atom_of_stage.end(), -1);
    for (int op : unit) {
      const int s = stage_of_op[op];
      if (atom_of_stage[s] < 0) {
        atom_of_stage[s] = static_cast<int>(atoms.ops.size());
        atoms.ops.emplace_back();
        atoms.stage.push_back(s);
      }
      atoms.ops[atom_of_stage[s]].push_back(op);
    }
  }
  atoms.graph = group_units(graph, atoms.ops);
  atoms.of_stage.resize(plan.stages.size());
  for (int a : atoms.graph.topo) atoms.of_stage[atoms.stage[a]].push_back(a);
  return atoms;
}

// Whether the stages given per atom form a DAG (Kahn's algorithm over the stage edges).
bool stages_acyclic(const Atoms& atoms, const std::vector<int>& atom_stage, int num_stages) {
  std::vector<std::vector<int>> succs(num_stages);
  std::vector<int> indegree(num_stages, 0);
  for (size_t a = 0; a < atom_stage.size(); ++a) {
    for (int b : atoms.graph.succs[a]) {
      const int s = atom_stage[a], t = atom_stage[b];
      if (s == t) continue;
      succs[s].push_back(t);
      ++indegree[t];
    }
  }
  std::vector<int> ready;
  for (int s = 0; s < num_stages; ++s) {
    if (indegree[s] == 0) ready.push_back(s);
  }
  int seen = 0;
  while (!ready.empty()) {
    const int s = ready.back();
    ready.pop_back();
    ++seen;
    for (int t : succs[s]) {
      if (--indegree[t] == 0) ready.push_back(t);
    }
  }
  return seen == num_stages;
}

}  // namespace

// The moves of one plan, listed move kind by move kind; each is made (and checked) only when
// asked for, since a large plan has tens of thousands.
class Neighbourhood::Impl {
 public:
  using Make = std::function<std::optional<Neighbour>()>;

  Impl(const MoveSpace& space, const StagePlan& plan)
      : space_(space), plan_(plan), atoms_(make_atoms(space, plan)) {
    int used = 0;
    for (const auto& st : plan.stages) used += static_cast<int>(st.ranks.size());
    idle_ = space.devices - used;
    shifts();
    merges();
    series_splits();
    branch_splits();
    replica_moves();
    micro_batch_moves();
    lowering();
  }

  size_t size() const { return moves_.size(); }
  std::optional<Neighbour> get(size_t i) const { return moves_[i](); }
  bool splits_onto_idle_devices(size_t i) const { return onto_idle_[i] != 0; }

 private:
  int num_stages() const { return static_cast<int>(plan_.stages.size()); }
  int replicas(int s) const { return static_cast<int>(plan_.stages[s].ranks.size()); }
  int64_t micro_batch(int s) const { return plan_.stages[s].micro_batch; }
  double weight(int a) const {
    double w = 0;
    for (int op : atoms_.ops[a]) w += space_.op_weight[op];
    return w;
  }
  std::string atom_name(int a) const {
    const auto& ops = atoms_.ops[a];
    const std::string first = space_.graph->op(*std::min_element(ops.begin(), ops.end())).id();
    return ops.size() == 1 ? "'" + first + "'"
                           : "'" + first + "' (" + std::to_string(ops.size()) + " ops)";
  }

  // The plan with the atoms in `atom_stage`'s stages: stage s keeps its replica count and
  // micro-batch (counts[s] and sizes[s] for stages beyond the plan's); stages left empty go.
  // Ranks are laid out again in stage order, as placed_in_order does.
  StagePlan regrouped(const std::vector<int>& atom_stage, const std::vector<int>& counts,
                      const std::vector<int64_t>& sizes, const std::vector<int>& order) const {
    std::vector<StageAssignment> stages(counts.size());
    for (size_t a = 0; a < atom_stage.size(); ++a) {
      auto& ops = stages[atom_stage[a]].ops;
      ops.insert(ops.end(), atoms_.ops[a].begin(), atoms_.ops[a].end());
    }
    StagePlan p;
    p.chain = plan_.chain;
    int next = 0;
    for (int s : order) {
      if (stages[s].ops.empty()) continue;
      std::sort(stages[s].ops.begin(), stages[s].ops.end());
      stages[s].micro_batch = sizes[s];
      for (int k = 0; k < counts[s]; ++k) stages[s].ranks.push_back(next++);
      p.stages.push_back(std::move(stages[s]));
    }
    return p;
  }
  std::vector<int> counts() const {
    std::vector<int> c;
    for (int s = 0; s < num_stages(); ++s) c.push_back(replicas(s));
    return c;
  }
  std::vector<int64_t> sizes() const {
    std::vector<int64_t> b;
    for (const auto& st : plan_.stages) b.push_back(st.micro_batch);
    return b;
  }
  std::vector<int> identity_order(int n) const {
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    return order;
  }
  void add(Make make, bool onto_idle = false) {
    moves_.push_back(std::move(make));
    onto_idle_.push_back(onto_idle ? 1 : 0);
  }
  static std::optional<Neighbour> made(StagePlan p, std::string description) {
    return Neighbour{std::move(p), std::move(description)};
  }

  // A unit at a stage boundary joins the stage on the other side.
  void shifts() {
    for (size_t a = 0; a < atoms_.stage.size(); ++a) {
      const int s = atoms_.stage[a];
      if (atoms_.of_stage[s].size() < 2) continue;  // that is a merge
      std::vector<int> targets;
      for (const auto* side : {&atoms_.graph.preds[a], &atoms_.graph.succs[a]}) {
        for (int b : *side) {
          if (atoms_.stage[b] != s) targets.push_back(atoms_.stage[b]);
        }
      }
      std::sort(targets.begin(), targets.end());
      targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
      for (int t : targets) add([this, a, s, t] { return shift(static_cast<int>(a), s, t); });
    }
  }
  std::optional<Neighbour> shift(int a, int s, int t) const {
    std::vector<int> atom_stage = atoms_.stage;
    atom_stage[a] = t;
    if (!stages_acyclic(atoms_, atom_stage, num_stages())) return std::nullopt;
    StagePlan p = plan_;
    auto& from = p.stages[s].ops;
    for (int op : atoms_.ops[a]) from.erase(std::find(from.begin(), from.end(), op));
    auto& to = p.stages[t].ops;
    to.insert(to.end(), atoms_.ops[a].begin(), atoms_.ops[a].end());
    std::sort(to.begin(), to.end());
    return made(std::move(p), "moved unit " + atom_name(a) + " from stage " + std::to_string(s) +
                                  " to stage " + std::to_string(t));
  }

  // Two stages become one: adjacent ones (one stage fewer in the pipeline) or independent
  // branches paired on the same devices; on the devices of both, or on those of the larger
  // (the rest idle).
  void merges() {
    for (int s = 0; s < num_stages(); ++s) {
      for (int t = s + 1; t < num_stages(); ++t) {
        const int64_t b = std::max(micro_batch(s), micro_batch(t));
        for (int r : {replicas(s) + replicas(t), std::max(replicas(s), replicas(t))}) {
          if (r <= b) add([this, s, t, r, b] { return merge(s, t, r, b); });
        }
      }
    }
  }
  std::optional<Neighbour> merge(int s, int t, int r, int64_t b) const {
    std::vector<int> atom_stage = atoms_.stage;
    for (int& x : atom_stage) x = x == t ? s : x;
    if (!stages_acyclic(atoms_, atom_stage, num_stages())) return std::nullopt;
    auto c = counts();
    auto sz = sizes();
    c[s] = r;
    sz[s] = b;
    return made(regrouped(atom_stage, c, sz, identity_order(num_stages())),
                "merged stages " + std::to_string(s) + " and " + std::to_string(t) + " on " +
                    std::to_string(r) + " device" + (r == 1 ? "" : "s"));
  }

  // Replica counts for the two parts of a split stage of `r` replicas whose first part has
  // `share` of its work: the replicas divided by the work, or, from the idle devices, the
  // second part as many as the first keeps.
  std::vector<std::pair<int, int>> split_counts(int r, double share) const {
    std::vector<std::pair<int, int>> out;
    if (r >= 2) {
      const int first = std::clamp(static_cast<int>(std::lround(r * share)), 1, r - 1);
      out.push_back({first, r - first});
    }
    if (idle_ >= 1) out.push_back({r, std::min(r, idle_)});
    return out;
  }

  // A stage and a new one after it from `moved` of its atoms; `what` describes the cut.
  void add_split(int s, std::vector<int> moved, std::string what) {
    double moved_w = 0, total_w = 0;
    for (int a : atoms_.of_stage[s]) total_w += weight(a);
    for (int a : moved) moved_w += weight(a);
    const double share = total_w > 0 ? 1 - moved_w / total_w : 0.5;
    for (const auto& [first, second] : split_counts(replicas(s), share)) {
      if (second > micro_batch(s)) continue;
      // Init-captures: clang before 16 cannot capture structured bindings (the fuzz build).
      add([this, s, moved, what, a = first, b = second] { return split(s, moved, what, a, b); },
          /*onto_idle=*/first == replicas(s));
    }
  }
  std::optional<Neighbour> split(int s, const std::vector<int>& moved, const std::string& what,
                                 int first, int second) const {
    std::vector<int> atom_stage = atoms_.stage;
    for (int a : moved) atom_stage[a] = num_stages();
    if (!stages_acyclic(atoms_, atom_stage, num_stages() + 1)) return std::nullopt;
    std::vector<int> order;
    for (int x = 0; x < num_stages(); ++x) {
      order.push_back(x);
      if (x == s) order.push_back(num_stages());
    }
    auto c = counts();
    auto sz = sizes();
    c[s] = first;
    c.push_back(second);
    sz.push_back(micro_batch(s));
    return made(regrouped(atom_stage, c, sz, order),
                "split stage " + std::to_string(s) + " " + what + " (" + std::to_string(first) +
                    " + " + std::to_string(second) + " devices)");
  }

  // A stage cut in two along its topological order, where a quarter, half or three quarters of
  // its work lies before the cut.
  void series_splits() {
    for (int s = 0; s < num_stages(); ++s) {
      const auto& order = atoms_.of_stage[s];
      if (order.size() < 2) continue;
      double total = 0;
      for (int a : order) total += weight(a);
      std::vector<size_t> cuts;
      for (const double f : {0.25, 0.5, 0.75}) {
        double seen = 0;
        size_t k = 1;
        for (; k < order.size(); ++k) {
          seen += weight(order[k - 1]);
          if (seen >= f * total) break;
        }
        cuts.push_back(std::min(k, order.size() - 1));
      }
      std::sort(cuts.begin(), cuts.end());
      cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
      for (size_t k : cuts) {
        add_split(s, std::vector<int>(order.begin() + static_cast<std::ptrdiff_t>(k), order.end()),
                  "in series before unit " + atom_name(order[k]));
      }
    }
  }

  // The connected parts of a stage's atoms (edges inside the stage only), numbered from 0.
  int stage_parts(int s, std::vector<int>& part) const {
    part.assign(atoms_.stage.size(), -1);
    int parts = 0;
    for (int root : atoms_.of_stage[s]) {
      if (part[root] >= 0) continue;
      std::vector<int> todo = {root};
      part[root] = parts;
      while (!todo.empty()) {
        const int a = todo.back();
        todo.pop_back();
        for (const auto* side : {&atoms_.graph.preds[a], &atoms_.graph.succs[a]}) {
          for (int b : *side) {
            if (atoms_.stage[b] == s && part[b] < 0) {
              part[b] = parts;
              todo.push_back(b);
            }
          }
        }
      }
      ++parts;
    }
    return parts;
  }

  // A stage holding independent branches gives one of them (a connected part of the stage) a
  // stage of its own.
  void branch_splits() {
    constexpr int kMostParts = 8;
    std::vector<int> part;
    for (int s = 0; s < num_stages(); ++s) {
      if (atoms_.of_stage[s].size() < 2) continue;
      const int parts = stage_parts(s, part);
      for (int p = 0; p < parts && parts > 1 && p < kMostParts; ++p) {
        std::vector<int> moved;
        for (int a : atoms_.of_stage[s]) {
          if (part[a] == p) moved.push_back(a);
        }
        const std::string what = "into branches: unit " + atom_name(moved.front()) + "'s apart";
        add_split(s, std::move(moved), what);
      }
    }
  }

  void add_counts(std::vector<int> c, std::string description) {
    add([this, c = std::move(c), description = std::move(description)] {
      return made(regrouped(atoms_.stage, c, sizes(), identity_order(num_stages())), description);
    });
  }

  // One replica from a stage to another, from the idle devices, or back to them; or all the
  // idle devices to one stage.
  void replica_moves() {
    for (int t = 0; t < num_stages(); ++t) {
      const bool room = replicas(t) + 1 <= micro_batch(t);
      for (int s = 0; s < num_stages() && room; ++s) {
        if (s == t || replicas(s) < 2) continue;
        auto c = counts();
        --c[s];
        ++c[t];
        add_counts(std::move(c), "moved a replica from stage " + std::to_string(s) + " to stage " +
                                     std::to_string(t));
      }
      if (room && idle_ >= 1) {
        auto c = counts();
        ++c[t];
        add_counts(c, "gave stage " + std::to_string(t) + " an idle device");
        const int all = static_cast<int>(std::min<int64_t>(idle_, micro_batch(t) - replicas(t)));
        if (all > 1) {
          c[t] = replicas(t) + all;
          add_counts(std::move(c), "gave stage " + std::to_string(t) + " " + std::to_string(all) +
                                       " idle devices");
        }
      }
      if (replicas(t) >= 2) {
        auto c = counts();
        --c[t];
        add_counts(std::move(c), "left a replica of stage " + std::to_string(t) + " idle");
      }
    }
  }

  void micro_batch_moves() {
    size_t most_replicas = 0;
    for (int s = 0; s < num_stages(); ++s) {
      for (const bool grow : {true, false}) {
        const auto b = refined_micro_batch(micro_batch(s), grow, replicas(s), space_.mini_batch,
                                           space_.micro_batches);
        if (!b) continue;
        add([this, s, grow, b = *b] {
          StagePlan p = plan_;
          p.stages[s].micro_batch = b;
          return made(std::move(p), std::string(grow ? "doubled" : "halved") + " stage " +
                                        std::to_string(s) + "'s micro-batch to " +
                                        std::to_string(b));
        });
      }
      most_replicas = std::max(most_replicas, plan_.stages[s].ranks.size());
    }
    for (int64_t b : space_.micro_batches) {
      const bool all_b =
          std::all_of(plan_.stages.begin(), plan_.stages.end(),
                      [b](const StageAssignment& st) { return st.micro_batch == b; });
      if (b < static_cast<int64_t>(most_replicas) || all_b) continue;
      add([this, b] {
        StagePlan p = plan_;
        for (auto& st : p.stages) st.micro_batch = b;
        return made(std::move(p), "every stage at micro-batch " + std::to_string(b));
      });
    }
  }

  void lowering() {
    if (!plan_.chain) return;
    add([this] {
      StagePlan p = plan_;
      p.chain = false;
      return made(std::move(p), "lowered as a graph pipeline instead of a chain");
    });
  }

  const MoveSpace& space_;
  const StagePlan plan_;
  const Atoms atoms_;
  int idle_ = 0;
  std::vector<Make> moves_;
  std::vector<char> onto_idle_;  // per move: a split whose new stage takes idle devices
};

Neighbourhood::Neighbourhood(const MoveSpace& space, const StagePlan& plan)
    : impl_(std::make_unique<Impl>(space, plan)) {}
Neighbourhood::~Neighbourhood() = default;
size_t Neighbourhood::size() const { return impl_->size(); }
std::optional<Neighbour> Neighbourhood::get(size_t i) const { return impl_->get(i); }
bool Neighbourhood::splits_onto_idle_devices(size_t i) const {
  return impl_->splits_onto_idle_devices(i);
}

std::vector<Neighbour> neighbours(const MoveSpace& space, const StagePlan& plan) {
  const Neighbourhood moves(space, plan);
  std::vector<Neighbour> out;
  for (size_t i = 0; i < moves.size(); ++i) {
    if (auto n = moves.get(i)) out.push_back(std::move(*n));
  }
  return out;
}

}  // namespace gp::planner
