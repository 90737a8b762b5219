#include "emu_streams.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

struct CUevent_st {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;
  // Recorded on a synchronous stream with waits pending: it completes when they do.
  std::vector<std::pair<CUevent_st*, uint64_t>> deps;
};

struct CUstream_st {
  enum Kind { kUnknown, kSync, kWorker };
  int device = 0;
  unsigned flags = 0;
  Kind kind = kUnknown;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool busy = false, stop = false;
  std::thread worker;
};

namespace emu {
namespace {

using Dep = std::pair<CUevent_st*, uint64_t>;
thread_local std::vector<Dep> t_waits;  // of the thread's synchronous stream
std::mutex g_kind_mu;

// An event's state as of now: its latest record and what that record waits for.
std::vector<Dep> snapshot(CUevent_st* e) {
  std::lock_guard<std::mutex> l(e->mu);
  std::vector<Dep> deps = e->deps;
  deps.emplace_back(e, e->recorded);
  return deps;
}

bool done(const Dep& d) {
  std::lock_guard<std::mutex> l(d.first->mu);
  return d.first->completed >= d.second;
}

void wait_for(const Dep& d) {
  std::unique_lock<std::mutex> l(d.first->mu);
  d.first->cv.wait(l, [&] { return d.first->completed >= d.second; });
}

CUstream_st::Kind kind_of(cudaStream_t s, CUstream_st::Kind if_unknown) {
  std::lock_guard<std::mutex> l(g_kind_mu);
  if (s->kind == CUstream_st::kUnknown) s->kind = if_unknown;
  return s->kind;
}

void run_worker(CUstream_st* s) {
  std::unique_lock<std::mutex> l(s->mu);
  while (true) {
    s->cv.wait(l, [&] { return s->stop || !s->queue.empty(); });
    if (s->queue.empty()) return;  // stopping and drained
    auto work = std::move(s->queue.front());
    s->queue.pop_front();
    s->busy = true;
    l.unlock();
    work();
    l.lock();
    s->busy = false;
    s->cv.notify_all();
  }
}

}  // namespace

void before_sync_op(cudaStream_t stream) {
  if (stream != nullptr) kind_of(stream, CUstream_st::kSync);
  for (const Dep& d : t_waits) wait_for(d);
  t_waits.clear();
}

void enqueue(cudaStream_t s, std::function<void()> work) {
  if (kind_of(s, CUstream_st::kWorker) != CUstream_st::kWorker) {
    before_sync_op(s);
    work();
    return;
  }
  std::lock_guard<std::mutex> l(s->mu);
  if (!s->worker.joinable()) s->worker = std::thread(run_worker, s);
  s->queue.push_back(std::move(work));
  s->cv.notify_all();
}

}  // namespace emu

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  if (s == nullptr) return cudaErrorInvalidValue;
  *s = new CUstream_st();
  (*s)->device = emu::current_device();
  (*s)->flags = flags;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (s == nullptr || emu::kind_of(s, CUstream_st::kSync) == CUstream_st::kSync) {
    emu::before_sync_op(s);
    return cudaSuccess;
  }
  std::unique_lock<std::mutex> l(s->mu);
  s->cv.wait(l, [&] { return s->queue.empty() && !s->busy; });
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  {
    std::lock_guard<std::mutex> l(s->mu);
    s->stop = true;
    s->cv.notify_all();
  }
  if (s->worker.joinable()) s->worker.join();  // its work ends (done or aborted)
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  if (s == nullptr || e == nullptr) return cudaErrorInvalidResourceHandle;
  std::vector<emu::Dep> deps = emu::snapshot(e);
  if (emu::kind_of(s, CUstream_st::kWorker) == CUstream_st::kSync) {
    emu::t_waits.insert(emu::t_waits.end(), deps.begin(), deps.end());
    return cudaSuccess;
  }
  emu::enqueue(s, [deps] {
    for (const emu::Dep& d : deps) emu::wait_for(d);
  });
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  if (e == nullptr) return cudaErrorInvalidValue;
  *e = new CUevent_st();
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (e == nullptr || s == nullptr) return cudaErrorInvalidResourceHandle;
  if (emu::kind_of(s, CUstream_st::kWorker) == CUstream_st::kSync) {
    std::lock_guard<std::mutex> l(e->mu);
    e->recorded = e->completed = e->recorded + 1;
    e->deps = emu::t_waits;
    e->cv.notify_all();
    return cudaSuccess;
  }
  uint64_t gen;
  {
    std::lock_guard<std::mutex> l(e->mu);
    gen = ++e->recorded;
    e->deps.clear();
  }
  emu::enqueue(s, [e, gen] {
    std::lock_guard<std::mutex> l(e->mu);
    if (e->completed < gen) e->completed = gen;
    e->cv.notify_all();
  });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (e == nullptr) return cudaErrorInvalidResourceHandle;
  for (const emu::Dep& d : emu::snapshot(e)) {
    if (!emu::done(d)) return cudaErrorNotReady;
  }
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
