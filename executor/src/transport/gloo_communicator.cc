// Gloo (TCP) implementation of Communicator. See gloo_communicator.h for the contract.
//
// Wire protocol of a message (peer, tag): one or more chunks, each a Gloo unbound-buffer transfer
// in one slot (the mailbox) of the pair to the peer: a header {magic, tag, message bytes, offset}
// and at most kChunkPayloadBytes of payload. Gloo keeps the transfers of a (pair, slot) in FIFO
// order and send() posts all chunks of a message at once, so they arrive contiguous and in order.
//
// Why a mailbox: Gloo transfers are rendezvous — bytes leave the sender only once the receiver
// has posted a receive. A receiver that posts when it needs the message (in a pipeline it is
// usually still computing when the message is sent) then pays a round trip of notifications on
// the critical path. Instead each receiver keeps kMailboxDepth chunk-sized receives posted per
// peer (from its first receive from that peer on), so a sender's chunks go out at once; the
// receiver copies each chunk out and posts its buffer again. Chunks never exceed the posted
// receive, so a wrong-sized message is an error on the receiver (Gloo's I/O thread terminates
// the process when a transfer outgrows its receive), and a message whose receive is not called
// yet (another tag asked for first) is kept aside until it is.
//
// send() copies into a buffer owned here, posts the chunks and returns; a reaper thread waits
// for completions in send order and frees the buffers. The waits below never let Gloo time out
// on its own where that is not an error: a timed-out Gloo wait closes every pair of its context.
#include "gp/exec/gloo_communicator.h"

#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace gp::exec {
namespace {

using Clock = std::chrono::steady_clock;
using gloo::transport::UnboundBuffer;
using std::chrono::milliseconds;

// Longest wait handed to Gloo where only abort (or the peer) may end it.
constexpr milliseconds kForever = std::chrono::hours(24 * 365);
// Outstanding (not yet received) sends beyond which send() waits for the oldest to complete.
constexpr size_t kMaxOutstandingSends = 4096;
constexpr size_t kMaxOutstandingBytes = size_t{1} << 30;

constexpr uint32_t kMagic = 0x47504d32;  // "GPM2"

// Gloo's store interface over a RendezvousStore (the coordinator's); failures are thrown as
// gloo's own stores throw them ("timeout" in a message makes guarded() say DEADLINE_EXCEEDED).
class RendezvousStoreAdapter final : public gloo::rendezvous::Store {
 public:
  RendezvousStoreAdapter(std::shared_ptr<RendezvousStore> store, milliseconds timeout)
      : store_(std::move(store)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    const Status st = store_->set(key, std::string(data.begin(), data.end()));
    if (!st.ok()) GLOO_THROW_IO_EXCEPTION("rendezvous store set: ", st.to_string());
  }
  std::vector<char> get(const std::string& key) override {
    auto value = store_->get(key, timeout_);
    if (!value.ok()) GLOO_THROW_IO_EXCEPTION("rendezvous store: ", describe(value.status()));
    return std::vector<char>(value->begin(), value->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (const auto& key : keys) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      auto value = store_->get(key, std::max(left, milliseconds(0)));
      if (!value.ok()) GLOO_THROW_IO_EXCEPTION("rendezvous store: ", describe(value.status()));
    }
  }

 private:
  static std::string describe(const Status& st) {
    return (st.code() == StatusCode::kDeadlineExceeded ? "timeout: " : "") + st.to_string();
  }

