// graphpipe-plan report: the HTML has one <svg> per section, marks the bottleneck stage, escapes
// names from the plan, and reads the executor's metrics and trace files or says what is wrong.
#include "html_report/html_report.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "../support/example_plans.h"
#include "../support/models.h"
#include "gp/cost/cost_model.h"
#include "gp/model/zoo.h"
#include "html_report/report_inputs.h"
#include "html_report/svg.h"

using namespace gp;
using plan_report::MeasuredIteration;
using plan_report::MetricsPoint;

namespace {

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) {
    ++n;
  }
  return n;
}

// tiny-mmt in three stages on five cpu-local ranks (two stages replicated), simulated with its
// events recorded, as the report command does.
struct Simulated {
  model::Graph graph;
  graphpipe::v1::Plan plan;
  sim::SimResult sim;
};

Simulated simulated_plan() {
  auto m = model::build_zoo_model("tiny-mmt");
  REQUIRE(m.ok());
  auto g = model::Graph::build(*m);
  REQUIRE(g.ok());
  const auto training = testing::training(graphpipe::v1::OPTIMIZER_KIND_SGD);
  auto plan = testing::replicated_plan(*g, training);
  cost::AnalyticCostModel cm(plan.cluster().device(), graphpipe::v1::PRECISION_FP32);
  cost::CommModel comm(plan.cluster());
  sim::Simulator simulator(cm, comm,
                           {graphpipe::v1::OPTIMIZER_KIND_SGD, graphpipe::v1::PRECISION_FP32});
  auto r = simulator.run(plan, *g, {/*record_events=*/true});
  REQUIRE(r.ok());
  REQUIRE_FALSE(r->deadlocked);
  return {std::move(g).value(), plan, std::move(r).value()};
}

std::string report_of(const Simulated& s, const std::vector<MetricsPoint>* metrics = nullptr,
                      const MeasuredIteration* measured = nullptr) {
  plan_report::ReportData d;
  d.plan = &s.plan;
  d.sim = &s.sim;
  d.plan_name = "plan.pb";
  d.metrics = metrics;
  d.metrics_name = "m.jsonl";
  d.measured = measured;
  d.trace_name = "measured.json";
  return plan_report::html_report(d);
}

// Two ranks, two iterations: F, B, optimizer each, the second iteration 1000 us after the first.
const char* kTrace = R"json({"traceEvents": [
  {"ph": "M", "name": "thread_name", "pid": 1, "tid": 0, "args": {"name": "rank 0 (stage 0)"}},
  {"ph": "X", "name": "F0", "cat": "compute", "pid": 1, "tid": 0, "ts": 0, "dur": 10,
   "args": {"stage": 0, "micro_batch": 0}},
  {"ph": "X", "name": "B0", "cat": "compute", "pid": 1, "tid": 0, "ts": 30, "dur": 20},
  {"ph": "X", "name": "optimizer", "cat": "compute", "pid": 1, "tid": 0, "ts": 50, "dur": 5},
  {"ph": "X", "name": "F0", "cat": "compute", "pid": 1, "tid": 1, "ts": 10, "dur": 10},
  {"ph": "X", "name": "B0", "cat": "compute", "pid": 1, "tid": 1, "ts": 20, "dur": 10},
  {"ph": "X", "name": "optimizer", "cat": "compute", "pid": 1, "tid": 1, "ts": 30, "dur": 5},
  {"ph": "X", "name": "act s0 mb0", "cat": "transfer", "pid": 2, "tid": 0, "ts": 10, "dur": 1},
  {"ph": "X", "name": "F0", "cat": "compute", "pid": 1, "tid": 0, "ts": 1000, "dur": 10},
  {"ph": "X", "name": "B0", "cat": "compute", "pid": 1, "tid": 0, "ts": 1030, "dur": 20},
  {"ph": "X", "name": "optimizer", "cat": "compute", "pid": 1, "tid": 0, "ts": 1050, "dur": 5},
  {"ph": "X", "name": "F0", "cat": "compute", "pid": 1, "tid": 1, "ts": 1010, "dur": 10},
  {"ph": "X", "name": "B0", "cat": "compute", "pid": 1, "tid": 1, "ts": 1020, "dur": 10},
  {"ph": "X", "name": "optimizer", "cat": "compute", "pid": 1, "tid": 1, "ts": 1030, "dur": 5}
]})json";

}  // namespace

