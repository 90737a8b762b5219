#!/usr/bin/env bash
# A node daemon on loopback as its clients meet it: a submitted plan trains, and one whose
# schedule is broken (a gradient never received) is refused by the daemon itself, before any
# rank starts, with the problem named to `submit` (exit 2). Output paths of a job must resolve
# inside the daemon's --output-root (default its --work-dir), after ".." and symlinks. The token
# travels in files and environments, never in argv; --insecure runs without one, warning.
set -u
exe=$1
plan_bin=$2
tmp=$3
rm -rf "$tmp" && mkdir -p "$tmp"
. "$(dirname "$0")/lib.sh"
daemons=()
cleanup() {
  for p in "${daemons[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
}
trap cleanup EXIT
# start_daemon NAME SERVE-FLAGS...: serve on a free loopback port; its address in $addr.
start_daemon() {
  local name=$1
  shift
  "$exe" serve --listen 127.0.0.1:0 "$@" > "$tmp/$name.log" 2>&1 &
  daemons+=($!)
  for _ in $(seq 100); do grep -q "serving" "$tmp/$name.log" && break; sleep 0.1; done
  addr=$(sed -n 's/.* on \(127.0.0.1:[0-9]*\),.*/\1/p' "$tmp/$name.log" | head -1)
}
# The daemons' token, in a file of mode 0600 (never in argv); a random one, so that no other
# process's command line holds it by chance.
token=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
(umask 077 && echo "$token" > "$tmp/token")
submit() { GRAPHPIPE_AUTH_TOKEN_FILE="$tmp/token" timeout 120 "$exe" submit --nodes "$addr" "$@"; }

"$plan_bin" --log-level warn search --model zoo:tiny-dlrm --cluster cpu-local --devices 3 \
  --batch 16 --micro-batches 4 --optimizer sgd --out "$tmp/plan.json" >/dev/null || exit 1
mkdir -p "$tmp/bad"
python3 "$(dirname "$0")/../support/make_bad_plans.py" "$tmp/plan.json" "$tmp/bad" > "$tmp/bad.list"
read -r bad_plan expected < <(grep missing_gradient_receive "$tmp/bad.list")

start_daemon daemon --devices 3 --auth-token-file "$tmp/token" --work-dir "$tmp/work"
submit --plan "$tmp/plan.json" --iterations 2 --port 29811 --store-dir "$tmp/work/store-a" \
  > "$tmp/good.log" 2>&1; rc=$?
check "a plan submitted to the daemon trains (exit 0)" '[ -n "$addr" ] && [ $rc -eq 0 ]'
started=$(grep -c "started" "$tmp/daemon.log")
submit --plan "$bad_plan" --iterations 2 --port 29812 --store-dir "$tmp/work/store-b" \
  > "$tmp/bad.log" 2>&1; rc=$?
check "the daemon refuses a plan missing a gradient receive: exit 2 naming '$expected'" \
  '[ $rc -eq 2 ] && grep -qF "$expected" "$tmp/bad.log"'
check "no rank of the refused plan started" '[ "$(grep -c "started" "$tmp/daemon.log")" -eq "$started" ]'

mkdir -p "$tmp/out" "$tmp/elsewhere"
ln -s "$tmp/elsewhere" "$tmp/out/link"
start_daemon confined --devices 3 --auth-token-file "$tmp/token" --work-dir "$tmp/work-c" --output-root "$tmp/out"
submit --plan "$tmp/plan.json" --iterations 2 --port 29813 --store-dir "$tmp/out/store" \
  -- --metrics-out "$tmp/out/m.json" > "$tmp/inside.log" 2>&1; rc=$?
check "outputs inside --output-root are written (exit 0)" '[ $rc -eq 0 ] && [ -s "$tmp/out/m.json" ]'
started=$(grep -c "started" "$tmp/confined.log")
port=29814
while read -r what args; do
  # shellcheck disable=SC2086
  submit --plan "$tmp/plan.json" --iterations 2 --port $port $args > "$tmp/outside.log" 2>&1; rc=$?
  port=$((port + 1))
  check "$what outside the root is refused: exit 2 naming it" \
    '[ $rc -eq 2 ] && grep -q "outside this daemon.s output root" "$tmp/outside.log"'
done <<CASES
metrics --store-dir $tmp/out/s1 -- --metrics-out $tmp/elsewhere/m.json
dotdot --store-dir $tmp/out/s2 -- --metrics-out=$tmp/out/../elsewhere/m.json
symlink --store-dir $tmp/out/s3 -- --checkpoint-dir $tmp/out/link/ck
store --store-dir $tmp/elsewhere/store
CASES
check "nothing was written outside, and no refused rank started" \
  '[ -z "$(ls "$tmp/elsewhere")" ] && [ "$(grep -c "started" "$tmp/confined.log")" -eq "$started" ]'
start_daemon default --devices 3 --auth-token-file "$tmp/token" --work-dir "$tmp/work-d"
submit --plan "$tmp/plan.json" --iterations 2 --port 29820 -- --metrics-out "$tmp/out/m2.json" \
  > "$tmp/default.log" 2>&1; rc=$?
check "by default the root is --work-dir" '[ $rc -eq 2 ] && grep -q "output root .*work-d" "$tmp/default.log"'
submit --plan "$tmp/plan.json" --iterations 2 --port 29821 -- --metrics-out "$tmp/work-d/m.json" \
  > "$tmp/default-ok.log" 2>&1; rc=$?
check "a job with no --store-dir rendezvouses in the root (exit 0)" '[ $rc -eq 0 ] && [ -s "$tmp/work-d/m.json" ]'

