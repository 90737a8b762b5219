// graphpipe-plan: inspect models, search graph-pipeline plans, and check plan files.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "gp/common/cli.h"
#include "gp/common/cli_config.h"
#include "gp/common/cli_hints.h"
#include "gp/common/logging.h"
#include "gp/common/version.h"

int main(int argc, char** argv) {
  using namespace gp::plan_cli;
  CLI::App app{
      "graphpipe-plan: plan graph-pipeline-parallel training.\n"
      "Models come from the built-in zoo (--model zoo:mmt) or a file (.pbtxt, .json, .pb).\n"
      "Typical use: graphpipe-plan search --model zoo:mmt --cluster summit-v100 --devices 32 "
      "--batch 256 --out plan.pb"};
  app.set_version_flag("--version", std::string("graphpipe-plan ") + GP_VERSION_STRING);
  app.name("graphpipe-plan");  // usage lines name the program (argv[0] is not parsed)
  gp::cli::add_config_option(app);
  std::string log_level;
  app.add_option("--log-level", log_level,
                 "trace, debug, info, warn, error or off (default info, or $GP_LOG_LEVEL)");
  app.require_subcommand(1);
  app.fallthrough();  // global options (--log-level) may follow the subcommand

  // In the order --help lists them.
  const std::vector<Command> commands = {
      add_zoo_command(app),      add_model_info_command(app), add_ops_command(app),
      add_import_command(app),   add_search_command(app),     add_lower_command(app),
      add_compare_command(app),  add_replan_command(app),     add_adapt_command(app),
      add_simulate_command(app), add_inspect_command(app),    add_verify_command(app),
      add_report_command(app)};

  try {
    auto args = gp::cli::config_first_reversed(argc, argv);
    if (!args.ok()) return gp::cli::report("graphpipe-plan", args.status());
    app.parse(*args);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    if (rc != 0) gp::cli::print_hints("graphpipe-plan", app, app.remaining(true));
    return rc == 0 ? gp::cli::kExitOk : gp::cli::kExitBadInput;
  }
  if (auto st = gp::log::init("graphpipe-plan", log_level); !st.ok()) {
    return gp::cli::report("graphpipe-plan", st);
  }
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);

  gp::Status status;
  for (const Command& command : commands) {
    if (command.cli->parsed()) {
      status = command.run(command_line);
      break;
    }
  }
  return gp::cli::report("graphpipe-plan", status);
}
