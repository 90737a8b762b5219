#include "cuda/nccl_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cuda/cuda_context.h"
#include "cuda/cuda_device.h"

namespace gp::exec::cuda {
namespace {

using std::chrono::milliseconds;

std::string cuda_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

// Operations of a communicator that may be in flight at once; more wait for the oldest. Channels
// carry at most a few messages per micro-batch, and the runner waits for all at iteration end.
constexpr size_t kMinRing = 8;

}  // namespace

Result<std::string> nccl_version_text() {
  int v = 0;
  if (ncclResult_t r = ncclGetVersion(&v); r != ncclSuccess) {
    return unavailable(std::string("NCCL: ncclGetVersion failed: ") + ncclGetErrorString(r));
  }
  // 2.9 and later: major * 10000 + minor * 100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

Result<std::vector<std::string>> make_unique_ids(int count) {
  if (count < 0) return invalid_argument("NCCL unique ids: count = " + std::to_string(count));
  if (const char* fixed = std::getenv("NCCL_COMM_ID"); fixed != nullptr && count > 1) {
    return failed_precondition(std::string("NCCL_COMM_ID is set (") + fixed +
                               "): every communicator would meet at that one address; unset it "
                               "(GraphPipe hands out ids through its coordinator)");
  }
  std::vector<std::string> ids;
  for (int k = 0; k < count; ++k) {
    ncclUniqueId id;
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return unavailable(std::string("NCCL: cannot make a unique id (ncclGetUniqueId): ") +
                         ncclGetErrorString(r) + "; " + ncclGetLastError(nullptr));
    }
    ids.emplace_back(id.internal, sizeof(id.internal));
  }
  return ids;
}

Result<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclOptions& options) {
  return NcclCommunicator::create(options);
}

Result<std::unique_ptr<Communicator>> NcclCommunicator::create(const NcclOptions& o) {
  if (o.device == nullptr) return invalid_argument("NcclOptions.device: no device given");
  const CudaContext* ctx = context_of(*o.device);
  if (ctx == nullptr) {
    return invalid_argument("--data-plane nccl needs a CUDA device, but the rank runs on '" +
                            std::string(o.device->name()) + "' (give --device cuda:N)");
  }
  if (o.timeout.count() <= 0) {
    return invalid_argument("NcclOptions.timeout = " + std::to_string(o.timeout.count()) +
                            " ms, must be > 0");
  }
  const NcclLayout& layout = o.layout;
  if (static_cast<int>(o.unique_ids.size()) != layout.communicators()) {
    return failed_precondition(
        "NCCL: rank 0 handed out " + std::to_string(o.unique_ids.size()) +
        " unique ids, but this plan needs " + std::to_string(layout.communicators()) +
        " communicators (does every rank run the same plan with --data-plane nccl?)");
  }
  for (size_t k = 0; k < o.unique_ids.size(); ++k) {
    if (o.unique_ids[k].size() != NCCL_UNIQUE_ID_BYTES) {
      return invalid_argument("nccl_unique_ids[" + std::to_string(k) + "] has " +
                              std::to_string(o.unique_ids[k].size()) + " bytes, expected " +
                              std::to_string(NCCL_UNIQUE_ID_BYTES));
    }
  }
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->ctx_ = ctx;
  c->rank_ = o.rank;
  c->timeout_ = o.timeout;
  c->abort_reason_ = o.abort_reason;
  int world = o.rank + 1;
  for (const auto& ch : layout.channels) world = std::max({world, ch.src + 1, ch.dst + 1});
  c->send_comm_.assign(world, -1);
  c->recv_comm_.assign(world, -1);
  for (int k = 0; k < layout.communicators(); ++k) {
    Comm comm;
    comm.name = layout.describe(k);
    comm.unique_id = o.unique_ids[k];
    size_t ring = kMinRing;
    if (k < static_cast<int>(layout.channels.size())) {
      const NcclChannel& ch = layout.channels[k];
      if (ch.src != o.rank && ch.dst != o.rank) continue;
      comm.ranks = {ch.src, ch.dst};
      comm.rank_in_comm = ch.src == o.rank ? 0 : 1;
      ring = std::max(ring, static_cast<size_t>(ch.messages));
      comm.role = ch.src == o.rank ? Comm::kSender : Comm::kReceiver;
      if (ch.src == o.rank) {
        c->send_comm_[ch.dst] = static_cast<int>(c->comms_.size());
        comm.pending = "a message to rank " + std::to_string(ch.dst) + " on " + comm.name +
                       " has not been taken";
      } else {
        c->recv_comm_[ch.src] = static_cast<int>(c->comms_.size());
        comm.pending = "no message from rank " + std::to_string(ch.src) + " on " + comm.name;
      }
    } else {
      const auto& group = layout.groups[k - layout.channels.size()];
      auto it = std::find(group.begin(), group.end(), o.rank);
      if (it == group.end()) continue;
      comm.ranks = group;
      comm.role = Comm::kReplicaGroup;
      comm.rank_in_comm = static_cast<int>(it - group.begin());
      comm.pending =
          "the gradient all-reduce of ranks {" + rank_list(group) + "} has not completed";
    }
    comm.done.assign(ring, nullptr);
    comm.started.assign(ring, nullptr);
    c->comms_.push_back(std::move(comm));
  }
  GP_RETURN_IF_ERROR(c->connect());
  c->watchdog_ = std::thread([p = c.get()] { p->watch(); });
  return std::unique_ptr<Communicator>(std::move(c));
}

