// Chrome traces (the Trace Event Format that chrome://tracing and Perfetto load), written from
// neutral spans so that the simulator's predictions and the executor's measurements share one
// format and one writer without either linking the other.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace gp::trace {

enum class SpanKind { kForward, kBackward, kAllReduce, kOptimizer, kTransfer };

// One interval on a device (compute) or on a link (kTransfer: `rank` sends to `peer`).
struct Span {
  SpanKind kind;
  int rank;       // the computing rank, or the sender for transfers
  int peer = -1;  // receiver for transfers
  int stage;
  int micro_batch;
  double start_us;
  double end_us;
  bool gradient = false;  // transfers: gradient (true) or activation
  int64_t bytes = 0;
};

// A device track: rank `rank` runs stage `stage`.
struct Track {
  int rank;
  int stage;
};

// A point of a device's memory counter.
struct MemoryPoint {
  int rank;
  double time_us;
  int64_t bytes;
};

struct TraceInput {
  std::string_view model;
  int64_t mini_batch = 0;
  double iteration_time_us = 0;
  std::span<const Track> tracks;
  std::span<const Span> spans;
  std::span<const MemoryPoint> memory;
};

// A track per device for compute, a track per link for transfers, flow arrows from each send to
// its arrival, a memory counter per device.
std::string chrome_trace_json(const TraceInput& trace);

}  // namespace gp::trace
