#!/usr/bin/env bash
# Adaptive re-planning benchmark (issue 43): a 4-rank CPU job of a model with >= 4 branches whose
# rank 1 is slowed 3x (graphpipe-launch --slowdown 1:3), trained with its static plan and with
# --adapt; and the same plan unslowed with --adapt, which must not switch. Prints one table of
# measured samples/s (the static plan's over its whole run after warm-up; --adapt's after its last
# switch, so over the plan it switched to), switches, and whether every loss equals a
# single-process reference run over the same samples. Exit 1 when a target is missed:
#   --adapt switches at least once under the slowdown, and its rate after the switch is
#   >= 1.3x the static plan's under the same slowdown; no switch without a slowdown; losses equal.
#
#   bench/adaptive/run.sh [--model SPEC] [--batch N] [--iterations N] [--slowdown F] [--out DIR]
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/build/bin"
model='zoo:candle-uno?branches=4&layers=2&width=128'
batch=64
iterations=1500
slowdown=3
out="$root/out/adaptive"
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --slowdown) slowdown=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "adaptive: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for tool in graphpipe-profile graphpipe-plan graphpipe-executor; do
  [ -x "$bin/$tool" ] || { echo "adaptive: $bin/$tool not built (run scripts/build.sh)" >&2; exit 2; }
done
rm -rf "$out" && mkdir -p "$out"
export GRAPHPIPE_RUNS_DIR="$out/runs"
warmup=10

sizes=1; b=2
while [ "$b" -le "$batch" ]; do sizes="$sizes,$b"; b=$((b * 2)); done
echo "== profile the operators of $model on this CPU (micro-batches $sizes)"
"$bin/graphpipe-profile" ops --model "$model" --micro-batches "$sizes" --out "$out/profile.pb" \
  --log-level warn || exit 1
echo "== plan for 4 ranks of cpu-local with the profile"
"$bin/graphpipe-plan" search --model "$model" --cluster cpu-local --devices 4 --batch "$batch" \
  --profile "$out/profile.pb" --optimizer adam --out "$out/plan.pb" --log-level warn || exit 1
"$bin/graphpipe-plan" inspect --plan "$out/plan.pb" | sed -n '1,12p'

# The reference accumulates over the plan's micro-batch, as the ranks do: the same sums in the
# same order, so the losses must be bit-identical, not merely close.
mb=$("$bin/graphpipe-plan" inspect --plan "$out/plan.pb" |
  awk '/^ +[0-9]+ +ranks/ { for (i = 1; i < NF; i++) if ($i == "mb") print $(i + 1) }' | sort -u)
[ "$(echo "$mb" | wc -l)" -eq 1 ] || { echo "adaptive: the plan's stages differ in micro-batch ($mb)"; exit 1; }
echo "== the reference: one process, $iterations iterations, micro-batch $mb"
"$bin/graphpipe-executor" --log-level warn reference --plan "$out/plan.pb" --micro-batch "$mb" \
  --iterations "$iterations" --metrics-out "$out/reference.json" || exit 1

launch() {  # NAME ARGS...: a 4-rank job; its metrics in $out/NAME.jsonl, its log $out/NAME.log
  local name=$1
  shift
  GP_EXECUTOR="$bin/graphpipe-executor" GP_PLANNER="$bin/graphpipe-plan" \
    timeout 1200 "$root/scripts/graphpipe-launch" --plan "$out/plan.pb" --nprocs 4 \
    --iterations "$iterations" --timeout 60 --metrics-out "$out/$name.jsonl" \
    --checkpoint-dir "$out/ckpt-$name" --run-dir "$out/runs/$name" "$@" \
    > "$out/$name.log" 2>&1
}
echo "== static plan, rank 1 slowed ${slowdown}x"
launch static --slowdown "1:$slowdown" || { echo "adaptive: the static run failed ($out/static.log)"; exit 1; }
echo "== --adapt, rank 1 slowed ${slowdown}x"
launch adapt --adapt --adapt-warmup "$warmup" --adapt-profile "$out/profile.pb" \
  --slowdown "1:$slowdown" || { echo "adaptive: the --adapt run failed ($out/adapt.log)"; exit 1; }
echo "== --adapt, no slowdown"
launch healthy --adapt --adapt-warmup "$warmup" --adapt-profile "$out/profile.pb" ||
  { echo "adaptive: the unslowed --adapt run failed ($out/healthy.log)"; exit 1; }

