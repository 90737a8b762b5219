#!/usr/bin/env bash
# graphpipe-executor as a user runs it: a plan trained locally matches the reference.
set -u
exe=$1
plan_bin=$2
tmp=$3
rm -rf "$tmp" && mkdir -p "$tmp"
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
losses() { grep -o '"loss": [-0-9.e]*' "$1" | awk '{printf "%.6f\n", $2}'; }

"$exe" --log-level warn reference --model zoo:tiny-dlrm --batch 16 --iterations 4 --lr 0.01 \
  --metrics-out "$tmp/ref.json"; rc=$?
check "reference writes metrics for every iteration" '[ $rc -eq 0 ] && [ "$(losses "$tmp/ref.json" | wc -l)" -eq 4 ]'
check "metrics have the documented keys" 'grep -q "\"iterations\"" "$tmp/ref.json" && grep -q "\"samples_per_s\"" "$tmp/ref.json" && grep -q "\"time_s\"" "$tmp/ref.json"'

"$plan_bin" --log-level warn search --model zoo:tiny-dlrm --cluster cpu-local --devices 3 --batch 16 \
  --micro-batches 4 --optimizer sgd --out "$tmp/plan.pb" >/dev/null; rc=$?
check "planned tiny-dlrm on 3 ranks" '[ $rc -eq 0 ]'
"$exe" --log-level warn local --plan "$tmp/plan.pb" --iterations 4 --metrics-out "$tmp/local.json" \
  --trace "$tmp/local-trace.json"; rc=$?
check "local run of the plan exits 0" '[ $rc -eq 0 ]'
check "local run writes a measured Chrome trace" 'grep -q "traceEvents" "$tmp/local-trace.json" && grep -q "\"name\":\"F0\"" "$tmp/local-trace.json"'
check "the plan's losses equal the reference's" '[ "$(losses "$tmp/local.json")" = "$(losses "$tmp/ref.json")" ]'

"$plan_bin" --log-level warn search --model zoo:tiny-dlrm --cluster cpu-local --devices 3 --batch 16 \
  --micro-batches 4 --optimizer sgd --out "$tmp/plan.json" >/dev/null
mkdir -p "$tmp/bad"
while read -r file expected; do
  err=$("$exe" local --plan "$file" --iterations 1 2>&1 >/dev/null); rc=$?
  check "local $(basename "$file") exits 2 naming '$expected'" \
    '[ $rc -eq 2 ] && echo "$err" | grep -qF "$expected"'
done < <(python3 "$(dirname "$0")/../support/make_bad_plans.py" "$tmp/plan.json" "$tmp/bad" |
         grep -v "empty_file")
err=$("$exe" reference --model zoo:tiny-mmt --batch 8 --lr inf 2>&1 >/dev/null); rc=$?
check "--lr inf exits 2 naming the field" '[ $rc -eq 2 ] && echo "$err" | grep -q "learning_rate = inf"'
err=$(timeout 10 "$exe" serve --listen 127.0.0.1:70000 --work-dir "$tmp/serve-bad" 2>&1 >/dev/null); rc=$?
check "serve --listen with port 70000 exits 2 instead of wrapping" '[ $rc -eq 2 ] && echo "$err" | grep -q "port 70000 is outside 0..65535"'
"$exe" serve --listen 127.0.0.1:0 --work-dir "$tmp/serve-a" > "$tmp/serve-a.log" 2>&1 & serve_pid=$!
for _ in $(seq 50); do grep -q "serving" "$tmp/serve-a.log" && break; sleep 0.1; done
busy=$(sed -n 's/.* on \(127.0.0.1:[0-9]*\),.*/\1/p' "$tmp/serve-a.log" | head -1)
err=$(timeout 10 "$exe" serve --listen "$busy" --work-dir "$tmp/serve-b" 2>&1 >/dev/null); rc=$?
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
  '[ $rc -eq 2 ] && echo "$err" | grep -q "gate.max" && echo "$err" | grep -q "ONNX operator Max"'
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
err=$("$exe" --log-level warn run --plan "$tmp/plan.pb" --rank 0 --world-size 3 \
  --data-plane nccl --device cpu 2>&1 >/dev/null); rc=$?
check "--data-plane nccl on the CPU exits 2 naming both flags" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--data-plane nccl needs --device cuda:N"'
for flag in --data-plane --cpu-affinity; do
  err=$("$exe" run --plan "$tmp/none.pb" --rank 0 --world-size 1 "$flag" bogus 2>&1); rc=$?
  check "run rejects an unknown $flag value with exit 2 naming the flag" \
    '[ $rc -eq 2 ] && echo "$err" | grep -q -- "$flag"'
done
exit $fail
