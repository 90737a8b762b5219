#!/usr/bin/env bash
# Jobs one can trust, with real faults injected into 3-rank CPU runs under graphpipe-launch: a
# frozen rank (SIGSTOP) is killed and blamed and the job re-planned without it; a killed launcher
# takes its ranks with it; SIGTERM/SIGINT stop at an agreed iteration with a final checkpoint,
# exit 143/130 and leave no process or ring behind (the logs stay), and --resume appends; a NaN
# loss stops the job (exit 3); the launcher's own conventions (--help, --version, --nprocs from
# the plan, output checks, logs).
set -u
exe=$1
plan_bin=$2
launch=$3
tmp=$4
rm -rf "$tmp" && mkdir -p "$tmp"
export GRAPHPIPE_RUNS_DIR="$tmp/graphpipe-runs"  # the launcher's logs stay in here
. "$(dirname "$0")/lib.sh"
export GP_EXECUTOR="$exe" GP_PLANNER="$plan_bin"
set -m  # background launchers get their own process group and may be sent SIGINT

"$plan_bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 3 \
  --batch 16 --micro-batches 4 --optimizer adam --out "$tmp/plan.pb" >/dev/null || exit 1
shm_before=$(ls /dev/shm 2>/dev/null | grep -c "^graphpipe-$(id -u)-")
# Ranks of this test still alive (their command lines name the test's directory).
ranks_alive() { pgrep -f -- "run --plan $tmp/" | wc -l; }
# Waits until FILE has a line matching PATTERN (at most 60 s).
wait_for() { for _ in $(seq 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# The pid of the rank R process of the current job.
rank_pid() { pgrep -f -- "run --plan $tmp/.* --rank $1( |$)" | head -1; }
nothing_left() {
  [ "$(ranks_alive)" -eq 0 ] &&
    [ "$(ls /dev/shm 2>/dev/null | grep -c "^graphpipe-$(id -u)-")" -le "$shm_before" ]
}

# 1. Launcher conventions.
"$launch" --help > "$tmp/help.txt" 2>&1; rc=$?
check "--help exits 0 and explains --nprocs" '[ $rc -eq 0 ] && grep -q "nprocs defaults to the plan" "$tmp/help.txt" && ! grep -q "^set -uo" "$tmp/help.txt"'
"$launch" --version > "$tmp/version.txt" 2>&1; rc=$?
check "--version prints the version" '[ $rc -eq 0 ] && grep -Eq "^graphpipe-launch [0-9]+\.[0-9]+" "$tmp/version.txt"'
"$launch" --plan "$tmp/plan.pb" --bogus > "$tmp/bogus.txt" 2>&1; rc=$?
check "an unknown argument exits 2" '[ $rc -eq 2 ] && grep -q "unknown argument" "$tmp/bogus.txt"'
"$launch" --plan "$tmp/plan.pb" --nprocs 4 > "$tmp/np.txt" 2>&1; rc=$?
check "--nprocs other than the plan's exits 2" '[ $rc -eq 2 ] && grep -q "the plan .* has 3 ranks" "$tmp/np.txt"'
"$launch" --plan "$tmp/plan.pb" --metrics-out "$tmp/no/such/dir/m.json" --run-dir "$tmp/r0" \
  > "$tmp/out.txt" 2>&1; rc=$?
check "an unwritable --metrics-out exits 2 before any rank starts" \
  '[ $rc -eq 2 ] && grep -q "does not exist" "$tmp/out.txt" && [ ! -e "$tmp/r0" ]'
timeout 120 "$launch" --plan "$tmp/plan.pb" --iterations 6 --log-every 3 --run-dir "$tmp/r1" \
  --metrics-out "$tmp/m1.json" > "$tmp/r1.log" 2>&1; rc=$?
check "--nprocs defaults to the plan's 3 ranks; per-rank logs and [rank r] prefixes" \
  '[ $rc -eq 0 ] && for r in 0 1 2; do [ -s "$tmp/r1/attempt-0/rank-$r.log" ] && grep -q "^\[rank $r\] " "$tmp/r1.log" || exit 1; done'
check "progress lines every --log-every iterations, with samples/s and ETA" \
  'grep -q "iteration 2: loss [0-9.]*, [0-9.]* samples/s, 3 of 6 done, ETA" "$tmp/r1.log" && grep -q "iteration 5: loss" "$tmp/r1.log" && ! grep -q "iteration 3: loss" "$tmp/r1.log"'

# The same --run-dir again: its last job's coordinator address must not mislead the new ranks.
timeout 120 "$launch" --plan "$tmp/plan.pb" --iterations 6 --log-every 3 --run-dir "$tmp/r1" \
  --metrics-out "$tmp/m1-again.json" --timeout 10 > "$tmp/r1-again.log" 2>&1; rc=$?
check "a second job in the same --run-dir trains (exit 0, the same losses)" \
  '[ $rc -eq 0 ] && [ "$(losses "$tmp/m1-again.json")" = "$(losses "$tmp/m1.json")" ]'

# torchrun's variables: RANK, WORLD_SIZE, MASTER_ADDR:MASTER_PORT instead of flags; LOCAL_RANK
# picks the GPU of --device cuda.
port=$((29000 + RANDOM % 1000))
for r in 0 1 2; do
  RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port GP_AUTH_TOKEN=t0k \
    timeout 60 "$exe" --log-level warn run --plan "$tmp/plan.pb" --iterations 3 \
    --store-dir "$tmp/store-env" > "$tmp/env-$r.log" 2>&1 &
done
env_rc=0
for r in 0 1 2; do wait -n || env_rc=1; done
check "ranks started with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT only train (exit 0)" '[ $env_rc -eq 0 ]'
LOCAL_RANK=3 timeout 30 "$exe" run --plan "$tmp/plan.pb" --rank 0 --world-size 3 --device cuda \
  --coordinator 127.0.0.1:0 --insecure > "$tmp/cuda.log" 2>&1; rc=$?
check "--device cuda opens the GPU of LOCAL_RANK (cuda:3; none here, so it fails naming it)" \
  '[ $rc -ne 0 ] && grep -q "cuda:3" "$tmp/cuda.log" || nvidia-smi -L >/dev/null 2>&1'

# A FIFO left where a rank's log goes (a --log-dir given again): refused, never waited on; the
# rank that could not start is the one blamed, and nothing is left running.
mkdir -p "$tmp/fifo-run/attempt-0" && mkfifo "$tmp/fifo-run/attempt-0/rank-1.log"
timeout 60 "$launch" --plan "$tmp/plan.pb" --iterations 4 --kill-grace 1 --log-dir "$tmp/fifo-run" \
  > "$tmp/fifo.log" 2>&1; rc=$?
check "a FIFO at a rank's log: exit 127 within the timeout, naming the file and blaming that rank" \
  '[ $rc -eq 127 ] && grep -q "fifo-run/attempt-0/rank-1.log is not a regular file" "$tmp/fifo.log" && grep -q "rank 1 could not be started (exit status 127)" "$tmp/fifo.log" && nothing_left'

# 2. A frozen rank: the coordinator declares it dead within the heartbeat timeout, the launcher
#    kills it, blames it (not a healthy rank), and re-plans without its device.
T=4
"$launch" --plan "$tmp/plan.pb" --iterations 400000 --timeout $T --kill-grace 1 --log-every 500 \
  --checkpoint-dir "$tmp/ck-frozen" --checkpoint-every 500 --on-failure replan \
  --max-restarts 1 --run-dir "$tmp/r2" > "$tmp/frozen.log" 2>&1 &
launcher=$!
wait_for "$tmp/frozen.log" "iteration 999: loss"
victim=$(rank_pid 1)
kill -STOP "$victim"
stopped_at=$(date +%s.%N)
wait_for "$tmp/frozen.log" "re-planning without rank" || true
replanned_at=$(date +%s.%N)
check "the frozen rank 1 is blamed and stopped within 2 x the heartbeat timeout" \
  'grep -q "rank 1 failed (exit status 137, stopped by the launcher): rank 1 stopped responding" "$tmp/frozen.log" && awk -v a=$stopped_at -v b=$replanned_at -v t=$T "BEGIN { exit !(b - a < 2 * t) }"'
check "the frozen process is gone" '! kill -0 "$victim" 2>/dev/null'
wait_for "$tmp/frozen.log" "re-planned for 2 devices"  # the new plan is written by then
check "re-planning excludes rank 1, the frozen one" \
  'grep -q "re-planning without rank 1 (2 devices left)" "$tmp/frozen.log" && "$plan_bin" inspect --plan "$tmp/ck-frozen/plan-after-failure-1.pb" | grep -q "1 x 2 cpu-process"'
# The re-planned job trains on; stop it with SIGTERM (section 4 checks that path in full).
wait_for "$tmp/frozen.log" "resuming from"
sleep 2
kill -TERM "$launcher"
wait "$launcher"; rc=$?
check "the re-planned job ran and stopped on SIGTERM (exit 143)" '[ $rc -eq 143 ] && grep -q "stopped after iteration" "$tmp/frozen.log"'
check "nothing of the job is left running, nor rings in /dev/shm" nothing_left

# 3. The launcher killed: its ranks follow (each asked for SIGTERM on its parent's death).
"$launch" --plan "$tmp/plan.pb" --iterations 400000 --timeout $T --log-every 500 \
  --run-dir "$tmp/r3" > "$tmp/orphan.log" 2>&1 &
launcher=$!
wait_for "$tmp/orphan.log" "iteration 499: loss"
# Meanwhile its run directory serves no second job (whose clean-up would delete the first's
# beacon and coordinator file).
timeout 60 "$launch" --plan "$tmp/plan.pb" --iterations 2 --run-dir "$tmp/r3" \
  > "$tmp/r3-second.log" 2>&1; rc=$?
check "a second launcher in a live job's --run-dir exits 2, naming the first's pid" \
  "[ \$rc -eq 2 ] && grep -q 'another job (launcher pid $launcher) still uses it' '$tmp/r3-second.log' && [ -s '$tmp/r3/launcher-beacon' ]"
kill -KILL "$launcher"
wait "$launcher" 2>/dev/null
for _ in $(seq 100); do [ "$(ranks_alive)" -eq 0 ] && break; sleep 0.1; done
check "after SIGKILL of the launcher no rank survives (10 s)" nothing_left
check "its ranks stopped at an iteration boundary rather than dying" \
  'grep -q "stopped after iteration" "$tmp/r3/attempt-0/rank-0.log"'
check "its supervisor saw the launcher go, had the ranks stop, and is gone too" \
  "grep -q 'the launcher (pid $launcher) is gone' '$tmp/orphan.log' && ! pgrep -f 'launcher supervise .*$tmp/r3/' > /dev/null"
timeout 120 "$launch" --plan "$tmp/plan.pb" --iterations 2 --run-dir "$tmp/r3" \
  > "$tmp/r3-after.log" 2>&1; rc=$?
check "once they are gone, the killed launcher's --run-dir takes a new job" '[ $rc -eq 0 ]'

# 3b. The supervisor killed (it keeps the beacon fresh and echoes the logs): the ranks stop as
#     their parent dies, and the launcher exits with its status, saying so.
"$launch" --plan "$tmp/plan.pb" --iterations 400000 --timeout $T --log-every 500 \
  --run-dir "$tmp/r3b" > "$tmp/r3b.log" 2>&1 &
launcher=$!
wait_for "$tmp/r3b.log" "iteration 499: loss"
kill -KILL "$(pgrep -P "$launcher" -f "launcher supervise")"
wait "$launcher"; rc=$?
for _ in $(seq 100); do [ "$(ranks_alive)" -eq 0 ] && break; sleep 0.1; done
check "SIGKILL of the supervisor: the launcher exits 137 saying so, and no rank survives (10 s)" \
  '[ $rc -eq 137 ] && grep -q "supervising the ranks failed (exit 137)" "$tmp/r3b.log" && nothing_left'
check "its ranks stopped at an iteration boundary, and their logs say so (they write them)" \
  'grep -q "stopped after iteration" "$tmp/r3b/attempt-0/rank-0.log"'

# 4. SIGTERM while checkpointing every 50 iterations: a final checkpoint at the agreed
#    iteration, exit 143, nothing left in /dev/shm, the logs kept in ./graphpipe-runs/JOB-ID;
#    --resume carries on and the metrics of both runs append.
mkdir -p "$tmp/cwd4"  # where the launcher makes its log directory
(cd "$tmp/cwd4" && unset GRAPHPIPE_RUNS_DIR && exec "$launch" --plan "$tmp/plan.pb" --iterations 400000 --timeout $T \
  --log-every 500 --checkpoint-dir "$tmp/ck" --checkpoint-every 50 --metrics-out "$tmp/m4.json") \
  > "$tmp/term.log" 2>&1 &
launcher=$!
wait_for "$tmp/term.log" "iteration 999: loss"
run_dir=$(ls -d "$tmp"/cwd4/graphpipe-runs/job-* | head -1)
token=$(cat "$run_dir/auth-token")
check "the launcher made a token (mode 0600) that is in no process's command line" \
  '[ ${#token} -ge 32 ] && [ "$(stat -c %a "$run_dir/auth-token")" = 600 ] && ! grep -qF -- "$token" /proc/[0-9]*/cmdline 2>/dev/null'
coord=$(cat "$run_dir/attempt-0/coordinator")
"$exe" status --coordinator "$coord" > "$tmp/status-noauth.txt" 2>&1; rc_noauth=$?
"$exe" status --coordinator "$coord" --auth-token-file "$run_dir/auth-token" --json \
  > "$tmp/status.json" 2>&1; rc_status=$?
check "status needs the token; with --auth-token-file it shows loss and samples/s per rank" \
  '[ $rc_noauth -ne 0 ] && grep -qi "token" "$tmp/status-noauth.txt" && [ $rc_status -eq 0 ] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); r=d[\"ranks\"]; assert len(r)==3 and r[2][\"loss\"] is not None and all(x[\"samples_per_s\"]>0 for x in r)" "$tmp/status.json"'
kill -TERM "$launcher"
wait "$launcher"; rc=$?
stop=$(sed -n 's/.*stopping after iteration \([0-9]*\).*/\1/p' "$tmp/term.log" | head -1)
check "SIGTERM: exit 143, every rank stopped after the same iteration, the launcher says so last" \
  '[ $rc -eq 143 ] && [ -n "$stop" ] && [ "$(grep -c "rank [0-9]: stopped after iteration $stop of" "$tmp/term.log")" -eq 3 ] && tail -1 "$tmp/term.log" | grep -q "^graphpipe-launch: stopped after iteration $stop of 400000; checkpoint $tmp/ck/iter-$stop; resume with: .* --resume$"'
check "a final checkpoint of that iteration, and no torn files" \
  '[ "$(cat "$tmp/ck/LATEST")" = "iter-$stop" ] && [ -f "$tmp/ck/iter-$stop/MANIFEST.pbtxt" ] && [ -z "$(find "$tmp/ck" -name "*.tmp")" ]'
check "the logs are kept in the run directory, its beacon is gone and /dev/shm is clean" \
  '[ -n "$run_dir" ] && grep -q "stopped after iteration $stop" "$run_dir/attempt-0/rank-0.log" && [ ! -e "$run_dir/launcher-beacon" ] && nothing_left'
timeout 120 "$launch" --plan "$tmp/plan.pb" --iterations $((stop + 5)) --timeout $T \
  --checkpoint-dir "$tmp/ck" --resume --metrics-out "$tmp/m4.json" > "$tmp/resume.log" 2>&1; rc=$?
check "--resume continues after iteration $stop and the metrics append (0..$((stop + 4)))" \
  '[ $rc -eq 0 ] && grep -q "resuming after iteration $stop" "$tmp/resume.log" && [ "$(iteration_losses "$tmp/m4.json" | cut -d" " -f1 | tr "\n" " ")" = "$(seq -s " " 0 $((stop + 4))) " ]'

# 5. SIGINT: the same, exit 130.
"$launch" --plan "$tmp/plan.pb" --iterations 400000 --timeout $T --log-every 500 \
  --run-dir "$tmp/r5" > "$tmp/int.log" 2>&1 &
launcher=$!
wait_for "$tmp/int.log" "iteration 499: loss"
kill -INT "$launcher"
wait "$launcher"; rc=$?
check "SIGINT: exit 130 after an agreed iteration" '[ $rc -eq 130 ] && grep -q "stopped after iteration" "$tmp/int.log" && nothing_left'

# 6. A loss that becomes non-finite stops the job with exit 3, naming the iteration.
"$plan_bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 3 \
  --batch 16 --micro-batches 4 --lr 1e30 --out "$tmp/nan.pb" >/dev/null || exit 1
timeout 120 "$launch" --plan "$tmp/nan.pb" --iterations 50 --timeout $T > "$tmp/nan.log" 2>&1; rc=$?
check "a NaN/inf loss: exit 3, naming the iteration and --allow-nonfinite" \
  '[ $rc -eq 3 ] && grep -Eq "the loss is (NaN|inf|-inf) at iteration [0-9]+" "$tmp/nan.log" && grep -q "allow-nonfinite" "$tmp/nan.log" && nothing_left'
timeout 120 "$launch" --plan "$tmp/nan.pb" --iterations 50 --timeout $T -- --allow-nonfinite \
  > "$tmp/nan-ok.log" 2>&1; rc=$?
check "--allow-nonfinite trains on (exit 0)" '[ $rc -eq 0 ]'

# 7. A checkpoint write that fails for real on one rank: its files may not exceed 10 MiB (ulimit
#    -f, SIGXFSZ ignored, so the write gets EFBIG), less than one of its operators' checkpoint
#    files (12 MiB: 256 x 4096 weights and two Adam moments) and more than its shared-memory
#    rings (8 MiB). The job aborts within 2 x the heartbeat timeout, exits non-zero naming that
#    rank, and leaves neither a torn checkpoint nor a ring behind.
wide='zoo:tiny-mmt?hidden=256&ffn=4096'
"$plan_bin" zoo export "${wide#zoo:}" --out "$tmp/wide.json" 2>/dev/null || exit 1
python3 - "$tmp/wide.json" "$tmp/wide-stages.json" <<'PY'
import json, sys
ops = [op["id"] for op in json.load(open(sys.argv[1]))["ops"]]
stages = [{"ops": [o for o in ops if o.startswith(p)]} for p in ("b0.", "b1.")]
stages.append({"ops": [o for o in ops if not o.startswith(("b0.", "b1."))]})
json.dump({"stages": stages}, open(sys.argv[2], "w"))
PY
"$plan_bin" --log-level warn lower --assignment "$tmp/wide-stages.json" --model "$wide" \
  --cluster cpu-local --devices 3 --batch 16 --micro-batches 4 --optimizer adam \
  --out "$tmp/wide.pb" >/dev/null || exit 1
# The rank of branch 1's stage, from the plan's shape.
victim=$("$plan_bin" --log-level error inspect --plan "$tmp/wide.pb" --json |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["stage_ranks"][1][0])')
printf '%s\n' '#!/usr/bin/env bash' \
  "# Rank $victim only: files of at most 10 MiB, and a write past that fails instead of killing it." \
  "case \" \$* \" in *\" run \"*\" --rank $victim \"*) trap '' XFSZ; ulimit -f 10240 ;; esac" \
  "exec $(printf '%q' "$exe") \"\$@\"" > "$tmp/efbig-executor"
chmod +x "$tmp/efbig-executor"
GP_EXECUTOR="$tmp/efbig-executor" "$launch" --plan "$tmp/wide.pb" --iterations 1000 \
  --timeout $T --checkpoint-dir "$tmp/ck-efbig" --checkpoint-every 5 --run-dir "$tmp/r7" \
  > "$tmp/efbig.log" 2>&1 &
launcher=$!
wait_for "$tmp/efbig.log" "iteration 4: loss"
written_at=$(date +%s.%N)  # the checkpoint after iteration 4 is being written
wait "$launcher"; rc=$?
ended_at=$(date +%s.%N)
check "a failed checkpoint write on rank $victim: the job fails within 2 x the heartbeat timeout" \
  '[ $rc -ne 0 ] && awk -v a=$written_at -v b=$ended_at -v t=$T "BEGIN { exit !(b - a < 2 * t) }"'
check "the launcher blames rank $victim, with the write's error" \
  'grep -q "graphpipe-launch: rank $victim failed (exit status [0-9]*).*File too large" "$tmp/efbig.log"'
check "no torn checkpoint is left (the launcher removed it), nor temporary files, rings or ranks" \
  'grep -q "removed a torn checkpoint: $tmp/ck-efbig/iter-4" "$tmp/efbig.log" && [ -z "$(ls -A "$tmp/ck-efbig")" ] && nothing_left'

# 8. Blame in a 4-rank job (two branch stages, ranks 0 and 1, feeding a head replicated on ranks
#    2 and 3): the rank that died is named by every survivor and by the headline, not the first
#    neighbour that noticed; when rank 0 (the coordinator) dies, nobody can tell, and the
#    survivors say they lost it instead of blaming each other.
"$plan_bin" zoo export tiny-mmt --out "$tmp/tiny-mmt.json" 2>/dev/null || exit 1
python3 - "$tmp/tiny-mmt.json" "$tmp/four-ranks.json" <<'PY'
import json, sys
ops = [op["id"] for op in json.load(open(sys.argv[1]))["ops"]]
stages = [{"ops": [o for o in ops if o.startswith(p)]} for p in ("b0.", "b1.")]
stages.append({"ops": [o for o in ops if not o.startswith(("b0.", "b1."))], "replicas": 2})
json.dump({"stages": stages}, open(sys.argv[2], "w"))
PY
"$plan_bin" --log-level warn lower --assignment "$tmp/four-ranks.json" --model zoo:tiny-mmt \
  --cluster cpu-local --devices 4 --batch 16 --micro-batches 4 --optimizer adam \
  --out "$tmp/plan4.pb" >/dev/null || exit 1
# error_line R LOG: rank R's own error line.
error_line() { grep "^\[rank $1\] graphpipe-executor: error: " "$2" | tail -1; }
timeout 120 "$launch" --plan "$tmp/plan4.pb" --iterations 1000 --timeout $T --kill-grace 5 \
  --run-dir "$tmp/r8" -- --kill-rank-at 2:5 > "$tmp/kill2.log" 2>&1; rc=$?
check "SIGKILL of rank 2 of 4: every survivor's error names rank 2, not the neighbour that noticed" \
  '[ $rc -ne 0 ] && for r in 0 1 3; do error_line $r "$tmp/kill2.log" | grep -q "error: job aborted: rank 2 stopped responding" || exit 1; done'
check "the coordinator's abort and the launcher's headline name rank 2" \
  'grep -q "\[error\] job [^ ]* aborted: rank 2 stopped responding" "$tmp/kill2.log" && grep -q "^graphpipe-launch: rank 2 failed (exit status 137): rank 2 stopped responding (no heartbeat for [0-9]* ms); rank [013] lost it" "$tmp/kill2.log" && nothing_left'
timeout 120 "$launch" --plan "$tmp/plan4.pb" --iterations 1000 --timeout $T --kill-grace 5 \
  --run-dir "$tmp/r9" -- --kill-rank-at 0:5 > "$tmp/kill0.log" 2>&1; rc=$?
check "SIGKILL of rank 0 of 4: the headline blames rank 0 and every survivor says it lost rank 0" \
  '[ $rc -ne 0 ] && grep -q "^graphpipe-launch: rank 0 failed (exit status 137)" "$tmp/kill0.log" && for r in 1 2 3; do error_line $r "$tmp/kill0.log" | grep -q "error: lost the coordinator (rank 0) at " || exit 1; done'
check "no survivor blames another survivor" \
  '! grep "graphpipe-executor: error: " "$tmp/kill0.log" | grep -Eq "rank [123] (\(pid [0-9]*\) )?(exited|aborted|failed|stopped)|from rank [123]" && nothing_left'

# 9. A stop before training starts: rank 2 waits for a coordinator file that never comes (as a
#    rank waits for a host that is not up yet). SIGINT to the launcher ends every rank at once
#    (nothing to agree on or save yet), not after the registration timeout; exit 130 and the
#    line that says how to start again.
printf '%s\n' '#!/usr/bin/env bash' \
  "case \" \$* \" in *\" run \"*\" --rank 2 \"*)" \
  '  args=(); for a in "$@"; do case "$a" in */coordinator) a=/nonexistent/coordinator ;; esac; args+=("$a"); done' \
  "  exec $(printf '%q' "$exe") \"\${args[@]}\" ;; esac" \
  "exec $(printf '%q' "$exe") \"\$@\"" > "$tmp/lost-executor"
chmod +x "$tmp/lost-executor"
GP_EXECUTOR="$tmp/lost-executor" "$launch" --plan "$tmp/plan.pb" --iterations 5 --timeout 60 \
  --checkpoint-dir "$tmp/ck-early" --run-dir "$tmp/r10" > "$tmp/early.log" 2>&1 &
launcher=$!
wait_for "$tmp/early.log" "coordinator at"
sleep 1
kill -INT "$launcher"
sent_at=$(date +%s.%N)
wait "$launcher"; rc=$?
ended_at=$(date +%s.%N)
check "SIGINT while a rank waits to register: every rank exits at once, exit 130" \
  '[ $rc -eq 130 ] && awk -v a=$sent_at -v b=$ended_at "BEGIN { exit !(b - a < 10) }" &&
   [ "$(grep -c "SIGINT before the job started: exiting" "$tmp/early.log")" -eq 3 ] && nothing_left'
check "its last line says no checkpoint exists yet and how to start again" \
  'tail -1 "$tmp/early.log" | grep -q "^graphpipe-launch: stopped before the ranks agreed on an iteration; no checkpoint yet; start again with: .* --checkpoint-dir $tmp/ck-early --run-dir $tmp/r10$"'

# 10. A rank that misses the signal: it starts slowly (its wrapper ignores SIGINT, then sleeps
#     before it runs the rank), so the SIGINT passed on to it is lost. The launcher's beacon says
#     the job is stopping; the rank takes the stop from there once its handlers are in place, and
#     the job still ends at once with exit 130 (not a registration timeout blamed on that rank).
printf '%s\n' '#!/usr/bin/env bash' \
  "case \" \$* \" in *\" run \"*\" --rank 2 \"*) trap '' INT; sleep 3 ;; esac" \
  "exec $(printf '%q' "$exe") \"\$@\"" > "$tmp/slow-executor"
chmod +x "$tmp/slow-executor"
GP_EXECUTOR="$tmp/slow-executor" "$launch" --plan "$tmp/plan.pb" --iterations 5 --timeout 60 \
  --run-dir "$tmp/r11" > "$tmp/missed.log" 2>&1 &
launcher=$!
sleep 1.5  # ranks 0 and 1 wait for rank 2 to register; rank 2 is still in its sleep
kill -INT "$launcher"
sent_at=$(date +%s.%N)
wait "$launcher"; rc=$?
ended_at=$(date +%s.%N)
check "a rank that missed the SIGINT takes it from the beacon: exit 130 within seconds" \
  '[ $rc -eq 130 ] && awk -v a=$sent_at -v b=$ended_at "BEGIN { exit !(b - a < 10) }" &&
   grep -q "^\[rank 2\] graphpipe-executor: SIGINT before the job started: exiting" "$tmp/missed.log" &&
   nothing_left'

exit $fail
