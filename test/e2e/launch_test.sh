#!/usr/bin/env bash
# Multi-process training on loopback: ranks as separate processes with the gRPC control plane
# and the Gloo data plane. Equivalence with the reference, and failure semantics: a killed or
# hung rank stops every other rank within seconds with one reason naming it; a wrong plan, a
# wrong token and an unreachable coordinator are clear errors.
set -u
exe=$1
plan_bin=$2
launch=$3
tmp=$4
rm -rf "$tmp" && mkdir -p "$tmp"
export GRAPHPIPE_RUNS_DIR="$tmp/graphpipe-runs"  # the launcher's logs stay in here
. "$(dirname "$0")/lib.sh"

"$plan_bin" --log-level warn search --model zoo:tiny-candle-uno --cluster cpu-local --devices 3 \
  --batch 16 --micro-batches 4 --optimizer sgd --out "$tmp/plan.pb" >/dev/null || exit 1
"$plan_bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 3 \
  --batch 16 --micro-batches 4 --optimizer sgd --out "$tmp/other.pb" >/dev/null || exit 1

# 1. A launched 3-process job trains exactly like the single-process reference.
GP_EXECUTOR="$exe" timeout 120 "$launch" --plan "$tmp/plan.pb" --nprocs 3 --iterations 4 \
  --metrics-out "$tmp/launch.json" --trace "$tmp/trace.json" > "$tmp/launch.log" 2>&1; rc=$?
check "3-process launch exits 0" '[ $rc -eq 0 ]'
check "the measured trace has forwards and backwards of every rank and transfers" \
  '(for r in 0 1 2; do grep -q "\"name\":\"rank $r (stage" "$tmp/trace.json" || exit 1; done) && grep -q "\"name\":\"F0\"" "$tmp/trace.json" && grep -q "\"name\":\"B0\"" "$tmp/trace.json" && grep -q "\"cat\":\"transfer\"" "$tmp/trace.json" && ! ls "$tmp"/trace.json.rank* >/dev/null 2>&1'
"$exe" --log-level warn reference --model zoo:tiny-candle-uno --batch 16 --iterations 4 --lr 0.01 \
  --metrics-out "$tmp/ref.json"
check "its losses equal the reference's" '[ -s "$tmp/launch.json" ] && [ "$(losses "$tmp/launch.json")" = "$(losses "$tmp/ref.json")" ]'

# 1a. Started from a shell that ignores SIGCHLD and with stdin, stdout and stderr closed but one
#     (as some schedulers' wrappers start jobs), with its hosts on stdin: the launcher still waits
#     for its own children and the ranks keep their logs.
printf '#!/bin/sh\nshift\nexec sh -c "$*"\n' > "$tmp/here-shell"  # "HOST WORDS...": run WORDS here
chmod +x "$tmp/here-shell"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# (The trap goes after `timeout`, which handles SIGCHLD itself and so resets it for what it runs.)
ignoring_chld() { timeout 120 bash -c 'trap "" CHLD; exec "$0" "$@"' "$@"; }
check "the stand-in starts its command with SIGCHLD ignored" \
  '[ $(( 0x$(ignoring_chld grep SigIgn /proc/self/status | awk "{print \$2}") & 0x10000 )) -ne 0 ]'
printf '# host slots address\nlocalhost 3 127.0.0.1\n' |
  GP_EXECUTOR="$exe" ignoring_chld "$launch" --plan "$tmp/plan.pb" \
    --iterations 2 --hostfile - --remote-shell "$tmp/here-shell" --port "$port" --no-tls \
    --run-dir "$tmp/r-odd" 2> "$tmp/odd.log" >&-; rc=$?
check "an ignored SIGCHLD, closed stdout and hosts on stdin: exit 0, logs kept" \
  '[ $rc -eq 0 ] && grep -q "iteration 1: loss" "$tmp/r-odd/attempt-0/rank-0.log"'

# A token on the launcher's command line is refused before anything starts.
GP_EXECUTOR="$exe" timeout 20 "$launch" --plan "$tmp/plan.pb" --auth-token s3cret \
  > "$tmp/argv-token.log" 2>&1; rc=$?
check "graphpipe-launch --auth-token VALUE is refused (exit 2), naming RUN_DIR/auth-token" \
  '[ $rc -eq 2 ] && grep -q -- "--auth-token: a token in argv is visible .*RUN_DIR/auth-token" "$tmp/argv-token.log"'

# Processes started by hand read the job's token from a file (mode 0600), never from argv.
(umask 077 && echo s3cret > "$tmp/token" && echo wrong > "$tmp/wrong-token")
# 1b. The daemon's flag form, with a standalone coordinator (--coordinator-only).
mkdir -p "$tmp/standalone"
"$exe" --coordinator-only --plan "$tmp/plan.pb" --world-size 3 --coordinator 127.0.0.1:0 \
  --coordinator-file "$tmp/standalone/coordinator" --timeout 10 --auth-token-file "$tmp/token" \
  > "$tmp/standalone/coord.log" 2>&1 &
coord=$!
rank_pids=()
for r in 0 1 2; do
  "$exe" --plan "$tmp/plan.pb" --rank "$r" --world-size 3 --external-coordinator --iterations 2 \
    --auth-token-file "$tmp/token" --coordinator-file "$tmp/standalone/coordinator" --store-dir "$tmp/standalone/store" \
    > "$tmp/standalone/rank$r.log" 2>&1 &
  rank_pids+=($!)
done
codes=""
for p in "${rank_pids[@]}" "$coord"; do wait "$p"; codes="$codes $?"; done
check "ranks in the flag form finish with a standalone coordinator (codes:$codes)" '[ "$codes" = " 0 0 0 0" ]'

