// The shared-memory data plane between ranks of one host, ranks as threads of this process: the
// rings are real shared mappings (the same code maps them across processes), the fallback is an
// in-process LoopbackHub, counted so that the tests see which path a message took. Rank threads
// record what they saw; the test thread checks it.
#include "transport/shm_communicator.h"

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "gp/exec/data_plane.h"

using namespace gp;
using exec::Communicator;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kTimeout(10000);

std::string fresh_dir(const std::string& what) {
  static std::atomic<int> counter{0};
  const auto p =
      std::filesystem::temp_directory_path() /
      ("gp-shm-test-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(p);
  return p.string();
}

// Forwards to a loopback communicator and counts the messages that reach it.
class Counting final : public Communicator {
 public:
  Counting(std::unique_ptr<Communicator> inner, std::atomic<int>* sends,
           std::atomic<int>* allreduces)
      : inner_(std::move(inner)), sends_(sends), allreduces_(allreduces) {}
  int rank() const override { return inner_->rank(); }
  Status send(int peer, uint64_t tag, std::span<const std::byte> data) override {
    ++*sends_;
    return inner_->send(peer, tag, data);
  }
  Status recv(int peer, uint64_t tag, std::span<std::byte> data) override {
    return inner_->recv(peer, tag, data);
  }
  Status allreduce_sum(std::span<const int> group, std::span<float> data) override {
    ++*allreduces_;
    return inner_->allreduce_sum(group, data);
  }
  void abort(const std::string& reason) override { inner_->abort(reason); }

 private:
  std::unique_ptr<Communicator> inner_;
  std::atomic<int>* sends_;
  std::atomic<int>* allreduces_;
};

struct World {
  std::unique_ptr<exec::LoopbackHub> hub;
  std::vector<std::unique_ptr<Communicator>> comms;
  std::atomic<int> fallback_sends{0};
  std::atomic<int> fallback_allreduces{0};
  std::string dir;
};

void run_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

// `world` ranks; those in `local` share memory, the fallback carries the rest.
std::unique_ptr<World> make_world(int world, std::vector<int> local, int64_t ring_bytes,
                                  milliseconds timeout = kTimeout,
                                  std::vector<std::string>* unavailable = nullptr) {
  auto w = std::make_unique<World>();
  w->hub = std::make_unique<exec::LoopbackHub>(world, timeout);
  w->dir = fresh_dir("rings");
  std::vector<std::optional<Result<std::unique_ptr<Communicator>>>> made(world);
  std::vector<std::string> why(static_cast<size_t>(world));
  std::vector<std::unique_ptr<Communicator>> fallbacks;
  for (int r = 0; r < world; ++r) {
    fallbacks.push_back(std::make_unique<Counting>(w->hub->communicator(r), &w->fallback_sends,
                                                   &w->fallback_allreduces));
  }
  run_ranks(world, [&](int r) {
    exec::ShmOptions o;
    o.rank = r;
    o.world_size = world;
    o.local_ranks = local;
    o.dir = w->dir;
    o.ring_bytes = ring_bytes;
    o.timeout = timeout;
    made[r].emplace(exec::make_shm_communicator(std::move(fallbacks[r]), o, &why[r]));
  });
  if (unavailable != nullptr) *unavailable = why;
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << made[r]->status().to_string());
    REQUIRE(made[r]->ok());
    w->comms.push_back(std::move(*made[r]).value());
  }
  w->fallback_sends = 0;  // the handshake is done
  return w;
}

std::vector<std::byte> pattern(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 7 + 3) & 0xff);
  return v;
}

}  // namespace

TEST_CASE("local messages go through shared memory and are received by tag in any order") {
  auto w = make_world(2, {0, 1}, 64 << 10);
  CHECK_FALSE(std::filesystem::exists(w->dir));  // unlinked once both ranks mapped the rings
  const std::vector<size_t> sizes = {0, 5, 40000};
  std::vector<bool> ok(3, false);
  run_ranks(2, [&](int r) {
    if (r == 0) {
      for (int t = 0; t < 3; ++t) {
        REQUIRE(w->comms[0]->send(1, 100 + t, pattern(sizes[t], t)).ok());
      }
    } else {
      for (int t : {2, 0, 1}) {  // out of order: earlier messages are stashed
        std::vector<std::byte> got(sizes[t]);
        ok[t] = w->comms[1]->recv(0, 100 + t, got).ok() && got == pattern(sizes[t], t);
      }
    }
  });
  CHECK(ok == std::vector<bool>{true, true, true});
  CHECK(w->fallback_sends == 0);
}

