#include "gp/profile_db/profile_db.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <string>
#include <tuple>

#include "gp/common/util.h"
#include "gp/common/version.h"
#include "gp/model/model_io.h"

namespace gp::profile {
namespace {

using graphpipe::v1::CommFit;
using graphpipe::v1::OpMeasurement;
using graphpipe::v1::OptimizerFit;
using graphpipe::v1::ProfileDB;

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

Status bad(const std::string& where, const std::string& field, const std::string& value,
           const std::string& rule) {
  return invalid_argument(where + ": " + field + " = " + value + ", " + rule);
}

Status check_nonneg(const std::string& where, const char* field, double v) {
  if (std::isfinite(v) && v >= 0) return ok_status();
  return bad(where, field, num(v), "must be a finite number >= 0");
}

// Bounds no real measurement reaches: beyond them a record is corrupt or in the wrong unit, and
// would make every plan priced with it predict an infinite (or zero) iteration.
constexpr double kMaxOpTimeUs = 3.6e9;           // one hour for one op on one micro-batch
constexpr double kMaxLatencyUs = 1e6;            // one second before a transfer's first byte
constexpr double kMinBandwidth = 1e3;            // bytes/s
constexpr double kMaxBandwidth = 1e15;           // bytes/s
constexpr int64_t kMaxBytes = int64_t{1} << 50;  // 1 PiB

// Finite, >= 0 and at most `max`, whose meaning `what` names.
Status check_at_most(const std::string& where, const char* field, double v, double max,
                     const char* what) {
  GP_RETURN_IF_ERROR(check_nonneg(where, field, v));
  if (v <= max) return ok_status();
  return bad(where, field, num(v), "must be at most " + num(max) + " (" + what + ")");
}

Status check_bytes(const std::string& where, const char* field, int64_t v) {
  if (v >= 0 && v <= kMaxBytes) return ok_status();
  return bad(where, field, std::to_string(v), "must be in [0, 2^50] (1 PiB)");
}

Status check_op(const std::string& where, const OpMeasurement& m) {
  if (m.signature().empty()) return bad(where, "signature", "''", "must name the op");
  if (m.device_kind().empty()) return bad(where, "device_kind", "''", "must name the device");
  if (m.micro_batch() <= 0) {
    return bad(where, "micro_batch", std::to_string(m.micro_batch()), "must be > 0");
  }
  for (const auto& [field, v] : {std::pair{"forward_time_us", m.forward_time_us()},
                                 std::pair{"backward_time_us", m.backward_time_us()},
                                 std::pair{"forward_spread_us", m.forward_spread_us()},
                                 std::pair{"backward_spread_us", m.backward_spread_us()}}) {
    GP_RETURN_IF_ERROR(check_at_most(where, field, v, kMaxOpTimeUs, "one hour"));
  }
  GP_RETURN_IF_ERROR(check_bytes(where, "activation_bytes", m.activation_bytes()));
  GP_RETURN_IF_ERROR(check_bytes(where, "workspace_bytes", m.workspace_bytes()));
  if (!m.has_provenance() || m.provenance().date().empty()) {
    return bad(where, "provenance.date", "''", "every record must say when it was measured");
  }
  return ok_status();
}

// The alpha-beta part shared by comm and optimizer fits: bounds, points and provenance.
template <typename Fit>
Status check_alpha_beta(const std::string& where, const Fit& f) {
  GP_RETURN_IF_ERROR(check_at_most(where, "alpha_us", f.alpha_us(), kMaxLatencyUs, "one second"));
  if (!(std::isfinite(f.beta_bytes_per_s()) && f.beta_bytes_per_s() > 0)) {
    return bad(where, "beta_bytes_per_s", num(f.beta_bytes_per_s()), "must be > 0");
  }
  if (f.beta_bytes_per_s() < kMinBandwidth || f.beta_bytes_per_s() > kMaxBandwidth) {
    return bad(where, "beta_bytes_per_s", num(f.beta_bytes_per_s()),
               "must be in [1e3, 1e15] bytes/s");
  }
  for (int k = 0; k < f.points_size(); ++k) {
    const std::string point = where + ".points[" + std::to_string(k) + "]";
    GP_RETURN_IF_ERROR(check_bytes(point, "bytes", f.points(k).bytes()));
    GP_RETURN_IF_ERROR(
        check_at_most(point, "time_us", f.points(k).time_us(), kMaxOpTimeUs, "one hour"));
  }
  if (!f.has_provenance() || f.provenance().date().empty()) {
    return bad(where, "provenance.date", "''", "every record must say when it was measured");
  }
  return ok_status();
}

Status check_comm(const std::string& where, const CommFit& f) {
  if (f.link_class() == graphpipe::v1::LINK_CLASS_UNSPECIFIED) {
    return bad(where, "link_class", "LINK_CLASS_UNSPECIFIED", "must be INTRA_NODE or INTER_NODE");
  }
  if (f.kind() == graphpipe::v1::COLLECTIVE_KIND_UNSPECIFIED) {
    return bad(where, "kind", "COLLECTIVE_KIND_UNSPECIFIED", "must be P2P or ALL_REDUCE");
  }
  if (f.ranks() < 2) return bad(where, "ranks", std::to_string(f.ranks()), "must be >= 2");
  return check_alpha_beta(where, f);
}

Status check_optimizer(const std::string& where, const OptimizerFit& f) {
  if (f.device_kind().empty()) return bad(where, "device_kind", "''", "must name the device");
  if (f.optimizer() == graphpipe::v1::OPTIMIZER_KIND_UNSPECIFIED ||
      !graphpipe::v1::OptimizerKind_IsValid(f.optimizer())) {
    return bad(where, "optimizer", std::to_string(f.optimizer()),
               "must be OPTIMIZER_KIND_SGD, _MOMENTUM or _ADAM");
  }
  return check_alpha_beta(where, f);
}

using OpKey = std::tuple<std::string, std::string, int64_t>;
using CommKey = std::tuple<int, int, int>;
using OptimizerKey = std::pair<std::string, int>;

OpKey key_of(const OpMeasurement& m) { return {m.signature(), m.device_kind(), m.micro_batch()}; }
CommKey key_of(const CommFit& f) { return {f.link_class(), f.kind(), f.ranks()}; }
OptimizerKey key_of(const OptimizerFit& f) { return {f.device_kind(), f.optimizer()}; }

// Appends `record` to `out` or replaces the earlier record of its key; true when it replaced.
template <typename Key, typename Record>
bool put(std::map<Key, int>& at, google::protobuf::RepeatedPtrField<Record>& out,
         const Record& record) {
  auto [it, fresh] = at.emplace(key_of(record), out.size());
  if (fresh) {
    *out.Add() = record;
    return false;
  }
  out[it->second] = record;
  return true;
}

}  // namespace

const char* optimizer_name(graphpipe::v1::OptimizerKind k) {
  switch (k) {
    case graphpipe::v1::OPTIMIZER_KIND_SGD:
      return "sgd";
    case graphpipe::v1::OPTIMIZER_KIND_MOMENTUM:
      return "momentum";
    case graphpipe::v1::OPTIMIZER_KIND_ADAM:
      return "adam";
    default:
      return "unspecified";
  }
}

graphpipe::v1::Provenance make_provenance(std::string backend, std::string device_name,
                                          std::string driver_version,
                                          std::string library_versions) {
  graphpipe::v1::Provenance p;
  p.set_backend(std::move(backend));
  p.set_device_name(std::move(device_name));
  p.set_driver_version(std::move(driver_version));
  p.set_library_versions(std::move(library_versions));
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) p.set_host(host);
  p.set_date(utc_now_iso8601());
  p.set_tool_version(GP_VERSION_STRING);
  return p;
}

