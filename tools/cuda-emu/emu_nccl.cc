#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "emu_streams.h"

namespace {

struct Message {
  const void* data;
  size_t bytes;
  bool taken = false;
};

struct Reduction {
  std::vector<float*> buffers;
  size_t count = 0;
  int arrived = 0, collected = 0;
  bool summed = false;
  std::vector<float> sum;
};

// What the ranks of one communicator share.
struct Shared {
  int nranks = 0;
  std::mutex mu;
  std::condition_variable cv;
  int joined = 0;
  bool broken = false;  // a rank aborted: its peers' operations fail
  std::map<std::pair<int, int>, std::deque<Message*>> posted;  // (src, dst): sends in order
  std::map<uint64_t, Reduction> reductions;                    // by sequence number
};

std::mutex g_registry_mu;
std::map<std::string, std::shared_ptr<Shared>> g_registry;
std::atomic<uint64_t> g_next_id{1};
const bool g_trace = std::getenv("EMU_NCCL_TRACE") != nullptr;

}  // namespace

struct ncclComm {
  std::shared_ptr<Shared> shared;
  int rank = 0;
  std::atomic<bool> aborted{false};
  std::atomic<int> async_error{ncclSuccess};
  uint64_t next_reduction = 0;  // the host thread's issue order
};

namespace {

// Sets the communicator's asynchronous error (the first one stays).
void fail(ncclComm* c, ncclResult_t r) {
  int expected = ncclSuccess;
  c->async_error.compare_exchange_strong(expected, r);
}

// Waits (lock held) until `ready` or the communicator cannot complete; returns ready().
template <typename F>
bool wait_until(ncclComm* c, std::unique_lock<std::mutex>& l, F ready) {
  while (!ready()) {
    if (c->aborted || c->shared->broken) return false;
    c->shared->cv.wait_for(l, std::chrono::milliseconds(10));
  }
  return true;
}

ncclResult_t enqueue_op(ncclComm* c, cudaStream_t stream, std::function<void()> op) {
  if (c == nullptr) return ncclInvalidArgument;
  if (c->aborted) return ncclInvalidUsage;
  {
    std::lock_guard<std::mutex> l(c->shared->mu);
    if (c->shared->joined < c->shared->nranks) return ncclInvalidUsage;  // not connected yet
  }
  emu::enqueue(stream, std::move(op));
  return ncclSuccess;
}

}  // namespace

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t) { return ""; }

