// Helpers shared by every backend's kernel factories (CPU reference, CUDA): errors that name the
// op, attribute readers, per-sample shape arithmetic. Private to the executor's kernel libraries.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gp/common/status.h"
#include "gp/graph/graph.h"

namespace gp::exec {

// "ops[3] 'enc.ffn1' (linear): " + what, as an InvalidArgument.
inline Status op_error(const graph::OpNode& op, const std::string& what) {
  return invalid_argument("ops[" + std::to_string(op.index) + "] '" + op.proto->id() + "' (" +
                          op.proto->type() + "): " + what);
}

// Attribute readers whose errors name the op.
inline Result<int64_t> op_attr_int(const graph::OpNode& op, std::string_view name) {
  auto v = graph::attr_int(*op.proto, name);
  if (!v.ok()) return op_error(op, v.status().message());
  return *v;
}
inline Result<int64_t> op_attr_int_or(const graph::OpNode& op, std::string_view name,
                                      int64_t fallback) {
  auto v = graph::attr_int_or(*op.proto, name, fallback);
  if (!v.ok()) return op_error(op, v.status().message());
  return *v;
}
inline Result<double> op_attr_float_or(const graph::OpNode& op, std::string_view name,
                                       double fallback) {
  auto v = graph::attr_float_or(*op.proto, name, fallback);
  if (!v.ok()) return op_error(op, v.status().message());
  return *v;
}
inline Result<std::string> op_attr_string_or(const graph::OpNode& op, std::string_view name,
                                             std::string_view fallback) {
  auto v = graph::attr_string_or(*op.proto, name, fallback);
  if (!v.ok()) return op_error(op, v.status().message());
  return *v;
}

// Per-sample shape helpers.
inline int64_t last_dim(const graph::TensorSpec& spec) { return spec.shape(spec.shape_size() - 1); }
// Product of dims [begin, end).
inline int64_t dims_product(const graph::TensorSpec& spec, int begin, int end) {
  int64_t n = 1;
  for (int d = begin; d < end; ++d) n *= spec.shape(d);
  return n;
}
inline bool is_int32(const graph::TensorSpec& spec) {
  return spec.dtype() == graphpipe::v1::DATA_TYPE_INT32;
}

// Element k of an id/label tensor, which the catalogue allows as int64 (the executor's
// convention) or int32.
inline int64_t load_index(const void* data, int64_t k, bool int32) {
  return int32 ? static_cast<const int32_t*>(data)[k] : static_cast<const int64_t*>(data)[k];
}

}  // namespace gp::exec
