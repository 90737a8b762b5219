#!/usr/bin/env bash
# graphpipe-plan search --shard-optimizer as a user runs it: a bad value exits 2 naming it; a DLRM
# whose embedding tables' Adam state fits no V100 gets a plan only by sharding (auto), which the
# plan, the report and inspect show, and `lower` of the same stages by hand chooses and says too;
# always shards every replicated stage; never none.
set -u
bin=$1
tmp=$2
rm -rf "$tmp" && mkdir -p "$tmp"
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
# A JSON plan's replicated stages and how many stages shard.
count() {
  python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))["stages"]
ranks = lambda x: x.get("deviceRanks", x.get("device_ranks", []))
print(sum(1 for x in s if len(ranks(x)) > 1), sum(1 for x in s if x.get("shardOptimizer", x.get("shard_optimizer"))))' "$1"
}
# 20M-row tables: 1.28 G parameters each, 20 GB with Adam's state on one 16 GB device.
search() {
  "$bin" --log-level warn search --model 'zoo:dlrm?rows=20000000&dense_branches=2&sparse_branches=2' \
    --cluster summit-v100 --devices 16 --batch 256 "$@"
}

err=$(search --shard-optimizer zero3 --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "search --shard-optimizer zero3 exits 2 naming the flag and the value" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--shard-optimizer = .zero3.: expected auto, never or always"'
check "nothing is written for a refused --shard-optimizer" '[ ! -e "$tmp/x.pb" ]'

err=$(search --shard-optimizer never --out "$tmp/never.json" 2>&1 >/dev/null); rc=$?
check "never: no plan fits the embedding tables' state" \
  '[ $rc -ne 0 ] && echo "$err" | grep -q "no feasible" && [ ! -e "$tmp/never.json" ]'

search --out "$tmp/auto.json" --report "$tmp/auto-report.json" >/dev/null; rc=$?
check "auto (the default) finds a plan" '[ $rc -eq 0 ]'
read -r replicated marked <<< "$(count "$tmp/auto.json")"
check "auto: some replicated stages shard ($marked, of $replicated replicated)" \
  '[ "$marked" -ge 1 ] && [ "$marked" -le "$replicated" ]'
check "auto: the report marks them" \
  'tr -d " \n" < "$tmp/auto-report.json" | grep -q "\"shard_optimizer\":true"'
out=$("$bin" inspect --plan "$tmp/auto.json"); rc=$?
check "inspect lists the sharding stages with their memory without (over the device) and with" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "shards optimizer$" && echo "$out" | grep -q "shards its optimizer state over [0-9]* replicas: .* per device without, .* with (device .*, over it)"'
out=$("$bin" verify --plan "$tmp/auto.json" 2>&1); rc=$?
check "the sharded plan verifies" '[ $rc -eq 0 ]'

# lower: the same stages by hand (an assignment file of the auto plan's stages) choose the same.
python3 - "$tmp/auto.json" "$tmp/assign.json" <<'PY'
import json, sys
st = json.load(open(sys.argv[1]))["stages"]
ranks = lambda x: x.get("deviceRanks", x.get("device_ranks", []))
ops = lambda x: x.get("opIds", x.get("op_ids"))
json.dump({"stages": [{"ops": ops(x), "replicas": len(ranks(x))} for x in st]}, open(sys.argv[2], "w"))
PY
lower() {
  "$bin" --log-level warn lower --assignment "$tmp/assign.json" \
    --model 'zoo:dlrm?rows=20000000&dense_branches=2&sparse_branches=2' --cluster summit-v100 \
    --devices 16 --batch 256 "$@"
}
out=$(lower --shard-optimizer never --out "$tmp/lowered-never.json" 2>&1); rc=$?
check "lower --shard-optimizer never: the hand plan fits no device, nothing written" \
  '[ $rc -ne 0 ] && echo "$out" | grep -q "no lowering fits" && [ ! -e "$tmp/lowered-never.json" ]'
out=$(lower --out "$tmp/lowered.json" 2>&1); rc=$?
read -r replicated marked <<< "$(count "$tmp/lowered.json")"
check "lower (auto) shards the replicated stages that need it ($marked) and says why" \
  '[ $rc -eq 0 ] && [ "$marked" -ge 1 ] && echo "$out" | grep -q "^optimizer state sharding:" &&
   echo "$out" | grep -q "shards its optimizer state over [0-9]* replicas: .* per device without, .* with (device .*, over it)"'

search --micro-batches 64 --shard-optimizer always --out "$tmp/always.json" >/dev/null; rc=$?
read -r replicated marked <<< "$(count "$tmp/always.json")"
check "always: every replicated stage shards ($marked of $replicated)" \
  '[ $rc -eq 0 ] && [ "$replicated" -ge 1 ] && [ "$marked" -eq "$replicated" ]'

"$bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 4 --batch 16 \
  --micro-batches 4 --out "$tmp/small.json" --report "$tmp/small-report.json" >/dev/null; rc=$?
read -r replicated marked <<< "$(count "$tmp/small.json")"
check "auto: a plan that fits shards nothing, and the report says false" \
  '[ $rc -eq 0 ] && [ "$marked" -eq 0 ] && tr -d " \n" < "$tmp/small-report.json" | grep -q "\"shard_optimizer\":false"'
out=$("$bin" inspect --plan "$tmp/small.json")
check "inspect of it mentions no sharding" '! echo "$out" | grep -q shard'

exit $fail