TEST_CASE("the plan report has one svg per section, and a training section only with metrics") {
  const Simulated s = simulated_plan();
  const std::string plain = report_of(s);
  CHECK(count_of(plain, "<section ") == 3);
  CHECK(count_of(plain, "<svg ") == 3);
  for (const char* id : {"stage-graph", "timeline", "memory"}) {
    CHECK(plain.find(std::string("<section id=\"") + id + "\">") != std::string::npos);
  }
  CHECK(plain.find("<script") == std::string::npos);
  CHECK(plain.find("http") == std::string::npos);  // nothing to fetch

  const std::vector<MetricsPoint> metrics = {{0, 0.7, 100}, {1, NAN, 200}, {2, 0.5, 210}};
  const auto measured = plan_report::parse_measured_trace("--trace t.json", kTrace);
  REQUIRE(measured.ok());
  const std::string full = report_of(s, &metrics, &*measured);
  CHECK(count_of(full, "<section ") == 4);
  CHECK(count_of(full, "<svg ") == 4);
  CHECK(full.find("<section id=\"metrics\">") != std::string::npos);
  CHECK(full.find("measured (executor trace, iteration 2 of 2)") != std::string::npos);
  CHECK(full.find("205.0 samples/s") != std::string::npos);  // median of 200 and 210
}

TEST_CASE("the plan report names and outlines the stage with the longest busy time") {
  Simulated s = simulated_plan();
  REQUIRE(s.sim.stages.size() == 3);
  for (int hot = 0; hot < 3; ++hot) {
    for (auto& st : s.sim.stages) st.busy_us = 100;
    s.sim.stages[hot].busy_us = 5000;
    CHECK(plan_report::bottleneck_stage(s.sim) == hot);
    const std::string html = report_of(s);
    CHECK(html.find("<td>bottleneck</td><td>stage " + std::to_string(hot) + " (5.000 ms") !=
          std::string::npos);
    // The bottleneck's box is the only one drawn in red, and labelled.
    CHECK(count_of(html, "stroke=\"#c0392b\" stroke-width=\"3.0\"") == 1);
    CHECK(count_of(html, ">bottleneck</text>") == 1);
  }
}

TEST_CASE("the plan report marks recomputing and sharding stages and says what each saves") {
  Simulated s = simulated_plan();
  const std::string plain = report_of(s);
  CHECK(plain.find("memory-choices") == std::string::npos);
  CHECK(plain.find(", recomputes") == std::string::npos);
  // Stage 0 recomputes; a replicated stage shards its optimizer state.
  int replicated = -1;
  for (const auto& st : s.plan.stages()) {
    if (st.device_ranks_size() > 1) replicated = st.id();
  }
  REQUIRE(replicated > 0);
  s.plan.mutable_stages(0)->set_recompute(true);
  s.plan.mutable_stages(replicated)->set_shard_optimizer(true);
  const std::string html = report_of(s);
  CHECK(html.find("<section id=\"memory-choices\">") != std::string::npos);
  CHECK(html.find("stage 0 recomputes its forward before each backward: ") != std::string::npos);
  CHECK(html.find("stage " + std::to_string(replicated) + " shards its optimizer state over ") !=
        std::string::npos);
  CHECK(count_of(html, ", recomputes") == 1);  // stage 0's box
  CHECK(count_of(html, ", shards<") + count_of(html, ", shards ") >= 1);
}

TEST_CASE("names from the plan are escaped in the report, an op named a<&>b included") {
  Simulated s = simulated_plan();
  s.plan.mutable_stages(0)->set_op_ids(0, "a<&>b");
  s.plan.mutable_model()->set_name("m<&>\"'");
  const std::string html = report_of(s);
  CHECK(html.find("a&lt;&amp;&gt;b") != std::string::npos);
  CHECK(html.find("m&lt;&amp;&gt;&quot;&#39;") != std::string::npos);
  CHECK(html.find("a<&>b") == std::string::npos);
  CHECK(html.find("m<&>") == std::string::npos);
}

