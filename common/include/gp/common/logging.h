// Logging setup. Libraries log through named loggers (`gp::log::get("planner")`); only a
// program's main configures the sink and level (`gp::log::init`). Format strings are literals.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <string_view>

#include "gp/common/status.h"

namespace gp::log {

// Parses "trace|debug|info|warn|error|critical|off".
Result<spdlog::level::level_enum> parse_level(std::string_view name);

// Sets the default level and the pattern for every logger, to stderr. `GP_LOG_LEVEL` in the
// environment overrides `level` when `level` is empty.
Status init(std::string_view app_name, std::string_view level);

// The named logger, created on first use with the global sink and level.
std::shared_ptr<spdlog::logger> get(const std::string& name);

}  // namespace gp::log
