#include "transport/shm_communicator.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "transport/ring_allreduce.h"

namespace gp::exec {
namespace {

using Clock = std::chrono::steady_clock;

// The handshake tag on the fallback communicator (the executor's tags stay far below it).
constexpr uint64_t kHandshakeTag = ~uint64_t{0} - 0x5348;
constexpr size_t kHeaderBytes = 4096;
// Before every payload: magic, tag and size. The magic catches a stream read out of step.
constexpr size_t kFrameBytes = 24;
constexpr uint64_t kFrameMagic = 0x4750534852494E47ULL;  // "GPSHRING"
// A queue for a peer that does not receive is bounded (as Gloo's outstanding sends are).
constexpr size_t kMaxQueuedBytes = size_t{1} << 30;
// An all-reduce moves pieces of at most this (and a quarter of the ring): small enough to stay in
// cache between the copy out of the ring and the add.
constexpr int64_t kMaxPieceBytes = 256 << 10;

// Shared between the two processes of a ring. Zero-initialised by the file's allocation.
struct RingHeader {
  alignas(64) std::atomic<uint64_t> head;      // bytes published by the producer
  alignas(64) std::atomic<uint64_t> tail;      // bytes consumed
  alignas(64) std::atomic<uint32_t> data_seq;  // futex word: bumped after each publish
  std::atomic<uint32_t> space_seq;             // futex word: bumped after each consume
  std::atomic<uint32_t> data_waiter;           // the consumer sleeps on data_seq
  std::atomic<uint32_t> space_waiter;          // the producer's pump sleeps on space_seq
  std::atomic<uint32_t> aborted;               // set by the producer's abort()
  std::atomic<int32_t> producer_pid;           // to tell a dead producer from a slow one
};
static_assert(sizeof(RingHeader) <= kHeaderBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// How long a receiver polls its ring before it sleeps on the futex. Waking a sleeping process
// costs tens of microseconds on a VM (the idle vCPU must be woken too); an all-reduce or a
// pipeline's next message usually comes sooner. Polling yields the core now and then, so a peer
// that shares it (more ranks than cores) still runs.
constexpr std::chrono::microseconds kPollTime{50};

void poll_pause(int polls) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
  if (polls % 16 == 15) sched_yield();
}

uint32_t* futex_word(std::atomic<uint32_t>* a) { return reinterpret_cast<uint32_t*>(a); }

void futex_wait(std::atomic<uint32_t>* a, uint32_t expected, std::chrono::microseconds max) {
  timespec ts{static_cast<time_t>(max.count() / 1000000),
              static_cast<long>((max.count() % 1000000) * 1000)};
  syscall(SYS_futex, futex_word(a), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>* a) {
  syscall(SYS_futex, futex_word(a), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Sleeps on `seq` unless it moved since `seen`; the flag tells the other side to wake us.
// seq_cst on both sides: either the other side sees the flag, or the futex sees a new value.
void wait_on(std::atomic<uint32_t>* seq, std::atomic<uint32_t>* waiter, uint32_t seen,
             std::chrono::microseconds max) {
  waiter->store(1, std::memory_order_seq_cst);
  if (seq->load(std::memory_order_seq_cst) == seen) futex_wait(seq, seen, max);
  waiter->store(0, std::memory_order_relaxed);
}

void notify(std::atomic<uint32_t>* seq, std::atomic<uint32_t>* waiter) {
  seq->fetch_add(1, std::memory_order_seq_cst);
  if (waiter->load(std::memory_order_seq_cst) != 0) futex_wake(seq);
}

// One mapped ring file; the producer and the consumer each hold one.
class Ring {
 public:
  static Result<std::unique_ptr<Ring>> open(const std::string& path, uint64_t capacity) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return Status(StatusCode::kUnavailable, path + ": " + std::strerror(errno));
    const size_t bytes = kHeaderBytes + capacity;
    // Allocated, not just sized: a sparse tmpfs file beyond the filesystem's limit (64 MiB in a
    // default container) would turn the first touch of a page into SIGBUS.
    const int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (err != 0) {
      ::close(fd);
      return Status(StatusCode::kUnavailable, path + ": cannot allocate " + std::to_string(bytes) +
                                                  " bytes: " + std::strerror(err));
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) {
      return Status(StatusCode::kUnavailable, path + ": mmap: " + std::strerror(errno));
    }
    auto ring = std::unique_ptr<Ring>(new Ring);
    ring->base_ = p;
    ring->bytes_ = bytes;
    ring->capacity_ = capacity;
    ring->h_ = static_cast<RingHeader*>(p);
    ring->data_ = static_cast<std::byte*>(p) + kHeaderBytes;
    return ring;
  }
  ~Ring() { munmap(base_, bytes_); }

  RingHeader& header() { return *h_; }

  // First touches of fresh tmpfs pages cost ~10 us each on a VM, which made every message of the
  // first pass through a ring ten times slower: the producer writes its ring's pages before
  // publishing anything (the consumer reads only published bytes), the consumer reads them after.
  void prefault_for_writing() { std::memset(data_, 0, capacity_); }
  void prefault_for_reading() const {
    unsigned char sink = 0;  // atomic loads: the producer may be writing these pages already
    for (uint64_t off = 0; off < capacity_; off += 4096) {
      sink ^=
          __atomic_load_n(reinterpret_cast<const unsigned char*>(data_ + off), __ATOMIC_RELAXED);
    }
    asm volatile("" : : "r"(sink));
  }

  // Producer: copies as much of [p, p + n) as fits, publishes it, wakes a sleeping consumer.
  size_t write_some(const std::byte* p, size_t n) {
    const uint64_t head = h_->head.load(std::memory_order_relaxed);
    const uint64_t tail = h_->tail.load(std::memory_order_acquire);
    const size_t k = std::min<uint64_t>(n, capacity_ - (head - tail));
    if (k == 0) return 0;
    copy_in(head, p, k);
    h_->head.store(head + k, std::memory_order_release);
    notify(&h_->data_seq, &h_->data_waiter);
    return k;
  }

  // Consumer.
  uint64_t readable() const { return h_->head.load(std::memory_order_acquire) - tail_; }
  void read(std::byte* out, size_t n) {  // n <= readable()
    copy_out(tail_, out, n);
    tail_ += n;
    h_->tail.store(tail_, std::memory_order_release);
    notify(&h_->space_seq, &h_->space_waiter);
  }

 private:
  Ring() = default;
  void copy_in(uint64_t at, const std::byte* p, size_t n) {
    const size_t off = at % capacity_;
    const size_t first = std::min<size_t>(n, capacity_ - off);
    std::memcpy(data_ + off, p, first);
    std::memcpy(data_, p + first, n - first);
  }
  void copy_out(uint64_t at, std::byte* out, size_t n) const {
    const size_t off = at % capacity_;
    const size_t first = std::min<size_t>(n, capacity_ - off);
    std::memcpy(out, data_ + off, first);
    std::memcpy(out + first, data_, n - first);
  }

  void* base_ = nullptr;
  size_t bytes_ = 0;
  uint64_t capacity_ = 0;
  RingHeader* h_ = nullptr;
  std::byte* data_ = nullptr;
  uint64_t tail_ = 0;  // consumer's position (only the consumer reads it)
};

struct Outbound {
  std::unique_ptr<Ring> ring;
  std::mutex mu;
  std::vector<std::byte> pending;  // queued bytes that did not fit, from pending_off on
  size_t pending_off = 0;
  bool has_pending() const { return pending_off < pending.size(); }
  size_t queued() const { return pending.size() - pending_off; }
};

struct Inbound {
  std::unique_ptr<Ring> ring;
  std::map<uint64_t, std::deque<std::vector<std::byte>>> stash;  // arrived early, by tag
  std::string broken;  // why the stream can no longer be read (a message read partway)
};

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(std::unique_ptr<Communicator> fallback, ShmOptions o)
      : fallback_(std::move(fallback)), o_(std::move(o)) {}

  ~ShmCommunicator() override {
    // Unless aborted, give the peers the time to take what is still queued.
    const auto deadline = Clock::now() + o_.timeout;
    while (!aborted_.load() && any_pending() && Clock::now() < deadline) {
      pump_all();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    {
      std::lock_guard<std::mutex> lock(pump_mu_);
      stop_.store(true);
    }
    pump_cv_.notify_all();
    if (pump_.joinable()) pump_.join();
  }

  // Maps the rings and meets every local peer. Each rank tells the others whether its rings are
  // ready; unless all are, every local rank drops its rings and the fallback carries everything,
  // so the ranks of a host always agree. Sets `unusable` to the reason in that case.
  Status init(std::string* unusable) {
    const auto& local = o_.local_ranks;
    if (std::find(local.begin(), local.end(), o_.rank) == local.end()) return ok_status();
    std::vector<int> peers;
    for (int peer : local) {
      if (peer < 0 || peer >= o_.world_size) {
        return invalid_argument("local_ranks: rank " + std::to_string(peer) + " outside world of " +
                                std::to_string(o_.world_size));
      }
      if (peer != o_.rank) peers.push_back(peer);
    }
    Status mine = open_rings(peers);
    const std::byte ready{static_cast<unsigned char>(mine.ok() ? 1 : 0)};
    for (int peer : peers) {
      Status st = fallback_->send(peer, kHandshakeTag, {&ready, 1});
      if (!st.ok()) return fail_init(peers, st, peer);
    }
    std::string why = mine.ok() ? "" : "rank " + std::to_string(o_.rank) + ": " + mine.message();
    for (int peer : peers) {
      std::byte theirs{};
      Status st = fallback_->recv(peer, kHandshakeTag, {&theirs, 1});
      if (!st.ok()) return fail_init(peers, st, peer);
      if (theirs != std::byte{1} && why.empty()) {
        why = "rank " + std::to_string(peer) + " could not map its rings";
      }
    }
    if (!why.empty()) {
      drop_rings(peers);
      *unusable = why;
      return ok_status();
    }
    for (auto& [peer, in] : in_) {
      in.ring->prefault_for_reading();  // the producer wrote every page before its hello
      ::unlink(path(peer, o_.rank).c_str());
    }
    ::rmdir(o_.dir.c_str());  // succeeds for the last rank to get here
    return ok_status();
  }

  std::unique_ptr<Communicator> release_fallback() { return std::move(fallback_); }

  int rank() const override { return o_.rank; }

  Status send(int peer, uint64_t tag, std::span<const std::byte> data) override {
    auto it = out_.find(peer);
    if (it == out_.end()) return fallback_->send(peer, tag, data);
    if (aborted_.load()) return Status(StatusCode::kAborted, abort_reason());
    Outbound& o = *it->second;
    std::byte frame[kFrameBytes];
    const uint64_t size = data.size();
    std::memcpy(frame, &kFrameMagic, 8);
    std::memcpy(frame + 8, &tag, 8);
    std::memcpy(frame + 16, &size, 8);
    bool queued = false;
    try {
      std::lock_guard<std::mutex> lock(o.mu);
      if (o.has_pending()) pump(o);
      size_t sent_frame = 0, sent_data = 0;
      if (!o.has_pending()) {
        sent_frame = o.ring->write_some(frame, kFrameBytes);
        if (sent_frame == kFrameBytes) sent_data = o.ring->write_some(data.data(), data.size());
      }
      if (sent_frame < kFrameBytes || sent_data < data.size()) {
        const size_t more = kFrameBytes - sent_frame + data.size() - sent_data;
        if (o.queued() + more > kMaxQueuedBytes) {
          return resource_exhausted("rank " + std::to_string(o_.rank) + ": more than " +
                                    std::to_string(kMaxQueuedBytes) + " bytes queued for rank " +
                                    std::to_string(peer) + ", which is not receiving");
        }
        o.pending.insert(o.pending.end(), frame + sent_frame, frame + kFrameBytes);
        o.pending.insert(o.pending.end(), data.begin() + static_cast<ptrdiff_t>(sent_data),
                         data.end());
        queued = true;
      }
    } catch (const std::exception& e) {  // bad_alloc: fail the call, not the process
      return resource_exhausted("rank " + std::to_string(o_.rank) +
                                ": queueing a message for rank " + std::to_string(peer) + ": " +
                                e.what());
    }
    if (queued) return wake_pump();
    return ok_status();
  }

  Status recv(int peer, uint64_t tag, std::span<std::byte> data) override {
    auto it = in_.find(peer);
    if (it == in_.end()) return fallback_->recv(peer, tag, data);
    if (aborted_.load()) return Status(StatusCode::kAborted, abort_reason());
    Inbound& in = it->second;
    const auto deadline = Clock::now() + o_.timeout;
    if (auto s = in.stash.find(tag); s != in.stash.end() && !s->second.empty()) {
      std::vector<std::byte> msg = std::move(s->second.front());
      s->second.pop_front();
      if (s->second.empty()) in.stash.erase(s);
      if (msg.size() != data.size()) return size_error(peer, tag, msg.size(), data.size());
      std::memcpy(data.data(), msg.data(), data.size());
      return ok_status();
    }
    while (true) {
      if (!in.broken.empty()) return Status(StatusCode::kUnavailable, in.broken);
      std::byte frame[kFrameBytes];
      size_t got = 0;
      Status st = read_exact(in, peer, tag, frame, kFrameBytes, deadline, &got);
      if (!st.ok()) return got > 0 ? break_stream(in, st) : st;
      uint64_t magic = 0, msg_tag = 0, size = 0;
      std::memcpy(&magic, frame, 8);
      std::memcpy(&msg_tag, frame + 8, 8);
      std::memcpy(&size, frame + 16, 8);
      if (magic != kFrameMagic) {
        return break_stream(in, internal_error("the stream from rank " + std::to_string(peer) +
                                               " is out of step (bad frame)"));
      }
      if (msg_tag == tag && size == data.size()) {
        st = read_exact(in, peer, tag, data.data(), data.size(), deadline, &got);
        return st.ok() ? st : break_stream(in, st);
      }
      std::vector<std::byte> early;
      try {
        early.resize(size);
      } catch (const std::exception& e) {
        return break_stream(
            in, resource_exhausted("a message of " + std::to_string(size) + " bytes from rank " +
                                   std::to_string(peer) + ": " + e.what()));
      }
      st = read_exact(in, peer, msg_tag, early.data(), size, deadline, &got);
      if (!st.ok()) return break_stream(in, st);
      if (msg_tag == tag) return size_error(peer, tag, size, data.size());
      in.stash[msg_tag].push_back(std::move(early));
    }
  }

  // Through the rings when every member shares this host (all members decide alike: being on
  // one host is symmetric); otherwise, and for malformed groups, the fallback decides.
  Status allreduce_sum(std::span<const int> group, std::span<float> data) override {
    if (aborted_.load()) return Status(StatusCode::kAborted, abort_reason());
    if (!all_local(group)) return fallback_->allreduce_sum(group, data);
    std::lock_guard<std::mutex> collective(collective_mu_);
    // A failed all-reduce may have left pieces in the rings that a later one would take for its
    // own (the same tag): the rings serve no all-reduce after a failure, as Gloo's groups.
    if (!ring_failure_.ok()) return ring_failure_;
    // Pieces small enough that a rank running ahead by one piece per member still fits a ring.
    const size_t piece = std::min(
        scratch_.size(), static_cast<size_t>(o_.ring_bytes) / (2 * group.size() * sizeof(float)));
    Status st = ring_allreduce_sum(*this, group, ring_allreduce_tag(group), data,
                                   std::span<float>(scratch_).first(std::max<size_t>(piece, 1)));
    if (!st.ok() && st.code() != StatusCode::kInvalidArgument) {
      ring_failure_ = st.with_context("an earlier all-reduce failed");
    }
    return st;
  }

  void abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(reason_mu_);
      if (reason_.empty()) reason_ = reason;
    }
    aborted_.store(true);
    for (auto& [peer, o] : out_) {
      RingHeader& h = o->ring->header();
      h.aborted.store(1, std::memory_order_seq_cst);
      h.data_seq.fetch_add(1, std::memory_order_seq_cst);
      futex_wake(&h.data_seq);
    }
    fallback_->abort(reason);
    pump_cv_.notify_all();
  }

 private:
  uint64_t capacity() const { return static_cast<uint64_t>(o_.ring_bytes); }
  std::string path(int src, int dst) const {
    return o_.dir + "/ring-" + std::to_string(src) + "-" + std::to_string(dst);
  }
  // Sorted distinct ranks, each this one or a peer with rings (membership is checked later).
  bool all_local(std::span<const int> group) const {
    for (size_t i = 0; i < group.size(); ++i) {
      if (i > 0 && group[i] <= group[i - 1]) return false;
      if (group[i] != o_.rank && (!out_.contains(group[i]) || !in_.contains(group[i]))) {
        return false;
      }
    }
    return true;
  }
  std::string abort_reason() {
    std::lock_guard<std::mutex> lock(reason_mu_);
    return reason_;
  }
  Status size_error(int peer, uint64_t tag, uint64_t got, size_t want) const {
    return internal_error("rank " + std::to_string(o_.rank) + ": message from rank " +
                          std::to_string(peer) + " (tag " + std::to_string(tag) + ") has " +
                          std::to_string(got) + " bytes, expected " + std::to_string(want));
  }
  // A message read partway leaves the stream between frames: later receives from the peer fail.
  static Status break_stream(Inbound& in, const Status& st) {
    in.broken = st.message() + " (the stream stopped partway through a message)";
    return st;
  }

  Status open_rings(const std::vector<int>& peers) {
    std::error_code ec;
    std::filesystem::create_directories(o_.dir, ec);
    if (ec) {
      return Status(StatusCode::kUnavailable,
                    "shared-memory directory " + o_.dir + ": " + ec.message());
    }
    // Part of being ready, so that the local ranks agree on running all-reduces here.
    const int64_t piece_bytes = std::min(kMaxPieceBytes, o_.ring_bytes / 4);
    try {
      scratch_.assign(static_cast<size_t>(piece_bytes) / sizeof(float), 0.0f);
    } catch (const std::exception& e) {
      return resource_exhausted("all-reduce scratch of " + std::to_string(piece_bytes) +
                                " bytes: " + e.what());
    }
    for (int peer : peers) {
      GP_ASSIGN_OR_RETURN(auto out, Ring::open(path(o_.rank, peer), capacity()));
      GP_ASSIGN_OR_RETURN(auto in, Ring::open(path(peer, o_.rank), capacity()));
      out->prefault_for_writing();
      out->header().producer_pid.store(static_cast<int32_t>(::getpid()));
      out_[peer] = std::make_unique<Outbound>();
      out_[peer]->ring = std::move(out);
      in_[peer].ring = std::move(in);
    }
    return ok_status();
  }

  // Unmaps and removes every ring this rank may have created.
  void drop_rings(const std::vector<int>& peers) {
    scratch_.clear();
    out_.clear();
    in_.clear();
    for (int peer : peers) {
      ::unlink(path(o_.rank, peer).c_str());
      ::unlink(path(peer, o_.rank).c_str());
    }
    ::rmdir(o_.dir.c_str());
  }

  Status fail_init(const std::vector<int>& peers, const Status& st, int peer) {
    drop_rings(peers);
    return st.with_context("shared-memory handshake of rank " + std::to_string(o_.rank) +
                           " with rank " + std::to_string(peer));
  }

  // Reads n bytes of the peer's stream, waiting (poll, then futex) until they are published;
  // *consumed counts what was read before an error.
  Status read_exact(Inbound& in, int peer, uint64_t tag, std::byte* out, size_t n,
                    Clock::time_point deadline, size_t* consumed) {
    Ring& ring = *in.ring;
    RingHeader& h = ring.header();
    *consumed = 0;
    int idle = 0, polls = 0;
    Clock::time_point poll_until{};
    while (n > 0) {
      const uint32_t seq = h.data_seq.load(std::memory_order_seq_cst);
      const uint64_t ready = std::min<uint64_t>(ring.readable(), n);
      if (ready > 0) {
        ring.read(out, ready);
        out += ready;
        n -= ready;
        *consumed += ready;
        idle = 0;
        polls = 0;
        poll_until = {};
        continue;
      }
      if (aborted_.load()) return Status(StatusCode::kAborted, abort_reason());
      if (h.aborted.load(std::memory_order_acquire) != 0) {
        return Status(StatusCode::kAborted, "rank " + std::to_string(peer) +
                                                " aborted while rank " + std::to_string(o_.rank) +
                                                " waited for its message (tag " +
                                                std::to_string(tag) + ")");
      }
      const auto now = Clock::now();
      if (now > deadline) {
        return Status(StatusCode::kDeadlineExceeded,
                      "rank " + std::to_string(o_.rank) + ": no message from rank " +
                          std::to_string(peer) + " (tag " + std::to_string(tag) + ") within " +
                          std::to_string(o_.timeout.count()) + " ms");
      }
      if (polls == 0) poll_until = now + kPollTime;
      if (now < poll_until) {
        poll_pause(polls++);
        continue;
      }
      if (++idle % 256 == 0) {  // every ~0.5 s of sleeping: is the producer still alive?
        const int32_t pid = h.producer_pid.load();
        if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
          return Status(StatusCode::kUnavailable,
                        "rank " + std::to_string(peer) + " (pid " + std::to_string(pid) +
                            ") exited while rank " + std::to_string(o_.rank) +
                            " waited for its message (tag " + std::to_string(tag) + ")");
        }
      }
      wait_on(&h.data_seq, &h.data_waiter, seq, std::chrono::milliseconds(2));
    }
    return ok_status();
  }