Status NcclCommunicator::connect() {
  const std::string where = "rank " + std::to_string(rank_) + ": NCCL set-up: ";
  cudaSetDevice(ctx_->device_index);
  auto cuda_ok = [&](cudaError_t e, const char* what) {
    if (e == cudaSuccess) return ok_status();
    cudaGetLastError();
    return unavailable(where + what + ": " + cuda_text(e));
  };
  GP_RETURN_IF_ERROR(
      cuda_ok(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate"));
  for (Comm& c : comms_) {
    GP_RETURN_IF_ERROR(
        cuda_ok(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), "cudaStreamCreate"));
    for (auto* ring : {&c.done, &c.started}) {
      for (cudaEvent_t& e : *ring) {
        GP_RETURN_IF_ERROR(
            cuda_ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
      }
    }
  }
  // Non-blocking: the calls return at once and the connections are polled below, so that a peer
  // that never joins costs the timeout, not a hang. In one group, so that the order in which
  // ranks create their communicators does not matter.
  const Clock::time_point deadline = Clock::now() + timeout_;
  std::unique_lock<std::mutex> lock(mu_);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclGroupStart();
  for (Comm& c : comms_) {
    ncclUniqueId id;
    std::memcpy(id.internal, c.unique_id.data(), sizeof(id.internal));
    const ncclResult_t r = ncclCommInitRankConfig(&c.comm, static_cast<int>(c.ranks.size()), id,
                                                  c.rank_in_comm, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      ncclGroupEnd();
      fail_locked(
          unavailable(where + nccl_error(("ncclCommInitRankConfig of " + c.name).c_str(), r)));
      break;
    }
  }
  if (failed_.ok()) {
    if (ncclResult_t r = ncclGroupEnd(); r != ncclSuccess && r != ncclInProgress) {
      fail_locked(unavailable(where + nccl_error("ncclGroupEnd", r)));
    }
  }
  if (failed_.ok()) poll_connecting_locked(where, "connecting", deadline, false);
  // Point-to-point connections are made at a pair's first transfer, which waits for the peer:
  // one byte each way (and one float per all-reduce group) in one group, now, instead of a
  // handshake hidden in the first iteration's sends.
  void* warm = nullptr;
  if (failed_.ok() && !comms_.empty()) {
    if (cudaError_t e = cudaMallocAsync(&warm, 256, ctx_->stream); e != cudaSuccess) {
      cudaGetLastError();
      fail_locked(unavailable(where + "cudaMallocAsync: " + cuda_text(e)));
    } else if (cudaError_t e2 = cudaMemsetAsync(warm, 0, 256, ctx_->stream);
               e2 != cudaSuccess || (e2 = cudaStreamSynchronize(ctx_->stream)) != cudaSuccess) {
      cudaGetLastError();
      fail_locked(unavailable(where + "warm-up buffer: " + cuda_text(e2)));
    }
  }
  if (failed_.ok() && !comms_.empty()) {
    ncclGroupStart();
    for (Comm& c : comms_) {
      ncclResult_t r;
      if (c.role == Comm::kReplicaGroup) {
        r = ncclAllReduce(warm, warm, 1, ncclFloat, ncclSum, c.comm, c.stream);
      } else if (c.rank_in_comm == 0) {
        r = ncclSend(warm, 1, ncclUint8, 1, c.comm, c.stream);
      } else {
        r = ncclRecv(static_cast<char*>(warm) + 128, 1, ncclUint8, 0, c.comm, c.stream);
      }
      if (r != ncclSuccess && r != ncclInProgress) {
        fail_locked(unavailable(where + nccl_error(("first transfer on " + c.name).c_str(), r)));
        break;
      }
    }
    if (ncclResult_t r = ncclGroupEnd(); failed_.ok() && r != ncclSuccess && r != ncclInProgress) {
      fail_locked(unavailable(where + nccl_error("ncclGroupEnd", r)));
    }
    // A non-blocking group launches its kernels once NCCL has taken it (the communicators stop
    // reporting ncclInProgress); only then does an event behind them mean the transfers are done.
    if (failed_.ok()) poll_connecting_locked(where, "connecting peers", deadline, false);
    for (Comm& c : comms_) {
      if (failed_.ok()) cudaEventRecord(c.done[0], c.stream);
    }
    if (failed_.ok()) poll_connecting_locked(where, "making first transfers", deadline, true);
  }
  std::vector<ncclComm_t> handles;
  if (!failed_.ok()) handles = take_handles_locked();
  lock.unlock();
  abort_all(handles);
  for (Comm& c : comms_) {
    if (c.stream != nullptr) cudaStreamSynchronize(c.stream);  // drained after an abort too
  }
  if (warm != nullptr) {
    cudaFreeAsync(warm, ctx_->stream);
    cudaStreamSynchronize(ctx_->stream);
  }
  std::lock_guard<std::mutex> relock(mu_);
  return failed_;
}

void NcclCommunicator::poll_connecting_locked(const std::string& where, const char* phase,
                                              Clock::time_point deadline, bool transfers) {
  while (failed_.ok()) {
    if (abort_reason_) {
      if (std::string why = abort_reason_(); !why.empty()) {
        fail_locked(Status(StatusCode::kAborted, why));
        return;
      }
    }
    std::string pending;
    for (Comm& c : comms_) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(c.comm, &state);
      if (r != ncclSuccess) state = r;
      if (state != ncclSuccess && state != ncclInProgress) {
        fail_locked(unavailable(where + nccl_error(c.name.c_str(), state)));
        return;
      }
      const bool busy =
          state == ncclInProgress || (transfers && cudaEventQuery(c.done[0]) == cudaErrorNotReady);
      if (busy) pending += (pending.empty() ? "" : ", ") + c.name;
    }
    if (pending.empty()) return;
    if (Clock::now() >= deadline) {
      fail_locked(Status(StatusCode::kDeadlineExceeded,
                         where + "not connected after " + std::to_string(timeout_.count()) +
                             " ms; still " + phase + ": " + pending +
                             " (are the peers running with --data-plane nccl, and can they "
                             "reach each other?)"));
      return;
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
}

std::vector<ncclComm_t> NcclCommunicator::take_handles_locked() {
  std::vector<ncclComm_t> handles;
  for (Comm& c : comms_) {
    if (c.comm != nullptr) handles.push_back(c.comm);
    c.comm = nullptr;
  }
  return handles;
}

void NcclCommunicator::abort_all(const std::vector<ncclComm_t>& handles) {
  // Concurrently: aborting one communicator waits for its stream, which may wait (through the
  // compute stream) for a transfer of another that has not been aborted yet.
  std::vector<std::thread> threads;
  for (ncclComm_t h : handles) {
    threads.emplace_back([h, device = ctx_->device_index] {
      cudaSetDevice(device);
      ncclCommAbort(h);
    });
  }
  for (auto& t : threads) t.join();
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  cudaSetDevice(ctx_->device_index);
  // Abort frees the communicators without waiting for peers (ncclCommDestroy may). After a
  // clean run every transfer has completed, and the job's "done" barrier has passed, so no peer
  // still needs them. (No lock: the watchdog has stopped.)
  abort_all(take_handles_locked());
  for (Comm& c : comms_) {
    if (c.stream != nullptr) cudaStreamSynchronize(c.stream);
    for (const auto* ring : {&c.done, &c.started}) {
      for (cudaEvent_t e : *ring) {
        if (e != nullptr) cudaEventDestroy(e);
      }
    }
    if (c.stream != nullptr) cudaStreamDestroy(c.stream);
  }
  if (ready_ != nullptr) cudaEventDestroy(ready_);
}

std::string NcclCommunicator::nccl_error(const char* what, ncclResult_t r) const {
  std::string s = std::string(what) + ": " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') s += std::string(" (") + last + ")";
  return s;
}

ncclResult_t NcclCommunicator::settle_locked(Comm& c) {
  const Clock::time_point deadline = Clock::now() + timeout_;
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress && Clock::now() < deadline) {
    if (ncclResult_t r = ncclCommGetAsyncError(c.comm, &state); r != ncclSuccess) return r;
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return state;
}

template <typename Op>
Status NcclCommunicator::enqueue(Comm& c, const char* what, bool after_compute, bool compute_waits,
                                 Op op) {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t ring = static_cast<int64_t>(c.done.size());
  while (failed_.ok() && c.issued - c.completed >= ring) {
    // A full ring: wait for the oldest operation, timing sends as wait_all does.
    const bool was_draining = draining_;
    draining_ = true;
    poll_locked();
    draining_ = was_draining;
    if (c.issued - c.completed >= ring) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      lock.lock();
    }
  }
  if (!failed_.ok()) return failed_;
  cudaSetDevice(ctx_->device_index);
  if (after_compute) {
    if (cudaError_t e = cudaEventRecord(ready_, ctx_->stream); e != cudaSuccess) {
      fail_locked(internal_error(c.name + ": " + what + ": cudaEventRecord: " + cuda_text(e)));
      return failed_;
    }
    if (cudaError_t e = cudaStreamWaitEvent(c.stream, ready_, 0); e != cudaSuccess) {
      fail_locked(internal_error(c.name + ": " + what + ": cudaStreamWaitEvent: " + cuda_text(e)));
      return failed_;
    }
  }
  const size_t slot = static_cast<size_t>(c.issued % ring);
  cudaError_t e = cudaSuccess;
  if (c.role == Comm::kReplicaGroup) e = cudaEventRecord(c.started[slot], c.stream);
  if (e != cudaSuccess) {
    fail_locked(internal_error(c.name + ": " + what + ": " + cuda_text(e)));
    return failed_;
  }
  ncclResult_t r = op(c.comm, c.stream);
  if (r == ncclInProgress) r = settle_locked(c);
  if (r != ncclSuccess) {
    fail_locked(internal_error("rank " + std::to_string(rank_) + ": " + c.name + ": " +
                               nccl_error(what, r)));
    return failed_;
  }
  e = cudaEventRecord(c.done[slot], c.stream);
  // Where compute needs a received message, its stall clock starts.
  if (e == cudaSuccess && c.role == Comm::kReceiver) {
    e = cudaEventRecord(c.started[slot], ctx_->stream);
  }
  if (e == cudaSuccess && compute_waits) e = cudaStreamWaitEvent(ctx_->stream, c.done[slot], 0);
  if (e != cudaSuccess) {
    fail_locked(internal_error(c.name + ": " + what + ": " + cuda_text(e)));
    return failed_;
  }
  ++c.issued;
  return ok_status();
}

Status NcclCommunicator::send(int peer, uint64_t, std::span<const std::byte> data) {
  const int k = peer >= 0 && peer < static_cast<int>(send_comm_.size()) ? send_comm_[peer] : -1;
  if (k < 0) {
    return invalid_argument("rank " + std::to_string(rank_) + " sends to rank " +
                            std::to_string(peer) + ", but the plan has no channel " +
                            std::to_string(rank_) + "->" + std::to_string(peer));
  }
  Comm& c = comms_[k];
  return enqueue(c, "ncclSend", true, false, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclSend(data.data(), data.size(), ncclUint8, 1 - c.rank_in_comm, comm, stream);
  });
}

Status NcclCommunicator::recv(int peer, uint64_t, std::span<std::byte> data) {
  const int k = peer >= 0 && peer < static_cast<int>(recv_comm_.size()) ? recv_comm_[peer] : -1;
  if (k < 0) {
    return invalid_argument("rank " + std::to_string(rank_) + " receives from rank " +
                            std::to_string(peer) + ", but the plan has no channel " +
                            std::to_string(peer) + "->" + std::to_string(rank_));
  }
  Comm& c = comms_[k];
  // A receive's staging region is free since the last iteration's wait_all: it need not wait for
  // compute, and posted early it lets the sender's transfer finish early.
  return enqueue(c, "ncclRecv", false, true, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclRecv(data.data(), data.size(), ncclUint8, 1 - c.rank_in_comm, comm, stream);
  });
}

