// The baseline planners: PipeDream's sequential DP and Piper's downset DP. Hand-solved chains,
// replication, exact 1F1B memory, Piper's downset limit, and invariants of every partition.
#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../support/fakes.h"
#include "gp/cost/cluster.h"
#include "gp/cost/comm_model.h"
#include "gp/cost/cost_model.h"
#include "gp/cost/memory_model.h"
#include "gp/model/builder.h"
#include "gp/model/zoo.h"
#include "gp/planner/partition.h"
#include "gp/planner/search.h"
#include "gp/planner/stage_cost.h"
#include "gp/planner/units.h"

using namespace gp;
using model::GraphBuilder;
using planner::Partition;
using planner::PartitionOutcome;

namespace {

// Forward time per op id (backward twice that); ops not listed (inputs, losses) are free. With
// `per_sample`, times scale linearly with the micro-batch, so replication pays.
class TableCostModel final : public cost::CostModel {
 public:
  TableCostModel(std::map<std::string, double> forward_us, bool per_sample)
      : forward_us_(std::move(forward_us)), per_sample_(per_sample) {}
  cost::OpTime op_time(const model::OpNode& op, int64_t samples) const override {
    auto it = forward_us_.find(op.id());
    if (it == forward_us_.end()) return {};
    const double f = it->second * (per_sample_ ? static_cast<double>(samples) : 1.0);
    return {f, 2 * f};
  }
  std::string_view name() const override { return "table"; }

 private:
  std::map<std::string, double> forward_us_;
  bool per_sample_;
};

model::Graph build(model::ModelGraph m) {
  auto g = model::Graph::build(m);
  INFO(g.status().to_string());
  REQUIRE(g.ok());
  return std::move(g).value();
}

// x -> fc0 -> ... -> fc{n-1} -> mse_loss(t): one planning unit per linear layer (wide enough
// that the loss is cheap and joins the last layer's unit).
model::Graph chain_model(int n) {
  GraphBuilder b("chain", "");
  auto x = b.input("x", {256});
  for (int i = 0; i < n; ++i) x = b.linear("fc" + std::to_string(i), x, 256);
  b.add_loss(b.mse_loss("loss", x, b.input("t", {256})));
  return build(b.finish());
}

// `branches` parallel chains of `layers` linear layers, concatenated, a head, a loss.
model::Graph branch_model(int branches, int layers) {
  GraphBuilder b("branches", "");
  std::vector<model::TensorRef> outs;
  for (int br = 0; br < branches; ++br) {
    auto x = b.input("x" + std::to_string(br), {8});
    for (int i = 0; i < layers; ++i) {
      x = b.linear("b" + std::to_string(br) + ".fc" + std::to_string(i), x, 8);
    }
    outs.push_back(x);
  }
  auto h = b.linear("head", b.concat("cat", outs), 8);
  b.add_loss(b.mse_loss("loss", h, b.input("t", {8})));
  return build(b.finish());
}

model::Graph zoo(const char* spec) {
  auto m = model::build_zoo_model(spec);
  INFO(m.status().to_string());
  REQUIRE(m.ok());
  return build(*m);
}

std::map<std::string, double> chain_weights(std::vector<double> w) {
  std::map<std::string, double> out;
  for (size_t i = 0; i < w.size(); ++i) out["fc" + std::to_string(i)] = w[i];
  return out;
}

// Everything a partitioner needs, kept at stable addresses.
struct Planning {
  model::Graph graph;
  planner::UnitGraph units;
  std::shared_ptr<const cost::CostModel> compute;
  std::unique_ptr<cost::CommModel> comm;
  std::unique_ptr<planner::StageCostModel> costs;
  graphpipe::v1::Cluster cluster;

