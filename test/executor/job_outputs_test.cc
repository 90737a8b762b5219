// Rank 0's metrics and progress lines (job/job_outputs.h): the live .jsonl file, the .json file
// replaced at checkpoints and exit, resuming with a real JSON parser, the windowed rate that the
// progress line and the file share, and the closing summary.
#include "job/job_outputs.h"

#include <spdlog/sinks/ostream_sink.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "../support/scratch_dir.h"
#include "gp/common/logging.h"
#include "gp/model/model_io.h"

namespace gp::exec::daemon {
namespace {

namespace fs = std::filesystem;
namespace pb = graphpipe::v1;

std::string temp_path(const std::string& name) {
  static const testing::ScratchDir scratch("gp-job-outputs");
  fs::create_directories(scratch.path());
  return (scratch.path() / name).string();
}

std::string read(const std::string& path) { return *model::read_file(path); }

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(read(path));
  for (std::string l; std::getline(in, l);) {
    if (!l.empty()) out.push_back(l);
  }
  return out;
}

JobMetrics entry(int64_t iteration, double loss) {
  JobMetrics m;
  m.iteration = iteration;
  m.loss = loss;
  return m;
}

ProgressOptions options(const std::string& metrics_out, int iterations, int log_every) {
  ProgressOptions o;
  o.mini_batch = 16;
  o.loss_ranks = 1;
  o.iterations = iterations;
  o.log_every = log_every;
  o.training.set_optimizer(pb::OPTIMIZER_KIND_SGD);
  o.training.set_learning_rate(0.05);
  o.predicted_samples_per_s = 1000;
  o.metrics_out = metrics_out;
  return o;
}

void report(ProgressLog& log, int64_t iteration, double loss_sum, double grad_norm = -1) {
  pb::ReportMetricsRequest r;
  r.set_rank(0);
  auto* m = r.add_iterations();
  m->set_iteration(iteration);
  m->set_loss(loss_sum);
  m->set_time_s(0.001);
  if (grad_norm >= 0) m->set_grad_norm(grad_norm);
  log.add(r);
}

// What the "exec" logger prints while it lives.
class CapturedLog {
 public:
  CapturedLog() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    log::get("exec")->sinks().push_back(sink_);
    log::get("exec")->set_level(spdlog::level::info);
  }
  ~CapturedLog() {
    auto& sinks = log::get("exec")->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

TEST_CASE("a .jsonl metrics file gets one line per logged iteration as the iterations complete") {
  const std::string path = temp_path("live.jsonl");
  ProgressLog log(options(path, 6, 2));
  REQUIRE(log.open(0).ok());
  log.start();
  report(log, 0, 32, 1.5);
  CHECK(lines_of(path).empty());
  report(log, 1, 16, 1.25);
  REQUIRE(lines_of(path).size() == 1);  // written before the run ends
  report(log, 2, 8);
  report(log, 3, 4);
  const auto lines = lines_of(path);
  REQUIRE(lines.size() == 2);
  auto parsed = parse_metrics(path, read(path));
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 2);
  const JobMetrics& a = (*parsed)[0];
  CHECK(a.iteration == 1);
  CHECK(a.loss == 1.0);  // 16 over a mini-batch of 16
  REQUIRE(a.lr.has_value());
  CHECK(*a.lr == Approx(0.05));
  REQUIRE(a.grad_norm.has_value());
  CHECK(*a.grad_norm == 1.25);
  CHECK(!(*parsed)[1].grad_norm.has_value());  // not reported: not written
  for (const auto& m : *parsed) {
    CHECK(m.samples_per_s > 0);
    // Two iterations of 16 samples per window: the rate and the mean time are the same window.
    CHECK(m.samples_per_s == Approx(16 * 1000.0 / m.ms_per_iteration).epsilon(1e-6));
    CHECK(m.elapsed_s >= 0);
  }
  CHECK((*parsed)[1].elapsed_s >= (*parsed)[0].elapsed_s);
}

TEST_CASE("the progress line shows the same windowed samples/s as the metrics entry") {
  const std::string path = temp_path("same.jsonl");
  CapturedLog captured;
  ProgressLog log(options(path, 4, 2));
  REQUIRE(log.open(0).ok());
  log.start();
  for (int k = 0; k < 4; ++k) report(log, k, 16, 2.0);
  const std::string text = captured.text();
  auto parsed = parse_metrics(path, read(path));
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 2);
  for (const auto& m : *parsed) {
    const std::regex line(
        "iteration " + std::to_string(m.iteration) +
        ": loss [0-9.]+, ([0-9.]+) samples/s, [0-9]+ of 4 done, ETA [^(]*\\(([0-9.]+) "
        "ms/iteration, lr 0.05, grad norm 2, predicted 1000.0 samples/s\\)");
    std::smatch match;
    REQUIRE(std::regex_search(text, match, line));
    CHECK(match[1].str() == fmt::format("{:.1f}", m.samples_per_s));
    CHECK(match[2].str() == fmt::format("{:.1f}", m.ms_per_iteration));
  }
  CHECK(text.find("iteration 0: loss") == std::string::npos);  // not a logged iteration
}

