// graphpipe-executor: trains models. This version runs the single-process numerical reference;
// the per-rank daemon that runs a plan's instruction stream is built on the same StageRunner.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gp/common/cli.h"
#include "gp/common/logging.h"
#include "gp/common/util.h"
#include "gp/common/version.h"
#include "gp/exec/checkpoint.h"
#include "gp/exec/device.h"
#include "gp/exec/export.h"
#include "gp/exec/rank_session.h"
#include "gp/exec/reference_trainer.h"
#include "gp/graph/model_io.h"
#include "gp/graph/plan_util.h"
#include "gp/graph/zoo.h"
#include "launcher_command.h"
#include "node_daemon.h"
#include "run.h"

namespace {

struct ReferenceOptions {
  std::string model;
  std::string plan;  // instead of --model: the plan's model and training settings
  // Whether the flag was given (it then overrides the plan's setting).
  bool optimizer_given = false, lr_given = false, momentum_given = false, seed_given = false;
  double weight_decay = 0;
  bool weight_decay_given = false;
  double clip_grad_norm = 0;
  bool clip_grad_norm_given = false;
  int64_t batch = 0;
  int64_t micro_batch = 0;
  int iterations = 5;
  std::string optimizer = "sgd";
  double learning_rate = 0.01;
  double momentum = 0.9;
  uint64_t seed = 1;
  std::string metrics_out;
  std::string device = "cpu";
  std::string precision = "fp32";
  std::string data;  // --data DIR: one <input op id>.npy per graph input
  bool no_shuffle = false;
  bool allow_nonfinite = false;
  std::string checkpoint_dir;  // write the trained parameters here at the end
};

// The device named by --device with GEMMs at --precision (which the CPU ignores).
gp::Result<const gp::exec::Device*> device_from_flags(const std::string& device,
                                                      const std::string& precision) {
  GP_ASSIGN_OR_RETURN(const auto p, gp::exec::parse_precision(precision));
  return gp::exec::find_device(device, p);
}

// The optimizer named by --optimizer with --momentum; the rest of `training` is kept.
gp::Status set_optimizer(const ReferenceOptions& o, graphpipe::v1::TrainingConfig& training) {
  if (o.optimizer == "sgd") {
    training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_SGD);
  } else if (o.optimizer == "momentum") {
    training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_MOMENTUM);
    training.set_momentum(o.momentum);
  } else if (o.optimizer == "adam") {
    training.set_optimizer(graphpipe::v1::OPTIMIZER_KIND_ADAM);
  } else {
    return gp::invalid_argument("--optimizer = '" + o.optimizer +
                                "', expected sgd, momentum or adam");
  }
  return gp::ok_status();
}

// The model named by exactly one of --model and --plan (then also the plan in `plan`), with its
// weights file resolved.
gp::Result<graphpipe::v1::ModelGraph> model_or_plan(const std::string& command,
                                                    const std::string& model_flag,
                                                    const std::string& plan_flag,
                                                    graphpipe::v1::Plan* plan) {
  if (model_flag.empty() == plan_flag.empty()) {
    return gp::invalid_argument(command + " needs exactly one of --model and --plan");
  }
  graphpipe::v1::ModelGraph model;
  if (!plan_flag.empty()) {
    GP_RETURN_IF_ERROR(gp::graph::read_message(plan_flag, plan).with_context("--plan"));
    model = plan->model();
  } else {
    GP_ASSIGN_OR_RETURN(model, gp::graph::load_model(model_flag));
  }
  GP_RETURN_IF_ERROR(gp::graph::resolve_weights(model));
  return model;
}

// A NaN or infinite loss stops training with exit 3, as `run` does, unless --allow-nonfinite.
constexpr int kExitNonfiniteLoss = 3;

gp::Status nonfinite_loss(double loss, int64_t iteration) {
  return gp::Status(gp::StatusCode::kOutOfRange,
                    fmt::format("the loss is {} at iteration {}; --allow-nonfinite trains on",
                                std::isnan(loss) ? "NaN" : (loss > 0 ? "inf" : "-inf"), iteration));
}

