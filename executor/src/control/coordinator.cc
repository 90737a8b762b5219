// The coordinator: CoordinatorCore holds the job's control state behind one mutex and does the
// work (gp::Status in, gp::Status out); ExecutorService is the thin gRPC layer that checks the
// token, calls the core and converts the status by cast (style guide §5.6, §5.12).
#include "control/coordinator.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string_view>
#include <thread>
#include <utility>

#include "control/key_store.h"
#include "control/server_guard.h"
#include "gp/common/json_writer.h"
#include "gp/common/logging.h"
#include "gp/common/steady_clock.h"
#include "gp/common/util.h"
#include "gp/model/model_io.h"
#include "gp/plan/plan_util.h"
#include "graphpipe/v1/executor.grpc.pb.h"

namespace gp::exec {
namespace {

namespace pb = graphpipe::v1;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Blocked handlers re-check client cancellation this often.
constexpr milliseconds kPollInterval{50};
// A blocked Register/Barrier answers this much before the call's own deadline, so that its
// DEADLINE_EXCEEDED naming the missing ranks reaches the client before the client gives up.
constexpr milliseconds kDeadlineMargin{100};
// Responses: plans embed the model graph; gRPC's 4 MiB default is too small for large models.
constexpr int kMaxResponseBytes = 512 * 1024 * 1024;
// Requests are small but for rank 0's Register, which carries one NCCL unique id (128 bytes)
// per communicator of the plan: at most one per pair of ranks exchanging messages and one per
// data-parallel stage, so this much per plan message and stage on top of a base.
constexpr int64_t kBaseRequestBytes = 4 << 20;
constexpr int64_t kRequestBytesPerPlanEntry = 256;
// The transport's quota: twice the largest request, and this much per rank for its calls.
constexpr int64_t kBaseBufferBytes = 32 << 20;
constexpr int64_t kBufferBytesPerRank = 32 << 10;
// Samples per op and direction a rank may report (RankTimings; ranks keep 16).
constexpr int kMaxTimingSamples = 64;
constexpr int kMaxTimingTransfers = 1 << 16;  // sends and receives of one iteration

int64_t to_ms(Clock::duration d) { return std::chrono::duration_cast<milliseconds>(d).count(); }

int64_t unix_time_ms_now() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "rank 2" or "ranks 2, 5".
std::string ranks_phrase(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

// The steady-clock point at which a blocked call gives up: the call's deadline less a margin,
// and no later than `timeout_ms` from now when that is positive. Clock::time_point::max(): never.
Clock::time_point wait_deadline(const grpc::ServerContext& ctx, int64_t timeout_ms) {
  const Clock::time_point now = Clock::now();
  Clock::time_point deadline = Clock::time_point::max();
  const auto call_deadline = ctx.deadline();
  const auto sys_now = std::chrono::system_clock::now();
  // An unset deadline is gpr_inf_future, i.e. a time point far in the future.
  if (call_deadline < sys_now + std::chrono::hours(24 * 365)) {
    const auto remaining =
        std::max(std::chrono::duration_cast<Clock::duration>(call_deadline - sys_now),
                 Clock::duration::zero());
    deadline = now + remaining - std::min<Clock::duration>(kDeadlineMargin, remaining / 4);
  }
  if (timeout_ms > 0) deadline = std::min(deadline, now + milliseconds(timeout_ms));
  return deadline;
}

Status aborted_status(std::string_view context, const std::string& reason) {
  return Status(StatusCode::kAborted, std::string(context) + "job aborted: " + reason);
}

Status shutting_down_status(std::string_view context) {
  return Status(StatusCode::kUnavailable,
                std::string(context) + "the coordinator is shutting down");
}

std::string random_job_id() { return "job-" + random_hex(8); }

// "host" of "host:port" or "[v6]:port".
std::string host_of(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return address;
  return address.substr(0, colon);
}

struct RankRecord {
  bool registered = false;  // accepted; until the world completes, its Register call is pending
  pb::RegisterRequest registration;
  std::string refusal;  // why its last Register was refused, quoted to the ranks waiting for it
  bool has_status = false;
  pb::RankStatus status;  // last report (Heartbeat or ReportStatus)
  std::optional<Clock::time_point> last_heartbeat;
  Clock::time_point liveness_since;  // monitor clock: completion time, then each heartbeat
  bool finished = false;
  // By iteration, the newest kMetricsKept only: status needs the last, and a job's history
  // belongs in --metrics-out, not in rank 0's memory for the life of the job.
  std::map<int64_t, pb::IterationMetrics> metrics;
  int64_t stop_proposal = -1;        // the iteration it finished when it first proposed a stop
  bool told_abort = false;           // it knows the job is aborted (it was told, or it failed)
  Clock::duration heartbeat_gap{0};  // between its last two heartbeats (0: fewer than two)
  bool reported_lost_peer = false;   // it reported FAILED for a peer's sake (see PendingFailure)
};

// A rank reported FAILED because a peer failed it (RankStatus.lost_peer): the verdict waits a
// little, so that the rank that really stopped first is blamed rather than the first neighbour
// to notice. A SIGKILLed or frozen peer stops heartbeating before anyone notices it; ranks that
// merely lost a neighbour keep heartbeating.
struct PendingFailure {
  int rank = -1;  // the first to report
  int lost_peer = -1;
  std::string error;
  Clock::time_point at;
};

// How many iterations apart two ranks can be at most: a stage runs iteration i only with its
// neighbours' tensors of iteration i, so neighbours are at most one apart and any two ranks at
// most the stage graph's diameter (replicas move in step). A plan whose stage graph falls apart
// has no such bound; the number of stages is used then (a rank found past the chosen stop
// reports it).
int64_t max_iteration_skew(const pb::Plan& plan) {
  const int n = plan.stages_size();
  std::vector<std::vector<int>> adj(n);
  for (const auto& e : plan.edges()) {
    if (e.src_stage() < 0 || e.src_stage() >= n || e.dst_stage() < 0 || e.dst_stage() >= n) {
      continue;
    }
    adj[e.src_stage()].push_back(e.dst_stage());
    adj[e.dst_stage()].push_back(e.src_stage());
  }
  int64_t diameter = 0;
  for (int s = 0; s < n; ++s) {
    std::vector<int> dist(n, -1);
    std::vector<int> queue{s};
    dist[s] = 0;
    for (size_t q = 0; q < queue.size(); ++q) {
      for (int v : adj[queue[q]]) {
        if (dist[v] < 0) {
          dist[v] = dist[queue[q]] + 1;
          queue.push_back(v);
        }
      }
    }
    if (static_cast<int>(queue.size()) < n) return n;
    for (int d : dist) diameter = std::max<int64_t>(diameter, d);
  }
  return diameter;
}

struct BarrierState {
  uint64_t generation = 0;  // bumped at each release, so a name can be reused
  std::set<int> arrived;    // waiting now
  std::set<int> gave_up;    // arrived in this generation, then timed out or were cancelled
};

// The job's control state. Every method takes the mutex; blocking methods wait on `cv_`, which
// is notified on every change a waiter may care about (registration, barrier release, finish,
// abort, shutdown).
class CoordinatorCore {
 public:
  CoordinatorCore(const CoordinatorOptions& options, std::string plan_hash, std::string job_id)
      : options_(options),
        plan_hash_(std::move(plan_hash)),
        job_id_(std::move(job_id)),
        ranks_(options.world_size),
        stop_skew_(max_iteration_skew(options.plan)) {
    // Samples each rank trains on per iteration: its replica's slice of every micro-batch.
    samples_of_rank_.assign(options.world_size, 0);
    for (graphpipe::v1::Stage stage : options.plan.stages()) {
      if (stage.device_ranks_size() == 0) continue;
      // A stage without a micro-batch size (hand-made plans) counts as one micro-batch.
      if (stage.micro_batch() <= 0) stage.set_micro_batch(options.plan.mini_batch());
      const int64_t micro_batches = options.plan.mini_batch() / stage.micro_batch();
      for (int j = 0; j < stage.device_ranks_size(); ++j) {
        const int r = stage.device_ranks(j);
        if (r >= 0 && r < options.world_size) {
          const plan::SampleRange slice = plan::replica_samples(stage, j, 0);
          samples_of_rank_[r] = micro_batches * (slice.end - slice.begin);
        }
      }
    }
  }

  ~CoordinatorCore() { stop(); }

  const CoordinatorOptions& options() const { return options_; }
  const std::string& plan_hash() const { return plan_hash_; }
  const std::string& job_id() const { return job_id_; }
  int world() const { return options_.world_size; }

  void start_monitor() {
    monitor_ = std::thread([this] { monitor_loop(); });
  }

  // Wakes every waiter with UNAVAILABLE and joins the monitor. Idempotent.
  void stop() {
    {
      std::lock_guard lock(mu_);
      shutting_down_ = true;
    }
    cv_.notify_all();
    if (monitor_.joinable()) monitor_.join();
  }

  // Messages never name the RPC: the client puts its name in front.
  Status check_rank(int rank) const {
    if (rank < 0 || rank >= world()) {
      return invalid_argument(
          fmt::format("rank {} is out of range, the world has {} ranks", rank, world()));
    }
    return ok_status();
  }

  Result<pb::RegisterResponse> register_rank(const pb::RegisterRequest& req,
                                             Clock::time_point deadline,
                                             const std::function<bool()>& cancelled) {
    const int r = req.rank();
    GP_RETURN_IF_ERROR(check_rank(r));
    if (req.timeout_ms() < 0) {
      return invalid_argument(
          fmt::format("rank {}: timeout_ms = {}, must be >= 0", r, req.timeout_ms()));
    }
    const Clock::time_point start = Clock::now();
    std::unique_lock lock(mu_);
    RankRecord& rec = ranks_[r];
    auto refuse = [&](Status s) {
      rec.refusal = s.message();
      log::get("rpc")->warn("refused registration: {}", s.message());
      return s;
    };
    if (req.world_size() != world()) {
      return refuse(failed_precondition(
          fmt::format("rank {}: world_size {} does not match the coordinator's world_size {}", r,
                      req.world_size(), world())));
    }
    if (req.plan_hash() != plan_hash_) {
      return refuse(failed_precondition(
          fmt::format("rank {}: plan hash {} does not match the coordinator's plan {} — is it the "
                      "same plan file?",
                      r, req.plan_hash().empty() ? "(empty)" : req.plan_hash(), plan_hash_)));
    }
    if (r != 0 && req.nccl_unique_ids_size() > 0) {
      return refuse(invalid_argument(
          fmt::format("rank {}: nccl_unique_ids has {} entries, but only rank 0 hands out NCCL "
                      "ids",
                      r, req.nccl_unique_ids_size())));
    }
    if (aborted_) return aborted_status(fmt::format("rank {}: ", r), abort_reason_);
    if (shutting_down_) return shutting_down_status(fmt::format("rank {}: ", r));
    if (rec.registered) {
      return Status(StatusCode::kAlreadyExists,
                    fmt::format("rank {} is already registered (host '{}', data address '{}'); a "
                                "rank registers once per job",
                                r, rec.registration.host(), rec.registration.data_address()));
    }
    rec.registered = true;
    rec.registration = req;
    rec.refusal.clear();
    ++num_registered_;
    if (num_registered_ == world()) complete_registration_locked();

    // Until the world is complete the registration stays pending; a failed wait withdraws it so
    // that the rank can register again.
    auto withdraw = [&](Status s) {
      if (!registration_complete_) {
        rec.registered = false;
        --num_registered_;
      }
      return s;
    };
    while (true) {
      if (aborted_) {
        return withdraw(aborted_status(fmt::format("rank {}: ", r), abort_reason_));
      }
      if (registration_complete_) {
        pb::RegisterResponse resp;
        for (const std::string& a : data_addresses_) resp.add_data_addresses(a);
        *resp.mutable_nccl_unique_ids() = ranks_[0].registration.nccl_unique_ids();
        resp.set_job_id(job_id_);
        return resp;
      }
      if (shutting_down_) return withdraw(shutting_down_status(fmt::format("rank {}: ", r)));
      if (cancelled()) {
        return withdraw(Status(StatusCode::kCancelled,
                               fmt::format("rank {}: registration cancelled by the client", r)));
      }
      const Clock::time_point now = Clock::now();
      if (now >= deadline) {
        std::vector<int> missing;
        std::string refusals;
        for (int i = 0; i < world(); ++i) {
          if (ranks_[i].registered) continue;
          missing.push_back(i);
          if (!ranks_[i].refusal.empty()) refusals += "; refused: " + ranks_[i].refusal;
        }
        return withdraw(Status(
            StatusCode::kDeadlineExceeded,
            fmt::format("rank {}: registration incomplete after {} ms: {} of {} ranks registered, "
                        "missing {}{}",
                        r, to_ms(now - start), num_registered_, world(), ranks_phrase(missing),
                        refusals)));
      }
      cv_.wait_until(lock, std::min(deadline, now + kPollInterval));
    }
  }

  Status barrier(const pb::BarrierRequest& req, Clock::time_point deadline,
                 const std::function<bool()>& cancelled) {
    const int r = req.rank();
    GP_RETURN_IF_ERROR(check_rank(r));
    if (req.name().empty()) {
      return invalid_argument(fmt::format("rank {}: barrier name is empty", r));
    }
    if (req.timeout_ms() < 0) {
      return invalid_argument(fmt::format("rank {}: barrier '{}': timeout_ms = {}, must be >= 0", r,
                                          req.name(), req.timeout_ms()));
    }
    const std::string context = fmt::format("barrier '{}': rank {}: ", req.name(), r);
    const Clock::time_point start = Clock::now();
    std::unique_lock lock(mu_);
    if (aborted_) return aborted_status(context, abort_reason_);
    if (shutting_down_) return shutting_down_status(context);
    BarrierState& b = barriers_[req.name()];  // std::map: the reference stays valid
    if (b.arrived.count(r)) {
      return Status(StatusCode::kAlreadyExists, context + "already waiting at this barrier");
    }
    const uint64_t generation = b.generation;
    b.arrived.insert(r);
    b.gave_up.erase(r);
    if (static_cast<int>(b.arrived.size()) == world()) {
      ++b.generation;
      b.arrived.clear();
      b.gave_up.clear();
      cv_.notify_all();
      return ok_status();
    }
    auto leave = [&](Status s) {
      b.arrived.erase(r);
      b.gave_up.insert(r);
      return s;
    };
    while (true) {
      if (b.generation != generation) return ok_status();
      if (aborted_) {
        ranks_[r].told_abort = true;
        return leave(aborted_status(context, abort_reason_));
      }
      if (shutting_down_) return leave(shutting_down_status(context));
      if (cancelled()) {
        return leave(Status(StatusCode::kCancelled, context + "cancelled by the client"));
      }
      const Clock::time_point now = Clock::now();
      if (now >= deadline) {
        // Name the ranks that never came first: the ones that came and gave up are a symptom.
        std::vector<int> never_came, gave_up;
        for (int i = 0; i < world(); ++i) {
          if (b.arrived.count(i)) continue;
          (b.gave_up.count(i) ? gave_up : never_came).push_back(i);
        }
        std::string msg =
            context + fmt::format("timed out after {} ms waiting for ", to_ms(now - start));
        msg += never_came.empty() ? ranks_phrase(gave_up) : ranks_phrase(never_came);
        if (!never_came.empty() && !gave_up.empty()) {
          msg += " (" + ranks_phrase(gave_up) + " came but gave up waiting)";
        }
        return leave(Status(StatusCode::kDeadlineExceeded, msg));
      }
      cv_.wait_until(lock, std::min(deadline, now + kPollInterval));
    }
  }

  Result<pb::HeartbeatResponse> heartbeat(const pb::RankStatus& status) {
    GP_RETURN_IF_ERROR(check_rank(status.rank()));
    std::lock_guard lock(mu_);
    RankRecord& rec = ranks_[status.rank()];
    const Clock::time_point now = Clock::now();
    rec.heartbeat_gap = rec.last_heartbeat ? now - *rec.last_heartbeat : Clock::duration::zero();
    rec.last_heartbeat = now;
    rec.liveness_since = now;
    record_status_locked(status);
    if (pending_) resolve_pending_locked(now);
    if (aborted_) {
      rec.told_abort = true;
      cv_.notify_all();
    }
    pb::HeartbeatResponse resp;
    resp.set_abort(aborted_);
    resp.set_abort_reason(abort_reason_);
    resp.set_stop_requested(stop_requested_);
    resp.set_failed_rank(aborted_ ? failed_rank_ : -1);
    return resp;
  }

  Status report_status(const pb::RankStatus& status) {
    GP_RETURN_IF_ERROR(check_rank(status.rank()));
    std::lock_guard lock(mu_);
    record_status_locked(status);
    return ok_status();
  }

  Status report_metrics(const pb::ReportMetricsRequest& req) {
    GP_RETURN_IF_ERROR(check_rank(req.rank()));
    if (req.has_timings()) GP_RETURN_IF_ERROR(check_timings(req.rank(), req.timings()));
    {
      std::lock_guard lock(mu_);
      auto& metrics = ranks_[req.rank()].metrics;
      for (const pb::IterationMetrics& m : req.iterations()) metrics[m.iteration()] = m;
      while (metrics.size() > Coordinator::kMetricsKept) metrics.erase(metrics.begin());
    }
    if (options_.on_metrics) options_.on_metrics(req);  // outside the lock: it may log
    return ok_status();
  }

  // What rank 0's profile trusts of a rank's measured times: ops of the plan's model, bounded
  // windows, finite non-negative times.
  Status check_timings(int rank, const pb::RankTimings& t) const {
    const auto bad = [&](const std::string& what) {
      return invalid_argument(fmt::format("ReportMetrics: rank {}'s timings: {}", rank, what));
    };
    if (t.micro_batch() <= 0) return bad(fmt::format("micro_batch = {}", t.micro_batch()));
    const int ops = options_.plan.model().ops_size();
    for (const pb::OpTimes& op : t.ops()) {
      if (op.op() < 0 || op.op() >= ops) {
        return bad(fmt::format("op = {}, the model has {} ops", op.op(), ops));
      }
      if (op.forward_us_size() > kMaxTimingSamples || op.backward_us_size() > kMaxTimingSamples) {
        return bad(fmt::format("op {}: more than {} samples", op.op(), kMaxTimingSamples));
      }
      for (const auto* samples : {&op.forward_us(), &op.backward_us()}) {
        for (float us : *samples) {
          if (!std::isfinite(us) || us < 0) return bad(fmt::format("op {}: time {}", op.op(), us));
        }
      }
    }
    if (t.transfers_size() > kMaxTimingTransfers) {
      return bad(
          fmt::format("{} transfers, more than {}", t.transfers_size(), kMaxTimingTransfers));
    }
    for (const pb::TransferTimes& x : t.transfers()) {
      if (x.peer() < 0 || x.peer() >= world() || x.bytes() < 1 || x.bytes() > (int64_t{1} << 50) ||
          !std::isfinite(x.start_us()) || !std::isfinite(x.end_us()) || x.end_us() < x.start_us()) {
        return bad(fmt::format("transfer to or from rank {} of {} bytes, {} to {} us", x.peer(),
                               x.bytes(), x.start_us(), x.end_us()));
      }
    }
    if (!std::isfinite(t.clock_offset_us()) || !std::isfinite(t.clock_uncertainty_us()) ||
        t.clock_uncertainty_us() < 0) {
      return bad(fmt::format("clock offset {} us within {} us", t.clock_offset_us(),
                             t.clock_uncertainty_us()));
    }
    return ok_status();
  }

  Status request_stop(const pb::RequestStopRequest& req) {
    if (req.rank() < -1 || req.rank() >= world()) {
      return invalid_argument(fmt::format(
          "rank {} is out of range, the world has {} ranks (-1: operator)", req.rank(), world()));
    }
    if (req.signal() < 0 || req.signal() > 64) {
      return invalid_argument(fmt::format("signal = {}, must be 0..64", req.signal()));
    }
    std::lock_guard lock(mu_);
    if (stop_requested_) return ok_status();  // the first request decides the exit status
    stop_requested_ = true;
    stop_signal_ = req.signal();
    const std::string who = req.rank() == -1 ? "the operator" : fmt::format("rank {}", req.rank());
    stop_reason_ = fmt::format("{} asked to stop{}", who,
                               req.reason().empty() ? "" : " (" + req.reason() + ")");
    log::get("rpc")->warn("job {}: {}; stopping at an iteration boundary", job_id_, stop_reason_);
    return ok_status();
  }

  Result<pb::ProposeStopResponse> propose_stop(const pb::ProposeStopRequest& req) {
    GP_RETURN_IF_ERROR(check_rank(req.rank()));
    if (req.iteration() < 0) {
      return invalid_argument(
          fmt::format("rank {}: iteration = {}, must be >= 0", req.rank(), req.iteration()));
    }
    std::lock_guard lock(mu_);
    if (!stop_requested_) {
      return failed_precondition(fmt::format("rank {}: no stop was requested", req.rank()));
    }
    RankRecord& rec = ranks_[req.rank()];
    if (rec.stop_proposal < 0) rec.stop_proposal = req.iteration();
    if (stop_after_ < 0) {
      int64_t latest = -1;
      bool all = true;
      for (const RankRecord& r : ranks_) {
        all = all && r.stop_proposal >= 0;
        latest = std::max(latest, r.stop_proposal);
      }
      // The last to propose runs iteration latest + 1 next; nobody is further than the skew.
      if (all) {
        stop_after_ = latest + 1 + stop_skew_;
        log::get("rpc")->info("job {}: every rank stops after iteration {}", job_id_, stop_after_);
      }
    }
    pb::ProposeStopResponse resp;
    resp.set_stop_after_iteration(stop_after_);
    resp.set_signal(stop_signal_);
    resp.set_reason(stop_reason_);
    return resp;
  }

  Status abort_request(const pb::AbortRequest& req) {
    if (req.rank() < -1 || req.rank() >= world()) {
      return invalid_argument(fmt::format(
          "rank {} is out of range, the world has {} ranks (-1: operator)", req.rank(), world()));
    }
    const std::string who = req.rank() == -1 ? "the operator" : fmt::format("rank {}", req.rank());
    const std::string reason = req.reason().empty() ? "no reason given" : req.reason();
    abort(fmt::format("{} aborted the job: {}", who, reason), req.rank());
    return ok_status();
  }

  void abort(const std::string& reason, int failed_rank) {
    std::lock_guard lock(mu_);
    abort_locked(reason, failed_rank);
  }

  bool aborted() const {
    std::lock_guard lock(mu_);
    return aborted_;
  }

  std::string abort_reason() const {
    std::lock_guard lock(mu_);
    return abort_reason_;
  }

  pb::GetStatusResponse get_status() const {
    std::lock_guard lock(mu_);
    const Clock::time_point now = Clock::now();
    pb::GetStatusResponse resp;
    resp.set_job_id(job_id_);
    resp.set_world_size(world());
    resp.set_aborted(aborted_);
    resp.set_abort_reason(abort_reason_);
    resp.set_registration_complete(registration_complete_);
    resp.set_failed_rank(failed_rank_);
    resp.set_stop_requested(stop_requested_);
    resp.set_stop_reason(stop_reason_);
    resp.set_stop_after_iteration(stop_after_);
    for (int r = 0; r < world(); ++r) {
      const RankRecord& rec = ranks_[r];
      pb::RankStatus* s = resp.add_ranks();
      if (rec.has_status) *s = rec.status;
      s->set_rank(r);
      if (!rec.metrics.empty()) {
        const auto& [iteration, last] = *rec.metrics.rbegin();
        s->set_has_loss(true);
        s->set_loss_iteration(iteration);
        s->set_loss(samples_of_rank_[r] > 0 ? last.loss() / static_cast<double>(samples_of_rank_[r])
                                            : last.loss());
      }
      s->set_registered(rec.registered);
      // Before the world completes, a registered rank's Register call is pending (a dropped
      // call withdraws it), so it is alive unless it heartbeats and then goes silent.
      const bool monitored = registration_complete_ || rec.last_heartbeat.has_value();
      s->set_alive(rec.registered &&
                   (!monitored || now - rec.liveness_since <= options_.heartbeat_timeout));
      s->set_heartbeat_age_ms(rec.last_heartbeat ? to_ms(now - *rec.last_heartbeat) : -1);
    }
    return resp;
  }

  std::vector<pb::ReportMetricsRequest> metrics() const {
    std::lock_guard lock(mu_);
    std::vector<pb::ReportMetricsRequest> out;
    for (int r = 0; r < world(); ++r) {
      if (ranks_[r].metrics.empty()) continue;
      pb::ReportMetricsRequest& m = out.emplace_back();
      m.set_rank(r);
      for (const auto& [iteration, it] : ranks_[r].metrics) *m.add_iterations() = it;
    }
    return out;
  }

  // After an abort: until every rank but `self` knows of it, finished, or went silent.
  void wait_until_told(milliseconds timeout, int self) {
    const Clock::time_point deadline = Clock::now() + timeout;
    std::unique_lock lock(mu_);
    while (!shutting_down_ && Clock::now() < deadline) {
      const Clock::time_point now = Clock::now();
      bool all = true;
      for (int r = 0; r < world(); ++r) {
        const RankRecord& rec = ranks_[r];
        const bool silent =
            !rec.registered || now - rec.liveness_since > options_.heartbeat_timeout;
        all = all && (r == self || rec.told_abort || rec.finished || silent);
      }
      if (all) return;
      cv_.wait_until(lock, std::min(deadline, now + kPollInterval));
    }
  }

  Status wait_for_completion(milliseconds timeout) {
    const Clock::time_point start = Clock::now();
    // Anything beyond a century is "no limit" (and would overflow the clock).
    const Clock::time_point deadline =
        timeout >= std::chrono::hours(24 * 365 * 100) ? Clock::time_point::max() : start + timeout;
    std::unique_lock lock(mu_);
    while (true) {
      std::vector<int> unfinished;
      for (int r = 0; r < world(); ++r) {
        if (!ranks_[r].finished) unfinished.push_back(r);
      }
      if (unfinished.empty()) return ok_status();
      if (aborted_) return aborted_status("", abort_reason_);
      if (shutting_down_) return shutting_down_status("");
      const Clock::time_point now = Clock::now();
      if (now >= deadline) {
        return Status(StatusCode::kDeadlineExceeded,
                      fmt::format("job {}: {} not finished after {} ms", job_id_,
                                  ranks_phrase(unfinished), to_ms(now - start)));
      }
      if (deadline == Clock::time_point::max()) {
        cv_.wait(lock);
      } else {
        cv_.wait_until(lock, deadline);
      }
    }
  }

 private:
  void complete_registration_locked() {
    registration_complete_ = true;
    const Clock::time_point now = Clock::now();
    data_addresses_.clear();
    for (RankRecord& rec : ranks_) {
      data_addresses_.push_back(rec.registration.data_address());
      rec.liveness_since = std::max(rec.liveness_since, now);
    }
    log::get("rpc")->info("job {}: all {} ranks registered", job_id_, world());
    cv_.notify_all();
  }

  void record_status_locked(const pb::RankStatus& status) {
    RankRecord& rec = ranks_[status.rank()];
    rec.status = status;
    // Coordinator-only fields are computed in get_status, never taken from a rank.
    rec.status.clear_registered();
    rec.status.clear_alive();
    rec.status.clear_heartbeat_age_ms();
    if (rec.status.unix_time_ms() == 0) rec.status.set_unix_time_ms(unix_time_ms_now());
    rec.has_status = true;
    if (status.state() == pb::RANK_STATE_FINISHED && !rec.finished) {
      rec.finished = true;
      cv_.notify_all();
    }
    if (status.state() == pb::RANK_STATE_FAILED) record_failure_locked(status);
  }

  // A FAILED report: the reporter is blamed at once, unless it failed for a peer's sake (then
  // see PendingFailure). It knows of the abort it causes; one waiting for a verdict heartbeats
  // its FAILED status until it hears which rank the job is blamed on.
  void record_failure_locked(const pb::RankStatus& status) {
    const int r = status.rank();
    RankRecord& rec = ranks_[r];
    if (aborted_) {
      rec.told_abort = true;
      return;
    }
    const std::string error = status.error().empty() ? "(no error message)" : status.error();
    const bool lost_peer = status.has_lost_peer() && status.lost_peer() != r &&
                           status.lost_peer() >= 0 && status.lost_peer() < world();
    if (!lost_peer || !registration_complete_) {
      rec.told_abort = true;
      abort_locked(fmt::format("rank {} failed: {}", r, error), r);
      return;
    }
    rec.reported_lost_peer = true;
    if (pending_) return;  // the first report is the one quoted
    pending_ = PendingFailure{r, status.lost_peer(), error, Clock::now()};
    log::get("rpc")->warn(
        "job {}: rank {} lost rank {}; checking which rank stopped first before blaming one",
        job_id_, r, status.lost_peer());
  }

  // How long a pending verdict waits for every live rank to heartbeat once more: two of the
  // slowest heartbeat periods seen and a margin, within the heartbeat timeout.
  Clock::duration verdict_grace_locked() const {
    Clock::duration gap = Clock::duration::zero();
    for (const RankRecord& rec : ranks_) gap = std::max(gap, rec.heartbeat_gap);
    const Clock::duration grace =
        gap > Clock::duration::zero() ? 2 * gap + milliseconds(500) : milliseconds(2000);
    return std::min<Clock::duration>(grace, options_.heartbeat_timeout);
  }

  // Decides a pending verdict: the reporter when every other rank heartbeated since its report;
  // after the grace, of the ranks silent since before it the one that stopped first (a failure
  // cascades from it), the lost peer among those that stopped at the same time.
  void resolve_pending_locked(Clock::time_point now) {
    if (!pending_ || aborted_) return;
    const PendingFailure p = *pending_;
    int silent = -1;
    for (int r = 0; r < world(); ++r) {
      const RankRecord& rec = ranks_[r];
      if (rec.finished || rec.reported_lost_peer || rec.liveness_since >= p.at) continue;
      if (silent < 0 || rec.liveness_since < ranks_[silent].liveness_since ||
          (rec.liveness_since == ranks_[silent].liveness_since && r == p.lost_peer)) {
        silent = r;
      }
    }
    if (silent < 0) {
      abort_locked(fmt::format("rank {} failed: {}", p.rank, p.error), p.rank);
    } else if (now - p.at >= verdict_grace_locked()) {
      abort_locked(fmt::format("rank {} stopped responding (no heartbeat for {} ms); rank {} "
                               "lost it: {}",
                               silent, to_ms(now - ranks_[silent].liveness_since), p.rank, p.error),
                   silent);
    }
  }

  void abort_locked(const std::string& reason, int failed_rank) {
    if (aborted_) return;  // the first reason is the cause; later ones are consequences
    aborted_ = true;
    abort_reason_ = reason;
    failed_rank_ = failed_rank;
    log::get("rpc")->error("job {} aborted: {}", job_id_, reason);
    cv_.notify_all();
  }

  // Checks a few times per timeout, so a silent rank is caught within 1.25 timeouts.
  void monitor_loop() {
    const auto period = std::clamp<Clock::duration>(options_.heartbeat_timeout / 4, milliseconds(5),
                                                    milliseconds(500));
    std::unique_lock lock(mu_);
    Clock::time_point next = Clock::now() + period;
    while (!shutting_down_) {
      cv_.wait_until(lock, next);
      const Clock::time_point now = Clock::now();
      if (now < next) continue;  // woken by an unrelated change
      next = now + period;
      if (!registration_complete_ || aborted_) continue;
      resolve_pending_locked(now);
      for (int r = 0; r < world(); ++r) {
        const RankRecord& rec = ranks_[r];
        if (rec.finished || aborted_) continue;
        const auto silent = now - rec.liveness_since;
        if (silent > options_.heartbeat_timeout) {
          abort_locked(
              fmt::format("rank {} stopped responding (no heartbeat for {} ms)", r, to_ms(silent)),
              r);
          break;
        }
      }
    }
  }

  const CoordinatorOptions options_;
  const std::string plan_hash_;
  const std::string job_id_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RankRecord> ranks_;
  int num_registered_ = 0;
  bool registration_complete_ = false;
  std::vector<std::string> data_addresses_;  // by rank, once complete
  std::map<std::string, BarrierState> barriers_;
  bool aborted_ = false;
  std::string abort_reason_;
  int failed_rank_ = -1;  // the rank the abort is blamed on; -1: the operator or nobody
  std::optional<PendingFailure> pending_;  // until the abort it leads to
  bool shutting_down_ = false;
  const int64_t stop_skew_;
  std::vector<int64_t> samples_of_rank_;
  bool stop_requested_ = false;
  int stop_signal_ = 0;
  std::string stop_reason_;
  int64_t stop_after_ = -1;
  std::thread monitor_;
};

grpc::Status to_grpc(const Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
}

// A call's 'authorization' header against the job's token (none: every call is accepted).
Status check_authorization(const std::string& token,
                           std::optional<std::string_view> authorization) {
  if (token.empty()) return ok_status();
  if (!authorization) {
    return Status(StatusCode::kUnauthenticated,
                  "missing 'authorization' metadata: this coordinator requires "
                  "'authorization: Bearer <token>' with the job's auth token");
  }
  if (!constant_time_equal(*authorization, "Bearer " + token)) {
    return Status(StatusCode::kUnauthenticated,
                  "the 'authorization' metadata does not carry this job's auth token "
                  "(expected 'Bearer <token>')");
  }
  return ok_status();
}

// The coordinator's limits (see the constants) and its token check ahead of every call.
ServerGuard server_guard(const CoordinatorOptions& options) {
  ServerGuard guard;
  guard.name = "coordinator";
  const int64_t entries = options.plan.messages_size() + options.plan.stages_size();
  const int64_t request =
      std::min<int64_t>(kBaseRequestBytes + kRequestBytesPerPlanEntry * entries, 1 << 30);
  guard.max_request_bytes = static_cast<int>(request);
  guard.max_response_bytes = kMaxResponseBytes;
  guard.buffer_bytes = kBaseBufferBytes + 2 * request + kBufferBytesPerRank * options.world_size;
  if (!options.auth_token.empty()) {
    guard.check = [token = options.auth_token](std::optional<std::string_view> authorization) {
      return check_authorization(token, authorization);
    };
  }
  return guard;
}

// The gRPC face of the core: authenticate, call, convert. Handlers never throw out.
class ExecutorService final : public pb::Executor::Service {
 public:
  explicit ExecutorService(CoordinatorCore* core)
      : core_(core), table_(core->options().world_size) {}

  grpc::Status Register(grpc::ServerContext* ctx, const pb::RegisterRequest* req,
                        pb::RegisterResponse* resp) override {
    return guarded("Register", ctx, [&] {
      auto result = core_->register_rank(*req, wait_deadline(*ctx, req->timeout_ms()),
                                         [ctx] { return ctx->IsCancelled(); });
      if (!result.ok()) return result.status();
      *resp = std::move(result).value();
      return ok_status();
    });
  }

  grpc::Status GetPlan(grpc::ServerContext* ctx, const pb::GetPlanRequest* req,
                       pb::GetPlanResponse* resp) override {
    return guarded("GetPlan", ctx, [&] {
      GP_RETURN_IF_ERROR(core_->check_rank(req->rank()));
      *resp->mutable_plan() = core_->options().plan;
      return ok_status();
    });
  }

  grpc::Status Barrier(grpc::ServerContext* ctx, const pb::BarrierRequest* req,
                       pb::BarrierResponse*) override {
    return guarded("Barrier", ctx, [&] {
      return core_->barrier(*req, wait_deadline(*ctx, req->timeout_ms()),
                            [ctx] { return ctx->IsCancelled(); });
    });
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const pb::HeartbeatRequest* req,
                         pb::HeartbeatResponse* resp) override {
    return guarded("Heartbeat", ctx, [&] {
      auto result = core_->heartbeat(req->status());
      if (!result.ok()) return result.status();
      *resp = std::move(result).value();
      resp->set_coordinator_steady_us(steady_us());
      return ok_status();
    });
  }

  grpc::Status ReportStatus(grpc::ServerContext* ctx, const pb::ReportStatusRequest* req,
                            pb::ReportStatusResponse*) override {
    return guarded("ReportStatus", ctx, [&] { return core_->report_status(req->status()); });
  }

  grpc::Status ReportMetrics(grpc::ServerContext* ctx, const pb::ReportMetricsRequest* req,
                             pb::ReportMetricsResponse*) override {
    return guarded("ReportMetrics", ctx, [&] { return core_->report_metrics(*req); });
  }

  grpc::Status GetStatus(grpc::ServerContext* ctx, const pb::GetStatusRequest*,
                         pb::GetStatusResponse* resp) override {
    return guarded("GetStatus", ctx, [&] {
      *resp = core_->get_status();
      return ok_status();
    });
  }

  grpc::Status Abort(grpc::ServerContext* ctx, const pb::AbortRequest* req,
                     pb::AbortResponse*) override {
    return guarded("Abort", ctx, [&] { return core_->abort_request(*req); });
  }

  grpc::Status RequestStop(grpc::ServerContext* ctx, const pb::RequestStopRequest* req,
                           pb::RequestStopResponse*) override {
    return guarded("RequestStop", ctx, [&] { return core_->request_stop(*req); });
  }

  grpc::Status ProposeStop(grpc::ServerContext* ctx, const pb::ProposeStopRequest* req,
                           pb::ProposeStopResponse* resp) override {
    return guarded("ProposeStop", ctx, [&] {
      auto result = core_->propose_stop(*req);
      if (!result.ok()) return result.status();
      *resp = std::move(result).value();
      return ok_status();
    });
  }

  // The data plane's rendezvous for ranks without a shared filesystem (control/key_store.h).
  grpc::Status StoreSet(grpc::ServerContext* ctx, const pb::StoreSetRequest* req,
                        pb::StoreSetResponse*) override {
    return guarded("StoreSet", ctx, [&] {
      GP_RETURN_IF_ERROR(core_->check_rank(req->rank()));
      return table_.set(req->key(), req->value());
    });
  }

  grpc::Status StoreGet(grpc::ServerContext* ctx, const pb::StoreGetRequest* req,
                        pb::StoreGetResponse* resp) override {
    return guarded("StoreGet", ctx, [&] {
      GP_RETURN_IF_ERROR(core_->check_rank(req->rank()));
      auto value = table_.get(req->key());
      resp->set_found(value.has_value());
      if (value) resp->set_value(std::move(*value));
      return ok_status();
    });
  }

 private:
  template <typename Fn>
  grpc::Status guarded(const char* rpc, grpc::ServerContext* ctx, Fn&& fn) {
    try {
      if (grpc::Status auth = authenticate(*ctx); !auth.ok()) {
        log::get("rpc")->warn("{} from {} refused: {}", rpc, ctx->peer(), auth.error_message());
        return auth;
      }
      return to_grpc(fn());
    } catch (const std::exception& e) {
      log::get("rpc")->error("{}: internal error: {}", rpc, e.what());
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          std::string(rpc) + ": internal error: " + e.what());
    } catch (...) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          std::string(rpc) + ": internal error (unknown exception)");
    }
  }

