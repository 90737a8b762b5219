// The control plane over loopback gRPC: a coordinator on 127.0.0.1:0 and ranks as threads, each
// with its own ControlClient. Assertions run on the test thread only (Catch2 is not
// thread-safe); rank threads hand their results back through futures, and every wait has a
// deadline.
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "control/control_client.h"
#include "control/coordinator.h"
#include "control/key_store.h"
#include "gp/model/model_io.h"

using namespace gp;
using namespace std::chrono_literals;
namespace pb = graphpipe::v1;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kWait = 10s;  // generous upper bound for anything that should happen promptly

pb::Plan tiny_plan() {
  pb::Plan plan;
  plan.set_format_version(1);
  plan.set_model_hash("tiny-model");
  plan.set_mini_batch(8);
  return plan;
}

std::unique_ptr<exec::Coordinator> start_coordinator(
    int world_size, const std::string& token = "",
    std::chrono::milliseconds heartbeat_timeout = 30s) {
  exec::CoordinatorOptions options;
  options.plan = tiny_plan();
  options.world_size = world_size;
  options.auth_token = token;
  options.heartbeat_timeout = heartbeat_timeout;
  options.job_id = "test-job";
  auto coordinator = exec::Coordinator::start(options);
  INFO(coordinator.status().to_string());
  REQUIRE(coordinator.ok());
  REQUIRE((*coordinator)->port() > 0);
  return std::move(coordinator).value();
}

std::unique_ptr<exec::ControlClient> connect_to(const exec::Coordinator& coordinator,
                                                const std::string& token = "") {
  auto client = exec::ControlClient::connect(coordinator.address(), token, 5s);
  INFO(client.status().to_string());
  REQUIRE(client.ok());
  return std::move(client).value();
}

pb::RegisterRequest registration(int rank, int world_size, const std::string& plan_hash) {
  pb::RegisterRequest r;
  r.set_rank(rank);
  r.set_world_size(world_size);
  r.set_plan_hash(plan_hash);
  r.set_data_address("127.0.0.1:" + std::to_string(29500 + rank));
  r.set_host("localhost");
  r.set_device("cpu");
  return r;
}

// Waits for a rank thread's result, failing the test instead of hanging.
template <typename T>
T get_within(std::future<T>& f, std::chrono::milliseconds limit = kWait) {
  REQUIRE(f.wait_for(limit) == std::future_status::ready);
  return f.get();
}

// Connects one client per rank and registers them all concurrently; returns the clients.
std::vector<std::unique_ptr<exec::ControlClient>> register_all(const exec::Coordinator& c,
                                                               int world_size,
                                                               const std::string& token = "") {
  std::vector<std::unique_ptr<exec::ControlClient>> clients;
  for (int r = 0; r < world_size; ++r) clients.push_back(connect_to(c, token));
  std::vector<std::future<Result<pb::RegisterResponse>>> futures;
  for (int r = 0; r < world_size; ++r) {
    futures.push_back(std::async(std::launch::async, [&, r] {
      return clients[r]->register_rank(registration(r, world_size, c.plan_hash()), kWait);
    }));
  }
  for (auto& f : futures) {
    auto resp = get_within(f);
    INFO(resp.status().to_string());
    REQUIRE(resp.ok());
  }
  return clients;
}

pb::RankStatus running(int rank, int64_t iteration) {
  pb::RankStatus s;
  s.set_rank(rank);
  s.set_state(pb::RANK_STATE_RUNNING);
  s.set_iteration(iteration);
  return s;
}

// Polls `done` until it holds or `limit` passes; returns whether it held.
bool poll_until(const std::function<bool()>& done, std::chrono::milliseconds limit = kWait) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("every rank registers and receives every data address and the plan", "[control]") {
  constexpr int kWorld = 3;
  auto coordinator = start_coordinator(kWorld);
  CHECK(coordinator->address() == "127.0.0.1:" + std::to_string(coordinator->port()));
  CHECK(coordinator->plan_hash() == model::message_hash(tiny_plan()));

  std::vector<std::unique_ptr<exec::ControlClient>> clients;
  for (int r = 0; r < kWorld; ++r) clients.push_back(connect_to(*coordinator));
  std::vector<std::future<Result<pb::RegisterResponse>>> futures;
  for (int r = 0; r < kWorld; ++r) {
    futures.push_back(std::async(std::launch::async, [&, r] {
      return clients[r]->register_rank(registration(r, kWorld, coordinator->plan_hash()), kWait);
    }));
  }
  for (int r = 0; r < kWorld; ++r) {
    auto resp = get_within(futures[r]);
    INFO("rank " << r << ": " << resp.status().to_string());
    REQUIRE(resp.ok());
    CHECK(resp->job_id() == "test-job");
    REQUIRE(resp->data_addresses_size() == kWorld);
    for (int i = 0; i < kWorld; ++i) {
      CHECK(resp->data_addresses(i) == "127.0.0.1:" + std::to_string(29500 + i));
    }
  }

  auto plan = clients[1]->get_plan(1);
  REQUIRE(plan.ok());
  CHECK(model::message_hash(*plan) == coordinator->plan_hash());

  // A live rank cannot register again.
  auto again = clients[2]->register_rank(registration(2, kWorld, coordinator->plan_hash()), 1s);
  CHECK(again.status().code() == StatusCode::kAlreadyExists);
  CHECK(contains(again.status().message(), "rank 2"));

  auto status = clients[0]->get_status();
  REQUIRE(status.ok());
  CHECK(status->registration_complete());
  REQUIRE(status->ranks_size() == kWorld);
  for (const auto& s : status->ranks()) CHECK(s.registered());
}

