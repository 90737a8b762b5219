#include "gp/profile/comm_profiler.h"

#include <catch2/catch.hpp>
#include <thread>

namespace gp::profile {
namespace {

google::protobuf::RepeatedPtrField<graphpipe::v1::CommPoint> points(
    std::initializer_list<std::pair<int64_t, double>> list) {
  google::protobuf::RepeatedPtrField<graphpipe::v1::CommPoint> out;
  for (const auto& [bytes, us] : list) {
    auto* p = out.Add();
    p->set_bytes(bytes);
    p->set_time_us(us);
  }
  return out;
}

TEST_CASE("the alpha-beta fit recovers latency and bandwidth from exact points") {
  // alpha 20 us, beta 2 GB/s: t = 20 + bytes / 2000 us.
  auto pts = points({{1024, 20.512}, {65536, 52.768}, {1 << 20, 544.288}, {16 << 20, 8408.608}});
  auto fit = fit_alpha_beta(pts);
  REQUIRE(fit.ok());
  CHECK(fit->alpha_us == Approx(20).epsilon(1e-6));
  CHECK(fit->beta_bytes_per_s == Approx(2e9).epsilon(1e-6));
}

TEST_CASE("the fit weighs small transfers so that latency is not drowned by large ones") {
  // Noise of +10% on the largest point only: alpha stays close, unlike an unweighted fit.
  auto pts = points({{1024, 20.512}, {4096, 22.048}, {65536, 52.768}, {16 << 20, 8408.608 * 1.1}});
  auto fit = fit_alpha_beta(pts);
  REQUIRE(fit.ok());
  CHECK(fit->alpha_us == Approx(20).epsilon(0.1));
}

TEST_CASE("a fit with a negative intercept is refitted through the origin") {
  auto pts = points({{1000, 1.0}, {2000, 3.0}, {4000, 7.0}});  // intercept -1
  auto fit = fit_alpha_beta(pts);
  REQUIRE(fit.ok());
  CHECK(fit->alpha_us == 0);
  CHECK(fit->beta_bytes_per_s > 0);
}

TEST_CASE("the fit rejects unusable points") {
  CHECK_FALSE(fit_alpha_beta(points({{1024, 10}})).ok());                // one size
  CHECK_FALSE(fit_alpha_beta(points({{1024, 10}, {1024, 12}})).ok());    // one distinct size
  CHECK_FALSE(fit_alpha_beta(points({{1024, 10}, {4096, 0}})).ok());     // zero time
  auto shrinking = fit_alpha_beta(points({{1024, 50}, {1 << 20, 10}}));  // time falls with size
  REQUIRE_FALSE(shrinking.ok());
  CHECK_THAT(shrinking.status().message(), Catch::Contains("does not grow"));
}

TEST_CASE("sweep options are validated naming the option") {
  CommSweepOptions o;
  CHECK_FALSE(validate_sweep(o).ok());  // no sizes
  o.sizes_bytes = {1024, 6};
  CHECK_THAT(validate_sweep(o).message(), Catch::Contains("--sizes"));
  o.sizes_bytes = {4096, 1024};
  CHECK_THAT(validate_sweep(o).message(), Catch::Contains("ascending"));
  o.sizes_bytes = {1024};
  o.repetitions = 0;
  CHECK_THAT(validate_sweep(o).message(), Catch::Contains("--repetitions"));
  CHECK(default_sweep_sizes().front() == 1024);
  CHECK(default_sweep_sizes().back() == (int64_t{16} << 20));
}

TEST_CASE("sweeps over an in-process data plane report every size on rank 0 only") {
  constexpr int kRanks = 4;
  exec::LoopbackHub hub(kRanks, std::chrono::seconds(20));
  CommSweepOptions o;
  o.sizes_bytes = {1024, 65536};
  o.warmup = 1;
  o.repetitions = 3;
  std::vector<std::vector<CommSample>> p2p(kRanks), allreduce(kRanks);
  std::vector<Status> status(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto comm = hub.communicator(r);
      auto a = sweep_p2p(*comm, kRanks, o, nullptr);
      if (!a.ok()) {
        status[r] = a.status();
        return;
      }
      p2p[r] = *a;
      auto b = sweep_allreduce(*comm, kRanks, o, nullptr);
      if (!b.ok()) {
        status[r] = b.status();
        return;
      }
      allreduce[r] = *b;
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& st : status) REQUIRE(st.ok());
  REQUIRE(p2p[0].size() == 2);
  REQUIRE(allreduce[0].size() == 2);
  for (int r = 1; r < kRanks; ++r) {
    CHECK(p2p[r].empty());
    CHECK(allreduce[r].empty());
  }
  for (const auto& s : p2p[0]) {
    CHECK(s.time.repetitions == 3);
    CHECK(s.time.median_us > 0);
    CHECK(s.busbw_bytes_per_s == Approx(s.algbw_bytes_per_s));
  }
  for (const auto& s : allreduce[0]) {
    // nccl-tests' bus bandwidth for all-reduce: algbw * 2 (n - 1) / n.
    CHECK(s.busbw_bytes_per_s == Approx(s.algbw_bytes_per_s * 1.5));
  }
  CHECK(allreduce[0][1].bytes == 65536);
}

TEST_CASE("sweeps need at least two ranks") {
  exec::LoopbackHub hub(1, std::chrono::seconds(1));
  auto comm = hub.communicator(0);
  CommSweepOptions o;
  o.sizes_bytes = {1024};
  CHECK_FALSE(sweep_p2p(*comm, 1, o, nullptr).ok());
  CHECK_FALSE(sweep_allreduce(*comm, 1, o, nullptr).ok());
}

}  // namespace
}  // namespace gp::profile
