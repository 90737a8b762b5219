#!/usr/bin/env bash
# graphpipe-plan report as a user runs it: a report of a plan the executor trained, with its
# metrics and measured trace; every bad input exits 2 naming the file and the problem.
set -u
plan_bin=$1
exe=$2
tmp=$3
rm -rf "$tmp" && mkdir -p "$tmp"
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
svgs() { grep -o "<svg " "$1" | wc -l; }

"$plan_bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 4 --batch 16 \
  --out "$tmp/plan.pb" >/dev/null; rc=$?
check "search writes the plan" '[ $rc -eq 0 ]'
"$exe" --log-level warn local --plan "$tmp/plan.pb" --iterations 4 --metrics-out "$tmp/m.jsonl" \
  --trace "$tmp/measured.json"; rc=$?
check "the executor writes metrics and a measured trace" '[ $rc -eq 0 ] && [ -s "$tmp/m.jsonl" ]'
"$exe" --log-level warn local --plan "$tmp/plan.pb" --iterations 4 --metrics-out "$tmp/m.json" \
  >/dev/null; rc=$?
check "the executor writes .json metrics" '[ $rc -eq 0 ] && [ -s "$tmp/m.json" ]'

out=$("$plan_bin" report "$tmp/plan.pb" --metrics "$tmp/m.jsonl" --trace "$tmp/measured.json" \
      --out "$tmp/report.html"); rc=$?
check "report with metrics and trace exits 0 and says where it wrote" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "bottleneck stage [0-9]*) -> $tmp/report.html"'
check "the full report has four svg sections" '[ "$(svgs "$tmp/report.html")" -eq 4 ]'
check "the full report shows the measured iteration" \
  'grep -q "measured (executor trace, iteration 4 of 4)" "$tmp/report.html"'
check "the full report is self-contained (no script, nothing fetched)" \
  '! grep -qiE "<script|src=|href=|@import|url\(http" "$tmp/report.html"'
"$plan_bin" report --plan "$tmp/plan.pb" --metrics "$tmp/m.json" --out "$tmp/json.html" >/dev/null
rc=$?
check "report reads .json metrics too (--plan spelt out)" \
  '[ $rc -eq 0 ] && [ "$(svgs "$tmp/json.html")" -eq 4 ]'
"$plan_bin" report "$tmp/plan.pb" --out "$tmp/plain.html" >/dev/null; rc=$?
check "report of the plan alone has three svg sections" \
  '[ $rc -eq 0 ] && [ "$(svgs "$tmp/plain.html")" -eq 3 ]'
"$plan_bin" report --help | grep -q -- "--metrics"; rc=$?
check "report --help explains --metrics" '[ $rc -eq 0 ]'

# ---- bad input: exit 2, the file and the problem named, no report written ----
bad() {  # name expected-message-regex args...
  local name=$1 expected=$2
  shift 2
  rm -f "$tmp/bad.html"
  err=$("$plan_bin" report "$@" 2>&1 >/dev/null); rc=$?
  check "$name exits 2 naming it" \
    '[ $rc -eq 2 ] && echo "$err" | grep -q -- "$expected" && [ ! -e "$tmp/bad.html" ]'
}
bad "a missing plan" "cannot open '$tmp/nope.pb'" "$tmp/nope.pb" --out "$tmp/bad.html"
bad "a missing metrics file" "--metrics: cannot open '$tmp/nope.jsonl'" "$tmp/plan.pb" \
  --metrics "$tmp/nope.jsonl" --out "$tmp/bad.html"
bad "a missing trace" "--trace: cannot open '$tmp/nope.json'" "$tmp/plan.pb" \
  --trace "$tmp/nope.json" --out "$tmp/bad.html"
bad "a directory as metrics" "is a directory" "$tmp/plan.pb" --metrics "$tmp" --out "$tmp/bad.html"
mkfifo "$tmp/fifo"
rm -f "$tmp/bad.html"
err=$(timeout 20 "$plan_bin" report "$tmp/plan.pb" --trace "$tmp/fifo" --out "$tmp/bad.html" 2>&1 \
      >/dev/null); rc=$?
check "a FIFO as the trace exits 2 at once naming it" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--trace: .*fifo. is a FIFO"'
chmod 000 "$tmp/m.jsonl"
if [ "$(id -u)" -ne 0 ]; then
  bad "an unreadable metrics file" "--metrics: cannot open" "$tmp/plan.pb" \
    --metrics "$tmp/m.jsonl" --out "$tmp/bad.html"
fi
chmod 644 "$tmp/m.jsonl"
bad "a trace given as metrics" "--metrics $tmp/measured.json: no \"iterations\" array" \
  "$tmp/plan.pb" --metrics "$tmp/measured.json" --out "$tmp/bad.html"
bad "metrics given as the trace" "--trace $tmp/m.jsonl: not a JSON object" "$tmp/plan.pb" \
  --trace "$tmp/m.jsonl" --out "$tmp/bad.html"
printf '{"iteration": 0, "loss": 1}\n{"iteration": 1, "loss": \n' > "$tmp/cut.jsonl"
bad "a metrics file cut mid-line" "--metrics $tmp/cut.jsonl line 2: not a JSON object" \
  "$tmp/plan.pb" --metrics "$tmp/cut.jsonl" --out "$tmp/bad.html"
: > "$tmp/empty.jsonl"
bad "an empty metrics file" "--metrics $tmp/empty.jsonl: no metrics entries" "$tmp/plan.pb" \
  --metrics "$tmp/empty.jsonl" --out "$tmp/bad.html"
"$plan_bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 1 --batch 16 \
  --out "$tmp/one.pb" >/dev/null
bad "a trace of another plan" "--trace $tmp/measured.json: rank [0-9]* .*another plan" \
  "$tmp/one.pb" --trace "$tmp/measured.json" --out "$tmp/bad.html"
bad "a plan file that is not one" "--plan" "$tmp/m.jsonl" --out "$tmp/bad.html"
bad "--out in a missing directory" "--out" "$tmp/plan.pb" --out "$tmp/no/such/dir/bad.html"
bad "no --out" "--out is required" "$tmp/plan.pb"

exit $fail
