#include "gp/profile_db/profile_db.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <limits>

#include "../support/models.h"
#include "gp/cost/cost_model.h"
#include "gp/model/model_io.h"

namespace gp::profile {
namespace {

using graphpipe::v1::ProfileDB;

graphpipe::v1::OpMeasurement op(const std::string& sig, int64_t b, double fwd_us,
                                const std::string& host = "a") {
  graphpipe::v1::OpMeasurement m;
  m.set_signature(sig);
  m.set_device_kind("cpu-process");
  m.set_micro_batch(b);
  m.set_forward_time_us(fwd_us);
  m.set_backward_time_us(2 * fwd_us);
  m.set_repetitions(5);
  *m.mutable_provenance() = make_provenance("cpu", "test cpu", "", "openblas");
  m.mutable_provenance()->set_host(host);
  return m;
}

graphpipe::v1::CommFit fit(graphpipe::v1::CollectiveKind kind, int ranks, double alpha_us) {
  graphpipe::v1::CommFit f;
  f.set_link_class(graphpipe::v1::LINK_CLASS_INTRA_NODE);
  f.set_kind(kind);
  f.set_ranks(ranks);
  f.set_alpha_us(alpha_us);
  f.set_beta_bytes_per_s(1e9);
  *f.mutable_provenance() = make_provenance("cpu", "test cpu", "", "gloo");
  return f;
}

graphpipe::v1::OptimizerFit step_fit(graphpipe::v1::OptimizerKind kind, double alpha_us,
                                     const std::string& device_kind = "cpu-process") {
  graphpipe::v1::OptimizerFit f;
  f.set_device_kind(device_kind);
  f.set_optimizer(kind);
  f.set_alpha_us(alpha_us);
  f.set_beta_bytes_per_s(8e9);
  auto* p = f.add_points();
  p->set_bytes(49152);
  p->set_time_us(alpha_us + 6.144);
  *f.mutable_provenance() = make_provenance("cpu", "test cpu", "", "openblas");
  return f;
}

ProfileDB db_of(std::vector<graphpipe::v1::OpMeasurement> ops,
                std::vector<graphpipe::v1::CommFit> comm = {}) {
  ProfileDB db;
  db.set_format_version(kProfileFormatVersion);
  for (auto& m : ops) *db.add_ops() = m;
  for (auto& f : comm) *db.add_comm() = f;
  return db;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("gp_profile_db_test_" + name)).string();
}

TEST_CASE("provenance records the tool version, a UTC date and the host") {
  const auto p = make_provenance("cpu", "EPYC", "", "OpenBLAS 0.3");
  CHECK(p.backend() == "cpu");
  CHECK(p.device_name() == "EPYC");
  CHECK(p.library_versions() == "OpenBLAS 0.3");
  CHECK_FALSE(p.tool_version().empty());
  CHECK_FALSE(p.host().empty());
  REQUIRE(p.date().size() == 20);  // 2026-11-29T12:00:00Z
  CHECK(p.date()[10] == 'T');
  CHECK(p.date().back() == 'Z');
}

TEST_CASE("a profile database survives a round trip through binary and text files") {
  const auto db = db_of({op("linear|out_features=8|[8] float32", 1, 3.5),
                         op("linear|out_features=8|[8] float32", 4, 9.25)},
                        {fit(graphpipe::v1::COLLECTIVE_KIND_P2P, 2, 20)});
  for (const char* ext : {".pb", ".pbtxt", ".json"}) {
    const std::string path = temp_path(std::string("roundtrip") + ext);
    REQUIRE(write_profile(path, db).ok());
    auto back = read_profile(path);
    REQUIRE(back.ok());
    CHECK(model::message_hash(*back) == model::message_hash(db));
    std::filesystem::remove(path);
  }
}

TEST_CASE("merging keeps every record's provenance and lets a later database win a key") {
  const auto first =
      db_of({op("relu||[8] float32", 1, 1.0, "host-a"), op("relu||[8] float32", 2, 2.0, "host-a")},
            {fit(graphpipe::v1::COLLECTIVE_KIND_P2P, 2, 20)});
  const auto second =
      db_of({op("relu||[8] float32", 2, 5.0, "host-b"), op("gelu||[8] float32", 1, 3.0, "host-b")},
            {fit(graphpipe::v1::COLLECTIVE_KIND_P2P, 2, 30),
             fit(graphpipe::v1::COLLECTIVE_KIND_ALL_REDUCE, 4, 50)});
  MergeStats stats;
  const std::vector<ProfileDB> inputs{first, second};
  const auto merged = merge_profiles(inputs, &stats);
  CHECK(stats.ops_replaced == 1);
  CHECK(stats.comm_replaced == 1);
  REQUIRE(merged.ops_size() == 3);
  CHECK(merged.ops(0).provenance().host() == "host-a");  // relu b=1: only in the first
  CHECK(merged.ops(1).forward_time_us() == 5.0);         // relu b=2: the second's
  CHECK(merged.ops(1).provenance().host() == "host-b");
  CHECK(merged.ops(2).signature() == "gelu||[8] float32");
  REQUIRE(merged.comm_size() == 2);
  CHECK(merged.comm(0).alpha_us() == 30);
  CHECK(merged.comm(1).ranks() == 4);
  CHECK(validate_profile(merged).ok());
  CHECK_THAT(describe_profile(merged), Catch::Contains("2 signatures"));
  CHECK_THAT(describe_profile(merged), Catch::Contains("all-reduce"));
}

TEST_CASE("optimizer fits merge by device kind and optimizer, and the summary lists them") {
  auto first = db_of({});
  *first.add_optimizer_steps() = step_fit(graphpipe::v1::OPTIMIZER_KIND_SGD, 1.0);
  *first.add_optimizer_steps() = step_fit(graphpipe::v1::OPTIMIZER_KIND_ADAM, 2.0);
  auto second = db_of({});
  *second.add_optimizer_steps() = step_fit(graphpipe::v1::OPTIMIZER_KIND_ADAM, 3.0);
  *second.add_optimizer_steps() = step_fit(graphpipe::v1::OPTIMIZER_KIND_ADAM, 4.0, "H100");
  MergeStats stats;
  const std::vector<ProfileDB> inputs{first, second};
  const auto merged = merge_profiles(inputs, &stats);
  CHECK(stats.optimizer_replaced == 1);
  REQUIRE(merged.optimizer_steps_size() == 3);
  CHECK(merged.optimizer_steps(0).alpha_us() == 1.0);
  CHECK(merged.optimizer_steps(1).alpha_us() == 3.0);  // cpu-process Adam: the second's
  CHECK(merged.optimizer_steps(2).device_kind() == "H100");
  REQUIRE(validate_profile(merged).ok());
  const std::string text = describe_profile(merged);
  CHECK_THAT(text, Catch::Contains("cpu-process"));
  CHECK_THAT(text, Catch::Contains("adam"));
  CHECK_THAT(text, Catch::Contains("beta     8.000 GB/s"));
}

TEST_CASE("validation of optimizer fits names the record and the field") {
  auto db = db_of({});
  *db.add_optimizer_steps() = step_fit(graphpipe::v1::OPTIMIZER_KIND_UNSPECIFIED, 1.0);
  CHECK_THAT(validate_profile(db).message(), Catch::Contains("optimizer_steps[0]: optimizer = 0"));
  db.mutable_optimizer_steps(0)->set_optimizer(graphpipe::v1::OPTIMIZER_KIND_SGD);
  REQUIRE(validate_profile(db).ok());
  db.mutable_optimizer_steps(0)->set_device_kind("");
  CHECK_THAT(validate_profile(db).message(), Catch::Contains("optimizer_steps[0]: device_kind"));
  *db.mutable_optimizer_steps(0) = step_fit(graphpipe::v1::OPTIMIZER_KIND_SGD, -1.0);
  CHECK_THAT(validate_profile(db).message(), Catch::Contains("alpha_us = -1"));
  *db.mutable_optimizer_steps(0) = step_fit(graphpipe::v1::OPTIMIZER_KIND_SGD, 1.0);
  db.mutable_optimizer_steps(0)->set_beta_bytes_per_s(1e20);
  CHECK_THAT(validate_profile(db).message(), Catch::Contains("beta_bytes_per_s = 1e+20"));
  *db.mutable_optimizer_steps(0) = step_fit(graphpipe::v1::OPTIMIZER_KIND_SGD, 1.0);
  db.mutable_optimizer_steps(0)->mutable_points(0)->set_time_us(-3);
  CHECK_THAT(validate_profile(db).message(), Catch::Contains("points[0]: time_us = -3"));
  *db.mutable_optimizer_steps(0) = step_fit(graphpipe::v1::OPTIMIZER_KIND_SGD, 1.0);
  db.mutable_optimizer_steps(0)->clear_provenance();
  CHECK_THAT(validate_profile(db).message(), Catch::Contains("provenance"));
}

TEST_CASE("validation names the record and the field") {
  auto db = db_of({op("relu||[8] float32", 1, 1.0)});
  db.mutable_ops(0)->set_micro_batch(0);
  CHECK_THAT(validate_profile(db).message(), Catch::Contains("ops[0]"));
  CHECK_THAT(validate_profile(db).message(), Catch::Contains("micro_batch = 0"));

  db = db_of({op("relu||[8] float32", 1, -2.0)});
  CHECK_THAT(validate_profile(db).message(), Catch::Contains("forward_time_us = -2"));

  db = db_of({op("relu||[8] float32", 1, 1.0)});
  db.mutable_ops(0)->clear_provenance();
  CHECK_THAT(validate_profile(db).message(), Catch::Contains("provenance"));

  db = db_of({}, {fit(graphpipe::v1::COLLECTIVE_KIND_P2P, 2, 20)});
  db.mutable_comm(0)->set_beta_bytes_per_s(0);
  CHECK_THAT(validate_profile(db).message(), Catch::Contains("comm[0]: beta_bytes_per_s = 0"));

  db = db_of({}, {fit(graphpipe::v1::COLLECTIVE_KIND_P2P, 1, 20)});
  CHECK_THAT(validate_profile(db).message(), Catch::Contains("ranks = 1"));

  db = db_of({});
  db.set_format_version(7);
  CHECK_THAT(validate_profile(db).message(), Catch::Contains("format_version = 7"));
}

TEST_CASE("measurements no device makes are refused naming the record, the field and the bound") {
  auto db = db_of({op("relu||[8] float32", 1, 1e308)});
  CHECK_THAT(validate_profile(db).message(),
             Catch::Contains("ops[0] ('relu||[8] float32'): forward_time_us = 1e+308, must be at "
                             "most 3.6e+09 (one hour)"));
  db = db_of({op("relu||[8] float32", 1, 1.0)});
  db.mutable_ops(0)->set_backward_spread_us(std::numeric_limits<double>::infinity());
  CHECK_THAT(validate_profile(db).message(), Catch::Contains("backward_spread_us = inf"));
  db.mutable_ops(0)->set_backward_spread_us(0);
  db.mutable_ops(0)->set_workspace_bytes(int64_t{1} << 60);
  CHECK_THAT(validate_profile(db).message(),
             Catch::Contains("workspace_bytes = 1152921504606846976, must be in [0, 2^50]"));

  db = db_of({}, {fit(graphpipe::v1::COLLECTIVE_KIND_P2P, 2, 1e7)});
  CHECK_THAT(validate_profile(db).message(),
             Catch::Contains("comm[0]: alpha_us = 1e+07, must be at most 1e+06 (one second)"));
  db = db_of({}, {fit(graphpipe::v1::COLLECTIVE_KIND_P2P, 2, 20)});
  db.mutable_comm(0)->set_beta_bytes_per_s(1e300);
  CHECK_THAT(validate_profile(db).message(),
             Catch::Contains("comm[0]: beta_bytes_per_s = 1e+300, must be in [1e3, 1e15]"));
  db.mutable_comm(0)->set_beta_bytes_per_s(1e9);
  auto* point = db.mutable_comm(0)->add_points();
  point->set_bytes(1024);
  point->set_time_us(std::numeric_limits<double>::quiet_NaN());
  CHECK_THAT(validate_profile(db).message(), Catch::Contains("comm[0].points[0]: time_us = nan"));
  point->set_time_us(3.0);
  CHECK(validate_profile(db).ok());
}

TEST_CASE("reading a missing or invalid database fails naming the path") {
  auto missing = read_profile(temp_path("does-not-exist.pb"));
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(), Catch::Contains("does-not-exist"));

