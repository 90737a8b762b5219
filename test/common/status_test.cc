#include "gp/common/status.h"

#include <catch2/catch.hpp>

namespace {

gp::Result<int> parse_positive(int v) {
  if (v <= 0) return gp::invalid_argument("value = " + std::to_string(v) + ", must be > 0");
  return v;
}

gp::Status double_it(int v, int* out) {
  GP_ASSIGN_OR_RETURN(int x, parse_positive(v));
  *out = 2 * x;
  return gp::ok_status();
}

}  // namespace

TEST_CASE("Result holds a value or the error that prevented it") {
  auto good = parse_positive(3);
  REQUIRE(good.ok());
  CHECK(*good == 3);
  auto bad = parse_positive(-1);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == gp::StatusCode::kInvalidArgument);
  CHECK(bad.status().to_string() == "INVALID_ARGUMENT: value = -1, must be > 0");
}

TEST_CASE("a Result built from an OK status becomes an internal error") {
  gp::Result<int> r{gp::ok_status()};
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == gp::StatusCode::kInternal);
}

TEST_CASE("GP_ASSIGN_OR_RETURN propagates errors and assigns values") {
  int out = 0;
  CHECK(double_it(4, &out).ok());
  CHECK(out == 8);
  auto st = double_it(0, &out);
  CHECK(st.code() == gp::StatusCode::kInvalidArgument);
  CHECK(out == 8);
}

TEST_CASE("exit codes: 0 ok, 2 bad input, 1 internal") {
  CHECK(gp::exit_code_for(gp::ok_status()) == 0);
  CHECK(gp::exit_code_for(gp::invalid_argument("x")) == 2);
  CHECK(gp::exit_code_for(gp::not_found("x")) == 2);
  CHECK(gp::exit_code_for(gp::internal_error("x")) == 1);
}

TEST_CASE("with_context prefixes the message and keeps the code") {
  auto st = gp::not_found("no file").with_context("--model");
  CHECK(st.code() == gp::StatusCode::kNotFound);
  CHECK(st.message() == "--model: no file");
  CHECK(gp::ok_status().with_context("x").ok());
}
