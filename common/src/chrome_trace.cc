// Chrome trace JSON (the Trace Event Format that chrome://tracing and Perfetto load).
#include "gp/common/chrome_trace.h"

#include <map>

#include "gp/common/json_writer.h"

namespace gp::trace {
namespace {

constexpr int kDevicesPid = 1;
constexpr int kLinksPid = 2;

const char* event_name(const Span& e) {
  switch (e.kind) {
    case SpanKind::kForward:
      return "F";
    case SpanKind::kBackward:
      return "B";
    case SpanKind::kAllReduce:
      return "allreduce";
    case SpanKind::kOptimizer:
      return "optimizer";
    case SpanKind::kTransfer:
      return e.gradient ? "grad" : "act";
  }
  return "?";
}

void metadata(JsonWriter& w, const char* what, int pid, int tid, const std::string& name) {
  w.begin_object().field("ph", "M").field("name", what).field("pid", pid).field("tid", tid);
  w.key("args").begin_object().field("name", name).end_object().end_object();
}

}  // namespace

std::string chrome_trace_json(const TraceInput& trace) {
  JsonWriter w;
  w.begin_object().field("displayTimeUnit", "ms");
  w.key("traceEvents").begin_array();
  metadata(w, "process_name", kDevicesPid, 0, "devices (compute)");
  metadata(w, "process_name", kLinksPid, 0, "links (transfers)");
  for (const Track& t : trace.tracks) {
    metadata(w, "thread_name", kDevicesPid, t.rank,
             "rank " + std::to_string(t.rank) + " (stage " + std::to_string(t.stage) + ")");
  }
  std::map<std::pair<int, int>, int> link_tid;
  int flow_id = 0;
  for (const Span& e : trace.spans) {
    const double dur = e.end_us - e.start_us;
    if (e.kind != SpanKind::kTransfer) {
      w.begin_object()
          .field("ph", "X")
          .field("name", std::string(event_name(e)) +
                             (e.kind == SpanKind::kForward || e.kind == SpanKind::kBackward
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
  for (const MemoryPoint& m : trace.memory) {
    w.begin_object()
        .field("ph", "C")
        .field("name", "memory rank " + std::to_string(m.rank))
        .field("pid", kDevicesPid)
        .field("tid", m.rank)
        .field("ts", m.time_us);
    w.key("args").begin_object().field("bytes", m.bytes).end_object().end_object();
  }
  w.end_array();
  w.key("otherData")
      .begin_object()
      .field("model", trace.model)
      .field("mini_batch", trace.mini_batch)
      .field("iteration_time_us", trace.iteration_time_us)
      .end_object();
  w.end_object();
  return w.str();
}

}  // namespace gp::trace
