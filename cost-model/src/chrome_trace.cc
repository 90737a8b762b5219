// Chrome trace JSON (the Trace Event Format that chrome://tracing and Perfetto load).
#include <map>

#include "gp/common/json_writer.h"
#include "gp/sim/simulator.h"

namespace gp::sim {
namespace {

constexpr int kDevicesPid = 1;
constexpr int kLinksPid = 2;

const char* event_name(const SimEvent& e) {
  switch (e.kind) {
    case EventKind::kForward:
      return "F";
    case EventKind::kBackward:
      return "B";
    case EventKind::kAllReduce:
      return "allreduce";
    case EventKind::kOptimizer:
      return "optimizer";
    case EventKind::kTransfer:
      return e.gradient ? "grad" : "act";
  }
  return "?";
}

void metadata(JsonWriter& w, const char* what, int pid, int tid, const std::string& name) {
  w.begin_object().field("ph", "M").field("name", what).field("pid", pid).field("tid", tid);
  w.key("args").begin_object().field("name", name).end_object().end_object();
}

}  // namespace

std::string chrome_trace_json(const graphpipe::v1::Plan& plan, const SimResult& result) {
  JsonWriter w;
  w.begin_object().field("displayTimeUnit", "ms");
  w.key("traceEvents").begin_array();
  metadata(w, "process_name", kDevicesPid, 0, "devices (compute)");
  metadata(w, "process_name", kLinksPid, 0, "links (transfers)");
  for (const auto& rs : result.ranks) {
    if (rs.stage < 0) continue;
    metadata(w, "thread_name", kDevicesPid, rs.rank,
             "rank " + std::to_string(rs.rank) + " (stage " + std::to_string(rs.stage) + ")");
  }
  std::map<std::pair<int, int>, int> link_tid;
  int flow_id = 0;
  for (const SimEvent& e : result.events) {
    const double dur = e.end_us - e.start_us;
    if (e.kind != EventKind::kTransfer) {
      w.begin_object()
          .field("ph", "X")
          .field("name", std::string(event_name(e)) +
                             (e.kind == EventKind::kForward || e.kind == EventKind::kBackward
                                  ? std::to_string(e.micro_batch)
                                  : ""))
          .field("cat", "compute")
          .field("pid", kDevicesPid)
          .field("tid", e.rank)
          .field("ts", e.start_us)
          .field("dur", dur);
      w.key("args").begin_object().field("stage", e.stage).field("micro_batch", e.micro_batch);
      if (e.bytes > 0) w.field("bytes", e.bytes);
      w.end_object().end_object();
      continue;
    }
    auto [it, inserted] =
        link_tid.emplace(std::make_pair(e.rank, e.peer), static_cast<int>(link_tid.size()));
    if (inserted) {
      metadata(w, "thread_name", kLinksPid, it->second,
               "rank " + std::to_string(e.rank) + " -> rank " + std::to_string(e.peer));
    }
    const std::string name = std::string(event_name(e)) + " s" + std::to_string(e.stage) + " mb" +
                             std::to_string(e.micro_batch);
    w.begin_object()
        .field("ph", "X")
        .field("name", name)
        .field("cat", "transfer")
        .field("pid", kLinksPid)
        .field("tid", it->second)
        .field("ts", e.start_us)
        .field("dur", dur);
    w.key("args").begin_object().field("bytes", e.bytes).end_object().end_object();
    // Flow arrow: from the link track at the start to the receiving device at arrival.
    ++flow_id;
    w.begin_object()
        .field("ph", "s")
        .field("name", name)
        .field("cat", "flow")
        .field("id", flow_id)
        .field("pid", kLinksPid)
        .field("tid", it->second)
        .field("ts", e.start_us)
        .end_object();
    w.begin_object()
        .field("ph", "f")
        .field("bp", "e")
        .field("name", name)
        .field("cat", "flow")
        .field("id", flow_id)
        .field("pid", kDevicesPid)
        .field("tid", e.peer)
        .field("ts", e.end_us)
        .end_object();
  }
  for (const auto& rs : result.ranks) {
    for (const MemorySample& m : rs.memory) {
      w.begin_object()
          .field("ph", "C")
          .field("name", "memory rank " + std::to_string(rs.rank))
          .field("pid", kDevicesPid)
          .field("tid", rs.rank)
          .field("ts", m.time_us);
      w.key("args").begin_object().field("bytes", m.bytes).end_object().end_object();
    }
  }
  w.end_array();
  w.key("otherData")
      .begin_object()
      .field("model", plan.model().name())
      .field("mini_batch", plan.mini_batch())
      .field("iteration_time_us", result.iteration_time_us)
      .end_object();
  w.end_object();
  return w.str();
}

}  // namespace gp::sim
