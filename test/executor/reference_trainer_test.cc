// The numerical reference: training makes progress, is deterministic, and does not depend on
// how the mini-batch is chunked or which graph an operator sits in.
#include "gp/exec/reference_trainer.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <vector>

#include "../support/models.h"
#include "gp/exec/init.h"
#include "gp/exec/optimizer.h"
#include "gp/exec/stage_runner.h"

using namespace gp;

namespace {

graphpipe::v1::TrainingConfig sgd(double lr, uint64_t seed = 7) {
  graphpipe::v1::TrainingConfig t;
  t.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_SGD);
  t.set_learning_rate(lr);
  t.set_seed(seed);
  return t;
}

std::vector<double> losses(const model::Graph& g, int64_t batch, int64_t micro, int iterations,
                           const graphpipe::v1::TrainingConfig& t) {
  auto trainer = exec::ReferenceTrainer::create(g, batch, micro, t);
  INFO(trainer.status().to_string());
  REQUIRE(trainer.ok());
  std::vector<double> out;
  for (int i = 0; i < iterations; ++i) {
    const auto m = (*trainer)->run_iteration(i);
    REQUIRE(m.ok());
    out.push_back(m->loss);
  }
  return out;
}

}  // namespace

TEST_CASE("repeated steps on one mini-batch drive its loss down on every tiny zoo model") {
  // Synthetic labels are noise, so across iterations the loss cannot fall much; fitting one
  // fixed mini-batch must, if forward, backward and the optimizer agree.
  for (const char* spec :
       {"tiny-mmt", "tiny-dlrm", "tiny-candle-uno", "tiny-transformer", "tiny-nbranch"}) {
    INFO(spec);
    auto g = testing::zoo_graph(spec);
    std::vector<int> ops(g.num_ops());
    for (int i = 0; i < g.num_ops(); ++i) ops[i] = i;
    auto adam = sgd(0.01);
    adam.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
    auto layout = exec::layout_stage(g, ops);
    REQUIRE(layout.ok());
    auto runner =
        exec::StageRunner::create(g, *layout, {.max_batch = 16, .slots = 1, .training = adam});
    REQUIRE(runner.ok());
    exec::StageRunner& r = **runner;
    double first = 0, last = 0;
    for (int step = 0; step < 300; ++step) {
      r.zero_param_grads();
      r.forward(0, 16, /*iteration=*/0, 0);
      const double loss = r.loss_sum(0) / 16;
      if (step == 0) first = loss;
      last = loss;
      r.begin_backward(0);
      r.backward(0, 1.0f / 16);
      r.optimizer_step(step + 1);
    }
    CHECK(std::isfinite(last));
    CHECK(last < 0.5 * first);
  }
}

