#include "gp/planner/progress.h"

#include <chrono>
#include <mutex>
#include <string>

#include "gp/common/logging.h"

namespace gp::planner {
namespace {

std::mutex& progress_mutex() {
  static std::mutex mutex;
  return mutex;
}

void log_line(bool info, std::string_view line) {
  static const auto logger = log::get("plan");
  logger->log(info ? spdlog::level::info : spdlog::level::debug, "{}", line);
}

}  // namespace

void log_progress(std::string_view line) {
  using Clock = std::chrono::steady_clock;
  constexpr auto kInterval = std::chrono::seconds(2);
  static Clock::time_point last;  // the first call, then the last line at info
  bool info = false;
  {
    std::lock_guard<std::mutex> lock(progress_mutex());
    const Clock::time_point now = Clock::now();
    if (last == Clock::time_point{}) {
      last = now;
    } else if (now - last >= kInterval) {
      last = now;
      info = true;
    }
  }
  log_line(info, line);
}

void log_note(std::string_view line) {
  static std::string last;
  bool info = false;
  {
    std::lock_guard<std::mutex> lock(progress_mutex());
    if (line != last) {
      last = line;
      info = true;
    }
  }
  log_line(info, line);
}

}  // namespace gp::planner