  planner::PartitionContext ctx(int devices) const {
    planner::PartitionContext c;
    c.graph = &graph;
    c.units = &units;
    c.costs = costs.get();
    c.num_devices = devices;
    c.mini_batch = costs->mini_batch();
    planner::set_cluster_levels(cluster, *comm, &c);
    return c;
  }
  int unit_of(const std::string& op) const { return units.unit_of_op[graph.index_of(op)]; }
};

std::unique_ptr<Planning> make_planning(model::Graph g,
                                        std::shared_ptr<const cost::CostModel> compute,
                                        const graphpipe::v1::Cluster& cluster,
                                        int64_t mini_batch = 16) {
  auto p = std::unique_ptr<Planning>(
      new Planning{std::move(g), {}, std::move(compute), {}, {}, cluster});
  p->units = planner::build_units(p->graph);
  p->comm = std::make_unique<cost::CommModel>(cluster);
  p->costs = std::make_unique<planner::StageCostModel>(
      p->graph, p->units, *p->compute, *p->comm, cost::MemoryOptions{}, mini_batch, mini_batch);
  return p;
}

std::unique_ptr<Planning> chain_planning(std::vector<double> weights, bool per_sample,
                                         const graphpipe::v1::Cluster& cluster) {
  auto p =
      make_planning(chain_model(static_cast<int>(weights.size())),
                    std::make_shared<TableCostModel>(chain_weights(weights), per_sample), cluster);
  REQUIRE(p->units.num_units() == static_cast<int>(weights.size()));
  return p;
}

const Partition& partition_of(const Result<PartitionOutcome>& r) {
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  INFO(r->infeasible_reason);
  REQUIRE(r->partition.has_value());
  return *r->partition;
}

std::vector<std::vector<int>> stage_units(const Partition& part) {
  std::vector<std::vector<int>> out;
  for (const auto& st : part.stages) {
    auto u = st.units;
    std::sort(u.begin(), u.end());
    out.push_back(u);
  }
  return out;
}

std::vector<int> stage_devices(const Partition& part) {
  std::vector<int> out;
  for (const auto& st : part.stages) out.push_back(st.devices);
  return out;
}

// How each planner counts a stage's transfer bytes.
enum class Boundary {
  kRelayed,   // sequential: every edge crossing the stage's entering or leaving cut
  kOwnEdges,  // Piper: edges with exactly one end in the stage
};

// Invariants of any returned partition; recomputes the bottleneck from the stages.
void check_partition(const Planning& p, const Partition& part, int devices, int64_t b,
                     Boundary boundary) {
  const int n = p.units.num_units();
  const int stages = static_cast<int>(part.stages.size());
  CHECK(part.chain);
  CHECK(part.micro_batch == b);
  REQUIRE(stages >= 1);
  std::vector<int> stage_of(n, -1);
  int used = 0;
  for (int t = 0; t < stages; ++t) {
    const auto& st = part.stages[t];
    CHECK_FALSE(st.units.empty());
    CHECK(st.devices >= 1);
    CHECK((st.devices & (st.devices - 1)) == 0);
    CHECK(b % st.devices == 0);
    used += st.devices;
    for (int u : st.units) {
      REQUIRE(u >= 0);
      REQUIRE(u < n);
      CHECK(stage_of[u] == -1);  // no unit twice
      stage_of[u] = t;
    }
  }
  CHECK(used <= devices);
  for (int u = 0; u < n; ++u) {
    INFO("unit " << u);
    REQUIRE(stage_of[u] >= 0);                                         // every unit covered
    for (int v : p.units.succs[u]) CHECK(stage_of[u] <= stage_of[v]);  // chain order
  }
  double bottleneck = 0;
  for (int t = 0; t < stages; ++t) {
    const auto& st = part.stages[t];
    const auto agg = p.costs->aggregate(st.units);
    const int64_t in_flight = (stages - t) * b;  // synchronous 1F1B on a chain
    CHECK(p.costs->memory_bytes(agg, b, st.devices, in_flight) <= p.costs->capacity_bytes());
    int64_t bytes = 0;
    for (const auto& [edge, e_bytes] : p.units.edge_bytes) {
      const int su = stage_of[edge.first], sv = stage_of[edge.second];
      if (boundary == Boundary::kRelayed) {
        if (su < t && t <= sv) bytes += e_bytes;
        if (su <= t && t < sv) bytes += e_bytes;
      } else if ((su == t) != (sv == t)) {
        bytes += e_bytes;
      }
    }
    bottleneck = std::max(bottleneck, p.costs->tps_s(agg, b, st.devices, bytes));
  }
  CHECK(part.bottleneck_tps_s == Approx(bottleneck).epsilon(1e-9));
}

const Partition& sequential(const Planning& p, int devices, int64_t b,
                            Result<PartitionOutcome>& r) {
  r = planner::partition_sequential(p.ctx(devices), b);
  const Partition& part = partition_of(r);
  check_partition(p, part, devices, b, Boundary::kRelayed);
  return part;
}

const Partition& piper(const Planning& p, int devices, int64_t b, Result<PartitionOutcome>& r) {
  r = planner::partition_piper(p.ctx(devices), b);
  const Partition& part = partition_of(r);
  check_partition(p, part, devices, b, Boundary::kOwnEdges);
  return part;
}

Result<PartitionOutcome> none() { return internal_error("not run"); }

}  // namespace

