// Named float32 tensors written as files that other tools read: safetensors (Hugging Face's
// format: a JSON header, then the raw tensors) and NumPy .npz (a zip of .npy files, zip64 where
// needed). Both stream the tensors to the file; neither holds a copy of all of them.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "gp/common/status.h"

namespace gp::exec {

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::span<const float> values;  // row-major in `shape`; must outlive the write
};

// The safetensors header for `tensors` (written in name order, as the `safetensors` package
// orders tensors of one dtype): its 8-byte little-endian length, then the JSON
// {"__metadata__": {...}, "<name>": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}}
// padded with spaces to a multiple of 8 bytes. InvalidArgument for a duplicate name, the reserved
// name "__metadata__", or values that do not fill the shape.
Result<std::string> safetensors_header(const std::vector<NamedTensor>& tensors,
                                       const std::map<std::string, std::string>& metadata);

// The header and then the tensors' bytes, atomically (a temporary file beside `path`, flushed,
// renamed over it).
Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata);

// One `<name>.npy` per tensor (format 1.0, little-endian float32, stored uncompressed), in the
// given order, through libzip, which writes zip64 records for entries or archives over 4 GiB and
// replaces `path` atomically. `force_zip64` gives every entry zip64 records however small (the
// test of the zip64 path without writing 4 GiB).
Status write_npz(const std::string& path, const std::vector<NamedTensor>& tensors,
                 bool force_zip64 = false);

}  // namespace gp::exec
