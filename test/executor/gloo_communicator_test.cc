// The Gloo (TCP) data plane, ranks as threads of this process, each with its own communicator
// on 127.0.0.1, meeting through a fresh FileStore directory per test (or a RendezvousStore in
// memory, each rank with a directory of its own). Catch2 assertions are not
// thread-safe: rank threads record what they saw and the test thread checks it. Every blocking
// call carries the communicator's timeout, so every thread ends.
#include "gp/exec/gloo_communicator.h"

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

using namespace gp;
using exec::Communicator;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kTimeout(10000);

// A fresh rendezvous directory, removed at the end of the test.
struct StoreDir {
  std::filesystem::path path;
  StoreDir() {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           ("gp-gloo-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~StoreDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

exec::GlooOptions options(const StoreDir& dir, int rank, int world, milliseconds timeout,
                          const std::string& prefix = "job") {
  exec::GlooOptions o;
  o.rank = rank;
  o.world_size = world;
  o.store_dir = dir.path.string();
  o.prefix = prefix;
  o.timeout = timeout;
  return o;
}

// Runs fn(rank) on one thread per rank and joins them.
void run_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

using Made = std::vector<std::optional<Result<std::unique_ptr<Communicator>>>>;

// Connects `world` communicators concurrently (rendezvous blocks until all ranks arrive). No
// Catch2 macro here: it may run on a thread of its own.
Made connect_raw(const StoreDir& dir, int world, milliseconds timeout, const std::string& prefix) {
  Made made(world);
  run_ranks(world, [&](int r) {
    made[r].emplace(exec::make_gloo_communicator(options(dir, r, world, timeout, prefix)));
  });
  return made;
}

std::vector<std::unique_ptr<Communicator>> checked(Made made) {
  std::vector<std::unique_ptr<Communicator>> comms;
  const int world = static_cast<int>(made.size());
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << made[r]->status().to_string());
    REQUIRE(made[r]->ok());
    comms.push_back(std::move(*made[r]).value());
  }
  return comms;
}

std::vector<std::unique_ptr<Communicator>> connect_all(const StoreDir& dir, int world,
                                                       milliseconds timeout = kTimeout,
                                                       const std::string& prefix = "job") {
  return checked(connect_raw(dir, world, timeout, prefix));
}

std::vector<std::byte> pattern(size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed * 7 + 3) & 0xff);
  return v;
}

// Tags that use all 64 bits as RankRunner's may (iteration parity in bit 63 over the message
// index), spread over the high bits so that a communicator truncating tags would mix them up.
uint64_t runner_tag(uint64_t edge, bool grad, uint64_t sample, int iteration) {
  return (static_cast<uint64_t>(iteration & 1) << 63) | (edge << 41) |
         (static_cast<uint64_t>(grad) << 40) | sample;
}

}  // namespace

TEST_CASE("tagged messages between two ranks match by tag, received in the opposite order") {
  StoreDir dir;
  auto comms = connect_all(dir, 2);
  const std::vector<uint64_t> tags = {runner_tag(0, false, 0, 0),  runner_tag(0, false, 4, 0),
                                      runner_tag(3, true, 0, 1),   runner_tag(3, false, 0, 1),
                                      runner_tag(1, false, 12, 0), ~uint64_t{0}};
  const std::vector<size_t> sizes = {64, 4096, 1, 3 << 20, 0, 100};
  std::vector<std::vector<std::byte>> got(tags.size());
  std::vector<Status> send_status(tags.size()), recv_status(tags.size());
  std::vector<std::byte> reverse_got(64);
  Status reverse_send, reverse_recv;
  run_ranks(2, [&](int r) {
    if (r == 0) {
      for (size_t i = 0; i < tags.size(); ++i) {
        auto msg = pattern(sizes[i], static_cast<int>(i));
        send_status[i] = comms[0]->send(1, tags[i], msg);
        std::fill(msg.begin(), msg.end(), std::byte{0});  // the sender may reuse its memory
      }
      // Same tag in the other direction is a different message.
      reverse_recv = comms[0]->recv(1, tags[0], reverse_got);
    } else {
      reverse_send = comms[1]->send(0, tags[0], pattern(64, 99));
      for (size_t k = tags.size(); k-- > 0;) {
        got[k].assign(sizes[k], std::byte{0xee});
        recv_status[k] = comms[1]->recv(0, tags[k], got[k]);
      }
    }
  });
  for (size_t i = 0; i < tags.size(); ++i) {
    INFO("message " << i << ": " << send_status[i].to_string() << " / "
                    << recv_status[i].to_string());
    CHECK(send_status[i].ok());
    CHECK(recv_status[i].ok());
    CHECK(got[i] == pattern(sizes[i], static_cast<int>(i)));
  }
  CHECK(reverse_send.ok());
  CHECK(reverse_recv.ok());
  CHECK(reverse_got == pattern(64, 99));
}

