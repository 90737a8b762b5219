#include "job_outputs.h"

#include <spdlog/fmt/fmt.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "gp/common/logging.h"
#include "gp/model/model_io.h"

namespace gp::exec::daemon {

using Clock = std::chrono::steady_clock;

void ProgressLog::add(const graphpipe::v1::ReportMetricsRequest& report) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& m : report.iterations()) {
    const int64_t k = m.iteration();
    if (complete_.count(k) != 0) continue;  // a repeated report changes nothing
    Pending& p = pending_[k];
    p.loss_by_rank[report.rank()] = m.loss();  // the latest report of a rank counts, as stored
    p.time_s = std::max(p.time_s, m.time_s());
    if (static_cast<int>(p.loss_by_rank.size()) < loss_ranks_) continue;
    double sum = 0;
    for (const auto& [rank, loss] : p.loss_by_rank) sum += loss;
    const double loss = sum / static_cast<double>(mini_batch_);
    const double rate = p.time_s > 0 ? static_cast<double>(mini_batch_) / p.time_s : 0;
    const double time_s = p.time_s;
    pending_.erase(k);
    complete_[k] = loss;
    const Clock::time_point now = Clock::now();
    if (done_++ == 0) first_done_ = now;
    if ((k + 1) % log_every_ != 0 && k + 1 != iterations_) continue;
    // Seconds per iteration: measured between completions once there are two, so that set-up
    // time does not count.
    const double per_iteration = done_ > 1
                                     ? std::chrono::duration<double>(now - first_done_).count() /
                                           static_cast<double>(done_ - 1)
                                     : time_s;
    const double eta =
        per_iteration * static_cast<double>(std::max<int64_t>(0, iterations_ - 1 - k));
    log::get("exec")->info("iteration {}: loss {:.6f}, {:.1f} samples/s, {} of {} done, ETA {}", k,
                           loss, rate, k + 1, iterations_, format_duration(eta));
  }
}

std::map<int64_t, double> ProgressLog::complete_losses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return complete_;
}

std::string ProgressLog::format_duration(double s) {
  if (s < 60) return fmt::format("{:.0f} s", s);
  if (s < 3600) return fmt::format("{:.0f} min {:.0f} s", std::floor(s / 60), std::fmod(s, 60));
  return fmt::format("{:.0f} h {:.0f} min", std::floor(s / 3600), std::fmod(s, 3600) / 60);
}

// Ranks that compute a loss: every replica of a stage holding a loss operator.
int count_loss_ranks(const graphpipe::v1::Plan& plan, const model::Graph& graph) {
  int n = 0;
  for (const auto& stage : plan.stages()) {
    bool loss = false;
    for (const auto& id : stage.op_ids()) {
      const int i = graph.index_of(id);
      loss = loss || (i >= 0 && graph.op(i).info->is_loss);
    }
    if (loss) n += stage.device_ranks_size();
  }
  return n;
}

// Entries of a metrics file this executor wrote (metrics_json's layout); malformed ones stop
// the scan.
std::vector<IterationMetrics> read_metrics(const std::string& text) {
  std::vector<IterationMetrics> out;
  auto number_after = [&](const char* key, size_t from, double* v) -> size_t {
    const size_t k = text.find(key, from);
    if (k == std::string::npos) return k;
    const char* p = text.c_str() + k + std::strlen(key);
    char* end = nullptr;
    *v = std::strtod(p, &end);
    if (end == p) *v = std::nan("");  // null: a non-finite value
    return k;
  };
  size_t pos = 0;
  while (true) {
    double it = 0, loss = 0, time_s = 0, rate = 0;
    pos = number_after("\"iteration\": ", pos, &it);
    if (pos == std::string::npos || !std::isfinite(it)) break;
    if (number_after("\"loss\": ", pos, &loss) == std::string::npos ||
        number_after("\"time_s\": ", pos, &time_s) == std::string::npos ||
        number_after("\"samples_per_s\": ", pos, &rate) == std::string::npos) {
      break;
    }
    out.push_back({static_cast<int64_t>(it), loss, time_s, rate});
    ++pos;
  }
  return out;
}