  // The server's header check (server_guard) refuses such calls before their request is read;
  // this one stays for any path that reaches a handler without it.
  grpc::Status authenticate(const grpc::ServerContext& ctx) const {
    return to_grpc(check_authorization(core_->options().auth_token, authorization_of(ctx)));
  }

  CoordinatorCore* core_;
  KeyTable table_;
};

}  // namespace

struct Coordinator::Impl {
  std::unique_ptr<CoordinatorCore> core;
  std::unique_ptr<ExecutorService> service;
  std::unique_ptr<grpc::Server> server;  // destroyed before the service it serves
  std::string host;
  int port = 0;
  std::mutex shutdown_mu;
  bool shut_down = false;
};

Result<std::unique_ptr<Coordinator>> Coordinator::start(const CoordinatorOptions& options) {
  if (options.world_size < 1) {
    return invalid_argument(
        fmt::format("coordinator: world_size = {}, must be >= 1", options.world_size));
  }
  // Checked before the per-rank state is allocated.
  if (options.world_size > kMaxWorldSize) {
    return invalid_argument(
        fmt::format("coordinator: world_size (--world-size) = {}, must be at "
                    "most {}",
                    options.world_size, kMaxWorldSize));
  }
  // A plan with stages fixes the world: every device rank it uses (plan_util's world_size).
  int plan_world = 0;
  for (const auto& stage : options.plan.stages()) {
    for (const int r : stage.device_ranks()) plan_world = std::max(plan_world, r + 1);
  }
  if (plan_world > 0 && options.world_size != plan_world) {
    return invalid_argument(
        fmt::format("coordinator: world_size (--world-size) = {}, but the "
                    "plan has {} ranks",
                    options.world_size, plan_world));
  }
  if (options.heartbeat_timeout <= milliseconds::zero()) {
    return invalid_argument(fmt::format("coordinator: heartbeat_timeout = {} ms, must be > 0",
                                        options.heartbeat_timeout.count()));
  }
  if (options.listen_address.empty()) {
    return invalid_argument("coordinator: listen_address is empty");
  }
  GP_RETURN_IF_ERROR(check_listen_address("coordinator listen address", options.listen_address));
  auto impl = std::make_unique<Impl>();
  impl->core =
      std::make_unique<CoordinatorCore>(options, model::message_hash(options.plan),
                                        options.job_id.empty() ? random_job_id() : options.job_id);
  impl->service = std::make_unique<ExecutorService>(impl->core.get());

  grpc::ServerBuilder builder;
  GP_RETURN_IF_ERROR(add_guarded_port(builder, options.listen_address, options.tls,
                                      server_guard(options), &impl->port));
  // gRPC sets SO_REUSEPORT by default; a second coordinator must not share a live one's port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(impl->service.get());
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    return Status(StatusCode::kUnavailable,
                  fmt::format("coordinator: cannot listen on '{}' (port in use, or not an address "
                              "of this host?)",
                              options.listen_address));
  }
  impl->host = host_of(options.listen_address);
  impl->core->start_monitor();
  log::get("rpc")->info("job {}: coordinator for {} ranks listening on {}:{}{} (plan {})",
                        impl->core->job_id(), options.world_size, impl->host, impl->port,
                        !options.tls.enabled()   ? ""
                        : options.tls.ca.empty() ? " over TLS"
                                                 : " over mutual TLS",
                        impl->core->plan_hash());
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(impl)));
}

