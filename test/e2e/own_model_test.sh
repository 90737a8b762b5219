#!/usr/bin/env bash
# Runs the README's "Train your own model" commands as written (the block between its
# own-model markers), on the committed torch export of the layer the README describes, then
# checks what they claim: the plan's losses equal the reference's (to float rounding), and the exported model holds
# the trained weights (it imports, and differs from the untrained file).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$1
build=${2:-$root/build}  # the build directory the README's build/bin paths mean
rm -rf "$tmp" && mkdir -p "$tmp"
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
losses() { grep -o '"loss": [-0-9.e]*' "$1" | awk '{printf "%.6f\n", $2}'; }
# The walk-through's python3 needs numpy (scripts/install-deps.sh installs Debian's): where the
# first python3 on PATH lacks it (a pyenv or venv interpreter), use the system one.
if ! python3 -c "import numpy" 2>/dev/null && /usr/bin/python3 -c "import numpy" 2>/dev/null; then
  PATH=/usr/bin:$PATH
fi

sed -n '/<!-- own-model:begin -->/,/<!-- own-model:end -->/p' "$root/README.md" |
  grep -v '^<!--' | grep -v '^```' > "$tmp/walkthrough.sh"
check "the README has the walk-through" '[ "$(grep -c graphpipe "$tmp/walkthrough.sh")" -ge 8 ]'
cp "$root/test/data/onnx/torch/encoder_layer_op17_train.onnx" "$tmp/model.onnx"
ln -s "$build" "$tmp/build"
ln -s "$root/scripts" "$tmp/scripts"
(cd "$tmp" && bash -euo pipefail walkthrough.sh) > "$tmp/walkthrough.log" 2>&1; rc=$?
tail -5 "$tmp/walkthrough.log"
check "every command of the walk-through succeeds" '[ $rc -eq 0 ]'
check "the plan trained 16 iterations on 2 ranks" '[ "$(losses "$tmp/m.json" | wc -l)" -eq 16 ]'
# Equal up to float rounding: replicas of a data-parallel stage sum gradients in another order.
check "the plan's losses equal the reference's (1e-5 relative)" \
  'paste <(losses "$tmp/m.json") <(losses "$tmp/ref.json") | awk "{d = \$1 - \$2; if (d < 0) d = -d; if (NF != 2 || d > 1e-5 * (\$2 < 0 ? -\$2 : \$2)) bad = 1} END {exit bad + (NR != 16)}"'
# The target (-x) is learnable: the last epoch's mean loss is below the first's.
check "the loss went down" \
  '[ "$(losses "$tmp/m.json" | awk "NR<=4{a+=\$1} NR>12{b+=\$1} END{print (b < 0.8 * a) ? 1 : 0}")" = 1 ]'
"$build/bin/graphpipe-plan" --log-level warn import "$tmp/trained.onnx" --out "$tmp/re.pbtxt"; rc=$?
check "the trained ONNX model imports again" '[ $rc -eq 0 ]'
check "it holds other weights than the untrained export" \
  '[ -s "$tmp/trained.onnx" ] && ! cmp -s "$tmp/model.onnx" "$tmp/trained.onnx"'
# torch's encoder layer: 12 state_dict tensors (the attention's q, k, v packed in one again).
check "the .npz holds every parameter array under torch's names" \
  'python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); n = z.namelist(); assert z.testzip() is None and len(n) == 12 and \"layer.self_attn.in_proj_weight.npy\" in n, n" "$tmp/trained.npz"'
check "the .safetensors holds the same names" \
  'python3 -c "import json, struct, sys; b = open(sys.argv[1], \"rb\").read(); h = json.loads(b[8:8 + struct.unpack(\"<Q\", b[:8])[0]]); assert len(h) == 13 and h[\"layer.self_attn.in_proj_weight\"][\"shape\"] == [24, 8], h" "$tmp/trained.safetensors"'
check "eval gives the trained checkpoint's held-out loss over the 20 held-out samples" \
  'grep -q "^held-out loss [0-9.]* over 20 samples of held (checkpoint of iteration 15)$" "$tmp/walkthrough.log"'
rm -rf "$tmp"
exit $fail
