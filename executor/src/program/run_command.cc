// graphpipe-executor run: one rank of a plan (RankJob in run.cc); its flags.
#include <cstdlib>
#include <string>

#include "commands.h"
#include "control/coordinator.h"
#include "gp/common/cli.h"
#include "job/run.h"
#include "launch/torchrun_env.h"
#include "shared_flags.h"

namespace gp::exec::daemon {
namespace {

class RunCommand final : public Command {
 public:
  explicit RunCommand(CLI::App& app)
      : Command(app.add_subcommand(
            "run",
            "Run one rank of a plan: register with the coordinator (rank 0 hosts it), connect "
            "the data plane, train, report status and metrics")) {
    add_rendezvous_flags();
    add_security_flags();
    add_device_options(cmd_, o_.device, o_.precision,
                       "; cuda: the GPU of $LOCAL_RANK (0 when unset), as torchrun sets it");
    add_training_flags();
    add_supervision_flags();
    add_measuring_flags();
  }

  int run() override {
    if (auto st = resolve_environment(); !st.ok()) {
      return gp::cli::report("graphpipe-executor", st);
    }
    if (auto st = resolve_security(); !st.ok()) return gp::cli::report("graphpipe-executor", st);
    if (auto st = check_checkpoint_flags(o_.checkpoint_every, o_.checkpoint_dir); !st.ok()) {
      return gp::cli::report("graphpipe-executor", st);
    }
    auto exit_code = run_rank(o_);
    if (!exit_code.ok()) return gp::cli::report("graphpipe-executor", exit_code.status());
    return *exit_code;
  }

 private:
  // The plan, this rank's place in it, and how the ranks find each other.
  void add_rendezvous_flags() {
    cmd_->add_option("--plan", o_.plan, "plan file (every rank needs the same)")->required();
    // Their variables are read after parsing (apply_torchrun_env): a flag and a variable that
    // disagree are refused rather than one silently winning.
    rank_flag_ = cmd_->add_option("--rank", o_.rank,
                                  "this process's rank (default: $RANK; both: they must agree)")
                     ->check(CLI::Range(0, kMaxWorldSize - 1));
    world_flag_ = cmd_->add_option("--world-size", o_.world_size,
                                   "number of ranks in the plan (default: $WORLD_SIZE; both: "
                                   "they must agree)")
                      ->check(CLI::Range(1, kMaxWorldSize));
    cmd_->add_option("--coordinator", o_.coordinator,
                     "HOST:PORT of the coordinator; rank 0 listens there (port 0: any free "
                     "port; default: $MASTER_ADDR:$MASTER_PORT when both are set; both: they "
                     "must agree)");
    cmd_->add_option("--coordinator-file", o_.coordinator_file,
                     "rank 0 writes the coordinator's address here; other ranks wait for it");
    cmd_->add_flag("--external-coordinator", o_.external_coordinator,
                   "rank 0 does not host the coordinator (one runs via `coordinator`)");
    cmd_->add_option("--store-dir", o_.store_dir,
                     "directory shared by the ranks for the data-plane rendezvous (with "
                     "--rendezvous coordinator: this host's own, for its notes)");
    cmd_->add_option("--rendezvous", o_.rendezvous,
                     "store-dir: the ranks meet through files in --store-dir (a shared "
                     "filesystem across hosts); coordinator: through rank 0's coordinator over "
                     "TCP (StoreSet/StoreGet, token-authenticated), no shared filesystem")
        ->check(CLI::IsMember({"store-dir", "coordinator"}))
        ->capture_default_str();
    cmd_->add_option("--bind", o_.bind_host, "interface for the data plane")->capture_default_str();
    cmd_->add_option("--data-plane", o_.data_plane,
                     "auto: NCCL between GPUs (--device cuda:N); on the CPU, ranks on the same "
                     "host exchange activations through shared memory and Gloo (TCP) carries the "
                     "rest; gloo: Gloo for everything (GPU memory is staged through the host); "
                     "nccl: NCCL (CUDA ranks only)")
        ->check(CLI::IsMember({"auto", "gloo", "nccl"}))
        ->capture_default_str();
    cmd_->add_option("--cpu-affinity", o_.cpu_affinity,
                     "auto: when ranks share a host, pin each rank's compute thread to a core of "
                     "its own (if there are enough); none: leave placement to the OS")
        ->check(CLI::IsMember({"auto", "none"}))
        ->capture_default_str();
  }

