// Streams and events of the emulated runtime. Kernels, copies and cuBLAS run on the calling thread
// at once, so the streams they use are "synchronous". A stream that first sees an event wait, an
// event record or an NCCL operation instead gets a worker thread that runs its work in order,
// asynchronously: this is how the NCCL communicator's streams overlap with compute.
//
// A synchronous stream told to wait for an event (cudaStreamWaitEvent) makes the calling thread's
// next synchronous operation wait for it, as the GPU would before the next kernel; an event
// recorded on a synchronous stream completes when those waits do.
#pragma once

#include <functional>

#include "cuda_runtime_api.h"

namespace emu {
int current_device();
// Queues `work` on a worker stream (making `stream` one). `work` must return when the operation
// is done or can no longer complete (an aborted NCCL communicator).
void enqueue(cudaStream_t stream, std::function<void()> work);
}  // namespace emu
