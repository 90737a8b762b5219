// graphpipe-executor submit: a plan run on node daemons (run_submit in node_submit.cc); its
// flags.
#include <charconv>
#include <string>

#include "commands.h"
#include "gp/common/cli.h"
#include "node/node_daemon.h"
#include "shared_flags.h"

namespace gp::exec::daemon {
namespace {

class SubmitCommand final : public Command {
 public:
  explicit SubmitCommand(CLI::App& app)
      : Command(app.add_subcommand(
            "submit",
            "Run a plan on node daemons: ranks spread over them in order, output streamed here")) {
    cmd_->add_option("--plan", o_.plan, "plan file")->required();
    cmd_->add_option("--nodes", o_.nodes, "daemons, HOST:PORT,... in node order")
        ->delimiter(',')
        ->required();
    // The bounds of `run`, which the ranks get these as.
    cmd_->add_option("--iterations", o_.iterations, "training iterations")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 30));
    cmd_->add_option("--timeout", o_.timeout_s, "peer and heartbeat timeout, seconds")
        ->capture_default_str()
        ->check(CLI::Range(1, 86400));
    cmd_->add_option("--port", o_.port, "the coordinator's port on the first node")
        ->check(CLI::Range(1, 65535))
        ->capture_default_str();
    cmd_->add_option("--store-dir", o_.store_dir,
                     "Gloo rendezvous directory every node shares, inside every daemon's "
                     "--output-root (default: each daemon's OUTPUT_ROOT/store-<job>, "
                     "so one node only)");
    add_token_options(cmd_, token_, /*serves=*/false, "The daemons' token.");
    add_tls_options(cmd_, o_.tls,
                    "Connects to the daemons over TLS: --tls-ca verifies them, "
                    "--tls-cert/--tls-key identify this client (daemons serving TLS require them)");
    cmd_->add_option("extra", o_.extra, "-- then executor run flags for every rank");
  }

  int run() override {
    auto token = resolve_token(token_);
    if (!token.ok()) return gp::cli::report("graphpipe-executor", token.status());
    o_.auth_token = *token;
    if (auto st = check_extra_checkpoint_flags(); !st.ok()) {
      return gp::cli::report("graphpipe-executor", st);
    }
    auto exit_code = run_submit(o_);
    if (!exit_code.ok()) return gp::cli::report("graphpipe-executor", exit_code.status());
    return *exit_code;
  }

 private:
  // The ranks' checkpoint flags, checked here once rather than by every rank on every node.
  gp::Status check_extra_checkpoint_flags() const {
    int64_t every = 0;
    std::string dir;
    for (size_t i = 0; i < o_.extra.size(); ++i) {
      const std::string& a = o_.extra[i];
      const size_t eq = a.find('=');
      const std::string flag = a.substr(0, eq);
      if (flag != "--checkpoint-every" && flag != "--checkpoint-dir") continue;
      std::string value;
      if (eq != std::string::npos) {
        value = a.substr(eq + 1);
      } else if (i + 1 < o_.extra.size()) {
        value = o_.extra[++i];
      }
      if (flag == "--checkpoint-dir") {
        dir = value;
      } else if (auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), every);
                 ec != std::errc() || end != value.data() + value.size()) {
        return gp::invalid_argument("--checkpoint-every = '" + value + "', expected a number");
      }
    }
    return check_checkpoint_flags(every, dir);
  }

  SubmitOptions o_;
  TokenFlags token_;
};

}  // namespace

std::unique_ptr<Command> add_submit_command(CLI::App& app) {
  return std::make_unique<SubmitCommand>(app);
}

}  // namespace gp::exec::daemon