  auto db = db_of({op("relu||[8] float32", 1, 1.0)});
  db.mutable_ops(0)->set_device_kind("");
  const std::string path = temp_path("invalid.pbtxt");
  REQUIRE(model::write_message(path, db).ok());
  auto bad = read_profile(path);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("invalid.pbtxt"));
  CHECK_THAT(bad.status().message(), Catch::Contains("device_kind"));
  CHECK_FALSE(write_profile(path, db).ok());  // never writes an invalid database
  std::filesystem::remove(path);
}

TEST_CASE("the profiled cost model answers from a merged database at and between sizes") {
  const auto g = testing::chain_graph(1);
  const std::string sig = cost::op_signature(g.op(g.index_of("fc0")));
  const std::vector<ProfileDB> inputs{db_of({op(sig, 1, 10.0)}), db_of({op(sig, 4, 40.0)})};
  const auto merged = merge_profiles(inputs);
  auto fallback = std::make_shared<const cost::AnalyticCostModel>(
      [] {
        graphpipe::v1::DeviceKind d;
        d.set_name("cpu-process");
        d.set_peak_fp32_flops(1e11);
        d.set_memory_bandwidth_bytes_per_s(1e10);
        return d;
      }(),
      graphpipe::v1::PRECISION_FP32);
  auto model = cost::ProfiledCostModel::create(merged, "cpu-process", fallback);
  REQUIRE(model.ok());
  const auto& fc0 = g.op(g.index_of("fc0"));
  CHECK((*model)->op_time(fc0, 1).forward_us == Approx(10));
  CHECK((*model)->op_time(fc0, 4).forward_us == Approx(40));
  CHECK((*model)->op_time(fc0, 2).forward_us == Approx(20));  // log-log between: slope 1
  CHECK((*model)->op_time(fc0, 2).backward_us == Approx(40));
}

}  // namespace
}  // namespace gp::profile
