#include "html_report/report_inputs.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string_view>

namespace gp::plan_report {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

Result<Struct> parse_object(const std::string& where, std::string_view text) {
  Struct out;
  const auto st = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(text.data(), text.size()), &out);
  if (st.ok()) return out;
  // The parser's first line says what is wrong; the rest quotes the text.
  const std::string why(st.message());
  return invalid_argument(where + ": not a JSON object (" + why.substr(0, why.find('\n')) + ")");
}

const Value* field(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? nullptr : &it->second;
}

// A numeric field, or NaN when it is missing or null.
double number_or_nan(const Struct& s, const std::string& key) {
  const Value* v = field(s, key);
  return v != nullptr && v->kind_case() == Value::kNumberValue ? v->number_value() : std::nan("");
}

Result<MetricsPoint> metrics_point(const std::string& where, const Struct& entry) {
  const double iteration = number_or_nan(entry, "iteration");
  if (!std::isfinite(iteration)) {
    return invalid_argument(where +
                            ": no numeric \"iteration\" (not a metrics entry of "
                            "graphpipe-executor --metrics-out)");
  }
  return MetricsPoint{static_cast<int64_t>(iteration), number_or_nan(entry, "loss"),
                      number_or_nan(entry, "samples_per_s")};
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// {"iterations": [...]}, the executor's .json metrics file.
Result<std::vector<MetricsPoint>> parse_metrics_json(const std::string& where,
                                                     const std::string& text) {
  GP_ASSIGN_OR_RETURN(const Struct root, parse_object(where, text));
  const Value* list = field(root, "iterations");
  if (list == nullptr || !list->has_list_value()) {
    return invalid_argument(where + ": no \"iterations\" array (not a metrics file)");
  }
  std::vector<MetricsPoint> out;
  for (int i = 0; i < list->list_value().values_size(); ++i) {
    const Value& v = list->list_value().values(i);
    const std::string at = where + ": iterations[" + std::to_string(i) + "]";
    if (!v.has_struct_value()) return invalid_argument(at + ": not an object");
    GP_ASSIGN_OR_RETURN(auto point, metrics_point(at, v.struct_value()));
    out.push_back(point);
  }
  return out;
}

std::vector<std::string_view> lines_of(const std::string& text) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    out.emplace_back(text.data() + pos, end - pos);
    pos = end + 1;
  }
  return out;
}

// The kind of a compute span from its name: F<mb>, B<mb>, allreduce, optimizer.
Result<trace::SpanKind> span_kind(const std::string& at, const std::string& name) {
  if (name == "allreduce") return trace::SpanKind::kAllReduce;
  if (name == "optimizer") return trace::SpanKind::kOptimizer;
  if (!name.empty() && name[0] == 'F') return trace::SpanKind::kForward;
  if (!name.empty() && name[0] == 'B') return trace::SpanKind::kBackward;
  return invalid_argument(at + ": unknown compute event name '" + name + "'");
}

// A compute event ("ph": "X", "cat": "compute") as a span; nullopt-like false for other events.
Result<bool> compute_span(const std::string& at, const Value& v, trace::Span* out) {
  if (!v.has_struct_value()) return invalid_argument(at + ": not an object");
  const Struct& e = v.struct_value();
  const Value* cat = field(e, "cat");
  const Value* ph = field(e, "ph");
  if (cat == nullptr || cat->string_value() != "compute" || ph == nullptr ||
      ph->string_value() != "X") {
    return false;
  }
  const Value* name = field(e, "name");
  GP_ASSIGN_OR_RETURN(out->kind, span_kind(at, name ? name->string_value() : ""));
  const double tid = number_or_nan(e, "tid");
  const double ts = number_or_nan(e, "ts");
  const double dur = number_or_nan(e, "dur");
  if (!std::isfinite(tid) || !std::isfinite(ts) || !std::isfinite(dur) || tid < 0 || dur < 0) {
    return invalid_argument(at +
                            ": a compute event needs numeric \"tid\" (the rank), \"ts\" and "
                            "\"dur\" >= 0");
  }
  out->rank = static_cast<int>(tid);
  out->start_us = ts;
  out->end_us = ts + dur;
  const Value* args = field(e, "args");
  if (args != nullptr && args->has_struct_value()) {
    const double stage = number_or_nan(args->struct_value(), "stage");
    const double mb = number_or_nan(args->struct_value(), "micro_batch");
    out->stage = std::isfinite(stage) ? static_cast<int>(stage) : -1;
    out->micro_batch = std::isfinite(mb) ? static_cast<int>(mb) : 0;
  }
  return true;
}

