#!/usr/bin/env bash
# Builds the libFuzzer targets (test/fuzz) with clang, AddressSanitizer and UBSan in build-fuzz/,
# and runs each for SECONDS (default 60) from a seed corpus: plans and models written by the
# planner (binary, text and JSON), the ONNX files of test/data, the cluster presets, profile
# databases written by graphpipe-profile, a checkpoint written by the executor, .npy data files,
# stage assignments of tiny-mmt, hostfiles and metrics files written by the executor. A crash
# leaves its input in build-fuzz/crashes/<target>/ and makes the script exit 1; add it to
# test/data/fuzz/<target>/ once fixed, so that every later run replays it.
#
#   scripts/fuzz.sh [SECONDS]        # e.g. scripts/fuzz.sh 3600 for an hour per target
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
out="$root/build-fuzz"
mkdir -p "$out"
cmake -S "$root" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DGP_CUDA=OFF -DGP_FUZZ=ON \
  -DGP_BUILD_TESTS=OFF > "$out/configure.log" 2>&1 || { cat "$out/configure.log"; exit 1; }
targets="fuzz_plan fuzz_model fuzz_onnx fuzz_cluster fuzz_profile fuzz_checkpoint fuzz_npy
  fuzz_assignment fuzz_hostfile fuzz_metrics"
# shellcheck disable=SC2086
cmake --build "$out" -j "${GP_JOBS:-2}" --target $targets

# Seeds: every selector byte (0 binary, 1 text, 2 JSON) in front of a planner-written file.
planner="$root/build/bin/graphpipe-plan"
seeds="$out/seeds"
rm -rf "$seeds" && mkdir -p "$seeds"/{fuzz_plan,fuzz_model,fuzz_onnx,fuzz_cluster,fuzz_profile} \
  "$seeds"/{fuzz_checkpoint,fuzz_npy,fuzz_assignment,fuzz_hostfile,fuzz_metrics}
if [ -x "$planner" ]; then
  for m in tiny-mmt tiny-candle-uno tiny-dlrm; do
    for ext in pb pbtxt json; do
      "$planner" --log-level error search --model "zoo:$m" --cluster cpu-local --devices 3 \
        --batch 16 --micro-batches 4 --out "$seeds/$m.$ext" > /dev/null 2>&1 || continue
      "$planner" --log-level error zoo export "$m" --out "$seeds/$m-model.$ext" \
        > /dev/null 2>&1 || true
    done
  done
