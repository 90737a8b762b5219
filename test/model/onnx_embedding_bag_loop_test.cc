// nn.EmbeddingBag over [batch, bag] ids, which torch 2.x writes as a Loop over the bags
// (test/data/onnx/torch2/embedding_bag_{sum,mean}_*): every export imports as one embedding_bag
// op, and an edited loop that computes anything else is refused. Also the evaluator that checks
// such loops (model/src/onnx/graph_eval.h) on hand-built graphs, including its bounds.
// (That the imported op computes torch's numbers is checked in test/e2e/onnx_torch_test.cc.)
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "../support/onnx_edit.h"
#include "gp/model/onnx_file.h"
#include "gp/model/onnx_import.h"
#include "onnx/graph_eval.h"
#include "onnx/onnx_pb.h"

namespace gp::model {
namespace {

namespace fs = std::filesystem;
using onnx_detail::EvalTensor;
using onnx_detail::EvalValue;

const std::string kDir = std::string(GP_TEST_DATA_DIR) + "/onnx/torch2/";

// `file` of the torch 2.x folder changed by `edit`, and imported.
Result<graphpipe::v1::ModelGraph> import_edited(
    const std::string& file, const std::function<void(onnx::ModelProto*)>& edit) {
  return testing::import_edited_onnx(kDir + file, edit, "bag_loop");
}

// The nodes of the first Loop's body (and of the Ifs inside it), for edits.
std::vector<onnx::NodeProto*> body_nodes(onnx::ModelProto* m) {
  std::vector<onnx::NodeProto*> out;
  std::function<void(onnx::GraphProto*)> visit = [&](onnx::GraphProto* g) {
    for (auto& n : *g->mutable_node()) {
      out.push_back(&n);
      for (auto& a : *n.mutable_attribute()) {
        if (a.has_g()) visit(a.mutable_g());
      }
    }
  };
  for (auto& n : *m->mutable_graph()->mutable_node()) {
    if (n.op_type() != "Loop") continue;
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) visit(a.mutable_g());
    }
    break;
  }
  return out;
}

void require_refused(const Result<graphpipe::v1::ModelGraph>& m) {
  INFO(m.status().to_string());
  REQUIRE_FALSE(m.ok());
  CHECK(m.status().message().find("(Loop): no GraphPipe operator for this loop") !=
        std::string::npos);
}

TEST_CASE("every torch 2.x export of a fixed-size nn.EmbeddingBag imports as one embedding_bag") {
  for (const std::string mode : {"sum", "mean"}) {
    for (const std::string variant :
         {"dynamo", "dynamo_static", "dynamo_train", "dynamo_train_noopt", "legacy"}) {
      const std::string file = "embedding_bag_" + mode + "_" + variant + ".onnx";
      INFO(file);
      auto m = import_onnx(kDir + file);
      INFO(m.status().to_string());
      REQUIRE(m.ok());
      int bags = 0;
      for (const auto& op : m->ops()) {
        if (op.type() != "embedding_bag") continue;
        ++bags;
        CHECK(op.id() == "bag");
        CHECK(op.attrs().at("num_embeddings").i() == 20);
        CHECK(op.attrs().at("embedding_dim").i() == 6);
        const bool mean = op.attrs().count("mode") && op.attrs().at("mode").s() == "mean";
        CHECK(mean == (mode == "mean"));
        REQUIRE(op.inputs_size() == 1);
        CHECK(op.inputs(0).op() == "ids");
      }
      CHECK(bags == 1);
      // input, embedding_bag, linear, target, loss: the loop and its index arithmetic are gone.
      CHECK(m->ops_size() == 5);
    }
  }
}

TEST_CASE("two bag loops that share their offsets and bag count import as two embedding_bags") {
  // torch.export writes the arange of offsets, the bag count and the empty sequence once.
  for (const std::string variant :
       {"dynamo", "dynamo_static", "dynamo_train", "dynamo_train_noopt", "legacy"}) {
    INFO(variant);
    auto m = import_onnx(kDir + "two_bags_" + variant + ".onnx");
    INFO(m.status().to_string());
    REQUIRE(m.ok());
    std::map<std::string, std::pair<std::string, int64_t>> bags;  // id -> (input, rows)
    for (const auto& op : m->ops()) {
      if (op.type() != "embedding_bag") continue;
      REQUIRE(op.inputs_size() == 1);
      bags[op.id()] = {op.inputs(0).op(), op.attrs().at("num_embeddings").i()};
    }
    using Bag = std::pair<std::string, int64_t>;
    CHECK(bags == std::map<std::string, Bag>{{"bag0", {"ids0", 20}}, {"bag1", {"ids1", 30}}});
  }
}

