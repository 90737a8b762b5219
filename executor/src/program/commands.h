// The subcommands of graphpipe-executor, one file each: add_<name>_command registers the
// subcommand and its flags on the program's app, and the Command it returns carries the
// subcommand out once the command line has chosen it.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace gp::exec::daemon {

class Command {
 public:
  virtual ~Command() = default;
  // Whether the command line chose this subcommand.
  bool parsed() const { return cmd_->parsed(); }
  // Carries the subcommand out (after parsing, logging set up); the process's exit code.
  virtual int run() = 0;

 protected:
  explicit Command(CLI::App* cmd) : cmd_(cmd) {}
  CLI::App* const cmd_;
};

// In the order `graphpipe-executor --help` lists them.
std::unique_ptr<Command> add_reference_command(CLI::App& app);
std::unique_ptr<Command> add_export_command(CLI::App& app);
std::unique_ptr<Command> add_eval_command(CLI::App& app);
std::unique_ptr<Command> add_local_command(CLI::App& app);
std::unique_ptr<Command> add_run_command(CLI::App& app);
std::unique_ptr<Command> add_coordinator_command(CLI::App& app);
std::unique_ptr<Command> add_serve_command(CLI::App& app);
std::unique_ptr<Command> add_submit_command(CLI::App& app);
std::unique_ptr<Command> add_status_command(CLI::App& app);
std::unique_ptr<Command> add_launcher_command(CLI::App& app);

}  // namespace gp::exec::daemon
