// graphpipe-profile: measure what the planner needs to know about the devices plans run on —
// operator times and memory, communication bandwidth — into a profile database.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "gp/common/cli.h"
#include "gp/common/cli_config.h"
#include "gp/common/cli_hints.h"
#include "gp/common/logging.h"
#include "gp/common/version.h"
#include "gp/exec/device.h"

namespace {

using gp::profile::cli::CommOptions;
using gp::profile::cli::MergeOptions;
using gp::profile::cli::OpsOptions;
using gp::profile::cli::run_comm;
using gp::profile::cli::run_devices;
using gp::profile::cli::run_merge;
using gp::profile::cli::run_ops;
using gp::profile::cli::run_show;

// One function per subcommand: its flags, bound to the options it fills, in --help order.

CLI::App* add_devices_command(CLI::App& app, bool* json) {
  CLI::App* cmd =
      app.add_subcommand("devices", "List the host CPU and the CUDA devices visible here");
  cmd->add_flag("--json", *json, "Print one JSON object");
  return cmd;
}

// `tolerance` is set to the --tolerance option, whose count says whether it was given.
CLI::App* add_ops_command(CLI::App& app, OpsOptions* ops, CLI::Option** tolerance) {
  CLI::App* cmd = app.add_subcommand(
      "ops",
      "Time the forward and backward kernel of every distinct operator of a model at each "
      "micro-batch size, and the bytes kept for backward");
  cmd->add_option("--model", ops->model, "model file (.pbtxt/.json/.pb) or zoo:NAME")->required();
  cmd->add_option("--out", ops->out, "profile database to write (.pb, .pbtxt or .json)")
      ->required();
  cmd->add_option("--device", ops->device, "cpu or cuda:N")->capture_default_str();
  cmd->add_option("--cluster", ops->cluster,
                  "cluster preset or file whose device kind the records are for (default "
                  "for the CPU: cpu-local)");
  cmd->add_option("--device-kind", ops->device_kind,
                  "device kind name to record, overriding --cluster's (default on CUDA: the "
                  "device kind of the cluster preset with this GPU model, e.g. "
                  "H200-SXM-141GB, else the GPU's name, e.g. nvidia-h200)");
  cmd->add_option("--micro-batches", ops->micro_batches, "micro-batch sizes to measure")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--warmup", ops->warmup, "untimed calls before timing")->capture_default_str();
  cmd->add_option("--repetitions", ops->repetitions, "timed calls, at least")
      ->capture_default_str();
  cmd->add_option("--min-time-ms", ops->min_time_ms,
                  "keep timing a kernel until this much time was measured")
      ->capture_default_str();
  cmd->add_option("--cpu-threads", ops->cpu_threads,
                  "BLAS threads; match the executor's (1 per rank by default)")
      ->capture_default_str();
  cmd->add_option("--flush-cache-mib", ops->flush_cache_mib,
                  "MiB streamed through before each timed call so that the kernel starts with "
                  "cold caches, as in training (0: warm; default: 2x the last-level cache, "
                  "64 MiB when unknown). Host caches: not done on CUDA");
  cmd->add_option("--precision", ops->precision,
                  "input precision of the GEMMs (linear, attention, matmul, conv) on CUDA; "
                  "accumulation is fp32. The CPU computes fp32 only")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}))
      ->capture_default_str();
  *tolerance = cmd->add_option(
      "--tolerance", ops->tolerance,
      "largest error accepted against the CPU reference kernels (a device other than the CPU is "
      "checked), relative to each tensor's largest magnitude (default by --precision: fp32 1e-4, "
      "tf32 2e-2, bf16 6e-2)");
  cmd->add_option("--seed", ops->seed, "seed of the synthetic inputs and parameters")
      ->capture_default_str();
  cmd->add_option("--passes", ops->passes,
                  "measure every operator this many times, seconds apart, and keep each one's "
                  "fastest pass: a burst of interference on the host then skews one pass only")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  return cmd;
}