Coordinator::Coordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Coordinator::~Coordinator() { shutdown(); }

void Coordinator::shutdown() {
  std::lock_guard lock(impl_->shutdown_mu);
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  // Wake blocked handlers first: Server::Shutdown waits for every handler to return.
  impl_->core->stop();
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  impl_->server->Wait();
}

int Coordinator::port() const { return impl_->port; }
std::string Coordinator::address() const { return impl_->host + ":" + std::to_string(impl_->port); }
const std::string& Coordinator::job_id() const { return impl_->core->job_id(); }
const std::string& Coordinator::plan_hash() const { return impl_->core->plan_hash(); }

Status Coordinator::wait_for_completion(std::chrono::milliseconds timeout) {
  return impl_->core->wait_for_completion(timeout);
}

void Coordinator::abort(const std::string& reason, int failed_rank) {
  impl_->core->abort(reason, failed_rank);
}
void Coordinator::wait_until_told(std::chrono::milliseconds timeout, int self_rank) {
  impl_->core->wait_until_told(timeout, self_rank);
}
bool Coordinator::aborted() const { return impl_->core->aborted(); }
std::string Coordinator::abort_reason() const { return impl_->core->abort_reason(); }
graphpipe::v1::GetStatusResponse Coordinator::status() const { return impl_->core->get_status(); }
std::vector<graphpipe::v1::ReportMetricsRequest> Coordinator::metrics() const {
  return impl_->core->metrics();
}

