#include "gp/model/summary.h"

#include <cstdio>

#include "gp/common/json_writer.h"

namespace gp::model {
namespace {

std::string human(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (v >= 1000 && i < 5) v /= 1000, ++i;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3g %s%s", v, prefixes[i], unit);
  return buf;
}

int64_t param_bytes(const graphpipe::v1::ParamSpec& p) {
  int64_t n = 1;
  for (int64_t d : p.shape()) n *= d;
  return n * dtype_size_bytes(p.dtype());
}

}  // namespace

ModelSummary summarize(const Graph& graph) {
  ModelSummary s;
  s.name = graph.model().name();
  s.num_ops = graph.num_ops();
  for (const auto& node : graph.ops()) {
    if (node.info->is_input) ++s.num_inputs;
    for (const auto& p : node.proto->params()) s.param_bytes += param_bytes(p);
    s.forward_flops_per_sample += node.cost.forward_flops;
    s.backward_flops_per_sample += node.cost.backward_flops;
    s.activation_bytes_per_sample += node.cost.activation_bytes;
    ++s.ops_by_type[std::string(node.type())];
  }
  // A tied weight (a GPT's embedding and head) is one tensor of the model: counted once.
  s.num_params = graph.total_params();
  for (const auto& tie : graph.ties()) {
    const auto& p = graph.op(tie[0].op).proto->params(tie[0].param);
    s.param_bytes -= static_cast<int64_t>(tie.size() - 1) * param_bytes(p);
  }
  s.num_branches = graph.max_parallel_branches();
  return s;
}

std::string summary_json(const ModelSummary& s) {
  JsonWriter w;
  w.begin_object()
      .field("name", s.name)
      .field("num_ops", s.num_ops)
      .field("num_inputs", s.num_inputs)
      .field("num_params", s.num_params)
      .field("param_bytes", s.param_bytes)
      .field("forward_flops_per_sample", s.forward_flops_per_sample)
      .field("backward_flops_per_sample", s.backward_flops_per_sample)
      .field("activation_bytes_per_sample", s.activation_bytes_per_sample)
      .field("num_branches", s.num_branches);
  w.key("ops_by_type").begin_object();
  for (const auto& [type, count] : s.ops_by_type) w.field(type, count);
  w.end_object().end_object();
  return w.str();
}

std::string summary_text(const ModelSummary& s) {
  std::string out;
  auto line = [&out](const char* label, const std::string& value) {
    std::string padded(label);
    padded.resize(34, ' ');
    out += padded + " " + value + "\n";
  };
  line("model", s.name);
  line("operators", std::to_string(s.num_ops) + " (" + std::to_string(s.num_inputs) + " inputs)");
  line("parameters", std::to_string(s.num_params) + " (" +
                         human(static_cast<double>(s.num_params), "") + ", " +
                         human(static_cast<double>(s.param_bytes), "B") + ")");
  line("forward FLOPs per sample", human(s.forward_flops_per_sample, "FLOP"));
  line("backward FLOPs per sample", human(s.backward_flops_per_sample, "FLOP"));
  line("activation bytes per sample", human(s.activation_bytes_per_sample, "B"));
  line("parallel branches", std::to_string(s.num_branches));
  std::string types;
  for (const auto& [type, count] : s.ops_by_type) {
    types += (types.empty() ? "" : ", ") + type + " x" + std::to_string(count);
  }
  line("operator types", types);
  return out;
}

}  // namespace gp::model