fi
add_seed() {  # TARGET FILE SELECTOR
  { printf "\\x$(printf %02x "$3")"; cat "$2"; } > "$seeds/$1/$(basename "$2").seed"
}
for f in "$seeds"/*.pb "$seeds"/*.pbtxt "$seeds"/*.json; do
  [ -f "$f" ] || continue
  case "$f" in *.pb) sel=0 ;; *.pbtxt) sel=1 ;; *) sel=2 ;; esac
  case "$f" in *-model.*) add_seed fuzz_model "$f" $sel ;; *) add_seed fuzz_plan "$f" $sel ;; esac
done
find "$root/test/data" -name '*.onnx' -size -2M -exec cp {} "$seeds/fuzz_onnx/" \;
for f in "$root"/configs/clusters/*; do
  case "$f" in *.pb) sel=0 ;; *.pbtxt) sel=1 ;; *.json) sel=2 ;; *) continue ;; esac
  add_seed fuzz_cluster "$f" $sel
done
# Profile databases as graphpipe-profile writes them (ops of tiny-mmt, whose plan fuzz_profile
# simulates, and a comm fit), in every format; the tiny-mmt plan is that plan (GP_FUZZ_PLAN).
profiler="$root/build/bin/graphpipe-profile"
if [ -x "$profiler" ]; then
  "$profiler" --log-level error ops --model zoo:tiny-mmt --micro-batches 1,2,4 --repetitions 1 \
    --min-time-ms 0 --flush-cache-mib 0 --out "$seeds/ops.pb" > /dev/null 2>&1 || true
  # (It writes the fits it could make even when one kind fails to fit.)
  "$profiler" --log-level error comm --ranks 2 --sizes 64K,1M,4M --repetitions 3 --warmup 1 \
    --out "$seeds/comm.pb" > /dev/null 2>&1 || true
  dbs=$(ls "$seeds/ops.pb" "$seeds/comm.pb" 2>/dev/null || true)
  for ext in pb pbtxt json; do
    [ -n "$dbs" ] || break
    # shellcheck disable=SC2086
    "$profiler" --log-level error merge $dbs \
      --out "$seeds/profile.$ext" > /dev/null 2>&1 || continue
    case $ext in pb) sel=0 ;; pbtxt) sel=1 ;; *) sel=2 ;; esac
    add_seed fuzz_profile "$seeds/profile.$ext" $sel
  done
fi
export GP_FUZZ_PLAN="$seeds/tiny-mmt.pb"
# A checkpoint as a one-rank job writes it: its manifest, then "#TENSOR" and a tensor file.
executor="$root/build/bin/graphpipe-executor"
if [ -x "$planner" ] && [ -x "$executor" ]; then
  ck="$seeds/checkpoint"
  "$planner" --log-level error search --model zoo:tiny-mmt --cluster cpu-local --devices 1 \
    --batch 4 --out "$ck-plan.pb" > /dev/null 2>&1 &&
    "$executor" --log-level error run --plan "$ck-plan.pb" --rank 0 --world-size 1 \
      --coordinator 127.0.0.1:0 --insecure --iterations 1 --checkpoint-dir "$ck" --checkpoint-every 1 \
      > /dev/null 2>&1 || true
  for m in "$ck"/iter-*/MANIFEST.pbtxt; do
    [ -f "$m" ] || continue
    file=$(sed -n 's/^ *file: "\(.*\)"/\1/p' "$m" | head -1)
    { cat "$m"; printf '\n#TENSOR\n'; cat "$(dirname "$m")/$file"; } > "$seeds/fuzz_checkpoint/manifest.seed"
    cp "$m" "$seeds/fuzz_checkpoint/manifest-only.seed"
  done
fi
# .npy files (fuzz_npy.cc: selector bit 0 the ragged model, bits 1-2 the input, bit 3 shuffle),
# stage assignments of tiny-mmt (JSON and text), hostfiles and verdict files.
"$planner" --log-level error zoo export tiny-mmt --out "$seeds/tiny-mmt-ops.json" \
  > /dev/null 2>&1 || true
python3 - "$seeds" <<'PY'
import json, os, struct, sys
seeds = sys.argv[1]
def npy(descr, shape, payload, major=1):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d, " % n for n in shape))
    pre = 10 if major == 1 else 12
    d += " " * ((64 - (pre + len(d) + 1) % 64) % 64) + "\n"
    size = struct.pack("<H", len(d)) if major == 1 else struct.pack("<I", len(d))
    return b"\x93NUMPY" + bytes([major, 0]) + size + d.encode() + payload
def put(target, name, selector, data):
    with open(os.path.join(seeds, target, name), "wb") as f:
        f.write(bytes([selector]) + data)
floats = lambda n: struct.pack("<%df" % n, *[0.25 * i for i in range(n)])
ints = lambda vals: struct.pack("<%dq" % len(vals), *vals)
put("fuzz_npy", "x.seed", 0, npy("<f4", (4, 3), floats(12)))
put("fuzz_npy", "x-v2-shuffled.seed", 8, npy("<f4", (4, 3), floats(12), major=2))
put("fuzz_npy", "ids.seed", 2, npy("<i8", (4, 2), ints([0, 1, 2, 3, 4, 0, 1, 2])))
put("fuzz_npy", "ids-int32.seed", 2, npy("<i4", (4, 2), struct.pack("<8i", 0, 1, 2, 3, 4, 0, 1, 2)))
put("fuzz_npy", "t.seed", 4, npy("<f4", (4, 4), floats(16)))
put("fuzz_npy", "ragged.seed", 1, npy("<i8", (6,), ints([0, 1, 2, 3, 4, 0])) +
    b"\n#OFFSETS\n" + npy("<i8", (4,), ints([0, 1, 3, 4])))