std::string status_text(const graphpipe::v1::GetStatusResponse& status) {
  std::string out;
  if (status.aborted())
    out += "job " + status.job_id() + " aborted: " + status.abort_reason() + "\n";
  if (status.stop_requested()) {
    out += "job " + status.job_id() + " stopping: " + status.stop_reason() +
           (status.stop_after_iteration() >= 0
                ? fmt::format(" (after iteration {})", status.stop_after_iteration())
                : std::string(" (ranks agreeing where)")) +
           "\n";
  }
  for (const pb::RankStatus& s : status.ranks()) {
    std::string line = fmt::format("rank {}: ", s.rank());
    const std::string at =
        s.instruction().empty()
            ? ""
            : fmt::format("{} (instruction {})", s.instruction(), s.instruction_index());
    switch (s.state()) {
      case pb::RANK_STATE_UNSPECIFIED:
        line += s.registered() ? "registered, no status yet" : "not registered";
        break;
      case pb::RANK_STATE_STARTING:
        line += "starting";
        break;
      case pb::RANK_STATE_RUNNING:
        line += fmt::format("iter {}", s.iteration());
        if (s.samples_per_s() > 0) line += fmt::format(", {:.1f} samples/s", s.samples_per_s());
        if (s.has_loss())
          line += fmt::format(", loss {:.6f} (iter {})", s.loss(), s.loss_iteration());
        if (!at.empty()) line += ", waiting on " + at;
        break;
      case pb::RANK_STATE_FINISHED:
        line += fmt::format("finished (last iter {})", s.iteration());
        if (s.has_loss()) line += fmt::format(", loss {:.6f}", s.loss());
        break;
      case pb::RANK_STATE_FAILED:
        line += fmt::format("FAILED at iter {}", s.iteration());
        if (!at.empty()) line += ", in " + at;
        line += ": " + s.error();
        break;
      default:
        line += fmt::format("unknown state {}", static_cast<int>(s.state()));
        break;
    }
    if (s.registered() && !s.alive() && s.state() != pb::RANK_STATE_FINISHED) {
      line += s.heartbeat_age_ms() >= 0
                  ? fmt::format(" [not responding: no heartbeat for {} ms]", s.heartbeat_age_ms())
                  : std::string(" [not responding: no heartbeat]");
    }
    out += line + "\n";
  }
  return out;
}