TEST_CASE("xml_escape escapes markup and shorten never cuts a UTF-8 character") {
  CHECK(plan_report::xml_escape("<a href=\"x\">&'</a>") ==
        "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
  CHECK(plan_report::shorten("short", 10) == "short");
  CHECK(plan_report::shorten("abcdefghij", 6) == "abc...");
  // "ab" then a 2-byte character: a cut after 3 bytes would split it.
  CHECK(plan_report::shorten("ab\xc3\xa9"
                             "cdefgh",
                             7) == "ab\xc3\xa9...");
  CHECK(plan_report::shorten("a\xc3\xa9"
                             "cdefgh",
                             5) == "a...");
}

TEST_CASE("metrics files parse as JSON lines or as the executor's .json, null losses as NaN") {
  const auto lines = plan_report::parse_metrics(
      "--metrics m.jsonl", "m.jsonl",
      "{\"iteration\":0,\"loss\":0.5,\"samples_per_s\":10}\n\n"
      "{\"iteration\":1,\"loss\":null,\"samples_per_s\":20,\"extra\":[1]}\n");
  REQUIRE(lines.ok());
  REQUIRE(lines->size() == 2);
  CHECK((*lines)[0].loss == 0.5);
  CHECK(std::isnan((*lines)[1].loss));
  CHECK((*lines)[1].samples_per_s == 20);
  const auto file = plan_report::parse_metrics("--metrics m.json", "m.json",
                                               R"({"iterations": [{"iteration": 3, "loss": 1}]})");
  REQUIRE(file.ok());
  REQUIRE(file->size() == 1);
  CHECK((*file)[0].iteration == 3);
}

TEST_CASE("a metrics file that is not one is refused naming the file, the line and the problem") {
  auto bad = plan_report::parse_metrics("--metrics m.jsonl", "m.jsonl",
                                        "{\"iteration\":0,\"loss\":1}\nnot json\n");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
  CHECK_THAT(bad.status().message(), Catch::StartsWith("--metrics m.jsonl line 2: not a JSON"));
  bad = plan_report::parse_metrics("--metrics m.jsonl", "m.jsonl", "{\"loss\":1}\n");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("line 1: no numeric \"iteration\""));
  bad = plan_report::parse_metrics("--metrics m.jsonl", "m.jsonl", "\n\n");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "--metrics m.jsonl: no metrics entries");
  bad = plan_report::parse_metrics("--metrics t.json", "t.json", kTrace);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("no \"iterations\" array"));
}

TEST_CASE("a measured trace gives its last iteration per rank, from that iteration's start") {
  const auto m = plan_report::parse_measured_trace("--trace t.json", kTrace);
  REQUIRE(m.ok());
  CHECK(m->count == 2);
  CHECK(m->index == 1);
  CHECK(m->duration_us == Approx(55));  // 1000 .. 1055
  REQUIRE(m->spans.size() == 6);        // transfers are not compute
  for (const auto& s : m->spans) {
    CHECK(s.start_us >= 0);
    CHECK(s.end_us <= 55);
  }
  CHECK(m->spans[0].rank == 0);
  CHECK(m->spans[0].kind == trace::SpanKind::kForward);
  CHECK(m->spans[0].start_us == 0);
  CHECK(m->spans[3].rank == 1);
  CHECK(m->spans[3].start_us == 10);
}

TEST_CASE("a trace that is not the executor's is refused saying what is missing") {
  auto bad = plan_report::parse_measured_trace("--trace x", "{\"iteration\":0}\n{}\n");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::StartsWith("--trace x: not a JSON object"));
  bad = plan_report::parse_measured_trace("--trace x", "{\"iterations\": []}");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "--trace x: no \"traceEvents\" array (not a Chrome trace)");
  bad = plan_report::parse_measured_trace("--trace x", "{\"traceEvents\": [{\"ph\": \"M\"}]}");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("no compute events"));
  bad = plan_report::parse_measured_trace(
      "--trace x", R"({"traceEvents": [{"ph": "X", "cat": "compute", "name": "F0", "tid": 0,
                                        "ts": 0, "dur": 1}]})");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("no optimizer step"));
  bad = plan_report::parse_measured_trace(
      "--trace x", R"({"traceEvents": [{"ph": "X", "cat": "compute", "name": "Q", "tid": 0,
                                        "ts": 0, "dur": 1}]})");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "--trace x: traceEvents[0]: unknown compute event name 'Q'");
  bad = plan_report::parse_measured_trace(
      "--trace x", R"({"traceEvents": [{"ph": "X", "cat": "compute", "name": "F0", "tid": 0,
                                        "ts": "soon", "dur": 1}]})");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.status().message(), Catch::Contains("traceEvents[0]: a compute event needs"));
}
