// What rank 0 writes about a job: progress lines, the metrics file (live .jsonl or .json), the
// merged trace, the failure verdict; and the checks that those paths can be written before
// training starts.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/optimizer.h"
#include "gp/exec/rank_runner.h"
#include "gp/exec/reference_trainer.h"
#include "gp/model/graph.h"
#include "graphpipe/v1/executor.pb.h"
#include "graphpipe/v1/plan.pb.h"
#include "tensorboard.h"

namespace gp::exec::daemon {

// Ranks that compute a loss: every replica of a stage holding a loss operator.
int count_loss_ranks(const graphpipe::v1::Plan& plan, const model::Graph& graph);

// One iteration of a job's metrics, as --metrics-out holds it (MetricsRecord in executor.proto).
// samples_per_s and ms_per_iteration are of the logging window the iteration belongs to: the
// iterations completed since the previous progress line, over the wall time between the two.
struct JobMetrics {
  int64_t iteration = 0;
  double loss = 0;  // mean per sample; non-finite ones are written as null
  std::optional<double> lr;
  std::optional<double> grad_norm;  // only with gradient clipping (the clip reduces it)
  double time_s = 0;                // the iteration's own time on the rank that reported it
  double samples_per_s = 0;
  double ms_per_iteration = 0;
  double elapsed_s = 0;  // from the start of this run's training to the iteration's completion
  std::optional<double> eval_loss;  // --eval-data: the held-out mean loss after the iteration
  double eval_s = 0;  // the evaluation's time (the slowest rank's), not counted as training's
};

// A .jsonl metrics file holds one line per logged iteration, appended as the job runs; any
// other name holds {"iterations": [...]}, one entry per iteration, replaced atomically.
bool is_jsonl(const std::string& path);
// One compact line (no newline); the entries of a .json file.
std::string metrics_line(const JobMetrics& m);
std::string metrics_file_json(const std::vector<JobMetrics>& entries);
// The entries of `text` (the format `path`'s name says), parsed as JSON: anything that does not
// parse, or an entry without an iteration, is refused naming `path` (and the line of a .jsonl).
Result<std::vector<JobMetrics>> parse_metrics(const std::string& path, const std::string& text);
// The entries of the file at `path`; none when it does not exist.
Result<std::vector<JobMetrics>> read_metrics_file(const std::string& path);

// The samples/s of a job's logged windows: count, mean and median in bounded memory (one number
// per window, kept for a job's whole life, would grow without end). The median is exact up to
// kExact windows; past that it comes from buckets 0.1% wide, so it is within 0.1%.
class RateSummary {
 public:
  static constexpr size_t kExact = 4096;
  void add(double rate);
  int64_t count() const { return count_; }
  double mean() const { return count_ > 0 ? sum_ / static_cast<double>(count_) : 0; }
  double median() const;
  // Numbers held (tests: stays bounded).
  size_t stored() const { return exact_.size() + buckets_.size(); }

 private:
  void add_to_buckets(double rate);
  int64_t count_ = 0;
  double sum_ = 0;
  std::vector<double> exact_;           // every rate while there are at most kExact
  std::map<int64_t, int64_t> buckets_;  // then: floor(log(rate) / log(1.001)) -> windows
};

struct ProgressOptions {
  int64_t mini_batch = 0;
  int loss_ranks = 0;  // ranks whose reports make an iteration complete
  int iterations = 0;
  int log_every = 1;
  graphpipe::v1::TrainingConfig training;  // the learning rate of each iteration
  double predicted_samples_per_s = 0;      // the plan's prediction (0: none)
  std::string metrics_out;                 // "" for none
  std::string tensorboard;   // --tensorboard: a directory for event files of the same lines ("")
  int64_t eval_samples = 0;  // --eval-data: the held-out samples each evaluation reads (0: none)
};

// Rank 0 (and `local`): the loss of each iteration once every rank with a loss has reported it
// (the coordinator calls `add` from its RPC threads), a progress line per --log-every of them and
// the metrics file. Both are written from the same window, so they cannot disagree.
class ProgressLog {
 public:
  explicit ProgressLog(ProgressOptions options);
  ~ProgressLog();
  ProgressLog(const ProgressLog&) = delete;
  ProgressLog& operator=(const ProgressLog&) = delete;

  // Before training: keeps the entries of an existing --metrics-out before `first_iteration`
  // (a resumed run appends to them; a file that does not parse is refused, not dropped), and
  // opens a .jsonl file for appending with those lines only; starts a new --tensorboard event
  // file (refused when its directory cannot be created or written).
  Status open(int64_t first_iteration);
  // Training starts now: the first window's and elapsed_s's origin.
  void start();
  void add(const graphpipe::v1::ReportMetricsRequest& report);
  // A .json file: the kept entries and this run's, replaced atomically (checkpoints, exit); a
  // .jsonl file is already up to date.
  Status write_metrics() const;
  // The end of the run: closes a window left open (a stop between progress lines) and logs the
  // summary: iterations, mean and median samples/s over the windows, predicted vs measured.
  void finish();
  // The summary line finish() logs (tests).
  std::string summary() const;
  // Per-iteration and per-window records held (tests: without a .json file it stays bounded
  // however many iterations run).
  size_t retained() const;

 private:
  struct Pending {
    std::map<int, double> loss_by_rank;  // summed in rank order, whatever order reports come in
    double time_s = 0;
    std::optional<double> grad_norm;
    std::map<int, double> eval_by_rank;  // the loss ranks' parts of the held-out loss
    double eval_s = 0;
  };
  static std::string format_duration(double s);
  double seconds_since_start(std::chrono::steady_clock::time_point t) const;
  void complete(int64_t k, const Pending& p, std::chrono::steady_clock::time_point now);
  void close_window(std::chrono::steady_clock::time_point now);
  void write_jsonl(const JobMetrics& m);  // one .jsonl line, when the file is one
  // Event-file scalars, with --tensorboard (a failure is said once; the run goes on).
  void write_tensorboard(int64_t iteration, std::span<const TensorBoardScalar> scalars);
  std::string summary_locked() const;

  const ProgressOptions o_;
  std::optional<Optimizer> optimizer_;  // the learning rate of each step (none: not reported)
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point window_start_;
  std::chrono::steady_clock::time_point first_done_;
  std::map<int64_t, Pending> pending_;
  std::vector<JobMetrics> kept_;  // an earlier run's entries, before first_iteration
  // This run's: every iteration for a .json file, else those of the open window (a long run's
  // history is in the .jsonl file, not in memory).
  std::map<int64_t, JobMetrics> complete_;
  int64_t last_complete_ = -1;   // completions come in iteration order
  std::vector<int64_t> window_;  // the open window's iterations
  RateSummary window_rates_;     // samples/s of every closed window
  int64_t done_ = 0;
  std::FILE* jsonl_ = nullptr;
  bool jsonl_failed_ = false;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // an event per logged window
  bool tensorboard_failed_ = false;
};

// Fails now, not after training, when `path` cannot be written.
Status check_writable(const std::string& flag, const std::string& path);

// This rank's part of the measured trace, and rank 0's merge of every part into one trace.
Status write_trace_part(const std::string& path, const std::vector<TraceEvent>& events);
Status merge_trace(const graphpipe::v1::Plan& plan, int world_size, const std::string& path);

// Rank 0, when the job ended in an abort: "failed_rank=R\nreason=...\n".
Status write_verdict(const std::string& path, const graphpipe::v1::GetStatusResponse& status);

}  // namespace gp::exec::daemon
