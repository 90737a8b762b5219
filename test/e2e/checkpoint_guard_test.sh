#!/usr/bin/env bash
# A checkpoint directory belongs to one job at a time and a resume continues its stream: a plan of
# another seed is refused (or resumed with --allow-new-seed and a warning), a manifest of an older
# executor resumes with a warning, a second job on a directory in use is refused naming the
# holder while the first trains on, a holder killed with SIGKILL blocks no one, and a launched
# multi-rank job (whose stage writers share the directory) checkpoints and resumes.
set -u
exe=$1
plan_bin=$2
launch=$3
tmp=$4
rm -rf "$tmp" && mkdir -p "$tmp"
export GRAPHPIPE_RUNS_DIR="$tmp/graphpipe-runs"  # the launcher's logs stay in here
. "$(dirname "$0")/lib.sh"
plan() {  # OUT SEED DEVICES
  "$plan_bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices "$3" \
    --batch 16 --micro-batches 4 --seed "$2" --out "$1" > /dev/null || exit 1
}
run1() {  # one-rank job (on loopback, no token: --insecure)
  timeout 120 "$exe" run --rank 0 --world-size 1 --coordinator 127.0.0.1:0 --insecure --timeout 20 \
    "$@"
}
plan "$tmp/seed1.pb" 1 1
plan "$tmp/seed7.pb" 7 1

# 1. The seed and data stream are recorded and checked on resume.
run1 --plan "$tmp/seed1.pb" --iterations 2 --checkpoint-dir "$tmp/ck" --checkpoint-every 1 \
  > "$tmp/first.log" 2>&1; rc=$?
check "a job with --checkpoint-dir exits 0" '[ $rc -eq 0 ]'
check "the manifest records the seed, data and samples consumed" \
  'grep -q "seed: 1" "$tmp/ck/iter-1/MANIFEST.pbtxt" && grep -q "data_fingerprint: \"synthetic\"" "$tmp/ck/iter-1/MANIFEST.pbtxt" && grep -q "samples_consumed: 32" "$tmp/ck/iter-1/MANIFEST.pbtxt"'
err=$(run1 --plan "$tmp/seed7.pb" --iterations 4 --checkpoint-dir "$tmp/ck" --resume "$tmp/ck" \
  2>&1 >/dev/null); rc=$?
check "a resume with another seed exits 2 naming both seeds and --allow-new-seed" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "seed 1, this plan.s is 7" && echo "$err" | grep -q -- "--allow-new-seed"'
check "the refused resume wrote no checkpoint" '[ ! -d "$tmp/ck/iter-3" ]'
err=$(run1 --plan "$tmp/seed7.pb" --iterations 4 --checkpoint-dir "$tmp/ck" --resume "$tmp/ck" \
  --checkpoint-every 1 --allow-new-seed 2>&1 >/dev/null); rc=$?
check "--allow-new-seed resumes with a warning naming both seeds" \
  '[ $rc -eq 0 ] && echo "$err" | grep -q "warn.*--allow-new-seed.*seed 1, this plan.s is 7"'
check "its checkpoints record the new seed" 'grep -q "seed: 7" "$tmp/ck/iter-3/MANIFEST.pbtxt"'
# A manifest without the stream (as older executors wrote it) resumes with a warning.
python3 - "$tmp/ck/iter-3/MANIFEST.pbtxt" <<'EOF'
import re, sys
p = sys.argv[1]
text = open(p).read()
open(p, "w").write(re.sub(r"stream \{[^}]*\}\n?", "", text))
EOF
err=$(run1 --plan "$tmp/seed1.pb" --iterations 5 --resume "$tmp/ck" 2>&1 >/dev/null); rc=$?
check "a manifest without a stream resumes with a warning" \
  '[ $rc -eq 0 ] && echo "$err" | grep -q "records no seed or data stream"'

# 2. One job per checkpoint directory.
# (The executor itself in the background, so that $! is its pid.)
"$exe" run --rank 0 --world-size 1 --coordinator 127.0.0.1:0 --insecure --plan "$tmp/seed1.pb" \
  --iterations 100000000 --checkpoint-dir "$tmp/busy" --checkpoint-every 1000000 \
  > "$tmp/holder.log" 2>&1 &
holder=$!
trap 'kill -9 $holder 2> /dev/null' EXIT
for _ in $(seq 100); do grep -q "^job " "$tmp/busy/.lock" 2> /dev/null && break; sleep 0.1; done
err=$(run1 --plan "$tmp/seed1.pb" --iterations 2 --checkpoint-dir "$tmp/busy" \
  --checkpoint-every 1 2>&1 >/dev/null); rc=$?
check "a second job on a directory in use exits 2 naming the holder's pid and job" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "in use by another job (host .*, pid $holder, started .*, job job-"'
check "the first job trains on" 'kill -0 $holder 2> /dev/null'
kill -9 "$holder"; wait "$holder" 2> /dev/null
run1 --plan "$tmp/seed1.pb" --iterations 2 --checkpoint-dir "$tmp/busy" --checkpoint-every 1 \
  > "$tmp/after-kill.log" 2>&1; rc=$?
check "after the holder is killed with SIGKILL the next job proceeds" \
  '[ $rc -eq 0 ] && [ -f "$tmp/busy/iter-1/MANIFEST.pbtxt" ]'

# 3. A launched multi-rank job: rank 0 holds the lock, the other stage writers check its job id.
plan "$tmp/plan3.pb" 1 3
n=$("$plan_bin" inspect --plan "$tmp/plan3.pb" --json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["ranks"])')
launcher() { GP_EXECUTOR="$exe" GP_PLANNER="$plan_bin" timeout 180 "$launch" "$@"; }
launcher --plan "$tmp/plan3.pb" --nprocs "$n" --iterations 4 --checkpoint-dir "$tmp/multi" \
  --checkpoint-every 2 --run-dir "$tmp/run" > "$tmp/multi.log" 2>&1; rc=$?
# (Its stage writers other than rank 0 check before each checkpoint that the lock names the job.)
check "a launched $n-rank job checkpoints into a locked directory, released at its end" \
  '[ $rc -eq 0 ] && [ "$n" -ge 2 ] && [ -f "$tmp/multi/iter-3/MANIFEST.pbtxt" ] && [ ! -e "$tmp/multi/.lock" ]'
launcher --plan "$tmp/plan3.pb" --nprocs "$n" --iterations 6 --checkpoint-dir "$tmp/multi" \
  --checkpoint-every 2 --resume --run-dir "$tmp/run2" > "$tmp/multi-resume.log" 2>&1; rc=$?
check "and the next launched job resumes from it" \
  '[ $rc -eq 0 ] && [ -f "$tmp/multi/iter-5/MANIFEST.pbtxt" ]'
exit $fail
