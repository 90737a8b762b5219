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
    cmd_->add_option("--auth-token", o_.auth_token, "shared secret (or $GP_AUTH_TOKEN)");
    cmd_->add_option("--timeout", o_.timeout_s, "heartbeat timeout in seconds")
        ->capture_default_str()
        ->check(CLI::Range(1, 86400));
    add_tls_options(cmd_, o_.tls,
                    "Serves TLS with --tls-cert/--tls-key; with --tls-ca only to ranks whose "
                    "certificate chains to it");
  }

  int run() override { return gp::cli::report("graphpipe-executor", run_coordinator(o_)); }

 private:
  CoordinatorRunOptions o_;
};

}  // namespace

std::unique_ptr<Command> add_coordinator_command(CLI::App& app) {
  return std::make_unique<CoordinatorCommand>(app);
}

}  // namespace gp::exec::daemon
