#!/usr/bin/env bash
# graphpipe-profile as a user runs it, and graphpipe-plan reading what it writes.
set -u
bin=$1
plan_bin=$2
tmp=$3
rm -rf "$tmp" && mkdir -p "$tmp"
fail=0
# On failure the output under test is shown, so a CI log says why.
check() {
  if eval "$2"; then echo "ok: $1"; else
    echo "FAIL: $1"; fail=1
    printf '  out: %s\n  err: %s\n' "${out:-}" "${err:-}" | head -c 3000
  fi
}

out=$("$bin" devices --json); rc=$?
check "devices --json exits 0" '[ $rc -eq 0 ]'
check "devices --json names the host cores" 'echo "$out" | grep -q "\"logical_cores\":[1-9]"'
check "devices --json says whether CUDA is built" 'echo "$out" | grep -Eq "\"built\":(true|false)"'
out=$("$bin" devices); rc=$?
check "devices prints the cpu line" '[ $rc -eq 0 ] && echo "$out" | grep -q "^cpu "'
# With the CUDA backend: which libraries the kernels use, following GP_CUDA_KERNELS.
if echo "$out" | grep -q "backend built"; then
  check "devices names the kernels' libraries" \
    'echo "$out" | grep -Eq "^kernels +.*\(GP_CUDA_KERNELS=auto\)"'
  hand=$(GP_CUDA_KERNELS=hand "$bin" devices)
  check "GP_CUDA_KERNELS=hand: hand-written kernels" \
    'echo "$hand" | grep -q "^kernels  hand-written (GP_CUDA_KERNELS=hand)"'
  bad=$(GP_CUDA_KERNELS=fast "$bin" devices --json)
  check "a GP_CUDA_KERNELS other than auto, library or hand is named" \
    'echo "$bad" | grep -q "GP_CUDA_KERNELS = '"'"'fast'"'"', expected auto"'
fi
"$bin" nonsense >/dev/null 2>&1; rc=$?
check "unknown subcommand exits 2" '[ $rc -eq 2 ]'

# Operators: a tiny model, warm caches and few repetitions to stay quick.
fast=(--micro-batches 1,2 --repetitions 2 --min-time-ms 0 --flush-cache-mib 0)
out=$("$bin" ops --model zoo:tiny-mmt "${fast[@]}" --out "$tmp/ops.pb" --log-level warn 2>&1); rc=$?
check "ops on tiny-mmt exits 0" '[ $rc -eq 0 ]'
check "ops prints a row per operator and size" 'echo "$out" | grep -q "b0.l0.attn (multi_head_atten *1 "'
check "ops compares with the analytic model" 'echo "$out" | grep -q "analytic"'
out=$("$bin" show "$tmp/ops.pb"); rc=$?
check "show counts the signatures for the cpu-local device kind" \
  '[ $rc -eq 0 ] && echo "$out" | grep -Eq "cpu-process +7 signatures, +14 records"'
"$bin" ops --model zoo:tiny-mmt --micro-batches 0 --out "$tmp/x.pb" >/dev/null 2>&1; rc=$?
check "ops rejects a zero micro-batch with exit 2" '[ $rc -eq 2 ]'
err=$("$bin" ops --model zoo:no-such-model --out "$tmp/x.pb" 2>&1); rc=$?
check "ops names a bad model" '[ $rc -eq 2 ] && echo "$err" | grep -q "no-such-model"'
# CUDA: without a usable GPU (a CPU-only build, or no device or driver) the run must fail, say
# why and write nothing; with one it must profile. `devices --json` lists the usable GPUs.
if "$bin" devices --json | grep -q '"devices":\[{'; then
  out=$("$bin" ops --model zoo:tiny-mmt --device cuda:0 "${fast[@]}" --out "$tmp/cuda.pb" \
        --log-level warn 2>&1); rc=$?
  check "ops on cuda:0 profiles on this GPU" '[ $rc -eq 0 ] && [ -s "$tmp/cuda.pb" ]'
else
  err=$("$bin" ops --model zoo:tiny-mmt --device cuda:0 --out "$tmp/x.pb" 2>&1); rc=$?
  check "ops on cuda:0 without a GPU fails saying why" \
    '[ $rc -ne 0 ] && echo "$err" | grep -Eq "this build has no CUDA backend|cuda:0: no usable CUDA device|cuda:0: this machine has 0 CUDA device"'
  check "a failed ops run writes nothing" '[ ! -e "$tmp/x.pb" ]'
fi
err=$("$bin" ops --model zoo:tiny-mmt --precision bf16 --out "$tmp/x.pb" 2>&1); rc=$?
check "ops refuses a bf16 profile of the CPU, naming the flag" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--precision bf16" && [ ! -e "$tmp/x.pb" ]'
err=$("$bin" ops --model zoo:tiny-mmt --precision fp16 --out "$tmp/x.pb" 2>&1); rc=$?
check "ops rejects an unknown precision with exit 2 naming the flag" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--precision"'
out=$("$bin" ops --help 2>&1)
check "ops --help documents the precision and its tolerances" \
  'echo "$out" | grep -q -- "--precision" && echo "$out" | tr -s " \n" " " | grep -q "bf16 6e-2"'

