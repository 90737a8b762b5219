// A metrics file as a resuming rank 0 reads it back (--metrics-out with --resume keeps its
// entries): bit 0 of the first input byte picks a .jsonl (one JSON object a line) or a .json
// (one document) name, the rest is the file's text, parsed by parse_metrics.
#include <string>

#include "job/job_outputs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto entries = gp::exec::daemon::parse_metrics((data[0] & 1) != 0 ? "m.jsonl" : "m.json", text);
  if (entries.ok()) {
    double sum = 0;
    for (const auto& e : *entries) sum += e.loss + static_cast<double>(e.iteration);
    (void)sum;
  }
  return 0;
}
