// Measured costs of a running job (run --measure-every, --measured-profile-out): each rank turns
// its OpClock's windows into RankTimings for the coordinator; rank 0 keeps every rank's latest
// and writes them as a ProfileDB in graphpipe-profile's format, one record per (op signature,
// rank), the device kind naming the rank ("<cluster device>/rank<R>"), so a slow device shows
// as slow and a planner can read it.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/op_timing.h"
#include "gp/exec/rank_runner.h"
#include "gp/model/graph.h"
#include "graphpipe/v1/executor.pb.h"
#include "graphpipe/v1/plan.pb.h"
#include "graphpipe/v1/profile.pb.h"

namespace gp::exec::daemon {

// --measure-every K: whether iteration `it` of a run that started at `first` is measured: after
// 2 warm-up iterations, then every K-th (K = 0: never).
bool measured_iteration(int64_t it, int64_t first, int measure_every);

// The device kind of `rank`'s records: "<plan.cluster().device().name()>/rank<R>".
std::string measured_device_kind(const graphpipe::v1::Plan& plan, int rank);

// A rank's report: `clock`'s windows of its stage's ops (`op_indices`: graph index by position,
// as StageRunner::op_indices), ops without samples left out, and the iteration's transfers.
graphpipe::v1::RankTimings rank_timings(const OpClock& clock, const std::vector<int>& op_indices,
                                        int64_t iteration, int64_t micro_batch,
                                        const graphpipe::v1::Provenance& provenance,
                                        std::span<const RankRunner::TransferStamp> transfers = {});

// Measured message times by (sender, receiver, bytes), microseconds, the most recent last.
struct LinkKey {
  int src = 0;
  int dst = 0;
  int64_t bytes = 0;
  auto operator<=>(const LinkKey&) const = default;
};
using LinkSamples = std::map<LinkKey, std::vector<float>>;
constexpr size_t kMaxLinkSamples = 64;  // per key: the recent ones

// Adds to `out` the message times of two ranks' reports of one iteration: a message's time runs
// from its send's start to its receive's end, kept only when the receiver was already waiting
// (asked before the send started; otherwise the message may have arrived unseen). Ranks of one
// host read one steady clock; ranks of two hosts are put on the coordinator's clock by their
// reports' clock offsets, and a message counts only when it surely waited and the offsets'
// summed uncertainty is under a tenth of its time. Reports of different iterations, and of two
// hosts without offsets, add nothing.
void join_transfers(int rank_a, const graphpipe::v1::RankTimings& a, int rank_b,
                    const graphpipe::v1::RankTimings& b, LinkSamples& out);

// The ProfileDB of `by_rank`'s timings (rank -> its latest): per rank, the samples of its ops
// with one signature (cost::op_signature) pooled into one record: medians, p90 - p10 spreads,
// repetitions = forward samples, no memory. And per link class of the plan's cluster that
// `links` has messages of (ranks of one node or of two), a p2p CommFit: each message size's
// median time over the class's pairs as a point, alpha and beta as fit_link (measured_profile.cc)
// makes them of the points and the cluster's own figures for the link; a fit that does not
// validate is left out. Validated (profile::validate_profile); InvalidArgument naming the rank
// and op for an op the graph lacks.
Result<graphpipe::v1::ProfileDB> measured_profile(
    const graphpipe::v1::Plan& plan, const model::Graph& graph,
    const std::map<int, graphpipe::v1::RankTimings>& by_rank, const LinkSamples& links = {});

// Rank 0's gatherer: add() from the coordinator's threads, write() from the rank's.
class MeasuredProfile {
 public:
  // `plan` and `graph` must outlive it.
  MeasuredProfile(const graphpipe::v1::Plan& plan, const model::Graph& graph, std::string path)
      : plan_(plan), graph_(graph), path_(std::move(path)) {}
  // Keeps the rank's newest report (by iteration).
  void add(int rank, const graphpipe::v1::RankTimings& timings);
  // The profile of what has arrived, written atomically (.pb/.pbtxt/.json by extension).
  Status write() const;

 private:
  const graphpipe::v1::Plan& plan_;
  const model::Graph& graph_;
  std::string path_;
  mutable std::mutex mu_;
  std::map<int, graphpipe::v1::RankTimings> by_rank_;
  LinkSamples links_;
};

}  // namespace gp::exec::daemon