TEST_CASE("rank 0's NCCL unique ids reach every rank, and another rank may not hand out ids",
          "[control]") {
  constexpr int kWorld = 3;
  auto coordinator = start_coordinator(kWorld);
  std::vector<std::unique_ptr<exec::ControlClient>> clients;
  for (int r = 0; r < kWorld; ++r) clients.push_back(connect_to(*coordinator));
  // Rank 1 may not hand out ids: refused, naming the field; it registers again without them.
  auto with_ids = registration(1, kWorld, coordinator->plan_hash());
  with_ids.add_nccl_unique_ids(std::string(128, 'x'));
  auto refused = clients[1]->register_rank(with_ids, 5s);
  CHECK(refused.status().code() == StatusCode::kInvalidArgument);
  CHECK(contains(refused.status().message(), "nccl_unique_ids"));
  CHECK(contains(refused.status().message(), "rank 1"));

  const std::vector<std::string> ids = {std::string(128, '\x01'), std::string(128, '\x02')};
  std::vector<std::future<Result<pb::RegisterResponse>>> futures;
  for (int r = 0; r < kWorld; ++r) {
    futures.push_back(std::async(std::launch::async, [&, r] {
      auto req = registration(r, kWorld, coordinator->plan_hash());
      if (r == 0) {
        for (const auto& id : ids) req.add_nccl_unique_ids(id);
      }
      return clients[r]->register_rank(req, kWait);
    }));
  }
  for (int r = 0; r < kWorld; ++r) {
    auto resp = get_within(futures[r]);
    INFO("rank " << r << ": " << resp.status().to_string());
    REQUIRE(resp.ok());
    REQUIRE(resp->nccl_unique_ids_size() == 2);
    CHECK(resp->nccl_unique_ids(0) == ids[0]);
    CHECK(resp->nccl_unique_ids(1) == ids[1]);
  }
}

TEST_CASE("registration refuses a wrong plan hash, world size or rank", "[control]") {
  auto coordinator = start_coordinator(2);
  auto client = connect_to(*coordinator);

  auto wrong_hash = client->register_rank(registration(1, 2, "deadbeefdeadbeef"), 5s);
  CHECK(wrong_hash.status().code() == StatusCode::kFailedPrecondition);
  const std::string& msg = wrong_hash.status().message();
  INFO(msg);
  CHECK(contains(msg, "rank 1"));
  CHECK(contains(msg, "deadbeefdeadbeef"));
  CHECK(contains(msg, coordinator->plan_hash()));
  CHECK(contains(msg, "same plan file"));

  auto wrong_world = client->register_rank(registration(1, 3, coordinator->plan_hash()), 5s);
  CHECK(wrong_world.status().code() == StatusCode::kFailedPrecondition);
  CHECK(contains(wrong_world.status().message(), "world_size 3"));

  auto bad_rank = client->register_rank(registration(2, 2, coordinator->plan_hash()), 5s);
  CHECK(bad_rank.status().code() == StatusCode::kInvalidArgument);

  SECTION("the others' registration times out naming the missing rank and its refusal") {
    auto other = connect_to(*coordinator);
    const auto start = Clock::now();
    auto alone = other->register_rank(registration(0, 2, coordinator->plan_hash()), 300ms);
    const auto elapsed = Clock::now() - start;
    CHECK(alone.status().code() == StatusCode::kDeadlineExceeded);
    INFO(alone.status().message());
    CHECK(contains(alone.status().message(), "missing rank 1"));
    CHECK(contains(alone.status().message(), "refused: rank 1: world_size 3"));
    CHECK(elapsed < 3s);
    // The timed-out registration was withdrawn: the rank may try again.
    auto status = other->get_status();
    REQUIRE(status.ok());
    CHECK_FALSE(status->ranks(0).registered());
  }
}

TEST_CASE("with a token, calls without it or with a wrong one are UNAUTHENTICATED", "[control]") {
  auto coordinator = start_coordinator(1, "s3cret");

  auto none = connect_to(*coordinator, "")->get_status();
  CHECK(none.status().code() == StatusCode::kUnauthenticated);
  CHECK(contains(none.status().message(), "GetStatus"));
  CHECK(contains(none.status().message(), "authorization"));

  auto wrong = connect_to(*coordinator, "guess")->get_status();
  CHECK(wrong.status().code() == StatusCode::kUnauthenticated);

  auto right_client = connect_to(*coordinator, "s3cret");
  auto right = right_client->get_status();
  INFO(right.status().to_string());
  CHECK(right.ok());
  auto reg = right_client->register_rank(registration(0, 1, coordinator->plan_hash()), 5s);
  INFO(reg.status().to_string());
  CHECK(reg.ok());
}

TEST_CASE("connecting where nobody listens fails with UNAVAILABLE within the timeout",
          "[control]") {
  // A bound but not listening socket: connections are refused and nobody else can take the port.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const std::string address = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));

  const auto start = Clock::now();
  auto client = exec::ControlClient::connect(address, "", 500ms);
  const auto elapsed = Clock::now() - start;
  ::close(fd);
  CHECK(client.status().code() == StatusCode::kUnavailable);
  INFO(client.status().message());
  CHECK(contains(client.status().message(),
                 "cannot reach the coordinator at " + address + " within 0.5 s"));
  CHECK(elapsed >= 400ms);
  CHECK(elapsed < 3s);
}