TEST_CASE("a bag loop over ids and offsets imports with max_bag as an embedding_bag with padding") {
  for (const std::string variant :
       {"dynamo", "dynamo_static", "dynamo_train", "dynamo_train_noopt", "legacy"}) {
    INFO(variant);
    OnnxImportOptions options;
    options.max_bag = 5;
    auto m = import_onnx(kDir + "embedding_bag_offsets_" + variant + ".onnx", options);
    INFO(m.status().to_string());
    REQUIRE(m.ok());
    int bags = 0;
    for (const auto& op : m->ops()) {
      if (op.type() == "input" && op.id() == "ids") {
        CHECK(op.outputs(0).shape_size() == 1);
        CHECK(op.outputs(0).shape(0) == 5);
        CHECK(op.attrs().at("ragged_offsets").s() == "offsets");
      }
      CHECK(op.id() != "offsets");  // folded into the ids
      if (op.type() != "embedding_bag") continue;
      ++bags;
      CHECK(op.attrs().at("padding_idx").i() == -1);
      CHECK(op.attrs().count("mode") == 0);  // sum
    }
    CHECK(bags == 1);
    CHECK(m->ops_size() == 5);
  }
}

TEST_CASE("an unedited round trip of a bag loop still imports (the edits below are the cause)") {
  for (const std::string file :
       {"embedding_bag_sum_legacy.onnx", "embedding_bag_sum_dynamo.onnx"}) {
    auto m = import_edited(file, [](onnx::ModelProto*) {});
    INFO(file << ": " << m.status().to_string());
    CHECK(m.ok());
  }
}

TEST_CASE("a bag loop that takes the maximum instead of the sum is refused") {
  require_refused(import_edited("embedding_bag_sum_legacy.onnx", [](onnx::ModelProto* m) {
    int edited = 0;
    for (auto* n : body_nodes(m)) {
      if (n->op_type() == "ReduceSum") n->set_op_type("ReduceMax"), ++edited;
    }
    REQUIRE(edited == 1);
  }));
}

TEST_CASE("a bag loop whose offsets step by another bag size is refused") {
  require_refused(import_edited("embedding_bag_sum_legacy.onnx", [](onnx::ModelProto* m) {
    auto* two = m->mutable_graph()->add_initializer();
    two->set_name("two");
    two->set_data_type(onnx::TensorProto::INT64);
    two->add_int64_data(2);
    int edited = 0;
    for (auto& n : *m->mutable_graph()->mutable_node()) {
      if (n.op_type() == "Range") n.set_input(2, "two"), ++edited;
    }
    REQUIRE(edited == 1);
  }));
}

TEST_CASE("a bag loop that ends each bag one offset too late is refused") {
  // dynamo: end = offsets[i + 1 : i + 2]; with 3 each bag runs into the next one.
  require_refused(import_edited("embedding_bag_sum_dynamo.onnx", [](onnx::ModelProto* m) {
    int edited = 0;
    for (auto& t : *m->mutable_graph()->mutable_initializer()) {
      if (t.name() != "int64_2") continue;
      t.clear_raw_data();
      t.clear_int64_data();
      t.add_int64_data(3);
      ++edited;
    }
    REQUIRE(edited == 1);
  }));
}

