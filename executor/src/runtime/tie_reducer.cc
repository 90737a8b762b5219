#include "tie_reducer.h"

#include <string>
#include <utility>

namespace gp::exec {

Result<std::unique_ptr<TieReducer>> TieReducer::create(StageRunner& runner,
                                                       std::vector<TieProgram> ties,
                                                       Communicator* comm) {
  const Device& device = runner.device();
  std::unique_ptr<TieReducer> r(new TieReducer(device, comm));
  for (TieProgram& p : ties) {
    Tie t;
    for (const auto& m : p.members) {
      const std::span<float> g = runner.param_grad_memory(m.op, m.param);
      if (g.size() != static_cast<size_t>(p.elements)) {
        return internal_error("tied parameter " + std::to_string(m.op) + "." +
                              std::to_string(m.param) + ": " + std::to_string(g.size()) +
                              " gradient elements in this stage, the tie has " +
                              std::to_string(p.elements));
      }
      t.grads.push_back(g);
    }
    if (p.group.size() > 1 && comm == nullptr) {
      return internal_error("a tie over " + std::to_string(p.group.size()) +
                            " ranks needs a communicator");
    }
    const size_t bytes = static_cast<size_t>(p.elements) * sizeof(float);
    GP_ASSIGN_OR_RETURN(t.sum, DeviceBuffer::create(device, bytes));
    if (!device.host_memory()) t.host.assign(static_cast<size_t>(p.elements), 0.0f);
    t.program = std::move(p);
    r->ties_.push_back(std::move(t));
  }
  return r;
}

std::vector<TieProgram> TieReducer::local_ties(const model::Graph& graph) {
  std::vector<TieProgram> ties;
  for (const auto& members : graph.ties()) {
    TieProgram p;
    p.members = members;
    p.duplicates = static_cast<int>(members.size()) - 1;
    const auto& spec = graph.op(members[0].op).proto->params(members[0].param);
    p.elements = 1;
    for (int64_t d : spec.shape()) p.elements *= d;
    ties.push_back(std::move(p));
  }
  return ties;
}

Status TieReducer::reduce() {
  for (Tie& t : ties_) {
    const size_t bytes = static_cast<size_t>(t.program.elements) * sizeof(float);
    GP_RETURN_IF_ERROR(device_.copy_on_device(t.sum.data(), t.grads[0].data(), bytes));
    for (size_t k = 1; k < t.grads.size(); ++k) {
      GP_RETURN_IF_ERROR(device_.accumulate(t.sum.f(), t.grads[k].data(), t.program.elements));
    }
    const std::span<float> sum(t.sum.f(), static_cast<size_t>(t.program.elements));
    if (t.program.group.size() > 1) {
      if (comm_->device_memory() || device_.host_memory()) {
        // The communicator reads the buffer where it is: device memory, or the host's.
        if (!comm_->device_memory()) GP_RETURN_IF_ERROR(device_.synchronize());
        GP_RETURN_IF_ERROR(comm_->allreduce_sum(t.program.group, sum));
      } else {
        GP_RETURN_IF_ERROR(device_.copy_to_host(t.host.data(), t.sum.data(), bytes));
        GP_RETURN_IF_ERROR(comm_->allreduce_sum(t.program.group, t.host));
        GP_RETURN_IF_ERROR(device_.copy_from_host(t.sum.data(), t.host.data(), bytes));
      }
    }
    if (!t.program.leader) GP_RETURN_IF_ERROR(device_.fill_zero(t.sum.data(), bytes));
    for (const std::span<float> g : t.grads) {
      GP_RETURN_IF_ERROR(device_.copy_on_device(g.data(), t.sum.data(), bytes));
    }
  }
  return ok_status();
}

Result<double> TieReducer::duplicate_sum_of_squares() {
  double sum = 0;
  for (Tie& t : ties_) {
    if (t.program.duplicates == 0) continue;
    const size_t n = static_cast<size_t>(t.program.elements);
    const float* v = t.sum.f();
    if (!device_.host_memory()) {
      GP_RETURN_IF_ERROR(device_.copy_to_host(t.host.data(), t.sum.data(), n * sizeof(float)));
      v = t.host.data();
    }
    double squares = 0;
    for (size_t i = 0; i < n; ++i) squares += static_cast<double>(v[i]) * v[i];
    sum += t.program.duplicates * squares;
  }
  return sum;
}

}  // namespace gp::exec