// The iterations this run trained whose loss every loss rank reported: first_iteration ..
// first_iteration + time_s.size() - 1 at most. When the job resumed, the earlier iterations of
// an existing metrics file are kept in front, so restarts append.
Status write_job_metrics(const std::map<int64_t, double>& losses, int64_t mini_batch,
                         int first_iteration, const std::vector<double>& time_s,
                         const std::string& path) {
  if (path.empty()) return ok_status();
  std::vector<IterationMetrics> out;
  if (first_iteration > 0) {
    if (auto old = model::read_file(path); old.ok()) {
      for (const auto& m : read_metrics(*old)) {
        if (m.iteration < first_iteration) out.push_back(m);
      }
    }
  }
  for (size_t i = 0; i < time_s.size(); ++i) {
    const int64_t it = first_iteration + static_cast<int64_t>(i);
    const auto loss = losses.find(it);
    if (loss == losses.end()) break;  // a failed run's last iterations may be partial
    const double rate = time_s[i] > 0 ? static_cast<double>(mini_batch) / time_s[i] : 0;
    out.push_back({it, loss->second, time_s[i], rate});
  }
  return model::write_file_atomic(path, metrics_json(out));
}

// Fails now, not after training, when `path` cannot be written (its directory is missing or
// read-only).
Status check_writable(const std::string& flag, const std::string& path) {
  if (path.empty()) return ok_status();
  const std::string probe = path + ".probe-" + std::to_string(::getpid());
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  if (f == nullptr) {
    return invalid_argument(flag + " " + path + ": cannot write there: " + std::strerror(errno));
  }
  std::fclose(f);
  std::remove(probe.c_str());
  return ok_status();
}

// One line per event: kind stage micro_batch peer gradient bytes start_us end_us.
Status write_trace_part(const std::string& path, const std::vector<TraceEvent>& events) {
  std::string text;
  char line[160];
  for (const auto& e : events) {
    std::snprintf(line, sizeof(line), "%d %d %d %d %d %lld %.3f %.3f\n", static_cast<int>(e.kind),
                  e.stage, e.micro_batch, e.peer, e.gradient ? 1 : 0,
                  static_cast<long long>(e.bytes), e.start_us, e.end_us);
    text += line;
  }
  return model::write_file_atomic(path, text);
}

// Rank 0, after every rank passed the final barrier: merge the parts into one trace.
Status merge_trace(const graphpipe::v1::Plan& plan, int world_size, const std::string& path) {
  std::vector<std::pair<int, std::vector<TraceEvent>>> ranks;
  for (int r = 0; r < world_size; ++r) {
    const std::string part = path + ".rank" + std::to_string(r);
    GP_ASSIGN_OR_RETURN(std::string text, model::read_file(part));
    std::vector<TraceEvent> events;
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t end = text.find('\n', pos);
      const std::string line = text.substr(pos, end - pos);
      pos = end == std::string::npos ? text.size() : end + 1;
      TraceEvent e{};
      int kind = 0, gradient = 0;
      long long bytes = 0;
      if (std::sscanf(line.c_str(), "%d %d %d %d %d %lld %lf %lf", &kind, &e.stage, &e.micro_batch,
                      &e.peer, &gradient, &bytes, &e.start_us, &e.end_us) != 8) {
        continue;
      }
      e.kind = static_cast<TraceEvent::Kind>(kind);
      e.gradient = gradient != 0;
      e.bytes = bytes;
      events.push_back(e);
    }
    ranks.emplace_back(r, std::move(events));
    std::remove(part.c_str());
  }
  return model::write_file_atomic(path, measured_trace_json(plan, ranks));
}

// Rank 0, when the job ended in an abort: who is blamed and why, for whoever started the ranks
// (the launcher kills and excludes that rank rather than the first one to exit).
Status write_verdict(const std::string& path, const graphpipe::v1::GetStatusResponse& status) {
  if (path.empty()) return ok_status();
  std::string reason = status.abort_reason();
  for (char& c : reason) {
    if (c == '\n') c = ' ';
  }
  return model::write_file_atomic(
      path, "failed_rank=" + std::to_string(status.failed_rank()) + "\nreason=" + reason + "\n");
}

}  // namespace gp::exec::daemon
