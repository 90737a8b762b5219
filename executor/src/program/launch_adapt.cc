// --adapt: while an attempt runs, checks now and then (graphpipe-plan adapt on the attempt's
// measured profile and metrics) whether another plan would be faster by enough to pay for a
// switch, and starts the switch when it says so (SIGUSR1 to the supervisor: rank 0 stops the job
// at an agreed iteration with a checkpoint; the launcher then resumes under the new plan).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "gp/common/util.h"
#include "gp/model/model_io.h"
#include "launch_job.h"
#include "launch_process.h"

namespace gp::exec::daemon {
namespace fs = std::filesystem;
namespace {

std::string seconds_text(int64_t ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%lld.%lld", static_cast<long long>(ms / 1000),
                static_cast<long long>((ms % 1000) / 100));
  return text;
}

// Whether `a` was modified after `b` (false when either is missing).
bool newer(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (stat(a.c_str(), &sa) != 0 || stat(b.c_str(), &sb) != 0) return false;
  return sa.st_mtim.tv_sec != sb.st_mtim.tv_sec ? sa.st_mtim.tv_sec > sb.st_mtim.tv_sec
                                                : sa.st_mtim.tv_nsec > sb.st_mtim.tv_nsec;
}

// The check's "KEY VALUE" lines, in order.
std::vector<std::pair<std::string, std::string>> read_key_values(const std::string& path) {
  auto text = model::read_file(path);
  std::istringstream lines(text.ok() ? *text : "");
  std::vector<std::pair<std::string, std::string>> out;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream in(line);
    std::string key, value;
    if (!(in >> key)) continue;
    std::getline(in >> std::ws, value);
    out.emplace_back(key, value);
  }
  return out;
}

}  // namespace

void Launcher::adapt_log(const std::string& line) const {
  say("adapt: " + line);
  std::ofstream(run_dir_ + "/adapt.log", std::ios::app) << utc_now_iso8601() << " " << line << "\n";
}

