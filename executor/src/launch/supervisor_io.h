// What the supervisor writes besides its ranks: the console it echoes their logs to, which must
// never stall it, and the launcher's beacon, which must stay fresh whatever the console does.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace gp::exec::launch {

// stdout or stderr, written without blocking for long: a console that takes nothing for
// kStallMs (a terminal after ^S, a pipe into a pager nobody scrolls) loses that output instead
// of stopping the supervisor, and the next write that gets through says how much was lost (the
// rank logs hold all of it). A regular file is written as it is (its writes never stall).
class Console {
 public:
  static constexpr int kStallMs = 200;
  explicit Console(int fd);
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  void write(const std::string& text);
  int64_t dropped_bytes() const { return dropped_; }

 private:
  bool write_all(const char* data, size_t size);  // false: stalled, the rest not written

  int fd_ = -1;
  bool own_ = false;  // a non-blocking description of our own, opened over the inherited one
  int64_t dropped_ = 0;
};

// Rewrites `path` every second ("1\n", "2\n", ...; by rename, so readers see whole contents)
// from a thread of its own until destroyed. The first write happens in the constructor, so the
// file is fresh before any rank reads it; false from ok() when that write failed.
class BeaconWriter {
 public:
  explicit BeaconWriter(std::string path);
  ~BeaconWriter();
  BeaconWriter(const BeaconWriter&) = delete;
  BeaconWriter& operator=(const BeaconWriter&) = delete;
  bool ok() const { return ok_; }
  // From now on every beat says "N stop SIG": a rank that missed the signal (it came before
  // its handlers were in place, or went to an ssh client) takes it from the beacon it watches.
  void set_stop(int sig);

 private:
  bool beat();  // with mu_ held

  std::string path_;
  int64_t beats_ = 0;
  int stop_signal_ = 0;
  bool ok_ = true;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

// `text` into `path` through `path`.tmp and a rename; false when either failed.
bool write_atomically(const std::string& path, const std::string& text);

}  // namespace gp::exec::launch
