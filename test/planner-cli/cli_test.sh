#!/usr/bin/env bash
# graphpipe-plan as a user runs it: outputs and exit codes (0 ok, 2 bad input).
set -u
bin=$1
tmp=$2
rm -rf "$tmp" && mkdir -p "$tmp"
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }

out=$("$bin" model-info --model zoo:mmt --json); rc=$?
check "model-info mmt --json exits 0" '[ $rc -eq 0 ]'
check "mmt has 4 branches" 'echo "$out" | grep -q "\"num_branches\":4"'
params=$(echo "$out" | sed -n 's/.*"num_params":\([0-9]*\).*/\1/p')
check "mmt has about 0.4 billion parameters ($params)" '[ -n "$params" ] && [ "$params" -gt 380000000 ] && [ "$params" -lt 420000000 ]'
for key in num_ops num_params forward_flops_per_sample num_branches; do
  check "model-info --json has $key" 'echo "$out" | grep -q "\"$key\":"'
done

out=$("$bin" model-info --model zoo:dlrm); rc=$?
check "model-info text table" '[ $rc -eq 0 ] && echo "$out" | grep -q "parallel branches *14"'

out=$("$bin" zoo list); rc=$?
check "zoo list names every paper model" '[ $rc -eq 0 ] && (for m in mmt dlrm candle-uno transformer nbranch tiny-mmt; do echo "$out" | grep -q "^$m\$" || exit 1; done)'
check "zoo list shows defaults" 'echo "$out" | grep -q "branches *default 4"'

for ext in pbtxt json pb; do
  "$bin" zoo export "tiny-mmt?layers=1" --out "$tmp/m.$ext" 2>/dev/null; rc=$?
  check "zoo export .$ext exits 0" '[ $rc -eq 0 ] && [ -s "$tmp/m.$ext" ]'
  out=$("$bin" model-info --model "$tmp/m.$ext" --json); rc=$?
  check "exported .$ext reads back" '[ $rc -eq 0 ] && echo "$out" | grep -q "\"num_branches\":2"'
done

"$bin" ops | grep -q "^multi_head_attention"; rc=$?
check "ops lists the catalogue" '[ $rc -eq 0 ]'

err=$("$bin" model-info --model zoo:nope 2>&1 >/dev/null); rc=$?
check "unknown zoo model exits 2 naming it" '[ $rc -eq 2 ] && echo "$err" | grep -q "unknown zoo model .nope."'
err=$("$bin" model-info --model "$tmp/missing.json" 2>&1 >/dev/null); rc=$?
check "missing file exits 2 naming it" '[ $rc -eq 2 ] && echo "$err" | grep -q "missing.json"'
printf '{"name": "bad", "ops": [{"id": "x", "type": "input", "outputs": [{"shape": [4]}]}, {"id": "fc", "type": "linear", "inputs": [{"op": "x"}], "attrs": {"out_features": {"i": 0}}}], "losses": []}' > "$tmp/bad.json"
err=$("$bin" model-info --model "$tmp/bad.json" 2>&1 >/dev/null); rc=$?
check "bad model exits 2 naming op and field" '[ $rc -eq 2 ] && echo "$err" | grep -q "fc.*attrs.out_features = 0"'
printf 'ops { id: "x" type: "input" outputs { shape: 4 } }\nops { id: "y" typo: 1 }\n' > "$tmp/bad.pbtxt"
err=$("$bin" model-info --model "$tmp/bad.pbtxt" 2>&1 >/dev/null); rc=$?
check "text parse error exits 2 with the line" '[ $rc -eq 2 ] && echo "$err" | grep -q "line 2"'
"$bin" zoo export mmt --out "$tmp/m.yaml" >/dev/null 2>&1; rc=$?
check "unknown output extension exits 2" '[ $rc -eq 2 ] && [ ! -e "$tmp/m.yaml" ]'
"$bin" model-info >/dev/null 2>&1; rc=$?
check "missing --model exits 2" '[ $rc -eq 2 ]'
"$bin" --log-level loud model-info --model zoo:tiny-mmt >/dev/null 2>&1; rc=$?
check "bad --log-level exits 2" '[ $rc -eq 2 ]'
"$bin" --help | grep -q "model-info"; rc=$?
check "--help lists subcommands" '[ $rc -eq 0 ]'
"$bin" --version | grep -q "graphpipe-plan"; rc=$?
check "--version prints the program" '[ $rc -eq 0 ]'

