// graphpipe-plan: inspect models and (in later versions) search graph-pipeline plans.
#include <CLI/CLI.hpp>

#include "commands.h"
#include "gp/common/cli.h"
#include "gp/common/logging.h"
#include "gp/common/version.h"

int main(int argc, char** argv) {
  using namespace gp::plan_cli;
  CLI::App app{
      "graphpipe-plan: plan graph-pipeline-parallel training.\n"
      "Models come from the built-in zoo (--model zoo:mmt) or a file (.pbtxt, .json, .pb)."};
  app.set_version_flag("--version", std::string("graphpipe-plan ") + GP_VERSION_STRING);
  std::string log_level;
  app.add_option("--log-level", log_level,
                 "trace, debug, info, warn, error or off (default info, or $GP_LOG_LEVEL)");
  app.require_subcommand(1);

  auto* zoo = app.add_subcommand("zoo", "List or export the built-in models");
  zoo->require_subcommand(1);
  zoo->add_subcommand("list", "List zoo models with their parameters and defaults")
      ->callback([] {});
  ZooExportOptions export_opts;
  auto* zoo_export = zoo->add_subcommand("export", "Write a zoo model to a file");
  zoo_export->add_option("name", export_opts.name, "Zoo spec, e.g. mmt or mmt?branches=2")
      ->required();
  zoo_export->add_option("--out", export_opts.out, "Output file: .pbtxt, .json or .pb")
      ->required();

  ModelInfoOptions info_opts;
  auto* info = app.add_subcommand(
      "model-info", "Summarise a model: operators, parameters, FLOPs, activations, branches");
  info->add_option("--model", info_opts.model, "zoo:NAME[?k=v&...] or a model file")->required();
  info->add_flag("--json", info_opts.json, "Print one JSON object instead of a table");

  app.add_subcommand("ops", "List the operator catalogue with each op's attributes");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? gp::cli::kExitOk : gp::cli::kExitBadInput;
  }
  if (auto st = gp::log::init("graphpipe-plan", log_level); !st.ok()) {
    return gp::cli::report("graphpipe-plan", st);
  }

  gp::Status status;
  if (zoo->got_subcommand("list")) {
    status = run_zoo_list();
  } else if (zoo->got_subcommand("export")) {
    status = run_zoo_export(export_opts);
  } else if (info->parsed()) {
    status = run_model_info(info_opts);
  } else if (app.got_subcommand("ops")) {
    status = run_ops_list();
  }
  return gp::cli::report("graphpipe-plan", status);
}
