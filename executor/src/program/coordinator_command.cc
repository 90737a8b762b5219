// graphpipe-executor coordinator: only the control plane of a job (run_coordinator in run.cc).
#include "commands.h"
#include "control/coordinator.h"
#include "gp/common/cli.h"
#include "job/run.h"
#include "shared_flags.h"

namespace gp::exec::daemon {
namespace {

class CoordinatorCommand final : public Command {
 public:
  explicit CoordinatorCommand(CLI::App& app)
      : Command(app.add_subcommand("coordinator", "Run only the coordinator (control plane)")) {
    cmd_->add_option("--plan", o_.plan, "plan file")->required();
    // Bounded before the coordinator allocates its per-rank state; it checks the plan's too.
    cmd_->add_option("--world-size", o_.world_size, "number of ranks (the plan's)")
        ->required()
        ->check(CLI::Range(1, kMaxWorldSize));
    cmd_->add_option("--listen", o_.listen, "HOST:PORT to listen on")->capture_default_str();
    cmd_->add_option("--coordinator-file", o_.coordinator_file, "write the bound address here");
    add_token_options(cmd_, token_, /*serves=*/true,
                      "Every RPC must carry it; without one the coordinator refuses to start "
                      "unless --insecure.");
    cmd_->add_option("--timeout", o_.timeout_s, "heartbeat timeout in seconds")
        ->capture_default_str()
        ->check(CLI::Range(1, 86400));
    add_tls_options(cmd_, o_.tls,
                    "Serves TLS with --tls-cert/--tls-key; with --tls-ca only to ranks whose "
                    "certificate chains to it");
  }

  int run() override {
    auto token = resolve_token(token_);
    if (!token.ok()) return gp::cli::report("graphpipe-executor", token.status());
    o_.auth_token = *token;
    if (auto st = require_token("coordinator", o_.listen, o_.auth_token, token_.insecure);
        !st.ok()) {
      return gp::cli::report("graphpipe-executor", st);
    }
    return gp::cli::report("graphpipe-executor", run_coordinator(o_));
  }

 private:
  CoordinatorRunOptions o_;
  TokenFlags token_;
};

}  // namespace

std::unique_ptr<Command> add_coordinator_command(CLI::App& app) {
  return std::make_unique<CoordinatorCommand>(app);
}

}  // namespace gp::exec::daemon
