// Graceful stops of a rank: SIGTERM/SIGINT and the death of the process that started it.
#pragma once

#include <string>

#include "gp/common/status.h"

namespace gp::exec::daemon {

// Whose beacon a rank watches: the launcher's, or the node daemon's that started it.
enum class BeaconOwner { kLauncher, kDaemon };

// Installs the SIGTERM/SIGINT handlers and the parent watchdog, and, when `beacon` is given,
// the watchdog on that file (see stop_signals.cc).
Status install_stop_signals(const std::string& beacon = "", int orphan_timeout_s = 0,
                            BeaconOwner owner = BeaconOwner::kLauncher);
// Until every rank has registered, a stop has nothing to agree on or save, and the waits for the
// coordinator and the other ranks would hold it for their whole timeout: while `at_once` is set,
// SIGTERM/SIGINT end the rank at once with 128 + the signal, saying so. Set from
// install_stop_signals until the rank's registration returns (then the coordinator can have
// every rank stop together, and a rank gone alone would be a failure to the others).
void set_stop_exits_at_once(bool at_once);
// The first stop signal received, 0 while none.
int stop_signal();
// "SIGTERM", "SIGINT" or "a signal".
const char* signal_name(int sig);
// Why this rank stops on `sig` (its first stop signal): the cause when one of its watchdogs
// raised it ("the launcher is gone: ..."), else signal_name(sig).
const char* stop_reason(int sig);

}  // namespace gp::exec::daemon