try:
    ops = [o["id"] for o in json.load(open(os.path.join(seeds, "tiny-mmt-ops.json")))["ops"]]
except (OSError, ValueError, KeyError):
    ops = []
if ops:
    b0 = [o for o in ops if o.startswith("b0.")]
    rest = [o for o in ops if o not in b0]
    for name, stages in (("one", [ops]), ("two", [b0, rest])):
        js = {"stages": [{"ops": s, "replicas": 1, "micro_batch": 4} for s in stages]}
        # Selector: the format (mod 3) and 1 + (selector / 3) % 8 devices, here 4.
        put("fuzz_assignment", name + ".json.seed", 11, json.dumps(js).encode())
        text = "".join("stages {\n%s  replicas: %d\n}\n" % (
            "".join('  ops: "%s"\n' % o for o in s), i + 1) for i, s in enumerate(stages))
        put("fuzz_assignment", name + ".pbtxt.seed", 10, text.encode())
put("fuzz_hostfile", "two-hosts.seed", 0x85, b"# host slots address\nnode-a 2 10.0.0.1\nnode-b 2\n")
put("fuzz_hostfile", "one-host.seed", 0x04, b"localhost 2\n")
put("fuzz_hostfile", "verdict.seed", 3, b"failed_rank=1\nreason=rank 1 exited 137\n")
PY
# Metrics files as `local` writes them: one JSON document (.json) and JSON lines (.jsonl).
if [ -x "$executor" ] && [ -f "$seeds/tiny-mmt.pb" ]; then
  for ext in json jsonl; do
    "$executor" --log-level error local --plan "$seeds/tiny-mmt.pb" --iterations 3 \
      --metrics-out "$seeds/metrics.$ext" > /dev/null 2>&1 || continue
    case $ext in json) sel=0 ;; *) sel=1 ;; esac
    add_seed fuzz_metrics "$seeds/metrics.$ext" $sel
  done
fi
for t in $targets; do
  [ -d "$root/test/data/fuzz/$t" ] && cp "$root/test/data/fuzz/$t"/* "$seeds/$t/" 2>/dev/null || true
done

status=0
# Every input that once crashed a target must now pass.
for t in $targets; do
  [ -d "$root/test/data/fuzz/$t" ] || continue
  if ! "$out/bin/$t" "$root/test/data/fuzz/$t"/* > "$out/$t.replay.log" 2>&1; then
    echo "$t: a regression input of test/data/fuzz/$t crashes again (log $out/$t.replay.log)"
    status=1
  fi
done
# Exploration. GP_FUZZ_STRICT=0 reports new crashes without failing (CI, while known ones wait).
for t in $targets; do
  mkdir -p "$out/crashes/$t" "$out/corpus/$t"
  echo "== $t: $seconds s from $(ls "$seeds/$t" | wc -l) seeds"
  # A fixed seed (GP_FUZZ_SEED) makes a bounded run repeatable; change it to explore further.
  if ! "$out/bin/$t" -max_total_time="$seconds" -seed="${GP_FUZZ_SEED:-1}" -timeout=20 -rss_limit_mb=4096 \
       -artifact_prefix="$out/crashes/$t/" -print_final_stats=1 \
       "$out/corpus/$t" "$seeds/$t" > "$out/$t.log" 2>&1; then
    echo "$t: FOUND A CRASH (input in $out/crashes/$t/, log $out/$t.log):"
    grep -m1 -E "runtime error|ERROR: AddressSanitizer" "$out/$t.log" | sed "s/^/  /" || true
    grep -m3 -E "^ +#[0-9]+ .* in gp::" "$out/$t.log" | sed "s/^/  /" || true
    [ "${GP_FUZZ_STRICT:-1}" = 0 ] || status=1
  fi
  grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$out/$t.log" | sed "s/^/  /"
done
exit $status
