#!/usr/bin/env bash
# graphpipe-plan search --nodes N --devices-per-node P: a preset's device and links in another
# shape (either flag alone keeps the preset's other dimension); exit codes 0 ok, 2 bad input.
set -u
bin=$1
tmp=$2
rm -rf "$tmp" && mkdir -p "$tmp"
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
shape() { "$bin" inspect --plan "$1" --json | tr -d ' \n'; }

"$bin" --log-level warn search --model zoo:tiny-mmt --cluster dgx-h100 --nodes 4 \
  --devices-per-node 8 --batch 64 --out "$tmp/4x8.pb" >/dev/null; rc=$?
out=$(shape "$tmp/4x8.pb")
check "search --nodes 4 --devices-per-node 8 over dgx-h100 plans for 4 nodes of 8 H100s" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "\"nodes\":4,\"devices_per_node\":8" && echo "$out" | grep -q "\"device\":\"H100-SXM5-80GB\""'
"$bin" --log-level warn search --model zoo:tiny-mmt --cluster dgx-h100 --nodes 2 --batch 64 \
  --out "$tmp/2x.pb" >/dev/null; rc=$?
check "--nodes alone keeps the preset's devices per node" \
  '[ $rc -eq 0 ] && shape "$tmp/2x.pb" | grep -q "\"nodes\":2,\"devices_per_node\":8"'
"$bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --devices-per-node 2 \
  --batch 16 --out "$tmp/1x2.pb" >/dev/null; rc=$?
check "--devices-per-node alone keeps the preset's node count" \
  '[ $rc -eq 0 ] && shape "$tmp/1x2.pb" | grep -q "\"nodes\":1,\"devices_per_node\":2"'
"$bin" --log-level warn search --model zoo:tiny-mmt --cluster cpu-local --nodes 2 \
  --devices-per-node 2 --devices 3 --batch 16 --out "$tmp/2x2-3.pb" >/dev/null; rc=$?
check "--devices picks some of the N x P devices and the plan verifies" \
  '[ $rc -eq 0 ] && shape "$tmp/2x2-3.pb" | grep -q "\"nodes\":2,\"devices_per_node\":2" && "$bin" verify --plan "$tmp/2x2-3.pb" >/dev/null'

err=$("$bin" search --model zoo:tiny-mmt --cluster dgx-h100 --nodes 4 --devices-per-node 8 \
  --devices 40 --batch 64 --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "--devices beyond --nodes x --devices-per-node exits 2 naming both" \
  '[ $rc -eq 2 ] && echo "$err" | grep -qF -- "--devices 40 conflicts with --nodes 4 x --devices-per-node 8 = 32 devices"'
for flag in --nodes --devices-per-node; do
  err=$("$bin" search --model zoo:tiny-mmt --cluster dgx-h100 $flag 0 --batch 64 \
    --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
  check "$flag 0 exits 2 naming it" '[ $rc -eq 2 ] && echo "$err" | grep -qF -- "$flag"'
done
err=$("$bin" search --model zoo:tiny-mmt --cluster dgx-h100 --nodes 65536 --devices-per-node 8 \
  --batch 64 --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "a shape of more than 65536 devices exits 2" \
  '[ $rc -eq 2 ] && echo "$err" | grep -qF "= 524288 devices, more than 65536"'
# A cluster file that excludes devices numbers them in its own shape: reshaping it is refused.
cluster_dir="$(cd "$(dirname "$0")/../../configs/clusters" && pwd)"
{ cat "$cluster_dir/cpu-local.pbtxt"; echo "excluded_ranks: 3"; } > "$tmp/holes.pbtxt"
err=$("$bin" search --model zoo:tiny-mmt --cluster "$tmp/holes.pbtxt" --nodes 2 --batch 16 \
  --out "$tmp/x.pb" 2>&1 >/dev/null); rc=$?
check "reshaping a cluster with excluded_ranks exits 2 saying why" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "excludes devices (excluded_ranks)"'
check "no refused search wrote a plan" '[ ! -e "$tmp/x.pb" ]'
exit $fail