CLI::App* add_comm_command(CLI::App& app, CommOptions* comm) {
  CLI::App* cmd = app.add_subcommand(
      "comm",
      "Measure point-to-point and all-reduce time over a size sweep (ranks as local processes) "
      "and fit latency and bandwidth");
  cmd->add_option("--out", comm->out, "profile database to write")->required();
  cmd->add_option("--device", comm->device, "cpu (host memory, over --data-plane) or cuda:N (NCCL)")
      ->capture_default_str();
  cmd->add_option("--ranks", comm->ranks, "processes taking part (all-reduce group size)")
      ->capture_default_str();
  cmd->add_option("--sizes", comm->sizes, "message sizes, e.g. 4K,64K,1M (default 1K..16M x4)")
      ->delimiter(',');
  cmd->add_option("--kinds", comm->kinds, "p2p, allreduce or both")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--link-class", comm->link_class,
                  "intra (ranks on one node, as here) or inter (record as inter-node)")
      ->capture_default_str();
  cmd->add_option("--warmup", comm->warmup, "untimed transfers per size")->capture_default_str();
  cmd->add_option("--repetitions", comm->repetitions, "timed transfers per size")
      ->capture_default_str();
  cmd->add_option("--timeout-s", comm->timeout_s, "give up on a rank after this long")
      ->capture_default_str();
  cmd->add_option("--data-plane", comm->data_plane,
                  "the transport to measure, as graphpipe-executor run uses it: auto (shared "
                  "memory between ranks of this host) or gloo (TCP)")
      ->check(CLI::IsMember({"auto", "gloo"}))
      ->capture_default_str();
  return cmd;
}

CLI::App* add_merge_command(CLI::App& app, MergeOptions* merge) {
  CLI::App* cmd = app.add_subcommand(
      "merge", "Combine profile databases; a later input's record replaces an earlier one's");
  cmd->add_option("inputs", merge->inputs, "databases, in order")->required();
  cmd->add_option("--out", merge->out, "merged database to write")->required();
  return cmd;
}

CLI::App* add_show_command(CLI::App& app, std::string* path) {
  CLI::App* cmd = app.add_subcommand("show", "Summarise a profile database");
  cmd->add_option("profile", *path, "database to read")->required();
  return cmd;
}

}  // namespace

int main(int argc, char** argv) {
  gp::exec::flush_subnormals();  // as the executor's ranks compute (gp/exec/device.h)
  CLI::App app{
      "graphpipe-profile: measure operators, communication and memory on this machine and write a "
      "profile database for `graphpipe-plan --profile`.\n"
      "  graphpipe-profile ops --model zoo:tiny-mmt --out ops.pb\n"
      "  graphpipe-profile comm --ranks 2 --out comm.pb\n"
      "  graphpipe-profile merge ops.pb comm.pb --out profile.pb"};
  app.set_version_flag("--version", std::string("graphpipe-profile ") + GP_VERSION_STRING);
  app.name("graphpipe-profile");  // usage lines name the program (argv[0] is not parsed)
  gp::cli::add_config_option(app);
  std::string log_level;
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");
  app.require_subcommand(1);
  app.fallthrough();  // global options (--log-level) may follow the subcommand

  bool json = false;
  CLI::App* devices = add_devices_command(app, &json);
  OpsOptions ops;
  CLI::Option* tolerance = nullptr;
  CLI::App* ops_cmd = add_ops_command(app, &ops, &tolerance);
  CommOptions comm;
  CLI::App* comm_cmd = add_comm_command(app, &comm);
  MergeOptions merge;
  CLI::App* merge_cmd = add_merge_command(app, &merge);
  std::string show_path;
  add_show_command(app, &show_path);

  try {
    auto args = gp::cli::config_first_reversed(argc, argv);
    if (!args.ok()) return gp::cli::report("graphpipe-profile", args.status());
    app.parse(*args);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    if (rc != 0) gp::cli::print_hints("graphpipe-profile", app, app.remaining(true));
    return rc == 0 ? gp::cli::kExitOk : gp::cli::kExitBadInput;
  }
  ops.tolerance_given = tolerance->count() > 0;
  if (auto st = gp::log::init("graphpipe-profile", log_level); !st.ok()) {
    return gp::cli::report("graphpipe-profile", st);
  }
  gp::Status st;
  if (*devices) {
    st = run_devices(json);
  } else if (*ops_cmd) {
    st = run_ops(ops);
  } else if (*comm_cmd) {
    st = run_comm(comm);
  } else if (*merge_cmd) {
    st = run_merge(merge);
  } else {
    st = run_show(show_path);
  }
  return gp::cli::report("graphpipe-profile", st);
}
