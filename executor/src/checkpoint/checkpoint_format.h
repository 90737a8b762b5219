// The on-disk format of checkpoint tensor files, shared by the writer (checkpoint.cc) and the
// reader that checks them (checkpoint_files.cc). See gp/exec/checkpoint.h for the layout.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "gp/common/status.h"
#include "graphpipe/v1/checkpoint.pb.h"

namespace gp::exec::checkpoint_format {

// A manifest's tensor file: one path component, no "." or "..", so it stays in its directory.
inline bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name.size() < 256 && name != "." && name != ".." &&
         name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
}

// Format 1 files have no iteration or run; format 2 files name both, so that a file left over
// from another iteration or another run under the same manifest name is refused.
inline constexpr char kMagicV1[8] = {'G', 'P', 'C', 'K', 'P', 'T', '1', '\0'};
inline constexpr char kMagicV2[8] = {'G', 'P', 'C', 'K', 'P', 'T', '2', '\0'};
inline constexpr int kFormatVersion = 2;

struct FileHeaderV1 {
  char magic[8];
  int64_t op_index;
  int64_t param_floats;
  int64_t state_floats;
  uint64_t checksum;  // FNV-1a 64 of the float bytes that follow
};

struct FileHeader {
  char magic[8];
  int64_t op_index;
  int64_t param_floats;
  int64_t state_floats;
  int64_t iteration;  // the manifest's
  uint64_t run_tag;   // FNV-1a 64 of the manifest's run_id
  uint64_t checksum;  // FNV-1a 64 of the float bytes that follow
};

inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

inline std::string iter_dir(const std::string& dir, int64_t iteration) {
  return (std::filesystem::path(dir) / ("iter-" + std::to_string(iteration))).string();
}

inline std::string op_file(int op_index) { return "op-" + std::to_string(op_index) + ".bin"; }

inline uint64_t run_tag(const std::string& run_id) { return fnv1a(run_id.data(), run_id.size()); }

// Checks one tensor file's bytes against its manifest entry: size, header (operator, counts,
// and in format 2 the iteration and run), checksum. Returns where its floats start.
Result<size_t> check_tensor_file(const std::string& path, const std::string& bytes,
                                 const graphpipe::v1::CheckpointManifest& m,
                                 const graphpipe::v1::CheckpointTensor& t);

}  // namespace gp::exec::checkpoint_format
