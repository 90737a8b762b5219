#!/usr/bin/env bash
# --metrics-out and the progress lines as a user sees them: a .jsonl file grows while `local`
# trains, with one line per logged iteration whose samples/s is the progress line's; a summary
# line closes the run; a launched job resumed from a checkpoint keeps the earlier history of a
# .jsonl and of a `jq -c`-compacted .json; a file that does not parse is refused, not dropped.
set -u
exe=$1
plan_bin=$2
launch=$3
tmp=$4
rm -rf "$tmp" && mkdir -p "$tmp"
export GRAPHPIPE_RUNS_DIR="$tmp/graphpipe-runs"  # the launcher's logs stay in here
. "$(dirname "$0")/../e2e/lib.sh"
launch() { GP_EXECUTOR="$exe" GP_PLANNER="$plan_bin" timeout 180 "$launch" "$@"; }

"$plan_bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 2 \
  --batch 16 --micro-batches 4 --optimizer sgd --lr 0.01 --clip-grad-norm 100 --out "$tmp/plan.pb" \
  >/dev/null || exit 1

# 1. local, 6 iterations, a line every 2.
"$exe" local --plan "$tmp/plan.pb" --iterations 6 --log-every 2 --metrics-out "$tmp/local.jsonl" \
  > "$tmp/local.log" 2>&1; rc=$?
check "local with --metrics-out FILE.jsonl exits 0" '[ $rc -eq 0 ]'
check "one line per logged iteration with the documented fields, rate and time of one window" \
  'python3 - "$tmp/local.jsonl" <<EOF
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["iteration"] for r in rows] == [1, 3, 5], rows
for r in rows:
    assert set(r) == {"iteration", "loss", "lr", "grad_norm", "time_s", "samples_per_s",
                      "ms_per_iteration", "elapsed_s"}, r
    assert r["lr"] == 0.01 and r["grad_norm"] > 0 and r["samples_per_s"] > 0, r
    assert abs(r["samples_per_s"] * r["ms_per_iteration"] / 1000 - 16) < 1e-6, r
assert rows[0]["elapsed_s"] <= rows[1]["elapsed_s"] <= rows[2]["elapsed_s"]
EOF'
check "the progress line shows the file's samples/s for the same iteration" \
  'python3 - "$tmp/local.jsonl" "$tmp/local.log" <<EOF
import json, re, sys
log = open(sys.argv[2]).read()
for r in map(json.loads, open(sys.argv[1])):
    m = re.search(r"iteration %d: loss [0-9.]+, ([0-9.]+) samples/s, .* \(([0-9.]+) ms/iteration, lr 0.01, grad norm" % r["iteration"], log)
    assert m and m.group(1) == "%.1f" % r["samples_per_s"], (r, m)
    assert m.group(2) == "%.1f" % r["ms_per_iteration"], (r, m)
assert "iteration 2: loss" not in log
EOF'
check "a summary line closes the run: iterations, mean and p50 samples/s, predicted vs measured" \
  'grep -Eq "summary: 6 iterations, [0-9.]+ samples/s mean, [0-9.]+ p50 over 3 logged windows; predicted [0-9.]+ samples/s, measured \(mean\) / predicted = [0-9.]+" "$tmp/local.log"'

# 2. The .jsonl grows while the run goes on (not written at exit).
"$exe" --log-level warn local --plan "$tmp/plan.pb" --iterations 1000000 --log-every 20 \
  --metrics-out "$tmp/live.jsonl" > /dev/null 2>&1 &
pid=$!
for _ in $(seq 300); do
  [ -f "$tmp/live.jsonl" ] && [ "$(wc -l < "$tmp/live.jsonl")" -ge 2 ] && break
  sleep 0.1
done
check "lines are in the .jsonl while the run is still going" \
  'kill -0 $pid 2>/dev/null && [ "$(wc -l < "$tmp/live.jsonl")" -ge 2 ] && head -1 "$tmp/live.jsonl" | grep -q "^{\"iteration\":19,"'