// Rank -> its compute spans in start order.
Result<std::map<int, std::vector<trace::Span>>> compute_spans(const std::string& where,
                                                              const std::string& text) {
  GP_ASSIGN_OR_RETURN(const Struct root, parse_object(where, text));
  const Value* events = field(root, "traceEvents");
  if (events == nullptr || !events->has_list_value()) {
    return invalid_argument(where + ": no \"traceEvents\" array (not a Chrome trace)");
  }
  std::map<int, std::vector<trace::Span>> by_rank;
  for (int i = 0; i < events->list_value().values_size(); ++i) {
    trace::Span span{};
    const std::string at = where + ": traceEvents[" + std::to_string(i) + "]";
    GP_ASSIGN_OR_RETURN(const bool is_compute,
                        compute_span(at, events->list_value().values(i), &span));
    if (is_compute) by_rank[span.rank].push_back(span);
  }
  if (by_rank.empty()) {
    return invalid_argument(where +
                            ": no compute events (\"cat\": \"compute\"); not a trace written by "
                            "graphpipe-executor --trace");
  }
  for (auto& [rank, spans] : by_rank) {
    std::stable_sort(spans.begin(), spans.end(), [](const trace::Span& a, const trace::Span& b) {
      return a.start_us < b.start_us;
    });
  }
  return by_rank;
}

}  // namespace

Result<std::vector<MetricsPoint>> parse_metrics(const std::string& where, const std::string& path,
                                                const std::string& text) {
  std::vector<MetricsPoint> out;
  if (ends_with(path, ".json")) {
    GP_ASSIGN_OR_RETURN(out, parse_metrics_json(where, text));
  } else {
    const auto lines = lines_of(text);
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].find_first_not_of(" \t\r") == std::string_view::npos) continue;
      const std::string at = where + " line " + std::to_string(i + 1);
      GP_ASSIGN_OR_RETURN(const Struct entry, parse_object(at, lines[i]));
      GP_ASSIGN_OR_RETURN(auto point, metrics_point(at, entry));
      out.push_back(point);
    }
  }
  if (out.empty()) return invalid_argument(where + ": no metrics entries");
  return out;
}

Result<MeasuredIteration> parse_measured_trace(const std::string& where, const std::string& text) {
  GP_ASSIGN_OR_RETURN(const auto by_rank, compute_spans(where, text));
  int count = -1;
  for (const auto& [rank, spans] : by_rank) {
    const auto n = std::count_if(spans.begin(), spans.end(), [](const trace::Span& s) {
      return s.kind == trace::SpanKind::kOptimizer;
    });
    count = count < 0 ? static_cast<int>(n) : std::min(count, static_cast<int>(n));
  }
  if (count <= 0) {
    return invalid_argument(where +
                            ": a rank has no optimizer step, so the trace holds no "
                            "whole iteration");
  }
  MeasuredIteration out;
  out.count = count;
  out.index = count - 1;
  double begin = INFINITY, end = -INFINITY;
  for (const auto& [rank, spans] : by_rank) {
    int seen = 0;  // optimizer spans before the current one
    for (const auto& s : spans) {
      if (seen == out.index) {
        out.spans.push_back(s);
        begin = std::min(begin, s.start_us);
        end = std::max(end, s.end_us);
      }
      if (s.kind == trace::SpanKind::kOptimizer && ++seen > out.index) break;
    }
  }
  for (auto& s : out.spans) {
    s.start_us -= begin;
    s.end_us -= begin;
  }
  out.duration_us = end - begin;
  return out;
}

}  // namespace gp::plan_report