Status NcclCommunicator::allreduce_sum(std::span<const int> group, std::span<float> data) {
  for (Comm& c : comms_) {
    if (c.role != Comm::kReplicaGroup ||
        !std::equal(c.ranks.begin(), c.ranks.end(), group.begin(), group.end())) {
      continue;
    }
    return enqueue(c, "ncclAllReduce", true, true, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(data.data(), data.data(), data.size(), ncclFloat, ncclSum, comm, stream);
    });
  }
  std::vector<int> ranks(group.begin(), group.end());
  return invalid_argument("rank " + std::to_string(rank_) + ": no NCCL communicator for the " +
                          "all-reduce over ranks {" + rank_list(ranks) + "}");
}

void NcclCommunicator::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_locked(Status(StatusCode::kAborted, reason));
}

Status NcclCommunicator::wait_all() {
  std::unique_lock<std::mutex> lock(mu_);
  draining_ = true;
  while (true) {
    if (failed_.ok()) poll_locked();
    if (!failed_.ok()) {
      draining_ = false;
      return failed_;
    }
    const bool idle = std::all_of(comms_.begin(), comms_.end(),
                                  [](const Comm& c) { return c.completed == c.issued; });
    if (idle) {
      draining_ = false;
      return ok_status();
    }
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    lock.lock();
  }
}

