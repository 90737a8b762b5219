#include "measured_profile.h"

#include <algorithm>
#include <array>
#include <cmath>
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

namespace {

// One direction of join_transfers: `from`'s sends to `dst` with `to`'s receives from `src`, each
// report's stamps shifted onto a common clock, known within `error`.
void pair_messages(int src, const pb::RankTimings& from, double from_shift, int dst,
                   const pb::RankTimings& to, double to_shift, double error, LinkSamples& out) {
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
}

}  // namespace

void join_transfers(int rank_a, const pb::RankTimings& a, int rank_b, const pb::RankTimings& b,
                    LinkSamples& out) {
  if (rank_a == rank_b || a.iteration() != b.iteration()) return;
  // One host: one steady clock. Two hosts: both on the coordinator's clock, as well as their
  // heartbeats tell the offsets; a message counts only when that error is under a tenth of it.
  // (Two machines of one name, containers say, have two clocks: offsets that disagree by more
  // than their uncertainty say so.)
  const bool offsets = a.clock_uncertainty_us() > 0 && b.clock_uncertainty_us() > 0;
  const bool one_host = !a.provenance().host().empty() &&
                        a.provenance().host() == b.provenance().host() &&
                        (!offsets || std::abs(a.clock_offset_us() - b.clock_offset_us()) <=
                                         a.clock_uncertainty_us() + b.clock_uncertainty_us());
  if (!one_host && !offsets) return;
  const double error = one_host ? 0 : a.clock_uncertainty_us() + b.clock_uncertainty_us();
  const double shift_a = one_host ? 0 : a.clock_offset_us();
  const double shift_b = one_host ? 0 : b.clock_offset_us();
  pair_messages(rank_a, a, shift_a, rank_b, b, shift_b, error, out);
  pair_messages(rank_b, b, shift_b, rank_a, a, shift_a, error, out);
}

namespace {

// `fit`'s alpha and beta from its points, by the cluster's own figures for the link (`link`):
// - when the largest message takes the link longer than its latency, the sizes tell the
//   bandwidth: alpha-beta fitted over two sizes or more; one size (or times that do not grow):
//   the cluster's latency, and the bandwidth that leaves for the largest message;
// - smaller messages are latency and noise, and their slope would be a bandwidth no link has:
//   the cluster's bandwidth, and the latency they show beyond it (their mean excess, >= 0).
void fit_link(const pb::LinkSpec& link, pb::CommFit& fit) {
  const double beta = link.bandwidth_bytes_per_s();
  const pb::CommPoint& largest = *std::max_element(
      fit.points().begin(), fit.points().end(),
      [](const pb::CommPoint& x, const pb::CommPoint& y) { return x.bytes() < y.bytes(); });
  const double largest_bytes = static_cast<double>(largest.bytes());
  if (largest_bytes / beta * 1e6 >= link.latency_us()) {
    if (auto ab = profile::fit_alpha_beta(fit.points()); ab.ok()) {
      fit.set_alpha_us(ab->alpha_us);
      fit.set_beta_bytes_per_s(ab->beta_bytes_per_s);
      return;
    }
    const double alpha = std::min(link.latency_us(), largest.time_us() / 2);
    fit.set_alpha_us(alpha);
    fit.set_beta_bytes_per_s(largest_bytes / (largest.time_us() - alpha) * 1e6);
    return;
  }
  double excess = 0;
  for (const auto& p : fit.points())
    excess += p.time_us() - static_cast<double>(p.bytes()) / beta * 1e6;
  fit.set_alpha_us(std::max(0.0, excess / fit.points_size()));
  fit.set_beta_bytes_per_s(beta);
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
    fit_link(intra ? plan.cluster().intra_node() : plan.cluster().inter_node(), fit);
    if (!by_rank.empty()) *fit.mutable_provenance() = by_rank.begin()->second.provenance();
    // A fit no link could have (wrong clocks, a corrupt report) is left out, not written to
    // fail the whole profile.
    pb::ProfileDB alone;
    alone.set_format_version(profile::kProfileFormatVersion);
    *alone.add_comm() = fit;
    if (profile::validate_profile(alone).ok()) *db.add_comm() = std::move(fit);
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
    if (it->second.iteration() >= timings.iteration()) return;  // older, or the same again
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
