#!/usr/bin/env bash
# Ranks on separate network hosts: two network namespaces joined by a veth pair stand in for two
# nodes; graphpipe-launch --hostfile starts one rank in each (`ip netns exec` as the remote shell)
# and they train over the link to the reference's losses. A hostfile that does not fit the plan
# is refused before anything starts. --slurm runs the ranks as srun tasks (a stand-in srun that
# sets SLURM_PROCID and SLURM_NTASKS as Slurm does). Ranks with separate store directories meet
# through rank 0's coordinator (run --rendezvous coordinator). Node daemons, one per namespace, run a plan
# submitted to them, refuse a second one on busy devices and clean up after a failed job.
# Skipped (77) where namespaces need privileges this machine does not give.
set -u
exe=$1
plan_bin=$2
launch=$3
tmp=$4
rm -rf "$tmp" && mkdir -p "$tmp"
export GRAPHPIPE_RUNS_DIR="$tmp/graphpipe-runs"  # the launcher's logs stay in here
. "$(dirname "$0")/lib.sh"
run_launch() { GP_EXECUTOR="$exe" GP_PLANNER="$plan_bin" timeout 120 "$launch" "$@"; }

ns_a=gp-test-a-$$ ns_b=gp-test-b-$$
if ! ip netns add "$ns_a" 2>/dev/null; then
  echo "skipped: cannot create network namespaces here (needs root / CAP_NET_ADMIN)"
  exit 77
fi
daemons=()
cleanup() {
  for p in "${daemons[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
}
trap cleanup EXIT
ip netns add "$ns_b" || exit 1
ip link add "veth-a$$" type veth peer name "veth-b$$" || { echo "skipped: no veth support"; exit 77; }
ip link set "veth-a$$" netns "$ns_a" && ip link set "veth-b$$" netns "$ns_b" || exit 1
ip -n "$ns_a" addr add 10.77.0.1/24 dev "veth-a$$" && ip -n "$ns_b" addr add 10.77.0.2/24 dev "veth-b$$" || exit 1
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
# The same interface name on both "hosts", as on a cluster's nodes.
ip -n "$ns_a" link set "veth-a$$" name gp0 && ip -n "$ns_b" link set "veth-b$$" name gp0 || exit 1
ip -n "$ns_a" link set gp0 up && ip -n "$ns_b" link set gp0 up || exit 1

# Two nodes of one CPU device each.
sed -e 's/^num_nodes: .*/num_nodes: 2/' -e 's/^devices_per_node: .*/devices_per_node: 1/' \
  -e 's/^name: .*/name: "two-hosts"/' "$(dirname "$0")/../../configs/clusters/cpu-local.pbtxt" \
  > "$tmp/two-hosts.pbtxt"
"$plan_bin" --log-level warn search --model zoo:tiny-mmt --cluster "$tmp/two-hosts.pbtxt" \
  --devices 2 --batch 16 --micro-batches 4 --optimizer sgd --out "$tmp/plan.pb" >/dev/null || exit 1
"$exe" --log-level warn reference --model zoo:tiny-mmt --batch 16 --iterations 4 --lr 0.01 \
  --metrics-out "$tmp/ref.json"

printf '# host slots address\n%s 1 10.77.0.1\n%s 1 10.77.0.2\n' "$ns_a" "$ns_b" > "$tmp/hosts"
run_launch --plan "$tmp/plan.pb" --nprocs 2 --iterations 4 --hostfile "$tmp/hosts" \
  --remote-shell "ip netns exec" --port 29611 --run-dir "$tmp/run" \
  --metrics-out "$tmp/netns.json" > "$tmp/netns.log" 2>&1; rc=$?
check "two ranks in two network namespaces train (exit 0)" '[ $rc -eq 0 ]'
check "they reached the coordinator on the first host's address" \
  'grep -q "coordinator 10.77.0.1:29611" "$tmp/netns.log"'
check "their losses equal the reference's" \
  '[ -s "$tmp/netns.json" ] && [ "$(losses "$tmp/netns.json")" = "$(losses "$tmp/ref.json")" ]'
# No certificate flag was given: the control plane ran mutual TLS with the job's own CA.
check "the launcher made the job's own CA and certificate (the key mode 0600)" \
  'grep -q "control plane: mutual TLS with the job.s own CA" "$tmp/netns.log" &&
   [ "$(stat -c %a "$tmp/run/tls/key.pem")" = 600 ] &&
   openssl verify -CAfile "$tmp/run/tls/ca.pem" "$tmp/run/tls/cert.pem" > /dev/null'
