#!/usr/bin/env bash
# The control plane over TLS on loopback, with certificates made here by openssl: a launched
# 2-rank CPU job trains over mutual TLS with the plaintext run's losses; bad TLS flags are refused
# before any rank starts (exit 2 naming the flag and the path); a coordinator serving TLS refuses
# plaintext clients, clients without a certificate and clients whose certificate another CA
# signed, and a TLS client meets a plaintext coordinator with a clear error, each within the
# client's timeout; `serve` + `submit` over mutual TLS train, and the daemon refuses the same
# clients.
set -u
exe=$(realpath "$1")
plan_bin=$2
launch=$(realpath "$3")
tmp=$(realpath -m "$4")
rm -rf "$tmp" && mkdir -p "$tmp"
export GRAPHPIPE_RUNS_DIR="$tmp/graphpipe-runs"  # the launcher's logs stay in here
. "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || { echo "FAIL: openssl is not installed"; exit 1; }
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
}
trap cleanup EXIT

# A CA, a certificate of it for 127.0.0.1 (server and client use), and a second CA with a
# certificate of its own: what a stranger would present.
pki=$tmp/pki
mkdir -p "$pki"
new_ca() {  # NAME
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=$1" -keyout "$pki/$1.key" -out "$pki/$1.crt" 2>/dev/null
}
new_cert() {  # NAME CA
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$1" \
    -keyout "$pki/$1.key" -out "$pki/$1.csr" 2>/dev/null &&
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' \
      > "$pki/$1.ext" &&
    openssl x509 -req -in "$pki/$1.csr" -CA "$pki/$2.crt" -CAkey "$pki/$2.key" -CAcreateserial \
      -days 2 -extfile "$pki/$1.ext" -out "$pki/$1.crt" 2>/dev/null && chmod 600 "$pki/$1.key"
}
new_ca ca && new_cert node ca && new_ca other-ca && new_cert stranger other-ca ||
  { echo "FAIL: openssl could not make the test certificates"; exit 1; }
good=(--tls-cert "$pki/node.crt" --tls-key "$pki/node.key" --tls-ca "$pki/ca.crt")
# Processes started by hand read the token from a file; TLS does not replace it.
(umask 077 && echo s3cret > "$tmp/token")

"$plan_bin" --log-level warn search --model zoo:tiny-candle-uno --cluster cpu-local --devices 2 \
  --batch 16 --micro-batches 4 --optimizer sgd --out "$tmp/plan.pb" >/dev/null || exit 1

# 1. The same job, plaintext and over mutual TLS, through the launcher.
GP_EXECUTOR="$exe" timeout 120 "$launch" --plan "$tmp/plan.pb" --iterations 3 \
  --metrics-out "$tmp/plain.json" --run-dir "$tmp/run-plain" > "$tmp/plain.log" 2>&1; rc=$?
check "a plaintext 2-rank job trains (exit 0)" '[ $rc -eq 0 ] && [ -s "$tmp/plain.json" ]'
check "its coordinator does not claim TLS" '! grep -q "over mutual TLS" "$tmp/plain.log"'
# Relative paths: the launcher hands the ranks absolute ones.
(cd "$pki" && GP_EXECUTOR="$exe" timeout 120 "$launch" --plan "$tmp/plan.pb" --iterations 3 \
  --metrics-out "$tmp/tls.json" --run-dir "$tmp/run-tls" --tls-cert node.crt --tls-key node.key \
  --tls-ca ca.crt) > "$tmp/tls.log" 2>&1; rc=$?
check "the job trains over mutual TLS (exit 0)" \
  '[ $rc -eq 0 ] && grep -q "\[rank 0\].*listening on .* over mutual TLS" "$tmp/tls.log"'
check "its losses equal the plaintext run's" \
  '[ -s "$tmp/tls.json" ] && [ -n "$(losses "$tmp/plain.json")" ] && [ "$(losses "$tmp/tls.json")" = "$(losses "$tmp/plain.json")" ]'