TEST_CASE("4 equal units on 2 devices split 2 + 2 at half the one-stage time") {
  auto p = chain_planning({1, 1, 1, 1}, false, testing::ideal_cluster(2));
  const double unit_s = 3e-6;  // 1 us forward + 2 us backward per micro-batch of 1
  auto r1 = none(), r2 = none();
  for (const Partition* part : {&sequential(*p, 2, 1, r1), &piper(*p, 2, 1, r2)}) {
    CHECK(stage_units(*part) ==
          std::vector<std::vector<int>>{{p->unit_of("fc0"), p->unit_of("fc1")},
                                        {p->unit_of("fc2"), p->unit_of("fc3")}});
    CHECK(stage_devices(*part) == std::vector<int>{1, 1});
    CHECK(part->bottleneck_tps_s == Approx(2 * unit_s));
  }
  // One device: a single stage with everything.
  auto r3 = none(), r4 = none();
  for (const Partition* part : {&sequential(*p, 1, 1, r3), &piper(*p, 1, 1, r4)}) {
    CHECK(part->stages.size() == 1);
    CHECK(part->bottleneck_tps_s == Approx(4 * unit_s));
  }
}

TEST_CASE("units 1, 1, 1, 3 on 2 devices split 1 + 1 + 1 | 3") {
  // The stage cost includes the optimizer step over the stage's state, which even the ideal
  // device's 1e24 B/s memory makes nonzero: three stages would then beat two by that step's
  // 1e-20 us. With an infinitely fast memory the steps are free and the tie below is exact.
  auto cluster = testing::ideal_cluster(2);
  cluster.mutable_device()->set_memory_bandwidth_bytes_per_s(
      std::numeric_limits<double>::infinity());
  auto p = chain_planning({1, 1, 1, 3}, false, cluster);
  auto r1 = none(), r2 = none();
  for (const Partition* part : {&sequential(*p, 2, 1, r1), &piper(*p, 2, 1, r2)}) {
    CHECK(stage_units(*part) ==
          std::vector<std::vector<int>>{{p->unit_of("fc0"), p->unit_of("fc1"), p->unit_of("fc2")},
                                        {p->unit_of("fc3")}});
    CHECK(part->bottleneck_tps_s == Approx(9e-6));
  }
  // Three devices cannot beat the heavy unit alone; ties go to fewer stages.
  auto r3 = none();
  const Partition& three = sequential(*p, 3, 1, r3);
  CHECK(three.bottleneck_tps_s == Approx(9e-6));
  CHECK(three.stages.size() == 2);
}

TEST_CASE("replication is chosen when it helps: the heavy unit gets 2 devices") {
  // fc0 light (1), fc1 heavy (8), times linear in samples (forward + backward = 3 us per unit
  // weight per sample), b = 2 on 3 devices. [fc0] x1, [fc1] x2: per sample
  // max(6 us for 2 samples, 24 us for 1 sample per replica) / 2 = 12 us; one stage on 2 devices
  // would be 27 / 2 = 13.5 us, two unreplicated stages 48 / 2 = 24 us.
  auto p = chain_planning({1, 8}, true, testing::ideal_cluster(3));
  auto r1 = none(), r2 = none();
  for (const Partition* part : {&sequential(*p, 3, 2, r1), &piper(*p, 3, 2, r2)}) {
    CHECK(stage_units(*part) ==
          std::vector<std::vector<int>>{{p->unit_of("fc0")}, {p->unit_of("fc1")}});
    CHECK(stage_devices(*part) == std::vector<int>{1, 2});
    CHECK(part->bottleneck_tps_s == Approx(12e-6));
  }
  // A single heavy unit on 2 devices with b = 2: one stage, replicated twice.
  auto one =
      make_planning(chain_model(1), std::make_shared<TableCostModel>(chain_weights({8}), true),
                    testing::ideal_cluster(2));
  auto r3 = none(), r4 = none();
  for (const Partition* part : {&sequential(*one, 2, 2, r3), &piper(*one, 2, 2, r4)}) {
    CHECK(stage_devices(*part) == std::vector<int>{2});
    CHECK(part->bottleneck_tps_s == Approx(12e-6));
  }
  // b = 1 cannot be split across replicas: the degree must divide the micro-batch.
  auto r5 = none();
  CHECK(stage_devices(sequential(*one, 2, 1, r5)) == std::vector<int>{1});
}