void NcclCommunicator::poll_locked() {
  const Clock::time_point now = Clock::now();
  for (Comm& c : comms_) {
    const int64_t ring = static_cast<int64_t>(c.done.size());
    while (c.completed < c.issued) {
      const size_t slot = static_cast<size_t>(c.completed % ring);
      const cudaError_t q = cudaEventQuery(c.done[slot]);
      if (q == cudaSuccess) {
        ++c.completed;
        c.timing = false;
        continue;
      }
      if (q != cudaErrorNotReady) {
        cudaGetLastError();
        fail_locked(
            internal_error("rank " + std::to_string(rank_) + ": " + c.name + ": " + cuda_text(q)));
        return;
      }
      if (!c.timing) {
        c.timing =
            c.role == Comm::kSender ? draining_ : cudaEventQuery(c.started[slot]) == cudaSuccess;
        c.waiting_since = now;
      }
      if (c.timing && now - c.waiting_since > timeout_) {
        fail_locked(Status(StatusCode::kDeadlineExceeded,
                           "rank " + std::to_string(rank_) + ": timed out after " +
                               std::to_string(timeout_.count()) + " ms: " + c.pending +
                               " (a peer is dead, hung or slower than the timeout)"));
        return;
      }
      break;
    }
    ncclResult_t state = ncclSuccess;
    if (c.comm != nullptr && ncclCommGetAsyncError(c.comm, &state) == ncclSuccess &&
        state != ncclSuccess && state != ncclInProgress) {
      fail_locked(internal_error("rank " + std::to_string(rank_) + ": " +
                                 nccl_error(c.name.c_str(), state)));
      return;
    }
  }
}

void NcclCommunicator::fail_locked(Status why) {
  if (!failed_.ok()) return;
  failed_ = std::move(why);
  // The watchdog aborts every communicator (outside the lock); their kernels then return, so the
  // streams (and compute waiting on them) drain. Every later call returns failed_.
  cv_.notify_all();
}

void NcclCommunicator::watch() {
  cudaSetDevice(ctx_->device_index);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, milliseconds(5));
    if (stopping_) break;
    if (failed_.ok()) poll_locked();
    if (!failed_.ok()) {
      std::vector<ncclComm_t> handles = take_handles_locked();
      if (handles.empty()) continue;
      lock.unlock();
      abort_all(handles);
      lock.lock();
    }
  }
}

}  // namespace gp::exec::cuda
