#include "gp/profile/optimizer_profiler.h"

#include <catch2/catch.hpp>

#include "gp/cost/memory_model.h"
#include "gp/profile_db/profile_db.h"

namespace gp::profile {
namespace {

namespace pb = graphpipe::v1;

OptimizerProfileOptions quick_options() {
  OptimizerProfileOptions o;
  o.sizes = {1 << 10, 1 << 14, 1 << 18};
  o.measure.warmup = 1;
  o.measure.min_repetitions = 3;
  o.measure.min_total_us = 0;
  o.device_kind = "cpu-process";
  o.provenance = make_provenance("cpu", "test cpu", "", "openblas");
  return o;
}

TEST_CASE("the optimizer profile fits every kind's update of the executor's CPU device") {
  auto fits = profile_optimizers(exec::cpu_device(), quick_options());
  INFO(fits.status().to_string());
  REQUIRE(fits.ok());
  REQUIRE(fits->size() == 3);
  const pb::OptimizerKind kinds[] = {pb::OPTIMIZER_KIND_SGD, pb::OPTIMIZER_KIND_MOMENTUM,
                                     pb::OPTIMIZER_KIND_ADAM};
  // Bytes per element: 4 x (3 + 2 x state floats), as the cost model streams them.
  const int64_t bytes_per_element[] = {12, 20, 28};
  for (size_t k = 0; k < 3; ++k) {
    const auto& f = (*fits)[k];
    INFO(pb::OptimizerKind_Name(f.optimizer()));
    CHECK(f.optimizer() == kinds[k]);
    CHECK(f.device_kind() == "cpu-process");
    REQUIRE(f.points_size() == 3);
    CHECK(f.points(0).bytes() == (1 << 10) * bytes_per_element[k]);
    CHECK(f.points(2).bytes() == (1 << 18) * bytes_per_element[k]);
    // Real times: positive, and 256x the elements take longer.
    CHECK(f.points(0).time_us() > 0);
    CHECK(f.points(2).time_us() > f.points(0).time_us());
    CHECK(f.alpha_us() >= 0);
    // Any CPU streams between 100 MB/s and 10 TB/s.
    CHECK(f.beta_bytes_per_s() > 1e8);
    CHECK(f.beta_bytes_per_s() < 1e13);
  }
  pb::ProfileDB db;
  db.set_format_version(kProfileFormatVersion);
  for (const auto& f : *fits) *db.add_optimizer_steps() = f;
  CHECK(validate_profile(db).ok());
}

TEST_CASE("the optimizer profile refuses sizes and kinds it cannot fit, naming them") {
  auto o = quick_options();
  o.sizes = {4096, 4096};
  CHECK_THAT(profile_optimizers(exec::cpu_device(), o).status().message(),
             Catch::Contains("1 distinct size(s), a fit needs at least 2"));
  o.sizes = {0, 4096};
  CHECK_THAT(profile_optimizers(exec::cpu_device(), o).status().message(),
             Catch::Contains("0 elements"));
  o = quick_options();
  o.kinds = {pb::OPTIMIZER_KIND_UNSPECIFIED};
  CHECK_THAT(profile_optimizers(exec::cpu_device(), o).status().message(),
             Catch::Contains("optimizer kinds: 0"));
}

}  // namespace
}  // namespace gp::profile