# 2. Bad flags: exit 2 naming the flag and the path, before any rank starts.
cp "$pki/node.key" "$pki/open.key" && chmod 644 "$pki/open.key"
printf 'not a certificate\n' > "$pki/junk.crt"
openssl pkey -in "$pki/node.key" -aes256 -passout pass:secret -out "$pki/locked.key" 2>/dev/null &&
  chmod 600 "$pki/locked.key"
launch_bad() {  # LABEL EXPECTED-TEXT FLAGS...
  local what=$1 expected=$2
  shift 2
  GP_EXECUTOR="$exe" timeout 60 "$launch" --plan "$tmp/plan.pb" --iterations 1 \
    --run-dir "$tmp/run-bad" "$@" > "$tmp/bad.log" 2>&1; rc=$?
  check "launcher: $what: exit 2 naming it" \
    '[ $rc -eq 2 ] && grep -qF -- "$expected" "$tmp/bad.log" && ! ls "$tmp/run-bad"/attempt-* >/dev/null 2>&1'
}
launch_bad "a missing --tls-ca file" "--tls-ca $pki/missing.crt: No such file" \
  --tls-cert "$pki/node.crt" --tls-key "$pki/node.key" --tls-ca "$pki/missing.crt"
launch_bad "--tls-cert without --tls-key" "--tls-cert $pki/node.crt needs --tls-key" \
  --tls-cert "$pki/node.crt" --tls-ca "$pki/ca.crt"
launch_bad "--tls-ca alone (rank 0 serves)" "serving TLS needs --tls-cert and --tls-key" \
  --tls-ca "$pki/ca.crt"
launch_bad "a key others can read" "--tls-key $pki/open.key: readable or writable by others" \
  --tls-cert "$pki/node.crt" --tls-key "$pki/open.key" --tls-ca "$pki/ca.crt"
launch_bad "a key of another certificate" "--tls-key $pki/stranger.key is not the key of --tls-cert" \
  --tls-cert "$pki/node.crt" --tls-key "$pki/stranger.key" --tls-ca "$pki/ca.crt"
launch_bad "an encrypted key (no terminal to ask for its passphrase)" "--tls-key $pki/locked.key: the key is encrypted" \
  --tls-cert "$pki/node.crt" --tls-key "$pki/locked.key" --tls-ca "$pki/ca.crt"
launch_bad "a certificate file without a certificate" "--tls-cert $pki/junk.crt: no PEM certificate" \
  --tls-cert "$pki/junk.crt" --tls-key "$pki/node.key" --tls-ca "$pki/ca.crt"
# FIFOs are refused at once (their open would wait for a writer), before their mode is judged.
mkfifo "$pki/fifo.crt" && mkfifo -m 600 "$pki/fifo.key" && mkfifo -m 644 "$pki/open-fifo.key"
launch_bad "a FIFO as --tls-ca" "--tls-ca $pki/fifo.crt: '$pki/fifo.crt' is a FIFO, not a regular file" \
  --tls-cert "$pki/node.crt" --tls-key "$pki/node.key" --tls-ca "$pki/fifo.crt"
launch_bad "a FIFO as --tls-key" "--tls-key $pki/fifo.key: is a FIFO, not a regular file" \
  --tls-cert "$pki/node.crt" --tls-key "$pki/fifo.key" --tls-ca "$pki/ca.crt"
launch_bad "a FIFO others may open as --tls-key" "--tls-key $pki/open-fifo.key: is a FIFO, not a regular file" \
  --tls-cert "$pki/node.crt" --tls-key "$pki/open-fifo.key" --tls-ca "$pki/ca.crt"
launch_bad "a directory as --tls-ca" "--tls-ca $pki: '$pki' is a directory, not a regular file" \
  --tls-cert "$pki/node.crt" --tls-key "$pki/node.key" --tls-ca "$pki"
"$exe" status --coordinator 127.0.0.1:1 --tls-cert "$pki/node.crt" > "$tmp/status-flags.log" 2>&1; rc=$?
check "status: --tls-cert alone: exit 2 naming the flag" \
  '[ $rc -eq 2 ] && grep -qF -- "--tls-cert $pki/node.crt needs --tls-key" "$tmp/status-flags.log"'