# Communication: two local processes over the default data plane (shared memory).
# Sizes where bandwidth, not latency jitter, sets the time, so every fit has a clear slope.
out=$("$bin" comm --ranks 2 --sizes 1M,4M,16M --repetitions 10 --out "$tmp/comm.pb" \
      --log-level warn 2>&1); rc=$?
check "comm with 2 ranks exits 0" '[ $rc -eq 0 ]'
check "comm prints nccl-tests columns" 'echo "$out" | grep -q "algbw_GB/s *busbw_GB/s"'
check "comm prints a row per size" '[ "$(echo "$out" | grep -cE "^ +(1048576|4194304|16777216) ")" -eq 6 ]'
check "comm prints the fits" 'echo "$out" | grep -q "^fit p2p"'
"$bin" comm --ranks 2 --sizes 3 --out "$tmp/y.pb" >/dev/null 2>&1; rc=$?
check "comm rejects a size that is not a multiple of 4" '[ $rc -eq 2 ]'
"$bin" comm --ranks 1 --out "$tmp/y.pb" >/dev/null 2>&1; rc=$?
check "comm rejects a single rank" '[ $rc -eq 2 ]'
# Sizes that cannot be allocated are refused before any rank or ring exists (they used to end in
# an uncaught bad_alloc that left the ring in /dev/shm): exit 2 naming the flag, nothing written.
# (The 1M-sample micro-batch of a seq 2048 x 1024 model needs terabytes: refused on any host.)
while read -r flag args; do
  # shellcheck disable=SC2086
  err=$(timeout 60 "$bin" $args --out "$tmp/huge.pb" 2>&1 >/dev/null); rc=$?
  check "$args: exit 2 naming $flag" '[ $rc -eq 2 ] && echo "$err" | grep -q -- "$flag"'
done <<'CASES'
--sizes comm --ranks 2 --sizes 64G
--sizes comm --ranks 2 --sizes 99999999999999999999G
--sizes comm --ranks 2 --sizes 9223372036854775807K
--sizes comm --ranks 128 --sizes 4G
--ranks comm --ranks 100000
--repetitions comm --ranks 2 --repetitions 2000000000
--micro-batches ops --model zoo:tiny-mmt --micro-batches 1099511627776
--micro-batches ops --model zoo:mmt?layers=1&seq=2048&hidden=1024&heads=8&ffn=1024 --micro-batches 1048576
--flush-cache-mib ops --model zoo:tiny-mmt --flush-cache-mib 1e12
--flush-cache-mib ops --model zoo:tiny-mmt --flush-cache-mib nan
--repetitions ops --model zoo:tiny-mmt --repetitions 2000000000
CASES
check "refused sizes write no profile" '[ ! -e "$tmp/huge.pb" ]'

out=$("$bin" merge "$tmp/ops.pb" "$tmp/comm.pb" --out "$tmp/profile.pbtxt" 2>&1); rc=$?
check "merge exits 0" '[ $rc -eq 0 ]'
out=$("$bin" show "$tmp/profile.pbtxt")
check "the merged database has ops, p2p and all-reduce" \
  'echo "$out" | grep -q "7 signatures" && echo "$out" | grep -q "p2p" && echo "$out" | grep -q "all-reduce"'
check "records keep their provenance" 'grep -q "tool_version" "$tmp/profile.pbtxt"'
# Shared memory, unless this host has none for the rings (then the fallback says why).
check "link fits name the data plane they were measured over" \
  'grep -qE "(shared memory with ranks 0,1, gloo beyond|gloo \(shared memory unavailable: [^\"]*\)), 2 processes" "$tmp/profile.pbtxt"'
echo "format_version: 1 ops { signature: \"x\" }" > "$tmp/bad.pbtxt"
err=$("$bin" merge "$tmp/ops.pb" "$tmp/bad.pbtxt" --out "$tmp/z.pb" 2>&1); rc=$?
check "merge names an invalid input and its field" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "bad.pbtxt" && echo "$err" | grep -q "device_kind"'

# The planner reads it: measured costs change the prediction and the plan records the profile.
plan() { "$plan_bin" search --model zoo:tiny-mmt --cluster cpu-local --devices 2 --batch 8 \
  --log-level warn "$@"; }