  std::shared_ptr<RendezvousStore> store_;
  milliseconds timeout_;
};

struct ChunkHeader {
  uint32_t magic = 0;
  uint32_t reserved = 0;
  uint64_t tag = 0;
  uint64_t message_bytes = 0;  // the whole message's payload
  uint64_t offset = 0;         // of this chunk's payload in the message
};

// Payload per chunk and chunks kept posted per peer: 1 MiB of receive buffers per peer that
// sends to this rank, and up to that much in flight from it without a round trip.
constexpr size_t kChunkPayloadBytes = size_t{256} << 10;
constexpr size_t kChunkBytes = sizeof(ChunkHeader) + kChunkPayloadBytes;
constexpr int kMailboxDepth = 4;
// The one Gloo slot of point-to-point traffic (the world context carries nothing else).
constexpr uint64_t kMailboxSlot = 0x4750;

size_t chunk_count(size_t bytes) {
  return bytes == 0 ? 1 : (bytes + kChunkPayloadBytes - 1) / kChunkPayloadBytes;
}

bool mentions_timeout(const std::string& what) {
  return what.find("imeout") != std::string::npos || what.find("imed out") != std::string::npos;
}

// Runs `fn` and turns whatever Gloo throws into a Status: timeouts into DEADLINE_EXCEEDED,
// transport errors into UNAVAILABLE, failed Gloo invariants into INTERNAL.
template <typename Fn>
Status guarded(const std::string& context, Fn&& fn) {
  try {
    return fn();
  } catch (const gloo::IoException& e) {
    return Status(
        mentions_timeout(e.what()) ? StatusCode::kDeadlineExceeded : StatusCode::kUnavailable,
        context + ": " + e.what());
  } catch (const gloo::EnforceNotMet& e) {
    return internal_error(context + ": " + e.what());
  } catch (const std::exception& e) {
    return Status(StatusCode::kUnavailable, context + ": " + e.what());
  } catch (...) {
    return Status(StatusCode::kUnknown, context + ": unknown exception");
  }
}

class GlooCommunicator final : public Communicator {
 public:
  explicit GlooCommunicator(const GlooOptions& options) : options_(options) {}
  ~GlooCommunicator() override;

  Status connect();
  int rank() const override { return options_.rank; }
  Status send(int peer, uint64_t tag, std::span<const std::byte> data) override;
  Status recv(int peer, uint64_t tag, std::span<std::byte> data) override;
  Status allreduce_sum(std::span<const int> group, std::span<float> data) override;
  void abort(const std::string& reason) override;

 private:
  struct PendingSend {
    int peer = 0;
    uint64_t tag = 0;
    size_t payload_bytes = 0;
    size_t chunks = 0;
    std::vector<std::byte> wire;  // the chunks back to back: header, then its payload slice
    std::unique_ptr<UnboundBuffer> buf;
  };
  // Receives kept posted for one peer, and its messages that arrived before their recv().
  struct Mailbox {
    std::mutex mu;                  // one receive from this peer at a time
    std::vector<std::byte> memory;  // kMailboxDepth chunks
    std::vector<std::unique_ptr<UnboundBuffer>> slots;
    int next = 0;  // the slot the next chunk lands in (Gloo fills posted receives in order)
    std::map<uint64_t, std::deque<std::vector<std::byte>>> early;  // by tag, arrival order
  };
  struct Group {
    std::shared_ptr<gloo::rendezvous::Context> context;
    uint32_t next_tag = 0;
    Status error;  // sticky: a failed rendezvous or a timed-out all-reduce kills the group
  };

  std::string who() const { return "rank " + std::to_string(options_.rank); }
  Status check_peer(int peer, const char* op) const;
  // Fails (under mu_) when the communicator was aborted or its connections are down.
  Status usable_locked() const;
  // Posts the mailbox's receives at the first receive from `peer`.
  Status open_mailbox(Mailbox& mb, int peer);
  // Waits until the mailbox's next slot holds a chunk (or `deadline`) and returns its header.
  Status next_chunk(Mailbox& mb, int peer, uint64_t tag, Clock::time_point deadline,
                    ChunkHeader* header);
  // Posts the next slot's receive again and moves on.
  Status release_chunk(Mailbox& mb, int peer);
  Status p2p_failure(Status st);
  template <typename T>
  Status run_allreduce(Group& g, std::span<const int> group, T* data, size_t count,
                       const gloo::AllreduceOptions::Func& reduce);
  void reap();

