#!/usr/bin/env bash
# graphpipe-plan search --recompute as a user runs it: a bad value exits 2 naming it; always marks
# every stage in the plan, the report and inspect, and so does `lower`, saying what each saves;
# never marks none.
set -u
bin=$1
tmp=$2
rm -rf "$tmp" && mkdir -p "$tmp"
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
# A JSON plan's stages and how many of them recompute.
count() {
  python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))["stages"]; print(len(s), sum(1 for x in s if x.get("recompute")))' "$1"
}
search() {
  "$bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 4 --batch 16 \
    --micro-batches 4 "$@"
}

err=$(search --recompute sometimes --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "search --recompute sometimes exits 2 naming the flag and the value" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--recompute = .sometimes.: expected auto, never or always"'
check "nothing is written for a refused --recompute" '[ ! -e "$tmp/x.pb" ]'

search --recompute always --out "$tmp/always.json" --report "$tmp/always-report.json" \
  >/dev/null; rc=$?
check "search --recompute always exits 0" '[ $rc -eq 0 ]'
read -r stages marked <<< "$(count "$tmp/always.json")"
check "always: every stage of the plan recomputes ($marked of $stages)" \
  '[ "$stages" -ge 1 ] && [ "$marked" -eq "$stages" ]'
check "always: the report says why each stage recomputes" \
  'python3 -c "import json, sys; st = json.load(open(sys.argv[1]))[\"stages\"]; sys.exit(0 if st and all(s[\"recompute\"] and s[\"recompute_reason\"].startswith(\"--recompute always; without recomputation\") for s in st) else 1)" "$tmp/always-report.json"'
out=$("$bin" inspect --plan "$tmp/always.json"); rc=$?
check "inspect lists the recomputing stages with their memory without and with" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "recomputes$" && echo "$out" | grep -q "stage 0 recomputes its forward before each backward: .* per device without, .* with"'

# lower of the tiny-candle-uno branches assignment, recomputing: the plan and the output say so.
out=$("$bin" --log-level warn lower --assignment "$(dirname "$0")/../../configs/assignments/tiny-candle-uno-branches.json" \
  --model zoo:tiny-candle-uno --cluster cpu-local --devices 4 --batch 16 --micro-batches 4 \
  --recompute always --out "$tmp/lowered.json" 2>&1); rc=$?
read -r stages marked <<< "$(count "$tmp/lowered.json")"
check "lower --recompute always marks every stage ($marked of $stages) and says what each saves" \
  '[ $rc -eq 0 ] && [ "$marked" -eq "$stages" ] && echo "$out" | grep -q "^recomputation:" &&
   echo "$out" | grep -q "stage 0 recomputes its forward before each backward: .* per device without, .* with"'

search --recompute never --out "$tmp/never.json" --report "$tmp/never-report.json" >/dev/null
rc=$?
read -r stages marked <<< "$(count "$tmp/never.json")"
check "never: no stage recomputes ($marked of $stages), and the report says false" \
  '[ $rc -eq 0 ] && [ "$stages" -ge 1 ] && [ "$marked" -eq 0 ] && tr -d " \n" < "$tmp/never-report.json" | grep -q "\"recompute\":false" && ! grep -q recompute_reason "$tmp/never-report.json"'
out=$("$bin" inspect --plan "$tmp/never.json")
check "never: inspect mentions no recomputation" '! echo "$out" | grep -q recomput'

exit $fail
