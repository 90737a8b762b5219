#!/usr/bin/env bash
# Measured costs of a running job and the straggler test aid (issue 43), on a launched 2-rank CPU
# job of a small CANDLE-Uno (4 branches, ops of tens of microseconds): rank 0 gathers every
# rank's measured op times (`run --measure-every`) and message times into a profile database
# graphpipe-profile reads, one device kind per rank and a fit of the link; `--slowdown 1:3` makes rank 1's ops at least twice as slow in that profile as in an unslowed run of the same
# plan, and changes no loss. Bad --slowdown and --measured-profile-out values are refused before
# anything trains, naming the flag.
set -u
exe=$1
plan_bin=$2
launch=$3
profile_bin=$4
tmp=$5
rm -rf "$tmp" && mkdir -p "$tmp"
export GRAPHPIPE_RUNS_DIR="$tmp/graphpipe-runs"  # the launcher's logs stay in here
export GP_EXECUTOR="$exe"
. "$(dirname "$0")/lib.sh"

"$plan_bin" --log-level warn search --model "zoo:candle-uno?branches=4&layers=2&width=128" \
  --cluster cpu-local --devices 2 --batch 16 --micro-batches 4 --optimizer sgd \
  --out "$tmp/plan.pb" >/dev/null || exit 1

# kind -> sum over its records of the forward and backward medians (us), one "kind sum" line each.
sums() {
  awk '/device_kind:/ { gsub(/"/, "", $2); kind = $2 }
       /forward_time_us:|backward_time_us:/ { s[kind] += $2 }
       END { for (k in s) printf "%s %.6f\n", k, s[k] }' "$1"
}
sum_of() { sums "$1" | awk -v k="$2" '$1 == k { print $2 }'; }

# 1. Unslowed: the profile goes to RUN_DIR/attempt-0/measured-profile.pbtxt by default.
timeout 120 "$launch" --plan "$tmp/plan.pb" --iterations 12 --log-dir "$tmp/base-run" \
  --metrics-out "$tmp/base.json" -- --measure-every 2 > "$tmp/base.log" 2>&1; rc=$?
check "an unslowed 2-rank job exits 0" '[ $rc -eq 0 ]'
base=$tmp/base-run/attempt-0/measured-profile.pbtxt
check "its measured profile is written to RUN_DIR/attempt-0/measured-profile.pbtxt by default" '[ -s "$base" ]'
"$profile_bin" show "$base" > "$tmp/base-show.txt" 2>&1; rc=$?
check "graphpipe-profile reads it (it validates) and lists a device kind per rank" \
  '[ $rc -eq 0 ] && grep -q "/rank0 " "$tmp/base-show.txt" && grep -q "/rank1 " "$tmp/base-show.txt"'
check "no rank says it is slowed" '! grep -q "compute slowed" "$tmp/base.log"'
# Its messages: each send paired with its receive (the ranks share this host's clock) into a
# p2p fit of the link between them, which graphpipe-profile lists.
check "it holds the measured intra-node link: a p2p fit with the messages' sizes as points" \
  'grep -Eq "^comm +intra-node p2p +2 ranks +alpha +[0-9.]+ us +beta +[0-9.]+ GB/s +\([1-9][0-9]* points?," "$tmp/base-show.txt"'

# 2. Rank 1 three times slower, its profile where asked.
timeout 120 "$launch" --plan "$tmp/plan.pb" --iterations 12 --slowdown 1:3 \
  --measured-profile-out "$tmp/slow.pbtxt" --metrics-out "$tmp/slow.json" \
  -- --measure-every 2 > "$tmp/slow.log" 2>&1; rc=$?
check "the job with --slowdown 1:3 exits 0" '[ $rc -eq 0 ]'
check "rank 1 (only) logs its slowdown once" \
  '[ "$(grep -c "rank 1: compute slowed 3.0x (--slowdown)" "$tmp/slow.log")" -eq 1 ] && ! grep -q "rank 0: compute slowed" "$tmp/slow.log"'