# ---- planning ----
out=$("$bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 4 --batch 16 \
      --out "$tmp/plan.pb" --report "$tmp/report.json" --trace "$tmp/trace.json" --dot "$tmp/stages.dot"); rc=$?
check "search exits 0 and writes the plan" '[ $rc -eq 0 ] && [ -s "$tmp/plan.pb" ]'
for key in strategy feasible num_devices mini_batch micro_batch num_stages pipeline_depth \
           predicted_iteration_time_s predicted_throughput_samples_per_s bottleneck_tps_s \
           search_time_s peak_memory_bytes stages in_flight_samples busy_time_s memory_bytes; do
  check "report has $key" 'grep -q "\"$key\":" "$tmp/report.json"'
done
check "trace is a Chrome trace" 'grep -q "traceEvents" "$tmp/trace.json"'
check "dot has stage nodes" 'grep -q "digraph stages" "$tmp/stages.dot" && grep -q "s0 ->" "$tmp/stages.dot"'
# --effort: the improvement search after the fast one; never slower, its moves in the report.
fast=$(sed -n 's/.*"predicted_throughput_samples_per_s": \([0-9.e+]*\).*/\1/p' "$tmp/report.json" | head -1)
out=$("$bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 4 --batch 16 \
      --effort 5 --effort-trials 200 --out "$tmp/improved.pb" --report "$tmp/improved.json"); rc=$?
check "search --effort exits 0 and prints the improvement" '[ $rc -eq 0 ] && echo "$out" | grep -q "^improvement: .* samples/s"'
check "--effort-trials stops it" 'echo "$out" | grep -q "stopped: trial budget" || echo "$out" | grep -q "stopped: no move left"'
improved=$(sed -n 's/.*"throughput_samples_per_s": \([0-9.e+]*\).*/\1/p' "$tmp/improved.json" | head -1)
check "the report has the improvement ($fast -> $improved)" 'grep -q "\"improvement\":" "$tmp/improved.json" && grep -q "\"moves\":" "$tmp/improved.json"'
check "the improved plan is not slower ($fast -> $improved)" 'awk -v a="$fast" -v b="$improved" "BEGIN { exit !(b >= a) }"'
out=$("$bin" verify --plan "$tmp/improved.pb"); rc=$?
check "verify accepts the improved plan" '[ $rc -eq 0 ]'
"$bin" search --model zoo:tiny-mmt --cluster cpu-local --batch 16 --effort -1 --out "$tmp/x.pb" >/dev/null 2>&1; rc=$?
check "a negative --effort exits 2" '[ $rc -eq 2 ]'

out=$("$bin" verify --plan "$tmp/plan.pb"); rc=$?
check "verify accepts the searched plan" '[ $rc -eq 0 ] && echo "$out" | grep -q "deadlock-free"'
out=$("$bin" verify --plan "$tmp/plan.pb" --model zoo:tiny-mmt --cluster cpu-local --devices 4); rc=$?
check "verify accepts it against its own model and cluster" '[ $rc -eq 0 ]'
err=$("$bin" verify --plan "$tmp/plan.pb" --model zoo:tiny-dlrm 2>&1 >/dev/null); rc=$?
check "verify rejects a plan for another model by hash (exit 2)" '[ $rc -eq 2 ] && echo "$err" | grep -q "the plan is for model .tiny-mmt."'
err=$("$bin" verify --plan "$tmp/plan.pb" --cluster summit-v100 --devices 4 2>&1 >/dev/null); rc=$?
check "verify rejects a plan for another cluster by hash (exit 2)" '[ $rc -eq 2 ] && echo "$err" | grep -q "the plan is for cluster"'
out=$("$bin" inspect --plan "$tmp/plan.pb"); rc=$?
check "inspect prints stages and the stage graph" '[ $rc -eq 0 ] && echo "$out" | grep -q "stage graph" && echo "$out" | grep -q "depth 1:"'
out=$("$bin" simulate --plan "$tmp/plan.pb" --trace "$tmp/sim.json"); rc=$?
check "simulate prints the iteration" '[ $rc -eq 0 ] && echo "$out" | grep -q "samples/s" && [ -s "$tmp/sim.json" ]'
# Absurd inputs exit 2 naming the field, never a plan of "0.0 samples/s, iteration inf s".
sed 's/kernel_launch_overhead_us: 1 /kernel_launch_overhead_us: 1e300 /' \
  "$(dirname "$0")/../../configs/clusters/cpu-local.pbtxt" > "$tmp/slow-launch.pbtxt"
err=$("$bin" search --model zoo:tiny-mmt --cluster "$tmp/slow-launch.pbtxt" --devices 2 --batch 8 \
  --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "a kernel launch of 1e300 us exits 2 naming the field and its range" \
  '[ $rc -eq 2 ] && echo "$err" | grep -qF "device.kernel_launch_overhead_us = 1e+300, must be in [0, 1e+06]"'
"$bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 2 --batch 8 \
  --out "$tmp/edited.json" >/dev/null
python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); p["model"]["description"] = "edited"; json.dump(p, open(sys.argv[1], "w"))' "$tmp/edited.json"
err=$("$bin" replan --plan "$tmp/edited.json" --exclude-ranks 1 --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "replan refuses a plan whose model does not match its hash (exit 2)" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "plan.model_hash = .* does not match the embedded model"'
"$bin" zoo export tiny-mmt --out "$tmp/strides.json" 2>/dev/null
python3 - "$tmp/strides.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
next(op for op in m["ops"] if op["type"] == "linear")["attrs"]["strides"] = {"i": "2"}
json.dump(m, open(sys.argv[1], "w"))
PY
err=$("$bin" model-info --model "$tmp/strides.json" 2>&1 >/dev/null); rc=$?
check "an unknown op attribute exits 2 naming it and the known ones" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "(linear): attrs.strides: unknown attribute; linear takes out_features, bias, activation"'
"$bin" --log-level warn search --model zoo:tiny-transformer --cluster cpu-local --devices 2 --batch 8 \
      --strategy sequential --out "$tmp/seq.pbtxt" >/dev/null; rc=$?
check "sequential strategy writes a text plan" '[ $rc -eq 0 ] && grep -q "STRATEGY_SEQUENTIAL" "$tmp/seq.pbtxt"'
"$bin" --log-level warn search --model zoo:tiny-dlrm --cluster cpu-local --devices 4 --batch 16 \
      --per-stage-microbatch --out "$tmp/ps.pb" >/dev/null; rc=$?
check "search with --per-stage-microbatch writes a verifiable plan" '[ $rc -eq 0 ] && "$bin" verify --plan "$tmp/ps.pb" >/dev/null'
# graphpipe refines per-stage micro-batches by default: never slower than one size for all.
"$bin" --log-level warn search --model zoo:candle-uno --cluster summit-v100 --devices 32 --batch 256 \
      --out "$tmp/cu.pb" --report "$tmp/cu.json" >/dev/null; rc=$?
"$bin" --log-level warn search --model zoo:candle-uno --cluster summit-v100 --devices 32 --batch 256 \
      --uniform-microbatch --out "$tmp/cu_u.pb" --report "$tmp/cu_u.json" >/dev/null; rc2=$?
tput() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['predicted_throughput_samples_per_s'])" "$1"; }
check "graphpipe's default refines per-stage micro-batches: never slower than --uniform-microbatch" \
  '[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)" "$(tput "$tmp/cu.json")" "$(tput "$tmp/cu_u.json")"'
# Bad flags are refused at once, before any search, naming the flag (no plan is written).
while IFS='|' read -r args expected; do
  err=$("$bin" search --model zoo:tiny-mmt --cluster cpu-local --devices 2 $args 2>&1 >/dev/null)
  rc=$?
  check "search $args exits 2 at once naming it" \
    '[ $rc -eq 2 ] && echo "$err" | grep -qF -- "$expected" && [ ! -e "$tmp/refused.pb" ]'
done <<BAD_FLAGS
--batch 16777213 --out $tmp/refused.pb|16777213 micro-batches per iteration, more than 4096
--batch 262144 --micro-batches 1 --out $tmp/refused.pb|--micro-batches: 1 gives 262144 micro-batches
--batch 8 --out $tmp/no-such-dir/plan.pb|--out $tmp/no-such-dir/plan.pb: the directory
--batch 8 --out $tmp/refused.pb --report $tmp|--report $tmp: is a directory
--batch 8 --lr nan --out $tmp/refused.pb|learning_rate = nan
--batch 8 --lr inf --out $tmp/refused.pb|learning_rate = inf
--batch 8 --beta1 nan --out $tmp/refused.pb|adam_beta1 = nan
--batch 8 --optimizer momentum --momentum nan --out $tmp/refused.pb|momentum = nan
BAD_FLAGS
err=$("$bin" search --model zoo:tiny-dlrm --cluster cpu-local --devices 4 --batch 16 --uniform-microbatch \
      --per-stage-microbatch --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "--uniform-microbatch with --per-stage-microbatch is refused" '[ $rc -ne 0 ] && echo "$err" | grep -q "excludes"'
out=$("$bin" --log-level warn compare --model zoo:tiny-candle-uno --cluster cpu-local --devices 4 --batch 16); rc=$?
check "compare prints one row per strategy" '[ $rc -eq 0 ] && echo "$out" | grep -q "^graphpipe" && echo "$out" | grep -q "^sequential" && echo "$out" | grep -q "^piper"'

err=$("$bin" search --model zoo:tiny-mmt --cluster cpu-local --devices 99 --batch 16 --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "more devices than the cluster has exits 2" '[ $rc -eq 2 ] && echo "$err" | grep -q "has only 8 usable devices"'
err=$("$bin" search --model zoo:tiny-mmt --cluster cpu-local --batch 12 --micro-batches 8 --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "a micro-batch not dividing the batch exits 2" '[ $rc -eq 2 ] && echo "$err" | grep -q "must be a power of two dividing the mini-batch 12"'
err=$("$bin" search --model "zoo:mmt?layers=2" --cluster cpu-local --devices 1 --batch 4096 --micro-batches 4096 --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "a model that cannot fit exits 2 saying why" '[ $rc -eq 2 ] && echo "$err" | grep -q "no feasible graphpipe plan" && echo "$err" | grep -q "memory"'
err=$("$bin" search --model zoo:tiny-mmt --cluster nowhere --batch 16 --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "an unknown cluster preset exits 2 listing presets" '[ $rc -eq 2 ] && echo "$err" | grep -q "summit-v100"'
err=$("$bin" search --model zoo:tiny-mmt --strategy magic --batch 16 --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "an unknown strategy exits 2" '[ $rc -eq 2 ] && echo "$err" | grep -q "expected graphpipe, sequential or piper"'
printf 'not a plan' > "$tmp/garbage.pb"
err=$("$bin" verify --plan "$tmp/garbage.pb" 2>&1 >/dev/null); rc=$?
check "a garbage plan file exits 2" '[ $rc -eq 2 ] && echo "$err" | grep -q "garbage.pb"'

# A cluster with a failed device inside a node: plan ranks stay dense over the usable devices.
"$bin" search --model zoo:tiny-mmt --cluster summit-v100 --devices 11 --exclude-devices 1 \
  --batch 16 --out "$tmp/holes.pb" --log-level warn >/dev/null; rc=$?
check "search excludes a device inside a node and the plan verifies" \
  '[ $rc -eq 0 ] && "$bin" verify --plan "$tmp/holes.pb" >/dev/null'

# ONNX models: import, and .onnx wherever a model is accepted.
onnx_dir="$(cd "$(dirname "$0")/../data/onnx" && pwd)"
out=$("$bin" import "$onnx_dir/dlrm_like.onnx" --out "$tmp/dlrm_like.pbtxt" 2>&1); rc=$?
check "import dlrm_like.onnx exits 0 and counts ops and parameters" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "12 ops, 1289 parameters, 3 branch"'
check "the imported model is a model file" '"$bin" model-info --model "$tmp/dlrm_like.pbtxt" | grep -q "embedding_bag x2"'
out=$("$bin" model-info --model "$onnx_dir/two_tower.onnx" --json); rc=$?
check "model-info reads .onnx directly" '[ $rc -eq 0 ] && echo "$out" | grep -q "\"num_branches\":2"'
"$bin" search --model "$onnx_dir/two_tower.onnx" --cluster cpu-local --devices 2 --batch 16 \
  --out "$tmp/two_tower_plan.pb" --log-level warn >/dev/null; rc=$?
check "search plans an .onnx model" '[ $rc -eq 0 ] && "$bin" verify --plan "$tmp/two_tower_plan.pb" >/dev/null'
err=$("$bin" import "$onnx_dir/gated_unsupported.onnx" --out "$tmp/x.pbtxt" 2>&1); rc=$?
check "an unmappable ONNX model exits 2 naming the nodes" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "node 3 .periodic. (Tan)" && [ ! -e "$tmp/x.pbtxt" ]'
bag="$onnx_dir/torch2/embedding_bag_offsets_legacy.onnx"  # nn.EmbeddingBag with offsets
err=$("$bin" import "$bag" --out "$tmp/x.pbtxt" 2>&1); rc=$?
check "bags of varying length without --max-bag exit 2 saying to give it" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "import with --max-bag N"'
"$bin" import "$bag" --max-bag 4 --out "$tmp/bag.pbtxt" >/dev/null 2>&1; rc=$?
check "import --max-bag 4 makes per-sample ids of 4 that name their offsets" \
  '[ $rc -eq 0 ] && grep -q "ragged_offsets" "$tmp/bag.pbtxt" && grep -q "padding_idx" "$tmp/bag.pbtxt"'
err=$("$bin" import "$bag" --max-bag 0 --out "$tmp/x.pbtxt" 2>&1); rc=$?
check "--max-bag 0 exits 2 naming the flag" '[ $rc -eq 2 ] && echo "$err" | grep -q "max-bag"'
# RoBERTa's embeddings from the legacy exporter, which keeps no padding_idx: a warning names the
# zero rows; --padding-idx TABLE=ROW says them (a malformed one exits 2, naming it).
padded="$onnx_dir/torch2/padded_positions_legacy.onnx"
out=$("$bin" import "$padded" --out "$tmp/padded.json" 2>&1); rc=$?
check "import of a legacy export with zero embedding rows warns and names them" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "words.weight. row 1, .positions.weight. row 1"'
out=$("$bin" import "$padded" --padding-idx words.weight=1 --padding-idx positions.weight=1 \
  --out "$tmp/padded.json" 2>&1); rc=$?
check "import --padding-idx TABLE=ROW sets padding_idx on both lookups and warns no more" \
  '[ $rc -eq 0 ] && ! echo "$out" | grep -q "all-zero row" &&
   [ "$(grep -o "\"padding_idx\"" "$tmp/padded.json" | wc -l)" -eq 2 ]'
err=$("$bin" import "$padded" --padding-idx words.weight --out "$tmp/x.json" 2>&1); rc=$?
check "import --padding-idx without =ROW exits 2 naming the value" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "padding-idx .words.weight.: expected TABLE=ROW"'
out=$("$bin" import "$onnx_dir/gated_unsupported.onnx" --allow-opaque --out "$tmp/gated.pbtxt" 2>&1); rc=$?
check "--allow-opaque imports it with opaque ops and says they cannot train" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "2 opaque op(s)"'
"$bin" search --model "$tmp/gated.pbtxt" --cluster cpu-local --devices 2 --batch 16 \
  --out "$tmp/gated_plan.pb" --log-level warn >/dev/null; rc=$?
check "a model with opaque ops plans and verifies" \
  '[ $rc -eq 0 ] && "$bin" verify --plan "$tmp/gated_plan.pb" >/dev/null'
for m in transformer_block inception_block; do
  "$bin" search --model "$onnx_dir/$m.onnx" --cluster cpu-local --devices 2 --batch 16 \
    --out "$tmp/$m.pb" --log-level warn >/dev/null; rc=$?
  check "search plans the imported $m and the plan verifies" \
    '[ $rc -eq 0 ] && "$bin" verify --plan "$tmp/$m.pb" >/dev/null'
done
# lower: a partition made elsewhere (here: the sequential plan's stages) as an assignment file.
out=$("$bin" search --model zoo:tiny-candle-uno --cluster cpu-local --devices 4 --batch 16 \
  --micro-batches 4 --strategy sequential --out "$tmp/seq.json" --log-level warn); rc=$?
check "sequential plan for lower exits 0" '[ $rc -eq 0 ]'
check "search says how many of the devices its plan uses" \
  'echo "$out" | grep -Eq "\) on [0-9]+ (of 4 )?devices"'
# dlrm's small branch stages leave most of 32 V100s idle: search and report say why.
out=$("$bin" search --model zoo:dlrm --cluster summit-v100 --devices 32 --batch 256 \
  --out "$tmp/dlrm.pb" --report "$tmp/dlrm.report.json" --log-level warn); rc=$?
check "a plan leaving devices idle says why, in the output and the report" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "idle: giving any stage more replicas" &&
   python3 -c "import json,sys; r=json.load(open(sys.argv[1]));
assert r[\"devices_used\"] < 32 and \"did not raise\" in r[\"idle_devices_reason\"]" \
   "$tmp/dlrm.report.json"'
# A model too small for two ranks to pay (one encoder layer, batch 16 on 2 CPU workers): the
# plan keeps one device, and says why: the plan searched for one device is the faster.
"$bin" --log-level warn import "$onnx_dir/torch/encoder_layer_op17_train.onnx" \
  --out "$tmp/encoder.pbtxt" > /dev/null
out=$("$bin" search --model "$tmp/encoder.pbtxt" --cluster cpu-local --devices 2 --batch 16 \
  --out "$tmp/encoder.pb" --log-level warn); rc=$?
check "a one-device plan on two says the plan searched for one device is faster" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "on 1 of 2 devices" &&
   echo "$out" | grep -q "a plan searched for 1 device simulates faster"'
python3 - "$tmp/seq.json" "$tmp/assign.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
stages = [{"ops": s["op_ids"], "replicas": len(s["device_ranks"])} for s in plan["stages"]]
json.dump({"stages": stages}, open(sys.argv[2], "w"))
PY
out=$("$bin" --log-level warn lower --assignment "$tmp/assign.json" --model zoo:tiny-candle-uno \
  --cluster cpu-local --devices 4 --batch 16 --compare sequential --out "$tmp/lowered.pb" \
  --report "$tmp/lowered.report.json"); rc=$?
check "lower exits 0 and writes a plan that verifies" \
  '[ $rc -eq 0 ] && "$bin" verify --plan "$tmp/lowered.pb" >/dev/null'
check "lower prints chain, dag and the compared strategy in one table" \
  'echo "$out" | grep -q "^lowered/chain" && echo "$out" | grep -q "^lowered/dag" && echo "$out" | grep -q "^sequential"'
lowered_chain=$(echo "$out" | awk '/^lowered\/chain/ {print $7}')
searched=$(echo "$out" | awk '/^sequential/ {print $7}')
check "the lowered sequential partition is as fast as the search found it ($lowered_chain vs $searched)" \
  '[ -n "$lowered_chain" ] && [ "$lowered_chain" = "$searched" ]'
check "lower writes the report" '[ -s "$tmp/lowered.report.json" ]'
printf '{"stages": [{"ops": ["nope"]}]}' > "$tmp/bad_assign.json"
err=$("$bin" lower --assignment "$tmp/bad_assign.json" --model zoo:tiny-candle-uno --cluster cpu-local \
  --batch 16 --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "lower: an unknown op exits 2 naming the field" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "stages\[0\].ops\[0\] = .nope.: model .* has no op with this id" && [ ! -e "$tmp/x.pb" ]'
printf '{"stages": [{"ops": ["a"], "replica": 2}]}' > "$tmp/typo_assign.json"
err=$("$bin" lower --assignment "$tmp/typo_assign.json" --model zoo:tiny-candle-uno --cluster cpu-local \
  --batch 16 --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "lower: a misspelt field exits 2 naming the file" '[ $rc -eq 2 ] && echo "$err" | grep -q "assignment"'
err=$("$bin" lower --assignment "$tmp/assign.json" --model zoo:tiny-candle-uno --cluster cpu-local \
  --batch 16 --lowering tree --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "lower: an unknown --lowering exits 2" '[ $rc -eq 2 ] && echo "$err" | grep -q "\-\-lowering = .tree."'
m="zoo:mmt?branches=4&layers=6&seq=8&hidden=16&heads=2&ffn=32"
out=$("$bin" --log-level warn compare --model "$m" --cluster summit-v100 --devices 8 --batch 32 --strategies piper); rc=$?
check "plain piper gives up on a 4-branch model (too many downsets)" 'echo "$out" | grep -q "^piper *no *infeasible: too many downsets"'
out=$("$bin" --log-level warn compare --model "$m" --cluster summit-v100 --devices 8 --batch 32 --strategies piper --piper-compress-branches); rc=$?
check "--piper-compress-branches lets piper plan it" '[ $rc -eq 0 ] && echo "$out" | grep -q "^piper *yes"'
"$bin" --log-level warn replan --plan "$tmp/lowered.pb" --exclude-ranks 0 --out "$tmp/replanned.pb" >/dev/null; rc=$?
check "a lowered (manual) plan re-plans for the devices left and verifies" \
  '[ $rc -eq 0 ] && "$bin" verify --plan "$tmp/replanned.pb" >/dev/null'
# Malformed plans: every plan tool exits 2 naming the field, never a signal.
mkdir -p "$tmp/bad"
while read -r file expected; do
  for cmd in inspect verify simulate; do
    err=$("$bin" "$cmd" --plan "$file" 2>&1 >/dev/null); rc=$?
    check "$cmd $(basename "$file") exits 2 naming '$expected'" \
      '[ $rc -eq 2 ] && echo "$err" | grep -qF "$expected"'
  done
done < <(python3 "$(dirname "$0")/../support/make_bad_plans.py" "$tmp/seq.json" "$tmp/bad")
err=$("$bin" search --model zoo:tiny-mmt --batch 1099511627776 --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "search --batch 2^40 exits 2 naming the bound" '[ $rc -eq 2 ] && echo "$err" | grep -q "must be in \[1, 16777216\]"'
"$bin" zoo export tiny-mmt --out "$tmp/huge-layer.json" 2>/dev/null
python3 - "$tmp/huge-layer.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for op in m["ops"]:
    if op["type"] != "input":
        op.pop("outputs", None)
next(op for op in m["ops"] if op["type"] == "linear")["attrs"]["out_features"] = {"i": str(2**62)}
json.dump(m, open(sys.argv[1], "w"))
PY
err=$("$bin" model-info --model "$tmp/huge-layer.json" 2>&1 >/dev/null); rc=$?
check "a layer of 2^62 features exits 2 naming the op, not a silent overflow" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "(linear): outputs\[0\].*more than 17179869184 elements"'
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$("$bin" --log-level warn lower --assignment "$root/configs/assignments/tiny-candle-uno-branches.json" \
  --model zoo:tiny-candle-uno --cluster cpu-local --devices 4 --batch 16 --lowering dag --out "$tmp/branches.pb"); rc=$?
check "lower: the documented example assignment lowers as a DAG on 4 devices" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "lowered/dag: 3 stages (depth 2) on 4 devices"'
# --profile: the database passes graphpipe-profile's validation, else exit 2 naming the field
# (each case breaks one field of a database that is accepted).
date='"provenance": {"date": "2024-01-01T00:00:00Z"}'
printf '{"formatVersion": 1, "ops": [{"signature": "x", "deviceKind": "cpu-process", "microBatch": 1, "forwardTimeUs": 1, "backwardTimeUs": 1, "forwardSpreadUs": 0, "activationBytes": "0", %s}], "comm": [{"linkClass": "LINK_CLASS_INTRA_NODE", "kind": "COLLECTIVE_KIND_P2P", "ranks": 2, "alphaUs": 5, "betaBytesPerS": 1e9, %s}]}\n' \
  "$date" "$date" > "$tmp/profile-ok.json"
psearch() { "$bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices 2 \
  --batch 8 --profile "$1" --out "$tmp/profiled.pb" 2>&1 >/dev/null; }
err=$(psearch "$tmp/profile-ok.json"); rc=$?
check "search --profile: a valid database is accepted (exit 0)" '[ $rc -eq 0 ] && [ -s "$tmp/profiled.pb" ]'
while IFS='|' read -r what edit expected; do
  sed "$edit" "$tmp/profile-ok.json" > "$tmp/profile-bad.json"
  err=$(psearch "$tmp/profile-bad.json"); rc=$?
  check "search --profile: $what: exit 2 naming '$expected'" \
    '! cmp -s "$tmp/profile-ok.json" "$tmp/profile-bad.json" && [ $rc -eq 2 ] && echo "$err" | grep -qF -- "--profile $tmp/profile-bad.json" && echo "$err" | grep -qF -- "$expected"'
done <<'CASES'
an unknown format version|s/"formatVersion": 1/"formatVersion": 7/|format_version = 7
a negative spread|s/"forwardSpreadUs": 0/"forwardSpreadUs": -3/|forward_spread_us = -3
a negative activation size|s/"activationBytes": "0"/"activationBytes": "-1"/|activation_bytes = -1
a link fit over one rank|s/"ranks": 2/"ranks": 1/|comm[0]: ranks = 1
a link with no bandwidth|s/"betaBytesPerS": 1e9/"betaBytesPerS": 0/|comm[0]: beta_bytes_per_s = 0
an op time of 1e308 us|s/"forwardTimeUs": 1,/"forwardTimeUs": 1e308,/|forward_time_us = 1e+308, must be at most 3.6e+09 (one hour)
CASES
sed 's/"provenance": {"date": "2024-01-01T00:00:00Z"}}\], "comm"/"provenance": {}}], "comm"/' \
  "$tmp/profile-ok.json" > "$tmp/profile-bad.json"
err=$("$bin" --log-level warn simulate --plan "$tmp/profiled.pb" --profile "$tmp/profile-bad.json" 2>&1 >/dev/null); rc=$?
check "simulate --profile: an op record without provenance.date: exit 2 naming it" \
  '[ $rc -eq 2 ] && echo "$err" | grep -qF "ops[0] ('"'"'x'"'"'): provenance.date"'
# A mixed cluster: 4 cpu-local ranks, rank 1 of a 3x slower kind of its own (device_groups).
{ sed -e 's/^name: .*/name: "cpu-slow1"/' -e 's/^devices_per_node: .*/devices_per_node: 4/' \
    "$root/configs/clusters/cpu-local.pbtxt"
  printf 'device_groups { devices: [1] device { name: "cpu-process/rank1" type: DEVICE_TYPE_CPU peak_fp32_flops: 16.7e9 memory_bandwidth_bytes_per_s: 3.3e9 memory_capacity_bytes: 4294967296 kernel_launch_overhead_us: 1 } }\n'
} > "$tmp/slow1.pbtxt"
msearch() { "$bin" --log-level warn search --model zoo:candle-uno --cluster "$tmp/slow1.pbtxt" \
  --batch 64 --out "$tmp/mixed.pb" "$@"; }
out=$(msearch 2>&1); rc=$?
check "search on a mixed cluster exits 0" '[ $rc -eq 0 ] && [ -s "$tmp/mixed.pb" ]'
out=$("$bin" inspect --plan "$tmp/mixed.pb"); rc=$?
check "inspect names the kinds of a mixed cluster and of each stage" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "1 x 4 (3 x cpu-process + 1 x cpu-process/rank1)" && echo "$out" | grep -q "  on cpu-process$"'
out=$("$bin" inspect --json --plan "$tmp/mixed.pb"); rc=$?
check "inspect --json lists each stage's device kinds" '[ $rc -eq 0 ] && echo "$out" | grep -q "\"stage_device_kinds\""'
out=$("$bin" verify --plan "$tmp/mixed.pb"); rc=$?
check "verify passes the mixed plan" '[ $rc -eq 0 ]'
err=$(msearch --profile "$tmp/profile-ok.json" 2>&1 >/dev/null); rc=$?
check "search --profile on a mixed cluster: records for one of its kinds suffice" '[ $rc -eq 0 ]'
sed 's/"deviceKind": "cpu-process"/"deviceKind": "gpu-x"/' "$tmp/profile-ok.json" > "$tmp/profile-other.json"
err=$(msearch --profile "$tmp/profile-other.json" 2>&1 >/dev/null); rc=$?
check "search --profile on a mixed cluster: records for none of its kinds exit 2 naming them" \
  '[ $rc -eq 2 ] && echo "$err" | grep -qF "device kind '"'"'cpu-process'"'"', '"'"'cpu-process/rank1'"'"'"'
sed 's/devices: \[1\]/devices: [1, 9]/' "$tmp/slow1.pbtxt" > "$tmp/slow-bad.pbtxt"
err=$("$bin" search --model zoo:tiny-mmt --cluster "$tmp/slow-bad.pbtxt" --batch 8 --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "a device group naming a device the cluster lacks exits 2 naming the field" \
  '[ $rc -eq 2 ] && echo "$err" | grep -qF "device_groups[0].devices[1] = 9, out of range [0, 4)"'
# Inputs that are not regular files are refused at once, naming them: open() of a FIFO would wait
# for a writer forever (timeout turns such a hang into a failure).
mkfifo "$tmp/fifo.pb" "$tmp/fifo.onnx" "$tmp/fifo-cluster.json"
err=$(timeout 20 "$bin" inspect --plan "$tmp/fifo.pb" 2>&1 >/dev/null); rc=$?
fifo_named="'$tmp/fifo.pb' is a FIFO, not a regular file"
check "inspect --plan FIFO exits 2 at once naming it" '[ $rc -eq 2 ] && echo "$err" | grep -qF "$fifo_named"'
err=$(timeout 20 "$bin" import "$tmp/fifo.onnx" --out "$tmp/fifo-import.pbtxt" 2>&1 >/dev/null); rc=$?
fifo_named="'$tmp/fifo.onnx' is a FIFO, not a regular file"
check "import of a FIFO exits 2 at once naming it" '[ $rc -eq 2 ] && echo "$err" | grep -qF "$fifo_named"'
err=$(timeout 20 "$bin" search --model zoo:tiny-mmt --cluster "$tmp/fifo-cluster.json" --devices 2 \
  --batch 8 --out "$tmp/fifo-plan.pb" 2>&1 >/dev/null); rc=$?
fifo_named="'$tmp/fifo-cluster.json' is a FIFO, not a regular file"
check "search --cluster FIFO exits 2 at once naming it" '[ $rc -eq 2 ] && echo "$err" | grep -qF "$fifo_named"'
ln -sf /dev/zero "$tmp/zero.pbtxt"  # a device never ends: refused, not read
err=$(timeout 20 "$bin" model-info --model "$tmp/zero.pbtxt" 2>&1 >/dev/null); rc=$?
fifo_named="'$tmp/zero.pbtxt' is a character device, not a regular file"
check "model-info --model of a device exits 2 at once naming it" '[ $rc -eq 2 ] && echo "$err" | grep -qF "$fifo_named"'
# A misspelt flag or subcommand: CLI11's refusal, then what was meant.
err=$("$bin" search --model zoo:tiny-mmt --batch 16 --out "$tmp/x.pb" --optimzer sgd 2>&1 >/dev/null); rc=$?
check "a misspelt flag exits 2 suggesting the flag" '[ $rc -eq 2 ] && echo "$err" | grep -qF -- "did you mean '"'"'--optimizer'"'"'?"'
err=$("$bin" serach --model zoo:tiny-mmt 2>&1 >/dev/null); rc=$?
check "a misspelt subcommand exits 2 suggesting the subcommand" '[ $rc -eq 2 ] && echo "$err" | grep -qF "did you mean '"'"'search'"'"'?"'
for d in 0 -3; do
  err=$("$bin" replan --plan "$tmp/lowered.pb" --exclude-ranks 0 --devices "$d" --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
  check "replan --devices $d exits 2 naming the flag and the range" \
    '[ $rc -eq 2 ] && echo "$err" | grep -qF -- "--devices: Value $d not in range 1 to 65536"'
  err=$("$bin" verify --plan "$tmp/lowered.pb" --cluster dgx-h100 --devices "$d" 2>&1 >/dev/null); rc=$?
  check "verify --devices $d exits 2 naming the flag and the range" \
    '[ $rc -eq 2 ] && echo "$err" | grep -qF -- "--devices: Value $d not in range 1 to 65536"'
done
# --config: a TOML file of flags, [search] for search's; the command line wins; anywhere on the line.
cat > "$tmp/job.toml" <<TOML
log-level = "warn"
[search]
model = "zoo:tiny-mmt"
cluster = "cpu-local"
devices = 2
batch = 16
micro-batches = [4]
optimizer = "sgd"
out = "$tmp/config-plan.pb"
TOML
out=$("$bin" search --config "$tmp/job.toml" 2>&1); rc=$?
check "search --config reads search's flags from [search]" \
  '[ $rc -eq 0 ] && [ -s "$tmp/config-plan.pb" ] && echo "$out" | grep -q "micro-batch 4," && ! echo "$out" | grep -q "\[info\]"'
out=$("$bin" --config "$tmp/job.toml" search --batch 32 --out "$tmp/config-plan32.pb" 2>&1); rc=$?
check "a flag on the command line wins over --config's" \
  '[ $rc -eq 0 ] && [ -s "$tmp/config-plan32.pb" ] && [ ! "$tmp/config-plan32.pb" -ef "$tmp/config-plan.pb" ] && "$bin" inspect --plan "$tmp/config-plan32.pb" | grep -q "mini-batch 32"'
printf '[search]\nbacth = 3\n' > "$tmp/bad.toml"
err=$("$bin" search --config "$tmp/bad.toml" --model zoo:tiny-mmt --batch 8 --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "a --config key that is no flag exits 2 naming it" '[ $rc -eq 2 ] && echo "$err" | grep -qF "search.bacth"'
mkfifo "$tmp/fifo.toml"
err=$(timeout 20 "$bin" search --config "$tmp/fifo.toml" 2>&1 >/dev/null); rc=$?
check "--config of a FIFO exits 2 at once naming it" \
  '[ $rc -eq 2 ] && echo "$err" | grep -qF -- "--config: '"'"'$tmp/fifo.toml'"'"' is a FIFO, not a regular file"'
exit $fail
