// graphpipe-profile: measure what the planner needs to know about the devices plans run on —
// operator times and memory, communication bandwidth — into a profile database.
#include <CLI/CLI.hpp>

#include "commands.h"
#include "gp/common/cli.h"
#include "gp/common/logging.h"
#include "gp/common/version.h"

int main(int argc, char** argv) {
  using namespace gp::profile::cli;
  CLI::App app{
      "graphpipe-profile: measure operators, communication and memory on this machine and write a "
      "profile database for `graphpipe-plan --profile`.\n"
      "  graphpipe-profile ops --model zoo:tiny-mmt --out ops.pb\n"
      "  graphpipe-profile comm --ranks 2 --out comm.pb\n"
      "  graphpipe-profile merge ops.pb comm.pb --out profile.pb"};
  app.set_version_flag("--version", std::string("graphpipe-profile ") + GP_VERSION_STRING);
  std::string log_level;
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");
  app.require_subcommand(1);
  app.fallthrough();  // global options (--log-level) may follow the subcommand

  bool json = false;
  auto* devices =
      app.add_subcommand("devices", "List the host CPU and the CUDA devices visible here");
  devices->add_flag("--json", json, "Print one JSON object");

  OpsOptions ops;
  auto* ops_cmd = app.add_subcommand(
      "ops",
      "Time the forward and backward kernel of every distinct operator of a model at each "
      "micro-batch size, and the bytes kept for backward");
  ops_cmd->add_option("--model", ops.model, "model file (.pbtxt/.json/.pb) or zoo:NAME")
      ->required();
  ops_cmd->add_option("--out", ops.out, "profile database to write (.pb, .pbtxt or .json)")
      ->required();
  ops_cmd->add_option("--device", ops.device, "cpu or cuda:N")->capture_default_str();
  ops_cmd->add_option("--cluster", ops.cluster,
                      "cluster preset or file whose device kind the records are for (default "
                      "for the CPU: cpu-local)");
  ops_cmd->add_option("--device-kind", ops.device_kind,
                      "device kind name to record, overriding --cluster's (default on CUDA: the "
                      "device kind of the cluster preset with this GPU model, e.g. "
                      "H200-SXM-141GB, else the GPU's name, e.g. nvidia-h200)");
  ops_cmd->add_option("--micro-batches", ops.micro_batches, "micro-batch sizes to measure")
      ->delimiter(',')
      ->capture_default_str();
  ops_cmd->add_option("--warmup", ops.warmup, "untimed calls before timing")->capture_default_str();
  ops_cmd->add_option("--repetitions", ops.repetitions, "timed calls, at least")
      ->capture_default_str();
  ops_cmd
      ->add_option("--min-time-ms", ops.min_time_ms,
                   "keep timing a kernel until this much time was measured")
      ->capture_default_str();
  ops_cmd
      ->add_option("--cpu-threads", ops.cpu_threads,
                   "BLAS threads; match the executor's (1 per rank by default)")
      ->capture_default_str();
  ops_cmd->add_option("--flush-cache-mib", ops.flush_cache_mib,
                      "MiB streamed through before each timed call so that the kernel starts with "
                      "cold caches, as in training (0: warm; default: 2x the last-level cache, "
                      "64 MiB when unknown). Host caches: not done on CUDA");
  ops_cmd
      ->add_option("--precision", ops.precision,
                   "input precision of the GEMMs (linear, attention, matmul, conv) on CUDA; "
                   "accumulation is fp32. The CPU computes fp32 only")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}))
      ->capture_default_str();
  auto* tolerance = ops_cmd->add_option(
      "--tolerance", ops.tolerance,
      "largest error accepted against the CPU reference kernels (a device other than the CPU is "
      "checked), relative to each tensor's largest magnitude (default by --precision: fp32 1e-4, "
      "tf32 2e-2, bf16 6e-2)");
  ops_cmd->add_option("--seed", ops.seed, "seed of the synthetic inputs and parameters")
      ->capture_default_str();
  ops_cmd
      ->add_option("--passes", ops.passes,
                   "measure every operator this many times, seconds apart, and keep each one's "
                   "fastest pass: a burst of interference on the host then skews one pass only")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();

  CommOptions comm;
  auto* comm_cmd = app.add_subcommand(
      "comm",
      "Measure point-to-point and all-reduce time over a size sweep (ranks as local processes) "
      "and fit latency and bandwidth");
  comm_cmd->add_option("--out", comm.out, "profile database to write")->required();
  comm_cmd->add_option("--device", comm.device, "cpu (Gloo over TCP) or cuda:N (NCCL)")
      ->capture_default_str();
  comm_cmd->add_option("--ranks", comm.ranks, "processes taking part (all-reduce group size)")
      ->capture_default_str();
  comm_cmd->add_option("--sizes", comm.sizes, "message sizes, e.g. 4K,64K,1M (default 1K..16M x4)")
      ->delimiter(',');
  comm_cmd->add_option("--kinds", comm.kinds, "p2p, allreduce or both")
      ->delimiter(',')
      ->capture_default_str();
  comm_cmd
      ->add_option("--link-class", comm.link_class,
                   "intra (ranks on one node, as here) or inter (record as inter-node)")
      ->capture_default_str();
  comm_cmd->add_option("--warmup", comm.warmup, "untimed transfers per size")
      ->capture_default_str();
  comm_cmd->add_option("--repetitions", comm.repetitions, "timed transfers per size")
      ->capture_default_str();
  comm_cmd->add_option("--timeout-s", comm.timeout_s, "give up on a rank after this long")
      ->capture_default_str();
  comm_cmd
      ->add_option("--data-plane", comm.data_plane,
                   "the transport to measure, as graphpipe-executor run uses it: auto (shared "
                   "memory between ranks of this host) or gloo (TCP)")
      ->check(CLI::IsMember({"auto", "gloo"}))
      ->capture_default_str();

  MergeOptions merge;
  auto* merge_cmd = app.add_subcommand(
      "merge", "Combine profile databases; a later input's record replaces an earlier one's");
  merge_cmd->add_option("inputs", merge.inputs, "databases, in order")->required();
  merge_cmd->add_option("--out", merge.out, "merged database to write")->required();

  std::string show_path;
  auto* show_cmd = app.add_subcommand("show", "Summarise a profile database");
  show_cmd->add_option("profile", show_path, "database to read")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
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