TEST_CASE("a barrier releases every rank, can be reused, and times out naming the missing rank",
          "[control]") {
  constexpr int kWorld = 3;
  auto coordinator = start_coordinator(kWorld);
  auto clients = register_all(*coordinator, kWorld);

  for (int round = 0; round < 2; ++round) {  // the same name twice
    std::vector<std::future<Status>> futures;
    for (int r = 0; r < kWorld; ++r) {
      futures.push_back(
          std::async(std::launch::async, [&, r] { return clients[r]->barrier(r, "init", kWait); }));
    }
    for (auto& f : futures) {
      const Status s = get_within(f);
      INFO(s.to_string());
      CHECK(s.ok());
    }
  }

  std::vector<std::future<Status>> futures;
  for (int r = 0; r < 2; ++r) {  // rank 2 never arrives
    futures.push_back(
        std::async(std::launch::async, [&, r] { return clients[r]->barrier(r, "sync", 300ms); }));
  }
  for (auto& f : futures) {
    const Status s = get_within(f);
    INFO(s.to_string());
    CHECK(s.code() == StatusCode::kDeadlineExceeded);
    CHECK(contains(s.message(), "Barrier"));
    CHECK(contains(s.message(), "'sync'"));
    CHECK(contains(s.message(), "waiting for rank 2"));
  }
}

TEST_CASE("a rank that stops heartbeating aborts the job and the others are told", "[control]") {
  constexpr int kWorld = 3;
  constexpr auto kTimeout = 300ms;
  auto coordinator = start_coordinator(kWorld, "", kTimeout);
  auto clients = register_all(*coordinator, kWorld);
  const auto registered = Clock::now();  // the monitor's clock started a little earlier

  // Ranks 0 and 1 heartbeat every 50 ms until told to abort; rank 2 stays silent.
  std::vector<std::future<Result<pb::HeartbeatResponse>>> futures;
  for (int r = 0; r < 2; ++r) {
    futures.push_back(std::async(std::launch::async, [&, r]() -> Result<pb::HeartbeatResponse> {
      const auto deadline = Clock::now() + kWait;
      while (Clock::now() < deadline) {
        auto resp = clients[r]->heartbeat(running(r, 1));
        if (!resp.ok() || resp->abort()) return resp;
        std::this_thread::sleep_for(50ms);
      }
      return Status(StatusCode::kDeadlineExceeded, "never told to abort");
    }));
  }

  REQUIRE(poll_until([&] { return coordinator->aborted(); }, 5s));
  const auto detected = Clock::now() - registered;
  CHECK(detected <= 2 * kTimeout);
  INFO(coordinator->abort_reason());
  CHECK(contains(coordinator->abort_reason(), "rank 2 stopped responding (no heartbeat for"));

  for (auto& f : futures) {
    auto resp = get_within(f);
    INFO(resp.status().to_string());
    REQUIRE(resp.ok());
    CHECK(resp->abort());
    CHECK(contains(resp->abort_reason(), "rank 2 stopped responding"));
  }
  const Status done = coordinator->wait_for_completion(1s);
  CHECK(done.code() == StatusCode::kAborted);
  const Status barrier = clients[0]->barrier(0, "after", 1s);
  CHECK(barrier.code() == StatusCode::kAborted);
  CHECK(contains(barrier.message(), "rank 2 stopped responding"));

  auto status = clients[0]->get_status();
  REQUIRE(status.ok());
  CHECK(status->aborted());
  CHECK_FALSE(status->ranks(2).alive());
  CHECK(status->ranks(2).heartbeat_age_ms() == -1);
  CHECK(status->ranks(0).alive());
  CHECK(status->failed_rank() == 2);  // what the launcher kills and re-plans without
}

