// Rank 0's profile of a running job (job/measured_profile.h): ranks' reports from their op
// clocks, pooled per op signature and rank into a ProfileDB that graphpipe-profile's validation
// accepts, with device kinds "<cluster device>/rank<R>"; the measuring cadence.
#include "job/measured_profile.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <string>

#include "../support/models.h"
#include "gp/profile_db/profile_db.h"
#include "job/clock_offset.h"

namespace gp::exec::daemon {
namespace {

namespace pb = graphpipe::v1;

pb::Plan plan_on(const std::string& device) {
  pb::Plan plan;
  plan.mutable_cluster()->mutable_device()->set_name(device);
  return plan;
}

pb::OpTimes op_times(int op, std::initializer_list<float> fwd, std::initializer_list<float> bwd) {
  pb::OpTimes t;
  t.set_op(op);
  for (float v : fwd) t.add_forward_us(v);
  for (float v : bwd) t.add_backward_us(v);
  return t;
}

pb::RankTimings timings(int64_t iteration, int64_t micro_batch) {
  pb::RankTimings t;
  t.set_iteration(iteration);
  t.set_micro_batch(micro_batch);
  *t.mutable_provenance() = profile::make_provenance("cpu", "test cpu", "", "");
  return t;
}

const pb::OpMeasurement* find(const pb::ProfileDB& db, const std::string& kind) {
  for (const auto& m : db.ops()) {
    if (m.device_kind() == kind) return &m;
  }
  return nullptr;
}

// chain_graph(3): ops x, fc0, fc1, fc2, t, loss; fc0..fc2 share one signature (8 -> 8).
constexpr int kFc0 = 1, kFc1 = 2, kFc2 = 3;

TEST_CASE("a measured profile pools a rank's ops of one signature into one valid record") {
  const model::Graph g = testing::chain_graph(3);
  const pb::Plan plan = plan_on("cpu-process");
  REQUIRE(g.op(kFc0).id() == "fc0");
  std::map<int, pb::RankTimings> by_rank;
  pb::RankTimings r0 = timings(4, 4);
  *r0.add_ops() = op_times(kFc0, {1, 2, 3}, {10, 20});
  *r0.add_ops() = op_times(kFc1, {4, 5}, {30});
  by_rank[0] = r0;
  pb::RankTimings r1 = timings(4, 2);
  *r1.add_ops() = op_times(kFc2, {30, 10, 20}, {60, 60});
  by_rank[1] = r1;
  auto db = measured_profile(plan, g, by_rank);
  INFO(db.status().to_string());
  REQUIRE(db.ok());
  CHECK(profile::validate_profile(*db).ok());
  REQUIRE(db->ops_size() == 2);  // one signature on each rank
  const pb::OpMeasurement* m0 = find(*db, "cpu-process/rank0");
  const pb::OpMeasurement* m1 = find(*db, "cpu-process/rank1");
  REQUIRE(m0 != nullptr);
  REQUIRE(m1 != nullptr);
  CHECK(m0->signature() == m1->signature());
  CHECK(m0->micro_batch() == 4);
  CHECK(m1->micro_batch() == 2);
  CHECK(m0->repetitions() == 5);                  // fc0's 3 and fc1's 2 forward samples
  CHECK(m0->forward_time_us() == Approx(3.0));    // median of 1..5
  CHECK(m0->forward_spread_us() == Approx(3.2));  // 4.6 - 1.4
  CHECK(m0->backward_time_us() == Approx(20.0));  // median of 10, 20, 30
  CHECK(m1->forward_time_us() == Approx(20.0));
  CHECK(m1->backward_time_us() == Approx(60.0));
  CHECK(m1->backward_spread_us() == Approx(0.0));
  CHECK(m0->activation_bytes() == 0);
  CHECK(m1->provenance().backend() == "cpu");
}

TEST_CASE("a measured profile refuses an op the model lacks, naming the rank and the op") {
  const model::Graph g = testing::chain_graph(2);
  std::map<int, pb::RankTimings> by_rank;
  by_rank[3] = timings(2, 4);
  *by_rank[3].add_ops() = op_times(99, {1}, {1});
  auto db = measured_profile(plan_on("cpu-process"), g, by_rank);
  REQUIRE_FALSE(db.ok());
  CHECK(db.status().code() == StatusCode::kInvalidArgument);
  CHECK(db.status().message().find("rank 3") != std::string::npos);
  CHECK(db.status().message().find("op 99") != std::string::npos);
}

TEST_CASE("a rank's report holds its clock's samples by graph op, without unmeasured ops") {
  OpClock clock(3, 1.0);
  clock.set_recording(true);
  clock.record(1, false, 5.0);
  clock.record(1, true, 7.0);
  clock.record(2, false, 6.0);
  const pb::RankTimings t =
      rank_timings(clock, {10, 11, 12}, 12, 8, profile::make_provenance("cpu", "x", "", ""));
  CHECK(t.iteration() == 12);
  CHECK(t.micro_batch() == 8);
  REQUIRE(t.ops_size() == 2);  // position 0 (an input op, say) has no samples
  CHECK(t.ops(0).op() == 11);
  CHECK(t.ops(0).forward_us_size() == 1);
  CHECK(t.ops(0).backward_us(0) == 7.0f);
  CHECK(t.ops(1).op() == 12);
  CHECK(t.ops(1).backward_us_size() == 0);
}

TEST_CASE(
    "the gatherer keeps each rank's newest report and writes a profile graphpipe-profile reads") {
  const model::Graph g = testing::chain_graph(2);
  const pb::Plan plan = plan_on("v100");
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("measured-" + std::to_string(::getpid()) + ".pbtxt"))
                               .string();
  MeasuredProfile gather(plan, g, path);
  pb::RankTimings newer = timings(12, 4);
  *newer.add_ops() = op_times(kFc1, {50}, {80});
  pb::RankTimings older = timings(2, 4);
  *older.add_ops() = op_times(kFc1, {5}, {8});
  gather.add(1, newer);
  gather.add(1, older);  // arrives late: kept out
  REQUIRE(gather.write().ok());
  auto db = profile::read_profile(path);
  INFO(db.status().to_string());
  REQUIRE(db.ok());
  REQUIRE(db->ops_size() == 1);
  CHECK(db->ops(0).device_kind() == "v100/rank1");
  CHECK(db->ops(0).forward_time_us() == Approx(50.0));
  std::filesystem::remove(path);
}

pb::TransferTimes transfer(int peer, uint64_t tag, int64_t bytes, bool send, double start_us,
                           double end_us) {
  pb::TransferTimes t;
  t.set_peer(peer);
  t.set_tag(tag);
  t.set_bytes(bytes);
  t.set_send(send);
  t.set_start_us(start_us);
  t.set_end_us(end_us);
  return t;
}

TEST_CASE(
    "a message's time runs from its send to its receive, kept only where the receiver waited") {
  pb::RankTimings r0 = timings(7, 4), r1 = timings(7, 4);
  *r0.add_transfers() = transfer(1, 5, 1000, true, 100, 101);  // received by a waiting rank 1
  *r0.add_transfers() = transfer(1, 6, 1000, true, 200, 201);  // rank 1 asked only after it
  *r1.add_transfers() = transfer(0, 5, 1000, false, 90, 150);
  *r1.add_transfers() = transfer(0, 6, 1000, false, 210, 212);
  *r1.add_transfers() = transfer(0, 9, 64, true, 300, 301);  // back to rank 0, which waited
  *r0.add_transfers() = transfer(1, 9, 64, false, 250, 330);
  LinkSamples links;
  join_transfers(0, r0, 1, r1, links);
  REQUIRE(links.size() == 2);
  CHECK(links.at({0, 1, 1000}) == std::vector<float>{50});
  CHECK(links.at({1, 0, 64}) == std::vector<float>{30});

  LinkSamples none;
  pb::RankTimings later = r1;
  later.set_iteration(8);
  join_transfers(0, r0, 1, later, none);  // another iteration's
  pb::RankTimings elsewhere = r1;
  elsewhere.mutable_provenance()->set_host("another-host");
  join_transfers(0, r0, 1, elsewhere, none);  // another host's clock
  CHECK(none.empty());
}

TEST_CASE("messages between hosts are paired on the coordinator's clock, when it is known well") {
  // Rank 1's clock runs 5000 us behind the coordinator's, rank 0's 200 us ahead.
  pb::RankTimings r0 = timings(7, 4), r1 = timings(7, 4);
  r1.mutable_provenance()->set_host("host-b");
  r0.set_clock_offset_us(-200);
  r1.set_clock_offset_us(5000);
  *r0.add_transfers() = transfer(1, 5, 1 << 20, true, 1200, 1210);     // 1000 on the common clock
  *r1.add_transfers() = transfer(0, 5, 1 << 20, false, -4100, -3500);  // asked 900, there 1500
  for (double uncertainty : {10.0, 40.0}) {
    r0.set_clock_uncertainty_us(uncertainty);
    r1.set_clock_uncertainty_us(uncertainty);
    LinkSamples links;
    join_transfers(0, r0, 1, r1, links);
    if (uncertainty == 10.0) {  // 20 us of error against 500 us: kept
      REQUIRE(links.size() == 1);
      CHECK(links.at({0, 1, 1 << 20}) == std::vector<float>{500});
    } else {  // 80 us: more than a tenth of it
      CHECK(links.empty());
    }
  }
}

TEST_CASE("a clock's offset is the shortest round trip's, within half of it") {
  ClockOffset clock;
  CHECK(clock.estimate(0).uncertainty_us < 0);  // none yet
  clock.add(1000, 6100, 1200);                  // round trip 200: offset 5000 +- 100
  clock.add(2000, 7010, 2020);                  // round trip 20: offset 5000 +- 10
  clock.add(3000, 9000, 3400);                  // a slow one, 400
  clock.add(5000, 1, 4000);                     // a clock that went backwards: ignored
  ClockEstimate e = clock.estimate(3400);
  CHECK(e.offset_us == Approx(5000));
  CHECK(e.uncertainty_us == Approx(10 + 1380 * ClockOffset::kDriftPerUs));
  // A minute later the clocks may have drifted 6 ms apart: a fresh round trip of 400 wins.
  clock.add(60e6, 60e6 + 5100, 60e6 + 400);
  e = clock.estimate(60e6 + 400);
  CHECK(e.offset_us == Approx(4900));
  CHECK(e.uncertainty_us == Approx(200));
}

pb::Plan two_ranks_one_node() {
  pb::Plan plan = plan_on("cpu-process");
  pb::Cluster& c = *plan.mutable_cluster();
  c.set_num_nodes(1);
  c.set_devices_per_node(2);
  c.mutable_intra_node()->set_bandwidth_bytes_per_s(2e9);
  c.mutable_intra_node()->set_latency_us(20);
  return plan;
}

TEST_CASE("large measured messages give a link's latency and bandwidth, small ones its latency") {
  const model::Graph g = testing::chain_graph(2);
  std::map<int, pb::RankTimings> by_rank{{0, timings(7, 4)}, {1, timings(7, 4)}};
  LinkSamples large{{{0, 1, 1 << 20}, {600, 590, 610}}, {{1, 0, 4 << 20}, {2100}}};
  auto db = measured_profile(two_ranks_one_node(), g, by_rank, large);
  INFO(db.status().to_string());
  REQUIRE(db.ok());
  REQUIRE(db->comm_size() == 1);
  const pb::CommFit& fit = db->comm(0);
  CHECK(fit.link_class() == pb::LINK_CLASS_INTRA_NODE);
  CHECK(fit.kind() == pb::COLLECTIVE_KIND_P2P);
  CHECK(fit.points_size() == 2);
  CHECK(fit.beta_bytes_per_s() == Approx(3.0 * (1 << 20) / 1500e-6));  // the slope
  CHECK(fit.alpha_us() == Approx(600 - (1 << 20) / fit.beta_bytes_per_s() * 1e6));

  // 256 and 512 bytes take the 2 GB/s link well under its 20 us latency: noise in the slope.
  LinkSamples small{{{0, 1, 256}, {30, 31, 32}}, {{0, 1, 512}, {40}}};
  db = measured_profile(two_ranks_one_node(), g, by_rank, small);
  REQUIRE(db.ok());
  REQUIRE(db->comm_size() == 1);
  CHECK(db->comm(0).beta_bytes_per_s() == Approx(2e9));  // the cluster's
  CHECK(db->comm(0).alpha_us() == Approx((31 - 0.128 + 40 - 0.256) / 2));
}

TEST_CASE("measured iterations come after two warm-up iterations, then every K-th") {
  CHECK_FALSE(measured_iteration(0, 0, 10));
  CHECK_FALSE(measured_iteration(1, 0, 10));
  CHECK(measured_iteration(2, 0, 10));
  CHECK_FALSE(measured_iteration(3, 0, 10));
  CHECK(measured_iteration(12, 0, 10));
  CHECK(measured_iteration(4, 0, 2));
  CHECK(measured_iteration(102, 100, 10));   // a resumed run warms up again
  CHECK_FALSE(measured_iteration(2, 0, 0));  // 0: never
}

}  // namespace
}  // namespace gp::exec::daemon
