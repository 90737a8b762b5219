// The in-process data plane (LoopbackHub): ranks as threads of this process.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <thread>
#include <vector>

#include "gp/exec/communicator.h"

using namespace gp;
using std::chrono::milliseconds;

TEST_CASE("a send reusing a tag waits until the peer took the last message with it") {
  // A rank that receives nothing (a source stage) may reach a tag again, an iteration ahead of
  // its peer: its messages arrive in order instead of failing as duplicates.
  exec::LoopbackHub hub(2, milliseconds(10000));
  auto sender = hub.communicator(0);
  auto receiver = hub.communicator(1);
  std::atomic<int> sent{0};
  std::atomic<bool> failed{false};
  std::thread source([&] {  // (Catch's assertions belong to the test's thread)
    for (std::byte b : {std::byte{1}, std::byte{2}, std::byte{3}}) {
      const std::byte one[] = {b};
      if (!sender->send(1, 7, one).ok()) failed = true;
      ++sent;
    }
  });
  // The first message is queued; the second send waits for it to be taken.
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(2000);
  while (sent.load() < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  std::this_thread::sleep_for(milliseconds(100));
  CHECK(sent.load() == 1);
  std::vector<int> got;
  bool received = true;
  for (int k = 0; k < 3 && received; ++k) {
    std::byte into[1];
    received = receiver->recv(0, 7, into).ok();
    if (received) got.push_back(static_cast<int>(into[0]));
  }
  if (!received) hub.communicator(1)->abort("the test's receive failed");  // (frees the sender)
  source.join();
  CHECK(received);
  CHECK_FALSE(failed.load());
  CHECK(got == std::vector<int>{1, 2, 3});
  CHECK(sent.load() == 3);
}

TEST_CASE("a send waiting for its tag fails when the peer never takes the last message") {
  exec::LoopbackHub hub(2, milliseconds(200));
  auto sender = hub.communicator(0);
  const std::byte one[] = {std::byte{1}};
  REQUIRE(sender->send(1, 3, one).ok());
  const Status late = sender->send(1, 3, one);
  CHECK(late.code() == StatusCode::kDeadlineExceeded);
  CHECK(late.message().find("rank 1 did not take the previous message with tag 3") !=
        std::string::npos);
}