  const GlooOptions options_;
  std::unique_ptr<gloo::rendezvous::Store> file_store_;  // a FileStore, or options_.store's
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;  // the world; point-to-point only

  std::mutex mu_;
  std::condition_variable cv_;
  bool aborted_ = false;
  std::string abort_reason_;
  Status p2p_error_;  // sticky: the world context's pairs are closed
  std::deque<std::unique_ptr<PendingSend>> sends_;
  size_t send_bytes_ = 0;
  bool stopping_ = false;
  std::set<UnboundBuffer*> recv_waits_;
  std::vector<std::unique_ptr<Mailbox>> mailboxes_;  // by peer
  std::map<std::vector<int>, std::shared_ptr<Group>> groups_;
  std::thread reaper_;

  std::mutex collective_mu_;  // one all-reduce at a time, in call order
};

Status GlooCommunicator::connect() {
  const GlooOptions& o = options_;
  const std::string store_name =
      o.store ? std::string("the rendezvous store") : "store '" + o.store_dir + "'";
  const std::string where = who() + " of " + std::to_string(o.world_size) + " (" + store_name +
                            ", prefix '" + o.prefix + "', host " + o.hostname + ")";
  Status st = guarded("gloo rendezvous for " + where, [&] {
    if (o.store) {
      file_store_ = std::make_unique<RendezvousStoreAdapter>(o.store, o.timeout);
    } else {
      file_store_ = std::make_unique<gloo::rendezvous::FileStore>(o.store_dir);
    }
    gloo::transport::tcp::attr attr;
    attr.hostname = o.hostname;
    device_ = gloo::transport::tcp::CreateDevice(attr);
    context_ = std::make_shared<gloo::rendezvous::Context>(o.rank, o.world_size);
    context_->setTimeout(o.timeout);
    gloo::rendezvous::PrefixStore store(o.prefix, *file_store_);
    context_->connectFullMesh(store, device_);
    return ok_status();
  });
  if (!st.ok()) return st;
  for (int r = 0; r < o.world_size; ++r) mailboxes_.push_back(std::make_unique<Mailbox>());
  reaper_ = std::thread([this] { reap(); });
  return ok_status();
}

GlooCommunicator::~GlooCommunicator() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Flush: receivers get up to the timeout to take what was sent (the bytes of a Gloo send
    // leave only when the receiver asks for them).
    cv_.wait_for(lock, options_.timeout,
                 [&] { return sends_.empty() || aborted_ || !p2p_error_.ok(); });
    stopping_ = true;
    if (!sends_.empty()) sends_.front()->buf->abortWaitSend();
    cv_.notify_all();
  }
  if (reaper_.joinable()) reaper_.join();
  // Destroying an unbound buffer invalidates Gloo's references to it (and waits for the I/O
  // thread to let go), so the payloads and mailboxes can go first; then the pairs close.
  sends_.clear();
  mailboxes_.clear();
  groups_.clear();
  context_.reset();
  device_.reset();
}

Status GlooCommunicator::check_peer(int peer, const char* op) const {
  if (peer < 0 || peer >= options_.world_size || peer == options_.rank) {
    return invalid_argument(who() + ": " + op + " peer = " + std::to_string(peer) +
                            ", must be another rank in [0, " + std::to_string(options_.world_size) +
                            ")");
  }
  return ok_status();
}

Status GlooCommunicator::usable_locked() const {
  if (aborted_) return Status(StatusCode::kAborted, abort_reason_);
  if (!p2p_error_.ok()) {
    return Status(StatusCode::kUnavailable,
                  who() + ": connections closed after an earlier error: " + p2p_error_.message());
  }
  return ok_status();
}

Status GlooCommunicator::p2p_failure(Status st) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return Status(StatusCode::kAborted, abort_reason_);
  if (p2p_error_.ok()) p2p_error_ = st;
  cv_.notify_all();
  return st;
}

