#include "job_outputs.h"

#include <google/protobuf/util/json_util.h>
#include <spdlog/fmt/fmt.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <span>
#include <string_view>
#include <utility>

#include "gp/common/json_writer.h"
#include "gp/common/logging.h"
#include "gp/model/model_io.h"

namespace gp::exec::daemon {

using Clock = std::chrono::steady_clock;

namespace {
// RateSummary's buckets: 0.1% wide; rates of 0 (a window without wall time) get their own.
constexpr int64_t kZeroBucket = std::numeric_limits<int64_t>::min();
const double kLogBucketWidth = std::log1p(0.001);
}  // namespace

void RateSummary::add(double rate) {
  ++count_;
  sum_ += rate;
  if (buckets_.empty() && exact_.size() < kExact) {
    exact_.push_back(rate);
    return;
  }
  for (double r : exact_) add_to_buckets(r);
  exact_.clear();
  exact_.shrink_to_fit();
  add_to_buckets(rate);
}

void RateSummary::add_to_buckets(double rate) {
  const int64_t b =
      rate > 0 ? static_cast<int64_t>(std::floor(std::log(rate) / kLogBucketWidth)) : kZeroBucket;
  ++buckets_[b];
}

double RateSummary::median() const {
  if (count_ == 0) return 0;
  if (buckets_.empty()) {
    std::vector<double> rates = exact_;
    std::sort(rates.begin(), rates.end());
    const size_t h = rates.size() / 2;
    return rates.size() % 2 == 1 ? rates[h] : (rates[h - 1] + rates[h]) / 2;
  }
  // The bucket holding the middle window; its centre (geometric) stands for it.
  int64_t seen = 0;
  for (const auto& [b, n] : buckets_) {
    seen += n;
    if (2 * seen >= count_) {
      return b == kZeroBucket ? 0 : std::exp((static_cast<double>(b) + 0.5) * kLogBucketWidth);
    }
  }
  return 0;
}

ProgressLog::ProgressLog(ProgressOptions options) : o_(std::move(options)) {
  if (auto opt = Optimizer::create(o_.training); opt.ok()) optimizer_ = *opt;
  start_ = window_start_ = Clock::now();
}

ProgressLog::~ProgressLog() {
  if (jsonl_ != nullptr) std::fclose(jsonl_);
}

Status ProgressLog::open(int64_t first_iteration) {
  if (!o_.tensorboard.empty()) {
    GP_ASSIGN_OR_RETURN(auto writer,
                        TensorBoardWriter::open("--tensorboard", o_.tensorboard, first_iteration));
    std::lock_guard<std::mutex> lock(mu_);
    tensorboard_ = std::move(writer);
  }
  if (o_.metrics_out.empty()) return ok_status();
  std::lock_guard<std::mutex> lock(mu_);
  kept_.clear();
  if (first_iteration > 0) {
    GP_ASSIGN_OR_RETURN(std::vector<JobMetrics> old, read_metrics_file(o_.metrics_out));
    for (const auto& m : old) {
      if (m.iteration < first_iteration) kept_.push_back(m);
    }
  }
  if (!is_jsonl(o_.metrics_out)) return ok_status();
  // The lines after the resumed iteration go: they are replaced by this run's.
  std::string text;
  for (const auto& m : kept_) text += metrics_line(m) + "\n";
  GP_RETURN_IF_ERROR(model::write_file_atomic(o_.metrics_out, text));
  jsonl_ = std::fopen(o_.metrics_out.c_str(), "ab");
  if (jsonl_ == nullptr) {
    return invalid_argument("--metrics-out " + o_.metrics_out +
                            ": cannot append: " + std::strerror(errno));
  }
  return ok_status();
}

void ProgressLog::start() {
  std::lock_guard<std::mutex> lock(mu_);
  start_ = window_start_ = Clock::now();
}

double ProgressLog::seconds_since_start(Clock::time_point t) const {
  return std::chrono::duration<double>(t - start_).count();
}

void ProgressLog::add(const graphpipe::v1::ReportMetricsRequest& report) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& m : report.iterations()) {
    const int64_t k = m.iteration();
    if (k <= last_complete_) continue;  // a repeated report changes nothing
    Pending& p = pending_[k];
    p.loss_by_rank[report.rank()] = m.loss();  // the latest report of a rank counts, as stored
    p.time_s = std::max(p.time_s, m.time_s());
    if (m.has_grad_norm()) p.grad_norm = m.grad_norm();
    if (m.has_eval_loss()) p.eval_by_rank[report.rank()] = m.eval_loss();
    p.eval_s = std::max(p.eval_s, m.eval_time_s());
    if (static_cast<int>(p.loss_by_rank.size()) < o_.loss_ranks) continue;
    const Pending done = std::move(p);
    pending_.erase(k);
    complete(k, done, Clock::now());
  }
}

