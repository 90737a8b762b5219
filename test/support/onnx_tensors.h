// Reading ONNX TensorProto files (ONNX's test-data layout) in tests.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gp/model/model_io.h"
#include "onnx/onnx_pb.h"

namespace gp::testing {

inline onnx::TensorProto load_tensor(const std::string& path) {
  auto bytes = model::read_file(path);
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

// max |got - want| <= tol * max |want|, and max |want| > min_abs (the reference is not trivially
// zero).
inline void check_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                        double min_abs) {
  REQUIRE(got.size() == want.size());
  double max_err = 0, max_abs = 0;
  for (size_t k = 0; k < got.size(); ++k) {
    max_err = std::max(max_err, static_cast<double>(std::fabs(got[k] - want[k])));
    max_abs = std::max(max_abs, static_cast<double>(std::fabs(want[k])));
  }
  INFO("max |error| " << max_err << " of max |value| " << max_abs);
  CHECK(max_abs > min_abs);
  CHECK(max_err <= tol * max_abs);
}

}  // namespace gp::testing
