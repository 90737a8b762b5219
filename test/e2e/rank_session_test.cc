// RankSession, the library every way of running a rank shares: load and check a plan, open a
// rank, bind a data plane, iterate, and the checkpoint hooks (write a stage's part on its first
// replica, commit, resume).
#include "gp/exec/rank_session.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "../support/example_plans.h"
#include "../support/models.h"
#include "checkpoint/checkpoint_files.h"
#include "gp/model/model_io.h"

using namespace gp;

namespace {

constexpr std::chrono::milliseconds kTimeout{30000};

// Every rank of the sessions runs iterations [first, last) over one loopback hub; the mean loss
// per iteration. When `checkpoint_dir` is given, every rank writes its part after iteration
// `checkpoint_at` and rank 0 commits once all parts are on disk (the barrier `run` takes
// through the coordinator).
std::vector<double> run_sessions(std::vector<std::unique_ptr<exec::RankSession>>& sessions,
                                 int first, int last, const std::string& checkpoint_dir = "",
                                 int checkpoint_at = -1) {
  const auto& plan = sessions.front()->plan();
  exec::LoopbackHub hub(sessions.front()->loaded().world_size(), kTimeout);
  std::vector<std::vector<double>> sums(sessions.size(), std::vector<double>(last - first, 0));
  std::vector<Status> results(sessions.size());
  std::mutex mu;
  int parts_written = 0;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < sessions.size(); ++i) {
    threads.emplace_back([&, i] {
      auto comm = hub.communicator(sessions[i]->rank());
      results[i] = sessions[i]->bind(*comm);
      for (int it = first; it < last && results[i].ok(); ++it) {
        auto loss = sessions[i]->run_iteration(it);
        if (!loss.ok()) {
          results[i] = loss.status();
          comm->abort(loss.status().message());
          break;
        }
        sums[i][it - first] = *loss;
        if (it == checkpoint_at) {
          results[i] = sessions[i]->write_checkpoint_part(checkpoint_dir, it, "job");
          std::lock_guard<std::mutex> lock(mu);
          ++parts_written;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) REQUIRE(r.ok());
  if (checkpoint_at >= 0) {
    REQUIRE(parts_written == static_cast<int>(sessions.size()));
    REQUIRE(sessions.front()->commit_checkpoint(checkpoint_dir, checkpoint_at, "job").ok());
  }
  std::vector<double> losses(last - first, 0);
  for (const auto& per_rank : sums) {
    for (size_t k = 0; k < losses.size(); ++k) losses[k] += per_rank[k];
  }
  for (auto& l : losses) l /= static_cast<double>(plan.mini_batch());
  return losses;
}

std::vector<std::unique_ptr<exec::RankSession>> open_all(
    const std::shared_ptr<const plan::LoadedPlan>& loaded) {
  std::vector<std::unique_ptr<exec::RankSession>> sessions;
  for (int r = 0; r < loaded->world_size(); ++r) {
    exec::SessionOptions o;
    o.rank = r;
    auto s = exec::RankSession::open(loaded, o);
    INFO(s.status().to_string());
    REQUIRE(s.ok());
    sessions.push_back(std::move(s).value());
  }
  return sessions;
}

}  // namespace

TEST_CASE("sessions resumed from a committed checkpoint train on exactly as if never stopped") {
  const auto g = testing::zoo_graph("tiny-mmt");
  auto loaded = plan::LoadedPlan::from(
      testing::replicated_plan(g, testing::training(graphpipe::v1::OPTIMIZER_KIND_ADAM)));
  INFO(loaded.status().to_string());
  REQUIRE(loaded.ok());
  const auto dir =
      std::filesystem::temp_directory_path() / ("gp_rank_session_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);

  auto straight = open_all(*loaded);
  const std::vector<double> uninterrupted = run_sessions(straight, 0, 4);

  auto first = open_all(*loaded);
  // Only the first replica of each stage writes (replicas hold the same parameters).
  for (const auto& s : first) {
    const auto& ranks = s->plan().stages(s->stage()).device_ranks();
    CHECK(s->checkpoint_writer() == (ranks.Get(0) == s->rank()));
  }
  const auto before = run_sessions(first, 0, 2, dir.string(), 1);
  auto manifest = exec::latest_checkpoint(dir.string());
  INFO(manifest.status().to_string());
  REQUIRE(manifest.ok());
  CHECK(manifest->iteration() == 1);

  auto resumed = open_all(*loaded);
  for (auto& s : resumed) REQUIRE(s->resume(dir.string(), *manifest).ok());
  const auto after = run_sessions(resumed, 2, 4);
  REQUIRE(before.size() + after.size() == uninterrupted.size());
  for (size_t k = 0; k < 2; ++k) CHECK(before[k] == Approx(uninterrupted[k]).epsilon(1e-12));
  for (size_t k = 0; k < 2; ++k) {
    INFO("iteration " << k + 2);
    // Adam's moments and step count come back too: the trajectory is the same, not just close.
    CHECK(after[k] == Approx(uninterrupted[k + 2]).epsilon(1e-6));
  }
  // A session that did not resume does not continue the trajectory (the check above can fail).
  auto fresh = open_all(*loaded);
  const auto restarted = run_sessions(fresh, 2, 3);
  CHECK(restarted[0] != Approx(uninterrupted[2]).epsilon(1e-6));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a plan file another build wrote or that is not a plan is refused naming --plan") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("gp_rank_session_files_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto g = testing::zoo_graph("tiny-candle-uno");
  auto plan = testing::relay_plan(g, testing::training(graphpipe::v1::OPTIMIZER_KIND_SGD));
  plan.set_format_version(1);
  const std::string old_path = (dir / "old.pb").string();
  REQUIRE(model::write_message(old_path, plan).ok());
  auto old = plan::LoadedPlan::read(old_path);
  REQUIRE_FALSE(old.ok());
  CHECK_THAT(old.status().message(),
             Catch::Contains("--plan " + old_path) &&
                 Catch::Contains("plan.format_version = 1: a plan from an older graphpipe-plan"));
  auto missing = plan::LoadedPlan::read((dir / "missing.pb").string());
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(), Catch::Contains("missing.pb"));
  // A rank the plan does not have is refused when the session opens, naming it.
  plan.set_format_version(plan::kPlanFormatVersion);
  auto loaded = plan::LoadedPlan::from(plan);
  REQUIRE(loaded.ok());
  exec::SessionOptions o;
  o.rank = 7;
  auto session = exec::RankSession::open(*loaded, o);
  REQUIRE_FALSE(session.ok());
  CHECK_THAT(session.status().message(), Catch::Contains("--rank = 7 has no program"));
  std::filesystem::remove_all(dir);
}