void ProgressLog::complete(int64_t k, const Pending& p, Clock::time_point now) {
  double sum = 0;
  for (const auto& [rank, loss] : p.loss_by_rank) sum += loss;
  JobMetrics& r = complete_[k];
  r.iteration = k;
  r.loss = sum / static_cast<double>(o_.mini_batch);
  if (optimizer_) r.lr = optimizer_->learning_rate(k + 1);  // the update of iteration k
  r.grad_norm = p.grad_norm;
  r.time_s = p.time_s;
  r.elapsed_s = seconds_since_start(now);
  if (!p.eval_by_rank.empty()) {
    double eval = 0;
    for (const auto& [rank, part] : p.eval_by_rank) eval += part;
    r.eval_loss = eval;
    r.eval_s = p.eval_s;
  }
  last_complete_ = std::max(last_complete_, k);
  window_.push_back(k);
  if (done_++ == 0) first_done_ = now;
  const bool window_ends = (k + 1) % o_.log_every == 0 || k + 1 == o_.iterations;
  if (r.eval_loss) {
    // Its own line whatever the window: an evaluation is rare and read on its own.
    log::get("exec")->info("iteration {}: held-out loss {:.6f} ({} samples)", k, *r.eval_loss,
                           o_.eval_samples);
    const TensorBoardScalar eval{"eval/loss", *r.eval_loss};
    write_tensorboard(k, std::span(&eval, 1));
  }
  if (window_ends) close_window(now);
}

void ProgressLog::write_tensorboard(int64_t iteration, std::span<const TensorBoardScalar> scalars) {
  if (tensorboard_ == nullptr || tensorboard_failed_) return;
  if (Status st = tensorboard_->write_scalars(iteration, scalars); !st.ok()) {
    tensorboard_failed_ = true;  // said once; the run goes on
    log::get("exec")->error("{}", st.message());
  }
}

void ProgressLog::write_jsonl(const JobMetrics& m) {
  if (jsonl_ == nullptr || jsonl_failed_) return;
  const std::string line = metrics_line(m) + "\n";
  if (std::fputs(line.c_str(), jsonl_) < 0 || std::fflush(jsonl_) != 0) {
    jsonl_failed_ = true;  // said once; the run goes on
    log::get("exec")->error("--metrics-out {}: cannot append: {}", o_.metrics_out,
                            std::strerror(errno));
  }
}

