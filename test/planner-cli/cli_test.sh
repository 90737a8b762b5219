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
check "zoo list names every paper model" '[ $rc -eq 0 ] && for m in mmt dlrm candle-uno transformer nbranch tiny-mmt; do echo "$out" | grep -q "^$m\$" || exit 1; done'
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
exit $fail
