#include "gp/planner/improve.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>

namespace gp::planner {
namespace {

// A move is taken when its plan simulates this much faster: smaller gains are within the
// simulator's rounding and would let the climb wander.
constexpr double kGain = 1.0001;
// Random moves that kick the best plan out of a local optimum.
constexpr int kKickMoves = 2;
// Neighbours drawn to find one kick that runs.
constexpr int kKickDraws = 32;
// Rounds (a scan and a kick) in a row that simulate nothing new: every plan the moves reach has
// been seen, so no budget would find more.
constexpr int kMostStalls = 8;

// 64-bit FNV-1a over a plan's lowering, stages, replicas and micro-batches: the cache key of a
// simulated plan.
uint64_t plan_key(const StagePlan& p) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      h *= 1099511628211ULL;
    }
  };
  mix(p.chain ? 1 : 0);
  for (const auto& st : p.stages) {
    mix(-1);
    for (int op : st.ops) mix(op);
    mix(-2);
    for (int r : st.ranks) mix(r);
    mix(st.micro_batch);
  }
  return h;
}

class LocalSearch {
 public:
  LocalSearch(const MoveSpace& space, const ImproveOptions& options, const TrialFn& trial,
              const ImproveProgress& progress)
      : space_(space),
        options_(options),
        trial_(trial),
        progress_(progress),
        rng_(options.seed),
        start_time_(Clock::now()),
        last_line_(start_time_) {}