// The window's rate goes to each of its iterations, to the progress line and to the .jsonl
// line of its last iteration: one number for all three.
void ProgressLog::close_window(Clock::time_point now) {
  if (window_.empty()) return;
  double wall = std::chrono::duration<double>(now - window_start_).count();
  for (int64_t k : window_) wall -= complete_[k].eval_s;  // training's rate: evaluations out
  const auto n = static_cast<double>(window_.size());
  const double rate = wall > 0 ? static_cast<double>(o_.mini_batch) * n / wall : 0;
  const double ms = wall * 1000 / n;
  for (int64_t k : window_) {
    complete_[k].samples_per_s = rate;
    complete_[k].ms_per_iteration = ms;
  }
  const JobMetrics last = complete_[window_.back()];
  // An evaluation inside the window gets a .jsonl line of its own, with the window's rate.
  for (int64_t k : window_) {
    if (k != last.iteration && complete_[k].eval_loss) write_jsonl(complete_[k]);
  }
  if (o_.metrics_out.empty() || is_jsonl(o_.metrics_out)) {
    for (int64_t k : window_) complete_.erase(k);
  }
  window_.clear();
  window_start_ = now;
  window_rates_.add(rate);
  write_jsonl(last);
  // The same numbers to TensorBoard; optional ones only when the line has them.
  std::array<TensorBoardScalar, 5> scalars;
  size_t used = 0;
  scalars[used++] = {"train/loss", last.loss};
  if (last.lr) scalars[used++] = {"train/lr", *last.lr};
  if (last.grad_norm) scalars[used++] = {"train/grad_norm", *last.grad_norm};
  scalars[used++] = {"train/samples_per_s", last.samples_per_s};
  scalars[used++] = {"train/ms_per_iteration", last.ms_per_iteration};
  write_tensorboard(last.iteration, {scalars.data(), used});
  // Seconds per iteration for the ETA: measured between completions once there are two, so
  // that set-up time does not count.
  const double per_iteration = done_ > 1
                                   ? std::chrono::duration<double>(now - first_done_).count() /
                                         static_cast<double>(done_ - 1)
                                   : last.time_s;
  const int64_t k = last.iteration;
  const double eta =
      per_iteration * static_cast<double>(std::max<int64_t>(0, o_.iterations - 1 - k));
  std::string extra = fmt::format("{:.1f} ms/iteration", last.ms_per_iteration);
  if (last.lr) extra += fmt::format(", lr {:.4g}", *last.lr);
  if (last.grad_norm) extra += fmt::format(", grad norm {:.4g}", *last.grad_norm);
  if (o_.predicted_samples_per_s > 0) {
    extra += fmt::format(", predicted {:.1f} samples/s", o_.predicted_samples_per_s);
  }
  log::get("exec")->info("iteration {}: loss {:.6f}, {:.1f} samples/s, {} of {} done, ETA {} ({})",
                         k, last.loss, rate, k + 1, o_.iterations, format_duration(eta), extra);
}

Status ProgressLog::write_metrics() const {
  if (o_.metrics_out.empty() || is_jsonl(o_.metrics_out)) return ok_status();
  std::vector<JobMetrics> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out = kept_;
    // An open window's iterations get its rate so far (they are rewritten once it closes).
    const double open_start = seconds_since_start(window_start_);
    for (const auto& [k, m] : complete_) out.push_back(m);
    if (!window_.empty()) {
      const double wall = complete_.at(window_.back()).elapsed_s - open_start;
      const auto n = static_cast<double>(window_.size());
      for (size_t i = out.size() - window_.size(); i < out.size(); ++i) {
        out[i].samples_per_s = wall > 0 ? static_cast<double>(o_.mini_batch) * n / wall : 0;
        out[i].ms_per_iteration = wall * 1000 / n;
      }
    }
  }
  return model::write_file_atomic(o_.metrics_out, metrics_file_json(out));
}

void ProgressLog::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!window_.empty()) {
    // The window closes at its last iteration's completion, not now.
    const double at = complete_.at(window_.back()).elapsed_s;
    close_window(start_ +
                 std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at)));
  }
  log::get("exec")->info("{}", summary_locked());
}

std::string ProgressLog::summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  return summary_locked();
}

size_t ProgressLog::retained() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size() + complete_.size() + window_.size() + window_rates_.stored();
}