check "rank 0's coordinator served mutual TLS on the first host's address" \
  'grep -q "listening on 10.77.0.1:29611 over mutual TLS" "$tmp/run/attempt-0/rank-0.log"'
# While a longer job runs: `status --run-dir` reaches it with the job's files; a client with the
# token but no certificate of the job's CA, or speaking plaintext, does not.
# (timeout passes the SIGTERM below on to the launcher.)
GP_EXECUTOR="$exe" GP_PLANNER="$plan_bin" timeout 120 "$launch" --plan "$tmp/plan.pb" --nprocs 2 \
  --iterations 100000 --hostfile "$tmp/hosts" --remote-shell "ip netns exec" --port 29641 \
  --run-dir "$tmp/run-mtls" > "$tmp/mtls.log" 2>&1 & mtls=$!
st_rc=1
for _ in $(seq 100); do
  ip netns exec "$ns_a" "$exe" status --run-dir "$tmp/run-mtls" > "$tmp/mtls-status.log" 2>&1 &&
    { st_rc=0; break; }
  sleep 0.2
done
ip netns exec "$ns_a" timeout 20 "$exe" status --coordinator 10.77.0.1:29641 \
  --auth-token-file "$tmp/run-mtls/auth-token" > "$tmp/mtls-plain.log" 2>&1; plain_rc=$?
ip netns exec "$ns_a" timeout 20 "$exe" status --coordinator 10.77.0.1:29641 \
  --auth-token-file "$tmp/run-mtls/auth-token" --tls-ca "$tmp/run-mtls/tls/ca.pem" \
  > "$tmp/mtls-nocert.log" 2>&1; nocert_rc=$?
kill -TERM $mtls; wait $mtls; mtls_rc=$?
check "status --run-dir reads the job's TLS files and shows both ranks" \
  '[ $st_rc -eq 0 ] && grep -q "rank 1" "$tmp/mtls-status.log"'
check "a plaintext client with the token is refused, told the server may require TLS" \
  '[ $plain_rc -ne 0 ] && grep -q "may require TLS" "$tmp/mtls-plain.log"'
check "a TLS client without a certificate of the job's CA is refused" \
  '[ $nocert_rc -ne 0 ] && grep -q "refusing this client.s certificate" "$tmp/mtls-nocert.log"'
check "the job stopped on SIGTERM at an agreed iteration (exit 143)" '[ $mtls_rc -eq 143 ]'
run_launch --plan "$tmp/plan.pb" --nprocs 2 --iterations 4 --hostfile "$tmp/hosts" --no-tls \
  --remote-shell "ip netns exec" --port 29642 --run-dir "$tmp/run-plain" \
  --metrics-out "$tmp/plain.json" > "$tmp/plain.log" 2>&1; rc=$?
check "--no-tls runs plaintext across hosts, warning, with the same losses" \
  '[ $rc -eq 0 ] && grep -q "warning: --no-tls" "$tmp/plain.log" && [ ! -e "$tmp/run-plain/tls" ] &&
   ! grep -q "over mutual TLS" "$tmp/run-plain/attempt-0/rank-0.log" &&
   [ "$(losses "$tmp/plain.json")" = "$(losses "$tmp/ref.json")" ]'

# The data plane's rendezvous through rank 0's coordinator (run --rendezvous coordinator): each
# rank has its own store directory, as hosts without a shared filesystem would; they meet over TCP
# with the job's token. First one rank per "host" (Gloo), then two on one host (shared memory).
printf 'rendezvous-%s\n' "$$" > "$tmp/rdv-token" && chmod 600 "$tmp/rdv-token"
rdv_rank() {  # NETNS_PREFIX RANK PORT BIND NAME [FLAG...]
  local prefix=$1 rank=$2 port=$3 bind=$4 name=$5
  shift 5
  mkdir -p "$tmp/$name-store-$rank"
  $prefix timeout 120 "$exe" --log-level warn run --plan "$tmp/plan.pb" --rank "$rank" \
    --world-size 2 --coordinator "10.77.0.1:$port" --bind "$bind" --iterations 4 \
    --store-dir "$tmp/$name-store-$rank" --auth-token-file "$tmp/rdv-token" "$@" \
    > "$tmp/$name-$rank.log" 2>&1
}
rdv_rank "ip netns exec $ns_a" 0 29619 10.77.0.1 rdv --rendezvous coordinator \
  --metrics-out "$tmp/rdv.json" & rdv0=$!