TEST_CASE("a bag loop over ids and offsets without max_bag is refused as the one cause") {
  for (const std::string variant :
       {"dynamo", "dynamo_static", "dynamo_train", "dynamo_train_noopt", "legacy"}) {
    INFO(variant);
    auto m = import_onnx(kDir + "embedding_bag_offsets_" + variant + ".onnx");
    INFO(m.status().to_string());
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().message().find("(Loop): nn.EmbeddingBag over ids 'ids' split into bags by "
                                    "offsets 'offsets'") != std::string::npos);
    CHECK(m.status().message().find("import with --max-bag N") != std::string::npos);
    // Its index arithmetic and sequence ops are refused with it, not listed as causes.
    CHECK(m.status().message().find(": 1 ONNX node(s) have no GraphPipe operator") !=
          std::string::npos);
    CHECK(m.status().message().find("node(s) that only compute its inputs") != std::string::npos);
  }
}

// --- the evaluator ---

onnx::NodeProto node(const std::string& type, std::vector<std::string> in,
                     std::vector<std::string> out) {
  onnx::NodeProto n;
  n.set_op_type(type);
  n.set_name(type + "_" + out[0]);
  for (const auto& s : in) n.add_input(s);
  for (const auto& s : out) n.add_output(s);
  return n;
}

EvalValue ints(std::vector<int64_t> dims, std::vector<double> v) {
  EvalValue e;
  e.tensor = EvalTensor{std::move(dims), std::move(v), true};
  return e;
}

Result<std::map<std::string, EvalValue>> run(const std::vector<onnx::NodeProto>& nodes,
                                             std::map<std::string, EvalValue> outer) {
  std::vector<const onnx::NodeProto*> ptrs;
  for (const auto& n : nodes) ptrs.push_back(&n);
  return onnx_detail::evaluate_nodes(ptrs, 18, [&](const std::string& name) {
    auto it = outer.find(name);
    return it == outer.end() ? std::nullopt : std::optional(it->second);
  });
}

void add_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void add_graph(onnx::NodeProto* n, const std::string& name, const onnx::GraphProto& g) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::GRAPH);
  *a->mutable_g() = g;
}

TEST_CASE("the evaluator runs a Loop with a carried value and a scan output") {
  // for i in range(4): acc += i; scan i * 2
  onnx::GraphProto body;
  body.add_input()->set_name("i");
  body.add_input()->set_name("c");
  body.add_input()->set_name("acc");
  *body.add_node() = node("Add", {"acc", "i"}, {"acc_next"});
  *body.add_node() = node("Mul", {"i", "two"}, {"scan"});
  *body.add_node() = node("Identity", {"c"}, {"c_out"});
  for (const char* o : {"c_out", "acc_next", "scan"}) body.add_output()->set_name(o);
  onnx::NodeProto loop = node("Loop", {"m", "", "zero"}, {"acc_final", "scans"});
  add_graph(&loop, "body", body);
  auto v = run({loop}, {{"m", ints({}, {4})}, {"zero", ints({}, {0})}, {"two", ints({}, {2})}});
  INFO(v.status().to_string());
  REQUIRE(v.ok());
  CHECK(v->at("acc_final").tensor.values == std::vector<double>{6});
  CHECK(v->at("scans").tensor.dims == std::vector<int64_t>{4});
  CHECK(v->at("scans").tensor.values == std::vector<double>{0, 2, 4, 6});
}

