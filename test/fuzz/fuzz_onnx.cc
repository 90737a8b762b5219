// An ONNX file through the importer (which reads a path: the input goes to a file of this
// process in /dev/shm first), then the imported model's graph.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "gp/model/graph.h"
#include "gp/model/onnx_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/dev/shm/gp-fuzz-onnx-" + std::to_string(::getpid()) + ".onnx";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  for (bool opaque : {false, true}) {
    gp::model::OnnxImportOptions options;
    options.allow_opaque = opaque;
    options.untie_weights = true;
    auto model = gp::model::import_onnx(path, options);
    if (model.ok()) (void)gp::model::Graph::build(*model);
  }
  std::remove(path.c_str());
  return 0;
}
