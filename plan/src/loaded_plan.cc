#include "gp/plan/loaded_plan.h"

#include <utility>

#include "gp/model/model_io.h"

namespace gp::plan {

Result<std::shared_ptr<const LoadedPlan>> LoadedPlan::read(const std::string& path) {
  graphpipe::v1::Plan plan;
  GP_RETURN_IF_ERROR(model::read_message(path, &plan).with_context("--plan"));
  GP_RETURN_IF_ERROR(model::resolve_weights(*plan.mutable_model()).with_context("--plan " + path));
  auto loaded = from(std::move(plan));
  if (!loaded.ok()) return loaded.status().with_context("--plan " + path);
  return loaded;
}

Result<std::shared_ptr<const LoadedPlan>> LoadedPlan::from(graphpipe::v1::Plan plan) {
  std::shared_ptr<LoadedPlan> loaded(new LoadedPlan());
  loaded->plan_ = std::move(plan);
  auto built = model::Graph::build(loaded->plan_.model());
  if (!built.ok()) return built.status().with_context("plan.model");
  loaded->graph_ = std::make_unique<model::Graph>(std::move(built).value());
  GP_ASSIGN_OR_RETURN(loaded->index_, validate_plan(loaded->plan_, *loaded->graph_));
  return std::shared_ptr<const LoadedPlan>(std::move(loaded));
}

}  // namespace gp::plan