Status GlooCommunicator::send(int peer, uint64_t tag, std::span<const std::byte> data) {
  GP_RETURN_IF_ERROR(check_peer(peer, "send"));
  std::unique_lock<std::mutex> lock(mu_);
  GP_RETURN_IF_ERROR(usable_locked());
  auto over_bound = [&] {
    return !sends_.empty() && (sends_.size() >= kMaxOutstandingSends ||
                               send_bytes_ + data.size() > kMaxOutstandingBytes);
  };
  if (over_bound()) {
    const bool room = cv_.wait_for(lock, options_.timeout,
                                   [&] { return aborted_ || !p2p_error_.ok() || !over_bound(); });
    GP_RETURN_IF_ERROR(usable_locked());
    if (!room) {
      return Status(StatusCode::kDeadlineExceeded,
                    who() + ": " + std::to_string(sends_.size()) + " messages (" +
                        std::to_string(send_bytes_) + " bytes) sent but not received within " +
                        std::to_string(options_.timeout.count()) + " ms; the oldest to rank " +
                        std::to_string(sends_.front()->peer) + " (tag " +
                        std::to_string(sends_.front()->tag) + ")");
    }
  }
  auto s = std::make_unique<PendingSend>();
  s->peer = peer;
  s->tag = tag;
  s->payload_bytes = data.size();
  s->chunks = chunk_count(data.size());
  s->wire.resize(s->chunks * sizeof(ChunkHeader) + data.size());
  std::vector<size_t> lengths(s->chunks);
  size_t pos = 0;
  for (size_t c = 0; c < s->chunks; ++c) {
    const size_t offset = c * kChunkPayloadBytes;
    const size_t n = std::min(kChunkPayloadBytes, data.size() - offset);
    const ChunkHeader h{kMagic, 0, tag, data.size(), offset};
    std::memcpy(s->wire.data() + pos, &h, sizeof(h));
    if (n > 0) std::memcpy(s->wire.data() + pos + sizeof(h), data.data() + offset, n);
    lengths[c] = sizeof(h) + n;
    pos += lengths[c];
  }
  Status st = guarded(
      who() + ": send to rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")", [&] {
        s->buf = context_->createUnboundBuffer(s->wire.data(), s->wire.size());
        size_t at = 0;
        for (size_t n : lengths) {
          s->buf->send(peer, kMailboxSlot, at, n);
          at += n;
        }
        return ok_status();
      });
  if (!st.ok()) {
    lock.unlock();
    return p2p_failure(st);
  }
  send_bytes_ += s->payload_bytes;
  sends_.push_back(std::move(s));
  cv_.notify_all();
  return ok_status();
}

void GlooCommunicator::reap() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || aborted_ || !sends_.empty(); });
    if (stopping_ || aborted_ || !p2p_error_.ok()) return;
    PendingSend* s = sends_.front().get();
    lock.unlock();
    bool done = false;
    Status st = guarded(who() + ": send to rank " + std::to_string(s->peer) + " (tag " +
                            std::to_string(s->tag) + ")",
                        [&] {
                          done = true;
                          for (size_t c = 0; c < s->chunks && done; ++c) {
                            done = s->buf->waitSend(kForever);
                          }
                          return ok_status();
                        });
    lock.lock();
    if (!st.ok()) {
      if (!aborted_ && p2p_error_.ok()) p2p_error_ = st;
      cv_.notify_all();
      return;
    }
    if (!done) continue;  // interrupted by abort or shutdown: the loop condition says which
    send_bytes_ -= s->payload_bytes;
    sends_.pop_front();
    cv_.notify_all();
  }
}