TEST_CASE("the summary gives iterations, mean and median samples/s and predicted vs measured") {
  CapturedLog captured;
  ProgressLog log(options("", 5, 2));
  REQUIRE(log.open(0).ok());
  log.start();
  for (int k = 0; k < 5; ++k) report(log, k, 16);
  log.finish();
  const std::string summary = log.summary();
  CHECK(summary.find("summary: 5 iterations, ") == 0);
  CHECK(summary.find(" p50 over 3 logged windows; predicted 1000.0 samples/s, measured (mean) / "
                     "predicted = ") != std::string::npos);
  CHECK(captured.text().find(summary) != std::string::npos);
}

TEST_CASE("the windows' median is exact for a few windows and within 0.1% for many") {
  RateSummary few;
  for (double r : {1.0, 5.0, 3.0, 2.0}) few.add(r);
  CHECK(few.median() == 2.5);
  CHECK(few.mean() == 2.75);
  few.add(4.0);
  CHECK(few.median() == 3.0);

  // A long job: its windows' rates in bounded memory, not one number per window.
  RateSummary many;
  std::vector<double> rates;
  uint64_t x = 12345;
  double sum = 0;
  for (int i = 0; i < 200000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const double r = 1000.0 + static_cast<double>(x >> 40) / static_cast<double>(1 << 24) * 2000.0;
    rates.push_back(r);
    sum += r;
    many.add(r);
  }
  std::sort(rates.begin(), rates.end());
  const double exact = (rates[99999] + rates[100000]) / 2;
  CHECK(many.count() == 200000);
  CHECK(std::abs(many.mean() - sum / 200000) < 1e-6 * many.mean());
  CHECK(std::abs(many.median() - exact) < 1e-3 * exact);
  // Rates between 1000 and 3000: ln(3) / ln(1.001) buckets, about 1100.
  CHECK(many.stored() < 1200);
}

TEST_CASE("without a .json metrics file, rank 0 holds a bounded number of records however long") {
  auto logger = log::get("exec");
  const auto level = logger->level();
  logger->set_level(spdlog::level::warn);  // 20,000 progress lines would only be noise
  ProgressLog log(options("", 200000, 10));
  REQUIRE(log.open(0).ok());
  log.start();
  for (int k = 0; k < 200000; ++k) report(log, k, 16);
  log.finish();
  logger->set_level(level);
  // Before: one rate per window (20,000) stayed for the life of the job.
  CHECK(log.retained() < 10000);
  CHECK(log.summary().find("summary: 200000 iterations") == 0);
  CHECK(log.summary().find(" over 20000 logged windows") != std::string::npos);

  // A .json file is rewritten whole, so by design its entries stay.
  ProgressLog json(options(temp_path("long.json"), 1000, 10));
  REQUIRE(json.open(0).ok());
  json.start();
  for (int k = 0; k < 1000; ++k) report(json, k, 16);
  CHECK(json.retained() >= 1000);
}

