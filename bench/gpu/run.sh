#!/usr/bin/env bash
# The GPU benchmark table: GEMM throughput against the device's peak at fp32, tf32 and bf16, and
# one training step of mmt (1 branch) on GraphPipe beside PyTorch eager on the same device and
# model (when PyTorch is installed; the target is GraphPipe no slower), and on a GPU the library
# kernels (cuBLASLt, cuDNN) against the hand-written ones.
# Usage: bench/gpu/run.sh [BIN_DIR] [--device cuda:0] [--batch 8] [--model SPEC] [--gemm-size N]
# Environment: GP_PYTHON, the Python with PyTorch (default python3).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../../build/bin}
[ $# -gt 0 ] && shift
device=cuda:0 batch=8 model='mmt?branches=1' size=8192
while [ $# -gt 0 ]; do
  case $1 in
    --device) device=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --gemm-size) size=$2; shift 2 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
precisions=(fp32 tf32 bf16)
[[ $device == cuda:* ]] || precisions=(fp32)  # the CPU computes fp32 whatever is asked
for p in "${precisions[@]}"; do
  "$bin/gp_gpu_bench" --device "$device" --precision "$p" gemm --size "$size" || status=1
done

"$bin/graphpipe-plan" zoo export "$model" --out "$tmp/model.json" --log-level warn || exit 1
torch_device=cpu
[[ $device == cuda:* ]] && torch_device=cuda
table=$(printf '%-11s %14s %14s %10s' precision "graphpipe ms" "pytorch ms" "pt / gp")
step_precisions=(fp32 bf16)
[[ $device == cuda:* ]] || step_precisions=(fp32)
for p in "${step_precisions[@]}"; do
  gp_line=$("$bin/gp_gpu_bench" --device "$device" --precision "$p" step --model "zoo:$model" \
            --batch "$batch" --steps 5) || { status=1; continue; }
  echo "$gp_line"
  gp_ms=$(echo "$gp_line" | sed -E 's/.*: ([0-9.]+) ms.*/\1/')
  pt_line=$("${GP_PYTHON:-python3}" "$here/torch_step.py" --model "$tmp/model.json" --batch "$batch" \
            --dtype "$p" --device "$torch_device" --steps 5 2>"$tmp/torch.err" | tail -1)
  rc=$?
  if [ $rc -eq 0 ] && [[ $pt_line == torch_step* ]]; then
    pt_ms=$(echo "$pt_line" | sed -E 's/.*step_ms=([0-9.]+).*/\1/')
    ratio=$(awk -v a="$pt_ms" -v b="$gp_ms" 'BEGIN { printf "%.2f", a / b }')
  else
    pt_ms="n/a" ratio="n/a"
    echo "pytorch: $(tail -1 "$tmp/torch.err")"
  fi
  table+=$'\n'$(printf 'step %-6s %14s %14s %10s' "$p" "$gp_ms" "$pt_ms" "$ratio")
done
printf '\n%s\n' "$table"

# Library kernels (cuBLASLt, cuDNN) against the hand-written ones (GP_CUDA_KERNELS=hand), one fp32
# step each: the model above (linear epilogues) and a convolutional block (conv2d, pooling).
if [[ $device == cuda:* ]]; then
  conv_model="$tmp/inception.json"
  "$bin/graphpipe-plan" import "$here/../../test/data/onnx/inception_block.onnx"     --out "$conv_model" --inline-weights --log-level warn || conv_model=""
  kernels=$(printf '%-22s %12s %12s %10s' model "library ms" "hand ms" "hand / lib")
  for m in "zoo:$model" ${conv_model:+"$conv_model"}; do
    lib=$("$bin/gp_gpu_bench" --device "$device" step --model "$m" --batch "$batch" --steps 5 |
          sed -E 's/.*: ([0-9.]+) ms.*/\1/') || { status=1; continue; }
    hand=$(GP_CUDA_KERNELS=hand "$bin/gp_gpu_bench" --device "$device" step --model "$m" \
           --batch "$batch" --steps 5 | sed -E 's/.*: ([0-9.]+) ms.*/\1/') || { status=1; continue; }
    kernels+=$'\n'$(printf 'kernels %-14s %12s %12s %10s' "$(basename "$m" | cut -c1-14)" "$lib" \
                     "$hand" "$(awk -v a="$hand" -v b="$lib" 'BEGIN { printf "%.2f", a / b }')")
  done
  printf '\n%s\n' "$kernels"
fi
exit $status