Status GlooCommunicator::open_mailbox(Mailbox& mb, int peer) {
  if (!mb.slots.empty()) return ok_status();
  mb.memory.resize(kMailboxDepth * kChunkBytes);
  Status st = guarded(who() + ": posting receives from rank " + std::to_string(peer), [&] {
    for (int i = 0; i < kMailboxDepth; ++i) {
      mb.slots.push_back(
          context_->createUnboundBuffer(mb.memory.data() + i * kChunkBytes, kChunkBytes));
      mb.slots.back()->recv(peer, kMailboxSlot);
    }
    return ok_status();
  });
  return st.ok() ? st : p2p_failure(st);
}

Status GlooCommunicator::next_chunk(Mailbox& mb, int peer, uint64_t tag, Clock::time_point deadline,
                                    ChunkHeader* header) {
  UnboundBuffer& buf = *mb.slots[mb.next];
  {
    std::lock_guard<std::mutex> lock(mu_);
    GP_RETURN_IF_ERROR(usable_locked());
    recv_waits_.insert(&buf);
  }
  bool done = false;
  bool timed_out = false;
  Status st = guarded(
      who() + ": recv from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")",
      [&] {
        const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
        try {
          done = buf.waitRecv(std::max(left, milliseconds(0)));
        } catch (const gloo::IoException& e) {
          // Gloo's own words for a wait that ran out (it also closed the pairs).
          timed_out = std::string(e.what()).find("Timed out waiting") != std::string::npos;
          throw;
        }
        return ok_status();
      });
  {
    std::lock_guard<std::mutex> lock(mu_);
    recv_waits_.erase(&buf);
    if (aborted_) return Status(StatusCode::kAborted, abort_reason_);
  }
  if (timed_out) {
    st = Status(StatusCode::kDeadlineExceeded,
                who() + ": no message from rank " + std::to_string(peer) + " (tag " +
                    std::to_string(tag) + ") within " + std::to_string(options_.timeout.count()) +
                    " ms");
  }
  if (!st.ok()) return p2p_failure(st);
  if (!done) {
    return internal_error(who() + ": recv from rank " + std::to_string(peer) + " interrupted");
  }
  std::memcpy(header, mb.memory.data() + mb.next * kChunkBytes, sizeof(ChunkHeader));
  if (header->magic != kMagic) {
    return p2p_failure(internal_error(who() + ": corrupt message header from rank " +
                                      std::to_string(peer) + " (waiting for tag " +
                                      std::to_string(tag) + ")"));
  }
  return ok_status();
}

Status GlooCommunicator::release_chunk(Mailbox& mb, int peer) {
  UnboundBuffer& buf = *mb.slots[mb.next];
  mb.next = (mb.next + 1) % kMailboxDepth;
  Status st = guarded(who() + ": posting a receive from rank " + std::to_string(peer), [&] {
    buf.recv(peer, kMailboxSlot);
    return ok_status();
  });
  return st.ok() ? st : p2p_failure(st);
}