gp::Status run_reference(ReferenceOptions o, bool* nonfinite) {
  GP_ASSIGN_OR_RETURN(const gp::exec::Device* device, device_from_flags(o.device, o.precision));
  graphpipe::v1::Plan plan;
  GP_ASSIGN_OR_RETURN(auto model, model_or_plan("reference", o.model, o.plan, &plan));
  graphpipe::v1::TrainingConfig training;
  if (!o.plan.empty()) {
    // The plan's mini-batch and every training setting, unless a flag overrides it.
    training = plan.training();
    if (o.batch == 0) o.batch = plan.mini_batch();
    if (o.optimizer_given) {
      training.clear_momentum();
      training.clear_adam_beta1();
      training.clear_adam_beta2();
      training.clear_adam_epsilon();
      GP_RETURN_IF_ERROR(set_optimizer(o, training));
    } else if (o.momentum_given) {
      training.set_momentum(o.momentum);
    }
    if (o.lr_given) training.set_learning_rate(o.learning_rate);
    if (o.weight_decay_given) training.set_weight_decay(o.weight_decay);
    if (o.clip_grad_norm_given) training.set_clip_grad_norm(o.clip_grad_norm);
    if (o.seed_given) training.set_seed(o.seed);
    GP_RETURN_IF_ERROR(
        gp::graph::validate_training(training, false).with_context("--plan " + o.plan));
  } else {
    if (o.batch == 0) return gp::invalid_argument("--batch is required with --model");
    GP_RETURN_IF_ERROR(set_optimizer(o, training));
    training.set_learning_rate(o.learning_rate);
    training.set_weight_decay(o.weight_decay);
    training.set_clip_grad_norm(o.clip_grad_norm);
    training.set_seed(o.seed);
    GP_RETURN_IF_ERROR(gp::graph::validate_training(training, false));
  }
  auto graph = gp::graph::Graph::build(model);
  if (!graph.ok()) {
    return graph.status().with_context(o.plan.empty() ? "model '" + o.model + "'"
                                                      : "--plan " + o.plan + ": plan.model");
  }
  GP_ASSIGN_OR_RETURN(auto trainer, gp::exec::ReferenceTrainer::create(
                                        *graph, o.batch, o.micro_batch, training, *device));
  auto log = gp::log::get("exec");
  std::unique_ptr<gp::exec::NpyDataset> data;
  if (!o.data.empty()) {
    GP_ASSIGN_OR_RETURN(
        data, gp::exec::open_stage_data(o.data, *graph, trainer->runner().op_indices(), o.batch,
                                        !o.no_shuffle, training.seed()));
    trainer->mutable_runner().set_data(data.get());
    log->info("data: {} samples from {} ({} iterations per epoch{})", data->samples(), o.data,
              data->samples() / o.batch, o.no_shuffle ? ", file order" : ", shuffled per epoch");
  }
  log->debug("training on {}", device->name());
  std::vector<gp::exec::IterationMetrics> metrics;
  gp::Status stopped;
  for (int it = 0; it < o.iterations; ++it) {
    GP_ASSIGN_OR_RETURN(auto iteration, trainer->run_iteration(it));
    metrics.push_back(iteration);
    const auto& m = metrics.back();
    log->info("iteration {}: loss {:.6f}, {:.1f} samples/s", m.iteration, m.loss, m.samples_per_s);
    if (!std::isfinite(m.loss) && !o.allow_nonfinite) {
      stopped = nonfinite_loss(m.loss, m.iteration);
      break;
    }
  }
  if (!o.metrics_out.empty()) {
    GP_RETURN_IF_ERROR(
        gp::graph::write_file_atomic(o.metrics_out, gp::exec::metrics_json(metrics)));
  }
  if (!stopped.ok()) {
    *nonfinite = true;
    return stopped;
  }
  if (!o.checkpoint_dir.empty()) {
    const int64_t last = o.iterations - 1;
    const std::string run_id = "reference-" + gp::utc_now_iso8601();
    GP_RETURN_IF_ERROR(gp::exec::write_stage_checkpoint(o.checkpoint_dir, last, *graph,
                                                        trainer->mutable_runner(), run_id));
    GP_RETURN_IF_ERROR(
        gp::exec::commit_checkpoint(o.checkpoint_dir, last, *graph, "reference", training, run_id));
    log->info("checkpoint of iteration {} written to {}", last, o.checkpoint_dir);
  }
  return gp::ok_status();
}