rdv_rank "ip netns exec $ns_b" 1 29619 10.77.0.2 rdv --rendezvous coordinator & rdv1=$!
wait $rdv0; rc0=$?; wait $rdv1; rc1=$?
check "two hosts with separate store directories meet through the coordinator (exit 0, 0)" \
  '[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]'
check "their losses equal the reference's" \
  '[ -s "$tmp/rdv.json" ] && [ "$(losses "$tmp/rdv.json")" = "$(losses "$tmp/ref.json")" ]'
check "no rendezvous key went through the store directories" \
  '[ -z "$(find "$tmp/rdv-store-0" "$tmp/rdv-store-1" -type f)" ]'
# Without --rendezvous coordinator the same separate directories never meet: rank 0 times out
# waiting for rank 1's key in its own directory.
rdv_rank "ip netns exec $ns_a" 0 29620 10.77.0.1 nordv --timeout 3 & rdv0=$!
rdv_rank "ip netns exec $ns_b" 1 29620 10.77.0.2 nordv --timeout 3 & rdv1=$!
wait $rdv0; rc0=$?; wait $rdv1; rc1=$?
check "with files in separate store directories the ranks do not meet (exit 1, 1)" \
  '[ $rc0 -ne 0 ] && [ $rc1 -ne 0 ] && grep -q "Wait timeout for key" "$tmp/nordv-0.log"'
rdv_local() {  # RANK [FLAG...]: on this machine's loopback, placed by torchrun's variables
  mkdir -p "$tmp/local-rdv-store-$1"
  RANK=$1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29621 timeout 120 "$exe" \
    --log-level warn run --plan "$tmp/plan.pb" --iterations 4 \
    --store-dir "$tmp/local-rdv-store-$1" --auth-token-file "$tmp/rdv-token" \
    --rendezvous coordinator "${@:2}" > "$tmp/local-rdv-$1.log" 2>&1
}
rdv_local 0 --metrics-out "$tmp/local-rdv.json" & rdv0=$!
rdv_local 1 & rdv1=$!
wait $rdv0; rc0=$?; wait $rdv1; rc1=$?
check "two ranks on one host (RANK, WORLD_SIZE, MASTER_ADDR/PORT) with separate store directories train" \
  '[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && [ "$(losses "$tmp/local-rdv.json")" = "$(losses "$tmp/ref.json")" ]'
check "they found each other on one host through the coordinator and used shared memory" \
  'ls "$tmp"/local-rdv-store-0/*.shm-dir "$tmp"/local-rdv-store-1/*.shm-dir > /dev/null'


# Addresses found on the hosts: --iface, or the route to the first host.
printf '%s 1\n%s 1\n' "$ns_a" "$ns_b" > "$tmp/hosts-no-addr"
run_launch --plan "$tmp/plan.pb" --nprocs 2 --iterations 4 --hostfile "$tmp/hosts-no-addr" \
  --remote-shell "ip netns exec" --iface gp0 --port 29613 --run-dir "$tmp/run-iface" \
  --metrics-out "$tmp/iface.json" > "$tmp/iface.log" 2>&1; rc=$?
check "--iface gp0 finds each host's address (exit 0, coordinator on 10.77.0.1)" \
  '[ $rc -eq 0 ] && grep -q "coordinator 10.77.0.1:29613" "$tmp/iface.log"'
printf '%s 1 10.77.0.1\n%s 1\n' "$ns_a" "$ns_b" > "$tmp/hosts-route"
run_launch --plan "$tmp/plan.pb" --nprocs 2 --iterations 4 --hostfile "$tmp/hosts-route" \
  --remote-shell "ip netns exec" --port 29614 --run-dir "$tmp/run-route" \
  --metrics-out "$tmp/route.json" > "$tmp/route.log" 2>&1; rc=$?
check "a host without ADDRESS binds to its address on the route to the first host" \
  '[ $rc -eq 0 ] && [ "$(losses "$tmp/route.json")" = "$(losses "$tmp/ref.json")" ]'
