// A plan trained with its ranks as threads (exec::run_plan_locally), kept for comparison: the
// losses and every session's parameters, and a check that two such runs are bit for bit equal.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "gp/exec/rank_program.h"
#include "gp/exec/rank_session.h"

namespace gp::testing {

struct LocalTraining {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;  // per session, in session order
};

// Trains `plan` for `iterations`; `each_session`, when given, checks every session's runner
// afterwards (e.g. that it took the plan's choices).
inline LocalTraining train_locally(
    const graphpipe::v1::Plan& plan, int iterations, std::chrono::milliseconds timeout,
    const exec::Device& device,
    const std::function<void(const exec::RankSession&)>& each_session = {}) {
  std::vector<std::unique_ptr<exec::RankSession>> sessions;
  auto run = exec::run_plan_locally(plan, iterations, timeout, &sessions, 0, device);
  INFO(run.status().to_string());
  REQUIRE(run.ok());
  LocalTraining t;
  t.losses = run->losses;
  for (const auto& s : sessions) {
    if (each_session) each_session(*s);
    const exec::StageRunner& r = s->runner().stage_runner();
    std::vector<float> p(static_cast<size_t>(r.param_count()));
    REQUIRE(r.download_params(p).ok());
    t.params.push_back(std::move(p));
  }
  return t;
}

// The same losses and the same parameter bits, session by session.
inline void check_bit_identical(const LocalTraining& a, const LocalTraining& b) {
  CHECK(a.losses == b.losses);
  REQUIRE(a.params.size() == b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    INFO("session " << i);
    REQUIRE(a.params[i].size() == b.params[i].size());
    CHECK(std::memcmp(a.params[i].data(), b.params[i].data(), a.params[i].size() * 4) == 0);
  }
}

}  // namespace gp::testing
