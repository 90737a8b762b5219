// Shared by the fuzz targets: the first input byte picks the file format the rest is parsed as,
// so one corpus covers the binary, text and JSON readers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gp/model/model_io.h"

namespace gp::fuzz {

inline model::FileFormat format_of(uint8_t selector) {
  switch (selector % 3) {
    case 0:
      return model::FileFormat::kBinary;
    case 1:
      return model::FileFormat::kText;
    default:
      return model::FileFormat::kJson;
  }
}

inline std::string_view body(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data) + 1, size - 1};
}

}  // namespace gp::fuzz