// The newest iteration in the metrics file (-1: none yet): its last line's.
int64_t Launcher::last_logged_iteration() const {
  std::ifstream in(o_.metrics, std::ios::binary | std::ios::ate);
  if (!in) return -1;
  const std::streamoff size = in.tellg();
  const std::streamoff from = size > 4096 ? size - 4096 : 0;
  in.seekg(from);
  std::string tail(static_cast<size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  while (!tail.empty() && tail.back() == '\n') tail.pop_back();
  const std::string last =
      tail.substr(tail.rfind('\n') == std::string::npos ? 0 : tail.rfind('\n') + 1);
  std::smatch m;
  if (!std::regex_search(last, m, std::regex("\"iteration\": *([0-9]{1,15})"))) return -1;
  return std::stoll(m[1].str());
}

void Launcher::adapt_begin(const std::string& dir, bool resume) {
  adapt_.dir = dir;
  adapt_.first_iteration = 0;
  adapt_.check_pid = -1;
  adapt_.agreeing_checks = 0;
  adapt_.polled_ms = 0;
  adapt_.first_line_ms = -1;
  adapt_.start_ms = steady_ms();
  adapt_.stopping = false;
  adapt_.next_plan.clear();
  if (resume) {
    auto latest = model::read_file(o_.checkpoint_dir + "/LATEST");
    std::smatch m;
    if (latest.ok() && std::regex_search(*latest, m, std::regex("^iter-([0-9]{1,15})"))) {
      adapt_.first_iteration = std::stoll(m[1].str()) + 1;
    }
  }
  adapt_.next_check = adapt_.first_iteration + o_.adapt_warmup;
  adapt_.profile =
      o_.measured_profile.empty() ? dir + "/measured-profile.pbtxt" : o_.measured_profile;
  // Measured profiles older than this are an earlier attempt's.
  (void)model::write_file_atomic(dir + "/adapt-started", "");
}

// One step of the checks, from the attempt's wait loop: at most once a second.
void Launcher::adapt_poll(const std::string& plan) {
  const int64_t now = steady_ms();
  if (now - adapt_.polled_ms < 1000) return;
  adapt_.polled_ms = now;
  if (adapt_.check_pid > 0) {
    int ws = 0;
    if (waitpid(adapt_.check_pid, &ws, WNOHANG) != adapt_.check_pid) return;
    adapt_.check_pid = -1;
    adapt_result(shell_status(ws));
    return;
  }
  if (adapt_.stopping || stop_signal_ != 0) return;
  const int64_t last = last_logged_iteration();
  if (last < adapt_.first_iteration) return;
  if (adapt_.first_line_ms < 0) adapt_.first_line_ms = now;
  if (last < adapt_.next_check) return;
  adapt_.next_check = last + o_.adapt_warmup;
  if (adapt_.switches >= o_.adapt_max_switches) return;
  if (!newer(adapt_.profile, adapt_.dir + "/adapt-started")) return;
  adapt_start_check(plan, last);
}

void Launcher::adapt_start_check(const std::string& plan, int64_t last) {
  // What a switch costs: this attempt's restart (its start to its first logged iteration) plus
  // a stop with a checkpoint (the last switch's, else as long as the restart).
  const int64_t restart_ms = adapt_.first_line_ms - adapt_.start_ms;
  const int64_t cost_ms =
      restart_ms + (adapt_.stop_took_ms >= 0 ? adapt_.stop_took_ms : restart_ms);
  const int64_t from =
      std::max(last - o_.adapt_warmup, adapt_.first_iteration + o_.adapt_warmup / 2);
  char cost[32];
  std::snprintf(cost, sizeof cost, "%.3f", static_cast<double>(cost_ms) / 1000);
  std::vector<std::string> argv{
      planner_,
      "--log-level",
      "warn",
      "adapt",
      "--plan",
      plan,
      "--measured-profile",
      adapt_.profile,
      "--metrics",
      o_.metrics,
      "--from-iteration",
      std::to_string(from),
      "--iterations",
      std::to_string(o_.iterations),
      "--switch-cost-s",
      cost,
      "--min-gain",
      o_.adapt_min_gain,
      "--drop",
      o_.adapt_drop,
      "--out",
      o_.checkpoint_dir + "/plan-adapted-" + std::to_string(adapt_.switches + 1) + ".pb"};
  // A check that is to confirm a switch searches whatever the rate.
  if (!adapt_.calibration.empty() && adapt_.agreeing_checks == 0) {
    argv.push_back("--calibration");
    argv.push_back(adapt_.calibration);
  }
  if (!o_.adapt_profile.empty()) {
    argv.push_back("--profile");
    argv.push_back(o_.adapt_profile);
  }
  adapt_log("checking at iteration " + std::to_string(last) + " (the rate since iteration " +
            std::to_string(from) + "; switching costs " + seconds_text(cost_ms) + " s)");
  const std::string out_path = adapt_.dir + "/adapt.out", err_path = adapt_.dir + "/adapt.err";
  const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out >= 0 && err >= 0) {
    auto pid = spawn(argv, SpawnOptions{true, false, out, err});
    if (pid.ok()) adapt_.check_pid = *pid;
  }
  if (adapt_.check_pid < 0) {
    adapt_log("the check could not start");
    adapt_.agreeing_checks = 0;
  }
  if (out >= 0) close(out);
  if (err >= 0) close(err);
}

// A finished check: its lines logged; a switch started when it says so.
void Launcher::adapt_result(int status) {
  if (status != 0) {
    auto err = model::read_file(adapt_.dir + "/adapt.err");
    std::string text = err.ok() ? err->substr(0, 2000) : "";
    for (char& c : text) c = c == '\n' ? ' ' : c;
    adapt_log("the check failed (exit " + std::to_string(status) + "): " + text);
    adapt_.agreeing_checks = 0;
    return;
  }
  std::string do_switch, plan;
  for (const auto& [key, value] : read_key_values(adapt_.dir + "/adapt.out")) {
    adapt_log(key + " " + value);
    if (key == "calibration" && adapt_.calibration.empty()) adapt_.calibration = value;
    if (key == "switch") do_switch = value;
    if (key == "plan") plan = value;
  }
  if (do_switch != "1" || plan.empty()) {
    adapt_.agreeing_checks = 0;
    return;
  }
  if (stop_signal_ != 0) return;
  // One check can catch a rank in a scheduling hiccup; a slow device stays slow.
  if (++adapt_.agreeing_checks < o_.adapt_confirm) {
    adapt_log("switch recommended by " + std::to_string(adapt_.agreeing_checks) + " of " +
              std::to_string(o_.adapt_confirm) +
              " checks in a row (--adapt-confirm): the next check must agree");
    return;
  }
  adapt_.next_plan = plan;
  adapt_.stopping = true;
  adapt_.stop_sent_ms = steady_ms();
  adapt_log("switching to " + plan +
            ": the ranks stop after an agreed iteration with a checkpoint");
  // Rank 0 asks the coordinator for the stop, as on a SIGTERM (the supervisor sends it); every
  // rank then exits 143.
  if (supervisor_ > 0) kill(supervisor_, SIGUSR1);
}

}  // namespace gp::exec::daemon
