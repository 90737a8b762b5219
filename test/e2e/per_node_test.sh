#!/usr/bin/env bash
# Per-node mode, as torchrun's users run it: one graphpipe-launch per "node" (here two on
# loopback), each with its own run directory and token file (the same token), nothing shared;
# the ranks meet through rank 0's coordinator. The job trains exactly as the single-process
# reference; bad per-node flags exit 2 naming them; a node with another token does not join.
# Usage: per_node_test.sh GRAPHPIPE-EXECUTOR GRAPHPIPE-PLAN LAUNCHER TMP_DIR
set -uo pipefail
exe=$1 plan_bin=$2 launcher=$3 tmp=$4
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$tmp" && mkdir -p "$tmp"
export GRAPHPIPE_RUNS_DIR=$tmp/runs GP_EXECUTOR=$exe
unset GP_AUTH_TOKEN
fail=0
check() {  # check NAME COMMAND...
  local name=$1
  shift
  if eval "$@"; then echo "ok: $name"; else echo "FAIL: $name"; fail=1; fi
}
losses() { grep -o '"loss": [-0-9.e]*' "$1" | awk '{printf "%.6f\n", $2}'; }
# A free TCP port on loopback for the master.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cd "$tmp" || exit 1
mkdir node0 node1
(umask 077 && echo per-node-job-token > node0/token && cp node0/token node1/token)
tiny_candle=$root/configs/assignments/tiny-candle-uno-branches.json

# A 4-rank plan (3 stages, one replicated): 2 nodes x 2 ranks.
"$plan_bin" --log-level warn lower --assignment "$tiny_candle" --model zoo:tiny-candle-uno \
  --cluster cpu-local --devices 4 --batch 16 --micro-batches 4 --optimizer sgd --lr 0.05 \
  --out plan.pb > /dev/null
port=$(free_port)
node() {  # node K EXTRA...: node K's launcher, in node K's directory, in the background
  local k=$1
  shift
  (cd "node$k" && "$launcher" --plan ../plan.pb --nnodes 2 --node-rank "$k" --nproc-per-node 2 \
    --master-addr 127.0.0.1 --master-port "$port" --auth-token-file token --iterations 8 \
    --timeout 10 --log-dir run "$@" > launch.log 2>&1)
}
node 1 & n1=$!
sleep 0.5  # node 1 first: its ranks wait for the coordinator node 0 has not started yet
node 0 --metrics-out ../m.json & n0=$!
wait "$n0"; rc0=$?
wait "$n1"; rc1=$?
check "both nodes' launchers succeed" '[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || { tail -n 5 node0/launch.log node1/launch.log; false; }'
check "node 0 ran ranks 0 and 1, node 1 ranks 2 and 3, each in its own run directory" \
  '[ -s node0/run/attempt-0/rank-0.log ] && [ -s node0/run/attempt-0/rank-1.log ] && [ -s node1/run/attempt-0/rank-2.log ] && [ -s node1/run/attempt-0/rank-3.log ] && [ ! -e node0/run/attempt-0/rank-2.log ] && [ ! -e node1/run/attempt-0/rank-0.log ]'
check "both launchers name the same job" \
  'id=$(grep -o "job job-[0-9a-f]*" node0/launch.log | head -1); [ -n "$id" ] && [ "$id" = "$(grep -o "job job-[0-9a-f]*" node1/launch.log | head -1)" ]'
check "node 1's rank 3 ran as rank 3 of the job's 4" \
  'grep -q "rank 3 of 4" node1/run/attempt-0/rank-3.log'
"$exe" --log-level warn reference --plan plan.pb --iterations 8 --metrics-out ref.json
check "the 2-node job's 8 losses equal the single-process reference's" \
  '[ "$(losses m.json | wc -l)" -eq 8 ] && [ "$(losses m.json)" = "$(losses ref.json)" ]'
check "the nodes share no directory, yet ran mutual TLS with the job's CA each derived" \
  'grep -q "over mutual TLS" node0/run/attempt-0/rank-0.log &&
   ! cmp -s node0/run/tls/cert.pem node1/run/tls/cert.pem'

# A node with another token does not join: its ranks are refused, both sides fail. The job's own
# CA is derived from the token, so the refusal comes at the TLS handshake, before any call.
port=$(free_port)
echo another-token > node1/token
node 0 --timeout 20 & n0=$!  # its coordinator outlives node 1's attempts to reach it
node 1 & n1=$!
wait "$n0"; rc0=$?
wait "$n1"; rc1=$?
check "a node whose token differs is refused, and the job fails on both nodes" \
  '[ $rc0 -ne 0 ] && [ $rc1 -ne 0 ] &&
   grep -q "\[rank 2\] .*certificate does not chain to --tls-ca .*/run/tls/ca.pem" node1/launch.log'
cp node0/token node1/token

# Bad per-node flags exit 2 before any rank starts, naming the flag.
bad() {  # bad NAME PATTERN ARGS...
  local name=$1 pattern=$2
  shift 2
  local err rc
  err=$(cd node0 && GP_AUTH_TOKEN=x "$launcher" --plan ../plan.pb "$@" 2>&1 >/dev/null); rc=$?
  check "$name exits 2 naming it" '[ $rc -eq 2 ] && grep -q -- "$pattern" <<< "$err"'
}
bad "--node-rank 2 of --nnodes 2" "--node-rank must be 0..1" --nnodes 2 --node-rank 2 --master-addr 127.0.0.1
bad "--nnodes 3 x --nproc-per-node 2 for a 4-rank plan" "--nnodes 3 x --nproc-per-node 2 = 6 ranks, but the plan" \
  --nnodes 3 --node-rank 0 --nproc-per-node 2 --master-addr 127.0.0.1
bad "--nnodes without --master-addr" "needs --nnodes, --node-rank and --master-addr" --nnodes 2 --node-rank 0
bad "--nnodes with --hostfile" "excludes --hostfile" --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --hostfile /dev/null
bad "--nnodes with --on-failure replan" "--on-failure replan is not available per node" \
  --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --on-failure replan --checkpoint-dir c --checkpoint-every 2
err=$(cd node0 && "$launcher" --plan ../plan.pb --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 2>&1 >/dev/null); rc=$?
check "--nnodes without a shared token exits 2 saying how to give one" \
  '[ $rc -eq 2 ] && grep -q -- "--auth-token-file" <<< "$err"'
mkfifo fifo-token
err=$(cd node0 && timeout 10 "$launcher" --plan ../plan.pb --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --auth-token-file ../fifo-token 2>&1 >/dev/null); rc=$?
check "--auth-token-file of a FIFO exits 2 at once" '[ $rc -eq 2 ] && grep -q "not a regular file" <<< "$err"'
check "nothing of the job is left running" '! pgrep -f -- "--plan ../plan.pb" > /dev/null'
exit $fail
