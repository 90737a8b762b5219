// The NCCL data plane (CUDA builds): device memory moves between GPUs without the host.
//
// Communicators follow the plan's NcclLayout (one two-rank channel per direction of every pair
// that exchanges messages, one communicator per replicated stage). Rank 0 makes their unique ids
// and hands them to the others through the coordinator at registration. Set-up is non-blocking
// and bounded by the timeout; afterwards a watchdog thread aborts every communicator when a
// transfer makes no progress for the timeout, when NCCL reports an error, or on abort(), so a
// dead peer fails the iteration (naming the channel and the peer) instead of hanging the rank.
//
// Processes should set NCCL_RUNTIME_CONNECT=0 before starting threads (graphpipe-executor does), so
// that collectives connect at set-up too rather than inside the step loop.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gp/common/status.h"
#include "gp/exec/communicator.h"
#include "gp/exec/device.h"
#include "gp/exec/nccl_layout.h"

namespace gp::exec {

struct NcclOptions {
  const Device* device = nullptr;  // a CUDA device (find_device("cuda:N"))
  int rank = 0;
  NcclLayout layout;
  std::vector<std::string> unique_ids;  // layout.communicators() of them, from rank 0
  std::chrono::milliseconds timeout{60000};
  // Polled during set-up: a non-empty reason (the job was aborted) ends it with ABORTED.
  std::function<std::string()> abort_reason;
};

// The version of the NCCL library in use, e.g. "2.28.3"; Unimplemented without CUDA.
Result<std::string> nccl_version();

// `count` NCCL unique ids (128 bytes each). They name a rendezvous served by this process, which
// must therefore live until every rank has set up its communicators.
Result<std::vector<std::string>> make_nccl_unique_ids(int count);

// This rank's communicators of options.layout, connected. DeadlineExceeded naming the channels
// still connecting when the timeout passes; InvalidArgument naming the field for bad options.
Result<std::unique_ptr<Communicator>> make_nccl_communicator(const NcclOptions& options);

}  // namespace gp::exec