// --auth-token-file: the token in a file only its owner can read (the token must not travel in
// argv, which every local user sees).
gp::Status read_token_file(const std::string& path, std::string* token) {
  if (path.empty()) return gp::ok_status();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return gp::invalid_argument("--auth-token-file " + path + ": " + std::strerror(errno));
  }
  if ((st.st_mode & 077) != 0) {
    return gp::invalid_argument("--auth-token-file " + path +
                                ": readable by others (chmod 600 it)");
  }
  GP_ASSIGN_OR_RETURN(std::string text, gp::graph::read_file(path));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  if (text.empty()) return gp::invalid_argument("--auth-token-file " + path + ": empty");
  *token = text;
  return gp::ok_status();
}

struct ExportCommandOptions {
  std::string model;
  std::string plan;
  gp::exec::ExportOptions exp;
};

gp::Status run_export(const ExportCommandOptions& o) {
  graphpipe::v1::Plan plan;
  GP_ASSIGN_OR_RETURN(auto model, model_or_plan("export", o.model, o.plan, &plan));
  std::vector<std::string> notes;
  GP_RETURN_IF_ERROR(gp::exec::export_trained(model, o.exp, &notes));
  auto log = gp::log::get("exec");
  for (const auto& n : notes) log->warn("{}", n);
  log->info("wrote the trained parameters of {} to {}", o.exp.checkpoint, o.exp.out);
  return gp::ok_status();
}

struct LocalOptions {
  std::string plan;
  int iterations = 5;
  int timeout_s = 60;
  std::string metrics_out;
  std::string trace;
  std::string device = "cpu";
  std::string precision = "fp32";
  std::string data;
  bool no_shuffle = false;
  bool allow_nonfinite = false;
};

gp::Status run_local(const LocalOptions& o, bool* nonfinite) {
  GP_ASSIGN_OR_RETURN(const gp::exec::Device* device, device_from_flags(o.device, o.precision));
  GP_ASSIGN_OR_RETURN(const auto loaded, gp::exec::LoadedPlan::read(o.plan));
  const graphpipe::v1::Plan& plan = loaded->plan();
  auto log = gp::log::get("exec");
  log->info("running {} ranks of {} as threads of this process on {}, {} iterations",
            plan.programs_size(), o.plan, device->name(), o.iterations);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<gp::exec::RankSession>> sessions;
  size_t trace_events = 0;
  if (!o.trace.empty()) {
    for (const auto& prog : plan.programs()) {
      trace_events = std::max<size_t>(trace_events, static_cast<size_t>(prog.instructions_size()) *
                                                        static_cast<size_t>(o.iterations));
    }
  }
  auto run = gp::exec::run_plan_locally(loaded, o.iterations, std::chrono::seconds(o.timeout_s),
                                        &sessions, trace_events, *device, o.data, !o.no_shuffle);
  if (!run.ok()) return run.status().with_context("--plan " + o.plan);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<gp::exec::IterationMetrics> metrics;
  for (size_t i = 0; i < run->losses.size(); ++i) {
    gp::exec::IterationMetrics m;
    m.iteration = static_cast<int64_t>(i);
    m.loss = run->losses[i];
    m.time_s = elapsed / static_cast<double>(run->losses.size());
    m.samples_per_s = static_cast<double>(plan.mini_batch()) / m.time_s;
    metrics.push_back(m);
    log->info("iteration {}: loss {:.6f}", m.iteration, m.loss);
  }
  // The ranks ran every iteration; the metrics keep them all, and the exit says where it broke.
  gp::Status stopped;
  for (const auto& m : metrics) {
    if (!std::isfinite(m.loss) && !o.allow_nonfinite) {
      stopped = nonfinite_loss(m.loss, m.iteration);
      break;
    }
  }
  log->info("{:.1f} samples/s over {} iterations",
            static_cast<double>(plan.mini_batch()) * static_cast<double>(metrics.size()) / elapsed,
            metrics.size());
  if (!o.metrics_out.empty()) {
    GP_RETURN_IF_ERROR(
        gp::graph::write_file_atomic(o.metrics_out, gp::exec::metrics_json(metrics)));
  }
  if (!o.trace.empty()) {
    std::vector<std::pair<int, std::vector<gp::exec::TraceEvent>>> events;
    for (const auto& s : sessions) events.emplace_back(s->rank(), s->runner().trace());
    GP_RETURN_IF_ERROR(
        gp::graph::write_file_atomic(o.trace, gp::exec::measured_trace_json(plan, events)));
  }
  if (!stopped.ok()) *nonfinite = true;
  return stopped;
}