TEST_CASE("memory forces more stages than the unconstrained optimum") {
  // Slow links make any cut expensive, so without a memory limit one stage is best.
  auto slow = testing::ideal_cluster(2);
  for (auto* link : {slow.mutable_intra_node(), slow.mutable_inter_node()}) {
    link->set_bandwidth_bytes_per_s(1e6);
  }
  auto roomy = chain_planning({1, 1}, false, slow);
  auto r1 = none(), r2 = none();
  for (const Partition* part : {&sequential(*roomy, 2, 1, r1), &piper(*roomy, 2, 1, r2)}) {
    CHECK(part->stages.size() == 1);
  }
  const auto& c = *roomy->costs;
  const int u0 = roomy->unit_of("fc0"), u1 = roomy->unit_of("fc1");
  const int64_t both = c.memory_bytes(c.aggregate(std::vector<int>{u0, u1}), 1, 1, 1);
  const int64_t first = c.memory_bytes(c.aggregate(std::vector<int>{u0}), 1, 1, 2);  // k = 2b
  const int64_t last = c.memory_bytes(c.aggregate(std::vector<int>{u1}), 1, 1, 1);   // k = b
  REQUIRE(std::max(first, last) < both);

  auto tight = slow;
  tight.mutable_device()->set_memory_capacity_bytes(std::max(first, last));
  auto p = chain_planning({1, 1}, false, tight);
  auto r3 = none(), r4 = none();
  for (const Partition* part : {&sequential(*p, 2, 1, r3), &piper(*p, 2, 1, r4)}) {
    CHECK(stage_units(*part) == std::vector<std::vector<int>>{{u0}, {u1}});
    CHECK(part->bottleneck_tps_s > r1->partition->bottleneck_tps_s);
  }
}

TEST_CASE("memory is exact for synchronous 1F1B: the first of p stages holds p * b samples") {
  // fc0 256 -> 256 (weights and activations dominate), fc1 256 -> 8 (small): the only split on
  // 2 devices is [fc0] [fc1], with fc0 holding 2b samples in flight.
  GraphBuilder gb("narrow", "");
  auto x = gb.linear("fc1", gb.linear("fc0", gb.input("x", {256}), 256), 8);
  gb.add_loss(gb.mse_loss("loss", x, gb.input("t", {8})));
  const auto model = gb.finish();
  auto weights = std::make_shared<TableCostModel>(chain_weights({1, 1}), false);
  auto roomy = make_planning(build(model), weights, testing::ideal_cluster(2));
  REQUIRE(roomy->units.num_units() == 2);
  const auto& c = *roomy->costs;
  const int u0 = roomy->unit_of("fc0"), u1 = roomy->unit_of("fc1");
  const int64_t b = 2;
  const int64_t first = c.memory_bytes(c.aggregate(std::vector<int>{u0}), b, 1, 2 * b);
  const int64_t first_if_b = c.memory_bytes(c.aggregate(std::vector<int>{u0}), b, 1, b);
  const int64_t last = c.memory_bytes(c.aggregate(std::vector<int>{u1}), b, 1, b);
  const int64_t both = c.memory_bytes(c.aggregate(std::vector<int>{u0, u1}), b, 1, b);
  REQUIRE(last < first_if_b);
  REQUIRE(first_if_b < first);
  REQUIRE(first < both);
  // Neither does one stage replicated on both devices (it still holds all the weights).
  REQUIRE(first < c.memory_bytes(c.aggregate(std::vector<int>{u0, u1}), b, 2, b));
  for (const int64_t capacity : {first, first_if_b}) {
    INFO("capacity " << capacity);
    auto cluster = testing::ideal_cluster(2);
    cluster.mutable_device()->set_memory_capacity_bytes(capacity);
    auto p = make_planning(build(model), weights, cluster);
    auto rs = planner::partition_sequential(p->ctx(2), b);
    auto rp = planner::partition_piper(p->ctx(2), b);
    for (const auto* r : {&rs, &rp}) {
      REQUIRE(r->ok());
      if (capacity == first) {
        REQUIRE((*r)->partition.has_value());
        CHECK(stage_units(*(*r)->partition) == std::vector<std::vector<int>>{{u0}, {u1}});
        CHECK(stage_devices(*(*r)->partition) == std::vector<int>{1, 1});
      } else {  // a planner counting b in flight everywhere would accept [fc0] [fc1] here
        CHECK_FALSE((*r)->partition.has_value());
        CHECK((*r)->infeasible_reason ==
              "infeasible: no partition fits in device memory at micro-batch 2");
      }
    }
  }
}

TEST_CASE("nothing fits: both planners say so for the micro-batch") {
  auto cluster = testing::ideal_cluster(4);
  cluster.mutable_device()->set_memory_capacity_bytes(64);
  auto p = chain_planning({1, 1, 1}, false, cluster);
  for (auto r :
       {planner::partition_sequential(p->ctx(4), 4), planner::partition_piper(p->ctx(4), 4)}) {
    REQUIRE(r.ok());
    CHECK_FALSE(r->partition.has_value());
    CHECK(r->infeasible_reason ==
          "infeasible: no partition fits in device memory at micro-batch 4");
  }
}