TEST_CASE("messages larger than the ring stream through while both ranks send at once") {
  auto w = make_world(2, {0, 1}, 4096);
  const size_t n = size_t{3} << 20;  // 768 times the ring
  std::vector<bool> ok(2, false);
  run_ranks(2, [&](int r) {
    const int peer = 1 - r;
    // Both send first: send must not block on a full ring, or this would deadlock.
    bool sent = w->comms[r]->send(peer, 7, pattern(n, r)).ok() &&
                w->comms[r]->send(peer, 8, pattern(100, r + 10)).ok();
    std::vector<std::byte> big(n), small(100);
    ok[r] = sent && w->comms[r]->recv(peer, 7, big).ok() && big == pattern(n, peer) &&
            w->comms[r]->recv(peer, 8, small).ok() && small == pattern(100, peer + 10);
  });
  CHECK(ok == std::vector<bool>{true, true});
}

TEST_CASE("a receive times out naming the rank, the peer and the tag") {
  auto w = make_world(2, {0, 1}, 4096, milliseconds(200));
  std::vector<std::byte> buf(4);
  const auto start = std::chrono::steady_clock::now();
  auto st = w->comms[1]->recv(0, 42, buf);
  CHECK(st.code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(st.message(), Catch::Contains("rank 1: no message from rank 0 (tag 42)"));
  CHECK(std::chrono::steady_clock::now() - start < milliseconds(2000));
}

TEST_CASE("a message of the wrong size is an error naming both sizes") {
  auto w = make_world(2, {0, 1}, 4096);
  REQUIRE(w->comms[0]->send(1, 3, pattern(12, 0)).ok());
  std::vector<std::byte> buf(8);
  auto st = w->comms[1]->recv(0, 3, buf);
  CHECK_FALSE(st.ok());
  CHECK_THAT(st.message(), Catch::Contains("has 12 bytes, expected 8"));
}

TEST_CASE("abort on one rank fails its peer's waiting receive at once") {
  auto w = make_world(2, {0, 1}, 4096);
  Status got;
  std::chrono::steady_clock::duration waited{};
  run_ranks(2, [&](int r) {
    if (r == 0) {
      std::this_thread::sleep_for(milliseconds(50));
      w->comms[0]->abort("rank 0 gave up");
    } else {
      std::vector<std::byte> buf(4);
      const auto start = std::chrono::steady_clock::now();
      got = w->comms[1]->recv(0, 1, buf);
      waited = std::chrono::steady_clock::now() - start;
    }
  });
  CHECK(got.code() == StatusCode::kAborted);
  CHECK_THAT(got.message(), Catch::Contains("rank 0 aborted"));
  CHECK(waited < milliseconds(5000));  // not the 10 s timeout
  CHECK(w->comms[0]->send(1, 1, pattern(4, 0)).code() == StatusCode::kAborted);
}

TEST_CASE("ranks on other hosts and all-reduces spanning hosts go through the fallback") {
  auto w = make_world(3, {0, 1}, 4096);  // rank 2 is "remote"
  std::vector<float> sums(3, 0.0f);
  std::vector<bool> ok(3, false);
  run_ranks(3, [&](int r) {
    bool fine = true;
    if (r == 0) fine = w->comms[0]->send(2, 5, pattern(16, 5)).ok();
    if (r == 2) {
      std::vector<std::byte> got(16);
      fine = w->comms[2]->recv(0, 5, got).ok() && got == pattern(16, 5);
    }
    std::vector<float> v = {static_cast<float>(r + 1)};
    const std::vector<int> group = {0, 1, 2};
    fine = fine && w->comms[r]->allreduce_sum(group, v).ok();
    sums[r] = v[0];
    ok[r] = fine;
  });
  CHECK(ok == std::vector<bool>{true, true, true});
  CHECK(sums == std::vector<float>{6.0f, 6.0f, 6.0f});
  CHECK(w->fallback_sends >= 1);  // the message to rank 2
  CHECK(w->fallback_allreduces == 3);
}

namespace {

// Rank r's contribution: values whose float sums depend on the order of addition.
std::vector<float> contribution(size_t n, int r) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.3 * r)) * (1.0f + r);
  }
  return v;
}

}  // namespace

