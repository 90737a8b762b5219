// graphpipe-executor status: every rank's iteration and instruction, from the coordinator
// (print_status in run.cc).
#include <filesystem>
#include <string>

#include "commands.h"
#include "gp/common/cli.h"
#include "gp/common/file_read.h"
#include "job/run.h"
#include "shared_flags.h"

namespace gp::exec::daemon {
namespace {

// The coordinator's address as the launcher keeps it in its run directory.
gp::Result<std::string> run_dir_coordinator(const std::string& run_dir) {
  const std::string path = run_dir + "/coordinator";
  gp::FileReadOptions small;
  small.max_bytes = 4096;
  auto text = gp::read_regular_file(path, small);
  if (!text.ok()) {
    return gp::not_found("--run-dir " + run_dir + ": no coordinator address (" +
                         text.status().message() + "); is the job still starting?");
  }
  std::string address = *text;
  while (!address.empty() && (address.back() == '\n' || address.back() == ' ')) {
    address.pop_back();
  }
  if (address.empty()) return gp::not_found("--run-dir " + run_dir + ": " + path + " is empty");
  return address;
}

class StatusCommand final : public Command {
 public:
  explicit StatusCommand(CLI::App& app)
      : Command(app.add_subcommand("status", "Print every rank's iteration and instruction")) {
    auto* coordinator = cmd_->add_option("--coordinator", address_, "HOST:PORT");
    cmd_->add_option("--run-dir", run_dir_,
                     "a launcher's log directory (graphpipe-runs/JOB-ID): the coordinator's "
                     "address, the token and the job's own TLS files (tls/, when the launcher "
                     "made them) are read from there")
        ->excludes(coordinator);
    add_token_options(cmd_, token_flags_, /*serves=*/false, "The coordinator's token.");
    add_tls_options(cmd_, tls_,
                    "Connects over TLS: --tls-ca verifies the coordinator, --tls-cert/--tls-key "
                    "identify this client (a coordinator with --tls-ca requires them)");
    cmd_->add_flag("--json", as_json_,
                   "print one JSON object (job, then per rank: state, iteration, samples_per_s, "
                   "loss, liveness)");
  }

  int run() override {
    if (address_.empty() && run_dir_.empty()) {
      return gp::cli::report("graphpipe-executor",
                             gp::invalid_argument("status: give --coordinator or --run-dir"));
    }
    if (!run_dir_.empty()) {
      auto address = run_dir_coordinator(run_dir_);
      if (!address.ok()) return gp::cli::report("graphpipe-executor", address.status());
      address_ = *address;
      if (token_flags_.file.empty()) token_flags_.file = run_dir_ + "/auth-token";
      // The launcher's own CA for a job across hosts: the coordinator requires its certificate.
      std::error_code ec;
      if (!tls_.enabled() && std::filesystem::exists(run_dir_ + "/tls/ca.pem", ec)) {
        tls_ = {run_dir_ + "/tls/cert.pem", run_dir_ + "/tls/key.pem", run_dir_ + "/tls/ca.pem"};
      }
    }
    auto token = resolve_token(token_flags_);
    if (!token.ok()) return gp::cli::report("graphpipe-executor", token.status());
    return gp::cli::report("graphpipe-executor", print_status(address_, *token, tls_, as_json_));
  }

 private:
  std::string address_, run_dir_;
  TokenFlags token_flags_;
  gp::exec::TlsOptions tls_;
  bool as_json_ = false;
};

}  // namespace

std::unique_ptr<Command> add_status_command(CLI::App& app) {
  return std::make_unique<StatusCommand>(app);
}

}  // namespace gp::exec::daemon