TEST_CASE("a requested stop is agreed: every rank stops after the same, late enough iteration",
          "[control]") {
  // Three stages in a chain (diameter 2), one rank each.
  exec::CoordinatorOptions options;
  options.plan = tiny_plan();
  for (int s = 0; s < 3; ++s) {
    auto* stage = options.plan.add_stages();
    stage->set_id(s);
    stage->add_device_ranks(s);
  }
  for (int s = 0; s < 2; ++s) {
    auto* e = options.plan.add_edges();
    e->set_src_stage(s);
    e->set_dst_stage(s + 1);
  }
  options.world_size = 3;
  auto started = exec::Coordinator::start(options);
  REQUIRE(started.ok());
  auto& coordinator = **started;
  auto clients = register_all(coordinator, 3);

  // Before any request, proposing is an error and heartbeats say nothing.
  CHECK(clients[0]->propose_stop(0, 4).status().code() == StatusCode::kFailedPrecondition);
  const auto steady_us = [] {
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const double sent_us = steady_us();
  auto hb = clients[1]->heartbeat(running(1, 4));
  const double received_us = steady_us();
  REQUIRE(hb.ok());
  CHECK_FALSE(hb->stop_requested());
  // The coordinator's clock as it answered (one process here: one clock), for clock offsets.
  CHECK(hb->coordinator_steady_us() >= sent_us);
  CHECK(hb->coordinator_steady_us() <= received_us);

  REQUIRE(clients[1]->request_stop(1, 15, "SIGTERM").ok());
  REQUIRE(clients[2]->request_stop(2, 2, "SIGINT").ok());  // the first request decides
  hb = clients[0]->heartbeat(running(0, 5));
  REQUIRE(hb.ok());
  CHECK(hb->stop_requested());

  // Undecided until every rank has proposed; a rank's later proposals do not move its own.
  auto d = clients[0]->propose_stop(0, 5);
  REQUIRE(d.ok());
  CHECK(d->stop_after_iteration() == -1);
  d = clients[2]->propose_stop(2, 4);
  REQUIRE(d.ok());
  CHECK(d->stop_after_iteration() == -1);
  d = clients[0]->propose_stop(0, 6);
  REQUIRE(d.ok());
  CHECK(d->stop_after_iteration() == -1);
  d = clients[1]->propose_stop(1, 5);
  REQUIRE(d.ok());
  // max proposal 5, + 1 for the iteration the last proposer runs next, + the diameter 2.
  CHECK(d->stop_after_iteration() == 8);
  CHECK(d->signal() == 15);
  CHECK(contains(d->reason(), "rank 1 asked to stop (SIGTERM)"));
  for (int r = 0; r < 3; ++r) {
    auto again = clients[r]->propose_stop(r, 7);
    REQUIRE(again.ok());
    CHECK(again->stop_after_iteration() == 8);
  }
  auto status = clients[0]->get_status();
  REQUIRE(status.ok());
  CHECK(status->stop_requested());
  CHECK(status->stop_after_iteration() == 8);
  CHECK(contains(exec::status_text(*status), "stopping: rank 1 asked to stop"));
  CHECK_FALSE(coordinator.aborted());

  CHECK(clients[0]->request_stop(5, 15, "x").code() == StatusCode::kInvalidArgument);
  CHECK(clients[0]->request_stop(0, 99, "x").code() == StatusCode::kInvalidArgument);
}

TEST_CASE("GetStatus shows each rank's loss over its own samples and its throughput", "[control]") {
  exec::CoordinatorOptions options;
  options.plan = tiny_plan();  // mini-batch 8
  auto* stage = options.plan.add_stages();
  stage->add_device_ranks(0);
  stage->add_device_ranks(1);  // two replicas: 4 samples each
  options.world_size = 2;
  std::atomic<int> reports{0};
  options.on_metrics = [&reports](const pb::ReportMetricsRequest&) { ++reports; };
  auto started = exec::Coordinator::start(options);
  REQUIRE(started.ok());
  auto& coordinator = **started;
  auto clients = register_all(coordinator, 2);
  pb::IterationMetrics m;
  m.set_iteration(3);
  m.set_loss(2.0);  // summed over the rank's 4 samples
  REQUIRE(clients[1]->report_metrics(1, {m}).ok());
  auto st = running(0, 4);
  st.set_samples_per_s(123.5);
  REQUIRE(clients[0]->heartbeat(st).ok());
  auto status = clients[0]->get_status();
  REQUIRE(status.ok());
  CHECK(reports == 1);
  CHECK_FALSE(status->ranks(0).has_loss());
  CHECK(status->ranks(0).samples_per_s() == 123.5);
  CHECK(status->ranks(1).has_loss());
  CHECK(status->ranks(1).loss() == 0.5);
  CHECK(status->ranks(1).loss_iteration() == 3);
  const std::string text = exec::status_text(*status);
  CHECK(contains(text, "rank 0: iter 4, 123.5 samples/s"));
  const std::string json = exec::status_json(*status);
  CHECK(contains(json, "\"loss\": 0.5"));
  CHECK(contains(json, "\"loss\": null"));
  CHECK(contains(json, "\"samples_per_s\": 123.5"));
}

TEST_CASE("GetStatus divides each replica's loss by its own slice when replicas split unevenly",
          "[control]") {
  exec::CoordinatorOptions options;
  options.plan = tiny_plan();  // mini-batch 8
  auto* stage = options.plan.add_stages();
  stage->set_micro_batch(4);
  for (int r = 0; r < 3; ++r) stage->add_device_ranks(r);  // slices of 1, 1 and 2 samples
  options.world_size = 3;
  auto started = exec::Coordinator::start(options);
  REQUIRE(started.ok());
  auto clients = register_all(**started, 3);
  for (int r : {0, 2}) {
    pb::IterationMetrics m;
    m.set_iteration(0);
    m.set_loss(4.0);  // summed over the rank's samples of both micro-batches
    REQUIRE(clients[r]->report_metrics(r, {m}).ok());
  }
  auto status = clients[0]->get_status();
  REQUIRE(status.ok());
  CHECK(status->ranks(0).loss() == 2.0);  // 2 samples
  CHECK(status->ranks(2).loss() == 1.0);  // 4 samples
}

TEST_CASE("Abort from one rank wakes the others' barriers and heartbeats", "[control]") {
  constexpr int kWorld = 3;
  auto coordinator = start_coordinator(kWorld);
  auto clients = register_all(*coordinator, kWorld);

  std::vector<std::future<Status>> waiting;
  for (int r = 0; r < 2; ++r) {
    waiting.push_back(
        std::async(std::launch::async, [&, r] { return clients[r]->barrier(r, "step", kWait); }));
  }
  const Status abort = clients[2]->abort(2, "loss is NaN at iteration 7");
  REQUIRE(abort.ok());
  for (auto& f : waiting) {
    const Status s = get_within(f, 5s);  // long before the barrier's own timeout
    INFO(s.to_string());
    CHECK(s.code() == StatusCode::kAborted);
    CHECK(contains(s.message(), "rank 2 aborted the job: loss is NaN at iteration 7"));
  }
  auto hb = clients[0]->heartbeat(running(0, 7));
  REQUIRE(hb.ok());
  CHECK(hb->abort());
  CHECK(hb->abort_reason() == "rank 2 aborted the job: loss is NaN at iteration 7");

  // The first reason wins.
  REQUIRE(clients[1]->abort(-1, "operator cleanup").ok());
  CHECK(coordinator->abort_reason() == "rank 2 aborted the job: loss is NaN at iteration 7");
}

TEST_CASE("Abort wakes a pending registration", "[control]") {
  auto coordinator = start_coordinator(2);
  auto client = connect_to(*coordinator);
  auto pending = std::async(std::launch::async, [&] {
    return client->register_rank(registration(0, 2, coordinator->plan_hash()), kWait);
  });
  REQUIRE(poll_until([&] { return coordinator->status().ranks(0).registered(); }));
  coordinator->abort("launcher gave up", -1);
  auto resp = get_within(pending, 5s);
  CHECK(resp.status().code() == StatusCode::kAborted);
  CHECK(contains(resp.status().message(), "launcher gave up"));

  auto later =
      connect_to(*coordinator)->register_rank(registration(1, 2, coordinator->plan_hash()), 1s);
  CHECK(later.status().code() == StatusCode::kAborted);
}

TEST_CASE("ReportStatus FAILED aborts the job with the rank's error", "[control]") {
  auto coordinator = start_coordinator(2);
  auto clients = register_all(*coordinator, 2);

  pb::RankStatus failed = running(1, 3);
  failed.set_state(pb::RANK_STATE_FAILED);
  failed.set_error("CUDA error: out of memory");
  REQUIRE(clients[1]->report_status(failed).ok());

  CHECK(coordinator->aborted());
  CHECK(coordinator->abort_reason() == "rank 1 failed: CUDA error: out of memory");
  auto hb = clients[0]->heartbeat(running(0, 3));
  REQUIRE(hb.ok());
  CHECK(hb->abort());
  CHECK(hb->abort_reason() == "rank 1 failed: CUDA error: out of memory");
  const Status done = coordinator->wait_for_completion(1s);
  CHECK(done.code() == StatusCode::kAborted);
  CHECK(contains(done.message(), "rank 1 failed"));
}

// Ranks 0, 2 and 3 heartbeat from threads of their own every 50 ms until the job is aborted, or
// until `stops_at[r]` after the start for those it lists (as if SIGKILLed then); at 300 ms rank 1
// reports that it lost rank 2. The verdict blames whichever rank stopped first. Returns the
// coordinator's status once aborted, and in `reporter_heard` what rank 1 was told.
pb::GetStatusResponse verdict_after_lost_peer(
    const std::map<int, std::chrono::milliseconds>& stops_at, std::string* reporter_heard) {
  auto coordinator = start_coordinator(4, "", 5s);
  auto clients = register_all(*coordinator, 4);
  const auto start = Clock::now();
  std::atomic<bool> stop{false};
  std::vector<std::thread> beats;
  for (int r : {0, 2, 3}) {
    const auto it = stops_at.find(r);
    const auto until = it == stops_at.end() ? Clock::time_point::max() : start + it->second;
    beats.emplace_back([&, r, until] {
      while (!stop && !coordinator->aborted() && Clock::now() < until) {
        (void)clients[r]->heartbeat(running(r, 5));
        std::this_thread::sleep_for(50ms);
      }
    });
  }
  std::this_thread::sleep_until(start + 300ms);  // a few heartbeats each: their period is known
  pb::RankStatus failed = running(1, 5);
  failed.set_state(pb::RANK_STATE_FAILED);
  failed.set_error(
      "rank 1, iteration 5: rank 2 (pid 7) exited while rank 1 waited for its message");
  failed.set_lost_peer(2);
  // The reporter heartbeats its FAILED status until it hears the verdict.
  bool heard = poll_until(
      [&] {
        auto hb = clients[1]->heartbeat(failed);
        if (hb.ok() && hb->abort()) {
          *reporter_heard =
              hb->abort_reason() + " [failed_rank " + std::to_string(hb->failed_rank()) + "]";
          return true;
        }
        return false;
      },
      5s);
  stop = true;
  for (auto& t : beats) t.join();
  CHECK(heard);
  return coordinator->status();
}

TEST_CASE("a rank that lost a silent peer gets the peer blamed, not itself", "[control]") {
  std::string heard;
  const pb::GetStatusResponse status = verdict_after_lost_peer({{2, 0ms}}, &heard);
  INFO(status.abort_reason());
  CHECK(status.failed_rank() == 2);
  CHECK(status.abort_reason().rfind("rank 2 stopped responding (no heartbeat for ", 0) == 0);
  CHECK(contains(status.abort_reason(), "rank 1 lost it: rank 1, iteration 5: rank 2 (pid 7)"));
  CHECK(contains(heard, "[failed_rank 2]"));
}

TEST_CASE("of two silent ranks the one that stopped heartbeating first is blamed", "[control]") {
  std::string heard;
  // Rank 3 stops first; rank 2, the peer rank 1 lost, follows it (a cascade).
  const pb::GetStatusResponse status = verdict_after_lost_peer({{3, 20ms}, {2, 220ms}}, &heard);
  INFO(status.abort_reason());
  CHECK(status.failed_rank() == 3);
  CHECK(status.abort_reason().rfind("rank 3 stopped responding (no heartbeat for ", 0) == 0);
  CHECK(contains(heard, "[failed_rank 3]"));
}

TEST_CASE("a rank that lost a peer which heartbeats on is blamed itself", "[control]") {
  std::string heard;
  const pb::GetStatusResponse status = verdict_after_lost_peer({}, &heard);
  INFO(status.abort_reason());
  CHECK(status.failed_rank() == 1);
  CHECK(status.abort_reason() ==
        "rank 1 failed: rank 1, iteration 5: rank 2 (pid 7) exited while rank 1 waited for its "
        "message");
  CHECK(contains(heard, "[failed_rank 1]"));
}

TEST_CASE("GetStatus shows each rank's iteration and instruction, and metrics are kept",
          "[control]") {
  auto coordinator = start_coordinator(2);
  auto clients = register_all(*coordinator, 2);

  pb::RankStatus s = running(1, 12);
  s.set_instruction_index(17);
  s.set_instruction("RECV act[stage 2 -> 5, mb 7] from rank 0");
  auto hb = clients[1]->heartbeat(s);
  REQUIRE(hb.ok());
  CHECK_FALSE(hb->abort());
  // ReportStatus records without being a heartbeat.
  REQUIRE(clients[0]->report_status(running(0, 11)).ok());

  auto status = clients[0]->get_status();
  REQUIRE(status.ok());
  CHECK(status->job_id() == "test-job");
  CHECK(status->world_size() == 2);
  CHECK_FALSE(status->aborted());
  REQUIRE(status->ranks_size() == 2);
  const pb::RankStatus& r1 = status->ranks(1);
  CHECK(r1.rank() == 1);
  CHECK(r1.state() == pb::RANK_STATE_RUNNING);
  CHECK(r1.iteration() == 12);
  CHECK(r1.instruction_index() == 17);
  CHECK(r1.instruction() == "RECV act[stage 2 -> 5, mb 7] from rank 0");
  CHECK(r1.alive());
  CHECK(r1.heartbeat_age_ms() >= 0);
  CHECK(r1.unix_time_ms() > 0);
  CHECK(status->ranks(0).iteration() == 11);
  CHECK(status->ranks(0).heartbeat_age_ms() == -1);

  const std::string text = exec::status_text(*status);
  INFO(text);
  CHECK(contains(text, "rank 0: iter 11\n"));
  CHECK(contains(text,
                 "rank 1: iter 12, waiting on RECV act[stage 2 -> 5, mb 7] from rank 0 "
                 "(instruction 17)\n"));

  pb::IterationMetrics m;
  m.set_iteration(0);
  m.set_loss(2.5);
  pb::IterationMetrics m1 = m;
  m1.set_iteration(1);
  m1.set_loss(2.25);
  REQUIRE(clients[1]->report_metrics(1, {m1, m}).ok());
  const auto metrics = coordinator->metrics();
  REQUIRE(metrics.size() == 1);
  CHECK(metrics[0].rank() == 1);
  REQUIRE(metrics[0].iterations_size() == 2);
  CHECK(metrics[0].iterations(0).loss() == 2.5);
  CHECK(metrics[0].iterations(1).loss() == 2.25);
}

TEST_CASE("the coordinator keeps only each rank's newest metrics however long the job runs",
          "[control]") {
  auto coordinator = start_coordinator(2);
  auto clients = register_all(*coordinator, 2);
  constexpr int kIterations = 5000;
  for (int i = 0; i < kIterations; i += 100) {
    std::vector<pb::IterationMetrics> batch;
    for (int k = i; k < i + 100; ++k) {
      pb::IterationMetrics& m = batch.emplace_back();
      m.set_iteration(k);
      m.set_loss(1.0 + k);
    }
    REQUIRE(clients[1]->report_metrics(1, batch).ok());
  }
  const auto metrics = coordinator->metrics();
  REQUIRE(metrics.size() == 1);
  const auto kept = static_cast<int>(exec::Coordinator::kMetricsKept);
  REQUIRE(metrics[0].iterations_size() == kept);
  CHECK(metrics[0].iterations(0).iteration() == kIterations - kept);
  CHECK(metrics[0].iterations(kept - 1).iteration() == kIterations - 1);
  auto status = clients[0]->get_status();
  REQUIRE(status.ok());
  CHECK(status->ranks(1).loss_iteration() == kIterations - 1);
}

TEST_CASE("the job completes when every rank finishes, and finished ranks may go silent",
          "[control]") {
  constexpr auto kTimeout = 300ms;
  auto coordinator = start_coordinator(2, "", kTimeout);
  auto clients = register_all(*coordinator, 2);
  CHECK(coordinator->wait_for_completion(50ms).code() == StatusCode::kDeadlineExceeded);

  pb::RankStatus finished = running(0, 5);
  finished.set_state(pb::RANK_STATE_FINISHED);
  REQUIRE(clients[0]->heartbeat(finished).ok());
  finished.set_rank(1);
  REQUIRE(clients[1]->report_status(finished).ok());
  const Status done = coordinator->wait_for_completion(5s);
  INFO(done.to_string());
  CHECK(done.ok());
  // Checking that something does not happen needs a wait: two heartbeat timeouts.
  CHECK_FALSE(poll_until([&] { return coordinator->aborted(); }, 2 * kTimeout));
}

namespace {

// This process's peak resident set (VmHWM) in MiB; -1 when /proc cannot tell.
int64_t peak_rss_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) / 1024;
  }
  return -1;
}