TEST_CASE("an all-reduce among ranks of one host runs through the rings, the same bits on each") {
  // A 16 KiB ring moves 4 KiB pieces: the larger sizes take many pieces per chunk; the small
  // ones leave some ranks' chunks empty.
  auto w = make_world(4, {0, 1, 2, 3}, 16 << 10);
  const std::vector<size_t> sizes = {0, 1, 3, 4, 1025, 100003};
  std::vector<std::vector<std::vector<float>>> got(4);
  std::vector<std::vector<float>> exact(4);
  std::vector<std::vector<float>> pair(4), again(4);
  std::vector<bool> ok(4, false);
  run_ranks(4, [&](int r) {
    const std::vector<int> all = {0, 1, 2, 3};
    bool fine = true;
    for (size_t n : sizes) {
      std::vector<float> v = contribution(n, r);
      fine = fine && w->comms[r]->allreduce_sum(all, v).ok();
      got[r].push_back(std::move(v));
    }
    // Integers sum exactly in any order: the values themselves, not only their agreement.
    exact[r].assign(777, 0.0f);
    for (size_t i = 0; i < exact[r].size(); ++i) exact[r][i] = static_cast<float>(i * (r + 1));
    fine = fine && w->comms[r]->allreduce_sum(all, exact[r]).ok();
    // Two disjoint pairs at once, then the whole group again.
    const std::vector<int> mine = r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
    pair[r] = {static_cast<float>(r), 1.0f};
    fine = fine && w->comms[r]->allreduce_sum(mine, pair[r]).ok();
    again[r] = {static_cast<float>(r), 2.0f, -1.0f};
    fine = fine && w->comms[r]->allreduce_sum(all, again[r]).ok();
    ok[r] = fine;
  });
  REQUIRE(ok == std::vector<bool>{true, true, true, true});
  for (size_t k = 0; k < sizes.size(); ++k) {
    INFO("size " << sizes[k]);
    for (int r = 1; r < 4; ++r) {
      CHECK(std::memcmp(got[r][k].data(), got[0][k].data(), sizes[k] * sizeof(float)) == 0);
    }
    std::vector<double> want(sizes[k], 0.0);
    for (int r = 0; r < 4; ++r) {
      const std::vector<float> part = contribution(sizes[k], r);
      for (size_t i = 0; i < sizes[k]; ++i) want[i] += part[i];
    }
    for (size_t i = 0; i < sizes[k]; ++i) {
      if (std::abs(got[0][k][i] - want[i]) > 1e-5 * (1.0 + std::abs(want[i]))) {
        FAIL("element " << i << ": " << got[0][k][i] << ", expected " << want[i]);
      }
    }
  }
  for (int r = 0; r < 4; ++r) {
    for (size_t i = 0; i < exact[r].size(); ++i) {
      if (exact[r][i] != static_cast<float>(i * 10)) FAIL("rank " << r << " element " << i);
    }
  }
  CHECK(pair[0] == std::vector<float>{2.0f, 2.0f});
  CHECK(pair[2] == std::vector<float>{2.0f, 2.0f});
  CHECK(pair[1] == std::vector<float>{4.0f, 2.0f});
  CHECK(pair[3] == std::vector<float>{4.0f, 2.0f});
  for (int r = 0; r < 4; ++r) CHECK(again[r] == std::vector<float>{6.0f, 8.0f, -4.0f});
  CHECK(w->fallback_allreduces == 0);
  CHECK(w->fallback_sends == 0);
}

TEST_CASE("all-reduce pieces and point-to-point messages share a ring without mixing") {
  auto w = make_world(2, {0, 1}, 8192);
  std::vector<float> sums[2];
  std::vector<bool> ok(2, false);
  run_ranks(2, [&](int r) {
    const std::vector<int> group = {0, 1};
    sums[r].assign(5000, static_cast<float>(r + 1));
    if (r == 0) {
      // Queued ahead of the all-reduce's pieces: rank 1 stashes it and receives it afterwards.
      ok[r] = w->comms[0]->send(1, 9, pattern(30000, 9)).ok() &&
              w->comms[0]->allreduce_sum(group, sums[0]).ok();
    } else {
      std::vector<std::byte> got(30000);
      ok[r] = w->comms[1]->allreduce_sum(group, sums[1]).ok() &&
              w->comms[1]->recv(0, 9, got).ok() && got == pattern(30000, 9);
    }
  });
  CHECK(ok == std::vector<bool>{true, true});
  CHECK(sums[0] == std::vector<float>(5000, 3.0f));
  CHECK(sums[1] == sums[0]);
  CHECK(w->fallback_allreduces == 0);
}