# The daemon hands its token to the ranks it starts in their environment: no process's command
# line holds it while they train.
submit --plan "$tmp/plan.json" --iterations 100000000 --port 29822 > "$tmp/long.log" 2>&1 &
long=$!
for _ in $(seq 200); do grep -q "iteration 2: loss" "$tmp/long.log" 2>/dev/null && break; sleep 0.1; done
ranks=$(pgrep -f -- " run --plan $tmp/work-d/" | wc -l)
world=$("$plan_bin" inspect --plan "$tmp/plan.json" --json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["ranks"])')
check "the daemon's ranks ($ranks of $world) train with no token in any process's argv" \
  '[ "$ranks" -eq "$world" ] && ! grep -qF -- "$token" /proc/[0-9]*/cmdline 2>/dev/null'
kill -TERM "$long"; wait "$long" 2>/dev/null

# --insecure: no token anywhere, a loud warning, and a submit without one trains (its rank 0's
# coordinator runs without a token too).
env -u GP_AUTH_TOKEN -u GRAPHPIPE_AUTH_TOKEN_FILE \
  "$exe" serve --listen 127.0.0.1:0 --devices 3 --insecure --work-dir "$tmp/work-i" \
  > "$tmp/insecure.log" 2>&1 &
daemons+=($!)
for _ in $(seq 100); do grep -q "serving" "$tmp/insecure.log" && break; sleep 0.1; done
addr=$(sed -n 's/.* on \(127.0.0.1:[0-9]*\),.*/\1/p' "$tmp/insecure.log" | head -1)
env -u GP_AUTH_TOKEN -u GRAPHPIPE_AUTH_TOKEN_FILE timeout 120 "$exe" submit --nodes "$addr" \
  --plan "$tmp/plan.json" --iterations 2 --port 29823 > "$tmp/insecure-submit.log" 2>&1; rc=$?
check "serve --insecure warns at start and trains a submit that has no token (exit 0)" \
  '[ $rc -eq 0 ] && grep -q "INSECURE: serve runs without a token (--insecure): anyone who can reach 127.0.0.1:0" "$tmp/insecure.log" && grep -q "INSECURE: run --rank 0" "$tmp/insecure-submit.log"'

# Frozen processes under a daemon (heartbeat timeout 4 s). The job's rank processes, by pid.
job_pids() { pgrep -f -- " run --plan $tmp/work-f/job-.* --coordinator 127.0.0.1:$1 "; }
# Whether process $1 still runs (a rank that exited under a frozen daemon stays a zombie).
running() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
start_daemon frozen --devices 3 --auth-token-file "$tmp/token" --work-dir "$tmp/work-f"
frozen_daemon=${daemons[-1]}
# Rank 0 frozen: it hosts the coordinator, so the others lose it; submit blames rank 0 (the
# coordinator), not a rank that noticed.
submit --plan "$tmp/plan.json" --iterations 100000000 --port 29830 --timeout 4 \
  > "$tmp/rank0-frozen.log" 2>&1 &
job=$!
for _ in $(seq 200); do grep -q "iteration 2: loss" "$tmp/rank0-frozen.log" 2>/dev/null && break; sleep 0.1; done
rank0=$(pgrep -f -- " run --plan $tmp/work-f/job-.* --rank 0 .*--coordinator 127.0.0.1:29830 ")
kill -STOP "$rank0"
wait "$job"; rc=$?
check "a frozen rank 0 under serve: submit blames rank 0 (the coordinator), not a rank that lost it" \
  '[ -n "$rank0" ] && [ $rc -ne 0 ] && grep -q "^graphpipe-executor: error: job [0-9a-f]*: rank 0 failed: rank 0 (the coordinator) stopped responding" "$tmp/rank0-frozen.log"'
check "the ranks that lost it say so, naming rank 0" \
  'grep -q "error: lost the coordinator (rank 0) at 127.0.0.1:29830" "$tmp/rank0-frozen.log" && ! running "$rank0"'
for _ in $(seq 50); do [ -z "$(job_pids 29830)" ] && break; sleep 0.1; done
# The daemon frozen: its ranks stop on their own once its beacon is --timeout old, and submit
# blames the daemon.
submit --plan "$tmp/plan.json" --iterations 100000000 --port 29831 --timeout 4 \
  > "$tmp/daemon-frozen.log" 2>&1 &
job=$!
for _ in $(seq 200); do grep -q "iteration 2: loss" "$tmp/daemon-frozen.log" 2>/dev/null && break; sleep 0.1; done
pids=$(job_pids 29831)
kill -STOP "$frozen_daemon"
frozen_at=$(date +%s%3N)
for _ in $(seq 300); do
  alive=0; for p in $pids; do running "$p" && alive=1; done
  [ $alive -eq 0 ] && break
  sleep 0.1
done
gone_ms=$(( $(date +%s%3N) - frozen_at ))
wait "$job"; rc=$?
check "a frozen daemon's ranks ($(echo $pids | wc -w) of $world) stop on their own within 2 x --timeout (${gone_ms} ms)" \
  '[ "$(echo $pids | wc -w)" -eq "$world" ] && [ $alive -eq 0 ] && [ "$gone_ms" -lt 8000 ] && grep -q "the node daemon.s beacon .* has not changed for 4 s" "$tmp"/work-f/job-*/rank-0.log'
check "submit blames the frozen daemon, naming it and its ranks (exit non-zero)" \
  '[ $rc -ne 0 ] && grep -q "error: job [0-9a-f]*: daemon $addr ([^,]*, ranks $(seq -s, 0 $((world - 1)))) stopped answering for 4 s (frozen or gone)" "$tmp/daemon-frozen.log"'
kill -CONT "$frozen_daemon"
exit $fail