// Runs a training subcommand: its error's exit code, or 3 when it stopped on a NaN or inf loss.
template <typename Options>
int run_training(gp::Status (*command)(Options, bool*), Options options) {
  bool nonfinite = false;
  const gp::Status status = command(std::move(options), &nonfinite);
  const int code = gp::cli::report("graphpipe-executor", status);
  return nonfinite ? kExitNonfiniteLoss : code;
}

// --device and --precision of the subcommands that train.
// --data and --no-shuffle, the same for every training subcommand.
void add_data_options(CLI::App* cmd, std::string& data, bool& no_shuffle) {
  cmd->add_option("--data", data,
                  "train on real data: a directory with one <input op id>.npy per graph input "
                  "(C order, samples first; e.g. x.npy and y.target.npy for an imported model); "
                  "default: seeded synthetic data");
  cmd->add_flag("--no-shuffle", no_shuffle,
                "with --data: read the samples in file order every epoch (default: a seeded "
                "permutation per epoch)");
}

void add_device_options(CLI::App* cmd, std::string& device, std::string& precision,
                        const std::string& note = "") {
  cmd->add_option("--device", device,
                  "cpu, or cuda:N (GPU N of this machine; exits 1 naming the reason when it "
                  "cannot be opened)" +
                      note)
      ->capture_default_str();
  cmd->add_option("--precision", precision,
                  "input precision of the GEMMs on CUDA (linear, attention, matmul, conv; fp32 "
                  "accumulation always): fp32, tf32 or bf16. The CPU ignores it and computes fp32")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}))
      ->capture_default_str();
}

// --tls-cert, --tls-key and --tls-ca; `how` says what this command does with them.
void add_tls_options(CLI::App* cmd, gp::exec::TlsOptions& tls, const std::string& how) {
  cmd->add_option(
         "--tls-cert", tls.cert,
         "PEM certificate (chain) this process presents; TLS for the control plane. " + how)
      ->group("TLS");
  cmd->add_option("--tls-key", tls.key, "PEM private key of --tls-cert (unencrypted, mode 0600)")
      ->group("TLS");
  cmd->add_option("--tls-ca", tls.ca,
                  "PEM CA certificate(s): a server requires clients to present a certificate "
                  "of it (mutual TLS); a client accepts only a server certificate of it, naming "
                  "the address dialled (IP or DNS subjectAltName)")
      ->group("TLS");
}

}  // namespace

