// What rank 0 writes about a job: progress lines, the metrics file, the merged trace, the
// failure verdict; and the checks that those paths can be written before training starts.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/rank_runner.h"
#include "gp/exec/reference_trainer.h"
#include "gp/model/graph.h"
#include "graphpipe/v1/executor.pb.h"
#include "graphpipe/v1/plan.pb.h"

namespace gp::exec::daemon {

// Ranks that compute a loss: every replica of a stage holding a loss operator.
int count_loss_ranks(const graphpipe::v1::Plan& plan, const model::Graph& graph);

// Rank 0: the loss of each iteration once every rank with a loss has reported it (the
// coordinator calls `add` from its RPC threads), and a progress line per --log-every of them.
// The metrics file is written from the same sums, so the two cannot disagree.
class ProgressLog {
 public:
  ProgressLog(int64_t mini_batch, int loss_ranks, int iterations, int log_every)
      : mini_batch_(mini_batch),
        iterations_(iterations),
        log_every_(log_every),
        loss_ranks_(loss_ranks) {}

  void add(const graphpipe::v1::ReportMetricsRequest& report);
  // Mean loss per sample of every iteration that each loss rank reported, by iteration.
  std::map<int64_t, double> complete_losses() const;

 private:
  struct Pending {
    std::map<int, double> loss_by_rank;  // summed in rank order, whatever order reports come in
    double time_s = 0;
  };
  static std::string format_duration(double s);

  const int64_t mini_batch_;
  const int iterations_;
  const int log_every_;
  const int loss_ranks_;
  std::chrono::steady_clock::time_point first_done_;
  mutable std::mutex mu_;
  std::map<int64_t, Pending> pending_;
  std::map<int64_t, double> complete_;
  int64_t done_ = 0;
};

// Entries of a metrics file this executor wrote (metrics_json's layout).
std::vector<IterationMetrics> read_metrics(const std::string& text);

// The iterations this run trained whose loss every loss rank reported (`losses`, from
// ProgressLog): first_iteration .. first_iteration + time_s.size() - 1 at most. When the job
// resumed, the earlier iterations of an existing metrics file are kept in front, so restarts
// append.
Status write_job_metrics(const std::map<int64_t, double>& losses, int64_t mini_batch,
                         int first_iteration, const std::vector<double>& time_s,
                         const std::string& path);

// Fails now, not after training, when `path` cannot be written.
Status check_writable(const std::string& flag, const std::string& path);

// This rank's part of the measured trace, and rank 0's merge of every part into one trace.
Status write_trace_part(const std::string& path, const std::vector<TraceEvent>& events);
Status merge_trace(const graphpipe::v1::Plan& plan, int world_size, const std::string& path);

// Rank 0, when the job ended in an abort: "failed_rank=R\nreason=...\n".
Status write_verdict(const std::string& path, const graphpipe::v1::GetStatusResponse& status);

}  // namespace gp::exec::daemon
