#include "measured_profile.h"

#include <array>
#include <utility>

#include "gp/cost/cost_model.h"
#include "gp/profile_db/profile_db.h"

namespace gp::exec::daemon {

namespace pb = graphpipe::v1;

bool measured_iteration(int64_t it, int64_t first, int measure_every) {
  constexpr int64_t kWarmup = 2;  // first iterations pay for page faults and cold caches
  if (measure_every <= 0) return false;
  const int64_t k = it - first - kWarmup;
  return k >= 0 && k % measure_every == 0;
}

std::string measured_device_kind(const pb::Plan& plan, int rank) {
  return plan.cluster().device().name() + "/rank" + std::to_string(rank);
}

pb::RankTimings rank_timings(const OpClock& clock, const std::vector<int>& op_indices,
                             int64_t iteration, int64_t micro_batch,
                             const pb::Provenance& provenance) {
  pb::RankTimings t;
  t.set_iteration(iteration);
  t.set_micro_batch(micro_batch);
  *t.mutable_provenance() = provenance;
  std::array<float, TimingWindow::kCapacity> samples{};
  const int n = std::min(clock.ops(), static_cast<int>(op_indices.size()));
  for (int i = 0; i < n; ++i) {
    if (clock.forward(i).size() == 0 && clock.backward(i).size() == 0) continue;  // input ops
    pb::OpTimes* op = t.add_ops();
    op->set_op(op_indices[static_cast<size_t>(i)]);
    int k = clock.forward(i).copy(samples);
    op->mutable_forward_us()->Add(samples.begin(), samples.begin() + k);
    k = clock.backward(i).copy(samples);
    op->mutable_backward_us()->Add(samples.begin(), samples.begin() + k);
  }
  return t;
}

Result<pb::ProfileDB> measured_profile(const pb::Plan& plan, const model::Graph& graph,
                                       const std::map<int, pb::RankTimings>& by_rank) {
  pb::ProfileDB db;
  db.set_format_version(profile::kProfileFormatVersion);
  for (const auto& [rank, t] : by_rank) {
    // A signature's samples over the rank's ops of it (repeated layers), in first-seen order.
    std::map<std::string, std::pair<std::vector<float>, std::vector<float>>> pooled;
    std::vector<std::string> order;
    for (const pb::OpTimes& op : t.ops()) {
      if (op.op() < 0 || op.op() >= graph.num_ops()) {
        return invalid_argument("rank " + std::to_string(rank) + "'s timings: op " +
                                std::to_string(op.op()) + ", the model has " +
                                std::to_string(graph.num_ops()) + " ops");
      }
      const std::string sig = cost::op_signature(graph.op(op.op()));
      auto [it, fresh] = pooled.try_emplace(sig);
      if (fresh) order.push_back(sig);
      it->second.first.insert(it->second.first.end(), op.forward_us().begin(),
                              op.forward_us().end());
      it->second.second.insert(it->second.second.end(), op.backward_us().begin(),
                               op.backward_us().end());
    }
    for (const std::string& sig : order) {
      auto& [fwd, bwd] = pooled[sig];
      if (fwd.empty()) continue;
      pb::OpMeasurement* m = db.add_ops();
      m->set_signature(sig);
      m->set_device_kind(measured_device_kind(plan, rank));
      m->set_micro_batch(t.micro_batch());
      m->set_repetitions(static_cast<int>(fwd.size()));
      m->set_forward_time_us(sample_quantile(fwd, 0.5));
      m->set_forward_spread_us(sample_quantile(fwd, 0.9) - sample_quantile(fwd, 0.1));
      m->set_backward_time_us(sample_quantile(bwd, 0.5));
      m->set_backward_spread_us(sample_quantile(bwd, 0.9) - sample_quantile(bwd, 0.1));
      *m->mutable_provenance() = t.provenance();
    }
  }
  GP_RETURN_IF_ERROR(profile::validate_profile(db));
  return db;
}

void MeasuredProfile::add(int rank, const pb::RankTimings& timings) {
  std::lock_guard lock(mu_);
  auto [it, fresh] = by_rank_.try_emplace(rank, timings);
  if (!fresh && it->second.iteration() <= timings.iteration()) it->second = timings;
}

Status MeasuredProfile::write() const {
  std::map<int, pb::RankTimings> by_rank;
  {
    std::lock_guard lock(mu_);
    by_rank = by_rank_;
  }
  GP_ASSIGN_OR_RETURN(const pb::ProfileDB db, measured_profile(plan_, graph_, by_rank));
  return profile::write_profile(path_, db).with_context("--measured-profile-out");
}

}  // namespace gp::exec::daemon