TEST_CASE("bad arguments are errors, not outcomes") {
  auto p = chain_planning({1, 1}, false, testing::ideal_cluster(2));
  auto r = planner::partition_sequential(p->ctx(2), 3);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("micro_batch = 3, must be a power of two"));
  r = planner::partition_piper(p->ctx(0), 2);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("num_devices = 0"));
  r = planner::partition_piper(p->ctx(2), 32);  // the cost tables stop at the mini-batch, 16
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("exceeds the stage cost tables"));
}

TEST_CASE("sequential and Piper agree on chain graphs") {
  SECTION("a chain of unequal linear layers") {
    auto p = chain_planning({3, 1, 4, 1, 5, 9, 2, 6}, true, testing::ideal_cluster(8));
    for (int devices : {1, 2, 3, 5, 8}) {
      for (int64_t b : {1, 2, 4}) {
        INFO("devices " << devices << ", b " << b);
        auto r1 = none(), r2 = none();
        const double s = sequential(*p, devices, b, r1).bottleneck_tps_s;
        CHECK(piper(*p, devices, b, r2).bottleneck_tps_s == Approx(s).epsilon(1e-12));
      }
    }
  }
  SECTION("tiny-transformer: a chain of layers with residual skips inside each layer") {
    auto p =
        make_planning(zoo("tiny-transformer"), std::make_shared<testing::FakeCostModel>(10, 20),
                      testing::ideal_cluster(8));
    for (int devices : {2, 4, 7}) {
      auto r1 = none(), r2 = none();
      const double s = sequential(*p, devices, 2, r1).bottleneck_tps_s;
      CHECK(piper(*p, devices, 2, r2).bottleneck_tps_s == Approx(s).epsilon(1e-12));
    }
  }
}

TEST_CASE("sequential relays skip tensors through every cut, Piper counts a stage's own edges") {
  // x -> a -> b -> c -> sum(c, a) -> loss: the skip a -> sum lands in c's unit, so cutting
  // [a] [b] [c] makes a's output cross both cuts. The sequential planner relays it through b
  // (b moves 4 tensors per sample); Piper charges b only its own edges a -> b and b -> c.
  GraphBuilder gb("skip", "");
  auto x = gb.input("x", {1024});
  auto a = gb.linear("a", x, 1024);
  auto c = gb.linear("c", gb.linear("b", a, 1024), 1024);
  gb.add_loss(gb.mse_loss("loss", gb.add("sum", {c, a}), gb.input("t", {1024})));
  auto cluster = testing::ideal_cluster(3);
  cluster.mutable_intra_node()->set_bandwidth_bytes_per_s(4096 * 1e6);  // one tensor: 1 us
  auto p = make_planning(build(gb.finish()),
                         std::make_shared<TableCostModel>(
                             std::map<std::string, double>{{"a", 1}, {"b", 1}, {"c", 1}}, false),
                         cluster);
  REQUIRE(p->units.num_units() == 3);
  const int ua = p->unit_of("a"), ub = p->unit_of("b"), uc = p->unit_of("c");
  REQUIRE(p->unit_of("sum") == uc);
  CHECK(p->units.bytes(ua, uc) == 4096);
  // Compute is 3 us per unit. Sequential: [a] [b] [c] has b at max(3, 4 transfers) = 4 us, which
  // beats any 2-stage split (6 us). Piper: the same split costs max(3, 2) = 3 us.
  auto r1 = none(), r2 = none();
  const Partition& seq = sequential(*p, 3, 1, r1);
  const Partition& pip = piper(*p, 3, 1, r2);
  const std::vector<std::vector<int>> split{{ua}, {ub}, {uc}};
  CHECK(stage_units(seq) == split);
  CHECK(stage_units(pip) == split);
  CHECK(seq.bottleneck_tps_s == Approx(4e-6));
  CHECK(pip.bottleneck_tps_s == Approx(3e-6));
}

