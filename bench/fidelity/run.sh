#!/usr/bin/env bash
# Fidelity benchmark: profile this CPU (operators and Gloo links), plan a model for 2 ranks of
# cpu-local with the measured costs, train the plan with graphpipe-launch, and print predicted
# vs measured iteration time and per-stage busy time. Both traces are written for side-by-side
# viewing in Perfetto (ui.perfetto.dev): predicted-trace.json and measured-trace.json.
#
#   bench/fidelity/run.sh [--model SPEC] [--batch N] [--iterations N] [--out DIR]
#                         [--data-plane auto|gloo]   (auto: shared memory between local ranks)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/build/bin"
model='zoo:mmt?branches=2&layers=2&seq=32&hidden=128&heads=4&ffn=512'
batch=16
iterations=30
out="$root/out/fidelity"
data_plane=auto
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --data-plane) data_plane=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fidelity: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for tool in graphpipe-profile graphpipe-plan graphpipe-executor gp_fidelity_report; do
  [ -x "$bin/$tool" ] || { echo "fidelity: $bin/$tool not built (run scripts/build.sh)" >&2; exit 2; }
done
mkdir -p "$out"

# Micro-batch sizes the planner may pick: powers of two up to the mini-batch.
sizes=1; b=2
while [ "$b" -le "$batch" ]; do sizes="$sizes,$b"; b=$((b * 2)); done

echo "== profile operators of $model (micro-batches $sizes)"
"$bin/graphpipe-profile" ops --model "$model" --micro-batches "$sizes" --out "$out/ops.pb" \
  --log-level warn
echo "== profile the links between 2 local ranks ($data_plane data plane)"
"$bin/graphpipe-profile" comm --ranks 2 --data-plane "$data_plane" --out "$out/comm.pb" \
  --log-level warn
"$bin/graphpipe-profile" merge "$out/ops.pb" "$out/comm.pb" --out "$out/profile.pb" --log-level warn
echo "== plan for 2 ranks of cpu-local with the profile"
"$bin/graphpipe-plan" search --model "$model" --cluster cpu-local --devices 2 --batch "$batch" \
  --profile "$out/profile.pb" --optimizer sgd --out "$out/plan.pb" \
  --trace "$out/predicted-trace.json" --log-level warn
echo "== train it: 2 processes, $iterations iterations"
GP_EXECUTOR="$bin/graphpipe-executor" "$root/scripts/graphpipe-launch" --plan "$out/plan.pb" \
  --nprocs 2 --iterations "$iterations" --metrics-out "$out/metrics.json" \
  --trace "$out/measured-trace.json" -- --log-level warn --data-plane "$data_plane"
echo
"$bin/gp_fidelity_report" --plan "$out/plan.pb" --metrics "$out/metrics.json" \
  --trace "$out/measured-trace.json" --predicted-trace "$out/predicted-trace.json" \
  --iterations "$iterations"
echo "traces: $out/predicted-trace.json $out/measured-trace.json"
