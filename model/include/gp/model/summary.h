// Whole-model statistics for `graphpipe-plan model-info`.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "gp/model/graph.h"

namespace gp::model {

struct ModelSummary {
  std::string name;
  int num_ops = 0;
  int num_inputs = 0;
  int64_t num_params = 0;
  int64_t param_bytes = 0;
  double forward_flops_per_sample = 0;
  double backward_flops_per_sample = 0;
  double activation_bytes_per_sample = 0;  // kept for backward, whole model
  int num_branches = 0;
  std::map<std::string, int> ops_by_type;
};

ModelSummary summarize(const Graph& graph);
std::string summary_json(const ModelSummary& s);
std::string summary_text(const ModelSummary& s);

}  // namespace gp::model