# 3. A coordinator serving mutual TLS (rank 0 waiting for rank 1) and the clients it refuses.
# start_rank0 NAME FLAGS...: rank 0 of the plan on a free loopback port; its address in $addr.
start_rank0() {
  local name=$1
  shift
  rm -f "$tmp/$name.addr"
  "$exe" run --plan "$tmp/plan.pb" --rank 0 --world-size 2 --coordinator 127.0.0.1:0 \
    --coordinator-file "$tmp/$name.addr" --store-dir "$tmp/$name-store" --timeout 60 \
    --auth-token-file "$tmp/token" "$@" \
    > "$tmp/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do [ -s "$tmp/$name.addr" ] && break; sleep 0.1; done
  addr=$(cat "$tmp/$name.addr" 2>/dev/null)
}
# status_try LOG FLAGS...: `status` against $addr; rc and seconds taken in $rc, $took.
status_try() {
  local log=$1 start
  shift
  start=$(date +%s)
  timeout 30 "$exe" status --coordinator "$addr" --auth-token-file "$tmp/token" "$@" \
    > "$tmp/$log" 2>&1; rc=$?
  took=$(( $(date +%s) - start ))
}
start_rank0 tls-coord "${good[@]}"
check "rank 0 hosts a coordinator over mutual TLS" \
  '[ -n "$addr" ] && grep -q "over mutual TLS" "$tmp/tls-coord.log"'
status_try status-good.log "${good[@]}"
check "status with the job's certificates is answered" \
  '[ $rc -eq 0 ] && grep -q "^rank 0" "$tmp/status-good.log"'
status_try status-plain.log
check "a plaintext client is refused within its timeout, told the server may require TLS" \
  '[ $rc -ne 0 ] && [ $took -lt 20 ] && grep -q "does not answer plaintext gRPC: it may require TLS" "$tmp/status-plain.log"'
status_try status-nocert.log --tls-ca "$pki/ca.crt"
check "a TLS client without a certificate is refused, told so" \
  '[ $rc -ne 0 ] && [ $took -lt 20 ] && grep -q "no TLS session came up: it ended the handshake, most likely refusing this client.s certificate (none given" "$tmp/status-nocert.log"'
status_try status-stranger.log --tls-cert "$pki/stranger.crt" --tls-key "$pki/stranger.key" \
  --tls-ca "$pki/ca.crt"
check "a client whose certificate another CA signed is refused" \
  '[ $rc -ne 0 ] && [ $took -lt 20 ] && grep -q "no TLS session came up: .*refusing this client.s certificate (--tls-cert $pki/stranger.crt" "$tmp/status-stranger.log"'
status_try status-otherca.log --tls-cert "$pki/node.crt" --tls-key "$pki/node.key" \
  --tls-ca "$pki/other-ca.crt"
check "a client that does not trust the server's CA does not connect, told why" \
  '[ $rc -ne 0 ] && [ $took -lt 20 ] && grep -q "no TLS session came up: its certificate does not chain to --tls-ca $pki/other-ca.crt" "$tmp/status-otherca.log"'
# A rank that cannot present the CA's certificate gives up within its --timeout, saying why.
start=$(date +%s)
timeout 60 "$exe" run --plan "$tmp/plan.pb" --rank 1 --world-size 2 --coordinator "$addr" \
  --store-dir "$tmp/tls-coord-store" --timeout 5 --auth-token-file "$tmp/token" \
  > "$tmp/rank1-plain.log" 2>&1; rc=$?
took=$(( $(date +%s) - start ))
check "a plaintext rank 1 fails within its --timeout naming the mismatch" \
  '[ $rc -ne 0 ] && [ $took -lt 20 ] && grep -q "cannot reach the coordinator at $addr within 5 s: .*may require TLS" "$tmp/rank1-plain.log"'
kill "${pids[-1]}" 2>/dev/null