TEST_CASE("messages of many chunks arrive intact, also when another tag is asked for first") {
  StoreDir dir;
  auto comms = connect_all(dir, 2);
  // 1 MiB + 3 bytes spans five 256 KiB chunks, more than the receives kept posted (four).
  const size_t big = (size_t{1} << 20) + 3;
  Status sends[3], recvs[3];
  std::vector<std::byte> got_a(big), got_b(600000), got_c(0);
  run_ranks(2, [&](int r) {
    if (r == 0) {
      sends[0] = comms[0]->send(1, 1, pattern(big, 1));
      sends[1] = comms[0]->send(1, 2, pattern(600000, 2));
      sends[2] = comms[0]->send(1, 3, {});
    } else {
      recvs[0] = comms[1]->recv(0, 3, got_c);  // last sent, asked for first
      recvs[1] = comms[1]->recv(0, 2, got_b);
      recvs[2] = comms[1]->recv(0, 1, got_a);
    }
  });
  for (int i = 0; i < 3; ++i) {
    INFO(i << ": " << sends[i].to_string() << " / " << recvs[i].to_string());
    CHECK(sends[i].ok());
    CHECK(recvs[i].ok());
  }
  CHECK(got_a == pattern(big, 1));
  CHECK(got_b == pattern(600000, 2));
}

TEST_CASE("three ranks exchange around a ring, iteration after iteration") {
  StoreDir dir;
  constexpr int kWorld = 3, kRounds = 4;
  auto comms = connect_all(dir, kWorld);
  std::vector<std::vector<std::vector<std::byte>>> got(
      kWorld, std::vector<std::vector<std::byte>>(kRounds));
  std::vector<Status> errors(kWorld);
  run_ranks(kWorld, [&](int r) {
    for (int it = 0; it < kRounds && errors[r].ok(); ++it) {
      const uint64_t tag = runner_tag(static_cast<uint64_t>(r), false, 8, it);
      errors[r] = comms[r]->send((r + 1) % kWorld, tag, pattern(1000 + r, r * 10 + it));
      if (!errors[r].ok()) break;
      const int from = (r + kWorld - 1) % kWorld;
      got[r][it].resize(1000 + from);
      errors[r] =
          comms[r]->recv(from, runner_tag(static_cast<uint64_t>(from), false, 8, it), got[r][it]);
    }
  });
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r << ": " << errors[r].to_string());
    REQUIRE(errors[r].ok());
    const int from = (r + kWorld - 1) % kWorld;
    for (int it = 0; it < kRounds; ++it) CHECK(got[r][it] == pattern(1000 + from, from * 10 + it));
  }
}

TEST_CASE("many sends with no receive posted yet never block the sender") {
  StoreDir dir;
  constexpr int kMessages = 300;
  auto comms = connect_all(dir, 2);
  std::atomic<bool> sent{false};
  Status send_error, recv_error;
  double send_seconds = 0;
  bool receiver_waited = true;
  std::vector<std::vector<std::byte>> got(kMessages);
  run_ranks(2, [&](int r) {
    if (r == 0) {
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kMessages && send_error.ok(); ++i) {
        send_error = comms[0]->send(1, static_cast<uint64_t>(i), pattern(4096, i));
      }
      send_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      sent = true;
    } else {
      // Receive nothing until every send has returned (bounded wait).
      const auto deadline = std::chrono::steady_clock::now() + kTimeout;
      while (!sent && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(milliseconds(1));
      }
      receiver_waited = sent;
      for (int i = kMessages; i-- > 0 && recv_error.ok();) {
        got[i].resize(4096);
        recv_error = comms[1]->recv(0, static_cast<uint64_t>(i), got[i]);
      }
    }
  });
  INFO(send_error.to_string() << " / " << recv_error.to_string());
  REQUIRE(send_error.ok());
  REQUIRE(receiver_waited);
  CHECK(send_seconds < 5.0);
  REQUIRE(recv_error.ok());
  for (int i = 0; i < kMessages; ++i) CHECK(got[i] == pattern(4096, i));
}