TEST_CASE("reference training is deterministic and depends on the seed") {
  auto g = testing::zoo_graph("tiny-mmt");
  const auto a = losses(g, 8, 0, 3, sgd(0.01, 1));
  const auto b = losses(g, 8, 0, 3, sgd(0.01, 1));
  const auto c = losses(g, 8, 0, 3, sgd(0.01, 2));
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("chunking the mini-batch into micro-batches gives the same losses") {
  auto g = testing::zoo_graph("tiny-candle-uno");
  const auto whole = losses(g, 16, 0, 4, sgd(0.05));
  const auto chunked = losses(g, 16, 4, 4, sgd(0.05));
  REQUIRE(whole.size() == chunked.size());
  for (size_t i = 0; i < whole.size(); ++i) CHECK(chunked[i] == Approx(whole[i]).epsilon(1e-5));
}

TEST_CASE("an operator's initial parameters depend only on its id, not on the graph") {
  auto small = testing::chain_graph(2);
  auto large = testing::chain_graph(5);
  const auto& a = small.op(small.index_of("fc1"));
  const auto& b = large.op(large.index_of("fc1"));
  std::vector<float> pa(8 * 8), pb(8 * 8);
  exec::init_param(a, 0, 42, pa);
  exec::init_param(b, 0, 42, pb);
  CHECK(pa == pb);
  exec::init_param(b, 0, 43, pb);
  CHECK(pa != pb);
  for (float v : pa) CHECK(std::abs(v) <= 1.0f / std::sqrt(8.0f));
}

TEST_CASE("synthetic data depends only on the sample index, not on how it is fetched") {
  auto g = testing::zoo_graph("tiny-dlrm");
  const auto& ids = g.op(g.index_of("sparse0.ids"));
  std::vector<int64_t> all(8 * 4), part(4 * 4);
  exec::fill_input(g, ids, 3, /*iteration=*/2, /*first_sample=*/0, 8, all.data());
  exec::fill_input(g, ids, 3, 2, 4, 4, part.data());
  CHECK(std::equal(part.begin(), part.end(), all.begin() + 16));
  for (int64_t id : all) CHECK((id >= 0 && id < 50));  // tiny-dlrm tables have 50 rows
}

TEST_CASE("optimizers: SGD, momentum and Adam updates match hand computations") {
  std::vector<float> w{1.0f, -2.0f}, g{0.5f, -1.0f};
  auto plain = exec::Optimizer::create(sgd(0.1));
  REQUIRE(plain.ok());
  plain->apply(w, g, {}, 1);
  CHECK(w[0] == Approx(0.95f));
  CHECK(w[1] == Approx(-1.9f));

  graphpipe::v1::TrainingConfig m = sgd(0.1);
  m.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_MOMENTUM);
  m.set_momentum(0.9);
  auto mom = exec::Optimizer::create(m);
  REQUIRE(mom.ok());
  std::vector<float> w2{1.0f}, g2{1.0f}, state(1, 0.0f);
  mom->apply(w2, g2, state, 1);  // v = 1, w = 0.9
  mom->apply(w2, g2, state, 2);  // v = 1.9, w = 0.71
  CHECK(w2[0] == Approx(0.71f));

  graphpipe::v1::TrainingConfig a = sgd(0.01);
  a.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  auto adam = exec::Optimizer::create(a);  // default betas 0.9, 0.999
  REQUIRE(adam.ok());
  CHECK(adam->state_floats() == 2);
  std::vector<float> w3{1.0f, 1.0f}, g3{3.0f, -0.2f}, s3(4, 0.0f);
  adam->apply(w3, g3, s3, 1);  // first step moves by lr * sign(g)
  CHECK(w3[0] == Approx(0.99f).epsilon(1e-5));
  CHECK(w3[1] == Approx(1.01f).epsilon(1e-5));
}

TEST_CASE("weight decay adds wd * w to the gradient, as PyTorch's weight_decay does") {
  graphpipe::v1::TrainingConfig t = sgd(0.1);
  t.set_weight_decay(0.5);
  auto opt = exec::Optimizer::create(t);
  REQUIRE(opt.ok());
  std::vector<float> w{1.0f, -2.0f}, g{0.5f, -1.0f};
  opt->apply(w, g, {}, 1);  // w - 0.1 (g + 0.5 w)
  CHECK(w[0] == Approx(1.0f - 0.1f * (0.5f + 0.5f)));
  CHECK(w[1] == Approx(-2.0f - 0.1f * (-1.0f - 1.0f)));
  t.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_MOMENTUM);
  t.set_momentum(0.9);
  auto mom = exec::Optimizer::create(t);
  REQUIRE(mom.ok());
  std::vector<float> w2{1.0f}, g2{0.0f}, s2(1, 0.0f);
  mom->apply(w2, g2, s2, 1);  // s = 0.5, w = 0.95
  CHECK(s2[0] == Approx(0.5f));
  CHECK(w2[0] == Approx(0.95f));
  t.set_weight_decay(-1);
  auto bad = exec::Optimizer::create(t);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("training.weight_decay = -1"));
}

