// graphpipe-executor: trains models. This version runs the single-process numerical reference;
// the per-rank daemon that runs a plan's instruction stream is built on the same StageRunner.
// One file per subcommand (commands.h); this builds the app, parses and dispatches.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "gp/common/cli.h"
#include "gp/common/cli_config.h"
#include "gp/common/cli_hints.h"
#include "gp/common/logging.h"
#include "gp/common/version.h"
#include "gp/exec/device.h"
#include "launch_job.h"

// The daemon's documented form has no subcommand: `graphpipe-executor --plan P --rank R ...` is
// `run`, and `--coordinator-only` (with --coordinator HOST:PORT as the listen address) is
// `coordinator`. Rewrites such a command line into the subcommand form.
std::vector<std::string> normalise_arguments(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  static const char* kSubcommands[] = {"run",    "reference", "local",  "coordinator",
                                       "status", "serve",     "submit", "export",
                                       "eval",   "launcher",  "launch"};
  bool has_subcommand = false, has_plan = false, coordinator_only = false;
  for (int i = 1; i < argc; ++i) {
    for (const char* sub : kSubcommands) has_subcommand = has_subcommand || args[i] == sub;
    has_plan = has_plan || args[i] == "--plan" || args[i].rfind("--plan=", 0) == 0;
    coordinator_only = coordinator_only || args[i] == "--coordinator-only";
  }
  if (has_subcommand || !has_plan) return args;
  if (!coordinator_only) {
    args.insert(args.begin() + 1, "run");
    return args;
  }
  std::vector<std::string> out{args[0], "coordinator"};
  for (int i = 1; i < argc; ++i) {
    if (args[i] == "--coordinator-only") continue;
    out.push_back(args[i] == "--coordinator" ? "--listen" : args[i]);
  }
  return out;
}

// Whether `launch` follows global flags only (`graphpipe-executor --log-level warn launch`).
bool launch_after_global_flags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "launch") return true;
    if (a == "--log-level" || a == "--cpu-threads" || a == "--config") {
      ++i;
    } else if (a.rfind("--", 0) != 0) {
      return false;
    }
  }
  return false;
}

int main(int raw_argc, char** raw_argv) {
  // A peer that dies closes its sockets; writing to them must be an error we report (EPIPE),
  // not a signal that kills this rank too.
  std::signal(SIGPIPE, SIG_IGN);
  gp::exec::flush_subnormals();  // before any thread starts: they inherit it
  // Each NCCL communicator has a stream of its own; with fewer hardware queues than streams
  // (CUDA's default is 8), a transfer blocked waiting for its peer can hold back another stream's
  // work that the peer needs. Read when CUDA starts, so set before any CUDA call; a user's own
  // setting stands.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  // NCCL collectives connect when their communicator is set up, not at their first call inside
  // the step loop (set before any thread starts: setenv is not thread-safe).
  setenv("NCCL_RUNTIME_CONNECT", "0", 0);
  // `launch` (scripts/graphpipe-launch) has a command line of its own: graphpipe-launch's.
  if (raw_argc > 1 && std::string(raw_argv[1]) == "launch") {
    return gp::exec::daemon::launch_main(
        std::vector<std::string>(raw_argv + 2, raw_argv + raw_argc), raw_argv[0]);
  }
  if (launch_after_global_flags(raw_argc, raw_argv)) {
    return gp::cli::report("graphpipe-executor",
                           gp::invalid_argument("launch must come first: graphpipe-executor "
                                                "launch [FLAGS] (its --log-level is the ranks')"));
  }
  std::vector<std::string> arguments = normalise_arguments(raw_argc, raw_argv);
  std::vector<char*> argv_storage;
  for (auto& a : arguments) argv_storage.push_back(a.data());
  int argc = static_cast<int>(argv_storage.size());
  char** argv = argv_storage.data();
  CLI::App app{
      "graphpipe-executor: train a model. `reference` trains it in one process without "
      "pipelining: the numerical reference that every plan must reproduce."};
  app.set_version_flag("--version", std::string("graphpipe-executor ") + GP_VERSION_STRING);
  app.name("graphpipe-executor");  // usage lines name the program (argv[0] is not parsed)
  gp::cli::add_config_option(app);
  std::string log_level;
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");
  int cpu_threads = 1;
  app.add_option("--cpu-threads", cpu_threads,
                 "BLAS threads of the CPU kernels per process (1: ranks sharing a host get a "
                 "core each, as graphpipe-profile measures by default)")
      ->capture_default_str();  // bounded by this host's CPUs after parsing
  app.require_subcommand(1);
  app.fallthrough();  // global options (--log-level) may follow the subcommand
  using namespace gp::exec::daemon;
  // In the order --help lists them.
  const std::unique_ptr<Command> commands[] = {
      add_reference_command(app), add_export_command(app), add_eval_command(app),
      add_local_command(app),     add_run_command(app),    add_coordinator_command(app),
      add_serve_command(app),     add_submit_command(app), add_status_command(app),
      add_launcher_command(app)};
  // Listed for --help and completion; `launch` first on the command line is handled above.
  app.add_subcommand(
      "launch",
      "Start every rank of a plan and supervise them, locally, over ssh, under srun or per node "
      "(scripts/graphpipe-launch; `graphpipe-executor launch --help`)");
  try {
    auto args = gp::cli::config_first_reversed(argc, argv);
    if (!args.ok()) return gp::cli::report("graphpipe-executor", args.status());
    app.parse(*args);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    if (rc != 0) gp::cli::print_hints("graphpipe-executor", app, app.remaining(true));
    return rc == 0 ? gp::cli::kExitOk : gp::cli::kExitBadInput;
  }
  if (auto st = gp::log::init("graphpipe-executor", log_level); !st.ok()) {
    return gp::cli::report("graphpipe-executor", st);
  }
  if (auto st = gp::exec::check_cpu_threads("--cpu-threads", cpu_threads); !st.ok()) {
    return gp::cli::report("graphpipe-executor", st);
  }
  gp::exec::set_cpu_threads(cpu_threads);
  if (const auto& blas = gp::exec::use_best_blas_kernels(); blas.changed) {
    gp::log::get("executor")
        ->debug("OpenBLAS loaded its {} kernels for this CPU; using {}", blas.loaded, blas.running);
  }
  // require_subcommand(1): exactly one was parsed.
  for (const auto& command : commands) {
    if (command->parsed()) return command->run();
  }
  return gp::cli::kExitBadInput;
}