Status GlooCommunicator::recv(int peer, uint64_t tag, std::span<std::byte> data) {
  GP_RETURN_IF_ERROR(check_peer(peer, "recv"));
  const auto deadline = Clock::now() + options_.timeout;
  Mailbox& mb = *mailboxes_[peer];
  std::lock_guard<std::mutex> hold(mb.mu);
  {
    std::lock_guard<std::mutex> lock(mu_);
    GP_RETURN_IF_ERROR(usable_locked());
  }
  GP_RETURN_IF_ERROR(open_mailbox(mb, peer));
  auto size_mismatch = [&](size_t got) {
    return internal_error(who() + ": message from rank " + std::to_string(peer) + " (tag " +
                          std::to_string(tag) + ") has " + std::to_string(got) +
                          " bytes, expected " + std::to_string(data.size()));
  };
  // Taken off the wire by an earlier receive that was waiting for another tag.
  if (auto it = mb.early.find(tag); it != mb.early.end()) {
    const std::vector<std::byte> message = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) mb.early.erase(it);
    if (message.size() != data.size()) return size_mismatch(message.size());
    std::copy(message.begin(), message.end(), data.begin());
    return ok_status();
  }
  for (;;) {
    ChunkHeader h;
    GP_RETURN_IF_ERROR(next_chunk(mb, peer, tag, deadline, &h));
    const ChunkHeader first = h;
    const bool mine = first.tag == tag;
    const bool fits = mine && first.message_bytes == data.size();
    std::byte* dst = fits ? data.data() : nullptr;
    if (!mine) {
      auto& queue = mb.early[first.tag];
      queue.emplace_back(first.message_bytes);  // allocates: only for out-of-order arrivals
      dst = queue.back().data();
    }
    // Every chunk of the message, also when it is the wrong size: the mailbox stays in step.
    for (uint64_t got = 0;;) {
      if (h.tag != first.tag || h.message_bytes != first.message_bytes || h.offset != got) {
        return p2p_failure(internal_error(who() + ": chunks of a message from rank " +
                                          std::to_string(peer) + " (tag " +
                                          std::to_string(first.tag) + ") out of order"));
      }
      const size_t n = std::min<uint64_t>(kChunkPayloadBytes, h.message_bytes - h.offset);
      if (dst != nullptr && n > 0) {
        std::memcpy(dst + h.offset, mb.memory.data() + mb.next * kChunkBytes + sizeof(h), n);
      }
      GP_RETURN_IF_ERROR(release_chunk(mb, peer));
      got += n;
      if (got >= h.message_bytes) break;
      GP_RETURN_IF_ERROR(next_chunk(mb, peer, tag, deadline, &h));
    }
    if (mine) return fits ? ok_status() : size_mismatch(first.message_bytes);
  }
}

template <typename T>
Status GlooCommunicator::run_allreduce(Group& g, std::span<const int> group, T* data, size_t count,
                                       const gloo::AllreduceOptions::Func& reduce) {
  const uint32_t tag = g.next_tag++;
  Status st = guarded(who() + ": all-reduce over ranks {" + rank_list(group) + "}", [&] {
    gloo::AllreduceOptions opts(std::static_pointer_cast<gloo::Context>(g.context));
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setOutput(data, count);
    opts.setReduceFunction(reduce);
    opts.setTag(tag);
    opts.setTimeout(options_.timeout);
    gloo::allreduce(opts);
    return ok_status();
  });
  if (!st.ok()) g.error = st;
  return st;
}

