#include "measured_profile.h"

#include <array>
#include <utility>

#include "gp/cost/cluster.h"
#include "gp/cost/cost_model.h"
#include "gp/profile_db/comm_fit.h"
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
                             const pb::Provenance& provenance,
                             std::span<const RankRunner::TransferStamp> transfers) {
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
  for (const auto& s : transfers) {
    pb::TransferTimes* x = t.add_transfers();
    x->set_peer(s.peer);
    x->set_tag(s.tag);
    x->set_bytes(s.bytes);
    x->set_send(s.send);
    x->set_start_us(s.start_us);
    x->set_end_us(s.end_us);
  }
  return t;
}

void join_transfers(int rank_a, const pb::RankTimings& a, int rank_b, const pb::RankTimings& b,
                    LinkSamples& out) {
  if (rank_a == rank_b || a.iteration() != b.iteration()) return;
  // One host: one steady clock. Two hosts: both on the coordinator's clock, as well as their
  // heartbeats tell the offsets; a message counts only when that error is under a tenth of it.
  const bool one_host =
      !a.provenance().host().empty() && a.provenance().host() == b.provenance().host();
  if (!one_host && !(a.clock_uncertainty_us() > 0 && b.clock_uncertainty_us() > 0)) return;
  const double error = one_host ? 0 : a.clock_uncertainty_us() + b.clock_uncertainty_us();
  auto one_way = [&out, error](int src, const pb::RankTimings& from, double from_shift, int dst,
                               const pb::RankTimings& to, double to_shift) {
    std::map<std::pair<uint64_t, int64_t>, const pb::TransferTimes*> sends;
    for (const auto& x : from.transfers()) {
      if (x.send() && x.peer() == dst) sends.emplace(std::make_pair(x.tag(), x.bytes()), &x);
    }
    for (const auto& y : to.transfers()) {
      if (y.send() || y.peer() != src) continue;
      const auto it = sends.find({y.tag(), y.bytes()});
      if (it == sends.end()) continue;
      const pb::TransferTimes& x = *it->second;
      const double sent = x.start_us() + from_shift;
      const double asked = y.start_us() + to_shift;
      const double us = y.end_us() + to_shift - sent;
      // The receiver surely waited, and the clocks' error is small against the message's time.
      if (asked + error > sent || !(us > 10 * error) || !(us > 0) || x.bytes() <= 0) continue;
      auto& samples = out[LinkKey{src, dst, x.bytes()}];
      if (samples.size() >= kMaxLinkSamples) samples.erase(samples.begin());
      samples.push_back(static_cast<float>(us));
    }
  };
  const double shift_a = one_host ? 0 : a.clock_offset_us();
  const double shift_b = one_host ? 0 : b.clock_offset_us();
  one_way(rank_a, a, shift_a, rank_b, b, shift_b);
  one_way(rank_b, b, shift_b, rank_a, a, shift_a);
}

namespace {

// Points that do not fit alpha-beta: the latency they show at `link`'s bandwidth (their mean
// time beyond bytes / bandwidth); points faster than that bandwidth: through the origin.
std::pair<double, double> fit_at_cluster_bandwidth(
    const google::protobuf::RepeatedPtrField<pb::CommPoint>& points, const pb::LinkSpec& link) {
  const double beta = link.bandwidth_bytes_per_s();
  double excess_sum = 0, bytes_sum = 0, us_sum = 0;
  bool slower = beta > 0;
  for (const auto& p : points) {
    const double excess = p.time_us() - static_cast<double>(p.bytes()) / beta * 1e6;
    slower = slower && excess >= 0;
    excess_sum += excess;
    bytes_sum += static_cast<double>(p.bytes());
    us_sum += p.time_us();
  }
  if (slower) return {excess_sum / points.size(), beta};
  return {0.0, bytes_sum / us_sum * 1e6};
}

// One p2p fit per link class of the plan's cluster that `links` has messages of.
void add_link_fits(const pb::Plan& plan, const std::map<int, pb::RankTimings>& by_rank,
                   const LinkSamples& links, pb::ProfileDB& db) {
  const int ranks = cost::num_devices(plan.cluster());
  std::map<bool, std::map<int64_t, std::vector<float>>> by_class;  // intra-node -> bytes -> us
  for (const auto& [key, samples] : links) {
    if (key.src < 0 || key.dst < 0 || key.src >= ranks || key.dst >= ranks) continue;
    auto& pooled = by_class[cost::same_node(plan.cluster(), key.src, key.dst)][key.bytes];
    pooled.insert(pooled.end(), samples.begin(), samples.end());
  }
  for (auto& [intra, sizes] : by_class) {
    pb::CommFit fit;
    fit.set_link_class(intra ? pb::LINK_CLASS_INTRA_NODE : pb::LINK_CLASS_INTER_NODE);
    fit.set_kind(pb::COLLECTIVE_KIND_P2P);
    fit.set_ranks(2);
    for (auto& [bytes, samples] : sizes) {
      pb::CommPoint* p = fit.add_points();
      p->set_bytes(bytes);
      p->set_time_us(sample_quantile(samples, 0.5));
    }
    // Only messages whose bytes take the link longer than its latency say anything about its
    // bandwidth (by the cluster's own figures): smaller ones are latency and noise, and their
    // slope would be a bandwidth no link has.
    const pb::LinkSpec& link = intra ? plan.cluster().intra_node() : plan.cluster().inter_node();
    const double largest = static_cast<double>(sizes.rbegin()->first);
    auto ab = profile::fit_alpha_beta(fit.points());
    if (ab.ok() && largest / link.bandwidth_bytes_per_s() * 1e6 >= link.latency_us()) {
      fit.set_alpha_us(ab->alpha_us);
      fit.set_beta_bytes_per_s(ab->beta_bytes_per_s);
    } else {
      const auto [alpha, beta] = fit_at_cluster_bandwidth(fit.points(), link);
      fit.set_alpha_us(alpha);
      fit.set_beta_bytes_per_s(beta);
    }
    const double beta = fit.beta_bytes_per_s();
    if (!(beta >= 1e3 && beta <= 1e15) || !(fit.alpha_us() <= 1e6)) continue;  // no link's
    if (!by_rank.empty()) *fit.mutable_provenance() = by_rank.begin()->second.provenance();
    *db.add_comm() = std::move(fit);
  }
}

}  // namespace

Result<pb::ProfileDB> measured_profile(const pb::Plan& plan, const model::Graph& graph,
                                       const std::map<int, pb::RankTimings>& by_rank,
                                       const LinkSamples& links) {
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
  add_link_fits(plan, by_rank, links, db);
  GP_RETURN_IF_ERROR(profile::validate_profile(db));
  return db;
}

void MeasuredProfile::add(int rank, const pb::RankTimings& timings) {
  std::lock_guard lock(mu_);
  auto [it, fresh] = by_rank_.try_emplace(rank, timings);
  if (!fresh) {
    if (it->second.iteration() > timings.iteration()) return;
    it->second = timings;
  }
  // Each pair of reports of one iteration is joined once: when the second of the two arrives.
  for (const auto& [other, t] : by_rank_) join_transfers(rank, timings, other, t, links_);
}

Status MeasuredProfile::write() const {
  std::map<int, pb::RankTimings> by_rank;
  LinkSamples links;
  {
    std::lock_guard lock(mu_);
    by_rank = by_rank_;
    links = links_;
  }
  GP_ASSIGN_OR_RETURN(const pb::ProfileDB db, measured_profile(plan_, graph_, by_rank, links));
  return profile::write_profile(path_, db).with_context("--measured-profile-out");
}

}  // namespace gp::exec::daemon
