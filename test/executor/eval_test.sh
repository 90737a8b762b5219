#!/usr/bin/env bash
# Held-out evaluation: `reference --eval-data --eval-every` and `eval --checkpoint`, on a torch
# export trained on .npy data. The held-out loss is checked against what training itself
# computes: evaluated on the training samples with one full-batch mini-batch, the loss after
# step k is the training loss of iteration k + 1 (computed before its step).
# Usage: eval_test.sh GRAPHPIPE-EXECUTOR GRAPHPIPE-PLAN LAUNCHER TMP_DIR
set -uo pipefail
exe=$1 plan_bin=$2 launcher=$3 tmp=$4
rm -rf "$tmp" && mkdir -p "$tmp"
export GRAPHPIPE_RUNS_DIR=$tmp/runs
onnx="$(cd "$(dirname "$0")/../data/onnx" && pwd)/torch/dot_scores_op17.onnx"
fail=0
check() {  # check NAME COMMAND...
  local name=$1
  shift
  if eval "$@"; then echo "ok: $name"; else echo "FAIL: $name"; fail=1; fi
}
# field FILE KEY: KEY's values of a metrics JSON file, one per line, in order.
field() { python3 -c 'import json,sys; [print(repr(i[sys.argv[2]])) for i in json.load(open(sys.argv[1]))["iterations"] if sys.argv[2] in i]' "$1" "$2"; }
# close A B [TOL]: |A - B| <= TOL * max(1, |B|).
close() { python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); t = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-6; sys.exit(0 if abs(a - b) <= t * max(1, abs(b)) else 1)' "$@"; }