TEST_CASE("a stop between progress lines closes the open window at finish") {
  const std::string path = temp_path("stop.jsonl");
  ProgressLog log(options(path, 100, 10));
  REQUIRE(log.open(0).ok());
  log.start();
  for (int k = 0; k < 13; ++k) report(log, k, 16);
  REQUIRE(lines_of(path).size() == 1);
  log.finish();
  auto parsed = parse_metrics(path, read(path));
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 2);
  CHECK((*parsed)[1].iteration == 12);
  CHECK(log.summary().find("summary: 13 iterations") == 0);
}

// The file: `jq -c` had compacted 6,000 iterations onto one line; the substring scan
// kept 100 of them.
TEST_CASE("a compacted .json metrics file resumes without losing entries") {
  const std::string path = temp_path("compact.json");
  std::string text = "{\"iterations\":[";
  for (int k = 0; k < 6000; ++k) {
    text += (k > 0 ? "," : "") + std::string("{\"iteration\":") + std::to_string(k) +
            ",\"loss\":" + std::to_string(2.0 + k * 1e-4) +
            ",\"time_s\":0.01,\"samples_per_s\":1600}";
  }
  text += "]}\n";
  REQUIRE(model::write_file_atomic(path, text).ok());
  ProgressLog log(options(path, 6004, 1));
  REQUIRE(log.open(6000).ok());
  log.start();
  for (int k = 6000; k < 6004; ++k) report(log, k, 16);
  log.finish();
  REQUIRE(log.write_metrics().ok());
  auto parsed = read_metrics_file(path);
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 6004);
  for (size_t i = 0; i < parsed->size(); ++i) CHECK((*parsed)[i].iteration == int64_t(i));
  CHECK((*parsed)[5999].loss == Approx(2.5999));
  CHECK((*parsed)[6000].loss == 1.0);
  // The rewritten file is pretty-printed and every entry has the documented keys.
  CHECK(read(path).find("\"ms_per_iteration\": ") != std::string::npos);
}

TEST_CASE("resuming keeps the .json entries before the resumed iteration and drops later ones") {
  const std::string path = temp_path("resume.json");
  std::vector<JobMetrics> old;
  for (int k = 0; k < 8; ++k)
    old.push_back({k, 3.0, 0.1, std::nullopt, 0.01, 1600, 10, 0.01 * k, std::nullopt});
  old[2].loss = std::nan("");  // written as null
  REQUIRE(model::write_file_atomic(path, metrics_file_json(old)).ok());
  ProgressLog log(options(path, 6, 1));
  REQUIRE(log.open(4).ok());
  // The checkpoint's write happens before the run's iterations: the kept ones are all there is.
  REQUIRE(log.write_metrics().ok());
  auto parsed = read_metrics_file(path);
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 4);
  CHECK(std::isnan((*parsed)[2].loss));
  CHECK((*parsed)[3].lr == 0.1);
}

TEST_CASE("resuming a .jsonl keeps its lines up to the resumed iteration and appends after them") {
  const std::string path = temp_path("resume.jsonl");
  std::string text;
  for (int k = 1; k < 10; k += 2)
    text += metrics_line(entry(k, 2.0)) + "\n";  // iterations 1 3 5 7 9
  REQUIRE(model::write_file_atomic(path, text).ok());
  ProgressLog log(options(path, 8, 2));
  REQUIRE(log.open(4).ok());  // resumed after the checkpoint of iteration 3
  CHECK(lines_of(path).size() == 2);
  log.start();
  for (int k = 4; k < 8; ++k) report(log, k, 16);
  auto parsed = read_metrics_file(path);
  REQUIRE(parsed.ok());
  std::vector<int64_t> iterations;
  for (const auto& m : *parsed) iterations.push_back(m.iteration);
  CHECK(iterations == std::vector<int64_t>{1, 3, 5, 7});
}

