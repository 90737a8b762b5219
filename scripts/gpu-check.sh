#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU. It builds with CUDA (or unpacks a bundle made
# by scripts/gpu-bundle.sh where dependencies cannot be installed), then:
#   1. kernels  - every catalogue op on cuda:0 against the CPU reference at fp32, tf32 and bf16;
#   2. profile  - graphpipe-profile ops on cuda:0 for the tiny models and mmt;
#   3. train    - tiny-mmt trained on cuda:0 and on the CPU from the same seed, loss by loss;
#      nccl     - with two GPUs or more: a 2-rank job over the NCCL data plane against the CPU
#                 (with four or more, also gp_cuda_tests "[multi-gpu]");
#   4. bench    - bench/gpu: GEMM throughput against the device's peak, an mmt step (and PyTorch
#                 eager on the same model when PyTorch is installed).
# It prints a summary table and writes it with each step's log to $OUT (default gpu-check-out/).
# Exit status: 0 when every step that ran passed, 1 otherwise, 77 when there is no GPU.
# Usage: scripts/gpu-check.sh [--bundle ARCHIVE] [--skip-build]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-check-out}
bundle="" skip_build=0
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) bundle=$2; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
summary="$out/summary.md"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
rows=()
# row STEP RESULT SECONDS DETAIL
row() { rows+=("| $1 | $2 | $3 | $4 |"); [ "$2" = FAIL ] && failed=1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

if ! nvidia-smi -L > "$tmp/gpus" 2>&1; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi: $(head -1 "$tmp/gpus"))"
  exit 77
fi
gpu=$(head -1 "$tmp/gpus")
echo "gpu-check: $gpu"

# ---- binaries -------------------------------------------------------------------------------
t=$(now)
if [ -n "$bundle" ]; then
  bin="$tmp/bundle/bin"
  mkdir -p "$tmp/bundle" && xz -dc "$bundle" | tar -C "$tmp/bundle" -xf - || exit 1
  # cuBLAS and the CUDA runtime come from the machine: the toolkit or PyTorch's wheels.
  cuda_libs=$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib 2>/dev/null | tr '\n' ':')
  wheel_libs=$(python3 -c 'import glob, os, nvidia; print(":".join(sorted(set(
      os.path.dirname(p) for d in nvidia.__path__ for p in glob.glob(d + "/*/lib/*.so*")))))' \
      2>/dev/null || true)
  export LD_LIBRARY_PATH="$tmp/bundle/lib:${cuda_libs}${wheel_libs}:${LD_LIBRARY_PATH:-}"
  row build "bundle" "$(elapsed "$t")" "$(basename "$bundle")"
else
  bin="$root/build/bin"
  if [ $skip_build -eq 0 ]; then
    if ! GP_CUDA=ON "$root/scripts/build.sh" > "$out/build.log" 2>&1; then
      row build FAIL "$(elapsed "$t")" "see build.log"
      printf '%s\n' "${rows[@]}"
      exit 1
    fi
  fi
  row build PASS "$(elapsed "$t")" "GP_CUDA=ON"
fi

# ---- 1. kernels against the CPU reference ---------------------------------------------------
t=$(now)
timeout 240 "$bin/gp_cuda_tests" > "$out/kernels.log" 2>&1
rc=$?
# Which libraries the kernels use (GP_CUDA_KERNELS=auto leaves out one that cannot be loaded;
# the kernel tests' library case then fails, naming it).
row libraries INFO "0" "$("$bin/graphpipe-profile" devices 2>&1 | sed -n 's/^kernels *//p')"
detail=$(grep -E "^(All tests passed|test cases:)" "$out/kernels.log" | tail -1)
if [ $rc -eq 0 ]; then row kernels PASS "$(elapsed "$t")" "$detail"
elif [ $rc -eq 77 ]; then row kernels SKIP "$(elapsed "$t")" "$(head -1 "$out/kernels.log")"
else row kernels FAIL "$(elapsed "$t")" "exit $rc; $detail (kernels.log)"; fi

# ---- 2. profiler on cuda:0 ------------------------------------------------------------------
t=$(now)
: > "$out/profile.log"
prc=0
for model in tiny-mmt tiny-dlrm tiny-candle-uno mmt; do
  echo "== $model" >> "$out/profile.log"
  timeout 150 "$bin/graphpipe-profile" ops --model "zoo:$model" --device cuda:0 \
    --micro-batches 1,4,16 --out "$tmp/$model.pb" --log-level warn >> "$out/profile.log" 2>&1 ||
    prc=$?