  // Writes what fits of o's queue; o.mu held. Compacts the queue as it drains.
  static bool pump(Outbound& o) {
    const size_t k = o.ring->write_some(o.pending.data() + o.pending_off, o.queued());
    o.pending_off += k;
    if (!o.has_pending()) {
      o.pending.clear();
      o.pending_off = 0;
    } else if (o.pending_off > (size_t{1} << 20) && o.pending_off > o.pending.size() / 2) {
      o.pending.erase(o.pending.begin(), o.pending.begin() + static_cast<ptrdiff_t>(o.pending_off));
      o.pending_off = 0;
    }
    return k > 0;
  }
  bool pump_all() {
    bool moved = false;
    for (auto& [peer, o] : out_) {
      std::lock_guard<std::mutex> lock(o->mu);
      if (o->has_pending()) moved = pump(*o) || moved;
    }
    return moved;
  }
  bool any_pending() {
    for (auto& [peer, o] : out_) {
      std::lock_guard<std::mutex> lock(o->mu);
      if (o->has_pending()) return true;
    }
    return false;
  }

  Status wake_pump() {
    std::lock_guard<std::mutex> lock(pump_mu_);
    work_ = true;
    if (!pump_.joinable()) {
      try {
        pump_ = std::thread([this] { pump_loop(); });
      } catch (const std::exception& e) {
        return resource_exhausted("rank " + std::to_string(o_.rank) +
                                  ": cannot start the shared-memory pump thread: " + e.what());
      }
    }
    pump_cv_.notify_all();
    return ok_status();
  }

