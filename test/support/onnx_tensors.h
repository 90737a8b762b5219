// Reading ONNX TensorProto files (ONNX's test-data layout) in tests.
#pragma once

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "gp/graph/model_io.h"
#include "onnx/onnx.pb.h"

namespace gp::testing {

inline onnx::TensorProto load_tensor(const std::string& path) {
  auto bytes = graph::read_file(path);
  INFO(path);
  REQUIRE(bytes.ok());
  onnx::TensorProto t;
  REQUIRE(t.ParseFromString(*bytes));
  return t;
}

// The float32 values (typed field, then raw little-endian bytes).
inline std::vector<float> floats(const onnx::TensorProto& t) {
  std::vector<float> v(t.float_data().begin(), t.float_data().end());
  const std::string& raw = t.raw_data();
  const size_t offset = v.size();
  v.resize(offset + raw.size() / sizeof(float));
  std::memcpy(v.data() + offset, raw.data(), raw.size() / sizeof(float) * sizeof(float));
  return v;
}

}  // namespace gp::testing