TEST_CASE("Piper gives up past its downset limit, as Piper does") {
  SECTION("7 branches x 4 layers: at least 5^7 downsets") {
    auto p = make_planning(branch_model(7, 4), std::make_shared<testing::FakeCostModel>(10, 20),
                           testing::ideal_cluster(8));
    auto r = planner::partition_piper(p->ctx(8), 2);
    REQUIRE(r.ok());
    CHECK_FALSE(r->partition.has_value());
    CHECK(r->infeasible_reason == "infeasible: too many downsets (40001 > 40000)");
    // The sequential planner handles the same graph.
    auto r2 = none();
    sequential(*p, 8, 2, r2);
  }
  SECTION("tiny-dlrm with a low limit") {
    auto p = make_planning(zoo("tiny-dlrm"), std::make_shared<testing::FakeCostModel>(10, 20),
                           testing::ideal_cluster(4));
    auto ctx = p->ctx(4);
    ctx.piper_downset_limit = 20;
    auto r = planner::partition_piper(ctx, 2);
    REQUIRE(r.ok());
    CHECK_FALSE(r->partition.has_value());
    CHECK(r->infeasible_reason == "infeasible: too many downsets (21 > 20)");
    ctx.piper_downset_limit = 40000;
    auto r2 = planner::partition_piper(ctx, 2);
    check_partition(*p, partition_of(r2), 4, 2, Boundary::kOwnEdges);
  }
}

TEST_CASE("Piper plans a 2-branch graph and cuts across branches where the chain cannot") {
  // Branch 0: 1, 5; branch 1: 3, 1 (head free). The linearised order b0.fc0, b0.fc1, b1.fc0,
  // b1.fc1 has prefix sums 1, 6, 9 of 10, so the best 2-stage chain split is 6 | 4. Piper may
  // take the downset {b0.fc0, b1.fc0, b1.fc1}: 5 | 5.
  auto p = make_planning(
      branch_model(2, 2),
      std::make_shared<TableCostModel>(
          std::map<std::string, double>{{"b0.fc0", 1}, {"b0.fc1", 5}, {"b1.fc0", 3}, {"b1.fc1", 1}},
          false),
      testing::ideal_cluster(2));
  const int a0 = p->unit_of("b0.fc0"), a1 = p->unit_of("b0.fc1");
  const int c0 = p->unit_of("b1.fc0"), c1 = p->unit_of("b1.fc1");
  const auto& topo = p->units.topo;
  auto at = [&](int u) { return std::find(topo.begin(), topo.end(), u) - topo.begin(); };
  REQUIRE(at(a0) < at(a1));
  REQUIRE(at(a1) < at(c0));
  REQUIRE(at(c0) < at(c1));
  auto r1 = none(), r2 = none();
  const Partition& seq = sequential(*p, 2, 1, r1);
  const Partition& pip = piper(*p, 2, 1, r2);
  CHECK(seq.bottleneck_tps_s == Approx(18e-6));
  CHECK(pip.bottleneck_tps_s == Approx(15e-6));
  REQUIRE(pip.stages.size() == 2);
  std::vector<int> first{a0, c0, c1};
  std::sort(first.begin(), first.end());
  CHECK(stage_units(pip)[0] == first);
  // With more devices both reach the heaviest unit alone.
  auto r3 = none(), r4 = none();
  CHECK(sequential(*p, 4, 1, r3).bottleneck_tps_s == Approx(15e-6));
  CHECK(piper(*p, 4, 1, r4).bottleneck_tps_s == Approx(15e-6));
}

TEST_CASE("planners are deterministic and valid on the zoo") {
  for (const char* spec : {"tiny-mmt", "tiny-candle-uno", "tiny-nbranch", "tiny-transformer"}) {
    INFO(spec);
    auto p = make_planning(zoo(spec), std::make_shared<testing::FakeCostModel>(10, 20),
                           testing::ideal_cluster(6));
    for (int64_t b : {1, 4}) {
      auto a1 = none(), a2 = none(), b1 = none(), b2 = none();
      const Partition& s1 = sequential(*p, 6, b, a1);
      const Partition& s2 = sequential(*p, 6, b, a2);
      CHECK(stage_units(s1) == stage_units(s2));
      CHECK(stage_devices(s1) == stage_devices(s2));
      CHECK(s1.bottleneck_tps_s == s2.bottleneck_tps_s);
      const Partition& q1 = piper(*p, 6, b, b1);
      const Partition& q2 = piper(*p, 6, b, b2);
      CHECK(stage_units(q1) == stage_units(q2));
      CHECK(stage_devices(q1) == stage_devices(q2));
      CHECK(q1.bottleneck_tps_s == q2.bottleneck_tps_s);
      // Piper's space holds every contiguous split of the sequential order.
      CHECK(q1.bottleneck_tps_s <= s1.bottleneck_tps_s * (1 + 1e-9));
    }
  }
}

TEST_CASE("zoo transformer (~100 units) on 32 devices") {
  auto g = zoo("transformer");
  const auto device = testing::ideal_cluster(32).device();
  auto p = make_planning(
      std::move(g),
      std::make_shared<cost::AnalyticCostModel>(device, graphpipe::v1::PRECISION_FP32),
      testing::ideal_cluster(32), 64);
  REQUIRE(p->units.num_units() >= 90);
  for (int64_t b : {1, 8}) {
    auto r1 = none(), r2 = none();
    const Partition& seq = sequential(*p, 32, b, r1);
    const Partition& pip = piper(*p, 32, b, r2);
    CHECK(pip.bottleneck_tps_s == Approx(seq.bottleneck_tps_s).epsilon(1e-9));
  }
}