std::string status_json(const graphpipe::v1::GetStatusResponse& status) {
  JsonWriter w(true);
  w.begin_object();
  w.field("job_id", status.job_id());
  w.field("world_size", status.world_size());
  w.field("registration_complete", status.registration_complete());
  w.field("aborted", status.aborted());
  w.field("abort_reason", status.abort_reason());
  w.field("failed_rank", status.failed_rank());
  w.field("stop_requested", status.stop_requested());
  w.field("stop_reason", status.stop_reason());
  w.field("stop_after_iteration", status.stop_after_iteration());
  w.key("ranks").begin_array();
  for (const pb::RankStatus& s : status.ranks()) {
    w.begin_object();
    w.field("rank", s.rank());
    w.field("state", pb::RankState_Name(s.state()));
    w.field("registered", s.registered());
    w.field("alive", s.alive());
    w.field("heartbeat_age_ms", s.heartbeat_age_ms());
    w.field("iteration", s.iteration());
    w.field("samples_per_s", s.samples_per_s());
    w.key("loss");
    if (s.has_loss()) {
      w.value(s.loss());
    } else {
      w.null();
    }
    w.field("loss_iteration", s.has_loss() ? s.loss_iteration() : int64_t{-1});
    w.field("instruction", s.instruction());
    w.field("error", s.error());
    w.end_object();
  }
  w.end_array();
  w.end_object();
  return w.str() + "\n";
}

}  // namespace gp::exec
