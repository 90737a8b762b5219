// Subcommands of graphpipe-plan. Each returns a Status; main turns it into an exit code.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "gp/common/status.h"

namespace gp::plan_cli {

struct ModelInfoOptions {
  std::string model;
  bool json = false;
};
struct ZooExportOptions {
  std::string name;
  std::string out;
};

Status run_zoo_list();
Status run_zoo_export(const ZooExportOptions& opts);
Status run_model_info(const ModelInfoOptions& opts);
Status run_ops_list();

}  // namespace gp::plan_cli