TEST_CASE("three local ranks reduce a whole group and a pair of it in turn, sharing the rings") {
  // The pair {0, 1} uses the ring from 0 to 1, which the whole group's ring order uses too.
  auto w = make_world(3, {0, 1, 2}, 8192);
  std::vector<std::vector<float>> whole(3), pair(3);
  std::vector<bool> ok(3, false);
  run_ranks(3, [&](int r) {
    bool fine = true;
    for (int round = 0; round < 3; ++round) {
      whole[r].assign(7001, 0.0f);
      for (size_t i = 0; i < whole[r].size(); ++i) {
        whole[r][i] = static_cast<float>((i % 97) * (r + 1) + round);
      }
      fine = fine && w->comms[r]->allreduce_sum(std::vector<int>{0, 1, 2}, whole[r]).ok();
      if (r < 2) {
        pair[r].assign(3001, static_cast<float>(10 * r + round));
        fine = fine && w->comms[r]->allreduce_sum(std::vector<int>{0, 1}, pair[r]).ok();
      }
    }
    ok[r] = fine;
  });
  REQUIRE(ok == std::vector<bool>{true, true, true});
  for (int r = 0; r < 3; ++r) {
    for (size_t i = 0; i < whole[r].size(); ++i) {
      // Round 2's values: (i % 97) * (1 + 2 + 3) + 3 * 2, exact in float.
      if (whole[r][i] != static_cast<float>((i % 97) * 6 + 6)) FAIL("rank " << r << " at " << i);
    }
  }
  CHECK(pair[0] == std::vector<float>(3001, 14.0f));
  CHECK(pair[1] == pair[0]);
  CHECK(w->fallback_allreduces == 0);
}