TEST_CASE("the evaluator splits a tensor by sizes, into equal parts and into a sequence") {
  const auto x = ints({2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  onnx::NodeProto by_sizes = node("Split", {"x", "sizes"}, {"a", "b"});
  add_int(&by_sizes, "axis", 1);
  auto v = run({by_sizes}, {{"x", x}, {"sizes", ints({2}, {2, 3})}});
  INFO(v.status().to_string());
  REQUIRE(v.ok());
  CHECK(v->at("a").tensor.dims == std::vector<int64_t>{2, 2});
  CHECK(v->at("a").tensor.values == std::vector<double>{0, 1, 5, 6});
  CHECK(v->at("b").tensor.values == std::vector<double>{2, 3, 4, 7, 8, 9});
  CHECK(v->at("b").tensor.ints);

  // Equal parts, one per output: the last one smaller where the axis does not divide.
  onnx::NodeProto halves = node("Split", {"x"}, {"h0", "h1"});
  add_int(&halves, "axis", -1);
  auto h = run({halves}, {{"x", x}});
  REQUIRE(h.ok());
  CHECK(h->at("h0").tensor.values == std::vector<double>{0, 1, 2, 5, 6, 7});
  CHECK(h->at("h1").tensor.values == std::vector<double>{3, 4, 8, 9});

  // A scalar size cuts pieces of it (the last shorter); SequenceAt counts from the end too.
  onnx::NodeProto chunks = node("SplitToSequence", {"x", "two"}, {"seq"});
  add_int(&chunks, "axis", 1);
  auto s = run({chunks, node("SequenceAt", {"seq", "last"}, {"tail"})},
               {{"x", x}, {"two", ints({}, {2})}, {"last", ints({}, {-1})}});
  REQUIRE(s.ok());
  CHECK(s->at("seq").items.size() == 3);
  CHECK(s->at("tail").tensor.dims == std::vector<int64_t>{2, 1});
  CHECK(s->at("tail").tensor.values == std::vector<double>{4, 9});

  // Without sizes, pieces of one with the axis dropped (keepdims 0): x.unbind(0).
  onnx::NodeProto rows = node("SplitToSequence", {"x"}, {"rows"});
  add_int(&rows, "keepdims", 0);
  auto r =
      run({rows, node("SequenceAt", {"rows", "one"}, {"row"})}, {{"x", x}, {"one", ints({}, {1})}});
  REQUIRE(r.ok());
  CHECK(r->at("row").tensor.dims == std::vector<int64_t>{5});
  CHECK(r->at("row").tensor.values == std::vector<double>{5, 6, 7, 8, 9});

  auto bad = run({by_sizes}, {{"x", x}, {"sizes", ints({2}, {2, 2})}});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("split sizes add up to 4, not the axis' 5") !=
        std::string::npos);
  // Sizes beyond the axis (whose sum could wrap), an uneven split before opset 18, and more
  // pieces than the evaluator holds are refused before anything is allocated.
  const double huge = 4611686018427387904.0;  // 2^62
  onnx::NodeProto five = node("Split", {"x", "sizes"}, {"a", "b", "c", "d", "e"});
  add_int(&five, "axis", 1);
  auto wrapped = run({five}, {{"x", x}, {"sizes", ints({5}, {huge, huge, huge, huge, 5})}});
  REQUIRE_FALSE(wrapped.ok());
  CHECK(wrapped.status().message().find("a split size of 4611686018427387904 for an axis of 5") !=
        std::string::npos);
  onnx::NodeProto three = node("Split", {"x"}, {"p", "q", "r"});
  add_int(&three, "axis", 1);
  const onnx::NodeProto* three_ptr = &three;
  auto uneven =
      onnx_detail::evaluate_nodes(std::span<const onnx::NodeProto* const>(&three_ptr, 1), 13,
                                  [&](const std::string& name) -> std::optional<EvalValue> {
                                    return name == "x" ? std::optional<EvalValue>(x) : std::nullopt;
                                  });
  REQUIRE_FALSE(uneven.ok());
  CHECK(uneven.status().message().find("does not split into 3 equal parts") != std::string::npos);
  auto many =
      run({chunks}, {{"x", ints({1, 5000}, std::vector<double>(5000, 1))}, {"two", ints({}, {1})}});
  REQUIRE_FALSE(many.ok());
  CHECK(many.status().message().find("more than 4096 pieces") != std::string::npos);
  auto out_of_range = run({chunks, node("SequenceAt", {"seq", "far"}, {"tail"})},
                          {{"x", x}, {"two", ints({}, {2})}, {"far", ints({}, {3})}});
  REQUIRE_FALSE(out_of_range.ok());
  CHECK(out_of_range.status().message().find("position out of range") != std::string::npos);
}

TEST_CASE("the evaluator stops a loop that never ends and a range too large to hold") {
  onnx::GraphProto body;
  body.add_input()->set_name("i");
  body.add_input()->set_name("c");
  *body.add_node() = node("Identity", {"c"}, {"c_out"});
  body.add_output()->set_name("c_out");
  onnx::NodeProto loop = node("Loop", {"", "yes"}, {"unused"});
  loop.clear_output();
  add_graph(&loop, "body", body);
  auto v = run({loop}, {{"yes", ints({}, {1})}});
  REQUIRE_FALSE(v.ok());
  CHECK(v.status().message().find("more than 4096 trips") != std::string::npos);

  auto r = run({node("Range", {"a", "b", "d"}, {"r"})},
               {{"a", ints({}, {0})}, {"b", ints({}, {1e12})}, {"d", ints({}, {1})}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("a range of more than") != std::string::npos);
}

TEST_CASE("the evaluator stops a loop whose sequence outgrows its bounds") {
  // for i in range(4000): seq.append(ones(1000)): 4 million elements.
  onnx::GraphProto body;
  body.add_input()->set_name("i");
  body.add_input()->set_name("c");
  body.add_input()->set_name("seq");
  *body.add_node() = node("SequenceInsert", {"seq", "row"}, {"seq_next"});
  *body.add_node() = node("Identity", {"c"}, {"c_out"});
  for (const char* o : {"c_out", "seq_next"}) body.add_output()->set_name(o);
  onnx::NodeProto loop = node("Loop", {"m", "", "seq0"}, {"seq_final"});
  add_graph(&loop, "body", body);
  auto v = run({node("SequenceEmpty", {}, {"seq0"}), loop},
               {{"m", ints({}, {4000})}, {"row", ints({1000}, std::vector<double>(1000, 1.0))}});
  // (Reading the growing sequence on every trip reaches the bound on work first.)
  REQUIRE_FALSE(v.ok());
  INFO(v.status().to_string());
  CHECK(v.status().code() == StatusCode::kResourceExhausted);
  CHECK(v.status().message().find("more than") != std::string::npos);
}

TEST_CASE("the evaluator slices backwards and concatenates a sequence along an axis") {
  onnx::NodeProto slice = node("Slice", {"x", "s", "e", "ax", "st"}, {"y"});
  onnx::NodeProto empty = node("SequenceEmpty", {}, {"seq0"});
  onnx::NodeProto ins1 = node("SequenceInsert", {"seq0", "row"}, {"seq1"});
  onnx::NodeProto ins2 = node("SequenceInsert", {"seq1", "row2"}, {"seq2"});
  onnx::NodeProto cat = node("ConcatFromSequence", {"seq2"}, {"cat"});
  auto* axis = cat.add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(1);
  auto v = run({slice, empty, ins1, ins2, cat}, {{"x", ints({6}, {0, 1, 2, 3, 4, 5})},
                                                 {"s", ints({1}, {-1})},
                                                 {"e", ints({1}, {-7})},
                                                 {"ax", ints({1}, {0})},
                                                 {"st", ints({1}, {-2})},
                                                 {"row", ints({2, 1}, {1, 2})},
                                                 {"row2", ints({2, 1}, {3, 4})}});
  INFO(v.status().to_string());
  REQUIRE(v.ok());
  CHECK(v->at("y").tensor.values == std::vector<double>{5, 3, 1});
  CHECK(v->at("cat").tensor.dims == std::vector<int64_t>{2, 2});
  CHECK(v->at("cat").tensor.values == std::vector<double>{1, 3, 2, 4});
}

TEST_CASE("the evaluator takes an If's branch by its condition and names an op it cannot run") {
  onnx::GraphProto then_g, else_g;
  *then_g.add_node() = node("Add", {"a", "a"}, {"t"});
  then_g.add_output()->set_name("t");
  *else_g.add_node() = node("Mul", {"a", "a"}, {"e"});
  else_g.add_output()->set_name("e");
  onnx::NodeProto branch = node("If", {"cond"}, {"out"});
  add_graph(&branch, "then_branch", then_g);
  add_graph(&branch, "else_branch", else_g);
  for (double cond : {1.0, 0.0}) {
    auto v = run({branch}, {{"cond", ints({}, {cond})}, {"a", ints({}, {3})}});
    REQUIRE(v.ok());
    CHECK(v->at("out").tensor.values == std::vector<double>{cond != 0 ? 6.0 : 9.0});
  }
  auto bad = run({node("Det", {"a"}, {"z"})}, {{"a", ints({}, {3})}});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("Det node 'Det_z'") != std::string::npos);
  CHECK(bad.status().message().find("not evaluated") != std::string::npos);
}

}  // namespace
}  // namespace gp::model
