#include "gp/profile/measure.h"

#include <catch2/catch.hpp>
#include <vector>

namespace gp::profile {
namespace {

// Reports scripted durations, one per timed call, and counts the calls it timed.
class FakeTimer final : public Timer {
 public:
  explicit FakeTimer(std::vector<double> durations_us) : durations_(std::move(durations_us)) {}
  void start() override { ++starts_; }
  double stop_us() override { return durations_[next_++ % durations_.size()]; }
  int starts() const { return starts_; }

 private:
  std::vector<double> durations_;
  size_t next_ = 0;
  int starts_ = 0;
};

TEST_CASE("summarize gives the median and the interpolated 10th and 90th percentiles") {
  std::vector<double> v{5, 1, 4, 2, 3, 10, 6, 7, 9, 8, 11};  // 1..11
  const Stats s = summarize(v);
  CHECK(s.median_us == Approx(6));
  CHECK(s.p10_us == Approx(2));   // position 1.0 of 0..10
  CHECK(s.p90_us == Approx(10));  // position 9.0
  CHECK(s.spread_us() == Approx(8));
  CHECK(s.repetitions == 11);

  std::vector<double> even{1, 2, 3, 4};
  CHECK(summarize(even).median_us == Approx(2.5));
  std::vector<double> none;
  CHECK(summarize(none).repetitions == 0);
}

TEST_CASE("measure runs the warm-up untimed, then stops at the minimum count once time suffices") {
  FakeTimer timer({100});
  MeasureOptions o;
  o.warmup = 3;
  o.min_repetitions = 4;
  o.max_repetitions = 50;
  o.min_total_us = 300;  // reached after 3 calls, but 4 are required
  int calls = 0;
  const Stats s = measure(timer, o, [&] { ++calls; });
  CHECK(s.repetitions == 4);
  CHECK(timer.starts() == 4);
  CHECK(calls == 7);
  CHECK(s.median_us == Approx(100));
}

TEST_CASE("measure keeps timing short calls until the minimum total time, up to the maximum") {
  FakeTimer timer({10});
  MeasureOptions o;
  o.warmup = 0;
  o.min_repetitions = 2;
  o.min_total_us = 95;
  o.max_repetitions = 50;
  CHECK(measure(timer, o, [] {}).repetitions == 10);  // 10 x 10 us >= 95 us

  FakeTimer capped({10});
  o.max_repetitions = 6;
  CHECK(measure(capped, o, [] {}).repetitions == 6);
}

TEST_CASE("measure reports outliers in the spread, not in the median") {
  FakeTimer timer({50, 50, 50, 50, 50, 50, 50, 50, 500, 5});
  MeasureOptions o;
  o.warmup = 0;
  o.min_repetitions = 10;
  o.max_repetitions = 10;
  o.min_total_us = 0;
  const Stats s = measure(timer, o, [] {});
  CHECK(s.median_us == Approx(50));
  CHECK(s.p10_us == Approx(45.5));  // between 5 and 50
  CHECK(s.p90_us == Approx(95));    // between 50 and 500
}

TEST_CASE("measure runs the before hook untimed ahead of every timed call") {
  FakeTimer timer({1});
  MeasureOptions o;
  o.warmup = 2;
  o.min_repetitions = 5;
  o.max_repetitions = 5;
  o.min_total_us = 0;
  int before = 0, calls = 0;
  std::vector<int> order;
  measure(
      timer, o, [&] { ++calls, order.push_back(1); }, [&] { ++before, order.push_back(0); });
  CHECK(before == 5);
  CHECK(calls == 7);
  // Warm-up calls first, then alternating hook / call.
  CHECK(order == std::vector<int>{1, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1});
}

TEST_CASE("the steady timer measures elapsed time") {
  SteadyTimer t;
  t.start();
  volatile double x = 0;
  for (int i = 0; i < 200000; ++i) x = x + 1;
  CHECK(t.stop_us() > 0);
}

}  // namespace
}  // namespace gp::profile
