// Predicted vs measured: reads a plan (its predicted metrics come from the planner's simulation
// with the profiled cost model), the job metrics and the measured Chrome trace written by
// graphpipe-launch, and prints iteration time and per-stage busy time side by side.
//
//   gp_fidelity_report --plan plan.pb --metrics metrics.json --trace measured.json
//                      --iterations N [--skip 1] [--target 0.15] [--predicted-trace sim.json]
//
// Busy time counts forward, backward and optimizer work (as the simulator does); all-reduce and
// waiting are not busy. Iteration i of a rank is its i-th block of events: every rank runs the
// same program each iteration. The first --skip iterations (first-touch page faults, lazy
// connections) are left out of the medians.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gp/common/status.h"
#include "gp/model/model_io.h"
#include "graphpipe/v1/plan.pb.h"

namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

gp::Result<Struct> read_json(const std::string& path) {
  GP_ASSIGN_OR_RETURN(std::string text, gp::model::read_file(path));
  Struct out;
  const auto st = google::protobuf::util::JsonStringToMessage(text, &out);
  if (!st.ok()) return gp::invalid_argument(path + ": not JSON: " + std::string(st.message()));
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

const Value* field(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? nullptr : &it->second;
}

struct Event {
  double start_us;
  double dur_us;
  std::string name;  // F<stage>, B<stage>, allreduce, optimizer
  bool busy() const { return name != "allreduce"; }
};

// What kind of work an event is, for the per-phase table.
enum Phase { kForward, kBackward, kAllReduce, kOptimizer, kPhases };
const char* const kPhaseNames[kPhases] = {"forward", "backward", "all-reduce (last arrival on)",
                                          "optimizer"};
int phase_of(const std::string& name) {
  if (name == "allreduce") return kAllReduce;
  if (name == "optimizer") return kOptimizer;
  if (!name.empty() && name[0] == 'F') return kForward;
  if (!name.empty() && name[0] == 'B') return kBackward;
  return -1;
}

// Per rank, per iteration, its compute-lane events in time order.
using RankIterations = std::map<int, std::vector<std::vector<Event>>>;

gp::Result<RankIterations> events_per_iteration(const Struct& trace, int iterations,
                                                const std::string& path) {
  const Value* events = field(trace, "traceEvents");
  if (events == nullptr || !events->has_list_value()) {
    return gp::invalid_argument(path + ": no traceEvents array");
  }
  std::map<int, std::vector<Event>> by_rank;
  for (const auto& v : events->list_value().values()) {
    if (!v.has_struct_value()) continue;
    const auto& e = v.struct_value();
    const Value* cat = field(e, "cat");
    if (cat == nullptr || cat->string_value() != "compute") continue;
    const std::string name = field(e, "name") ? field(e, "name")->string_value() : "";
    const int rank = field(e, "tid") ? static_cast<int>(field(e, "tid")->number_value()) : -1;
    const double ts = field(e, "ts") ? field(e, "ts")->number_value() : 0;
    const double dur = field(e, "dur") ? field(e, "dur")->number_value() : 0;
    by_rank[rank].push_back({ts, dur, name});
  }
  RankIterations out;
  for (auto& [rank, list] : by_rank) {
    std::sort(list.begin(), list.end(),
              [](const Event& a, const Event& b) { return a.start_us < b.start_us; });
    if (list.size() % static_cast<size_t>(iterations) != 0) {
      return gp::invalid_argument(
          path + ": rank " + std::to_string(rank) + " has " + std::to_string(list.size()) +
          " compute events, not a multiple of --iterations " + std::to_string(iterations));
    }
    const size_t per = list.size() / static_cast<size_t>(iterations);
    auto& its = out[rank];
    its.resize(static_cast<size_t>(iterations));
    for (size_t i = 0; i < list.size(); ++i) its[i / per].push_back(list[i]);
  }
  return out;
}

double busy_us(const std::vector<Event>& iteration) {
  double sum = 0;
  for (const Event& e : iteration) sum += e.busy() ? e.dur_us : 0;
  return sum;
}

// Iteration i's all-reduce of one stage's replicas, from the last arrival to the first end; 0
// when a replica has none.
double allreduce_after_last_arrival_us(const RankIterations& runs,
                                       const graphpipe::v1::Stage& stage, size_t i) {
  double last_start = 0, first_end = 1e300;
  for (int r : stage.device_ranks()) {
    auto it = runs.find(r);
    if (it == runs.end() || i >= it->second.size()) return 0;
    const Event* ar = nullptr;
    for (const Event& e : it->second[i]) ar = e.name == "allreduce" ? &e : ar;
    if (ar == nullptr) return 0;
    last_start = std::max(last_start, ar->start_us);
    first_end = std::min(first_end, ar->start_us + ar->dur_us);
  }
  return std::max(first_end - last_start, 0.0);
}

// Iteration i's forward, backward and optimizer time of the slowest rank (per phase).
std::vector<double> slowest_rank_phases_us(const RankIterations& runs, size_t i) {
  std::vector<double> worst(kPhases, 0.0);
  for (const auto& [rank, its] : runs) {
    std::vector<double> sum(kPhases, 0.0);
    for (const Event& e : its[i]) {
      const int ph = phase_of(e.name);
      if (ph >= 0 && ph != kAllReduce) sum[ph] += e.dur_us;
    }
    for (int ph = 0; ph < kPhases; ++ph) worst[ph] = std::max(worst[ph], sum[ph]);
  }
  return worst;
}

// Per iteration (from `skip` on), each phase's time: forward, backward and optimizer the slowest
// rank's sum; all-reduce from the moment the last member of a group arrived to the first end,
// the longest over the stages whose replicas all-reduce (a rank waiting for a slower replica is
// waiting, not reducing). The medians over the iterations.
std::vector<double> phase_medians_us(const RankIterations& runs, const graphpipe::v1::Plan& plan,
                                     int skip) {
  std::vector<std::vector<double>> per_phase(kPhases);
  const size_t n = runs.empty() ? 0 : runs.begin()->second.size();
  for (size_t i = static_cast<size_t>(skip); i < n; ++i) {
    std::vector<double> worst = slowest_rank_phases_us(runs, i);
    for (const auto& st : plan.stages()) {
      if (st.device_ranks_size() < 2) continue;
      worst[kAllReduce] = std::max(worst[kAllReduce], allreduce_after_last_arrival_us(runs, st, i));
    }
    for (int ph = 0; ph < kPhases; ++ph) per_phase[ph].push_back(worst[ph]);
  }
  std::vector<double> out;
  for (const auto& v : per_phase) out.push_back(median(v));
  return out;
}

struct Row {
  std::string what;
  double predicted_ms, measured_ms;
};

// The per-phase rows: the simulated trace's one iteration against the measured medians.
gp::Result<std::vector<Row>> phase_rows(const graphpipe::v1::Plan& plan, const RankIterations& runs,
                                        const std::string& predicted_trace_path, int skip) {
  GP_ASSIGN_OR_RETURN(const Struct predicted_trace, read_json(predicted_trace_path));
  GP_ASSIGN_OR_RETURN(const RankIterations simulated,
                      events_per_iteration(predicted_trace, 1, predicted_trace_path));
  const auto want = phase_medians_us(simulated, plan, 0);
  const auto got = phase_medians_us(runs, plan, skip);
  std::vector<Row> rows;
  for (int ph = 0; ph < kPhases; ++ph) {
    if (want[ph] > 0 || got[ph] > 0)
      rows.push_back({kPhaseNames[ph], want[ph] / 1e3, got[ph] / 1e3});
  }
  return rows;
}

// Per stage, predicted against measured busy time; a stage's is its slowest replica's median, as
// in the simulator.
std::vector<Row> stage_busy_rows(const graphpipe::v1::Plan& plan, const RankIterations& runs,
                                 int skip) {
  std::vector<Row> rows;
  for (const auto& sm : plan.predicted().stages()) {
    double measured_us = 0;
    for (const auto& st : plan.stages()) {
      if (st.id() != sm.stage()) continue;
      for (int r : st.device_ranks()) {
        auto it = runs.find(r);
        if (it == runs.end()) continue;
        std::vector<double> kept;
        for (size_t i = static_cast<size_t>(skip); i < it->second.size(); ++i) {
          kept.push_back(busy_us(it->second[i]));
        }
        measured_us = std::max(measured_us, median(kept));
      }
    }
    rows.push_back({"stage " + std::to_string(sm.stage()) + " busy time", sm.busy_time_s() * 1e3,
                    measured_us / 1e3});
  }
  return rows;
}

std::string error_text(double predicted, double measured) {
  if (measured <= 0) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.1f%%", 100.0 * (predicted - measured) / measured);
  return buf;
}

int run(const std::string& plan_path, const std::string& metrics_path,
        const std::string& trace_path, const std::string& predicted_trace_path, int iterations,
        int skip, double target) {
  graphpipe::v1::Plan plan;
  if (auto st = gp::model::read_message(plan_path, &plan); !st.ok()) {
    std::fprintf(stderr, "fidelity: %s\n", st.message().c_str());
    return 2;
  }
  auto metrics = read_json(metrics_path);
  auto trace = read_json(trace_path);
  if (!metrics.ok() || !trace.ok()) {
    std::fprintf(stderr, "fidelity: %s\n",
                 (!metrics.ok() ? metrics.status() : trace.status()).message().c_str());
    return 2;
  }
  std::vector<double> iteration_s;
  if (const Value* its = field(*metrics, "iterations"); its != nullptr && its->has_list_value()) {
    for (int i = 0; i < its->list_value().values_size(); ++i) {
      const auto& m = its->list_value().values(i).struct_value();
      if (i >= skip && field(m, "time_s"))
        iteration_s.push_back(field(m, "time_s")->number_value());
    }
  }
  if (iteration_s.empty()) {
    std::fprintf(stderr, "fidelity: %s: no iterations after the first %d\n", metrics_path.c_str(),
                 skip);
    return 2;
  }
  auto runs = events_per_iteration(*trace, iterations, trace_path);
  if (!runs.ok()) {
    std::fprintf(stderr, "fidelity: %s\n", runs.status().message().c_str());
    return 2;
  }
  std::vector<Row> rows;
  rows.push_back(
      {"iteration time", plan.predicted().iteration_time_s() * 1e3, median(iteration_s) * 1e3});
  for (Row& r : stage_busy_rows(plan, *runs, skip)) rows.push_back(std::move(r));
  // The phases, where the simulated trace is given: which part of the iteration the model misses.
  std::vector<Row> phases;
  if (!predicted_trace_path.empty()) {
    auto made = phase_rows(plan, *runs, predicted_trace_path, skip);
    if (!made.ok()) {
      std::fprintf(stderr, "fidelity: %s\n", made.status().message().c_str());
      return 2;
    }
    phases = std::move(*made);
  }
  std::printf(
      "fidelity: model '%s', %d stages on %d ranks of '%s', mini-batch %lld, %d iterations "
      "(first %d skipped)\n",
      plan.model().name().c_str(), plan.stages_size(), plan.programs_size(),
      plan.cluster().name().c_str(), static_cast<long long>(plan.mini_batch()), iterations, skip);
  std::printf("%-24s %14s %14s %10s\n", "", "predicted_ms", "measured_ms", "error");
  int missed = 0;
  for (const auto& r : rows) {
    const bool ok =
        r.measured_ms > 0 && std::fabs(r.predicted_ms - r.measured_ms) <= target * r.measured_ms;
    missed += ok ? 0 : 1;
    std::printf("%-24s %14.3f %14.3f %10s%s\n", r.what.c_str(), r.predicted_ms, r.measured_ms,
                error_text(r.predicted_ms, r.measured_ms).c_str(), ok ? "" : "  (outside target)");
  }
  if (!phases.empty()) {
    std::printf("per iteration, the slowest rank (not in the target):\n");
    for (const auto& r : phases) {
      std::printf("  %-28s %8.3f %14.3f %10s\n", r.what.c_str(), r.predicted_ms, r.measured_ms,
                  error_text(r.predicted_ms, r.measured_ms).c_str());
    }
  }
  std::printf("target: within %.0f%%: %s\n", target * 100,
              missed == 0 ? "met"
                          : (std::to_string(missed) + " of " + std::to_string(rows.size()) +
                             " rows outside")
                                .c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gp_fidelity_report: the planner's predicted times against a measured run"};
  std::string plan, metrics, trace, predicted_trace;
  int iterations = 0, skip = 1;
  double target = 0.15;
  app.add_option("--plan", plan, "plan file the run used")->required();
  app.add_option("--metrics", metrics, "job metrics JSON (graphpipe-launch --metrics-out)")
      ->required();
  app.add_option("--trace", trace, "measured Chrome trace (graphpipe-launch --trace)")->required();
  app.add_option(
      "--predicted-trace", predicted_trace,
      "simulated Chrome trace (graphpipe-plan search --trace): adds the per-phase table");
  app.add_option("--iterations", iterations, "iterations the run trained")->required();
  app.add_option("--skip", skip, "leading iterations left out (warm-up)")->capture_default_str();
  app.add_option("--target", target, "accepted relative error")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (iterations < 1 || skip < 0 || skip >= iterations) {
    std::fprintf(stderr, "fidelity: need --iterations >= 1 and 0 <= --skip < --iterations\n");
    return 2;
  }
  return run(plan, metrics, trace, predicted_trace, iterations, skip, target);
}