run_launch --plan "$tmp/plan.pb" --nprocs 2 --iterations 4 --hostfile "$tmp/hosts-no-addr" \
  --remote-shell "ip netns exec" --port 29615 > "$tmp/noaddr.log" 2>&1; rc=$?
check "a first host without any address is refused, naming it" \
  '[ $rc -eq 2 ] && grep -q "no address for the first host" "$tmp/noaddr.log"'

printf '%s 2 10.77.0.1\n%s 1 10.77.0.2\n' "$ns_a" "$ns_b" > "$tmp/bad-hosts"
run_launch --plan "$tmp/plan.pb" --nprocs 2 --iterations 4 --hostfile "$tmp/bad-hosts" \
  --remote-shell "ip netns exec" > "$tmp/bad.log" 2>&1; rc=$?
check "a hostfile with more slots than the plan has ranks is refused (exit 2)" \
  '[ $rc -eq 2 ] && grep -q "has 3 slots, the plan has 2 ranks" "$tmp/bad.log"'
# A DeepSpeed/MPI hostfile; one host may run both of the plan's nodes (ranks fill hosts in order).
printf '# DeepSpeed\n%s slots=2 max_slots=4  # both plan nodes\n' "$ns_a" > "$tmp/one-host"
run_launch --plan "$tmp/plan.pb" --iterations 4 --hostfile "$tmp/one-host" --iface gp0 \
  --remote-shell "ip netns exec" --port 29616 --run-dir "$tmp/run-one" \
  --metrics-out "$tmp/one.json" > "$tmp/one.log" 2>&1; rc=$?
check "a DeepSpeed hostfile (HOST slots=2) runs both plan nodes on its one host, losses equal" \
  '[ $rc -eq 0 ] && [ "$(losses "$tmp/one.json")" = "$(losses "$tmp/ref.json")" ]'
printf '%s slots=2 gpus=2\n' "$ns_a" > "$tmp/bad-ds-hosts"
run_launch --plan "$tmp/plan.pb" --hostfile "$tmp/bad-ds-hosts" > "$tmp/bad2.log" 2>&1; rc=$?
check "a hostfile line with an unknown key is refused naming the line (exit 2)" \
  '[ $rc -eq 2 ] && grep -q "bad-ds-hosts line 1: .gpus=2. is neither slots=N" "$tmp/bad2.log"'

# Recovery across hosts: 2 hosts x 2 devices, rank 1 (on the first host) dies at iteration 5;
# the job re-plans for 3 devices (1 + 2), resumes from the shared checkpoint and finishes.
sed -e 's/^devices_per_node: .*/devices_per_node: 2/' "$tmp/two-hosts.pbtxt" > "$tmp/two-by-two.pbtxt"
# A 4-rank plan by construction (a search may leave devices idle): one stage per branch and the
# head replicated twice.
"$plan_bin" zoo export tiny-mmt --out "$tmp/tiny-mmt.json" 2>/dev/null || exit 1
python3 - "$tmp/tiny-mmt.json" "$tmp/four-ranks.json" <<'PY'
import json, sys
ops = [op["id"] for op in json.load(open(sys.argv[1]))["ops"]]
stages = [{"ops": [o for o in ops if o.startswith(p)]} for p in ("b0.", "b1.")]
stages.append({"ops": [o for o in ops if not o.startswith(("b0.", "b1."))], "replicas": 2})
json.dump({"stages": stages}, open(sys.argv[2], "w"))
PY
"$plan_bin" --log-level warn lower --assignment "$tmp/four-ranks.json" --model zoo:tiny-mmt \
  --cluster "$tmp/two-by-two.pbtxt" --devices 4 --batch 16 --micro-batches 4 --optimizer adam \
  --out "$tmp/plan4.pb" >/dev/null || exit 1
printf '%s slots=3\n%s slots=1\n' "$ns_a" "$ns_b" > "$tmp/split-hosts"
run_launch --plan "$tmp/plan4.pb" --hostfile "$tmp/split-hosts" --iface gp0 \
  --remote-shell "ip netns exec" > "$tmp/split.log" 2>&1; rc=$?
check "a hostfile that splits a plan node across hosts is refused, saying why (exit 2)" \
  '[ $rc -eq 2 ] && grep -q "ranks 2 and 3 would run on hosts .* but the plan puts both on its node 1" "$tmp/split.log"'
