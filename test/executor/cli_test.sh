#!/usr/bin/env bash
# graphpipe-executor as a user runs it: a plan trained locally matches the reference.
set -u
exe=$1
plan_bin=$2
tmp=$3
rm -rf "$tmp" && mkdir -p "$tmp"
export GRAPHPIPE_RUNS_DIR="$tmp/graphpipe-runs"  # the launcher's logs stay in here
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
losses() { grep -o '"loss": [-0-9.e]*' "$1" | awk '{printf "%.6f\n", $2}'; }

"$exe" --log-level warn reference --model zoo:tiny-dlrm --batch 16 --iterations 4 --lr 0.01 \
  --metrics-out "$tmp/ref.json"; rc=$?
check "reference writes metrics for every iteration" '[ $rc -eq 0 ] && [ "$(losses "$tmp/ref.json" | wc -l)" -eq 4 ]'
check "metrics have the documented keys" 'grep -q "\"iterations\"" "$tmp/ref.json" && grep -q "\"samples_per_s\"" "$tmp/ref.json" && grep -q "\"time_s\"" "$tmp/ref.json"'

"$plan_bin" --log-level warn search --model zoo:tiny-dlrm --cluster cpu-local --devices 3 --batch 16 \
  --micro-batches 4 --optimizer sgd --out "$tmp/plan.pb" >/dev/null; rc=$?
# The search may leave devices idle where fewer simulate faster; the checks below use the plan's
# own rank count.
n=$("$plan_bin" inspect --plan "$tmp/plan.pb" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["ranks"])')
check "planned tiny-dlrm on several ranks" '[ $rc -eq 0 ] && [ "$n" -ge 2 ]'
"$exe" --log-level warn local --plan "$tmp/plan.pb" --iterations 4 --metrics-out "$tmp/local.json" \
  --trace "$tmp/local-trace.json"; rc=$?
check "local run of the plan exits 0" '[ $rc -eq 0 ]'
check "local run writes a measured Chrome trace" 'grep -q "traceEvents" "$tmp/local-trace.json" && grep -q "\"name\":\"F0\"" "$tmp/local-trace.json"'
check "the plan's losses equal the reference's" '[ "$(losses "$tmp/local.json")" = "$(losses "$tmp/ref.json")" ]'

"$plan_bin" --log-level warn search --model zoo:tiny-dlrm --cluster cpu-local --devices 3 --batch 16 \
  --micro-batches 4 --optimizer sgd --out "$tmp/plan.json" >/dev/null
mkdir -p "$tmp/bad"
# Both modes that run a plan check it whole (structure and schedule) before the first iteration;
# `run` is refused before it looks for its coordinator (nothing listens on port 9).
while read -r file expected; do
  err=$("$exe" local --plan "$file" --iterations 1 2>&1 >/dev/null); rc=$?
  check "local $(basename "$file") exits 2 naming '$expected'" \
    '[ $rc -eq 2 ] && echo "$err" | grep -qF "$expected"'
  err=$(timeout 30 "$exe" run --plan "$file" --rank 0 --world-size 3 --iterations 1 --insecure \
    --coordinator 127.0.0.1:9 --store-dir "$tmp/bad-store" 2>&1 >/dev/null); rc=$?
  check "run $(basename "$file") exits 2 naming '$expected'" \
    '[ $rc -eq 2 ] && echo "$err" | grep -qF "$expected"'
done < <(python3 "$(dirname "$0")/../support/make_bad_plans.py" "$tmp/plan.json" "$tmp/bad" |
         grep -v "empty_file")
err=$("$exe" reference --plan "$tmp/bad/cluster_edited.json" --iterations 1 2>&1 >/dev/null); rc=$?
check "reference --plan refuses a plan edited after planning, naming the hash" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "plan.cluster_hash = .* does not match the embedded cluster"'
err=$("$exe" reference --model zoo:tiny-mmt --batch 8 --lr inf 2>&1 >/dev/null); rc=$?
check "--lr inf exits 2 naming the field" '[ $rc -eq 2 ] && echo "$err" | grep -q "learning_rate = inf"'
err=$(env -u GP_AUTH_TOKEN timeout 10 "$exe" serve --listen 127.0.0.1:0 --work-dir "$tmp/serve-open" 2>&1 >/dev/null); rc=$?
check "serve without a token exits 2 unless --insecure" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--insecure" && echo "$err" | grep -q -- "--auth-token-file FILE"'
# Secure by default: every server (rank 0's coordinator, coordinator, serve) needs a token from
# --auth-token-file (or $GRAPHPIPE_AUTH_TOKEN_FILE) unless --insecure; no token comes from argv.
noenv=(env -u GP_AUTH_TOKEN -u GRAPHPIPE_AUTH_TOKEN_FILE)
(umask 077 && echo s3cret > "$tmp/token")
for server in "coordinator --plan $tmp/plan.pb --world-size $n --listen 127.0.0.1:0" \
  "run --plan $tmp/plan.pb --rank 0 --world-size $n --coordinator 127.0.0.1:0"; do
  # shellcheck disable=SC2086  # the command line is split on purpose
  err=$("${noenv[@]}" timeout 10 "$exe" $server 2>&1 >/dev/null); rc=$?
  check "${server%% *} without a token exits 2 naming --auth-token-file and --insecure" \
    '[ $rc -eq 2 ] && echo "$err" | grep -q "no token: .*give --auth-token-file FILE .*or --insecure"'
done
for cmd in "run --plan $tmp/plan.pb --rank 1 --world-size $n --coordinator 127.0.0.1:9" \
  "coordinator --plan $tmp/plan.pb --world-size $n" "serve --listen 127.0.0.1:0" \
  "submit --nodes 127.0.0.1:9 --plan $tmp/plan.pb" "status --coordinator 127.0.0.1:9"; do
  # shellcheck disable=SC2086
  err=$(timeout 10 "$exe" $cmd --auth-token s3cret 2>&1 >/dev/null); rc=$?
  check "${cmd%% *} --auth-token VALUE is refused (exit 2), pointing to --auth-token-file" \
    '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--auth-token: a token on the command line is visible" && echo "$err" | grep -q -- "--auth-token-file FILE"'