TEST_CASE("a metrics file that does not parse is refused on resume, naming it, and kept") {
  const std::string json = temp_path("garbage.json");
  REQUIRE(model::write_file_atomic(json,
                                   "{\"iterations\": [{\"iteration\": 0, \"loss\": 1.0},\n"
                                   "  {\"iteration\": 1, \"lo")
              .ok());
  ProgressLog a(options(json, 4, 1));
  const Status st = a.open(2);
  REQUIRE(!st.ok());
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("--metrics-out " + json + ": not a metrics file") == 0);
  CHECK(st.message().find('\n') == std::string::npos);  // one line, not the parser's caret
  CHECK(read(json).find("\"lo") != std::string::npos);  // nothing dropped

  const std::string jsonl = temp_path("garbage.jsonl");
  REQUIRE(model::write_file_atomic(jsonl, metrics_line(entry(0, 1.0)) + "\n" +
                                              metrics_line(entry(1, 1.0)) + "\nnot json\n")
              .ok());
  ProgressLog b(options(jsonl, 4, 1));
  const Status st2 = b.open(2);
  REQUIRE(!st2.ok());
  CHECK(st2.message().find("--metrics-out " + jsonl + " line 3: not a metrics entry") == 0);
  CHECK(lines_of(jsonl).size() == 3);

  const std::string no_iteration = temp_path("no-iteration.jsonl");
  REQUIRE(model::write_file_atomic(no_iteration, "{\"loss\": 1.0}\n").ok());
  ProgressLog c(options(no_iteration, 4, 1));
  const Status st3 = c.open(2);
  REQUIRE(!st3.ok());
  CHECK(st3.message().find("line 1: no \"iteration\"") != std::string::npos);
}

TEST_CASE("a run that does not resume starts a new .jsonl, and a missing file resumes empty") {
  const std::string path = temp_path("fresh.jsonl");
  REQUIRE(model::write_file_atomic(path, "stale, not even JSON\n").ok());
  ProgressLog a(options(path, 2, 1));
  REQUIRE(a.open(0).ok());  // not resuming: the old file is not read
  CHECK(read(path).empty());
  const std::string missing = temp_path("missing.json");
  fs::remove(missing);
  ProgressLog b(options(missing, 2, 1));
  CHECK(b.open(5).ok());
}

}  // namespace
TEST_CASE("held-out losses from several loss ranks add up, and get a line and a .jsonl entry") {
  const std::string path = temp_path("eval.jsonl");
  fs::remove(path);
  ProgressOptions o = options(path, 6, 4);
  o.loss_ranks = 2;
  o.eval_samples = 32;
  ProgressLog log(o);
  REQUIRE(log.open(0).ok());
  CapturedLog captured;
  log.start();
  // Iteration 2 (not a window's end) carries each loss rank's part of the held-out loss.
  for (int64_t it = 0; it < 4; ++it) {
    for (int rank : {1, 2}) {
      pb::ReportMetricsRequest r;
      r.set_rank(rank);
      auto* m = r.add_iterations();
      m->set_iteration(it);
      m->set_loss(8);
      m->set_time_s(0.001);
      if (it == 2) m->set_eval_loss(rank == 1 ? 0.25 : 0.5);
      log.add(r);
    }
  }
  const auto lines = lines_of(path);
  REQUIRE(lines.size() == 2);  // iteration 2 on its own, then the window's end, 3
  CHECK(lines[0].find("\"iteration\":2") != std::string::npos);
  CHECK(lines[0].find("\"eval_loss\":0.75") != std::string::npos);
  CHECK(lines[1].find("\"iteration\":3") != std::string::npos);
  CHECK(lines[1].find("eval_loss") == std::string::npos);
  CHECK(captured.text().find("iteration 2: held-out loss 0.750000 (32 samples)") !=
        std::string::npos);
  // A resumed run reads the entry back whole.
  auto parsed = parse_metrics(path, read(path));
  REQUIRE(parsed.ok());
  REQUIRE(parsed->size() == 2);
  REQUIRE((*parsed)[0].eval_loss.has_value());
  CHECK(*(*parsed)[0].eval_loss == 0.75);
  CHECK_FALSE((*parsed)[1].eval_loss.has_value());
  // Written when its window closed, the evaluation's line has the window's training rate.
  CHECK((*parsed)[0].samples_per_s > 0);
  CHECK((*parsed)[0].samples_per_s == (*parsed)[1].samples_per_s);
}

}  // namespace gp::exec::daemon
