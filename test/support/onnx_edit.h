// ONNX test files changed in memory, then imported as a user would import them: for tests that
// show what an importer check refuses by editing one thing of a real export.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>
#include <string>

#include "gp/model/onnx_file.h"
#include "gp/model/onnx_import.h"
#include "onnx/onnx_pb.h"

namespace gp::testing {

// The ONNX file `path` changed by `edit`, written with its external data to a scratch directory
// (named after `tag`), imported with `options`, and the directory removed.
inline Result<graphpipe::v1::ModelGraph> import_edited_onnx(
    const std::string& path, const std::function<void(onnx::ModelProto*)>& edit,
    const std::string& tag, const model::OnnxImportOptions& options = {}) {
  namespace fs = std::filesystem;
  onnx::ModelProto m;
  REQUIRE(model::read_onnx_file(path, &m, nullptr).ok());
  edit(&m);
  const fs::path dir = fs::temp_directory_path() / ("gp_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string edited = (dir / "m.onnx").string();
  REQUIRE(model::write_onnx_file(edited, m, /*external_data=*/true).ok());
  auto imported = model::import_onnx(edited, options);
  fs::remove_all(dir);
  return imported;
}

}  // namespace gp::testing