  Result<ImproveSummary> run(double start_samples_per_s, StagePlan& plan) {
    summary_.ran = true;
    summary_.start_samples_per_s = start_samples_per_s;
    best_ = {plan, start_samples_per_s, {}};
    seen_[plan_key(plan)] = start_samples_per_s;
    State current = best_;
    int stalls = 0;
    while (!out_of_budget()) {
      const int64_t trials_before = summary_.trials;
      GP_ASSIGN_OR_RETURN(const bool moved, climb_step(current));
      if (moved) {
        stalls = 0;
        continue;
      }
      if (out_of_budget()) break;
      ++summary_.local_optima;
      GP_ASSIGN_OR_RETURN(current, kick());
      stalls = summary_.trials == trials_before ? stalls + 1 : 0;
      if (stalls >= kMostStalls) {
        summary_.stopped_by = "no move left";
        break;
      }
    }
    if (summary_.stopped_by.empty()) summary_.stopped_by = spent_budget();
    summary_.end_samples_per_s = best_.samples_per_s;
    summary_.moves = best_.path;
    summary_.time_s = seconds();
    plan = std::move(best_.plan);
    return std::move(summary_);
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct State {
    StagePlan plan;
    double samples_per_s = -1;
    std::vector<ImproveMove> path;
  };

  double seconds() const {
    return std::chrono::duration<double>(Clock::now() - start_time_).count();
  }
  // Which budget is spent, or nullptr.
  const char* spent_budget() const {
    if (options_.max_trials > 0 && summary_.trials >= options_.max_trials) return "trial budget";
    if (options_.max_events > 0 && summary_.events >= options_.max_events) return "event budget";
    if (options_.effort_s > 0 && seconds() >= options_.effort_s) return "time budget";
    return nullptr;
  }
  bool out_of_budget() const { return spent_budget() != nullptr; }

  // The simulated samples/s of a plan, simulated once however often a move reaches it.
  Result<double> evaluate(const StagePlan& plan) {
    const uint64_t key = plan_key(plan);
    if (auto it = seen_.find(key); it != seen_.end()) return it->second;
    GP_ASSIGN_OR_RETURN(const TrialOutcome outcome, trial_(plan));
    ++summary_.trials;
    summary_.events += outcome.events;
    seen_.emplace(key, outcome.samples_per_s);
    report_progress();
    return outcome.samples_per_s;
  }

  // A permutation of 0..n-1 drawn from the seeded generator (Fisher-Yates on its raw output,
  // which the standard fixes, so the order is the same with any standard library).
  std::vector<size_t> shuffled(size_t n) {
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng_() % i]);
    return order;
  }

  // Takes the first neighbour, in a random order, that simulates faster. False at a local
  // optimum (or when the budget ran out first).
  Result<bool> climb_step(State& current) {
    const Neighbourhood next(space_, current.plan);
    for (size_t i : shuffled(next.size())) {
      if (out_of_budget()) return false;
      std::optional<Neighbour> n = next.get(i);
      if (!n) continue;
      GP_ASSIGN_OR_RETURN(const double samples_per_s, evaluate(n->plan));
      if (samples_per_s <= current.samples_per_s * kGain) continue;
      current.path.push_back(
          {std::move(n->description), current.samples_per_s, samples_per_s, false});
      current.plan = std::move(n->plan);
      current.samples_per_s = samples_per_s;
      if (samples_per_s > best_.samples_per_s) {
        best_ = current;
        report_best(current.path.back());
      }
      return true;
    }
    return false;
  }

  // The best plan moved by kKickMoves random moves that each still run, to climb from there.
  Result<State> kick() {
    State s = best_;
    for (int m = 0; m < kKickMoves && !out_of_budget(); ++m) {
      const Neighbourhood next(space_, s.plan);
      if (next.size() == 0) break;
      for (int draw = 0; draw < kKickDraws && !out_of_budget(); ++draw) {
        std::optional<Neighbour> n = next.get(rng_() % next.size());
        if (!n) continue;
        GP_ASSIGN_OR_RETURN(const double samples_per_s, evaluate(n->plan));
        if (samples_per_s <= 0) continue;
        s.path.push_back({std::move(n->description), s.samples_per_s, samples_per_s, true});
        s.plan = std::move(n->plan);
        s.samples_per_s = samples_per_s;
        break;
      }
    }
    return s;
  }

  void report_best(const ImproveMove& move) {
    if (!progress_) return;
    char line[512];
    std::snprintf(line, sizeof(line),
                  "improve: %.1f samples/s (%+.2f%% over the fast search) after %lld trials: %s",
                  move.after_samples_per_s,
                  100 * (move.after_samples_per_s / summary_.start_samples_per_s - 1),
                  static_cast<long long>(summary_.trials), move.description.c_str());
    progress_(line);
  }

  void report_progress() {
    if (!progress_ || Clock::now() - last_line_ < std::chrono::seconds(2)) return;
    last_line_ = Clock::now();
    std::string left;
    if (options_.effort_s > 0) {
      left = ", " + std::to_string(std::lround(std::max(0.0, options_.effort_s - seconds()))) +
             " s left";
    }
    char line[256];
    std::snprintf(line, sizeof(line),
                  "improve: %lld trials, %lld local optima, best %.1f samples/s (%+.2f%%)%s",
                  static_cast<long long>(summary_.trials),
                  static_cast<long long>(summary_.local_optima), best_.samples_per_s,
                  100 * (best_.samples_per_s / summary_.start_samples_per_s - 1), left.c_str());
    progress_(line);
  }

  const MoveSpace& space_;
  const ImproveOptions& options_;
  const TrialFn& trial_;
  const ImproveProgress& progress_;
  std::mt19937_64 rng_;
  const Clock::time_point start_time_;
  Clock::time_point last_line_;
  ImproveSummary summary_;
  State best_;
  std::unordered_map<uint64_t, double> seen_;
};

}  // namespace

Result<ImproveSummary> improve_stages(const MoveSpace& space, const ImproveOptions& options,
                                      const TrialFn& trial, const ImproveProgress& progress,
                                      double start_samples_per_s, StagePlan& plan) {
  if (!options.enabled()) return ImproveSummary{};
  LocalSearch search(space, options, trial, progress);
  return search.run(start_samples_per_s, plan);
}

}  // namespace gp::planner