done
# coordinator_up NAME FLAGS...: a standalone coordinator of the plan; its address in $coord_addr.
coordinator_up() {
  local name=$1; shift
  "${noenv[@]}" "$exe" coordinator --plan "$tmp/plan.pb" --world-size "$n" --listen 127.0.0.1:0 \
    --coordinator-file "$tmp/$name.addr" "$@" > "$tmp/$name.log" 2>&1 &
  coord_pid=$!
  for _ in $(seq 100); do [ -s "$tmp/$name.addr" ] && break; sleep 0.1; done
  coord_addr=$(cat "$tmp/$name.addr" 2>/dev/null)
}
coordinator_up open --insecure
out=$("${noenv[@]}" timeout 20 "$exe" status --coordinator "$coord_addr" 2>&1); rc=$?
kill "$coord_pid"; wait "$coord_pid" 2>/dev/null
check "coordinator --insecure warns at start and answers a call without a token" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "rank 0: not registered" && grep -q "INSECURE: coordinator runs without a token (--insecure): anyone who can reach 127.0.0.1:0" "$tmp/open.log"'
coordinator_up closed --auth-token-file "$tmp/token"
err=$("${noenv[@]}" timeout 20 "$exe" status --coordinator "$coord_addr" 2>&1 >/dev/null); rc=$?
out=$("${noenv[@]}" GRAPHPIPE_AUTH_TOKEN_FILE="$tmp/token" timeout 20 "$exe" status \
  --coordinator "$coord_addr" 2>&1); rc_env=$?
kill "$coord_pid"; wait "$coord_pid" 2>/dev/null
check "a coordinator with --auth-token-file refuses a call without its token" \
  '[ $rc -ne 0 ] && echo "$err" | grep -q "requires .authorization: Bearer <token>."'
check "status takes the token file from \$GRAPHPIPE_AUTH_TOKEN_FILE" \
  '[ $rc_env -eq 0 ] && echo "$out" | grep -q "rank 0: not registered" && ! grep -q INSECURE "$tmp/closed.log"'
err=$(timeout 10 "$exe" serve --insecure --listen 127.0.0.1:70000 --work-dir "$tmp/serve-bad" 2>&1 >/dev/null); rc=$?
check "serve --listen with port 70000 exits 2 instead of wrapping" '[ $rc -eq 2 ] && echo "$err" | grep -q "port 70000 is outside 0..65535"'
err=$("$exe" reference --model zoo:tiny-mmt --batch 8 --lr 1e30 --iterations 4 \
  --metrics-out "$tmp/nonfinite.json" 2>&1 >/dev/null); rc=$?
check "reference stops on a NaN loss with exit 3, naming the iteration" \
  '[ $rc -eq 3 ] && echo "$err" | grep -q "the loss is NaN at iteration 1" && [ "$(grep -c "\"iteration\"" "$tmp/nonfinite.json")" -eq 2 ]'
"$plan_bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 2 --batch 8 \
  --optimizer sgd --lr 1e30 --out "$tmp/nonfinite.pb" >/dev/null
err=$("$exe" local --plan "$tmp/nonfinite.pb" --iterations 3 2>&1 >/dev/null); rc=$?
check "local exits 3 on a NaN loss, naming the iteration" \
  '[ $rc -eq 3 ] && echo "$err" | grep -q "the loss is NaN at iteration 1"'
"$exe" --log-level warn local --plan "$tmp/nonfinite.pb" --iterations 3 --allow-nonfinite; rc=$?
check "local --allow-nonfinite trains on through a NaN loss" '[ $rc -eq 0 ]'
# A rank killed mid-run: rank 0 names it and exits within a few heartbeats, not after --timeout.
port=$((20000 + RANDOM % 20000))
# (sequential: the baselines plan on every device; GraphPipe may find one device faster)
"$plan_bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 2 --batch 8 \
  --strategy sequential --out "$tmp/two-ranks.pb" >/dev/null
(GP_AUTH_TOKEN=t timeout 90 "$exe" --log-level warn run --plan "$tmp/two-ranks.pb" --rank 0 \
  --world-size 2 --coordinator "127.0.0.1:$port" --iterations 100000000 --timeout 60 \
  --store-dir "$tmp/kill-store" > "$tmp/kill-r0.log" 2>&1; echo $? > "$tmp/kill-r0.rc") &
r0=$!
GP_AUTH_TOKEN=t "$exe" --log-level warn run --plan "$tmp/two-ranks.pb" --rank 1 --world-size 2 \
  --coordinator "127.0.0.1:$port" --iterations 100000000 --timeout 60 \
  --store-dir "$tmp/kill-store" > "$tmp/kill-r1.log" 2>&1 &
r1=$!
sleep 3
kill -9 "$r1"; killed_at=$SECONDS
wait "$r0"; took=$((SECONDS - killed_at))
check "rank 0 exits within 15 s of rank 1's death (--timeout 60), naming it (took ${took} s)" \
  '[ "$(cat "$tmp/kill-r0.rc")" -ne 0 ] && [ "$took" -lt 15 ] && grep -q "rank 1" "$tmp/kill-r0.log"'
for bad in 127.0.0.1:99999 127.0.0.1:-5 :29500 garbage; do
  err=$(timeout 20 "$exe" run --plan "$tmp/plan.pb" --rank 1 --world-size "$n" --iterations 1 \
    --coordinator "$bad" --store-dir "$tmp/bad-store" 2>&1 >/dev/null); rc=$?
  check "run --coordinator $bad exits 2 at once, naming it" \
    '[ $rc -eq 2 ] && echo "$err" | grep -qF "coordinator address $bad"'