TEST_CASE("warm-up then cosine: linear to the peak, cosine down to the floor, then the floor") {
  graphpipe::v1::TrainingConfig t = sgd(0.1);
  t.set_lr_schedule(graphpipe::v1::LR_SCHEDULE_WARMUP_COSINE);
  t.set_warmup_steps(4);
  t.set_total_steps(12);
  t.set_min_learning_rate(0.01);
  auto opt = exec::Optimizer::create(t);
  REQUIRE(opt.ok());
  CHECK(opt->learning_rate(1) == Approx(0.025));
  CHECK(opt->learning_rate(4) == Approx(0.1));
  CHECK(opt->learning_rate(8) == Approx(0.055));  // half-way: the mean of peak and floor
  CHECK(opt->learning_rate(12) == Approx(0.01));
  CHECK(opt->learning_rate(50) == Approx(0.01));
  CHECK(opt->step_constants(8).lr == static_cast<float>(opt->learning_rate(8)));
  std::vector<float> w{1.0f}, g{1.0f};
  opt->apply(w, g, {}, 1);
  CHECK(w[0] == Approx(0.975f));
  t.set_total_steps(4);  // not after the warm-up
  auto bad = exec::Optimizer::create(t);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("warmup_steps < total_steps"));
  graphpipe::v1::TrainingConfig constant = sgd(0.1);
  auto c = exec::Optimizer::create(constant);
  REQUIRE(c.ok());
  CHECK(c->learning_rate(1000) == 0.1);
}

TEST_CASE("gradient-norm clipping scales the update by max_norm / (norm + 1e-6), as torch does") {
  auto g = testing::zoo_graph("tiny-mmt");
  const double lr = 0.1;
  // One step of SGD from the same initial parameters: w1 - w0 = -lr * (factor * grad).
  auto step = [&](double clip) {
    auto t = sgd(lr);
    t.set_clip_grad_norm(clip);
    auto trainer = exec::ReferenceTrainer::create(g, 8, 0, t);
    INFO(trainer.status().to_string());
    REQUIRE(trainer.ok());
    const auto w0 = (*trainer)->runner().params();
    std::vector<double> before(w0.begin(), w0.end());
    REQUIRE((*trainer)->run_iteration(0).ok());
    const auto w1 = (*trainer)->runner().params();
    std::vector<double> delta(before.size());
    for (size_t i = 0; i < delta.size(); ++i) delta[i] = w1[i] - before[i];
    return delta;
  };
  const auto plain = step(0);
  double norm = 0;
  for (double d : plain) norm += d * d;
  norm = std::sqrt(norm) / lr;
  REQUIRE(norm > 0);
  const auto clipped = step(norm / 4);
  const double factor = (norm / 4) / (norm + 1e-6);
  double max_err = 0, max_abs = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    max_err = std::max(max_err, std::abs(clipped[i] - factor * plain[i]));
    max_abs = std::max(max_abs, std::abs(plain[i]));
  }
  CHECK(max_err < 1e-4 * max_abs);
  // A bound above the norm leaves the gradients as they are, bit for bit.
  CHECK(step(10 * norm) == plain);

  auto t = sgd(lr);
  t.set_clip_grad_norm(-1);
  auto bad = exec::ReferenceTrainer::create(g, 8, 0, t);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("training.clip_grad_norm = -1"));
}

TEST_CASE("bad training settings are errors that name the field") {
  auto g = testing::zoo_graph("tiny-mmt");
  auto bad_lr = exec::ReferenceTrainer::create(g, 8, 0, sgd(0.0));
  REQUIRE_FALSE(bad_lr.ok());
  CHECK_THAT(bad_lr.status().message(), Catch::Contains("training.learning_rate = 0"));
  auto bad_chunk = exec::ReferenceTrainer::create(g, 8, 3, sgd(0.1));
  REQUIRE_FALSE(bad_chunk.ok());
  CHECK_THAT(bad_chunk.status().message(),
             Catch::Contains("--micro-batch = 3 must divide --batch = 8"));
}