start_rank0 plain-coord
status_try status-tls-vs-plain.log "${good[@]}"
check "a TLS client against a plaintext coordinator fails within its timeout, told it may serve plaintext" \
  '[ -n "$addr" ] && [ $rc -ne 0 ] && [ $took -lt 20 ] && grep -q "over TLS: a server listens there but no TLS session came up: it serves plaintext" "$tmp/status-tls-vs-plain.log"'
status_try status-plain-ok.log
check "... which answers a plaintext client" '[ $rc -eq 0 ] && grep -q "^rank 0" "$tmp/status-plain-ok.log"'
kill "${pids[-1]}" 2>/dev/null

# 4. A node daemon serving mutual TLS: its ranks get the files, submit needs them.
"$exe" serve --listen 127.0.0.1:0 --devices 2 --auth-token-file "$tmp/token" --work-dir "$tmp/work" \
  "${good[@]}" > "$tmp/daemon.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "serving" "$tmp/daemon.log" && break; sleep 0.1; done
addr=$(sed -n 's/.* on \(127.0.0.1:[0-9]*\) over mutual TLS,.*/\1/p' "$tmp/daemon.log" | head -1)
check "serve listens over mutual TLS" '[ -n "$addr" ]'
submit() { GRAPHPIPE_AUTH_TOKEN_FILE="$tmp/token" timeout 120 "$exe" submit --nodes "$addr" --plan "$tmp/plan.pb" "$@"; }
submit --iterations 3 --port 29851 "${good[@]}" -- --metrics-out "$tmp/work/m.json" \
  > "$tmp/submit.log" 2>&1; rc=$?
check "submit over mutual TLS trains (exit 0), rank 0's coordinator over TLS too" \
  '[ $rc -eq 0 ] && grep -q "over mutual TLS" "$tmp/submit.log"'
check "its losses equal the plaintext run's" \
  '[ -s "$tmp/work/m.json" ] && [ "$(losses "$tmp/work/m.json")" = "$(losses "$tmp/plain.json")" ]'
started=$(grep -c "started" "$tmp/daemon.log")
submit --iterations 1 --port 29852 > "$tmp/submit-plain.log" 2>&1; rc=$?
check "a plaintext submit is refused, told the daemon may require TLS" \
  '[ $rc -ne 0 ] && grep -q "daemon $addr: unavailable: .*may require TLS" "$tmp/submit-plain.log"'
submit --iterations 1 --port 29853 --tls-cert "$pki/stranger.crt" --tls-key "$pki/stranger.key" \
  --tls-ca "$pki/ca.crt" > "$tmp/submit-stranger.log" 2>&1; rc=$?
check "a submit whose certificate another CA signed is refused" \
  '[ $rc -ne 0 ] && grep -q "no TLS session came up: .*refusing this client.s certificate (--tls-cert $pki/stranger.crt" "$tmp/submit-stranger.log"'
GP_AUTH_TOKEN=wrong timeout 60 "$exe" submit --nodes "$addr" --plan "$tmp/plan.pb" --iterations 1 \
  --port 29854 "${good[@]}" > "$tmp/submit-token.log" 2>&1; rc=$?
check "a submit over mutual TLS with a wrong token is refused from its headers" \
  '[ $rc -ne 0 ] && grep -q "requires .authorization: Bearer <token>." "$tmp/submit-token.log" && grep -q "daemon: /graphpipe.v1.NodeDaemon/GetInfo refused before its request was read" "$tmp/daemon.log"'
check "no refused submit started a rank" '[ "$(grep -c "started" "$tmp/daemon.log")" -eq "$started" ]'
"$exe" serve --listen 127.0.0.1:0 --auth-token-file "$tmp/token" --work-dir "$tmp/work2" \
  --tls-cert "$pki/node.crt" --tls-key "$pki/node.key" > "$tmp/serve-noca.log" 2>&1; rc=$?
check "serve without --tls-ca (its ranks could not verify each other): exit 2 naming it" \
  '[ $rc -eq 2 ] && grep -q "needs --tls-ca" "$tmp/serve-noca.log"'
exit $fail