run_launch --plan "$tmp/plan4.pb" --nprocs 4 --iterations 10 --metrics-out "$tmp/full4.json" \
  > "$tmp/full4.log" 2>&1
printf '%s 2 10.77.0.1\n%s 2 10.77.0.2\n' "$ns_a" "$ns_b" > "$tmp/hosts4"
run_launch --plan "$tmp/plan4.pb" --nprocs 4 --iterations 10 --hostfile "$tmp/hosts4" \
  --remote-shell "ip netns exec" --port 29631 --timeout 10 --run-dir "$tmp/run4" \
  --checkpoint-dir "$tmp/ckpt4" --checkpoint-every 2 --on-failure replan \
  --metrics-out "$tmp/recovered4.json" -- --kill-rank-at 1:5 > "$tmp/recovered4.log" 2>&1; rc=$?
check "a rank dying on one host re-plans for 3 devices across both hosts and finishes" \
  '[ $rc -eq 0 ] && grep -q "rank 1 failed (exit status 137" "$tmp/recovered4.log" && grep -q "re-planned for 3 devices" "$tmp/recovered4.log"'
check "both attempts' metrics are iterations 0-9, with the uninterrupted run's losses" \
  '[ -s "$tmp/recovered4.json" ] && [ "$(iteration_losses "$tmp/recovered4.json")" = "$(iteration_losses "$tmp/full4.json")" ]'