# Two directories of the model's inputs (x1, x2 and the MSE target), train and held-out.
python3 - "$tmp" <<'PY'
import os, struct, sys, random
def npy(d, name, shape, values):
    os.makedirs(d, exist_ok=True)
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % ", ".join(map(str, shape))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(os.path.join(d, name + ".npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % len(values), *values))
r = random.Random(11)
for d, n in (("train", 16), ("held", 13), ("held16", 16)):
    for x in ("x1", "x2"):
        npy(os.path.join(sys.argv[1], d), x, (n, 8), [r.uniform(-1, 1) for _ in range(n * 8)])
    npy(os.path.join(sys.argv[1], d), "y.target", (n, 1), [r.uniform(-1, 1) for _ in range(n)])
PY

"$exe" --log-level warn reference --model "$onnx" --batch 16 --iterations 4 --optimizer sgd \
  --lr 0.05 --data "$tmp/train" --no-shuffle --eval-data "$tmp/train" --eval-every 1 \
  --metrics-out "$tmp/self.json"; rc=$?
mapfile -t loss < <(field "$tmp/self.json" loss)
mapfile -t held < <(field "$tmp/self.json" eval_loss)
check "reference --eval-every 1 evaluates after every iteration" '[ $rc -eq 0 ] && [ ${#held[@]} -eq 4 ]'
check "on the training samples (full batch) the loss after step k is iteration k+1's training loss" \
  'close "${held[0]}" "${loss[1]}" && close "${held[1]}" "${loss[2]}" && close "${held[2]}" "${loss[3]}"'
check "... and training moved it (the check compares different numbers)" \
  '! close "${loss[0]}" "${loss[3]}" 1e-3'

out=$("$exe" reference --model "$onnx" --batch 8 --iterations 6 --optimizer sgd --lr 0.05 \
  --data "$tmp/train" --eval-data "$tmp/held" --eval-every 4 --metrics-out "$tmp/held.json" \
  --checkpoint-dir "$tmp/ckpt" 2>&1); rc=$?
mapfile -t held < <(field "$tmp/held.json" eval_loss)
check "--eval-every 4 of 6 iterations evaluates after iterations 3 and 5 (the last)" \
  '[ $rc -eq 0 ] && [ ${#held[@]} -eq 2 ] && [ "$(python3 -c "import json; print([i[\"iteration\"] for i in json.load(open(\"$tmp/held.json\"))[\"iterations\"] if \"eval_loss\" in i])")" = "[3, 5]" ]'
check "the progress line reports the held-out loss over the 13 held-out samples" \
  'grep -q "iteration 5: loss [0-9.]*, [0-9.]* samples/s, held-out loss [0-9.]* (13 samples)" <<< "$out"'

# eval --checkpoint: the reference's last held-out loss, whatever the evaluation batch (13 is
# split 8 + 5 at --batch 8 and 4 x 3 + 1 at --batch 3).
for b in 8 3 13; do
  e=$("$exe" --log-level warn eval --checkpoint "$tmp/ckpt" --data "$tmp/held" --model "$onnx" \
    --batch "$b" --json); rc=$?
  check "eval --batch $b of the reference's checkpoint gives its last held-out loss" \
    '[ $rc -eq 0 ] && close "$(echo "$e" | python3 -c "import json,sys; print(json.load(sys.stdin)[\"loss\"])")" "${held[1]}" && grep -q "\"iteration\":5" <<< "$e" && grep -q "\"samples\":13" <<< "$e"'
done
out=$("$exe" --log-level warn eval --checkpoint "$tmp/ckpt" --data "$tmp/held" --model "$onnx"); rc=$?
check "eval prints the loss, the samples and the checkpoint's iteration" \
  '[ $rc -eq 0 ] && grep -q "^held-out loss [0-9.]* over 13 samples of .*held (checkpoint of iteration 5)$" <<< "$out"'

# A pipelined run's checkpoint (2 ranks under the launcher) evaluates to the reference's loss.
# Two stages by hand (the search would put this small model on one device).
cat > "$tmp/two-stages.json" <<'JSON'
{"stages": [{"ops": ["x1", "tower_a_Gemm"]},
            {"ops": ["x2", "tower_b_Gemm", "Mul", "ReduceSum", "y.target", "y.loss"]}]}
JSON
"$plan_bin" --log-level warn lower --assignment "$tmp/two-stages.json" --model "$onnx" \
  --cluster cpu-local --devices 2 --batch 8 --micro-batches 4 --optimizer sgd --lr 0.05 \
  --out "$tmp/plan.pb" > /dev/null
"$launcher" --plan "$tmp/plan.pb" --nprocs 2 --iterations 6 --checkpoint-dir "$tmp/run-ckpt" \
  --checkpoint-every 6 --log-dir "$tmp/runs/launch" -- --data "$tmp/train" > "$tmp/launch.log" 2>&1; rc=$?
e=$("$exe" --log-level warn eval --checkpoint "$tmp/run-ckpt" --data "$tmp/held" --plan "$tmp/plan.pb" --json)
check "a 2-rank run's checkpoint evaluates to the reference's held-out loss" \
  '{ [ $rc -eq 0 ] && close "$(echo "$e" | python3 -c "import json,sys; print(json.load(sys.stdin)[\"loss\"])")" "${held[1]}" 1e-5; } || { tail -5 "$tmp/launch.log"; false; }'

# The same 2 ranks evaluating as they train (run --eval-data): the pipeline's forward passes over
# the held-out mini-batches give the reference's held-out loss after the same iterations.
"$exe" --log-level warn reference --model "$onnx" --batch 8 --iterations 6 --optimizer sgd \
  --lr 0.05 --data "$tmp/train" --eval-data "$tmp/held16" --eval-every 3 \
  --metrics-out "$tmp/ref16.json"; rc=$?
mapfile -t ref16 < <(field "$tmp/ref16.json" eval_loss)
"$launcher" --plan "$tmp/plan.pb" --nprocs 2 --iterations 6 --log-every 2 \
  --metrics-out "$tmp/run16.jsonl" --log-dir "$tmp/runs/eval16" -- --data "$tmp/train" \
  --eval-data "$tmp/held16" --eval-every 3 > "$tmp/run16.log" 2>&1; rc2=$?
mapfile -t run16 < <(python3 -c 'import json,sys; [print(json.loads(l)["iteration"], repr(json.loads(l)["eval_loss"])) for l in open(sys.argv[1]) if "eval_loss" in l]' "$tmp/run16.jsonl")
check "a 2-rank run --eval-every 3 of 6 evaluates after iterations 2 and 5, in the metrics" \
  '[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ ${#ref16[@]} -eq 2 ] && [ ${#run16[@]} -eq 2 ] && [ "${run16[0]%% *}" = 2 ] && [ "${run16[1]%% *}" = 5 ] || { tail -5 "$tmp/run16.log"; false; }'
check "... each equal to the reference's held-out loss after the same iteration" \
  'close "${run16[0]#* }" "${ref16[0]}" 1e-5 && close "${run16[1]#* }" "${ref16[1]}" 1e-5 && ! close "${ref16[0]}" "${ref16[1]}" 1e-4'
check "... and rank 0 prints each, with the samples it read" \
  '[ "$(grep -c "iteration [25]: held-out loss [0-9.]* (16 samples)" "$tmp/run16.log")" -eq 2 ]'
# The loss stage replicated (data parallel): each replica's part of the held-out loss adds up.
cat > "$tmp/replicated.json" <<'JSON'
{"stages": [{"ops": ["x1", "tower_a_Gemm"]},
            {"ops": ["x2", "tower_b_Gemm", "Mul", "ReduceSum", "y.target", "y.loss"], "replicas": 2}]}
JSON
"$plan_bin" --log-level warn lower --assignment "$tmp/replicated.json" --model "$onnx" \
  --cluster cpu-local --devices 3 --batch 8 --micro-batches 2 --optimizer sgd --lr 0.05 \
  --out "$tmp/plan3.pb" > /dev/null
"$launcher" --plan "$tmp/plan3.pb" --nprocs 3 --iterations 6 --metrics-out "$tmp/run3.json" \
  --log-dir "$tmp/runs/eval3" -- --data "$tmp/train" --eval-data "$tmp/held16" --eval-every 3 \
  > "$tmp/run3.log" 2>&1; rc=$?
mapfile -t run3 < <(field "$tmp/run3.json" eval_loss)
check "3 ranks, the loss stage replicated: the same held-out losses as the reference" \
  '{ [ $rc -eq 0 ] && [ ${#run3[@]} -eq 2 ] && close "${run3[0]}" "${ref16[0]}" 1e-5 && close "${run3[1]}" "${ref16[1]}" 1e-5; } || { tail -5 "$tmp/run3.log"; false; }'
# A middle stage without graph inputs learns the sample count from the files' headers.
cat > "$tmp/middle.json" <<'JSON'
{"stages": [{"ops": ["x1", "x2", "tower_a_Gemm"]}, {"ops": ["tower_b_Gemm"]},
            {"ops": ["Mul", "ReduceSum", "y.target", "y.loss"]}]}
JSON
"$plan_bin" --log-level warn lower --assignment "$tmp/middle.json" --model "$onnx" \
  --cluster cpu-local --devices 3 --batch 8 --micro-batches 2 --optimizer sgd --lr 0.05 \
  --out "$tmp/plan-mid.pb" > /dev/null
"$launcher" --plan "$tmp/plan-mid.pb" --nprocs 3 --iterations 6 --metrics-out "$tmp/mid.json" \
  --log-dir "$tmp/runs/eval-mid" -- --data "$tmp/train" --eval-data "$tmp/held16" \
  --eval-every 3 > "$tmp/mid.log" 2>&1; rc=$?
mapfile -t mid < <(field "$tmp/mid.json" eval_loss)
check "3 stages, the middle one without inputs: the same held-out losses as the reference" \
  '{ [ $rc -eq 0 ] && [ ${#mid[@]} -eq 2 ] && close "${mid[0]}" "${ref16[0]}" 1e-5 && close "${mid[1]}" "${ref16[1]}" 1e-5; } || { tail -5 "$tmp/mid.log"; false; }'
"$launcher" --plan "$tmp/plan.pb" --nprocs 2 --iterations 2 --log-dir "$tmp/runs/eval13" \
  -- --data "$tmp/train" --eval-data "$tmp/held" > "$tmp/run13.log" 2>&1; rc=$?
check "13 held-out samples at mini-batch 8: the run evaluates the whole mini-batch, 8 samples" \
  '[ $rc -eq 0 ] && grep -q "iteration 1: held-out loss [0-9.]* (8 samples)" "$tmp/run13.log"'
err=$(timeout 20 "$exe" run --plan "$tmp/plan.pb" --rank 0 --world-size 2 --insecure --eval-every 2 2>&1 >/dev/null); rc=$?
check "run --eval-every without --eval-data exits 2 naming both" \
  '[ $rc -eq 2 ] && grep -q -- "--eval-every = 2 needs --eval-data" <<< "$err"'

# Bad input: exit 2 naming the flag and what is wrong.
err=$("$exe" reference --model "$onnx" --batch 8 --iterations 1 --eval-every 2 2>&1 >/dev/null); rc=$?
check "--eval-every without --eval-data exits 2 naming both" \
  '[ $rc -eq 2 ] && grep -q -- "--eval-every 2 needs --eval-data" <<< "$err"'
mkdir -p "$tmp/short" && cp "$tmp/held/x1.npy" "$tmp/held/y.target.npy" "$tmp/short/"
err=$("$exe" reference --model "$onnx" --batch 8 --iterations 1 --eval-data "$tmp/short" 2>&1 >/dev/null); rc=$?
check "--eval-data missing an input's file exits 2 naming the flag and the file" \
  '[ $rc -eq 2 ] && grep -q -- "--eval-data .*short" <<< "$err" && grep -q "x2.npy" <<< "$err"'
mkfifo "$tmp/short/x2.npy"
err=$(timeout 20 "$exe" eval --checkpoint "$tmp/ckpt" --data "$tmp/short" --model "$onnx" 2>&1 >/dev/null); rc=$?
check "eval --data holding a FIFO exits 2 at once naming it" '[ $rc -eq 2 ] && grep -q "x2.npy" <<< "$err"'
err=$("$exe" eval --checkpoint "$tmp/nothing" --data "$tmp/held" --model "$onnx" 2>&1 >/dev/null); rc=$?
check "eval of a directory without a checkpoint fails naming it" \
  '[ $rc -ne 0 ] && [ $rc -ne 139 ] && grep -q "nothing" <<< "$err"'
err=$("$exe" eval --checkpoint "$tmp/ckpt" --data "$tmp/held" --model zoo:tiny-mmt 2>&1 >/dev/null); rc=$?
check "eval of another model's checkpoint exits non-zero naming the data or checkpoint mismatch" \
  '[ $rc -ne 0 ] && [ $rc -ne 139 ] && [ -n "$err" ]'
exit $fail
