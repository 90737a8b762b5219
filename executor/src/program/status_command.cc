// graphpipe-executor status: every rank's iteration and instruction, from the coordinator
// (print_status in run.cc).
#include <string>

#include "commands.h"
#include "gp/common/cli.h"
#include "job/run.h"
#include "shared_flags.h"

namespace gp::exec::daemon {
namespace {

class StatusCommand final : public Command {
 public:
  explicit StatusCommand(CLI::App& app)
      : Command(app.add_subcommand("status", "Print every rank's iteration and instruction")) {
    cmd_->add_option("--coordinator", address_, "HOST:PORT")->required();
    cmd_->add_option("--auth-token", token_, "shared secret (or $GP_AUTH_TOKEN)");
    cmd_->add_option("--auth-token-file", token_file_,
                     "read the shared secret from this file (e.g. RUN_DIR/auth-token)");
    add_tls_options(cmd_, tls_,
                    "Connects over TLS: --tls-ca verifies the coordinator, --tls-cert/--tls-key "
                    "identify this client (a coordinator with --tls-ca requires them)");
    cmd_->add_flag("--json", as_json_,
                   "print one JSON object (job, then per rank: state, iteration, samples_per_s, "
                   "loss, liveness)");
  }

  int run() override {
    if (auto st = read_token_file(token_file_, &token_); !st.ok()) {
      return gp::cli::report("graphpipe-executor", st);
    }
    return gp::cli::report("graphpipe-executor", print_status(address_, token_, tls_, as_json_));
  }

 private:
  std::string address_, token_, token_file_;
  gp::exec::TlsOptions tls_;
  bool as_json_ = false;
};

}  // namespace

std::unique_ptr<Command> add_status_command(CLI::App& app) {
  return std::make_unique<StatusCommand>(app);
}

}  // namespace gp::exec::daemon
