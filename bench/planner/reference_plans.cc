#include "reference_plans.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <sstream>

#include "gp/cost/cluster.h"
#include "gp/model/model_io.h"
#include "gp/model/zoo.h"
#include "gp/planner/verify.h"

namespace gp::bench {
namespace {

const char* precision_name(graphpipe::v1::Precision p) {
  return p == graphpipe::v1::PRECISION_BF16_FP32_MASTER ? "bf16" : "fp32";
}

Result<int64_t> parse_positive(const std::string& field, const std::string& text) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v <= 0) {
    return invalid_argument(field + " = '" + text + "', expected a positive integer");
  }
  return v;
}

// One non-comment line of the index, split into its seven columns.
Result<HandPlan> parse_index_line(const std::string& dir, const std::vector<std::string>& col) {
  if (col.size() != 7) {
    return invalid_argument(
        "expected 7 columns (file model cluster devices batch precision lowering), got " +
        std::to_string(col.size()));
  }
  HandPlan hp;
  hp.name = col[0];
  hp.path = (std::filesystem::path(dir) / col[0]).string();
  hp.config.model = col[1];
  hp.config.cluster = col[2];
  GP_ASSIGN_OR_RETURN(const int64_t devices, parse_positive("devices", col[3]));
  if (devices > 65536) return invalid_argument("devices = " + col[3] + ", at most 65536");
  hp.config.devices = static_cast<int>(devices);
  GP_ASSIGN_OR_RETURN(hp.config.mini_batch, parse_positive("batch", col[4]));
  if (col[5] == "fp32") {
    hp.config.precision = graphpipe::v1::PRECISION_FP32;
  } else if (col[5] == "bf16") {
    hp.config.precision = graphpipe::v1::PRECISION_BF16_FP32_MASTER;
  } else {
    return invalid_argument("precision = '" + col[5] + "', expected fp32 or bf16");
  }
  auto lowering = planner::parse_lowering(col[6]);
  if (!lowering.ok()) {
    return invalid_argument("lowering = '" + col[6] + "', expected chain, dag or best");
  }
  hp.lowering = *lowering;
  hp.lowering_name = col[6];
  return hp;
}

}  // namespace

std::string config_label(const BenchConfig& c) {
  return c.model + " @" + std::to_string(c.devices) + " " + c.cluster + " b" +
         std::to_string(c.mini_batch) + " " + precision_name(c.precision);
}

Result<std::vector<HandPlan>> read_hand_plan_index(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kIndexName).string();
  auto text = model::read_file(path);  // a FIFO or a device is refused, not waited on
  if (!text.ok()) return not_found("cannot read '" + path + "': " + text.status().message());
  std::istringstream in(*text);
  std::vector<HandPlan> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::vector<std::string> col;
    for (std::string w; words >> w;) col.push_back(w);
    if (col.empty()) continue;
    auto hp = parse_index_line(dir, col);
    if (!hp.ok())
      return hp.status().with_context(std::string(kIndexName) + ":" + std::to_string(number));
    hp->line = number;
    out.push_back(std::move(hp).value());
  }
  return out;
}

Result<std::vector<std::string>> assignment_files(const std::string& dir) {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return not_found("cannot list '" + dir + "': " + ec.message());
  std::vector<std::string> out;
  for (const auto& entry : it) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".json" || ext == ".pbtxt" || ext == ".pb")) {
      out.push_back(entry.path().filename().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

graphpipe::v1::TrainingConfig training_config(graphpipe::v1::Precision precision) {
  graphpipe::v1::TrainingConfig t;
  t.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  t.set_learning_rate(1e-3);
  t.set_adam_beta1(0.9);
  t.set_adam_beta2(0.999);
  t.set_adam_epsilon(1e-8);
  t.set_precision(precision);
  t.set_seed(1);
  return t;
}

Result<PlanningInputs> planning_inputs(const std::string& model_spec,
                                       const graphpipe::v1::Cluster& full_cluster, int devices,
                                       graphpipe::v1::Precision precision) {
  PlanningInputs in;
  GP_ASSIGN_OR_RETURN(auto model, model::load_model(model_spec));
  auto built = model::Graph::build(model);
  if (!built.ok()) return built.status().with_context("model '" + model_spec + "'");
  in.graph = std::make_unique<model::Graph>(std::move(built).value());
  GP_ASSIGN_OR_RETURN(in.cluster, cost::select_devices(full_cluster, devices));
  in.training = training_config(precision);
  in.compute = std::make_unique<cost::AnalyticCostModel>(in.cluster.device(), precision);
  return in;
}

Result<PlanningInputs> planning_inputs(const BenchConfig& config) {
  GP_ASSIGN_OR_RETURN(const auto cluster, cost::load_cluster(config.cluster));
  return planning_inputs(config.model, cluster, config.devices, config.precision);
}

Result<ReferenceResult> lower_assignment_file(const graphpipe::v1::StageAssignmentFile& file,
                                              const PlanningInputs& in, int64_t mini_batch,
                                              planner::Lowering lowering) {
  GP_ASSIGN_OR_RETURN(auto stages, planner::resolve_assignment(
                                       file, *in.graph, cost::num_devices(in.cluster), mini_batch));
  planner::LowerRequest req;
  req.graph = in.graph.get();
  req.cluster = in.cluster;
  req.mini_batch = mini_batch;
  req.training = in.training;
  req.compute = in.compute.get();
  req.stages = std::move(stages);
  req.lowering = lowering;
  GP_ASSIGN_OR_RETURN(auto lowered, planner::lower_assignment(req));

  // As `lower`: the faster feasible lowering is the plan.
  const planner::LoweredPlan* best = nullptr;
  ReferenceResult out;
  for (const auto& l : lowered) {
    if (!l.result.feasible) {
      out.reason +=
          (out.reason.empty() ? "" : "; ") + l.lowering + ": " + l.result.infeasible_reason;
    } else if (best == nullptr || l.result.plan.predicted().throughput_samples_per_s() >
                                      best->result.plan.predicted().throughput_samples_per_s()) {
      best = &l;
    }
  }
  if (best == nullptr) return out;
  GP_ASSIGN_OR_RETURN(auto report, planner::verify_plan(best->result.plan, *in.compute));
  if (!report.ok()) {
    return internal_error("the lowered plan failed verification: " + report.problems[0]);
  }
  out.feasible = true;
  out.reason.clear();
  out.lowering = best->lowering;
  out.throughput = best->result.plan.predicted().throughput_samples_per_s();
  out.plan = best->result.plan;
  return out;
}

Result<ReferenceResult> lower_hand_plan(const HandPlan& hp, const PlanningInputs& in) {
  graphpipe::v1::StageAssignmentFile file;
  GP_RETURN_IF_ERROR(model::read_message(hp.path, &file));
  auto lowered = lower_assignment_file(file, in, hp.config.mini_batch, hp.lowering);
  if (!lowered.ok()) return lowered.status().with_context(hp.name);
  return lowered;
}

graphpipe::v1::StageAssignmentFile partition_of(const graphpipe::v1::Plan& plan) {
  graphpipe::v1::StageAssignmentFile file;
  for (const auto& st : plan.stages()) {
    auto* out = file.add_stages();
    *out->mutable_ops() = st.op_ids();
    out->set_replicas(st.device_ranks_size());
  }
  return file;
}

}  // namespace gp::bench
