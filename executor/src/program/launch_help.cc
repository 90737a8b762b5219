// The long help of `graphpipe-executor launch` (scripts/graphpipe-launch --help): what a user
// needs to know beyond the flags' one-line descriptions.
#include "launch_help.h"

namespace gp::exec::daemon {

std::string launch_description() {
  return R"(Starts every rank of a plan and supervises them: rank 0 hosts the coordinator (gRPC control plane), the data plane meets through a run directory, and the launcher exits non-zero naming the rank the coordinator blamed if the job fails.)";
}

std::string launch_help_text() {
  return R"(Flags after `--` go to every rank's `graphpipe-executor run` (e.g. `-- --measure-every 5`).

--nprocs defaults to the plan's rank count (and must equal it when given). --device cuda gives
each rank the GPU of its local rank on its host (cuda:LOCAL_RANK, counted within
CUDA_VISIBLE_DEVICES when that is set). Each rank's output goes to RUN_DIR/attempt-K/rank-R.log
and, prefixed "[rank R]", to the console; rank 0 logs progress every --log-every iterations.

Logs: every job has an id (job-<16 hex digits>), the coordinator's too. Its run directory
RUN_DIR is --log-dir D (--run-dir D: the same), by default $GRAPHPIPE_RUNS_DIR/JOB-ID
($GRAPHPIPE_RUNS_DIR defaults to ./graphpipe-runs, e.g. a scratch filesystem's); it is kept
after the job, whatever its end, and serves one job at a time: a launcher given the RUN_DIR of
a job whose ranks still run exits 2, naming it. At start the launcher prints the job id, RUN_DIR
and the coordinator's address, which it keeps in RUN_DIR/coordinator: `graphpipe-executor
status --run-dir RUN_DIR` shows the job (address and token read from there).

Where ranks run: local processes by default (loopback only). --hostfile F: one line per host,
"HOST SLOTS [ADDRESS]" or DeepSpeed's/MPI's "HOST slots=N [max_slots=M]", ranks filled in order
(the first SLOTS ranks on the first host, ...; a host holds whole plan nodes, never part of one);
each rank starts with `CMD HOST executor ...` (CMD defaults to "ssh -o BatchMode=yes") and binds
its control and data plane to one address, never to all interfaces: the host's ADDRESS, else
the address of interface --iface on it, else its address on the route to the first host (whose
address is its ADDRESS, --iface address or what its name resolves to). The coordinator listens
on the first host's address, port P (default 29500). The run directory (Gloo's rendezvous) and
checkpoint directory must be on a filesystem every host shares. --slurm: inside an
allocation, `srun` starts one task per rank, each taking its rank from SLURM_PROCID; the
coordinator runs on the first node, each task binds to --iface's address or its address on the
route to the coordinator.

Per node, as torchrun: --nnodes N --node-rank K --master-addr A [--master-port P (29500)]
[--nproc-per-node P (the plan's ranks / N)] runs one launcher on each node, started by you or
your scheduler; node K's launcher starts ranks K*P .. K*P+P-1 there (LOCAL_RANK 0..P-1), rank 0
(node 0) hosts the coordinator at A:P, and ranks meet through it (`run --rendezvous
coordinator`): no directory is shared and no node reaches another over ssh. Each rank binds to
--iface's address, else its address on the route to A. Every node's launcher needs the same
token: --auth-token-file F (the same contents on every node, mode 0600) or $GP_AUTH_TOKEN; the job id is
--job-id, else derived from the token, A:P and the plan, so it is the same on every node.
Node 0 prints the job's metrics and blames a failed rank; node K reports its own ranks.
--checkpoint-dir then must be a directory every node shares; --on-failure replan is refused.

Every job has a token ($GP_AUTH_TOKEN, else a fresh random one) in RUN_DIR/auth-token, mode
0600; ranks read it from there (--auth-token-file: the run directory is on a filesystem every
host shares), so it never appears in a command line. `graphpipe-executor status --coordinator
ADDR --auth-token-file RUN_DIR/auth-token` shows the job. --auth-token T is refused (exit 2):
argv is visible to every local user.

--tls-cert C --tls-key K --tls-ca CA (all three, PEM files every host can read at the same
paths): the control plane runs over mutual TLS. Rank 0's coordinator serves with C and K and
accepts only clients whose certificate chains to CA; every rank connects with all three, so C
must name the coordinator's address (IP or DNS subjectAltName). The files are checked before
any rank starts (exit 2 naming the flag and the path) and ranks get their absolute paths, never
their contents. `status` then needs the same flags. Without them, ranks that may span hosts
(--hostfile, --slurm, --nnodes) run mutual TLS with the job's own CA, derived from its token
(each node's launcher derives the same), in RUN_DIR/tls (`status --run-dir` reads it there);
--no-tls keeps such a job's control plane plaintext.

Supervision: when the coordinator declares a rank failed (it died, reported an error, or
stopped heartbeating), that rank is sent SIGTERM and, --kill-grace seconds later, SIGKILL;
any rank still running --kill-grace after the job failed is stopped the same way. Ranks die
with the launcher: each stops as on SIGTERM when its parent dies, or when the launcher's beacon
in the run directory has not changed for --orphan-timeout seconds (srun tasks and ssh
sessions can outlive the launcher).

Stopping: SIGTERM/SIGINT to the launcher (^C in its terminal reaches the ranks too) are passed
to the ranks, which stop after one iteration they agree on, write a final checkpoint when
--checkpoint-dir is given, and exit; what they print meanwhile still reaches the console. The
launcher then exits 143/130, its last line
  graphpipe-launch: stopped after iteration N of M; checkpoint C/iter-N; resume with: COMMAND
where COMMAND is this command line with --resume added. A second signal kills the ranks at once
(the newest committed checkpoint is named instead).

Checkpoints: --checkpoint-dir C (--checkpoint-every K: after every K iterations; always at a
requested stop). --resume continues from the newest checkpoint in C and exits 2 before any rank
starts when C holds none. --resume-if-present resumes when C holds a checkpoint and otherwise
starts from iteration 0 with one warning: the same command line serves a job's first start and
its requeues (Slurm --requeue, a preempted job), as Megatron's --load does.

--on-failure replan: when a rank fails, the others stop (the coordinator aborts them), the plan
is searched again without the blamed rank's device (graphpipe-plan replan; the new plan is kept
in the checkpoint directory), and training resumes from the last checkpoint with one rank
fewer; at most --max-restarts times.

Measured costs: rank 0 gathers every rank's measured op times (`run --measure-every K`, default
every 10 iterations, 2 with --adapt; `-- --measure-every K` to change) into a profile database,
by default RUN_DIR/attempt-K/measured-profile.pbtxt (K: the attempt, 0 first; with
--measured-profile-out P, P), always written, so that a re-plan can read it (device kinds
"<cluster device>/rank<R>"). --slowdown RANK:FACTOR (repeatable) makes that rank's compute
FACTOR (>= 1) times slower (`run --slowdown`), a straggler for tests and benchmarks; losses are
unchanged. RANK is the first plan's rank: after a re-plan the slowdown stays with its device.

--adapt: re-plan the running job from what it measures. --adapt-warmup K iterations after each
start (the first, and every switch) and every K iterations after that, the launcher runs
`graphpipe-plan adapt` on the attempt's measured profile and metrics: each rank's measured time
over its device's modelled time gives its speed; a rank clearly slower than the fastest becomes
a device of its own, slower kind; the plan is searched again for that cluster and the running
plan priced the same way. The first check always searches; later ones only when the measured
rate fell --adapt-drop (10%) below the plan's prediction times the first check's calibration
(measured / predicted). When the new plan is predicted --adapt-min-gain (10%) faster and the
time it saves over the iterations left exceeds twice the measured cost of switching (a
restart, measured at this attempt's start, plus a stop with a checkpoint, measured at the last
switch or taken as the restart's), and --adapt-confirm (2) checks in a row found so (a check
that follows one that did searches whatever the rate: one check can catch a rank in a passing
hiccup), the ranks stop after an agreed iteration with a checkpoint and the job resumes under the
new plan (kept as C/plan-adapted-N.pb), the losses continuing
exactly; at most --adapt-max-switches times. Every check is logged ("graphpipe-launch: adapt:
..." on the console and in RUN_DIR/adapt.log): the measured and modelled time of each rank, the
candidate, the predicted gain, and whether it switches and why. --adapt needs --checkpoint-dir;
the metrics go to --metrics-out when it is a .jsonl file, else to RUN_DIR/metrics.jsonl.
--adapt-profile DB: the profile database the plan was searched with (its costs are what the
measured times are compared with; without it the analytic model's errors can read as a slow
device). Not with --slurm or per node (--nnodes).

Exit status: 0; 2 for bad arguments; 3 when the loss became NaN/inf; 130/143 when stopped by
SIGINT/SIGTERM; otherwise the failure's (the blamed rank's own status when it exited by itself).


Each attempt's ranks run under `graphpipe-executor launcher supervise`, a process of its own:
each rank writes RUN_DIR/attempt-K/rank-R.log, which the supervisor echoes prefixed; it passes
signals on, rewrites the beacon and stops a failed job's ranks; when the launcher dies, it has the
ranks stop at an agreed iteration. scripts/graphpipe-launch is `graphpipe-executor launch`.)";
}

}  // namespace gp::exec::daemon