Status validate_profile(const ProfileDB& db) {
  if (db.format_version() != kProfileFormatVersion) {
    return bad("profile", "format_version", std::to_string(db.format_version()),
               "expected " + std::to_string(kProfileFormatVersion));
  }
  for (int i = 0; i < db.ops_size(); ++i) {
    GP_RETURN_IF_ERROR(
        check_op("ops[" + std::to_string(i) + "] ('" + db.ops(i).signature() + "')", db.ops(i)));
  }
  for (int i = 0; i < db.comm_size(); ++i) {
    GP_RETURN_IF_ERROR(check_comm("comm[" + std::to_string(i) + "]", db.comm(i)));
  }
  for (int i = 0; i < db.optimizer_steps_size(); ++i) {
    GP_RETURN_IF_ERROR(
        check_optimizer("optimizer_steps[" + std::to_string(i) + "]", db.optimizer_steps(i)));
  }
  return ok_status();
}

ProfileDB merge_profiles(std::span<const ProfileDB> dbs, MergeStats* stats) {
  MergeStats local;
  ProfileDB out;
  out.set_format_version(kProfileFormatVersion);
  std::map<OpKey, int> op_at;
  std::map<CommKey, int> comm_at;
  std::map<OptimizerKey, int> optimizer_at;
  for (const auto& db : dbs) {
    for (const auto& m : db.ops()) local.ops_replaced += put(op_at, *out.mutable_ops(), m);
    for (const auto& f : db.comm()) local.comm_replaced += put(comm_at, *out.mutable_comm(), f);
    for (const auto& f : db.optimizer_steps()) {
      local.optimizer_replaced += put(optimizer_at, *out.mutable_optimizer_steps(), f);
    }
  }
  if (stats != nullptr) *stats = local;
  return out;
}

