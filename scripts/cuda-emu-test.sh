#!/usr/bin/env bash
# Runs the GPU kernel tests (test/cuda/cuda_kernels_test.cc) on the CPU, without a GPU: the real
# CUDA backend sources (.cc as they are; .cu with each <<<grid, block>>> launch rewritten into a
# call that runs every CUDA thread as a host thread, with real barriers and warp shuffles) against
# an emulated CUDA runtime and cuBLAS (tools/cuda-emu/). It checks indexing, reductions,
# synchronisation inside blocks, launch limits and the host code's use of the runtime; it cannot
# check timing, stream ordering or cuBLAS's own rounding. Slow (every CUDA thread is a thread):
# the whole binary takes ~25 minutes on 2 cores; pass Catch2 test names (comma-separated) to
# run fewer, and GP_OP_CASES=word,word to run only the op cases whose names contain a word.
# With --nccl it runs the NCCL data plane's tests instead (test/cuda/nccl_test.cc and the
# hidden "[multi-gpu]" cases of test/cuda/nccl_ranks_test.cc: four ranks as threads, each on its
# own emulated GPU, training plans over the real NcclCommunicator against an emulated NCCL in
# which sends wait for their receives and aborts reach the peers; see tools/cuda-emu/README.md).
# Needs a built build/ (scripts/build.sh).
# Usage: scripts/cuda-emu-test.sh [--nccl] ["name,name,..."]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
b=$root/build
mode=kernels
if [ "${1:-}" = --nccl ]; then mode=nccl; shift; fi
out=$b/cuda-emu-$mode
emu=$root/tools/cuda-emu
mkdir -p "$out/gen" "$out/obj"
rm -f "$out"/obj/*.o
libs=(executor/libgp_cpu.a executor/libgp_device_api.a plan/libgp_plan.a model/libgp_model.a
      common/libgp_common.a proto/libgp_proto.a)
if [ $mode = nccl ]; then
  libs=(executor/libgp_runtime.a executor/libgp_transport.a executor/libgp_checkpoint.a
        planner-cli/libgp_planner.a
        cost-model/libgp_sim.a cost-model/libgp_cost_model.a "${libs[@]}")
fi
for lib in "${libs[@]}"; do
  [ -f "$b/$lib" ] || { echo "cuda-emu-test: $b/$lib is missing; run scripts/build.sh" >&2; exit 2; }
done
flags=(-O2 -std=gnu++20 -DGP_HAVE_CUDA=1 -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL
       -I"$emu/include" -I"$root/executor/include" -I"$root/executor/src"
       -I"$root/model/include" -I"$root/plan/include" -I"$root/cost-model/include"
       -I"$root/common/include" -I"$b/common/gen" -I"$b/proto/gen"
       -I"$root/planner-cli/include" -I"$root/test/support")
src=$root/executor/src
for cu in "$src"/cuda/*_kernels.cu; do
  python3 "$emu/convert_launches.py" "$cu" > "$out/gen/$(basename "$cu" .cu)_cu.cc"
done
printf '#define CATCH_CONFIG_MAIN\n#include <catch2/catch.hpp>\n' > "$out/gen/test_main.cc"
# The backend table (backends.cc) with the CUDA backend in it, which brings its NCCL data plane.
sources=("$src/backends/backends.cc" "$src"/cuda/*.cc "$out"/gen/*.cc "$emu/emu_runtime.cc" "$emu/emu_cublaslt.cc" "$emu/emu_cudnn.cc"
         "$emu/emu_streams.cc" "$emu/emu_nccl.cc")
if [ $mode = kernels ]; then
  sources+=("$root/test/cuda/cuda_kernels_test.cc" "$root/test/cuda/device_query_test.cc")
else
  sources+=("$root/test/cuda/nccl_test.cc" "$root/test/cuda/nccl_ranks_test.cc")
fi
pids=()
for s in "${sources[@]}"; do
  o="$out/obj/$(echo "${s#"$root"/}" | tr '/' '_').o"
  g++ "${flags[@]}" -c "$s" -o "$o" &
  pids+=($!)
  if [ ${#pids[@]} -ge "${GP_JOBS:-$(nproc)}" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done
archives=()
for lib in "${libs[@]}"; do archives+=("$b/$lib"); done
g++ -o "$out/emu_test" "$out"/obj/*.o -Wl,--start-group "${archives[@]}" -Wl,--end-group \
  -rdynamic -lopenblas -lspdlog -lfmt -lonnx -lonnx_proto -lprotobuf -lpthread -ldl
if [ $mode = kernels ]; then
  "$out/emu_test" "$@"
elif [ $# -gt 0 ]; then
  "$out/emu_test" "$@"
else
  "$out/emu_test" && "$out/emu_test" "[multi-gpu]"
fi
