#include "gp/common/chrome_trace.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace gp::trace {
namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST_CASE("a chrome trace names each device track and numbers forward and backward spans") {
  const std::vector<Track> tracks = {{0, 0}, {3, 1}};
  std::vector<Span> spans;
  spans.push_back({SpanKind::kForward, 0, -1, 0, 2, 10.0, 15.0});
  spans.push_back({SpanKind::kBackward, 3, -1, 1, 2, 20.0, 30.0});
  spans.push_back({SpanKind::kOptimizer, 3, -1, 1, 0, 31.0, 32.0});
  TraceInput in;
  in.model = "m\"x";
  in.mini_batch = 8;
  in.iteration_time_us = 32;
  in.tracks = tracks;
  in.spans = spans;
  const std::string json = chrome_trace_json(in);
  CHECK(json.find("\"name\":\"rank 0 (stage 0)\"") != std::string::npos);
  CHECK(json.find("\"name\":\"rank 3 (stage 1)\"") != std::string::npos);
  CHECK(json.find("\"name\":\"F2\"") != std::string::npos);
  CHECK(json.find("\"name\":\"B2\"") != std::string::npos);
  CHECK(json.find("\"name\":\"optimizer\"") != std::string::npos);
  CHECK(json.find("\"dur\":10") != std::string::npos);
  CHECK(json.find("\"model\":\"m\\\"x\"") != std::string::npos);  // escaped
  CHECK(json.find("\"mini_batch\":8") != std::string::npos);
  CHECK(count(json, "\"cat\":\"flow\"") == 0);
}

TEST_CASE("a chrome trace draws a transfer on its link with a flow arrow ending at the receiver") {
  std::vector<Span> spans;
  Span t{SpanKind::kTransfer, 1, 4, 0, 5, 100.0, 140.0};
  t.gradient = true;
  t.bytes = 4096;
  spans.push_back(t);
  spans.push_back({SpanKind::kTransfer, 1, 4, 0, 6, 150.0, 160.0});  // same link: same track
  const std::vector<MemoryPoint> memory = {{4, 120.0, 1 << 20}};
  TraceInput in;
  in.spans = spans;
  in.memory = memory;
  const std::string json = chrome_trace_json(in);
  CHECK(json.find("\"name\":\"rank 1 -> rank 4\"") != std::string::npos);
  CHECK(count(json, "rank 1 -> rank 4") == 1);
  CHECK(json.find("\"name\":\"grad s0 mb5\"") != std::string::npos);
  CHECK(json.find("\"name\":\"act s0 mb6\"") != std::string::npos);
  CHECK(json.find("\"bytes\":4096") != std::string::npos);
  // Each transfer starts a flow on the link and finishes it on the receiving device (tid 4).
  CHECK(count(json, "\"ph\":\"s\"") == 2);
  CHECK(count(json, "\"ph\":\"f\"") == 2);
  CHECK(json.find("\"ph\":\"f\",\"bp\":\"e\",\"name\":\"grad s0 mb5\",\"cat\":\"flow\",\"id\":1,"
                  "\"pid\":1,\"tid\":4,\"ts\":140") != std::string::npos);
  CHECK(json.find("\"name\":\"memory rank 4\"") != std::string::npos);
  CHECK(json.find("\"bytes\":1048576") != std::string::npos);
}

}  // namespace
}  // namespace gp::trace