Status GlooCommunicator::allreduce_sum(std::span<const int> group, std::span<float> data) {
  const std::string name = "{" + rank_list(group) + "}";
  bool member = false;
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] < 0 || group[i] >= options_.world_size || (i > 0 && group[i] <= group[i - 1])) {
      return invalid_argument(who() + ": all-reduce group " + name +
                              " must be sorted distinct ranks in [0, " +
                              std::to_string(options_.world_size) + ")");
    }
    member = member || group[i] == options_.rank;
  }
  if (!member) {
    return invalid_argument(who() + ": all-reduce group " + name + " does not contain this rank");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return Status(StatusCode::kAborted, abort_reason_);
  }
  if (group.size() == 1) return ok_status();

  std::lock_guard<std::mutex> collective(collective_mu_);
  const std::vector<int> key(group.begin(), group.end());
  std::shared_ptr<Group> g;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return Status(StatusCode::kAborted, abort_reason_);
    auto it = groups_.find(key);
    if (it != groups_.end()) g = it->second;
  }
  if (!g) {
    // First all-reduce over this group: its members connect a sub-context of exactly them.
    g = std::make_shared<Group>();
    const int group_rank =
        static_cast<int>(std::find(key.begin(), key.end(), options_.rank) - key.begin());
    auto context =
        std::make_shared<gloo::rendezvous::Context>(group_rank, static_cast<int>(key.size()));
    g->error = guarded("gloo rendezvous for the all-reduce group " + name + " of " + who() +
                           " (world size " + std::to_string(options_.world_size) + ", store '" +
                           options_.store_dir + "', prefix '" + options_.prefix + "')",
                       [&] {
                         context->setTimeout(options_.timeout);
                         gloo::rendezvous::PrefixStore store(
                             options_.prefix + "/group/" + rank_list(key), *file_store_);
                         context->connectFullMesh(store, device_);
                         return ok_status();
                       });
    if (g->error.ok()) g->context = std::move(context);
    std::lock_guard<std::mutex> lock(mu_);
    groups_[key] = g;
    if (aborted_) return Status(StatusCode::kAborted, abort_reason_);
  }
  GP_RETURN_IF_ERROR(g->error);

  // Sizes first (min of {n, -n}), so that a mismatch is an error on every member instead of an
  // overrun in Gloo's I/O thread.
  int64_t sizes[2] = {static_cast<int64_t>(data.size()), -static_cast<int64_t>(data.size())};
  GP_RETURN_IF_ERROR(
      run_allreduce(*g, group, sizes, 2, [](void* c, const void* a, const void* b, size_t n) {
        for (size_t i = 0; i < n; ++i) {
          static_cast<int64_t*>(c)[i] =
              std::min(static_cast<const int64_t*>(a)[i], static_cast<const int64_t*>(b)[i]);
        }
      }));
  if (sizes[0] != -sizes[1]) {
    return internal_error(who() + ": all-reduce over ranks " + name + ": mismatched sizes (" +
                          std::to_string(sizes[0]) + " to " + std::to_string(-sizes[1]) +
                          " floats across ranks, " + std::to_string(data.size()) + " here)");
  }
  if (data.empty()) return ok_status();
  Status st = run_allreduce(
      *g, group, data.data(), data.size(), [](void* c, const void* a, const void* b, size_t n) {
        for (size_t i = 0; i < n; ++i) {
          static_cast<float*>(c)[i] =
              static_cast<const float*>(a)[i] + static_cast<const float*>(b)[i];
        }
      });
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return Status(StatusCode::kAborted, abort_reason_);
  return st;
}

void GlooCommunicator::abort(const std::string& reason) {
  std::vector<std::shared_ptr<gloo::Context>> contexts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = reason;
    for (UnboundBuffer* b : recv_waits_) b->abortWaitRecv();
    if (!sends_.empty()) sends_.front()->buf->abortWaitSend();
    if (context_) contexts.push_back(context_);
    for (const auto& [key, g] : groups_) {
      if (g->context) contexts.push_back(g->context);
    }
    cv_.notify_all();
  }
  // Closing the pairs makes peers blocked on this rank fail now instead of at their timeout.
  for (const auto& c : contexts) {
    Status ignored = guarded("close", [&] {
      c->closeConnections();
      return ok_status();
    });
    (void)ignored;
  }
}

}  // namespace

Result<std::unique_ptr<Communicator>> make_gloo_communicator(const GlooOptions& options) {
  const std::string who = "gloo communicator for rank " + std::to_string(options.rank) + " of " +
                          std::to_string(options.world_size) + " (store '" + options.store_dir +
                          "')";
  if (options.world_size < 1) {
    return invalid_argument(who + ": world_size = " + std::to_string(options.world_size) +
                            ", must be >= 1");
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return invalid_argument(who + ": rank = " + std::to_string(options.rank) + ", must be in [0, " +
                            std::to_string(options.world_size) + ")");
  }
  std::error_code ec;
  if (options.store_dir.empty() || !std::filesystem::is_directory(options.store_dir, ec)) {
    return invalid_argument(who + ": store_dir is not an existing directory");
  }
  if (options.prefix.empty()) return invalid_argument(who + ": prefix (the job id) is empty");
  if (options.hostname.empty()) return invalid_argument(who + ": hostname is empty");
  if (options.timeout <= milliseconds(0)) {
    return invalid_argument(who + ": timeout = " + std::to_string(options.timeout.count()) +
                            " ms, must be > 0");
  }
  auto comm = std::make_unique<GlooCommunicator>(options);
  GP_RETURN_IF_ERROR(comm->connect());
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace gp::exec