done
if [ $prc -eq 0 ]; then
  row profile PASS "$(elapsed "$t")" "tiny-mmt, tiny-dlrm, tiny-candle-uno, mmt at 1,4,16"
  "$bin/graphpipe-profile" merge "$tmp"/*.pb --out "$out/profile-cuda.pbtxt" >/dev/null 2>&1 || true
else
  row profile FAIL "$(elapsed "$t")" "exit $prc (profile.log)"
fi

# ---- 3. tiny-mmt on the GPU against the CPU reference ---------------------------------------
t=$(now)
train() {
  timeout 120 "$bin/graphpipe-executor" reference --model zoo:tiny-mmt --batch 16 \
    --iterations 20 --lr 0.01 --seed 3 --device "$1" --log-level warn \
    --metrics-out "$tmp/$2.json" >> "$out/train.log" 2>&1
}
: > "$out/train.log"
if train cpu cpu && train cuda:0 cuda; then
  # Losses as "iteration loss" lines from the metrics JSON, then the largest relative difference.
  losses() { grep -o '"loss":[^,}]*' "$1" | cut -d: -f2; }
  diff=$(paste <(losses "$tmp/cpu.json") <(losses "$tmp/cuda.json") | awk '
    { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > m) m = r; n++ }
    END { if (n == 0) print "none"; else printf "%.2e %d", m, n }')
  read -r worst count <<< "$diff"
  if [ "$worst" != none ] && awk -v w="$worst" 'BEGIN { exit !(w <= 1e-3) }'; then
    row train PASS "$(elapsed "$t")" "$count iterations, worst loss difference $worst (<= 1e-3)"
  else
    row train FAIL "$(elapsed "$t")" "worst loss difference ${worst} over ${count:-0} iterations"
  fi
  paste <(losses "$tmp/cpu.json") <(losses "$tmp/cuda.json") >> "$out/train.log"
else
  row train FAIL "$(elapsed "$t")" "a run failed (train.log)"
fi

# ---- 3b. two ranks over NCCL (two GPUs or more) ---------------------------------------------
t=$(now)
ngpus=$(grep -c "^GPU " "$tmp/gpus")
if [ "$ngpus" -ge 2 ]; then
  : > "$out/nccl.log"
  "$bin/graphpipe-plan" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local \
    --devices 2 --batch 16 --micro-batches 4 --optimizer sgd --out "$tmp/two.pb" >> "$out/nccl.log" 2>&1
  timeout 120 "$bin/graphpipe-executor" --log-level warn local --plan "$tmp/two.pb" \
    --iterations 10 --metrics-out "$tmp/two-cpu.json" >> "$out/nccl.log" 2>&1
  (umask 077 && od -An -tx1 -N16 /dev/urandom | tr -d ' \n' > "$tmp/token")  # never in argv
  for r in 0 1; do
    timeout 180 "$bin/graphpipe-executor" run --plan "$tmp/two.pb" --world-size 2 --rank $r \
      --iterations 10 --device cuda:$r --data-plane nccl --coordinator-file "$tmp/coord" \
      --auth-token-file "$tmp/token" \
      --timeout 60 --metrics-out "$tmp/two-nccl.json" >> "$out/nccl.log" 2>&1 &
  done
  wait
  losses() { grep -o '"loss":[^,}]*' "$1" | cut -d: -f2; }
  worst=$(paste <(losses "$tmp/two-cpu.json") <(losses "$tmp/two-nccl.json") | awk '
    { d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > m) m = r; n++ }
    END { if (n < 10) print "none"; else printf "%.2e", m }')
  ranks_rc=0 ranks_note=""
  if [ "$ngpus" -ge 4 ]; then  # 4 ranks as threads: pipelines, all-reduce, a silent rank, abort
    timeout 300 "$bin/gp_cuda_tests" "[multi-gpu]" >> "$out/nccl.log" 2>&1 || ranks_rc=$?
    ranks_note="; [multi-gpu] tests exit $ranks_rc"
  fi
  if [ "$worst" != none ] && [ $ranks_rc -eq 0 ] &&
     awk -v w="$worst" 'BEGIN { exit !(w <= 1e-3) }'; then
    row nccl PASS "$(elapsed "$t")" "2 ranks on cuda:0,1 over NCCL vs the CPU: worst loss difference $worst$ranks_note"
  else
    row nccl FAIL "$(elapsed "$t")" "2 ranks over NCCL: worst loss difference ${worst}$ranks_note (nccl.log)"
  fi
else
  row nccl SKIP "$(elapsed "$t")" "one GPU: ranks of a communicator need a GPU each (kernels.log has the one-GPU NCCL tests)"
fi
# ---- 4. bench/gpu ---------------------------------------------------------------------------
t=$(now)
if [ -x "$bin/gp_gpu_bench" ]; then
  if timeout 150 bash "$root/bench/gpu/run.sh" "$bin" > "$out/bench.log" 2>&1; then
    row bench PASS "$(elapsed "$t")" "$(grep -E '^(gemm|step|kernels)' "$out/bench.log" | tr '\n' ';')"
  else
    row bench FAIL "$(elapsed "$t")" "bench.log"
  fi
else
  row bench SKIP "$(elapsed "$t")" "gp_gpu_bench not built"
fi

{
  echo "# GPU check: $gpu"
  echo
  echo "| step | result | seconds | detail |"
  echo "| --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} > "$summary"
[ -f "$out/bench.log" ] && { echo; echo '```'; cat "$out/bench.log"; echo '```'; } >> "$summary"
cat "$summary"
exit $failed