done
"$exe" serve --insecure --listen 127.0.0.1:0 --work-dir "$tmp/serve-a" > "$tmp/serve-a.log" 2>&1 & serve_pid=$!
for _ in $(seq 50); do grep -q "serving" "$tmp/serve-a.log" && break; sleep 0.1; done
busy=$(sed -n 's/.* on \(127.0.0.1:[0-9]*\),.*/\1/p' "$tmp/serve-a.log" | head -1)
err=$(timeout 10 "$exe" serve --insecure --listen "$busy" --work-dir "$tmp/serve-b" 2>&1 >/dev/null); rc=$?
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null
check "a second serve on a live daemon's port ($busy) exits 2 naming it" \
  '[ -n "$busy" ] && [ $rc -eq 2 ] && echo "$err" | grep -qF -- "--listen $busy: cannot bind"'
err=$("$exe" local --plan "$tmp/missing.pb" 2>&1 >/dev/null); rc=$?
check "a missing plan exits 2 naming it" '[ $rc -eq 2 ] && echo "$err" | grep -q "missing.pb"'
err=$("$exe" reference --model zoo:tiny-mmt --batch 8 --micro-batch 3 2>&1 >/dev/null); rc=$?
check "a micro-batch not dividing the batch exits 2" '[ $rc -eq 2 ] && echo "$err" | grep -q "must divide"'
err=$("$exe" reference --model zoo:tiny-mmt --batch 8 --optimizer lion 2>&1 >/dev/null); rc=$?
check "an unknown optimizer exits 2" '[ $rc -eq 2 ] && echo "$err" | grep -q "expected sgd, momentum or adam"'
err=$("$exe" reference --model zoo:tiny-mmt --batch 8 --lr 0 2>&1 >/dev/null); rc=$?
check "a zero learning rate exits 2 naming the field" '[ $rc -eq 2 ] && echo "$err" | grep -q "learning_rate = 0"'

# Imported ONNX models train in the reference; a model with opaque ops is refused by name.
onnx_dir="$(cd "$(dirname "$0")/../data/onnx" && pwd)"
"$exe" --log-level warn reference --model "$onnx_dir/inception_block.onnx" --batch 8 \
  --iterations 2 --metrics-out "$tmp/inception.json"; rc=$?
check "reference trains an .onnx vision block" \
  '[ $rc -eq 0 ] && [ "$(losses "$tmp/inception.json" | wc -l)" -eq 2 ]'