  // Runs while sends are queued: drains them as the consumers make room.
  void pump_loop() {
    auto done = [&] { return stop_.load() || aborted_.load(); };
    while (true) {
      {
        std::unique_lock<std::mutex> lock(pump_mu_);
        pump_cv_.wait(lock, [&] { return done() || work_; });
        if (done()) return;
        work_ = false;
      }
      while (!done() && any_pending()) {
        if (pump_all()) continue;
        // Sleep until a consumer frees space (bounded, to look at the other rings too).
        for (auto& [peer, o] : out_) {
          bool waiting;
          {
            std::lock_guard<std::mutex> lock(o->mu);
            waiting = o->has_pending();
          }
          if (!waiting) continue;
          RingHeader& h = o->ring->header();
          const uint32_t seq = h.space_seq.load(std::memory_order_seq_cst);
          if (pump_all()) break;  // room appeared since the last try
          wait_on(&h.space_seq, &h.space_waiter, seq, std::chrono::microseconds(500));
          break;
        }
      }
    }
  }

  std::unique_ptr<Communicator> fallback_;
  ShmOptions o_;
  std::map<int, std::unique_ptr<Outbound>> out_;
  std::map<int, Inbound> in_;
  std::vector<float> scratch_;  // an all-reduce's received piece, before it is added
  // Callers use a communicator from one thread (receives are not thread-safe): the lock only
  // keeps two all-reduces from sharing the scratch should that change.
  std::mutex collective_mu_;
  Status ring_failure_;  // the first failed ring all-reduce's error
  std::atomic<bool> aborted_{false};
  std::mutex reason_mu_;
  std::string reason_;
  std::mutex pump_mu_;
  std::condition_variable pump_cv_;
  bool work_ = false;
  std::atomic<bool> stop_{false};
  std::thread pump_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> make_shm_communicator(std::unique_ptr<Communicator> fallback,
                                                            const ShmOptions& options,
                                                            std::string* unavailable) {
  if (fallback == nullptr) return invalid_argument("shared-memory data plane: no fallback");
  if (options.rank < 0 || options.rank >= options.world_size) {
    return invalid_argument("rank " + std::to_string(options.rank) + " outside world of " +
                            std::to_string(options.world_size));
  }
  if (options.ring_bytes < 4096 || options.ring_bytes % 8 != 0) {
    return invalid_argument("ring_bytes = " + std::to_string(options.ring_bytes) +
                            ", must be >= 4096 and a multiple of 8");
  }
  if (options.dir.empty()) return invalid_argument("shared-memory data plane: empty dir");
  auto comm = std::make_unique<ShmCommunicator>(std::move(fallback), options);
  std::string why;
  GP_RETURN_IF_ERROR(comm->init(&why));
  if (!why.empty()) {
    if (unavailable != nullptr) *unavailable = why;
    return comm->release_fallback();
  }
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace gp::exec