TEST_CASE("all-reduce sums exactly over the world and over a subgroup, round after round") {
  StoreDir dir;
  constexpr int kWorld = 3;
  auto comms = connect_all(dir, kWorld);
  // Small integers: float sums are exact whatever the order. Lengths not divisible by the
  // group size and beyond Gloo's 1 MiB segment.
  const std::vector<size_t> lengths = {7, 1000, 600000};
  auto value = [](int rank, size_t i, int round) {
    return static_cast<float>((static_cast<int>(i % 97) + 1) * (rank + 1) + round);
  };
  std::vector<Status> errors(kWorld);
  // data[rank][round][length index]
  std::vector<std::vector<std::vector<std::vector<float>>>> world_out(kWorld), sub_out(kWorld);
  std::vector<int> sub_group = {0, 2}, world_group = {0, 1, 2};
  run_ranks(kWorld, [&](int r) {
    world_out[r].resize(2);
    sub_out[r].resize(2);
    for (int round = 0; round < 2; ++round) {
      for (size_t n : lengths) {
        std::vector<float> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = value(r, i, round);
        if (errors[r].ok()) errors[r] = comms[r]->allreduce_sum(world_group, v);
        world_out[r][round].push_back(v);
      }
      if (r == 1) continue;  // idle while {0, 2} reduce
      for (size_t n : lengths) {
        std::vector<float> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = value(r, i, round);
        if (errors[r].ok()) errors[r] = comms[r]->allreduce_sum(sub_group, v);
        sub_out[r][round].push_back(v);
      }
    }
  });
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r << ": " << errors[r].to_string());
    REQUIRE(errors[r].ok());
    for (int round = 0; round < 2; ++round) {
      for (size_t k = 0; k < lengths.size(); ++k) {
        const auto& w = world_out[r][round][k];
        bool world_exact = true, sub_exact = true;
        for (size_t i = 0; i < w.size(); ++i) {
          world_exact =
              world_exact && w[i] == value(0, i, round) + value(1, i, round) + value(2, i, round);
        }
        CHECK(world_exact);
        if (r == 1) continue;
        const auto& s = sub_out[r][round][k];
        for (size_t i = 0; i < s.size(); ++i) {
          sub_exact = sub_exact && s[i] == value(0, i, round) + value(2, i, round);
        }
        CHECK(sub_exact);
      }
    }
  }
}