"$profile_bin" show "$tmp/slow.pbtxt" > "$tmp/slow-show.txt" 2>&1; rc=$?
check "the slowed job's profile validates and holds records of both ranks" \
  '[ $rc -eq 0 ] && grep -q "/rank0 " "$tmp/slow-show.txt" && grep -q "/rank1 " "$tmp/slow-show.txt"'
kind=$(awk '/device_kind:/ { gsub(/"/, "", $2); sub(/\/rank[0-9]+$/, "", $2); print $2; exit }' "$tmp/slow.pbtxt")
check "device kinds are <the plan's cluster device>/rank<R> ($kind)" \
  '[ -n "$kind" ] && grep -q "device_kind: \"$kind/rank1\"" "$tmp/slow.pbtxt" && grep -q "device_kind: \"$kind/rank0\"" "$tmp/slow.pbtxt"'
b1=$(sum_of "$base" "$kind/rank1") s1=$(sum_of "$tmp/slow.pbtxt" "$kind/rank1")
echo "rank 1's ops, sum of forward and backward medians: unslowed $b1 us, slowed $s1 us"
check "rank 1's ops take at least twice as long slowed as unslowed" \
  'awk -v b="$b1" -v s="$s1" "BEGIN { exit !(b > 0 && s >= 2 * b) }"'
check "the slowdown changes no loss" \
  '[ -s "$tmp/base.json" ] && [ "$(losses "$tmp/slow.json")" = "$(losses "$tmp/base.json")" ]'

# 3. Refusals, before any rank trains.
timeout 20 "$launch" --plan "$tmp/plan.pb" --slowdown 1:0.5 > "$tmp/bad1.log" 2>&1; rc=$?
check "graphpipe-launch --slowdown 1:0.5 exits 2 naming the flag" \
  '[ $rc -eq 2 ] && grep -q -- "--slowdown must be RANK:FACTOR.*1:0.5" "$tmp/bad1.log"'
timeout 20 "$launch" --plan "$tmp/plan.pb" --slowdown one:3 > "$tmp/bad2.log" 2>&1; rc=$?
check "graphpipe-launch --slowdown one:3 exits 2 naming the flag" \
  '[ $rc -eq 2 ] && grep -q -- "--slowdown must be RANK:FACTOR" "$tmp/bad2.log"'
timeout 20 "$launch" --plan "$tmp/plan.pb" --slowdown 5:3 > "$tmp/bad3.log" 2>&1; rc=$?
check "graphpipe-launch --slowdown 5:3 on 2 ranks exits 2 naming the rank" \
  '[ $rc -eq 2 ] && grep -q -- "--slowdown 5:3: rank 5, but the job has 2 ranks" "$tmp/bad3.log"'
timeout 20 "$exe" run --plan "$tmp/plan.pb" --rank 1 --world-size 2 --slowdown 0.5 \
  --coordinator 127.0.0.1:1 > "$tmp/bad4.log" 2>&1; rc=$?
check "run --slowdown 0.5 exits 2 naming the flag and value" \
  '[ $rc -eq 2 ] && grep -q -- "--slowdown = 0.5" "$tmp/bad4.log"'
timeout 20 "$exe" run --plan "$tmp/plan.pb" --rank 0 --world-size 2 --insecure \
  --measured-profile-out "$tmp/missing/p.pbtxt" > "$tmp/bad5.log" 2>&1; rc=$?
check "run --measured-profile-out in a missing directory is refused before training, naming it" \
  '[ $rc -eq 2 ] && grep -q -- "--measured-profile-out $tmp/missing/p.pbtxt" "$tmp/bad5.log" && ! grep -q "iteration" "$tmp/bad5.log"'
timeout 20 "$launch" --plan "$tmp/plan.pb" --measured-profile-out "$tmp/missing/p.pbtxt" \
  > "$tmp/bad6.log" 2>&1; rc=$?
check "graphpipe-launch --measured-profile-out in a missing directory exits 2 naming it" \
  '[ $rc -eq 2 ] && grep -q -- "--measured-profile-out $tmp/missing/p.pbtxt" "$tmp/bad6.log"'
exit $fail