ncclResult_t ncclGetVersion(int* v) {
  *v = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof(id->internal));
  const uint64_t n = g_next_id++;
  std::memcpy(id->internal, &n, sizeof(n));
  std::memcpy(id->internal + 8, "emu-nccl", 8);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  if (out == nullptr || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  std::shared_ptr<Shared> shared;
  {
    std::lock_guard<std::mutex> l(g_registry_mu);
    auto& slot = g_registry[std::string(id.internal, sizeof(id.internal))];
    if (!slot) {
      slot = std::make_shared<Shared>();
      slot->nranks = nranks;
    }
    shared = slot;
  }
  if (shared->nranks != nranks) return ncclInvalidArgument;
  auto* c = new ncclComm();
  c->shared = shared;
  c->rank = rank;
  {
    std::lock_guard<std::mutex> l(shared->mu);
    ++shared->joined;
    shared->cv.notify_all();
  }
  *out = c;
  if (config != nullptr && config->blocking == 0) return ncclInProgress;
  std::unique_lock<std::mutex> l(shared->mu);
  shared->cv.wait(l, [&] { return shared->joined >= shared->nranks; });
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* state) {
  if (c == nullptr || state == nullptr) return ncclInvalidArgument;
  if (c->async_error != ncclSuccess) {
    *state = static_cast<ncclResult_t>(c->async_error.load());
    return ncclSuccess;
  }
  std::lock_guard<std::mutex> l(c->shared->mu);
  *state = c->shared->joined < c->shared->nranks ? ncclInProgress : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (c == nullptr) return ncclSuccess;
  std::lock_guard<std::mutex> l(c->shared->mu);
  c->aborted = true;
  c->shared->broken = true;
  c->shared->cv.notify_all();
  return ncclSuccess;  // leaked: queued work may still hold it
}

ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t, int peer, ncclComm_t c,
                      cudaStream_t stream) {
  if (c != nullptr && (peer < 0 || peer >= c->shared->nranks)) return ncclInvalidArgument;
  return enqueue_op(c, stream, [c, buf, count, peer] {
    if (count > 0 && !emu::check_device_range(buf, count, "ncclSend buffer")) {
      fail(c, ncclInvalidArgument);
      return;
    }
    Message m{buf, count};
    if (g_trace)
      std::fprintf(stderr, "EMU send start comm %p rank %d -> %d bytes %zu\n",
                   (void*)c->shared.get(), c->rank, peer, count);
    std::unique_lock<std::mutex> l(c->shared->mu);
    auto& queue = c->shared->posted[{c->rank, peer}];
    queue.push_back(&m);
    c->shared->cv.notify_all();
    if (!wait_until(c, l, [&] { return m.taken; })) {
      for (auto it = queue.begin(); it != queue.end(); ++it) {
        if (*it == &m) {
          queue.erase(it);
          break;
        }
      }
      if (!c->aborted) fail(c, ncclRemoteError);
    }
  });
}

ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t, int peer, ncclComm_t c,
                      cudaStream_t stream) {
  if (c != nullptr && (peer < 0 || peer >= c->shared->nranks)) return ncclInvalidArgument;
  return enqueue_op(c, stream, [c, buf, count, peer] {
    if (count > 0 && !emu::check_device_range(buf, count, "ncclRecv buffer")) {
      fail(c, ncclInvalidArgument);
      return;
    }
    if (g_trace)
      std::fprintf(stderr, "EMU recv start comm %p rank %d <- %d bytes %zu\n",
                   (void*)c->shared.get(), c->rank, peer, count);
    std::unique_lock<std::mutex> l(c->shared->mu);
    auto& queue = c->shared->posted[{peer, c->rank}];
    if (!wait_until(c, l, [&] { return !queue.empty(); })) {
      if (!c->aborted) fail(c, ncclRemoteError);
      return;
    }
    Message* m = queue.front();
    queue.pop_front();
    if (m->bytes != count) {
      std::fprintf(stderr, "EMU NCCL: rank %d receives %zu bytes from rank %d, which sent %zu\n",
                   c->rank, count, peer, m->bytes);
      fail(c, ncclInvalidUsage);
    } else if (count > 0) {
      std::memcpy(buf, m->data, count);
    }
    m->taken = true;
    if (g_trace)
      std::fprintf(stderr, "EMU recv done comm %p rank %d <- %d\n", (void*)c->shared.get(), c->rank,
                   peer);
    c->shared->cv.notify_all();
  });
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t, ncclComm_t c, cudaStream_t stream) {
  if (type != ncclFloat || send != recv) return ncclInvalidArgument;  // what the backend uses
  if (c == nullptr) return ncclInvalidArgument;
  const uint64_t seq = c->next_reduction++;
  auto* data = static_cast<float*>(recv);
  return enqueue_op(c, stream, [c, data, count, seq] {
    if (count > 0 && !emu::check_device_range(data, count * 4, "ncclAllReduce buffer")) {
      fail(c, ncclInvalidArgument);
      return;
    }
    Shared& s = *c->shared;
    std::unique_lock<std::mutex> l(s.mu);
    Reduction& r = s.reductions[seq];
    if (r.buffers.empty()) r.buffers.assign(s.nranks, nullptr);
    r.buffers[c->rank] = data;
    r.count = count;
    if (++r.arrived == s.nranks) {
      // In rank order, in double, as the in-process data plane sums.
      std::vector<double> sum(count, 0.0);
      for (float* b : r.buffers) {
        for (size_t i = 0; i < count; ++i) sum[i] += b[i];
      }
      r.sum.assign(sum.begin(), sum.end());
      r.summed = true;
      s.cv.notify_all();
    }
    if (!wait_until(c, l, [&] { return r.summed; })) {
      if (!c->aborted) fail(c, ncclRemoteError);
      return;
    }
    std::memcpy(data, r.sum.data(), count * 4);
    if (++r.collected == s.nranks) s.reductions.erase(seq);
  });
}
