// `graphpipe-executor launcher ...`: the decisions of scripts/graphpipe-launch (gp/exec/launch.h)
// for the script to act on. Each prints "KEY VALUE" lines on stdout, VALUE running to the end of
// the line, so that the script reads them with `read -r key value`.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "control/tls.h"
#include "gp/common/status.h"
#include "launch/supervisor.h"

namespace gp::exec::daemon {

class LauncherCommands final : public Command {
 public:
  // Adds `launcher` and its subcommands to `app`.
  explicit LauncherCommands(CLI::App& app);
  // Carries out the subcommand that was parsed; its errors are the launcher's.
  int run() override;

 private:
  // Each launcher subcommand and its flags.
  void add_hosts();
  void add_place();
  void add_verdict();
  void add_blame();
  void add_clean();
  void add_next();
  void add_tls();
  void add_job_tls();
  void add_resume();
  void add_supervise();

  // The decision of the subcommand that was parsed.
  Status decide() const;
  Status hosts() const;
  Status place() const;
  Status verdict() const;
  Status blame() const;
  Status clean() const;
  Status next() const;
  Status tls() const;
  Status job_tls() const;
  Status resume() const;
  Status supervise() const;

  CLI::App *hosts_ = nullptr, *place_ = nullptr, *verdict_ = nullptr, *blame_ = nullptr,
           *clean_ = nullptr, *next_ = nullptr, *tls_ = nullptr, *resume_ = nullptr,
           *job_tls_ = nullptr, *supervise_ = nullptr;
  TlsOptions tls_options_;
  std::string job_tls_token_file_, job_id_, job_tls_dir_;
  std::vector<std::string> job_tls_names_;
  std::string plan_, hostfile_, hostfile_name_, device_ = "cpu", cuda_visible_devices_,
                                                verdict_file_;
  std::string on_failure_ = "stop", checkpoint_dir_, store_dir_;
  int nprocs_ = 0, stop_signal_ = 0, attempt_ = 0, max_restarts_ = 3, exit_status_ = 0;
  int failed_rank_ = -1;
  bool slurm_ = false, if_present_ = false;
  std::vector<int> exit_statuses_, stopped_, not_started_;
  launch::SuperviseOptions supervise_options_;
  std::string commands_file_, result_file_;
};

}  // namespace gp::exec::daemon