TEST_CASE("a tied parameter's copies step with the sum of their gradients and stay equal") {
  const auto tied = testing::build_graph(testing::tied_lm_model(true));
  const auto untied = testing::build_graph(testing::tied_lm_model(false));
  const int emb = tied.index_of("emb"), head = tied.index_of("head");
  auto run = [](const model::Graph& g, const graphpipe::v1::TrainingConfig& t, int iterations) {
    auto trainer = exec::ReferenceTrainer::create(g, 4, 0, t);
    INFO(trainer.status().to_string());
    REQUIRE(trainer.ok());
    for (int i = 0; i < iterations; ++i) REQUIRE((*trainer)->run_iteration(i).ok());
    return std::move(trainer).value();
  };
  // One SGD step: each untied copy moved by its own gradient, the tied ones by the sum.
  const auto t = run(tied, sgd(0.5), 1);
  const auto u = run(untied, sgd(0.5), 1);
  std::string w0;
  const model::ModelGraph untied_model = testing::tied_lm_model(false);
  for (const auto& op : untied_model.ops()) {
    if (op.id() == "emb") w0 = op.param_values().at("weight");
  }
  REQUIRE(w0.size() == 60 * sizeof(float));
  const auto* initial = reinterpret_cast<const float*>(w0.data());
  const auto te = t->runner().op_params(emb), th = t->runner().op_params(head);
  const auto ue = u->runner().op_params(emb), uh = u->runner().op_params(head);
  REQUIRE(te.size() == 60);
  REQUIRE(th.size() == 60);
  double moved = 0;
  for (size_t k = 0; k < te.size(); ++k) {
    CHECK(te[k] == th[k]);
    CHECK(te[k] == Approx(ue[k] + uh[k] - initial[k]).margin(1e-6));
    moved = std::max(moved, static_cast<double>(std::abs(ue[k] - te[k])));
  }
  CHECK(moved > 1e-4);  // the head's gradient reached the embedding
  // Adam keeps the copies bit-identical step after step.
  graphpipe::v1::TrainingConfig adam = sgd(0.01);
  adam.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  const auto a = run(tied, adam, 3);
  const auto ae = a->runner().op_params(emb), ah = a->runner().op_params(head);
  for (size_t k = 0; k < ae.size(); ++k) CHECK(ae[k] == ah[k]);
}

TEST_CASE("ids passed on through slices bound their range by the smallest table they reach") {
  model::GraphBuilder b("fields", "");
  auto ids = b.input("ids", {2}, graphpipe::v1::DATA_TYPE_INT64);
  auto a = b.embedding("a", b.slice("f0", ids, 0, 0, 1), 7, 2);
  auto c = b.embedding("c", b.reshape("f1", b.slice("s1", ids, 0, 1, 2), {1}), 5, 2);
  b.add_loss(b.mse_loss("loss", b.add("sum", {a, c}), b.input("t", {1, 2})));
  const auto g = testing::build_graph(b.finish());
  CHECK(exec::id_range(g, g.op(g.index_of("ids"))) == 5);
}

TEST_CASE("integers only cast reads are numbers: any value, and synthetic ones a 0/1 mask") {
  model::GraphBuilder b("masked", "");
  auto mask = b.input("mask", {4}, graphpipe::v1::DATA_TYPE_INT64);
  auto x = b.input("x", {4});
  b.add_loss(
      b.mse_loss("loss", b.binary("masked", x, b.cast("m", mask), "mul"), b.input("t", {4})));
  const auto g = testing::build_graph(b.finish());
  const auto& input = g.op(g.index_of("mask"));
  CHECK(exec::id_range(g, input) == exec::kAnyInteger);
  std::vector<int64_t> values(4 * 16);
  exec::fill_input(g, input, 3, /*iteration=*/0, /*first_sample=*/0, 16, values.data());
  std::set<int64_t> seen(values.begin(), values.end());
  CHECK(seen == std::set<int64_t>{0, 1});
}
