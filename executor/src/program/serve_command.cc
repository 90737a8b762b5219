// graphpipe-executor serve: the node daemon (run_serve in node_daemon.cc); its flags.
#include "commands.h"
#include "gp/common/cli.h"
#include "node/node_daemon.h"
#include "shared_flags.h"

namespace gp::exec::daemon {
namespace {

class ServeCommand final : public Command {
 public:
  explicit ServeCommand(CLI::App& app)
      : Command(app.add_subcommand(
            "serve",
            "Run the node daemon: start submitted plans' ranks on this node's devices, report "
            "their state and output, stop them (run it per node, e.g. under systemd)")) {
    cmd_->add_option("--listen", o_.listen, "HOST:PORT to listen on (port 0: any free)")
        ->capture_default_str();
    cmd_->add_option("--devices", o_.devices, "devices of this node (one rank each)")
        ->capture_default_str();
    cmd_->add_option("--accelerator", o_.accelerator,
                     "what the devices are: cpu (ranks share the host's cores) or cuda (the rank "
                     "given device d trains on cuda:d)")
        ->capture_default_str()
        ->check(CLI::IsMember({"cpu", "cuda"}));
    cmd_->add_option("--bind", o_.bind_host,
                     "address the ranks' data plane and coordinator use (default: --listen's "
                     "host)");
    cmd_->add_option("--work-dir", o_.work_dir, "job directories: plans and rank logs");
    cmd_->add_option("--output-root", o_.output_root,
                     "jobs' paths (--metrics-out, --trace, --checkpoint-dir, --resume, "
                     "--store-dir) must resolve inside it, symlinks followed (default: "
                     "--work-dir)");
    add_token_options(cmd_, token_, /*serves=*/true,
                      "Clients must present it; the daemon hands it to the ranks it starts in "
                      "their environment.");
    add_tls_options(cmd_, o_.tls,
                    "Needs all three: serves mutual TLS (submit must present a certificate of "
                    "--tls-ca) and passes the three paths to the ranks it starts, whose "
                    "coordinator and connections use them");
  }

  int run() override {
    auto token = resolve_token(token_);
    if (!token.ok()) return gp::cli::report("graphpipe-executor", token.status());
    o_.auth_token = *token;
    o_.insecure = token_.insecure;
    return gp::cli::report("graphpipe-executor", run_serve(o_));
  }

 private:
  ServeOptions o_;
  TokenFlags token_;
};

}  // namespace

std::unique_ptr<Command> add_serve_command(CLI::App& app) {
  return std::make_unique<ServeCommand>(app);
}

}  // namespace gp::exec::daemon