# Starts ranks 0..2 of a long job in the background (pids in $pids), in run dir $1.
start_job() {
  local dir=$1; shift
  mkdir -p "$dir"
  pids=()
  for r in 0 1 2; do
    local extra=()
    [ "$r" -eq 0 ] && extra=(--coordinator 127.0.0.1:0)
    "$exe" run --plan "$tmp/plan.pb" --world-size 3 --rank "$r" --iterations 100000000 \
      --timeout 2 --heartbeat-ms 100 --coordinator-file "$dir/coordinator" \
      --auth-token-file "$tmp/token" --store-dir "$dir/store" "${extra[@]}" "$@" \
      > "$dir/rank$r.log" 2>&1 &
    pids+=($!)
  done
}
# Waits (up to 20 s) until the coordinator of run dir $1 reports every rank training, so that a
# slow start on a loaded machine is not taken for a failure; sets $status and $rc.
wait_training() {
  for _ in $(seq 100); do
    status=$("$exe" status --coordinator "$(cat "$1/coordinator" 2>/dev/null)" \
      --auth-token-file "$tmp/token" 2>&1); rc=$?
    if [ $rc -eq 0 ] && (for r in 0 1 2; do echo "$status" | grep -q "^rank $r: iter" || exit 1; done); then
      return 0
    fi
    sleep 0.2
  done
  return 1
}
# Waits for ranks 0 and 2; sets $elapsed (s) and $codes.
wait_others() {
  local start=$SECONDS
  codes=""
  for r in 0 2; do
    wait "${pids[$r]}"
    codes="$codes $?"
  done
  elapsed=$((SECONDS - start))
}

# 2. SIGKILL of rank 1 mid-training (after a look at the live status).
start_job "$tmp/kill"
wait_training "$tmp/kill"
check "status shows every rank's iteration" '[ $rc -eq 0 ] && (for r in 0 1 2; do echo "$status" | grep -q "^rank $r: iter" || exit 1; done)'
kill -KILL "${pids[1]}"
wait "${pids[1]}" 2>/dev/null
wait_others
check "after SIGKILL of rank 1 the others exit non-zero (codes:$codes) within 10 s (${elapsed} s)" \
  '[ "$elapsed" -le 10 ] && ! echo "$codes" | grep -q " 0"'
check "their error names rank 1" 'grep -q "rank 1" "$tmp/kill/rank0.log" && grep -q "rank 1" "$tmp/kill/rank2.log"'

# 3. A hung rank (SIGSTOP): no heartbeats; the coordinator aborts the job.
start_job "$tmp/hang"
wait_training "$tmp/hang"
kill -STOP "${pids[1]}"
wait_others
kill -KILL "${pids[1]}" 2>/dev/null
wait "${pids[1]}" 2>/dev/null
check "after rank 1 hangs the others exit non-zero (codes:$codes) within 10 s (${elapsed} s)" \
  '[ "$elapsed" -le 10 ] && ! echo "$codes" | grep -q " 0"'
check "the reason says rank 1 stopped responding" 'grep -q "rank 1 stopped responding" "$tmp/hang/rank0.log"'

# 4. A rank with a different plan is refused by hash.
mkdir -p "$tmp/hash"
"$exe" run --plan "$tmp/plan.pb" --world-size 3 --rank 0 --coordinator 127.0.0.1:0 --timeout 3 \
  --auth-token-file "$tmp/token" --coordinator-file "$tmp/hash/coordinator" \
  --store-dir "$tmp/hash/store" > "$tmp/hash/rank0.log" 2>&1 &
p0=$!
"$exe" run --plan "$tmp/other.pb" --world-size 3 --rank 1 --timeout 3 --auth-token-file "$tmp/token" \
  --coordinator-file "$tmp/hash/coordinator" --store-dir "$tmp/hash/store" > "$tmp/hash/rank1.log" 2>&1; rc=$?
kill -KILL $p0 2>/dev/null; wait $p0 2>/dev/null
check "a different plan is refused (exit $rc) naming the plan hash" '[ $rc -ne 0 ] && grep -q "plan hash" "$tmp/hash/rank1.log"'

# 5. A wrong token is refused.
mkdir -p "$tmp/wrong"
"$exe" run --plan "$tmp/plan.pb" --world-size 3 --rank 0 --coordinator 127.0.0.1:0 --timeout 3 \
  --auth-token-file "$tmp/token" --coordinator-file "$tmp/wrong/coordinator" \
  --store-dir "$tmp/wrong/store" > "$tmp/wrong/rank0.log" 2>&1 &
p0=$!
"$exe" run --plan "$tmp/plan.pb" --world-size 3 --rank 1 --timeout 3 \
  --auth-token-file "$tmp/wrong-token" --coordinator-file "$tmp/wrong/coordinator" \
  --store-dir "$tmp/wrong/store" > "$tmp/wrong/rank1.log" 2>&1; rc=$?
kill -KILL $p0 2>/dev/null; wait $p0 2>/dev/null
check "a wrong token is refused (exit $rc)" \
  '[ $rc -ne 0 ] && grep -q "does not carry this job.s auth token" "$tmp/wrong/rank1.log"'

# 6. Nobody listens at the coordinator's address.
"$exe" run --plan "$tmp/plan.pb" --world-size 3 --rank 1 --timeout 2 --coordinator 127.0.0.1:1 \
  --store-dir "$tmp/unreach" > "$tmp/unreach.log" 2>&1; rc=$?
check "an unreachable coordinator is a clear error (exit $rc)" '[ $rc -ne 0 ] && grep -q "cannot reach the coordinator at 127.0.0.1:1" "$tmp/unreach.log"'
exit $fail
