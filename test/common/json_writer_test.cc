#include "gp/common/json_writer.h"

#include <catch2/catch.hpp>

TEST_CASE("JsonWriter writes nested objects and arrays with commas in the right places") {
  gp::JsonWriter w;
  w.begin_object().field("a", 1).field("b", "x\"y");
  w.key("list").begin_array().value(1.5).value(true).null().end_array();
  w.key("empty").begin_object().end_object();
  w.end_object();
  CHECK(w.str() == R"({"a":1,"b":"x\"y","list":[1.5,true,null],"empty":{}})");
}

TEST_CASE("JsonWriter escapes control characters and prints non-finite doubles as null") {
  gp::JsonWriter w;
  w.begin_array().value("a\nb\x01").value(1.0 / 0.0).end_array();
  CHECK(w.str() == "[\"a\\nb\\u0001\",null]");
}
