// graphpipe-profile merge and show: profile databases as a whole.
#include <cstdio>

#include "commands.h"
#include "gp/common/logging.h"
#include "gp/profile_db/profile_db.h"

namespace gp::profile::cli {

Status run_merge(const MergeOptions& o) {
  std::vector<graphpipe::v1::ProfileDB> dbs;
  for (const auto& path : o.inputs) {
    GP_ASSIGN_OR_RETURN(auto db, read_profile(path));
    dbs.push_back(std::move(db));
  }
  MergeStats stats;
  const auto merged = merge_profiles(dbs, &stats);
  GP_RETURN_IF_ERROR(write_profile(o.out, merged).with_context("--out " + o.out));
  log::get("profile")->info(
      "merged {} databases into {}: {} op records ({} replaced by later inputs), {} comm fits "
      "({} replaced), {} optimizer fits ({} replaced)",
      dbs.size(), o.out, merged.ops_size(), stats.ops_replaced, merged.comm_size(),
      stats.comm_replaced, merged.optimizer_steps_size(), stats.optimizer_replaced);
  return ok_status();
}

Status run_show(const std::string& path) {
  GP_ASSIGN_OR_RETURN(auto db, read_profile(path));
  std::printf("%s", describe_profile(db).c_str());
  return ok_status();
}

}  // namespace gp::profile::cli