TEST_CASE("sequential also cuts across branches: a stage holds the same slice of each branch") {
  // Branch 0: 1, 1; branch 1: 4, 4. Depth first (b0 then b1) the best 2-stage split is
  // 1 + 1 + 4 | 4 = 6; ordered by critical-path fraction (b0.fc0, b1.fc0, b0.fc1, b1.fc1) it is
  // 1 + 4 | 1 + 4 = 5, the horizontal cut PipeDream's antichain states allow.
  auto p = make_planning(
      branch_model(2, 2),
      std::make_shared<TableCostModel>(
          std::map<std::string, double>{{"b0.fc0", 1}, {"b0.fc1", 1}, {"b1.fc0", 4}, {"b1.fc1", 4}},
          false),
      testing::ideal_cluster(2));
  const int a0 = p->unit_of("b0.fc0"), c0 = p->unit_of("b1.fc0");
  auto r = none();
  const Partition& seq = sequential(*p, 2, 1, r);
  CHECK(seq.bottleneck_tps_s == Approx(15e-6));
  REQUIRE(seq.stages.size() == 2);
  std::vector<int> first{a0, c0};
  std::sort(first.begin(), first.end());
  CHECK(stage_units(seq)[0] == first);
  // The depth-first partition is kept as the runner-up for searches that simulate both.
  REQUIRE(r.ok());
  REQUIRE(r->alternatives.size() == 1);
  CHECK(r->alternatives[0].bottleneck_tps_s == Approx(18e-6));
}

namespace {

// PipeDream's own DP over the units in topological order.
std::optional<Partition> pipedream(const Planning& p, int devices, int64_t b, std::string* why) {
  auto r = planner::partition_pipedream_hierarchical(p.ctx(devices), p.units.topo, b, why);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  return *r;
}

graphpipe::v1::Cluster with_bandwidth(graphpipe::v1::Cluster c, double bytes_per_s) {
  for (auto* link : {c.mutable_intra_node(), c.mutable_inter_node()}) {
    link->set_bandwidth_bytes_per_s(bytes_per_s);
  }
  return c;
}

}  // namespace

TEST_CASE("PipeDream's own DP splits 4 equal units on one 2-GPU server 2 + 2") {
  // C = 3 us per unit; each linear holds P = 263,168 bytes. On 1 GB/s, one stage on both GPUs
  // costs (12 us + 4 P / (1e9 * 2)) / 2 = 269 us; the split max(C(0..1), C(2..3)) = 6 us wins.
  auto p = chain_planning({1, 1, 1, 1}, false, with_bandwidth(testing::ideal_cluster(2), 1e9));
  std::string why;
  auto part = pipedream(*p, 2, 1, &why);
  INFO(why);
  REQUIRE(part.has_value());
  CHECK(part->chain);
  CHECK(stage_units(*part) ==
        std::vector<std::vector<int>>{{p->unit_of("fc0"), p->unit_of("fc1")},
                                      {p->unit_of("fc2"), p->unit_of("fc3")}});
  CHECK(stage_devices(*part) == std::vector<int>{1, 1});
  check_partition(*p, *part, 2, 1, Boundary::kRelayed);
}

TEST_CASE("PipeDream's own DP plans servers, then each server's segment on its GPUs") {
  // 2 servers x 2 GPUs on slow links: the top level cuts 2 | 2 units over the servers, and
  // each server pipelines its 2 units over its 2 GPUs: 4 stages of one unit on one device.
  auto p = chain_planning({1, 1, 1, 1}, false, with_bandwidth(testing::ideal_cluster(2, 2), 1e9));
  std::string why;
  auto part = pipedream(*p, 4, 1, &why);
  INFO(why);
  REQUIRE(part.has_value());
  CHECK(stage_devices(*part) == std::vector<int>{1, 1, 1, 1});
  CHECK(part->stages.size() == 4);
  check_partition(*p, *part, 4, 1, Boundary::kRelayed);
}