kill -TERM $pid 2>/dev/null
wait $pid 2>/dev/null

# 3. A launched job checkpointed after iteration 3, then resumed to 8 iterations: the .jsonl keeps
#    the lines up to the checkpoint, and the lines after it are this run's, once each.
launch --plan "$tmp/plan.pb" --nprocs 2 --iterations 6 --log-every 2 --checkpoint-dir "$tmp/ck1" \
  --checkpoint-every 4 --metrics-out "$tmp/run.jsonl" > "$tmp/run1.log" 2>&1; rc=$?
check "a launched job writes the .jsonl (iterations 1 3 5)" \
  '[ $rc -eq 0 ] && [ "$(python3 -c "import json,sys; print(*[json.loads(l)[\"iteration\"] for l in open(sys.argv[1])])" "$tmp/run.jsonl")" = "1 3 5" ]'
check "rank 0 logs the summary" 'grep -q "summary: 6 iterations" "$tmp/run1.log"'
head -2 "$tmp/run.jsonl" > "$tmp/run-first.jsonl"
launch --plan "$tmp/plan.pb" --nprocs 2 --iterations 8 --log-every 2 --checkpoint-dir "$tmp/ck1" \
  --resume --metrics-out "$tmp/run.jsonl" > "$tmp/run2.log" 2>&1; rc=$?
check "resuming a .jsonl keeps lines 1 3 and appends 5 7" \
  '[ $rc -eq 0 ] && grep -q "resuming after iteration 3" "$tmp/run2.log" && [ "$(python3 -c "import json,sys; print(*[json.loads(l)[\"iteration\"] for l in open(sys.argv[1])])" "$tmp/run.jsonl")" = "1 3 5 7" ] && [ "$(head -2 "$tmp/run.jsonl")" = "$(cat "$tmp/run-first.jsonl")" ]'

# 4. The same with a .json compacted by `jq -c` (here python's equivalent) before resuming.
launch --plan "$tmp/plan.pb" --nprocs 2 --iterations 6 --checkpoint-dir "$tmp/ck2" \
  --checkpoint-every 4 --metrics-out "$tmp/run.json" > "$tmp/json1.log" 2>&1; rc=$?
iteration_losses "$tmp/run.json" | head -4 > "$tmp/first-losses.txt"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); open(sys.argv[1],"w").write(json.dumps(d,separators=(",",":"))+"\n")' "$tmp/run.json"
check "the compacted .json is one line" '[ $rc -eq 0 ] && [ "$(wc -l < "$tmp/run.json")" -eq 1 ]'
launch --plan "$tmp/plan.pb" --nprocs 2 --iterations 8 --checkpoint-dir "$tmp/ck2" --resume \
  --metrics-out "$tmp/run.json" > "$tmp/json2.log" 2>&1; rc=$?
check "resuming keeps the compacted file's iterations 0-3 and appends 4-7" \
  '[ $rc -eq 0 ] && [ "$(iteration_losses "$tmp/run.json" | cut -d" " -f1 | tr "\n" " ")" = "0 1 2 3 4 5 6 7 " ] && [ "$(iteration_losses "$tmp/run.json" | head -4)" = "$(cat "$tmp/first-losses.txt")" ]'

# 5. A file that does not parse: the resumed job is refused naming it, and the file is kept.
printf '{"iterations": [{"iteration": 0, "loss": 1.5}, {"iteration": 1, "lo' > "$tmp/bad.json"
cp "$tmp/bad.json" "$tmp/bad-copy.json"
launch --plan "$tmp/plan.pb" --nprocs 2 --iterations 8 --timeout 10 --checkpoint-dir "$tmp/ck2" \
  --resume --metrics-out "$tmp/bad.json" > "$tmp/bad.log" 2>&1; rc=$?
check "resuming over a metrics file that does not parse fails, naming the file" \
  '[ $rc -ne 0 ] && grep -qF -- "--metrics-out $tmp/bad.json: not a metrics file" "$tmp/bad.log" && cmp -s "$tmp/bad.json" "$tmp/bad-copy.json"'

exit $fail