std::string ProgressLog::summary_locked() const {
  const double mean = window_rates_.mean();
  std::string text = fmt::format(
      "summary: {} iterations, {:.1f} samples/s mean, {:.1f} p50 over {} logged windows", done_,
      mean, window_rates_.median(), window_rates_.count());
  if (o_.predicted_samples_per_s > 0) {
    text += fmt::format("; predicted {:.1f} samples/s, measured (mean) / predicted = {:.2f}",
                        o_.predicted_samples_per_s, mean / o_.predicted_samples_per_s);
  } else {
    text += "; the plan has no predicted rate";
  }
  return text;
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

bool is_jsonl(const std::string& path) {
  return path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
}

namespace {

void write_entry(JsonWriter& w, const JobMetrics& m) {
  w.begin_object().field("iteration", m.iteration).field("loss", m.loss);
  if (m.lr) w.field("lr", *m.lr);
  if (m.grad_norm) w.field("grad_norm", *m.grad_norm);
  if (m.eval_loss) w.field("eval_loss", *m.eval_loss);
  w.field("time_s", m.time_s)
      .field("samples_per_s", m.samples_per_s)
      .field("ms_per_iteration", m.ms_per_iteration)
      .field("elapsed_s", m.elapsed_s)
      .end_object();
}

// A parsed entry; nullopt when it has no iteration.
std::optional<JobMetrics> from_record(const graphpipe::v1::MetricsRecord& r) {
  if (!r.has_iteration()) return std::nullopt;
  JobMetrics m;
  m.iteration = r.iteration();
  m.loss = r.has_loss() ? r.loss() : std::nan("");  // null: it was not finite
  if (r.has_lr()) m.lr = r.lr();
  if (r.has_grad_norm()) m.grad_norm = r.grad_norm();
  if (r.has_eval_loss()) m.eval_loss = r.eval_loss();
  m.time_s = r.time_s();
  m.samples_per_s = r.samples_per_s();
  m.ms_per_iteration = r.ms_per_iteration();
  m.elapsed_s = r.elapsed_s();
  return m;
}

// Protobuf's JSON parser (a real one: any spacing, key order, `jq -c` output); fields this
// executor does not know are ignored, so that files may carry more.
Status parse_json(std::string_view text, google::protobuf::Message* msg) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto st = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(text.data(), text.size()), msg, options);
  if (st.ok()) return ok_status();
  // The parser's first line says what is wrong; the rest quotes the text with a caret.
  const std::string why(st.message());
  return invalid_argument(why.substr(0, why.find('\n')));
}

Status refuse(const std::string& where, const std::string& why) {
  return invalid_argument("--metrics-out " + where + ": " + why +
                          "; refusing to resume over it (move it away to start a new one)");
}

}  // namespace

std::string metrics_line(const JobMetrics& m) {
  JsonWriter w;
  write_entry(w, m);
  return w.str();
}

std::string metrics_file_json(const std::vector<JobMetrics>& entries) {
  JsonWriter w(/*pretty=*/true);
  w.begin_object().key("iterations").begin_array();
  for (const auto& m : entries) write_entry(w, m);
  w.end_array().end_object();
  return w.str() + "\n";
}

Result<std::vector<JobMetrics>> parse_metrics(const std::string& path, const std::string& text) {
  std::vector<JobMetrics> out;
  if (!is_jsonl(path)) {
    graphpipe::v1::MetricsFile file;
    if (Status st = parse_json(text, &file); !st.ok()) {
      return refuse(path, "not a metrics file: " + st.message());
    }
    for (int i = 0; i < file.iterations_size(); ++i) {
      auto m = from_record(file.iterations(i));
      if (!m) return refuse(path, "iterations[" + std::to_string(i) + "] has no \"iteration\"");
      out.push_back(*m);
    }
    return out;
  }
  size_t pos = 0;
  for (int line = 1; pos < text.size(); ++line) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    const std::string_view l(text.data() + pos, end - pos);
    pos = end + 1;
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    graphpipe::v1::MetricsRecord record;
    if (Status st = parse_json(l, &record); !st.ok()) {
      return refuse(path + " line " + std::to_string(line), "not a metrics entry: " + st.message());
    }
    auto m = from_record(record);
    if (!m) return refuse(path + " line " + std::to_string(line), "no \"iteration\"");
    out.push_back(*m);
  }
  return out;
}

Result<std::vector<JobMetrics>> read_metrics_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::vector<JobMetrics>{};
  GP_ASSIGN_OR_RETURN(const std::string text, model::read_file(path));
  return parse_metrics(path, text);
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