// The daemon's documented form has no subcommand: `graphpipe-executor --plan P --rank R ...` is
// `run`, and `--coordinator-only` (with --coordinator HOST:PORT as the listen address) is
// `coordinator`. Rewrites such a command line into the subcommand form.
std::vector<std::string> normalise_arguments(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  static const char* kSubcommands[] = {"run",   "reference", "local",  "coordinator", "status",
                                       "serve", "submit",    "export", "launcher"};
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

int main(int raw_argc, char** raw_argv) {
  // A peer that dies closes its sockets; writing to them must be an error we report (EPIPE),
  // not a signal that kills this rank too.
  std::signal(SIGPIPE, SIG_IGN);
  // Each NCCL communicator has a stream of its own; with fewer hardware queues than streams
  // (CUDA's default is 8), a transfer blocked waiting for its peer can hold back another stream's
  // work that the peer needs. Read when CUDA starts, so set before any CUDA call; a user's own
  // setting stands.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  // NCCL collectives connect when their communicator is set up, not at their first call inside
  // the step loop (set before any thread starts: setenv is not thread-safe).
  setenv("NCCL_RUNTIME_CONNECT", "0", 0);
  std::vector<std::string> arguments = normalise_arguments(raw_argc, raw_argv);
  std::vector<char*> argv_storage;
  for (auto& a : arguments) argv_storage.push_back(a.data());
  int argc = static_cast<int>(argv_storage.size());
  char** argv = argv_storage.data();
  CLI::App app{
      "graphpipe-executor: train a model. `reference` trains it in one process without "
      "pipelining: the numerical reference that every plan must reproduce."};
  app.set_version_flag("--version", std::string("graphpipe-executor ") + GP_VERSION_STRING);
  std::string log_level;
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");
  int cpu_threads = 1;
  app.add_option("--cpu-threads", cpu_threads,
                 "BLAS threads of the CPU kernels per process (1: ranks sharing a host get a "
                 "core each, as graphpipe-profile measures by default)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.require_subcommand(1);
  app.fallthrough();  // global options (--log-level) may follow the subcommand
  ReferenceOptions ref;
  auto* reference = app.add_subcommand("reference", "Train in one process (numerical reference)");
  reference->add_option("--model", ref.model, "zoo:NAME[?k=v&...] or a model file");
  reference->add_option("--plan", ref.plan,
                        "instead of --model: a plan, whose model, mini-batch and training settings "
                        "it uses (flags given here override them)");
  // The planner's bound: buffer sizes (samples x elements) stay far from overflowing.
  reference->add_option("--batch", ref.batch, "mini-batch size (required with --model)")
      ->check(CLI::Range(int64_t{1}, gp::graph::kMaxMiniBatch));
  reference
      ->add_option("--micro-batch", ref.micro_batch,
                   "split each mini-batch into chunks of this size (gradients accumulate)")
      ->check(CLI::Range(int64_t{1}, gp::graph::kMaxMiniBatch));
  reference->add_option("--iterations", ref.iterations, "optimizer steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  auto* ref_optimizer = reference->add_option("--optimizer", ref.optimizer, "sgd, momentum or adam")
                            ->capture_default_str();
  auto* ref_lr =
      reference->add_option("--lr", ref.learning_rate, "learning rate")->capture_default_str();
  auto* ref_momentum =
      reference->add_option("--momentum", ref.momentum, "momentum factor")->capture_default_str();
  auto* ref_wd = reference->add_option("--weight-decay", ref.weight_decay,
                                       "L2 weight decay, as PyTorch's weight_decay");
  auto* ref_clip = reference->add_option(
      "--clip-grad-norm", ref.clip_grad_norm,
      "clip the gradients' L2 norm over the model at this, as torch.nn.utils.clip_grad_norm_ "
      "(0: no clipping)");
  auto* ref_seed =
      reference->add_option("--seed", ref.seed, "parameter and data seed")->capture_default_str();
  reference->add_option("--metrics-out", ref.metrics_out, "write per-iteration metrics (JSON)");
  reference->add_flag("--allow-nonfinite", ref.allow_nonfinite,
                      "keep training when the loss is NaN or infinite (by default training stops "
                      "and the exit status is 3)");
  add_data_options(reference, ref.data, ref.no_shuffle);
  reference->add_option("--checkpoint-dir", ref.checkpoint_dir,
                        "write the trained parameters as a checkpoint here at the end (for "
                        "export, or run --resume)");
  add_device_options(reference, ref.device, ref.precision);
  ExportCommandOptions exp;
  auto* export_cmd = app.add_subcommand(
      "export",
      "Write a checkpoint's trained parameters out: as the ONNX model they were imported from "
      "(initializers replaced) or as an .npz of <op>.<param> arrays");
  export_cmd->add_option("--checkpoint", exp.exp.checkpoint, "checkpoint directory")->required();
  export_cmd->add_option("--out", exp.exp.out, "file to write: .onnx or .npz")->required();
  export_cmd->add_option("--model", exp.model, "the model that was trained (or --plan)");
  export_cmd->add_option("--plan", exp.plan, "a plan of the model that was trained");
  export_cmd->add_option("--onnx", exp.exp.onnx,
                         "for .onnx: the file the model was imported from (default: the model's "
                         "recorded source)");
  LocalOptions local;
  auto* local_cmd = app.add_subcommand(
      "local", "Run every rank of a plan as threads of this process (in-process data plane)");
  local_cmd->add_option("--plan", local.plan, "plan file from graphpipe-plan search")->required();
  local_cmd->add_option("--iterations", local.iterations, "training iterations")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  local_cmd
      ->add_option("--timeout", local.timeout_s,
                   "seconds a rank waits for a peer before the run fails")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  local_cmd->add_option("--metrics-out", local.metrics_out, "write per-iteration metrics (JSON)");
  local_cmd->add_flag("--allow-nonfinite", local.allow_nonfinite,
                      "do not fail when the loss is NaN or infinite (by default the exit status "
                      "is 3, naming the first such iteration)");
  local_cmd->add_option("--trace", local.trace,
                        "write the measured Chrome trace (the simulator's format, for comparison)");
  add_data_options(local_cmd, local.data, local.no_shuffle);
  add_device_options(local_cmd, local.device, local.precision, " (every rank shares it)");
  using gp::exec::daemon::CoordinatorRunOptions;
  using gp::exec::daemon::RunOptions;
  RunOptions run;
  auto* run_cmd = app.add_subcommand(
      "run",
      "Run one rank of a plan: register with the coordinator (rank 0 hosts it), connect "
      "the data plane, train, report status and metrics");
  run_cmd->add_option("--plan", run.plan, "plan file (every rank needs the same)")->required();
  run_cmd->add_option("--rank", run.rank, "this process's rank (default: $RANK)")
      ->envname("RANK")
      ->required()
      ->check(CLI::Range(0, 1 << 20));
  run_cmd
      ->add_option("--world-size", run.world_size,
                   "number of ranks in the plan (default: $WORLD_SIZE)")
      ->envname("WORLD_SIZE")
      ->required()
      ->check(CLI::Range(1, 1 << 20));
  run_cmd->add_option("--coordinator", run.coordinator,
                      "HOST:PORT of the coordinator; rank 0 listens there (port 0: any free "
                      "port; default: $MASTER_ADDR:$MASTER_PORT when both are set)");
  run_cmd->add_option("--coordinator-file", run.coordinator_file,
                      "rank 0 writes the coordinator's address here; other ranks wait for it");
  run_cmd->add_flag("--external-coordinator", run.external_coordinator,
                    "rank 0 does not host the coordinator (one runs via `coordinator`)");
  run_cmd->add_option("--store-dir", run.store_dir,
                      "directory shared by the ranks for the data-plane rendezvous");
  run_cmd->add_option("--bind", run.bind_host, "interface for the data plane")
      ->capture_default_str();
  run_cmd
      ->add_option("--data-plane", run.data_plane,
                   "auto: NCCL between GPUs (--device cuda:N); on the CPU, ranks on the same "
                   "host exchange activations through shared memory and Gloo (TCP) carries the "
                   "rest; gloo: Gloo for everything (GPU memory is staged through the host); "
                   "nccl: NCCL (CUDA ranks only)")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}))
      ->capture_default_str();
  run_cmd
      ->add_option("--cpu-affinity", run.cpu_affinity,
                   "auto: when ranks share a host, pin each rank's compute thread to a core of "
                   "its own (if there are enough); none: leave placement to the OS")
      ->check(CLI::IsMember({"auto", "none"}))
      ->capture_default_str();
  run_cmd->add_option("--auth-token", run.auth_token,
                      "shared secret every control RPC carries (or $GP_AUTH_TOKEN, or "
                      "--auth-token-file; an argument is visible to every local user in ps)");
  std::string run_token_file, status_token_file;
  run_cmd->add_option("--auth-token-file", run_token_file,
                      "read the shared secret from this file (mode 0600, as the launcher "
                      "writes it)");
  add_tls_options(run_cmd, run.tls,
                  "Rank 0 serves the coordinator with --tls-cert/--tls-key and requires every "
                  "rank's certificate to chain to --tls-ca; every rank connects with all three "
                  "(rank 0 needs all three, other ranks at least --tls-ca)");
  add_device_options(run_cmd, run.device, run.precision,
                     "; cuda: the GPU of $LOCAL_RANK (0 when unset), as torchrun sets it");
  run_cmd->add_option("--iterations", run.iterations, "training iterations")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  run_cmd
      ->add_option("--timeout", run.timeout_s,
                   "seconds a silent rank has before the job is aborted (registration waits "
                   "as long; a receive waits twice as long)")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  run_cmd->add_option("--heartbeat-ms", run.heartbeat_ms, "heartbeat period")
      ->capture_default_str()
      ->check(CLI::Range(10, 600000));
  run_cmd->add_option("--metrics-out", run.metrics_out, "rank 0: write the job's metrics (JSON)");
  run_cmd->add_option("--trace", run.trace,
                      "rank 0: write the job's measured Chrome trace (ranks share its directory)");
  run_cmd->add_option("--checkpoint-dir", run.checkpoint_dir,
                      "write checkpoints (parameters and optimizer state per operator) here");
  run_cmd
      ->add_option("--checkpoint-every", run.checkpoint_every,
                   "checkpoint after every K iterations (0: never)")
      ->capture_default_str();
  add_data_options(run_cmd, run.data, run.no_shuffle);
  run_cmd->add_option("--resume", run.resume,
                      "continue from the newest checkpoint in this directory; any plan of the same "
                      "model may resume (e.g. one re-planned for fewer devices)");
  run_cmd
      ->add_option("--log-every", run.log_every,
                   "rank 0: log iteration, loss, samples/s and ETA every N iterations as they "
                   "complete")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  run_cmd->add_flag("--allow-nonfinite", run.allow_nonfinite,
                    "keep training when the loss is NaN or infinite (by default the job stops "
                    "and the rank that saw it exits 3)");
  run_cmd->add_option("--verdict-file", run.verdict_file,
                      "rank 0: when the job aborts, write the rank it blames and why here "
                      "(failed_rank=R, reason=...), for the launcher");
  run_cmd->add_option("--launcher-beacon", run.launcher_beacon,
                      "a file the launcher rewrites every second; when it stays unchanged for "
                      "--orphan-timeout seconds the launcher is gone and the rank stops as on "
                      "SIGTERM (for ranks whose parent process outlives the launcher: srun, ssh)");
  run_cmd
      ->add_option("--orphan-timeout", run.orphan_timeout_s,
                   "seconds without a change of --launcher-beacon before the rank stops")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  run_cmd
      ->add_option("--kill-rank-at", run.kill_rank_at,
                   "testing: RANK:ITERATION, that rank SIGKILLs itself there (not when resuming)")
      ->group("");

  CoordinatorRunOptions coord;
  auto* coord_cmd = app.add_subcommand("coordinator", "Run only the coordinator (control plane)");
  coord_cmd->add_option("--plan", coord.plan, "plan file")->required();
  coord_cmd->add_option("--world-size", coord.world_size, "number of ranks")->required();
  coord_cmd->add_option("--listen", coord.listen, "HOST:PORT to listen on")->capture_default_str();
  coord_cmd->add_option("--coordinator-file", coord.coordinator_file,
                        "write the bound address here");
  coord_cmd->add_option("--auth-token", coord.auth_token, "shared secret (or $GP_AUTH_TOKEN)");
  coord_cmd->add_option("--timeout", coord.timeout_s, "heartbeat timeout in seconds")
      ->capture_default_str();
  add_tls_options(coord_cmd, coord.tls,
                  "Serves TLS with --tls-cert/--tls-key; with --tls-ca only to ranks whose "
                  "certificate chains to it");

  std::string status_address, status_token;
  gp::exec::daemon::ServeOptions serve;
  auto* serve_cmd = app.add_subcommand(
      "serve",
      "Run the node daemon: start submitted plans' ranks on this node's devices, report their "
      "state and output, stop them (run it per node, e.g. under systemd)");
  serve_cmd->add_option("--listen", serve.listen, "HOST:PORT to listen on (port 0: any free)")
      ->capture_default_str();
  serve_cmd->add_option("--devices", serve.devices, "devices of this node (one rank each)")
      ->capture_default_str();
  serve_cmd
      ->add_option("--accelerator", serve.accelerator,
                   "what the devices are: cpu (ranks share the host's cores) or cuda (the rank "
                   "given device d trains on cuda:d)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  serve_cmd->add_option("--bind", serve.bind_host,
                        "address the ranks' data plane and coordinator use (default: --listen's "
                        "host)");
  serve_cmd->add_option("--work-dir", serve.work_dir, "job directories: plans and rank logs");
  serve_cmd->add_option("--output-root", serve.output_root,
                        "jobs' paths (--metrics-out, --trace, --checkpoint-dir, --resume, "
                        "--store-dir) must resolve inside it, symlinks followed (default: "
                        "--work-dir)");
  serve_cmd->add_option("--auth-token", serve.auth_token,
                        "shared secret clients must present (or $GP_AUTH_TOKEN)");
  serve_cmd->add_flag("--insecure", serve.insecure,
                      "serve without a token (every client that reaches --listen may start ranks); "
                      "refused otherwise");
  add_tls_options(serve_cmd, serve.tls,
                  "Needs all three: serves mutual TLS (submit must present a certificate of "
                  "--tls-ca) and passes the three paths to the ranks it starts, whose "
                  "coordinator and connections use them");

  gp::exec::daemon::SubmitOptions submit;
  auto* submit_cmd = app.add_subcommand(
      "submit",
      "Run a plan on node daemons: ranks spread over them in order, output streamed here");
  submit_cmd->add_option("--plan", submit.plan, "plan file")->required();
  submit_cmd->add_option("--nodes", submit.nodes, "daemons, HOST:PORT,... in node order")
      ->delimiter(',')
      ->required();
  submit_cmd->add_option("--iterations", submit.iterations, "training iterations")
      ->capture_default_str();
  submit_cmd->add_option("--timeout", submit.timeout_s, "peer and heartbeat timeout, seconds")
      ->capture_default_str();
  submit_cmd->add_option("--port", submit.port, "the coordinator's port on the first node")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  submit_cmd->add_option("--store-dir", submit.store_dir,
                         "Gloo rendezvous directory every node shares, inside every daemon's "
                         "--output-root (default: each daemon's OUTPUT_ROOT/store-<job>, "
                         "so one node only)");
  submit_cmd->add_option("--auth-token", submit.auth_token,
                         "the daemons' token (or $GP_AUTH_TOKEN)");
  add_tls_options(submit_cmd, submit.tls,
                  "Connects to the daemons over TLS: --tls-ca verifies them, "
                  "--tls-cert/--tls-key identify this client (daemons serving TLS require them)");
  submit_cmd->add_option("extra", submit.extra, "-- then executor run flags for every rank");

  auto* status_cmd = app.add_subcommand("status", "Print every rank's iteration and instruction");
  status_cmd->add_option("--coordinator", status_address, "HOST:PORT")->required();
  status_cmd->add_option("--auth-token", status_token, "shared secret (or $GP_AUTH_TOKEN)");
  status_cmd->add_option("--auth-token-file", status_token_file,
                         "read the shared secret from this file (e.g. RUN_DIR/auth-token)");
  gp::exec::TlsOptions status_tls;
  add_tls_options(status_cmd, status_tls,
                  "Connects over TLS: --tls-ca verifies the coordinator, --tls-cert/--tls-key "
                  "identify this client (a coordinator with --tls-ca requires them)");
  bool status_as_json = false;
  status_cmd->add_flag(
      "--json", status_as_json,
      "print one JSON object (job, then per rank: state, iteration, samples_per_s, "
      "loss, liveness)");
  gp::exec::daemon::LauncherCommands launcher(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? gp::cli::kExitOk : gp::cli::kExitBadInput;
  }
  if (auto st = gp::log::init("graphpipe-executor", log_level); !st.ok()) {
    return gp::cli::report("graphpipe-executor", st);
  }
  gp::exec::set_cpu_threads(cpu_threads);
  if (auto st = read_token_file(run_token_file, &run.auth_token); !st.ok()) {
    return gp::cli::report("graphpipe-executor", st);
  }
  if (auto st = read_token_file(status_token_file, &status_token); !st.ok()) {
    return gp::cli::report("graphpipe-executor", st);
  }
  // The launcher script's decisions: its errors are the launcher's.
  if (launcher.parsed()) return gp::cli::report("graphpipe-launch", launcher.run());
  if (local_cmd->parsed()) return run_training<const LocalOptions&>(&run_local, local);
  if (run_cmd->parsed()) {
    auto exit_code = gp::exec::daemon::run_rank(run);
    if (!exit_code.ok()) return gp::cli::report("graphpipe-executor", exit_code.status());
    return *exit_code;
  }
  if (coord_cmd->parsed()) {
    return gp::cli::report("graphpipe-executor", gp::exec::daemon::run_coordinator(coord));
  }
  if (serve_cmd->parsed()) {
    return gp::cli::report("graphpipe-executor", gp::exec::daemon::run_serve(serve));
  }
  if (export_cmd->parsed()) return gp::cli::report("graphpipe-executor", run_export(exp));
  if (submit_cmd->parsed()) {
    return gp::cli::report("graphpipe-executor", gp::exec::daemon::run_submit(submit));
  }
  if (status_cmd->parsed()) {
    return gp::cli::report(
        "graphpipe-executor",
        gp::exec::daemon::print_status(status_address, status_token, status_tls, status_as_json));
  }
  ref.optimizer_given = ref_optimizer->count() > 0;
  ref.lr_given = ref_lr->count() > 0;
  ref.momentum_given = ref_momentum->count() > 0;
  ref.seed_given = ref_seed->count() > 0;
  ref.weight_decay_given = ref_wd->count() > 0;
  ref.clip_grad_norm_given = ref_clip->count() > 0;
  return run_training<ReferenceOptions>(&run_reference, ref);
}
