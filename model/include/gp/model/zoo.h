// The model zoo: the GraphPipe paper's evaluation models and small variants for CPU tests.
//
// A zoo spec is NAME or NAME?key=value&key=value, optionally prefixed "zoo:", e.g.
// "zoo:mmt?branches=2&layers=4". Unknown names, unknown keys and bad values are errors that
// list what is accepted.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gp/common/status.h"
#include "graphpipe/v1/model.pb.h"

namespace gp::model {

struct ZooParam {
  std::string_view name;
  std::string_view default_value;
  std::string_view help;
};

using ZooParams = std::map<std::string, std::string, std::less<>>;
using ZooBuildFn = Result<graphpipe::v1::ModelGraph> (*)(const ZooParams& params);

struct ZooEntry {
  std::string_view name;
  std::string_view summary;
  std::vector<ZooParam> params;
  ZooBuildFn build;
};

std::span<const ZooEntry> zoo_entries();
const ZooEntry* find_zoo_entry(std::string_view name);

// Builds the model named by `spec` ("mmt?layers=4" or "zoo:mmt?layers=4").
Result<graphpipe::v1::ModelGraph> build_zoo_model(std::string_view spec);

// A model from "zoo:SPEC" or a file path (.pbtxt, .json, .pb), not yet validated.
Result<graphpipe::v1::ModelGraph> load_model(std::string_view spec_or_path);

}  // namespace gp::model