# Mean samples/s over the entries after iteration FROM of a .jsonl metrics file.
rate_after() {  # FILE FROM
  python3 - "$1" "$2" <<'EOF'
import json, sys
rates = [e["samples_per_s"] for e in map(json.loads, open(sys.argv[1]))
         if e["iteration"] > int(sys.argv[2]) and e.get("samples_per_s", 0) > 0]
print(f"{sum(rates) / len(rates):.1f}" if rates else "0")
EOF
}
# The first iteration of the last attempt: where the launcher last resumed (0: none).
last_start() {  # LOG
  local n
  n=$(grep -o 'adapt: resuming after iteration [0-9]*' "$1" | tail -1 | awk '{print $NF}')
  echo "${n:-0}"
}
switches() { grep -c 'adapt: switching' "$1"; }
# "yes" when every loss equals the reference's bit for bit; else the largest relative difference
# (a plan with another micro-batch sums its gradients in another order).
same_losses() {
  python3 - "$1" "$out/reference.json" <<'EOF'
import json, sys
def load(path):
    entries = json.load(open(path))["iterations"] if path.endswith(".json") else \
              [json.loads(l) for l in open(path)]
    return {e["iteration"]: e["loss"] for e in entries}
run, ref = load(sys.argv[1]), load(sys.argv[2])
if run == ref:
    print("yes")
else:
    common = [k for k in run if k in ref]
    worst = max((abs(run[k] - ref[k]) / max(abs(ref[k]), 1e-30) for k in common), default=1.0)
    print(f"rel {worst:.1e}" if len(common) == len(ref) else "MISSING")
EOF
}

static_rate=$(rate_after "$out/static.jsonl" "$warmup")
adapt_from=$(( $(last_start "$out/adapt.log") + warmup ))
adapt_rate=$(rate_after "$out/adapt.jsonl" "$adapt_from")
healthy_rate=$(rate_after "$out/healthy.jsonl" "$warmup")
adapt_switches=$(switches "$out/adapt.log")
healthy_switches=$(switches "$out/healthy.log")
ratio=$(python3 -c "print(f'{$adapt_rate / $static_rate:.2f}' if $static_rate > 0 else '0')")

healthy_ratio=$(python3 -c "print(f'{$healthy_rate / $static_rate:.2f}' if $static_rate > 0 else '0')")
predicted=$(grep -m1 'adapt: gain ' "$out/adapt.log" | awk '{printf "%.2f", 1 + $NF}')

echo
printf '%-34s %10s %14s %16s %8s\n' run switches "samples/s" "vs static" losses
printf '%-34s %10s %14s %16s %8s\n' "static plan, rank 1 ${slowdown}x" 0 "$static_rate" 1.00 \
  "$(same_losses "$out/static.jsonl")"
printf '%-34s %10s %14s %16s %8s\n' "--adapt, rank 1 ${slowdown}x (after switch)" \
  "$adapt_switches" "$adapt_rate" "$ratio" "$(same_losses "$out/adapt.jsonl")"
printf '%-34s %10s %14s %16s %8s\n' "--adapt, no slowdown" "$healthy_switches" "$healthy_rate" \
  "$healthy_ratio" "$(same_losses "$out/healthy.jsonl")"
echo
echo "The simulator predicted the switch at ${predicted:-?}x the static plan's rate under the slowdown"
echo "(each rank its own device). Here $(nproc) cores run the 4 ranks: the unslowed job's rate,"
echo "${healthy_ratio}x the static plan's, is about the most the cores give any plan of this model."
grep 'adapt:' "$out/adapt.log" | sed 's/^/  /' | head -40

fail=0
target() {  # WHAT CONDITION
  if eval "$2"; then echo "met:    $1"; else echo "MISSED: $1"; fail=1; fi
}
target "--adapt switches at least once under the slowdown" '[ "$adapt_switches" -ge 1 ]'
target "after the switch >= 1.3x the static plan's samples/s (${ratio}x)" \
  "python3 -c 'import sys; sys.exit(0 if $ratio >= 1.3 else 1)'"
target "no switch without a slowdown" '[ "$healthy_switches" -eq 0 ]'
target "every loss equals the single-process reference's, bit for bit" \
  '[ "$(same_losses "$out/static.jsonl")$(same_losses "$out/adapt.jsonl")$(same_losses "$out/healthy.jsonl")" = yesyesyes ]'
exit $fail
