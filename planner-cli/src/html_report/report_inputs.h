// The files `graphpipe-plan report` reads besides the plan: the executor's metrics (--metrics-out)
// and its measured Chrome trace (--trace). Both are parsed with protobuf's JSON parser into
// google.protobuf.Struct, as the fidelity report does; anything that is not what the executor
// writes is refused (InvalidArgument) starting with `where` (the flag and the path), then the
// line or event where there is one, and what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gp/common/chrome_trace.h"
#include "gp/common/status.h"

namespace gp::plan_report {

// One logged iteration of a metrics file.
struct MetricsPoint {
  int64_t iteration = 0;
  double loss = 0;  // NaN where the file has null (a non-finite loss)
  double samples_per_s = 0;
};

// A .json path holds {"iterations": [...]}; any other path is JSON Lines, one entry a line
// (the two shapes the executor's --metrics-out writes). At least one entry.
Result<std::vector<MetricsPoint>> parse_metrics(const std::string& where, const std::string& path,
                                                const std::string& text);

// One iteration of a measured trace: its compute spans (forward, backward, all-reduce,
// optimizer) per rank, with times from the iteration's start.
struct MeasuredIteration {
  std::vector<trace::Span> spans;
  int index = 0;  // which iteration of the trace (0-based): the last one, warmed up
  int count = 0;  // iterations in the trace
  double duration_us = 0;
};

// The trace's last iteration. Every rank runs one optimizer step per iteration, so a rank's
// iteration k is its events after its k-th optimizer span up to and including the next.
Result<MeasuredIteration> parse_measured_trace(const std::string& where, const std::string& text);

}  // namespace gp::plan_report
