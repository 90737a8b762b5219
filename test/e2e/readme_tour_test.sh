#!/usr/bin/env bash
# Runs the README's "Using it" commands as written (the block between its tour markers), with the
# two files a user brings (model.onnx: a committed torch export; stages.json: an assignment of
# zoo:dlrm from configs/assignments), then docs/profiler.md's last two commands on the profile
# the tour measured. Checks what the commands claim: every one succeeds, their outputs exist and
# read back, and the 2-rank plan trains with the single-process reference's losses.
# Usage: readme_tour_test.sh TMP_DIR [BUILD_DIR]
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$1
build=${2:-$root/build}  # the build directory the README's build/bin paths mean
rm -rf "$tmp" && mkdir -p "$tmp"
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
block() {  # block FILE NAME: the commands between FILE's NAME:begin and NAME:end markers
  sed -n "/<!-- $2:begin -->/,/<!-- $2:end -->/p" "$1" | grep -v '^<!--' | grep -v '^```'
}

block "$root/README.md" tour > "$tmp/tour.sh"
check "the README has the tour" '[ "$(grep -c "^build/bin/graphpipe-\|^scripts/graphpipe-launch" "$tmp/tour.sh")" -ge 20 ]'
cp "$root/test/data/onnx/torch/encoder_layer_op17_train.onnx" "$tmp/model.onnx"
cp "$root/configs/assignments/dlrm-pairs-8.json" "$tmp/stages.json"
ln -s "$build" "$tmp/build"
ln -s "$root/scripts" "$tmp/scripts"
export GRAPHPIPE_RUNS_DIR=$tmp/runs
unset GP_EXECUTOR GP_PLANNER  # the README's programs, not another build's
(cd "$tmp" && bash -xeuo pipefail tour.sh) > "$tmp/tour.log" 2>&1; rc=$?
grep '^+ [a-z]' "$tmp/tour.log" | tail -1
check "every command of the tour succeeds" '[ $rc -eq 0 ]'
check "the commands that write files wrote them" \
  'for f in dlrm.pbtxt model.pbtxt ops.pb comm.pb profile.pb plan.pb report.json trace.json stages.dot plan-effort.pb mine.pb t.json report.html tiny.pb m.json; do [ -s "$tmp/$f" ] || { echo "missing: $f"; exit 1; }; done'
check "the tour's verify ran (and, as every command, succeeded) on the searched plan" \
  'grep -q "^+ build/bin/graphpipe-plan verify --plan plan.pb --model zoo:mmt" "$tmp/tour.log"'
# The launch's losses are the reference's (printed on the console by `reference`).
awk '/^\+ build\/bin\/graphpipe-executor reference/ {on = 1; next} /^\+ / {on = 0}
     on && match($0, /iteration [0-9]+: loss [0-9.]+/) {
       s = substr($0, RSTART, RLENGTH); sub(/.*loss /, "", s); print s }' "$tmp/tour.log" \
  > "$tmp/reference-losses"
grep -o '"loss": [-0-9.e]*' "$tmp/m.json" | awk '{printf "%.6f\n", $2}' > "$tmp/plan-losses"
check "the 2-rank plan's 5 losses equal the single-process reference's" \
  '[ "$(wc -l < "$tmp/plan-losses")" -eq 5 ] && cmp -s "$tmp/plan-losses" "$tmp/reference-losses"'
check "the run with --on-failure replan trained 100 iterations with checkpoints" \
  '[ -f "$tmp/ckpt/LATEST" ] && grep -q "iteration 99: loss" "$tmp/tour.log"'

block "$root/docs/profiler.md" profile-use > "$tmp/profile-use.sh"
check "docs/profiler.md shows the profile's use" '[ "$(grep -c "^build/bin/" "$tmp/profile-use.sh")" -eq 2 ]'
rm -f "$tmp/plan.pb"  # the block writes it again
(cd "$tmp" && bash -xeuo pipefail profile-use.sh) > "$tmp/profile-use.log" 2>&1; rc=$?
check "show and search --profile succeed on the tour's profile" '[ $rc -eq 0 ] && [ -s "$tmp/plan.pb" ]'
[ $fail -ne 0 ] || rm -rf "$tmp"
exit $fail