Result<ProfileDB> read_profile(const std::string& path) {
  ProfileDB db;
  GP_RETURN_IF_ERROR(model::read_message(path, &db));
  GP_RETURN_IF_ERROR(validate_profile(db).with_context(path));
  return db;
}

Status write_profile(const std::string& path, const ProfileDB& db) {
  GP_RETURN_IF_ERROR(validate_profile(db).with_context("profile to write"));
  return model::write_message(path, db);
}

std::string describe_profile(const ProfileDB& db) {
  std::map<std::string, std::pair<std::map<std::string, int>, int>> kinds;  // sigs, records
  for (const auto& m : db.ops()) {
    auto& k = kinds[m.device_kind()];
    ++k.first[m.signature()];
    ++k.second;
  }
  std::string out;
  char line[512];
  for (const auto& [kind, k] : kinds) {
    std::snprintf(line, sizeof(line), "ops   device kind %-16s %4zu signatures, %5d records\n",
                  kind.c_str(), k.first.size(), k.second);
    out += line;
  }
  for (const auto& f : db.comm()) {
    std::snprintf(
        line, sizeof(line),
        "comm  %-10s %-10s %3d ranks  alpha %9.2f us  beta %9.3f GB/s  (%d points, %s)\n",
        f.link_class() == graphpipe::v1::LINK_CLASS_INTER_NODE ? "inter-node" : "intra-node",
        f.kind() == graphpipe::v1::COLLECTIVE_KIND_P2P ? "p2p" : "all-reduce", f.ranks(),
        f.alpha_us(), f.beta_bytes_per_s() / 1e9, f.points_size(),
        f.provenance().device_name().c_str());
    out += line;
  }
  for (const auto& f : db.optimizer_steps()) {
    std::snprintf(line, sizeof(line),
                  "step  device kind %-16s %-8s alpha %9.2f us  beta %9.3f GB/s  (%d points)\n",
                  f.device_kind().c_str(), optimizer_name(f.optimizer()), f.alpha_us(),
                  f.beta_bytes_per_s() / 1e9, f.points_size());
    out += line;
  }
  if (out.empty()) out = "empty profile\n";
  return out;
}

}  // namespace gp::profile