"$plan_bin" import "$onnx_dir/gated_unsupported.onnx" --allow-opaque --out "$tmp/gated.pbtxt" >/dev/null
err=$("$exe" reference --model "$tmp/gated.pbtxt" --batch 8 --iterations 1 2>&1 >/dev/null); rc=$?
check "a model with opaque ops cannot train: exit 2 naming the op and its ONNX type" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "gate.mod" && echo "$err" | grep -q "ONNX operator Mod"'
# Real data (--data): .npy files per graph input, written here with the standard library. A
# plan over 2 ranks of a two-branch torch export trains on them with the reference's losses.
python3 - "$tmp/data" <<'PY'
import os, struct, sys, random
d = sys.argv[1]; os.makedirs(d, exist_ok=True)
def npy(name, fmt, code, shape, values):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        code, ", ".join(map(str, shape)) + ("," if len(shape) == 1 else ""))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(os.path.join(d, name + ".npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))
r = random.Random(5)
n = 24
npy("x1", "f", "<f4", (n, 8), [r.uniform(-1, 1) for _ in range(n * 8)])
npy("x2", "f", "<f4", (n, 8), [r.uniform(-1, 1) for _ in range(n * 8)])
npy("y.target", "f", "<f4", (n, 1), [r.uniform(-1, 1) for _ in range(n)])
PY
dot="$onnx_dir/torch/dot_scores_op17.onnx"
"$exe" --log-level warn reference --model "$dot" --batch 8 --iterations 4 --optimizer sgd \
  --lr 0.01 --seed 1 --data "$tmp/data" --metrics-out "$tmp/data-ref.json"; rc=$?
check "reference trains on --data" '[ $rc -eq 0 ] && [ "$(losses "$tmp/data-ref.json" | wc -l)" -eq 4 ]'
"$exe" --log-level warn reference --model "$dot" --batch 8 --iterations 4 --optimizer sgd \
  --lr 0.01 --seed 1 --metrics-out "$tmp/synthetic-ref.json"
check "--data changes what it trains on" \
  '[ "$(losses "$tmp/data-ref.json")" != "$(losses "$tmp/synthetic-ref.json")" ]'
"$plan_bin" --log-level warn search --model "$dot" --cluster cpu-local --devices 2 --batch 8 \
  --micro-batches 2 --optimizer sgd --lr 0.01 --out "$tmp/dot-plan.pb" >/dev/null
"$exe" --log-level warn local --plan "$tmp/dot-plan.pb" --iterations 4 --data "$tmp/data" \
  --metrics-out "$tmp/data-local.json"; rc=$?
check "a 2-rank plan on --data has the reference's losses" \
  '[ $rc -eq 0 ] && [ "$(losses "$tmp/data-local.json")" = "$(losses "$tmp/data-ref.json")" ]'
"$exe" --log-level warn reference --plan "$tmp/dot-plan.pb" --iterations 4 --data "$tmp/data" \
  --metrics-out "$tmp/data-plan-ref.json"; rc=$?
check "reference --plan takes the plan's model, batch and training settings" \
  '[ $rc -eq 0 ] && [ "$(losses "$tmp/data-plan-ref.json")" = "$(losses "$tmp/data-local.json")" ]'
"$exe" --log-level warn reference --plan "$tmp/dot-plan.pb" --iterations 4 --data "$tmp/data" \
  --lr 0.5 --metrics-out "$tmp/data-plan-lr.json"
check "a flag overrides the plan's setting" \
  '[ "$(losses "$tmp/data-plan-lr.json" | tail -1)" != "$(losses "$tmp/data-local.json" | tail -1)" ]'
"$plan_bin" --log-level warn search --model "$dot" --cluster cpu-local --devices 2 --batch 8 \
  --optimizer adam --lr 0.002 --beta1 0.8 --beta2 0.99 --eps 1e-6 --out "$tmp/adam-plan.json" >/dev/null
check "search stores the hyperparameters in the plan" \
  'grep -q "\"learning_rate\": 0.002" "$tmp/adam-plan.json" && grep -q "\"adam_beta1\": 0.8" "$tmp/adam-plan.json" && grep -q "\"adam_epsilon\": 1e-06" "$tmp/adam-plan.json"'
"$plan_bin" --log-level warn search --model "$dot" --cluster cpu-local --devices 2 --batch 8 \
  --seed 7 --optimizer momentum --lr 0.05 --weight-decay 0.01 --lr-schedule warmup-cosine --warmup-steps 2 \
  --total-steps 6 --min-lr 0.001 --out "$tmp/sched-plan.pb" >/dev/null; rc=$?
check "search stores weight decay and a warm-up cosine schedule" \
  '[ $rc -eq 0 ] && "$plan_bin" inspect --plan "$tmp/sched-plan.pb" | grep -q "momentum lr 0.05 (momentum 0.9), weight decay 0.01, warm-up 2 then cosine to 0.001 at step 6, fp32, seed 7"'
"$exe" --log-level warn local --plan "$tmp/sched-plan.pb" --iterations 6 --data "$tmp/data" \
  --metrics-out "$tmp/sched-local.json"; rc=$?
"$exe" --log-level warn reference --plan "$tmp/sched-plan.pb" --iterations 6 --data "$tmp/data" \
  --metrics-out "$tmp/sched-ref.json"
check "the plan trains with them (and shuffles with its seed) as its reference does" \
  '[ $rc -eq 0 ] && [ "$(losses "$tmp/sched-local.json")" = "$(losses "$tmp/sched-ref.json")" ]'
# Gradient-norm clipping: stored, shown, and applied over both ranks as the reference applies it.
"$plan_bin" --log-level warn search --model "$dot" --cluster cpu-local --devices 2 --batch 8 \
  --optimizer sgd --lr 0.1 --clip-grad-norm 0.01 --out "$tmp/clip-plan.pb" >/dev/null; rc=$?
check "search stores --clip-grad-norm and inspect shows it" \
  '[ $rc -eq 0 ] && "$plan_bin" inspect --plan "$tmp/clip-plan.pb" | grep -q "sgd lr 0.1, gradient norm clipped at 0.01, fp32"'
"$exe" --log-level warn local --plan "$tmp/clip-plan.pb" --iterations 4 --data "$tmp/data" \
  --metrics-out "$tmp/clip-local.json"; rc=$?
"$exe" --log-level warn reference --plan "$tmp/clip-plan.pb" --iterations 4 --data "$tmp/data" \
  --metrics-out "$tmp/clip-ref.json"
"$exe" --log-level warn reference --plan "$tmp/clip-plan.pb" --clip-grad-norm 0 --iterations 4 \
  --data "$tmp/data" --metrics-out "$tmp/noclip-ref.json"
check "the plan clips over both ranks as its reference does (and clipping changes the losses)" \
  '[ $rc -eq 0 ] && [ "$(losses "$tmp/clip-local.json")" = "$(losses "$tmp/clip-ref.json")" ] && [ "$(losses "$tmp/clip-ref.json" | tail -1)" != "$(losses "$tmp/noclip-ref.json" | tail -1)" ]'
err=$("$plan_bin" search --model "$dot" --cluster cpu-local --batch 8 --clip-grad-norm -1 \
  --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "a negative --clip-grad-norm exits 2 naming the field" '[ $rc -eq 2 ] && echo "$err" | grep -q "training.clip_grad_norm = -1"'
err=$("$plan_bin" search --model "$dot" --cluster cpu-local --batch 8 --lr-schedule step \
  --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "an unknown --lr-schedule exits 2 naming it" '[ $rc -eq 2 ] && echo "$err" | grep -q "lr-schedule = .step."'
err=$("$plan_bin" search --model "$dot" --cluster cpu-local --batch 8 --lr-schedule warmup-cosine \
  --warmup-steps 5 --total-steps 5 --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "a schedule ending in its warm-up exits 2 naming the fields" '[ $rc -eq 2 ] && echo "$err" | grep -q "training.warmup_steps = 5, training.total_steps = 5"'
err=$("$exe" reference --model "$dot" --plan "$tmp/dot-plan.pb" 2>&1 >/dev/null); rc=$?
check "reference with both --model and --plan exits 2" '[ $rc -eq 2 ] && echo "$err" | grep -q "exactly one of --model and --plan"'
err=$("$exe" reference --model "$dot" --batch 8 --weight-decay -1 2>&1 >/dev/null); rc=$?
check "a negative --weight-decay exits 2 naming the field" '[ $rc -eq 2 ] && echo "$err" | grep -q "training.weight_decay = -1"'
check "inspect shows the training settings" \
  '"$plan_bin" inspect --plan "$tmp/adam-plan.json" | grep -q "training   adam lr 0.002 (betas 0.8, 0.99, eps 1e-06), fp32, seed 1"'
err=$("$plan_bin" search --model "$dot" --cluster cpu-local --batch 8 --optimizer sgd --beta1 0.5 \
  --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "search refuses a hyperparameter its optimizer does not use" '[ $rc -eq 2 ] && echo "$err" | grep -q "apply to --optimizer adam"'
mv "$tmp/data/x2.npy" "$tmp/x2.npy"
err=$("$exe" local --plan "$tmp/dot-plan.pb" --iterations 1 --data "$tmp/data" 2>&1 >/dev/null); rc=$?
check "a missing input file exits 2 naming it" '[ $rc -eq 2 ] && echo "$err" | grep -q "x2.npy"'
mv "$tmp/x2.npy" "$tmp/data/x2.npy"
err=$("$exe" reference --model "$dot" --batch 32 --iterations 1 --data "$tmp/data" 2>&1 >/dev/null); rc=$?
check "too few samples exits 2 saying so" '[ $rc -eq 2 ] && echo "$err" | grep -q "24 samples, fewer than the mini-batch of 32"'

# Weights out: train an imported model, checkpoint it, export it as ONNX and as .npz.
"$plan_bin" --log-level warn import "$dot" --out "$tmp/dot.pbtxt"
"$exe" --log-level warn reference --model "$tmp/dot.pbtxt" --batch 8 --iterations 3 --data "$tmp/data" \
  --checkpoint-dir "$tmp/dot-ck"; rc=$?
check "reference --checkpoint-dir writes a checkpoint" '[ $rc -eq 0 ] && [ -f "$tmp/dot-ck/LATEST" ]'
"$exe" --log-level warn export --checkpoint "$tmp/dot-ck" --model "$tmp/dot.pbtxt" --out "$tmp/dot-trained.onnx"; rc=$?
"$plan_bin" --log-level warn import "$tmp/dot-trained.onnx" --out "$tmp/dot-trained.pbtxt"; rc2=$?
check "export writes an ONNX model that imports again" '[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && ! cmp -s "$dot" "$tmp/dot-trained.onnx"'
"$exe" --log-level warn export --checkpoint "$tmp/dot-ck" --model "$tmp/dot.pbtxt" --out "$tmp/dot-trained.npz"; rc=$?
check "export writes an .npz that zipfile reads, with every parameter" \
  '[ $rc -eq 0 ] && python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); assert z.testzip() is None; n = z.namelist(); assert len(n) == 4 and all(x.endswith(\".npy\") for x in n), n" "$tmp/dot-trained.npz"'
# .safetensors and .npz hold the model's own (torch's) tensor names; numpy and the safetensors
# package read them where installed (GP_TEST_PYTHON: an interpreter that has them).
"$exe" --log-level warn export --checkpoint "$tmp/dot-ck" --model "$tmp/dot.pbtxt" --out "$tmp/dot-trained.safetensors"; rc=$?
check "export writes .safetensors and .npz under the ONNX model's tensor names" \
  '[ $rc -eq 0 ] && "${GP_TEST_PYTHON:-python3}" "$(dirname "$0")/../support/check_weights_export.py" "$tmp/dot-trained.safetensors" "$tmp/dot-trained.npz" tower_a.weight tower_a.bias tower_b.weight tower_b.bias'
err=$("$exe" export --checkpoint "$tmp/dot-ck" --model zoo:tiny-mmt --out "$tmp/x.onnx" 2>&1 >/dev/null); rc=$?
check "export of another model's checkpoint exits non-zero naming the model" '[ $rc -ne 0 ] && echo "$err" | grep -q "model"'

# Weights by reference: import writes them once next to the model; models and plans refer to
# them by hash, so plans stay small; a changed weights file is refused.
enc="$onnx_dir/torch/encoder_layer_op17.onnx"
mkdir -p "$tmp/wref"
"$plan_bin" --log-level warn import "$enc" --out "$tmp/wref/enc.pbtxt" >/dev/null
check "import writes the values to enc.weights, not into the model" \
  '[ -s "$tmp/wref/enc.weights" ] && grep -q "weights_file: \"enc.weights\"" "$tmp/wref/enc.pbtxt" && ! grep -q "param_values" "$tmp/wref/enc.pbtxt"'
"$plan_bin" --log-level warn search --model "$tmp/wref/enc.pbtxt" --cluster cpu-local --devices 2 \
  --batch 8 --optimizer sgd --out "$tmp/wref/plan.pbtxt" >/dev/null
check "a plan refers to the weights file, without values" \
  'grep -q "weights_file: \"$tmp/wref/enc.weights\"" "$tmp/wref/plan.pbtxt" && ! grep -q "param_values" "$tmp/wref/plan.pbtxt"'
"$plan_bin" --log-level warn search --model "$enc" --cluster cpu-local --devices 2 --batch 8 \
  --optimizer sgd --out "$tmp/wref/direct.json" --report "$tmp/wref/direct-report.json" >/dev/null
check "a plan of an .onnx model keeps its values in <plan>.weights" \
  '[ -s "$tmp/wref/direct.json.weights" ] && ! grep -q "param_values" "$tmp/wref/direct.json"'
plan_hash=$(grep -o '"model_hash": "[0-9a-f]*"' "$tmp/wref/direct.json")
report_hash=$(grep -o '"model_hash": "[0-9a-f]*"' "$tmp/wref/direct-report.json")
check "its report names the model hash the plan file has" '[ -n "$plan_hash" ] && [ "$plan_hash" = "$report_hash" ]'
"$exe" --log-level warn local --plan "$tmp/wref/plan.pbtxt" --iterations 2 --metrics-out "$tmp/wref/a.json"; rc=$?
"$exe" --log-level warn reference --model "$enc" --batch 8 --iterations 2 --optimizer sgd --lr 0.01 \
  --metrics-out "$tmp/wref/b.json"
check "a plan with referenced weights trains from the imported values" \
  '[ $rc -eq 0 ] && [ "$(losses "$tmp/wref/a.json")" = "$(losses "$tmp/wref/b.json")" ]'
mkdir -p "$tmp/wref/moved" && cp "$tmp/wref/enc.pbtxt" "$tmp/wref/enc.weights" "$tmp/wref/moved/"
"$exe" --log-level warn reference --model "$tmp/wref/moved/enc.pbtxt" --batch 8 --iterations 2 \
  --optimizer sgd --lr 0.01 --metrics-out "$tmp/wref/c.json"; rc=$?
check "a model moved with its weights file still finds them" \
  '[ $rc -eq 0 ] && [ "$(losses "$tmp/wref/c.json")" = "$(losses "$tmp/wref/b.json")" ]'
printf 'x' >> "$tmp/wref/enc.weights"
err=$("$exe" local --plan "$tmp/wref/plan.pbtxt" --iterations 1 2>&1 >/dev/null); rc=$?
check "a changed weights file exits 2 naming it and the hash" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "enc.weights" && echo "$err" | grep -q "hash"'

# Devices: the CPU ignores --precision; cuda:N trains where there is a GPU and otherwise exits 1
# naming the device; unknown devices and precisions exit 2 naming the flag.
"$exe" --log-level warn reference --model zoo:tiny-dlrm --batch 16 --iterations 4 --lr 0.01 \
  --device cpu --precision bf16 --metrics-out "$tmp/ref-bf16.json"; rc=$?
check "the CPU ignores --precision" \
  '[ $rc -eq 0 ] && [ "$(losses "$tmp/ref-bf16.json")" = "$(losses "$tmp/ref.json")" ]'
err=$("$exe" --log-level warn reference --model zoo:tiny-mmt --batch 8 --iterations 1 \
  --device cuda:0 2>&1 >/dev/null); rc=$?
check "--device cuda:0 trains on a GPU or exits 1 naming the device, never crashes" \
  '[ $rc -eq 0 ] || { [ $rc -eq 1 ] && echo "$err" | grep -q "cuda:0"; }'
err=$("$exe" reference --model zoo:tiny-mmt --batch 8 --device tpu 2>&1 >/dev/null); rc=$?
check "an unknown device exits 2 naming the flag" '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--device"'
err=$("$exe" local --plan "$tmp/plan.pb" --precision fp64 2>&1 >/dev/null); rc=$?
check "an unknown precision exits 2 naming the flag" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--precision"'
err=$("$exe" --log-level warn run --plan "$tmp/plan.pb" --rank 0 --world-size "$n" --insecure \
  --data-plane nccl --device cpu 2>&1 >/dev/null); rc=$?
check "--data-plane nccl on the CPU exits 2 naming both flags" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--data-plane nccl needs --device cuda:N"'
for flag in --data-plane --cpu-affinity; do
  err=$("$exe" run --plan "$tmp/none.pb" --rank 0 --world-size 1 "$flag" bogus 2>&1); rc=$?
  check "run rejects an unknown $flag value with exit 2 naming the flag" \
    '[ $rc -eq 2 ] && echo "$err" | grep -q -- "$flag"'
done
# export --plan: the plan names the model (its --plan must not make it `run --plan`).
"$exe" --log-level warn reference --plan "$tmp/plan.pb" --iterations 2 --checkpoint-dir "$tmp/ref-ck" \
  > /dev/null 2>&1
err=$("$exe" --log-level warn export --plan "$tmp/plan.pb" --checkpoint "$tmp/ref-ck" \
  --out "$tmp/trained.npz" 2>&1); rc=$?
check "export --plan writes the checkpoint's parameters" '[ $rc -eq 0 ] && [ -s "$tmp/trained.npz" ]'

err=$(timeout 30 "$exe" run --plan "$tmp/plan.pb" --rank 5 --world-size "$n" --trace "$tmp/t.json" \
  --coordinator 127.0.0.1:9 --store-dir "$tmp/bad-store" 2>&1 >/dev/null); rc=$?
check "run --rank past the plan's ranks with --trace exits 2 naming the rank" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--rank = 5 has no program"'
# The launcher's decisions, as scripts/graphpipe-launch reads them: KEY VALUE lines.
out=$("$exe" launcher place --plan "$tmp/plan.pb" --device cuda 2>&1); rc=$?
last=$((n - 1))
check "launcher place: the plan's ranks, each on the GPU of its local rank" \
  '[ $rc -eq 0 ] && [ "$(echo "$out" | head -1)" = "nprocs $n" ] && echo "$out" | grep -qx "rank $last 0 $last cuda:$last $last"'
err=$("$exe" launcher place --plan "$tmp/plan.pb" --nprocs 5 2>&1 >/dev/null); rc=$?
check "launcher place: an --nprocs other than the plan's exits 2, naming both" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "graphpipe-launch: error: --nprocs 5, but the plan .* has $n ranks"'
err=$("$exe" launcher place --plan "$tmp/bad/format_version_1.json" 2>&1 >/dev/null); rc=$?
check "launcher place: a plan of an older format exits 2 before any rank starts, naming it" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "plan.format_version = 1: a plan from an older graphpipe-plan"'
err=$(printf 'a 2\nb 2\n' | "$exe" launcher place --plan "$tmp/plan.pb" --hostfile - \
  --hostfile-name hosts.txt 2>&1 >/dev/null); rc=$?
check "launcher place: a hostfile that does not fit the plan exits 2, naming it" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "hosts.txt has 4 slots, the plan has $n ranks"'
printf 'failed_rank=1\nreason=rank 1 stopped responding\n' > "$tmp/verdict"
out=$("$exe" launcher blame --exit-statuses 1,137,139 --stopped-by-launcher 1 \
  --verdict-file "$tmp/verdict" 2>&1); rc=$?
check "launcher blame: a rank killed by a signal of its own beats the verdict's rank" \
  '[ $rc -eq 0 ] && echo "$out" | grep -qx "failed_rank 2" && echo "$out" | grep -qx "exit_status 139" && echo "$out" | grep -qx "message rank 2 failed (exit status 139): rank 1 stopped responding"'
err=$("$exe" launcher blame --exit-statuses 0,1 --stopped-by-launcher 5 2>&1 >/dev/null); rc=$?
check "launcher blame: a rank outside the job exits 2" '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--stopped-by-launcher 5"'
mkdir -p "$tmp/ck" && echo iter-3 > "$tmp/ck/LATEST"
out=$(printf 'a 2 10.0.0.1\nb 2 10.0.0.2\n' | "$exe" launcher next --on-failure replan \
  --checkpoint-dir "$tmp/ck" --attempt 0 --nprocs 4 --exit-status 137 --failed-rank 1 \
  --hostfile - 2>&1); rc=$?
check "launcher next: re-plan without rank 1, its plan beside the checkpoints, one slot fewer" \
  '[ $rc -eq 0 ] && echo "$out" | grep -qx "restart 1" && echo "$out" | grep -qx "plan $tmp/ck/plan-after-failure-1.pb" && echo "$out" | grep -qx "checkpoint iter-3" && echo "$out" | grep -qx "host a 1 10.0.0.1" && echo "$out" | grep -qx "exclude_rank 1"'
out=$("$exe" launcher next --on-failure replan --checkpoint-dir "$tmp/ck" --attempt 3 \
  --nprocs 4 --exit-status 137 --failed-rank 1 2>&1); rc=$?
check "launcher next: --max-restarts reached" \
  '[ $rc -eq 0 ] && echo "$out" | grep -qx "restart 0" && echo "$out" | grep -qx "message giving up after 3 restarts"'
# Inputs that are not regular files are refused at once, naming them: open() of a FIFO would wait
# for a writer forever (timeout turns such a hang into a failure).
mkfifo "$tmp/fifo.pb" "$tmp/token-fifo" && mkfifo -m 600 "$tmp/token-fifo600"
mkdir -p "$tmp/token-dir"
err=$(timeout 20 "$exe" local --plan "$tmp/fifo.pb" --iterations 1 2>&1 >/dev/null); rc=$?
named="'$tmp/fifo.pb' is a FIFO, not a regular file"
check "local --plan FIFO exits 2 at once naming it" '[ $rc -eq 2 ] && echo "$err" | grep -qF "$named"'
for f in token-fifo token-fifo600 token-dir; do
  err=$(timeout 20 "$exe" status --coordinator 127.0.0.1:9 --auth-token-file "$tmp/$f" 2>&1 >/dev/null); rc=$?
  check "status --auth-token-file $f: exit 2, not a regular file (whoever may read it)" \
    '[ $rc -eq 2 ] && echo "$err" | grep -qF -- "--auth-token-file $tmp/$f: is a" && echo "$err" | grep -q "not a regular file" && ! echo "$err" | grep -q "readable by others"'
done
err=$(timeout 20 "$exe" launcher place --plan "$tmp/plan.pb" --hostfile "$tmp/fifo.pb" 2>&1 >/dev/null); rc=$?
check "launcher place --hostfile FIFO exits 2 at once naming it" \
  '[ $rc -eq 2 ] && echo "$err" | grep -qF -- "--hostfile: $named"'
# A checkpoint whose LATEST is a FIFO: its newest checkpoint is used instead, with a warning naming
# it; without one, resuming is refused naming it.
cp -r "$tmp/dot-ck" "$tmp/fifo-ck" && rm "$tmp/fifo-ck/LATEST" && mkfifo "$tmp/fifo-ck/LATEST"
named="'$tmp/fifo-ck/LATEST' is a FIFO, not a regular file"
err=$(timeout 20 "$exe" export --checkpoint "$tmp/fifo-ck" --model "$tmp/dot.pbtxt" \
  --out "$tmp/fifo-trained.npz" 2>&1 >/dev/null); rc=$?
check "export --checkpoint with a FIFO as LATEST uses the newest checkpoint, naming the FIFO" \
  '[ $rc -eq 0 ] && [ -s "$tmp/fifo-trained.npz" ] && echo "$err" | grep -qF "$named"'
rm -rf "$tmp/fifo-ck"/iter-*
err=$(timeout 20 "$exe" export --checkpoint "$tmp/fifo-ck" --model "$tmp/dot.pbtxt" \
  --out "$tmp/fifo-trained.npz" 2>&1 >/dev/null); rc=$?
check "export --checkpoint with only a FIFO as LATEST fails at once naming it" \
  '[ $rc -ne 0 ] && [ $rc -ne 124 ] && echo "$err" | grep -qF "$named"'
# Count flags are bounded before anything is allocated: an absurd value exits 2 naming the flag,
# the value and the bound, never an uncaught std::bad_alloc (SIGABRT).
bounded() {  # NAME TEXT COMMAND...: the command exits 2 and its stderr has TEXT
  local name=$1 want=$2
  shift 2
  err=$(timeout 20 "$@" 2>&1 >/dev/null); rc=$?
  check "$name exits 2 naming the bound" '[ $rc -eq 2 ] && echo "$err" | grep -qF -- "$want"'
}
for w in 2147483647 100000000; do
  bounded "coordinator --world-size $w" "--world-size: Value $w not in range 1 to 65536" \
    "$exe" coordinator --plan "$tmp/plan.pb" --world-size $w --listen 127.0.0.1:0
  bounded "run --world-size $w" "--world-size: Value $w not in range 1 to 65536" \
    "$exe" run --plan "$tmp/plan.pb" --rank 0 --world-size $w
done
bounded "coordinator --world-size other than the plan's" \
  "world_size (--world-size) = $((n + 1)), but the plan has $n ranks" \
  "$exe" coordinator --plan "$tmp/plan.pb" --world-size $((n + 1)) --listen 127.0.0.1:0 --insecure
bounded "serve --devices 2147483647" "--devices = 2147483647, must be at most 1024" \
  "$exe" serve --devices 2147483647 --insecure --listen 127.0.0.1:0 --work-dir "$tmp/serve-work"
bounded "--cpu-threads 4096" "--cpu-threads = 4096, must be 1.." \
  "$exe" --cpu-threads 4096 status --coordinator 127.0.0.1:9
bounded "launcher place --nprocs 100000" "--nprocs: Value 100000 not in range 1 to 65536" \
  "$exe" launcher place --plan "$tmp/plan.pb" --nprocs 100000
bounded "submit --iterations 0" "--iterations: Value 0 not in range 1 to 1073741824" \
  "$exe" submit --nodes 127.0.0.1:9 --plan "$tmp/plan.pb" --iterations 0

# Checkpoint flags that would do nothing are refused before anything runs, naming both flags;
# --resume on a directory without a checkpoint names it; --resume-if-present starts fresh there.
refused() {  # NAME TEXT COMMAND...: the command exits 2 and its stderr has TEXT
  local name=$1 want=$2
  shift 2
  err=$(timeout 20 "$@" 2>&1 >/dev/null); rc=$?
  check "$name exits 2 naming it" '[ $rc -eq 2 ] && echo "$err" | grep -qF -- "$want"'
}
refused "run --checkpoint-every without --checkpoint-dir" \
  "--checkpoint-every 2 needs --checkpoint-dir" \
  "$exe" run --plan "$tmp/plan.pb" --rank 0 --world-size "$n" --coordinator 127.0.0.1:9 \
  --insecure --checkpoint-every 2
refused "submit -- --checkpoint-every without --checkpoint-dir" \
  "--checkpoint-every 3 needs --checkpoint-dir" \
  "$exe" submit --nodes 127.0.0.1:9 --plan "$tmp/plan.pb" -- --checkpoint-every 3
refused "run --resume with --resume-if-present" "--resume excludes --resume-if-present" \
  "$exe" run --plan "$tmp/plan.pb" --rank 0 --world-size "$n" --coordinator 127.0.0.1:9 \
  --resume "$tmp/none" --resume-if-present "$tmp/none"
refused "run --resume of a directory without a checkpoint" \
  "--resume $tmp/no-ck: no checkpoint in '$tmp/no-ck'" \
  "$exe" run --plan "$tmp/plan.pb" --rank 0 --world-size "$n" --coordinator 127.0.0.1:9 \
  --insecure --resume "$tmp/no-ck"
"$plan_bin" --log-level warn search --model zoo:tiny-dlrm --cluster cpu-local --devices 1 \
  --batch 16 --micro-batches 2 --optimizer adam --out "$tmp/one.pb" >/dev/null
one() {
  timeout 60 "$exe" run --plan "$tmp/one.pb" --rank 0 --world-size 1 --coordinator 127.0.0.1:0 \
    --insecure --checkpoint-dir "$tmp/rip" --checkpoint-every 1 --resume-if-present "$tmp/rip" "$@"
}
err=$(one --iterations 2 2>&1 >/dev/null); rc=$?
check "run --resume-if-present without a checkpoint starts at iteration 0 with one warning" \
  '[ $rc -eq 0 ] && [ "$(echo "$err" | grep -c "no checkpoint there yet")" -eq 1 ] && [ -f "$tmp/rip/LATEST" ] && ! echo "$err" | grep -q resuming'
err=$(one --iterations 4 2>&1 >/dev/null); rc=$?
check "run --resume-if-present with a checkpoint resumes from it" \
  '[ $rc -eq 0 ] && echo "$err" | grep -q "resuming after iteration 1 from" && ! echo "$err" | grep -q "no checkpoint"'
# DeepSpeed's/MPI's hostfile form, as the launcher reads it.
printf 'node-a slots=2 max_slots=4  # spare\nnode-b slots=1\n' > "$tmp/ds-hosts"
out=$("$exe" launcher hosts --hostfile "$tmp/ds-hosts" 2>&1); rc=$?
check "launcher hosts: HOST slots=N [max_slots=M] lines read as HOST SLOTS" \
  '[ $rc -eq 0 ] && [ "$(echo "$out" | grep "^host" | tr -s " " | sed "s/ *$//")" = "$(printf "host node-a 2\nhost node-b 1")" ]'
# torchrun's variables stand in for absent flags; a flag and a variable that disagree exit 2.
err=$(RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=0 timeout 60 "$exe" run \
  --plan "$tmp/one.pb" --insecure --iterations 1 2>&1 >/dev/null); rc=$?
check "run takes its rank, world size and coordinator from RANK, WORLD_SIZE, MASTER_ADDR/PORT" \
  '[ $rc -eq 0 ]'
for row in "RANK=1|--rank 0|--rank 0 conflicts with \$RANK=1" \
  "RANK=1 WORLD_SIZE=1||\$RANK = 1 must be below \$WORLD_SIZE = 1" \
  "RANK=x WORLD_SIZE=1||\$RANK='x' must be an integer" \
  "MASTER_ADDR=127.0.0.1|--rank 0|\$MASTER_PORT is not set, but \$MASTER_ADDR is" \
  "MASTER_ADDR=127.0.0.1 MASTER_PORT=1|--rank 0 --coordinator 127.0.0.1:2|--coordinator 127.0.0.1:2 conflicts with \$MASTER_ADDR:\$MASTER_PORT=127.0.0.1:1"; do
  IFS='|' read -r vars flags message <<< "$row"
  # shellcheck disable=SC2086  # the variables and flags are split on purpose
  err=$(env $vars timeout 60 "$exe" run --plan "$tmp/one.pb" --insecure --world-size 1 $flags \
    2>&1 >/dev/null); rc=$?
  check "run with $vars $flags exits 2: $message" '[ $rc -eq 2 ] && echo "$err" | grep -qF -- "$message"'
done
exit $fail