  // The shared secret and TLS of the control plane.
  void add_security_flags() {
    add_token_options(cmd_, token_, /*serves=*/true,
                      "Every control RPC carries it; rank 0 (unless --external-coordinator) "
                      "refuses to start without one unless --insecure.");
    add_tls_options(cmd_, o_.tls,
                    "Rank 0 serves the coordinator with --tls-cert/--tls-key and requires every "
                    "rank's certificate to chain to --tls-ca; every rank connects with all three "
                    "(rank 0 needs all three, other ranks at least --tls-ca)");
  }

  // Training, its outputs, checkpoints and data.
  void add_training_flags() {
    cmd_->add_option("--iterations", o_.iterations, "training iterations")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 30));
    cmd_->add_option("--timeout", o_.timeout_s,
                     "seconds a silent rank has before the job is aborted (registration waits "
                     "as long; a receive waits twice as long)")
        ->capture_default_str()
        ->check(CLI::Range(1, 86400));
    cmd_->add_option("--heartbeat-ms", o_.heartbeat_ms, "heartbeat period")
        ->capture_default_str()
        ->check(CLI::Range(10, 600000));
    cmd_->add_option("--metrics-out", o_.metrics_out,
                     "rank 0: write the job's metrics: FILE.jsonl gets one JSON line per logged "
                     "iteration as the job runs; any other name a JSON file of every iteration, "
                     "replaced at checkpoints and at exit (--resume keeps the earlier entries)");
    cmd_->add_option("--tensorboard", o_.tensorboard,
                     "rank 0: also write the logged iterations (loss, lr, grad norm, samples/s, "
                     "ms/iteration) as TensorBoard event files in this directory, created if "
                     "need be; a resumed run adds a new file (view: tensorboard --logdir DIR)");
    cmd_->add_option("--trace", o_.trace,
                     "rank 0: write the job's measured Chrome trace (ranks share its directory)");
    cmd_->add_option("--checkpoint-dir", o_.checkpoint_dir,
                     "write checkpoints (parameters and optimizer state per operator) here");
    cmd_->add_option("--checkpoint-every", o_.checkpoint_every,
                     "checkpoint after every K iterations (0: never)")
        ->capture_default_str();
    add_data_options(cmd_, o_.data, o_.no_shuffle);
    cmd_->add_option("--eval-data", o_.eval_data,
                     "held-out samples (a directory as --data's; every rank reads it): the mean "
                     "loss over its whole mini-batches in file order, after the last iteration and "
                     "every --eval-every, in the progress output and the metrics (eval_loss); the "
                     "pipeline runs their forward passes only");
    cmd_->add_option("--eval-every", o_.eval_every,
                     "evaluate --eval-data every K iterations too (0: after the last only)")
        ->capture_default_str();
    auto* resume = cmd_->add_option(
        "--resume", o_.resume,
        "continue from the newest checkpoint in this directory; any plan of the same model may "
        "resume (e.g. one re-planned for fewer devices); exits 2 when it holds none");
    cmd_->add_option("--resume-if-present", o_.resume_optional,
                     "as --resume when this directory holds a checkpoint, else start from "
                     "iteration 0 with a warning (a requeued job: Megatron's --load)")
        ->excludes(resume);
    cmd_->add_flag("--allow-new-seed", o_.allow_new_seed,
                   "resume even when the plan's seed, the data, its shuffling or the sample "
                   "position differ from the checkpoint's (by default refused, naming both)");
    cmd_->add_option("--log-every", o_.log_every,
                     "rank 0: log iteration, loss, samples/s and ms/iteration over those N, lr, "
                     "gradient norm (with clipping) and ETA every N iterations as they complete")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 30));
    cmd_->add_flag("--allow-nonfinite", o_.allow_nonfinite,
                   "keep training when the loss is NaN or infinite (by default the job stops "
                   "and the rank that saw it exits 3)");
  }

  // What the launcher needs of a rank: the verdict, and stopping when the launcher is gone.
  void add_supervision_flags() {
    cmd_->add_option("--verdict-file", o_.verdict_file,
                     "rank 0: when the job aborts, write the rank it blames and why here "
                     "(failed_rank=R, reason=...), for the launcher");
    cmd_->add_option("--stop-file", o_.stop_file,
                     "rank 0: when SIGINT/SIGTERM stops the job before --iterations, write "
                     "`stopped_after N`, `iterations M` and (with --checkpoint-dir) `checkpoint "
                     "DIR/iter-N` lines here, for the launcher's summary");
    cmd_->add_option("--job-id", o_.job_id,
                     "rank 0: the id its coordinator gives the job (logs, status, checkpoint "
                     "lock; default: a random one), e.g. the launcher's");
    cmd_->add_option("--launcher-beacon", o_.launcher_beacon,
                     "a file the launcher rewrites every second; when it stays unchanged for "
                     "--orphan-timeout seconds the launcher is gone and the rank stops as on "
                     "SIGTERM (for ranks whose parent process outlives the launcher: srun, ssh)");
    cmd_->add_option("--daemon-beacon", o_.daemon_beacon,
                     "as --launcher-beacon, for the node daemon (serve) that started the rank: "
                     "a frozen daemon stays its parent yet supervises nothing");
    cmd_->add_option("--orphan-timeout", o_.orphan_timeout_s,
                     "seconds without a change of --launcher-beacon (--daemon-beacon) before the "
                     "rank stops")
        ->capture_default_str()
        ->check(CLI::Range(1, 86400));
    cmd_->add_option("--kill-rank-at", o_.kill_rank_at,
                     "testing: RANK:ITERATION, that rank SIGKILLs itself there (not when resuming)")
        ->group("");
  }

  // Measured costs of the running job, and the straggler test aid.
  void add_measuring_flags() {
    cmd_->add_option("--slowdown", o_.slowdown,
                     "stretch this rank's compute by FACTOR (>= 1): after each op's forward and "
                     "backward and the optimizer step it sleeps (FACTOR - 1) x the time they took, "
                     "like a slower device (testing and benchmarks)")
        ->capture_default_str();
    cmd_->add_option("--measure-every", o_.measure_every,
                     "every K iterations (after 2 warm-up ones) time each op's forward and "
                     "backward and send the recent times to the coordinator (0: never)")
        ->capture_default_str();
    cmd_->add_option("--measured-profile-out", o_.measured_profile_out,
                     "rank 0: write every rank's measured op times as a profile database "
                     "(.pb/.pbtxt/.json, graphpipe-profile's format; device kind "
                     "\"<cluster device>/rank<R>\"), rewritten after each measurement and at exit");
  }

  // torchrun's RANK, WORLD_SIZE, MASTER_ADDR/MASTER_PORT and LOCAL_RANK where flags are absent.
  gp::Status resolve_environment() {
    launch::RankFlags flags;
    if (rank_flag_->count() > 0) flags.rank = o_.rank;
    if (world_flag_->count() > 0) flags.world_size = o_.world_size;
    flags.coordinator = o_.coordinator;
    flags.coordinator_file = o_.coordinator_file;
    flags.device = o_.device;
    GP_ASSIGN_OR_RETURN(
        flags, launch::apply_torchrun_env(
                   flags, [](const char* name) { return std::getenv(name); }, kMaxWorldSize));
    o_.rank = *flags.rank;
    o_.world_size = *flags.world_size;
    o_.coordinator = flags.coordinator;
    return gp::ok_status();
  }

  // The token; rank 0 hosts the coordinator, which needs one unless --insecure.
  gp::Status resolve_security() {
    GP_ASSIGN_OR_RETURN(o_.auth_token, resolve_token(token_));
    if (o_.rank != 0 || o_.external_coordinator) return gp::ok_status();
    return require_token("run --rank 0 (it hosts the coordinator)",
                         o_.coordinator.empty() ? "its coordinator's port" : o_.coordinator,
                         o_.auth_token, token_.insecure);
  }

  RunOptions o_;
  TokenFlags token_;
  CLI::Option* rank_flag_ = nullptr;
  CLI::Option* world_flag_ = nullptr;
};

}  // namespace

std::unique_ptr<Command> add_run_command(CLI::App& app) {
  return std::make_unique<RunCommand>(app);
}

}  // namespace gp::exec::daemon