a=$(plan --out "$tmp/analytic.pb" 2>&1); rc_a=$?
p=$(plan --profile "$tmp/profile.pbtxt" --out "$tmp/profiled.pbtxt" 2>&1); rc_p=$?
check "search with --profile exits 0" '[ $rc_a -eq 0 ] && [ $rc_p -eq 0 ]'
# The whole prediction (throughput to 0.1 sample/s, iteration to 4 significant digits): two
# different cost models agreeing on every digit would mean the profile was not used.
prediction() { echo "$1" | grep -Eo "[0-9.]+ samples/s predicted, iteration [0-9.e-]+ s"; }
out=$a err=$p
check "measured costs change the predicted iteration" \
  '[ -n "$(prediction "$a")" ] && [ -n "$(prediction "$p")" ] &&
   [ "$(prediction "$a")" != "$(prediction "$p")" ]'
check "the plan records the profile hash" \
  'grep -Eq "profile_hash: \"[0-9a-f]{16}\"" "$tmp/profiled.pbtxt"'
err=$("$plan_bin" search --model zoo:tiny-mmt --cluster summit-v100 --devices 2 --batch 8 \
      --profile "$tmp/profile.pbtxt" --out "$tmp/wrong.pb" 2>&1); rc=$?
check "a profile for another device kind is refused, naming both kinds" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q "cpu-process" && echo "$err" | grep -q "summit-v100"'

# Imported ONNX models: every operator of a vision block is measured; opaque ops are left out.
onnx_dir="$(cd "$(dirname "$0")/../data/onnx" && pwd)"
out=$("$bin" ops --model "$onnx_dir/inception_block.onnx" "${fast[@]}" --out "$tmp/inception.pb" \
      --log-level warn 2>&1); rc=$?
check "ops profiles an .onnx vision block: conv, batch norm and pools" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "(conv2d" && echo "$out" | grep -q "(batch_norm" &&
   echo "$out" | grep -q "(max_pool2d" && echo "$out" | grep -q "(avg_pool2d"'
"$plan_bin" import "$onnx_dir/gated_unsupported.onnx" --allow-opaque --out "$tmp/gated.pbtxt" \
  >/dev/null 2>&1
out=$("$bin" ops --model "$tmp/gated.pbtxt" "${fast[@]}" --out "$tmp/gated.pb" 2>&1); rc=$?
check "opaque ops are left out of a profile with a warning, the rest measured" \
  '[ $rc -eq 0 ] && echo "$out" | grep -q "2 opaque op(s)" && echo "$out" | grep -q "(linear"'
# The kernels a CPU profile measured are in its provenance (the word before MAX_THREADS of
# OpenBLAS's config): AVX2 or AVX-512 ones where the CPU has them (OpenBLAS may have loaded an
# older set for a CPU newer than it knows), and the ones a user forces with OPENBLAS_CORETYPE.
blas_core() { grep -o '[A-Za-z0-9_]* MAX_THREADS' "$1" | head -1 | cut -d' ' -f1; }
one=(--micro-batches 1 --repetitions 1 --min-time-ms 0 --flush-cache-mib 0 --passes 1)
"$bin" ops --model zoo:tiny-mmt "${one[@]}" --out "$tmp/blas.pbtxt" --log-level warn >/dev/null 2>&1
rc=$?
check "a CPU profile names the OpenBLAS kernels it measured" \
  '[ $rc -eq 0 ] && [ -n "$(blas_core "$tmp/blas.pbtxt")" ]'
if grep -q "DYNAMIC_ARCH" "$tmp/blas.pbtxt" && grep -qw avx2 /proc/cpuinfo && \
   grep -qw fma /proc/cpuinfo && [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  check "a CPU profile on a CPU with AVX2 measured no pre-AVX2 OpenBLAS kernels" \
    '! blas_core "$tmp/blas.pbtxt" | grep -Eqx "Prescott|Core2|Penryn|Dunnington|Nehalem|Atom|Sandybridge|Barcelona|Nano|Bobcat|Unknown"'
  OPENBLAS_CORETYPE=Nehalem "$bin" ops --model zoo:tiny-mmt "${one[@]}" \
    --out "$tmp/blas-forced.pbtxt" --log-level warn >/dev/null 2>&1
  check "OPENBLAS_CORETYPE set by the user is kept" \
    '[ "$(blas_core "$tmp/blas-forced.pbtxt")" = Nehalem ]'
fi
err=$("$bin" ops --model zoo:tiny-mmt --passes 0 --out "$tmp/x.pb" 2>&1); rc=$?
check "ops rejects zero passes with exit 2 naming the flag" '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--passes"'
err=$("$bin" comm --ranks 2 --data-plane tcp --out "$tmp/x.pb" 2>&1); rc=$?
check "comm rejects an unknown data plane with exit 2 naming the flag" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--data-plane"'
err=$("$bin" ops --model zoo:tiny-mmt --cpu-threads 4096 --out "$tmp/x.pb" 2>&1); rc=$?
check "ops --cpu-threads 4096 exits 2 naming the flag and the host's CPUs" \
  '[ $rc -eq 2 ] && echo "$err" | grep -q -- "--cpu-threads = 4096, must be 1\.\.[0-9]* (the CPUs this process may run on)"'
exit $fail