TEST_CASE("a world of one: an all-reduce over itself returns at once, bad arguments are errors") {
  StoreDir dir;
  auto comms = connect_all(dir, 1);
  std::vector<float> v = {1.5f, -2.0f};
  const std::vector<int> self = {0};
  REQUIRE(comms[0]->allreduce_sum(self, v).ok());
  CHECK(v == std::vector<float>{1.5f, -2.0f});
  std::vector<std::byte> buf(4);
  CHECK(comms[0]->send(1, 0, buf).code() == StatusCode::kInvalidArgument);
  CHECK(comms[0]->recv(0, 0, buf).code() == StatusCode::kInvalidArgument);
  const std::vector<int> others = {1, 2};
  CHECK(comms[0]->allreduce_sum(others, v).code() == StatusCode::kInvalidArgument);
  exec::GlooOptions bad = options(dir, 0, 1, kTimeout, "other");
  bad.store_dir = (dir.path / "missing").string();
  auto made = exec::make_gloo_communicator(bad);
  CHECK(made.status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a receive with no matching send fails with DEADLINE_EXCEEDED naming the peer") {
  StoreDir dir;
  auto comms = connect_all(dir, 2, milliseconds(300));
  std::vector<std::byte> buf(16);
  const auto start = std::chrono::steady_clock::now();
  const Status st = comms[1]->recv(0, 42, buf);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(st.to_string());
  CHECK(st.code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(st.message(), Catch::Contains("rank 1") && Catch::Contains("from rank 0") &&
                               Catch::Contains("tag 42"));
  CHECK(seconds >= 0.25);
  CHECK(seconds < 3.0);
}

TEST_CASE("a size mismatch is an error, and the next message still arrives intact") {
  StoreDir dir;
  auto comms = connect_all(dir, 2);
  Status send1, send2, mismatch, next;
  std::vector<std::byte> next_got(32);
  run_ranks(2, [&](int r) {
    if (r == 0) {
      send1 = comms[0]->send(1, 7, pattern(16, 1));
      send2 = comms[0]->send(1, 7, pattern(32, 2));  // the same tag again: FIFO
    } else {
      std::vector<std::byte> small(8);
      mismatch = comms[1]->recv(0, 7, small);
      next = comms[1]->recv(0, 7, next_got);
    }
  });
  REQUIRE(send1.ok());
  REQUIRE(send2.ok());
  INFO(mismatch.to_string());
  CHECK(mismatch.code() == StatusCode::kInternal);
  CHECK_THAT(mismatch.message(), Catch::Contains("16 bytes, expected 8"));
  INFO(next.to_string());
  CHECK(next.ok());
  CHECK(next_got == pattern(32, 2));
}

TEST_CASE("all-reduce over mismatched sizes is an error on every member") {
  StoreDir dir;
  auto comms = connect_all(dir, 2);
  std::vector<Status> errors(2);
  const std::vector<int> group = {0, 1};
  run_ranks(2, [&](int r) {
    std::vector<float> v(r == 0 ? 10 : 12, 1.0f);
    errors[r] = comms[r]->allreduce_sum(group, v);
  });
  for (int r = 0; r < 2; ++r) {
    INFO(errors[r].to_string());
    CHECK(errors[r].code() == StatusCode::kInternal);
    CHECK_THAT(errors[r].message(), Catch::Contains("mismatched sizes"));
  }
}

TEST_CASE("abort fails later calls with ABORTED, interrupts a pending receive, frees peers") {
  StoreDir dir;
  auto comms = connect_all(dir, 3);
  std::vector<std::byte> buf(8);
  Status blocked, peer_blocked;
  double blocked_seconds = 0, peer_seconds = 0;
  run_ranks(3, [&](int r) {
    const auto start = std::chrono::steady_clock::now();
    auto since = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    if (r == 0) {
      std::vector<std::byte> b(8);
      blocked = comms[0]->recv(1, 5, b);  // rank 1 never sends: interrupted by the abort
      blocked_seconds = since();
    } else if (r == 1) {
      std::vector<std::byte> b(8);
      peer_blocked = comms[1]->recv(0, 6, b);  // rank 0 never sends: its abort frees us
      peer_seconds = since();
    } else {
      std::this_thread::sleep_for(milliseconds(200));
      comms[0]->abort("rank 2 saw a failure");
    }
  });
  INFO(blocked.to_string() << " / " << peer_blocked.to_string());
  CHECK(blocked.code() == StatusCode::kAborted);
  CHECK(blocked.message() == "rank 2 saw a failure");
  CHECK(blocked_seconds < 5.0);
  CHECK_FALSE(peer_blocked.ok());
  CHECK(peer_seconds < 5.0);

  const std::vector<int> group = {0, 1};
  std::vector<float> v(4);
  for (const Status& st :
       {comms[0]->send(1, 1, buf), comms[0]->recv(1, 1, buf), comms[0]->allreduce_sum(group, v)}) {
    CHECK(st.code() == StatusCode::kAborted);
    CHECK(st.message() == "rank 2 saw a failure");
  }
}

TEST_CASE("two jobs sharing a store directory never mix") {
  StoreDir dir;
  Made made_a;
  std::thread ta([&] { made_a = connect_raw(dir, 2, kTimeout, "job-a"); });
  auto b = connect_all(dir, 2, kTimeout, "job-b");
  ta.join();
  auto a = checked(std::move(made_a));
  REQUIRE(a.size() == 2);
  REQUIRE(b.size() == 2);
  std::vector<std::byte> got_a(64), got_b(64);
  Status sa, sb, ra, rb;
  run_ranks(2, [&](int r) {
    if (r == 0) {
      sa = a[0]->send(1, 3, pattern(64, 1));
      sb = b[0]->send(1, 3, pattern(64, 2));
    } else {
      rb = b[1]->recv(0, 3, got_b);
      ra = a[1]->recv(0, 3, got_a);
    }
  });
  REQUIRE((sa.ok() && sb.ok() && ra.ok() && rb.ok()));
  CHECK(got_a == pattern(64, 1));
  CHECK(got_b == pattern(64, 2));
}

TEST_CASE("creation fails with DEADLINE_EXCEEDED naming rank, world size and store") {
  StoreDir dir;
  const auto start = std::chrono::steady_clock::now();
  auto made = exec::make_gloo_communicator(options(dir, 0, 2, milliseconds(300)));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(made.status().to_string());
  REQUIRE_FALSE(made.ok());
  CHECK(made.status().code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(made.status().message(),
             Catch::Contains("rank 0 of 2") && Catch::Contains(dir.path.string()));
  CHECK(seconds < 5.0);  // FileStore polls with a granularity of one second
}

TEST_CASE("a sender far ahead of its receiver waits for its oldest messages, within the timeout") {
  StoreDir dir;
  constexpr int kBound = 4096;  // outstanding sends the communicator buffers before waiting
  auto comms = connect_all(dir, 2, milliseconds(500));
  const std::vector<std::byte> one(1, std::byte{1});
  Status fill, over, retry, drain;
  double over_seconds = 0;
  std::atomic<bool> over_done{false}, retried{false};
  run_ranks(2, [&](int r) {
    if (r == 0) {
      for (int i = 0; i < kBound && fill.ok(); ++i) fill = comms[0]->send(1, i, one);
      const auto start = std::chrono::steady_clock::now();
      over = comms[0]->send(1, kBound, one);
      over_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      over_done = true;
      // The receiver now takes the oldest ones: there is room again.
      retry = comms[0]->send(1, kBound, one);
      retried = true;
    } else {
      const auto deadline = std::chrono::steady_clock::now() + kTimeout;
      while (!over_done && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(milliseconds(1));
      }
      std::vector<std::byte> b(1);
      for (int i = 0; i <= kBound && drain.ok(); ++i) {
        // The last one was sent by the retry, which this loop makes room for.
        if (i == kBound) {
          while (!retried && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(milliseconds(1));
          }
        }
        drain = comms[1]->recv(0, i, b);
      }
    }
  });
  INFO(fill.to_string() << " / " << over.to_string() << " / " << retry.to_string() << " / "
                        << drain.to_string());
  REQUIRE(fill.ok());
  CHECK(over.code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(over.message(), Catch::Contains("sent but not received"));
  CHECK(over_seconds >= 0.4);
  CHECK(retry.ok());
  CHECK(drain.ok());
}

namespace {

// A RendezvousStore in memory (the coordinator's stands in for it in a job).
class MemoryStore final : public exec::RendezvousStore {
 public:
  Status set(const std::string& key, const std::string& value) override {
    std::lock_guard lock(mu_);
    values_[key] = value;
    ++sets_;
    cv_.notify_all();
    return ok_status();
  }
  Result<std::string> get(const std::string& key, milliseconds timeout) override {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return values_.count(key) != 0; })) {
      return Status(StatusCode::kDeadlineExceeded, "key '" + key + "' not set");
    }
    return values_[key];
  }
  int sets() {
    std::lock_guard lock(mu_);
    return sets_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
  int sets_ = 0;
};

}  // namespace

TEST_CASE("ranks with separate store directories meet through a rendezvous store") {
  constexpr int kWorld = 3;
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::unique_ptr<StoreDir>> dirs;  // one per rank, never shared
  for (int r = 0; r < kWorld; ++r) dirs.push_back(std::make_unique<StoreDir>());
  Made made(kWorld);
  run_ranks(kWorld, [&](int r) {
    exec::GlooOptions o = options(*dirs[r], r, kWorld, kTimeout);
    o.store = store;
    made[r].emplace(exec::make_gloo_communicator(o));
  });
  auto comms = checked(std::move(made));
  std::vector<Status> errors(kWorld);
  std::vector<std::vector<std::byte>> got(kWorld, std::vector<std::byte>(256));
  std::vector<std::vector<float>> sums(kWorld, std::vector<float>(5));
  const std::vector<int> everyone = {0, 1, 2};
  run_ranks(kWorld, [&](int r) {
    const int next = (r + 1) % kWorld, prev = (r + kWorld - 1) % kWorld;
    Status st = comms[r]->send(next, 9, pattern(256, r));
    if (st.ok()) st = comms[r]->recv(prev, 9, got[r]);
    for (float& v : sums[r]) v = static_cast<float>(r + 1);
    if (st.ok()) st = comms[r]->allreduce_sum(everyone, sums[r]);
    errors[r] = st;
  });
  for (int r = 0; r < kWorld; ++r) {
    INFO("rank " << r << ": " << errors[r].to_string());
    REQUIRE(errors[r].ok());
    CHECK(got[r] == pattern(256, (r + kWorld - 1) % kWorld));
    CHECK(sums[r] == std::vector<float>(5, 6.0f));
    // Nothing went through the directories: each holds no file.
    CHECK(std::filesystem::is_empty(dirs[r]->path));
  }
  CHECK(store->sets() >= kWorld);  // at least each rank's address
}

TEST_CASE("a rendezvous store whose peer never comes fails with DEADLINE_EXCEEDED") {
  StoreDir dir;
  exec::GlooOptions o = options(dir, 0, 2, milliseconds(300));
  o.store = std::make_shared<MemoryStore>();
  const auto start = std::chrono::steady_clock::now();
  auto made = exec::make_gloo_communicator(o);
  const auto took = std::chrono::steady_clock::now() - start;
  INFO(made.status().to_string());
  REQUIRE_FALSE(made.ok());
  CHECK(made.status().code() == StatusCode::kDeadlineExceeded);
  CHECK_THAT(made.status().message(), Catch::Contains("rank 0 of 2"));
  CHECK(took < std::chrono::seconds(5));
}
