// Kernel tables: each backend's kernel factories as an array indexed by model::OpType (ggml's op
// table), so choosing a kernel is one load and "has this backend a kernel for it" one comparison.
// Shared by the backends' kernel registrations (cpu/cpu_kernels.cc, cuda/cuda_device.cc); private
// to the executor.
#pragma once

#include <array>
#include <cstddef>

#include "gp/model/graph.h"

namespace gp::exec {

// One backend's factories; nullptr where the backend has no kernel for the op type.
template <class Factory>
using KernelTable = std::array<Factory, model::kNumOpTypes>;

template <class Factory>
struct KernelEntry {
  model::OpType type;
  Factory make;
};

// The table with `entries` at their types' indices, every other type nullptr.
template <class Factory, size_t N>
constexpr KernelTable<Factory> kernel_table(const KernelEntry<Factory> (&entries)[N]) {
  KernelTable<Factory> table{};
  for (const auto& e : entries) table[model::op_type_index(e.type)] = e.make;
  return table;
}

// The catalogue entry of `op`: the one Graph::build resolved, else (an op that never went through
// it) the one its proto's type names; nullptr when that names none.
inline const model::OpTypeInfo* catalogue_entry(const model::OpNode& op) {
  return op.info != nullptr ? op.info : model::find_op_type(op.proto->type());
}

}  // namespace gp::exec