# --slurm with a stand-in srun: one task per rank, SLURM_PROCID/SLURM_NTASKS as Slurm sets them.
mkdir -p "$tmp/bin"
cat > "$tmp/bin/srun" <<'SRUN'
#!/usr/bin/env bash
n=1
while [ $# -gt 0 ]; do
  case "$1" in --ntasks=*) n=${1#--ntasks=}; shift ;; --*) shift ;; *) break ;; esac
done
pids=()
for ((i = 0; i < n; i++)); do SLURM_PROCID=$i SLURM_NTASKS=$n "$@" & pids+=($!); done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
SRUN
chmod +x "$tmp/bin/srun"
"$plan_bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 2 \
  --batch 16 --micro-batches 4 --optimizer sgd --out "$tmp/local.pb" >/dev/null || exit 1
PATH="$tmp/bin:$PATH" SLURM_JOB_NODELIST="" run_launch --plan "$tmp/local.pb" --nprocs 2 \
  --iterations 4 --slurm --port 29612 --run-dir "$tmp/srun" --metrics-out "$tmp/slurm.json" \
  > "$tmp/slurm.log" 2>&1; rc=$?
check "--slurm runs the ranks as srun tasks (exit 0)" '[ $rc -eq 0 ]'
check "their losses equal the reference's" \
  '[ -s "$tmp/slurm.json" ] && [ "$(losses "$tmp/slurm.json")" = "$(losses "$tmp/ref.json")" ]'
# srun's tasks are children of srun, which outlives a SIGKILLed launcher: they stop on the
# launcher's beacon going stale instead (--orphan-timeout), at an iteration boundary.
PATH="$tmp/bin:$PATH" SLURM_JOB_NODELIST="" GP_EXECUTOR="$exe" GP_PLANNER="$plan_bin" "$launch" \
  --plan "$tmp/local.pb" --iterations 100000 --slurm --port 29616 --run-dir "$tmp/orphan" \
  --orphan-timeout 2 > "$tmp/orphan.log" 2>&1 &
orphan_launcher=$!
for _ in $(seq 100); do grep -q "iteration 2: loss" "$tmp/orphan.log" 2>/dev/null && break; sleep 0.1; done
# The launcher and its supervisor (which keeps the beacon fresh) both killed at once, as a
# scheduler killing the job step would: nothing on our side is left to stop srun's tasks.
kill -KILL $(pgrep -P "$orphan_launcher" -f "launcher supervise") "$orphan_launcher"
killed_at=$(date +%s%3N)
for _ in $(seq 150); do pgrep -f -- "run --rank .*$tmp/orphan/launcher-beacon" > /dev/null || break; sleep 0.1; done
gone_ms=$(( $(date +%s%3N) - killed_at ))
check "srun tasks stop within 3 x --orphan-timeout of the launcher's SIGKILL ($gone_ms ms)" \
  '! pgrep -f -- "run --rank .*$tmp/orphan/launcher-beacon" > /dev/null && [ "$gone_ms" -lt 6000 ]'
check "they stopped because the launcher's beacon went stale, at an iteration boundary" \
  'grep -q "has not changed for 2 s: the launcher is gone" "$tmp/orphan/attempt-0/ranks.log" && grep -q "stopped after iteration" "$tmp/orphan/attempt-0/ranks.log"'
pkill -KILL -f -- "run --rank .*$tmp/orphan/launcher-beacon" 2>/dev/null || true

# Real ssh: an sshd on each "host", the launcher on the first one. A SIGKILLed launcher (and
# supervisor) leaves its ssh clients (and so the remote sessions) alive; the ranks stop on its
# stale beacon.
ssh_dir="$tmp/ssh"
mkdir -p "$ssh_dir" /run/sshd && chmod 700 "$ssh_dir"
ssh-keygen -q -t ed25519 -N '' -f "$ssh_dir/host_key" && ssh-keygen -q -t ed25519 -N '' -f "$ssh_dir/id" &&
  cp "$ssh_dir/id.pub" "$ssh_dir/authorized_keys" || exit 1
printf '%s\n' "HostKey $ssh_dir/host_key" "AuthorizedKeysFile $ssh_dir/authorized_keys" \
  "PermitRootLogin prohibit-password" "PasswordAuthentication no" "KbdInteractiveAuthentication no" \
  "UsePAM no" "StrictModes no" "PidFile none" > "$ssh_dir/sshd_config"
for host in "$ns_a 10.77.0.1" "$ns_b 10.77.0.2"; do
  read -r ns addr <<< "$host"
  ip netns exec "$ns" /usr/sbin/sshd -D -e -f "$ssh_dir/sshd_config" -o "ListenAddress=$addr" \
    -p 2222 > "$tmp/sshd-$addr.log" 2>&1 &
  daemons+=($!)
done
ssh_cmd="ssh -p 2222 -i $ssh_dir/id -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
for _ in $(seq 50); do
  ip netns exec "$ns_a" $ssh_cmd 10.77.0.2 true 2>/dev/null && ip netns exec "$ns_a" $ssh_cmd 10.77.0.1 true 2>/dev/null && break
  sleep 0.1
done
printf '10.77.0.1 1\n10.77.0.2 1\n' > "$tmp/ssh-hosts"
ip netns exec "$ns_a" env GP_EXECUTOR="$exe" GP_PLANNER="$plan_bin" timeout 120 "$launch" \
  --plan "$tmp/plan.pb" --iterations 4 --hostfile "$tmp/ssh-hosts" --remote-shell "$ssh_cmd" \
  --port 29617 --run-dir "$tmp/ssh-run" --metrics-out "$tmp/ssh.json" > "$tmp/ssh.log" 2>&1; rc=$?
check "ranks started over ssh on two hosts train (exit 0)" '[ $rc -eq 0 ]'
check "their losses equal the reference's" \
  '[ -s "$tmp/ssh.json" ] && [ "$(losses "$tmp/ssh.json")" = "$(losses "$tmp/ref.json")" ]'
ip netns exec "$ns_a" env GP_EXECUTOR="$exe" GP_PLANNER="$plan_bin" "$launch" \
  --plan "$tmp/plan.pb" --iterations 100000 --hostfile "$tmp/ssh-hosts" --remote-shell "$ssh_cmd" \
  --port 29618 --run-dir "$tmp/ssh-orphan" --orphan-timeout 2 > "$tmp/ssh-orphan.log" 2>&1 &
ssh_launcher=$!
for _ in $(seq 150); do grep -q "iteration 2: loss" "$tmp/ssh-orphan.log" 2>/dev/null && break; sleep 0.1; done
# The ranks read the job's token from the run directory every host shares: no command line (the
# ssh clients', the remote shells', the ranks') carries it.
ssh_token=$(cat "$tmp/ssh-orphan/auth-token" 2>/dev/null)
ssh_ranks=$(pgrep -f -- "run .*10.77.0.1:29618" | wc -l)
check "ssh-started ranks ($ssh_ranks processes) run with no token in any process's argv" \
  '[ ${#ssh_token} -ge 32 ] && [ "$ssh_ranks" -ge 2 ] && ! grep -qF -- "$ssh_token" /proc/[0-9]*/cmdline 2>/dev/null'
kill -KILL $(pgrep -P "$ssh_launcher" -f "launcher supervise") "$ssh_launcher"
killed_at=$(date +%s%3N)
for _ in $(seq 150); do pgrep -f -- "run .*10.77.0.1:29618" > /dev/null || break; sleep 0.1; done
gone_ms=$(( $(date +%s%3N) - killed_at ))
check "ssh-started ranks stop within 3 x --orphan-timeout of the launcher's SIGKILL ($gone_ms ms)" \
  '! pgrep -f -- "run .*10.77.0.1:29618" > /dev/null && [ "$gone_ms" -lt 6000 ]'
check "the remote rank stopped because the launcher's beacon went stale" \
  'grep -q "the launcher is gone" "$tmp/ssh-orphan/attempt-0/rank-1.log"'
pkill -KILL -f -- "run .*10.77.0.1:29618" 2>/dev/null || true

# Node daemons, one per namespace, reading the token from a file; `submit` from the first host
# (its token in the environment).
(umask 077 && echo s3cret > "$tmp/token")
ip netns exec "$ns_a" "$exe" serve --listen 10.77.0.1:29700 --devices 1 --auth-token-file "$tmp/token" \
  --output-root "$tmp" --work-dir "$tmp/daemon-a" > "$tmp/daemon-a.log" 2>&1 &
daemons+=($!)
ip netns exec "$ns_b" "$exe" serve --listen 10.77.0.2:29700 --devices 1 --auth-token-file "$tmp/token" \
  --output-root "$tmp" --work-dir "$tmp/daemon-b" > "$tmp/daemon-b.log" 2>&1 &
daemons+=($!)
submit() { ip netns exec "$ns_a" timeout 120 "$exe" submit --nodes 10.77.0.1:29700,10.77.0.2:29700 \
  --store-dir "$tmp/daemon-store-$RANDOM" "$@"; }
for _ in $(seq 50); do grep -q serving "$tmp/daemon-b.log" && grep -q serving "$tmp/daemon-a.log" && break; sleep 0.1; done
GP_AUTH_TOKEN=s3cret submit --plan "$tmp/plan.pb" --iterations 4 --port 29621 \
  -- --metrics-out "$tmp/daemons.json" > "$tmp/submit.log" 2>&1; rc=$?
check "a plan submitted to two node daemons trains (exit 0)" '[ $rc -eq 0 ]'
check "the ranks' output is streamed back" 'grep -q "iteration 3: loss" "$tmp/submit.log"'
check "its losses equal the reference's" \
  '[ -s "$tmp/daemons.json" ] && [ "$(losses "$tmp/daemons.json")" = "$(losses "$tmp/ref.json")" ]'
submit --plan "$tmp/plan.pb" --iterations 4 --port 29622 > "$tmp/noauth.log" 2>&1; rc=$?
check "a submission without the daemons' token is refused" '[ $rc -ne 0 ] && grep -qi "token" "$tmp/noauth.log"'

GP_AUTH_TOKEN=s3cret submit --plan "$tmp/plan.pb" --iterations 100000 --port 29623 \
  > "$tmp/long.log" 2>&1 &
long=$!
for _ in $(seq 100); do grep -q "all 2 ranks registered" "$tmp/long.log" 2>/dev/null && break; sleep 0.1; done
GP_AUTH_TOKEN=s3cret submit --plan "$tmp/plan.pb" --iterations 4 --port 29624 > "$tmp/busy.log" 2>&1; rc=$?
check "a second plan on busy devices is refused before anything starts" \
  '[ $rc -ne 0 ] && grep -q "2 ranks, the daemons have 0 free devices" "$tmp/busy.log"'
exits_before=$(cat "$tmp/daemon-a.log" "$tmp/daemon-b.log" | grep -c "exited with")
# (A background job ignores SIGINT; SIGTERM to the submit process is what a service manager sends.)
pkill -TERM -f -x ".*graphpipe-executor submit .*--port 29623" || pkill -TERM -f "port 29623"
wait "$long"; rc=$?
check "an interrupted submission stops the job on every node (exit 143, saying where)" \
  '[ $rc -eq 143 ] && grep -q "^graphpipe-executor: stopped after iteration [0-9]* of 100000; no checkpoint" "$tmp/long.log"'
# Both ranks of the stopped job reaped before the next submission.
for _ in $(seq 100); do
  [ "$(cat "$tmp/daemon-a.log" "$tmp/daemon-b.log" | grep -c "exited with")" -ge $((exits_before + 2)) ] && break
  sleep 0.1
done
GP_AUTH_TOKEN=s3cret submit --plan "$tmp/plan.pb" --iterations 20 --port 29625 \
  -- --kill-rank-at 1:3 > "$tmp/failed.log" 2>&1; rc=$?
check "a job whose rank dies fails, naming the rank" '[ $rc -ne 0 ] && grep -q "rank 1 exited with status 137" "$tmp/failed.log"'
# A frozen rank: the coordinator declares it dead, submit blames it (not a healthy rank) and the
# daemons kill it (SIGTERM, then SIGKILL), all within 2 x the heartbeat timeout and the kill grace.
GP_AUTH_TOKEN=s3cret submit --plan "$tmp/plan.pb" --iterations 1000000 --port 29628 --timeout 5 \
  > "$tmp/frozen.log" 2>&1 &
frozen_submit=$!
for _ in $(seq 200); do grep -q "all 2 ranks registered" "$tmp/frozen.log" 2>/dev/null && break; sleep 0.1; done
sleep 1
frozen=$(pgrep -f -- "run --plan .*--coordinator 10.77.0.1:29628.*" | while read -r p; do
  tr '\0' ' ' < /proc/$p/cmdline | grep -q -- "--rank 1 " && echo "$p"; done | head -1)
kill -STOP "$frozen"
t0=$(date +%s%N)
wait "$frozen_submit"; rc=$?
elapsed_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
# 2 x the timeout, the daemon's 1 s kill grace and 1 s for the polls between them.
check "under serve, a frozen rank is blamed and killed within 2 x the timeout + 2 s (${elapsed_ms} ms)" \
  '[ $rc -ne 0 ] && grep -q "rank 1 failed: rank 1 stopped responding" "$tmp/frozen.log" && [ "$elapsed_ms" -lt 12000 ] && ! kill -0 "$frozen" 2>/dev/null'
check "the failure is reported once, not per poll" '[ "$(grep -o "(1)" "$tmp/frozen.log" | wc -l)" -le 1 ]'
GP_AUTH_TOKEN=s3cret submit --plan "$tmp/plan.pb" --iterations 4 --port 29626 > "$tmp/after.log" 2>&1; rc=$?
check "after a failed job the daemons' devices are free again" '[ $rc -eq 0 ]'

# Daemons of CUDA devices start each rank on the GPU of its device slot (cuda:0 here); without a
# GPU the job fails naming the device instead of training on the CPU.
for ns in "$ns_a" "$ns_b"; do
  addr=10.77.0.1; [ "$ns" = "$ns_b" ] && addr=10.77.0.2
  ip netns exec "$ns" "$exe" serve --listen $addr:29701 --devices 1 --accelerator cuda \
    --auth-token-file "$tmp/token" --output-root "$tmp" --work-dir "$tmp/daemon-cuda-$addr" \
    > "$tmp/daemon-cuda-$addr.log" 2>&1 &
  daemons+=($!)
done
for _ in $(seq 50); do
  grep -q serving "$tmp/daemon-cuda-10.77.0.1.log" && grep -q serving "$tmp/daemon-cuda-10.77.0.2.log" && break
  sleep 0.1
done
GP_AUTH_TOKEN=s3cret ip netns exec "$ns_a" timeout 120 "$exe" submit \
  --nodes 10.77.0.1:29701,10.77.0.2:29701 --store-dir "$tmp/daemon-store-cuda" --plan "$tmp/plan.pb" \
  --iterations 2 --port 29627 > "$tmp/cuda.log" 2>&1; rc=$?
if nvidia-smi -L > /dev/null 2>&1; then
  check "daemons of CUDA devices train on the GPUs" '[ $rc -eq 0 ]'
else
  # (A build without the CUDA backend says so instead.)
  check "daemons of CUDA devices start ranks on cuda:0, which fail without a GPU, naming it" \
    '[ $rc -ne 0 ] && grep -Eq "device cuda:0: (no usable CUDA device|this build has no CUDA backend)" "$tmp/cuda.log"'
fi
exit $fail
