// Sums the gradients of tied parameters' copies (model.param_ties): within the stage, then over
// every rank holding a copy, then writes the sum back to each copy, so that the copies take the
// same optimizer step and stay equal. Buffers are sized at creation; reduce() allocates nothing.
// Private to gp_runtime (the reference trainer and the rank runner).
#pragma once

#include <memory>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/communicator.h"
#include "gp/exec/device.h"
#include "gp/exec/rank_program.h"
#include "gp/exec/stage_runner.h"

namespace gp::exec {

class TieReducer {
 public:
  // `comm` may be null when every tie's group is this rank alone (the reference trainer).
  static Result<std::unique_ptr<TieReducer>> create(StageRunner& runner,
                                                    std::vector<TieProgram> ties,
                                                    Communicator* comm);
  // The ties of `graph` when one stage holds every op (the reference trainer).
  static std::vector<TieProgram> local_ties(const model::Graph& graph);
  Status reduce();
  // After reduce(): the squares of the copies a gradient norm must not count twice (every copy
  // but the tie's first holds the same sum), in double.
  Result<double> duplicate_sum_of_squares();
  bool empty() const { return ties_.empty(); }

 private:
  struct Tie {
    TieProgram program;
    std::vector<std::span<float>> grads;  // the copies' gradients, device memory
    DeviceBuffer sum;                     // device memory
    std::vector<float> host;              // staging: a host all-reduce or norm of device data
  };
  TieReducer(const Device& device, Communicator* comm) : device_(device), comm_(comm) {}

  const Device& device_;
  Communicator* comm_;
  std::vector<Tie> ties_;
};

}  // namespace gp::exec