// Lowers VmHWM to the current RSS (Linux >= 4.0), so that the next reading is this test's peak.
void reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
}

// A raw Register call whose request is `mib` MiB in one string field. Its bytes share one static
// 1 MiB block, so the sending side (in this same process) allocates almost nothing.
grpc::Status send_huge_register(const std::string& address, int mib, const std::string& token) {
  static const std::string block(1 << 20, 'x');
  std::string head = "\x2a";  // field 5 (host), length-delimited, then the length as a varint
  for (uint64_t v = static_cast<uint64_t>(mib) << 20;; v >>= 7) {
    head += static_cast<char>(v < 0x80 ? v : (v & 0x7f) | 0x80);
    if (v < 0x80) break;
  }
  std::vector<grpc::Slice> slices{grpc::Slice(head)};
  for (int i = 0; i < mib; ++i) {
    slices.emplace_back(block.data(), block.size(), grpc::Slice::STATIC_SLICE);
  }
  grpc::ByteBuffer request(slices.data(), slices.size());
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kWait);
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/graphpipe.v1.Executor/Register", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  auto status = done.get_future();
  REQUIRE(status.wait_for(kWait + 5s) == std::future_status::ready);
  return status.get();
}

}  // namespace

TEST_CASE("200 MB unauthenticated Registers are refused from their headers, RSS stays flat",
          "[control]") {
  auto coordinator = start_coordinator(1, "s3cret");
  reset_peak_rss();
  const int64_t before = peak_rss_mib();
  for (int i = 0; i < 5; ++i) {
    const grpc::Status s = send_huge_register(coordinator->address(), 200, "");
    INFO("call " << i << ": " << s.error_code() << " " << s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK(contains(s.error_message(), "missing 'authorization' metadata"));
  }
  const int64_t after = peak_rss_mib();
  INFO("peak RSS " << before << " MiB before, " << after << " MiB after");
  REQUIRE(before > 0);
  CHECK(after - before < 64);
  // The job goes on: a rank with the token registers.
  auto reg = connect_to(*coordinator, "s3cret")
                 ->register_rank(registration(0, 1, coordinator->plan_hash()), 5s);
  INFO(reg.status().to_string());
  CHECK(reg.ok());
}

TEST_CASE("an oversized request is cut off by the memory quota, with or without a token",
          "[control]") {
  const std::string token = GENERATE(std::string(), std::string("s3cret"));
  auto coordinator = start_coordinator(1, token);
  reset_peak_rss();
  const int64_t before = peak_rss_mib();
  for (int i = 0; i < 3; ++i) {
    const grpc::Status s = send_huge_register(coordinator->address(), 200, token);
    INFO("token '" << token << "', call " << i << ": " << s.error_code() << " "
                   << s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  const int64_t after = peak_rss_mib();
  INFO("peak RSS " << before << " MiB before, " << after << " MiB after");
  REQUIRE(before > 0);
  // The quota of a one-rank job with a small plan is 40 MiB (32 MiB and twice the 4 MiB request
  // limit); the transport reads ahead of it by some buffers.
  CHECK(after - before < 128);
  auto status = connect_to(*coordinator, token)->get_status();
  INFO(status.status().to_string());
  CHECK(status.ok());
}

TEST_CASE("a request below the limit passes the quota: rank 0's 3 MiB of NCCL ids", "[control]") {
  auto coordinator = start_coordinator(1, "s3cret");
  pb::RegisterRequest r = registration(0, 1, coordinator->plan_hash());
  for (int i = 0; i < 25000; ++i) r.add_nccl_unique_ids(std::string(128, static_cast<char>(i)));
  REQUIRE(r.ByteSizeLong() > (3u << 20));
  auto reg = connect_to(*coordinator, "s3cret")->register_rank(r, 5s);
  INFO(reg.status().to_string());
  REQUIRE(reg.ok());
  CHECK(reg->nccl_unique_ids_size() == 25000);
}

TEST_CASE("the coordinator refuses a world size above 65536 or other than the plan's",
          "[control]") {
  exec::CoordinatorOptions options;
  options.plan = tiny_plan();
  options.world_size = 2147483647;
  auto huge = exec::Coordinator::start(options);
  CHECK(huge.status().code() == StatusCode::kInvalidArgument);
  CHECK(contains(huge.status().message(), "--world-size) = 2147483647, must be at most 65536"));

  // A plan whose stages use ranks 0..1 fixes the world at 2.
  auto* stage = options.plan.add_stages();
  stage->add_device_ranks(0);
  stage->add_device_ranks(1);
  options.world_size = 3;
  auto other = exec::Coordinator::start(options);
  CHECK(other.status().code() == StatusCode::kInvalidArgument);
  CHECK(contains(other.status().message(), "--world-size) = 3, but the plan has 2 ranks"));
  options.world_size = 2;
  auto same = exec::Coordinator::start(options);
  INFO(same.status().to_string());
  CHECK(same.ok());
}

TEST_CASE("a plan larger than the transport's quota still reaches the ranks", "[control]") {
  exec::CoordinatorOptions options;
  options.plan = tiny_plan();
  options.plan.set_model_hash(std::string(100 << 20, 'h'));
  options.world_size = 1;
  auto coordinator = exec::Coordinator::start(options);
  REQUIRE(coordinator.ok());
  auto clients = register_all(**coordinator, 1);
  auto plan = clients[0]->get_plan(0);
  INFO(plan.status().to_string());
  REQUIRE(plan.ok());
  CHECK(plan->model_hash().size() == (100u << 20));
}

TEST_CASE("the rendezvous store sets and gets keys through the coordinator", "[control]") {
  auto coordinator = start_coordinator(2, "s3cret");
  auto client0 = connect_to(*coordinator, "s3cret");
  auto client1 = connect_to(*coordinator, "s3cret");
  exec::CoordinatorStore store0(*client0, 0);
  exec::CoordinatorStore store1(*client1, 1);
  REQUIRE(store0.set("job.host.0", std::string("a\0b", 3)).ok());
  auto value = store1.get("job.host.0", 1s);
  INFO(value.status().to_string());
  REQUIRE(value.ok());
  CHECK(*value == std::string("a\0b", 3));  // bytes, not a C string
  REQUIRE(store1.set("job.host.0", "replaced").ok());
  CHECK(*store0.get("job.host.0", 1s) == "replaced");
  // A rank outside the world is refused.
  exec::CoordinatorStore stranger(*client0, 2);
  const Status refused = stranger.set("job.host.2", "x");
  CHECK(refused.code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a rendezvous get before the set waits for it, and times out naming the key",
          "[control]") {
  auto coordinator = start_coordinator(2);
  auto client0 = connect_to(*coordinator);
  auto client1 = connect_to(*coordinator);
  exec::CoordinatorStore store0(*client0, 0);
  exec::CoordinatorStore store1(*client1, 1);
  auto waiting = std::async(std::launch::async, [&] { return store1.get("late", 5s); });
  std::this_thread::sleep_for(200ms);
  CHECK(waiting.wait_for(0s) == std::future_status::timeout);  // still waiting
  REQUIRE(store0.set("late", "value").ok());
  auto value = get_within(waiting);
  INFO(value.status().to_string());
  REQUIRE(value.ok());
  CHECK(*value == "value");

  const auto start = Clock::now();
  auto missing = store1.get("never.set", 300ms);
  const auto took = Clock::now() - start;
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kDeadlineExceeded);
  CHECK(contains(missing.status().message(), "rendezvous key 'never.set' was not set"));
  CHECK(contains(missing.status().message(), coordinator->address()));
  CHECK(took >= 300ms);
  CHECK(took < 5s);
}

TEST_CASE("the rendezvous store needs the job's token", "[control]") {
  auto coordinator = start_coordinator(1, "s3cret");
  auto good = connect_to(*coordinator, "s3cret");
  REQUIRE(exec::CoordinatorStore(*good, 0).set("k", "v").ok());
  for (const std::string token : {"", "wrong"}) {
    INFO("token '" << token << "'");
    auto bad = connect_to(*coordinator, token);
    exec::CoordinatorStore store(*bad, 0);
    CHECK(store.set("k", "forged").code() == StatusCode::kUnauthenticated);
    auto read = store.get("k", 100ms);
    CHECK(read.status().code() == StatusCode::kUnauthenticated);
  }
  CHECK(*exec::CoordinatorStore(*good, 0).get("k", 1s) == "v");  // the forgery did not land
}

TEST_CASE("the rendezvous table bounds keys, values and its total size", "[control]") {
  exec::KeyTable table;
  CHECK(table.set("", "v").code() == StatusCode::kInvalidArgument);
  CHECK(table.set(std::string(exec::KeyTable::kMaxKeyBytes + 1, 'k'), "v").code() ==
        StatusCode::kInvalidArgument);
  const Status big = table.set("big", std::string(exec::KeyTable::kMaxValueBytes + 1, 'v'));
  CHECK(big.code() == StatusCode::kResourceExhausted);
  CHECK(contains(big.message(), "value of key 'big'"));
  CHECK_FALSE(table.get("big").has_value());
  // 64 MiB in all: 64 values of 1 MiB fit (less their keys' bytes), one more does not;
  // replacing a value frees what it held.
  const std::string mib(exec::KeyTable::kMaxValueBytes, 'v');
  int stored = 0;
  Status st = ok_status();
  for (; stored < 100 && st.ok(); ++stored) st = table.set("k" + std::to_string(stored), mib);
  CHECK(st.code() == StatusCode::kResourceExhausted);
  CHECK(contains(st.message(), "the rendezvous store is full"));
  CHECK(stored == 64);  // the 64th set (keys' bytes included) is the one refused
  CHECK(table.set("k0", "small").ok());
  CHECK(table.set("k63", mib).ok());
  CHECK(table.get("k0") == std::optional<std::string>("small"));
  // A large world's Gloo mesh stores an address per peer in each rank's value: 8192 ranks may
  // set 2 MiB values, not more.
  exec::KeyTable large(8192);
  CHECK(large.set("mesh.0", std::string(size_t{2} << 20, 'a')).ok());
  CHECK(large.set("mesh.1", std::string((size_t{2} << 20) + 1, 'a')).code() ==
        StatusCode::kResourceExhausted);
}
