#include "gp/common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <mutex>

namespace gp::log {
namespace {
std::mutex g_mutex;
}  // namespace

Result<spdlog::level::level_enum> parse_level(std::string_view name) {
  using spdlog::level::level_enum;
  if (name == "trace") return level_enum::trace;
  if (name == "debug") return level_enum::debug;
  if (name == "info") return level_enum::info;
  if (name == "warn" || name == "warning") return level_enum::warn;
  if (name == "error") return level_enum::err;
  if (name == "critical") return level_enum::critical;
  if (name == "off") return level_enum::off;
  return invalid_argument("--log-level: unknown level '" + std::string(name) +
                          "' (expected trace, debug, info, warn, error, critical or off)");
}

Status init(std::string_view app_name, std::string_view level) {
  std::string chosen(level);
  if (chosen.empty()) {
    const char* env = std::getenv("GP_LOG_LEVEL");
    chosen = env != nullptr ? env : "info";
  }
  auto parsed = parse_level(chosen);
  if (!parsed.ok()) return parsed.status();
  std::lock_guard<std::mutex> lock(g_mutex);
  auto logger = spdlog::stderr_color_mt(std::string(app_name));
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%Y-%m-%d %T.%e] [%n] [%^%l%$] %v");
  spdlog::set_level(*parsed);
  return ok_status();
}

std::shared_ptr<spdlog::logger> get(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto existing = spdlog::get(name)) return existing;
  auto default_logger = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>(name, default_logger->sinks().begin(),
                                                 default_logger->sinks().end());
  logger->set_level(default_logger->level());
  spdlog::register_logger(logger);
  return logger;
}

}  // namespace gp::log
