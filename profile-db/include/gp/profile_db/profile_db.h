// Profile databases: provenance, validation, merging, and a readable summary.
#pragma once

#include <span>
#include <string>

#include "gp/common/status.h"
#include "graphpipe/v1/profile.pb.h"

namespace gp::profile {

inline constexpr int kProfileFormatVersion = 1;

// Provenance of records measured now on this host: date (UTC, ISO 8601), host name and the tool
// version filled in; the device and library fields as given.
graphpipe::v1::Provenance make_provenance(std::string backend, std::string device_name,
                                          std::string driver_version, std::string library_versions);

// InvalidArgument naming the record and the field: a format_version other than 1, an op record
// without signature or device kind, a non-positive micro-batch, a negative or non-finite time or
// byte count, a comm fit without link class or kind, fewer than 2 ranks, a negative alpha or a
// non-positive beta, an optimizer fit without device kind or optimizer, or any record without
// provenance. Values no real measurement reaches are
// refused with the bound: op times and spreads (and comm points' times) above one hour
// (3.6e9 us), byte counts above 1 PiB, alpha above one second, beta outside [1e3, 1e15] B/s.
Status validate_profile(const graphpipe::v1::ProfileDB& db);

struct MergeStats {
  int ops_replaced = 0;        // op records superseded by a later database's record of the same key
  int comm_replaced = 0;       // comm fits superseded likewise
  int optimizer_replaced = 0;  // optimizer fits superseded likewise
};

// The union of `dbs`, in order; a later record replaces an earlier one with the same key
// (signature, device kind, micro-batch for ops; link class, kind, ranks for comm fits; device
// kind, optimizer for optimizer fits). Each
// record keeps its own provenance.
graphpipe::v1::ProfileDB merge_profiles(std::span<const graphpipe::v1::ProfileDB> dbs,
                                        MergeStats* stats = nullptr);

// Reads a database (.pb, .pbtxt or .json) and validates it; errors name the path.
Result<graphpipe::v1::ProfileDB> read_profile(const std::string& path);
// Validates and writes atomically.
Status write_profile(const std::string& path, const graphpipe::v1::ProfileDB& db);

// "sgd", "momentum", "adam" ("unspecified" otherwise), as records and tables name them.
const char* optimizer_name(graphpipe::v1::OptimizerKind kind);

// A human-readable summary: op records per device kind, comm and optimizer fits with alpha and
// beta.
std::string describe_profile(const graphpipe::v1::ProfileDB& db);

}  // namespace gp::profile
