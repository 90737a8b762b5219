#!/usr/bin/env bash
# Installs dependencies, builds, and runs the main job on the embedded default: plan the
# multi-modal transformer (zoo:mmt, 4 branches x 8 layers) on the GraphPipe paper's testbed
# (32 V100s of summit-v100) with GraphPipe and both baselines, print the comparison, and write
# each plan, its simulated Chrome trace and its stage graph to out/quickstart/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
bin="$root/build/bin"
out="$root/out/quickstart"
mkdir -p "$out"

echo
echo "== the model"
"$bin/graphpipe-plan" model-info --model zoo:mmt
echo
echo "== planning zoo:mmt on 32 x V100 (summit-v100), mini-batch 256"
"$bin/graphpipe-plan" compare --model zoo:mmt --cluster summit-v100 --devices 32 --batch 256 \
  --out-dir "$out"
echo
echo "== the GraphPipe plan"
"$bin/graphpipe-plan" inspect --plan "$out/graphpipe.pb"
"$bin/graphpipe-plan" verify --plan "$out/graphpipe.pb" --model zoo:mmt --cluster summit-v100 \
  --devices 32
echo
echo "== training: a 2-rank GraphPipe plan of zoo:tiny-mmt as 2 processes, against the 1-process reference"
"$bin/graphpipe-plan" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 2 \
  --batch 16 --micro-batches 4 --optimizer sgd --out "$out/tiny-mmt.pb"
"$bin/graphpipe-plan" inspect --plan "$out/tiny-mmt.pb" | sed -n '1,4p'
"$root/scripts/graphpipe-launch" --plan "$out/tiny-mmt.pb" --nprocs 2 --iterations 5 --log-dir "$out/runs/tiny-mmt" \
  --metrics-out "$out/tiny-mmt.metrics.json"
"$bin/graphpipe-executor" reference --model zoo:tiny-mmt --batch 16 --iterations 5 --lr 0.01 \
  --metrics-out "$out/tiny-mmt.reference.json"
losses() { grep -o '"loss": [-0-9.e]*' "$1" | awk '{printf "%.6f\n", $2}'; }
if [ "$(losses "$out/tiny-mmt.metrics.json")" != "$(losses "$out/tiny-mmt.reference.json")" ] ||
   [ -z "$(losses "$out/tiny-mmt.metrics.json")" ]; then
  echo "quickstart: the plan's losses differ from the reference's" >&2
  exit 1
fi
echo "(checked: the 5 per-iteration losses of the plan and of the reference agree to 6 digits)"
echo
echo "Wrote plans (*.pb), reports (*.report.json), simulated traces (*.trace.json, open in"
echo "https://ui.perfetto.dev) and stage graphs (*.dot) to $out"