TEST_CASE("PipeDream's replication multiplies over the levels and must divide the micro-batch") {
  // One heavy unit, times linear in samples, free links: data parallel on both GPUs of a server
  // and on both servers, so 2 x 2 = 4 replicas.
  auto p = make_planning(chain_model(1), std::make_shared<TableCostModel>(chain_weights({8}), true),
                         testing::ideal_cluster(2, 2), 4);
  std::string why;
  auto four = pipedream(*p, 4, 4, &why);
  INFO(why);
  REQUIRE(four.has_value());
  CHECK(stage_devices(*four) == std::vector<int>{4});
  // Micro-batch 2: each level's 2 replicas divide it, their product does not: no partition.
  auto two = pipedream(*p, 4, 2, &why);
  CHECK_FALSE(two.has_value());
  CHECK_THAT(why, Catch::Contains("replicates a stage 4 times") &&
                      Catch::Contains("does not divide micro-batch 2"));
}

TEST_CASE("PipeDream's own DP needs each level's bandwidth") {
  auto p = chain_planning({1, 1}, false, testing::ideal_cluster(2));
  auto ctx = p->ctx(2);
  ctx.intra_node_bandwidth_bytes_per_s = 0;
  std::string why;
  auto r = planner::partition_pipedream_hierarchical(ctx, p->units.topo, 1, &why);
  REQUIRE(r.ok());
  CHECK_FALSE(r->has_value());
  CHECK_THAT(why, Catch::Contains("bandwidth"));
  // A single device sends nothing and needs none.
  auto one = planner::partition_pipedream_hierarchical(p->ctx(1), p->units.topo, 1, &why);
  REQUIRE(one.ok());
  CHECK(one->has_value());
}

TEST_CASE("sequential's candidates include PipeDream's own DP, which wins on the zoo's dlrm") {
  // Summit, 32 V100s, mini-batch 256: the chain DP's best simulates at 6427 samples/s, PipeDream's
  // hierarchical DP at 7162 (docs/planner.md); GraphPipe is never slower than either.
  const model::Graph g = zoo("dlrm");
  const auto cluster = *cost::select_devices(*cost::load_cluster("summit-v100"), 32);
  const cost::AnalyticCostModel compute(cluster.device(), graphpipe::v1::PRECISION_FP32);
  planner::SearchRequest req;
  req.graph = &g;
  req.cluster = cluster;
  req.mini_batch = 256;
  req.training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  req.compute = &compute;
  req.strategy = graphpipe::v1::STRATEGY_SEQUENTIAL;
  auto seq = planner::search_plan(req);
  REQUIRE(seq.ok());
  REQUIRE(seq->feasible);
  bool pipedream_won = false;
  for (const auto& c : seq->candidates) {
    pipedream_won |= c.source.rfind("PipeDream hierarchical DP", 0) == 0;
  }
  CHECK(pipedream_won);
  req.strategy = graphpipe::v1::STRATEGY_GRAPHPIPE;
  auto gp = planner::search_plan(req);
  REQUIRE(gp.ok());
  REQUIRE(gp->feasible);
  CHECK(gp->plan.predicted().throughput_samples_per_s() >=
        seq->plan.predicted().throughput_samples_per_s());
}

TEST_CASE("cluster levels: whole nodes and each link's bandwidth, one level when ranks are out") {
  auto cluster = testing::ideal_cluster(2, 2);
  cluster.mutable_intra_node()->set_bandwidth_bytes_per_s(4e9);
  cluster.mutable_inter_node()->set_bandwidth_bytes_per_s(1e9);
  const cost::CommModel comm(cluster);
  planner::PartitionContext ctx;
  ctx.num_devices = 4;
  planner::set_cluster_levels(cluster, comm, &ctx);
  CHECK(ctx.devices_per_node == 2);
  CHECK(ctx.intra_node_bandwidth_bytes_per_s == Approx(4e9));
  CHECK(ctx.inter_node_bandwidth_bytes_per_s == Approx(1e9));
  // Rank 3 excluded: the 3 devices are not whole equal nodes, so PipeDream plans one level.
  cluster.add_excluded_ranks(3);
  planner::PartitionContext partial;
  partial.num_devices = 3;
  planner::set_cluster_levels(cluster, cost::CommModel(cluster), &partial);
  CHECK(partial.devices_per_node == 0);
  // One node: all its devices are one server.
  const auto one = testing::ideal_cluster(4);
  planner::PartitionContext single;
  single.num_devices = 4;
  planner::set_cluster_levels(one, cost::CommModel(one), &single);
  CHECK(single.devices_per_node == 4);
  CHECK(single.inter_node_bandwidth_bytes_per_s == 0);
}

TEST_CASE("PipeDream's own DP refuses an order that does not hold every unit") {
  auto p = chain_planning({1, 1}, false, testing::ideal_cluster(2));
  std::string why;
  auto r = planner::partition_pipedream_hierarchical(p->ctx(2), {p->units.topo[0]}, 1, &why);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("1 positions for 2 units"));
}