TEST_CASE("an all-reduce fails naming its group when a member aborts or never joins") {
  SECTION("abort") {
    auto w = make_world(2, {0, 1}, 4096);
    Status got;
    run_ranks(2, [&](int r) {
      if (r == 0) {
        std::this_thread::sleep_for(milliseconds(50));
        w->comms[0]->abort("rank 0 gave up");
        return;
      }
      std::vector<float> v(100000, 1.0f);
      got = w->comms[1]->allreduce_sum(std::vector<int>{0, 1}, v);
    });
    CHECK(got.code() == StatusCode::kAborted);
    CHECK_THAT(got.message(), Catch::Contains("all-reduce over ranks {0,1}"));
    CHECK_THAT(got.message(), Catch::Contains("rank 0 aborted"));
  }
  SECTION("never joins") {
    auto w = make_world(3, {0, 1, 2}, 4096, milliseconds(200));
    std::vector<float> v(10, 1.0f);
    auto st = w->comms[1]->allreduce_sum(std::vector<int>{0, 1, 2}, v);
    CHECK(st.code() == StatusCode::kDeadlineExceeded);
    CHECK_THAT(st.message(), Catch::Contains("rank 1: all-reduce over ranks {0,1,2}"));
    CHECK_THAT(st.message(), Catch::Contains("no message from rank 0"));
    // Pieces of the failed call may still come: the rings serve no further all-reduce.
    auto later = w->comms[1]->allreduce_sum(std::vector<int>{0, 1, 2}, v);
    CHECK(later.code() == StatusCode::kDeadlineExceeded);
    CHECK_THAT(later.message(), Catch::Contains("an earlier all-reduce failed"));
  }
  SECTION("not a member") {
    auto w = make_world(3, {0, 1, 2}, 4096);
    std::vector<float> v(10, 1.0f);
    auto st = w->comms[1]->allreduce_sum(std::vector<int>{0, 2}, v);
    CHECK(st.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(st.message(), Catch::Contains("does not contain this rank"));
  }
}

TEST_CASE("destruction with sends queued for a peer that never reads ends within the timeout") {
  auto w = make_world(2, {0, 1}, 4096, milliseconds(300));
  REQUIRE(w->comms[0]->send(1, 1, pattern(size_t{1} << 20, 0)).ok());  // queued: 256 rings
  const auto start = std::chrono::steady_clock::now();
  w->comms[0].reset();
  CHECK(std::chrono::steady_clock::now() - start < milliseconds(3000));
}

TEST_CASE("when rings cannot be allocated, every local rank falls back together, leaving no file") {
  std::vector<std::string> why;
  // Far more than any filesystem holds: the allocation fails on both ranks.
  auto w = make_world(2, {0, 1}, int64_t{1} << 52, kTimeout, &why);
  CHECK_THAT(why[0], Catch::Contains("cannot allocate"));
  CHECK_FALSE(why[1].empty());
  CHECK_FALSE(std::filesystem::exists(w->dir));
  std::vector<bool> ok(2, false);
  run_ranks(2, [&](int r) {
    std::vector<std::byte> got(64);
    ok[r] = r == 0 ? w->comms[0]->send(1, 2, pattern(64, 3)).ok()
                   : w->comms[1]->recv(0, 2, got).ok() && got == pattern(64, 3);
  });
  CHECK(ok == std::vector<bool>{true, true});
  CHECK(w->fallback_sends == 1);  // the message went through the fallback
}

TEST_CASE("co-located ranks are pinned to distinct cores when there are enough") {
  // Each rank pins its own thread; the test runs them on threads of its own.
  std::vector<int> cpus(2, -2);
  run_ranks(2, [&](int r) {
    auto cpu = exec::pin_to_local_core(r, {0, 1});
    cpus[r] = cpu.ok() ? *cpu : -3;
  });
  if (std::thread::hardware_concurrency() >= 2) {
    CHECK(cpus[0] >= 0);
    CHECK(cpus[1] >= 0);
    CHECK(cpus[0] != cpus[1]);
  }
  std::vector<int> many(4096);
  for (int i = 0; i < 4096; ++i) many[i] = i;
  int more_ranks_than_cores = -2;
  run_ranks(1, [&](int) {
    auto cpu = exec::pin_to_local_core(0, many);
    more_ranks_than_cores = cpu.ok() ? *cpu : -3;
  });
  CHECK(more_ranks_than_cores == -1);  // not pinned
  CHECK_FALSE(exec::pin_to_local_core(5, {0, 1}).ok());
}

TEST_CASE("bad options are refused by name") {
  exec::ShmOptions o;
  o.world_size = 2;
  o.dir = fresh_dir("bad");
  o.ring_bytes = 100;
  auto r = exec::make_shm_communicator(exec::LoopbackHub(2, kTimeout).communicator(0), o);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().message(), Catch::Contains("ring_bytes = 100"));
}

TEST_CASE("the data plane finds that ranks share this host and uses shared memory") {
  const std::string store = fresh_dir("store");
  std::filesystem::create_directories(store);
  const std::string shm_root = fresh_dir("shm-root");
  std::filesystem::create_directories(shm_root);
  for (const char* transport : {"auto", "gloo"}) {
    std::vector<std::optional<Result<exec::DataPlane>>> made(2);
    run_ranks(2, [&](int r) {
      exec::DataPlaneOptions o;
      o.transport = transport;
      o.shm_root = shm_root;
      o.gloo.rank = r;
      o.gloo.world_size = 2;
      o.gloo.store_dir = store;
      o.gloo.prefix = std::string("job-") + transport;
      o.gloo.timeout = kTimeout;
      made[r].emplace(exec::make_data_plane(o));
    });
    for (int r = 0; r < 2; ++r) {
      INFO(transport << " rank " << r << ": " << made[r]->status().to_string());
      REQUIRE(made[r]->ok());
    }
    const std::string want =
        std::string(transport) == "auto" ? "shared memory with ranks 0,1, gloo beyond" : "gloo";
    CHECK((*made[0])->description == want);
    CHECK((*made[1])->local_ranks == std::vector<int>{0, 1});  // both transports tell hosts apart
    std::vector<bool> ok(2, false);
    run_ranks(2, [&](int r) {
      auto& comm = *(*made[r])->comm;
      std::vector<std::byte> got(1000);
      ok[r] = r == 0 ? comm.send(1, 9, pattern(1000, 1)).ok()
                     : comm.recv(0, 9, got).ok() && got == pattern(1000, 1);
    });
    CHECK(ok == std::vector<bool>{true, true});
  }
  std::filesystem::remove_all(store);
  std::filesystem::remove_all(shm_root);
}
